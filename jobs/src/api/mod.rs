//! The HTTP API of `reel serve` (DESIGN.md §7): other services submit archive, recall, verify
//! and intake jobs, follow them, cancel and retry them, and look the catalogue up. JSON in and
//! out; every error is a JSON [`ErrorBody`] with the cause, a hint and the HTTP status.
//!
//! Jobs are built by the same spec builders as the `reel` command ([`crate::cli`]) and queued
//! through the same [`JobQueue::submit`], so a job submitted over HTTP is indistinguishable
//! from one submitted on the command line. Routes (also in `GET /openapi.json`):
//!
//! | route | what |
//! | --- | --- |
//! | `POST /v1/jobs/{archive,recall,verify,intake}` | submit a job (202 + the job) |
//! | `GET /v1/jobs?state=&limit=` | list jobs, newest first |
//! | `GET /v1/jobs/{id}` | one job with progress and tape-request counts |
//! | `POST /v1/jobs/{id}/cancel`, `POST /v1/jobs/{id}/retry` | cancel, retry |
//! | `GET /v1/catalog/objects?prefix=&limit=` | objects by key prefix |
//! | `GET /v1/catalog/objects/{key}` | one object and where its copies are |
//! | `GET /healthz`, `GET /metrics`, `GET /openapi.json` | health, Prometheus, OpenAPI |

mod catalog;
mod error;
mod jobs;
mod metrics;
mod openapi;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use reel_engine::catalogue::Catalogue;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

use crate::config::Config;
use crate::error::{JobsError, Result};
use crate::queue::JobQueue;

pub use error::{ApiError, ErrorBody};
pub use openapi::ApiDoc;

/// What every handler shares: the configuration, the job queue, the catalogue and the metrics.
/// Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    queue: JobQueue,
    catalogue: Catalogue,
    metrics: metrics::Metrics,
}

impl AppState {
    /// State over an open queue and catalogue (both on the configured `[store]`).
    pub fn new(config: Config, queue: JobQueue, catalogue: Catalogue) -> AppState {
        AppState {
            inner: Arc::new(Inner {
                config,
                queue,
                catalogue,
                metrics: metrics::Metrics::new(),
            }),
        }
    }

    fn config(&self) -> &Config {
        &self.inner.config
    }

    fn queue(&self) -> &JobQueue {
        &self.inner.queue
    }

    fn catalogue(&self) -> &Catalogue {
        &self.inner.catalogue
    }

    fn metrics(&self) -> &metrics::Metrics {
        &self.inner.metrics
    }
}

/// The API's routes, with request metrics on every one.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(health))
        .route("/metrics", get(metrics::render))
        .route("/openapi.json", get(openapi::document))
        .route("/v1/jobs", get(jobs::list))
        .route("/v1/jobs/archive", post(jobs::submit_archive))
        .route("/v1/jobs/recall", post(jobs::submit_recall))
        .route("/v1/jobs/verify", post(jobs::submit_verify))
        .route("/v1/jobs/intake", post(jobs::submit_intake))
        .route("/v1/jobs/{id}", get(jobs::show))
        .route("/v1/jobs/{id}/cancel", post(jobs::cancel))
        .route("/v1/jobs/{id}/retry", post(jobs::retry))
        .route("/v1/catalog/objects", get(catalog::list))
        .route("/v1/catalog/objects/{*key}", get(catalog::find))
        .fallback(no_route)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .with_state(state)
}

/// Bind the listening socket (`IP:PORT`; port 0 picks a free one).
pub async fn bind(listen: &str) -> Result<TcpListener> {
    TcpListener::bind(listen)
        .await
        .map_err(|e| JobsError::Config {
            origin: "[serve] listen (or --listen, REEL_SERVE_LISTEN)".into(),
            message: format!(
                "cannot listen on {listen}: {e}; pick a free port or an address of this host"
            ),
        })
}

/// Serve the API on `listener` until `shutdown` is cancelled, then finish the requests in
/// flight and return.
pub async fn run(
    listener: TcpListener,
    state: AppState,
    shutdown: CancellationToken,
) -> Result<()> {
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    tracing::info!(%addr, "HTTP API listening");
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .map_err(|source| JobsError::Io {
            doing: "serving HTTP on",
            path: addr.into(),
            source,
        })?;
    tracing::info!("HTTP API stopped");
    Ok(())
}

/// `GET /healthz`
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: &'static str,
    /// The store backend: `sqlite` or `postgres`.
    pub store: &'static str,
}

/// How long `GET /healthz` waits for its probe write (a locked SQLite file would otherwise
/// hold it for the whole 30 s busy timeout).
pub const HEALTH_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Liveness, and that the store takes writes: one upsert of one row in `reel_health`
/// ([`crate::db::Db::probe_write`]), committed. The job tables and the catalogue live in the
/// `[store] url` database, so a full disk, a held SQLite write lock or a read-only database
/// answers 503 naming the database and the fault, even while reads still work.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "service",
    responses(
        (status = 200, description = "serving, and the store takes a write", body = Health),
        (status = 503, description = "the store cannot be written (full, locked, read-only) or is unreachable; the body names the database and the fault", body = ErrorBody),
    )
)]
async fn health(State(state): State<AppState>) -> std::result::Result<Json<Health>, ApiError> {
    let db = state.queue().store().db();
    db.probe_write(HEALTH_PROBE_TIMEOUT).await?;
    Ok(Json(Health {
        status: "ok",
        store: db.backend(),
    }))
}

async fn no_route(uri: axum::http::Uri) -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no route {}", uri.path()),
        "the routes are listed in GET /openapi.json",
    )
    .into_response()
}
