//! The HTTP API of `reel serve` (docs/ARCHITECTURE.md, "Interfaces"): other services submit archive, recall, verify
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
//! | `PUT /v1/objects/{key}` | upload an object (streamed to the spool, then archived) |
//! | `POST /v1/stage/{key}`, `GET /v1/objects/{key}` | recall an object to the staging area; download it (with `Range`) |
//! | `GET /v1/library` | drives, slots, cartridges and tape queues, for the dashboard |
//! | `GET /v1/cartridges?pool=&state=`, `GET /v1/cartridges/{barcode}` | cartridges: state and why, location, space, mounts |
//! | `POST /v1/cartridges/{barcode}/state` | set a cartridge's state with a reason (`operate`) |
//! | `GET /v1/drives`, `GET /v1/drives/{drive}` | drives, in service or not, and what they do |
//! | `POST /v1/drives/{drive}/down`, `POST /v1/drives/{drive}/up` | take a drive out of service and back (`operate`) |
//! | `GET /healthz`, `GET /metrics`, `GET /openapi.json` | health, Prometheus, OpenAPI |
//! | `GET /`, `GET /dashboard` | the live dashboard ([`dashboard`]), open; its data needs a token |
//!
//! Every route but `/healthz` and `/openapi.json` needs an API token with the right scope
//! ([`auth`], [`reel_queue::token`]); archive sources and recall destinations must lie in the
//! token's roots ([`reel_queue::confine`]); [`limits`] and [`connection`] bound what one client may
//! cost. docs/OPERATIONS.md says how to run it safely.

pub mod auth;
mod cartridges;
mod catalog;
mod connection;
mod dashboard;
mod drives;
mod error;
mod jobs;
mod library;
mod lifecycle;
pub mod limits;
mod metrics;
mod objects;
mod openapi;
mod queues;
mod quota;
mod range;
mod repack;
mod spool;
mod staging;
#[cfg(test)]
mod tests;
mod vault;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use reel_engine::catalogue::Catalogue;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

use reel_queue::JobQueue;
use reel_queue::config::Config;
use reel_queue::error::{JobsError, Result};
use reel_queue::token::TokenStore;

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
    tokens: TokenStore,
    rate: limits::RateLimiter,
    hosts: limits::AllowedHosts,
    protected: Vec<PathBuf>,
    recent: auth::RecentAuth,
    spool: spool::Spool,
    staging: staging::Staging,
}

impl AppState {
    /// State over an open queue and catalogue (both on the configured `[store]`), answering to
    /// the host names of `listen` ([`limits::AllowedHosts`]). `protected` are reel's own paths
    /// (data directory, config file, plugin, database files) that no client path may reach.
    /// Creates the upload spool and the staging area if they are not there.
    pub fn new(
        config: Config,
        queue: JobQueue,
        catalogue: Catalogue,
        listen: Option<SocketAddr>,
        protected: Vec<PathBuf>,
    ) -> Result<AppState> {
        let tokens = TokenStore::new(queue.store().db().clone());
        fn area(doing: &'static str, dir: &str) -> impl FnOnce(std::io::Error) -> JobsError {
            let path = PathBuf::from(dir);
            move |source| JobsError::Io {
                doing,
                path,
                source,
            }
        }
        let spool = spool::Spool::open(
            std::path::Path::new(&config.serve.spool_dir),
            config.serve.spool_bytes,
        )
        .map_err(area(
            "creating the upload spool ([serve] spool_dir)",
            &config.serve.spool_dir,
        ))?;
        let staging = staging::Staging::open(
            std::path::Path::new(&config.serve.staging_dir),
            config.serve.staging_bytes,
            std::time::Duration::from_secs(config.serve.staging_hours.saturating_mul(3600)),
        )
        .map_err(area(
            "creating the staging area ([serve] staging_dir)",
            &config.serve.staging_dir,
        ))?;
        Ok(AppState {
            inner: Arc::new(Inner {
                spool,
                staging,
                rate: limits::RateLimiter::new(
                    config.serve.rate_per_second,
                    config.serve.rate_burst,
                ),
                hosts: limits::AllowedHosts::new(&config.serve, listen),
                config,
                queue,
                catalogue,
                metrics: metrics::Metrics::new(),
                tokens,
                protected,
                recent: auth::RecentAuth::default(),
            }),
        })
    }

    fn spool(&self) -> &spool::Spool {
        &self.inner.spool
    }

    fn staging(&self) -> &staging::Staging {
        &self.inner.staging
    }

    fn tokens(&self) -> &TokenStore {
        &self.inner.tokens
    }

    fn rate(&self) -> &limits::RateLimiter {
        &self.inner.rate
    }

    fn hosts(&self) -> &limits::AllowedHosts {
        &self.inner.hosts
    }

    fn recent(&self) -> &auth::RecentAuth {
        &self.inner.recent
    }

    fn protected(&self) -> &[PathBuf] {
        &self.inner.protected
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
        .route("/v1/jobs/delete", post(lifecycle::submit_delete))
        .route("/v1/catalog/undelete", post(lifecycle::undelete))
        .route("/v1/catalog/recycle", get(lifecycle::recycle))
        .route(
            "/v1/holds",
            get(lifecycle::holds).post(lifecycle::place_hold),
        )
        .route("/v1/holds/{id}/release", post(lifecycle::release_hold))
        .route("/v1/jobs/repack", post(repack::submit_repack))
        .route("/v1/repack/dry-run", post(repack::dry_run))
        .route("/v1/repack/policy", get(repack::policy))
        .route("/v1/jobs/reclaim", post(repack::submit_reclaim))
        .route("/v1/reclaim", get(repack::reclaim_checks))
        .route("/v1/jobs/{id}", get(jobs::show))
        .route("/v1/jobs/{id}/cancel", post(jobs::cancel))
        .route("/v1/jobs/{id}/retry", post(jobs::retry))
        .route("/v1/jobs/{id}/drop-failures", post(queues::drop_failures))
        .route("/v1/failed-requests", get(queues::failed))
        .route("/v1/queues", get(queues::list))
        .route("/v1/catalog/objects", get(catalog::list))
        .route("/v1/catalog/objects/{*key}", get(catalog::find))
        // Bodies of any size, streamed to the spool under [serve] max_object_bytes.
        .route(
            "/v1/objects/{*key}",
            get(objects::get_object)
                .put(objects::put_object)
                .layer(DefaultBodyLimit::disable()),
        )
        .route("/v1/stage/{*key}", post(objects::stage_object))
        .route("/v1/library", get(library::show))
        .route("/v1/cartridges", get(cartridges::list))
        .route("/v1/cartridges/{barcode}", get(cartridges::show))
        .route("/v1/cartridges/{barcode}/state", post(cartridges::set))
        .route("/v1/cleaning-cartridges", get(vault::cleaning))
        .route("/v1/vault", get(vault::vaulted))
        .route("/v1/vault/wanted", get(vault::wanted))
        .route("/v1/vault/export", post(vault::export))
        .route("/v1/vault/import", post(vault::import))
        .route("/v1/vault/imports/{id}", get(vault::import_status))
        .route("/v1/drives", get(drives::list))
        .route("/v1/drives/{drive}", get(drives::show))
        .route("/v1/drives/{drive}/down", post(drives::down))
        .route("/v1/drives/{drive}/up", post(drives::up))
        .route(
            "/v1/drives/{drive}/reset",
            post(drives::reset).get(drives::reset_status),
        )
        .route(
            "/v1/drives/{drive}/clean",
            post(drives::clean).get(drives::clean_status),
        )
        .route("/", get(dashboard::page))
        .route("/dashboard", get(dashboard::page))
        .route("/dashboard/dashboard.js", get(dashboard::script))
        .route("/dashboard/dashboard.css", get(dashboard::style))
        .fallback(no_route)
        // Layers run from the last added to the first: metrics see every request, a foreign
        // Host is refused before anything else is read, and no handler runs unauthenticated.
        .layer(DefaultBodyLimit::max(
            state.config().serve.max_body_bytes as usize,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            limits::request_timeout,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            limits::check_host_and_headers,
        ))
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

/// Refuse to serve on an address other than loopback while no API token exists: every route
/// would answer 401, and the operator most likely meant to create one first.
pub async fn check_exposure(addr: SocketAddr, tokens: &TokenStore) -> Result<()> {
    if addr.ip().is_loopback() || tokens.any_active().await? {
        return Ok(());
    }
    Err(JobsError::Config {
        origin: "[serve] listen (or --listen, REEL_SERVE_LISTEN)".into(),
        message: format!(
            "{addr} is reachable from other hosts and no API token exists; create one first (`reel token create --name NAME --scope read,submit --root DIR --key-prefix PREFIX`), or listen on 127.0.0.1"
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
    let cfg = state.config().serve.clone();
    let janitor = tokio::spawn(objects::janitor(state.clone(), shutdown.clone()));
    connection::serve(listener, router(state), &cfg, shutdown).await;
    janitor.abort();
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
/// ([`reel_queue::db::Db::probe_write`]), committed. The job tables and the catalogue live in the
/// `[store] url` database, so a full disk, a held SQLite write lock or a read-only database
/// answers 503 naming the database and the fault, even while reads still work.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "service",
    responses(
        (status = 200, description = "serving, and the store takes a write", body = Health),
        (status = 503, description = "the store cannot be written (full, locked, read-only) or is unreachable; to a token with read, the body names the database and the fault", body = ErrorBody),
    )
)]
async fn health(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> std::result::Result<Json<Health>, ApiError> {
    let db = state.queue().store().db();
    if let Err(e) = db.probe_write(HEALTH_PROBE_TIMEOUT).await {
        let full = ApiError::from(e);
        // The route is open: the database's path and the fault go to a token with `read`
        // and to the log, not to anyone who asks.
        if auth::may_read_details(&state, &headers).await {
            return Err(full);
        }
        tracing::warn!(error = ?full, "health check: the store cannot take a write");
        return Err(ApiError::new(
            full.status(),
            "the store cannot take a write",
            "the operator finds the cause in reel serve's log; a token with the read scope gets it in this answer",
        ));
    }
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
