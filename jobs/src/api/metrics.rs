//! Prometheus metrics at `GET /metrics`, through the `metrics` facade and its Prometheus
//! exporter. The recorder is this server's own (not the process-global one), so several
//! servers in one process (the tests) keep separate counts.
//!
//! | metric | type | labels |
//! | --- | --- | --- |
//! | `reel_jobs` | gauge | `kind`, `state` |
//! | `reel_tape_queue_bytes`, `reel_tape_queue_files`, `reel_tape_queue_oldest_seconds` | gauge | `mode` (read/write), `target` (barcode or pool), `pool` |
//! | `reel_tape_queue_held` | gauge | `mode`, `target`, `pool`, `rule`: 1 for the rule holding the queue now ([`crate::queue_cmd`]), 0 for the rules that held it before |
//! | `reel_store_up` | gauge | none: 1 when the last scrape could read the store |
//! | `reel_http_requests_total` | counter | `route`, `method`, `status` |
//! | `reel_http_request_duration_seconds` | summary | `route`, `method` |
//!
//! The job and tape-queue gauges are read from the store at each scrape (one `GROUP BY` over
//! the jobs, the per-target queue summary the scheduler uses, and what `reel queue ls` reads to
//! say why each queue waits), so every `reel serve` of a fleet reports the same figures.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Instant;

use axum::Extension;
use axum::extract::{MatchedPath, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

use super::AppState;
use super::auth::Caller;
use reel_queue::error::Result;
use reel_queue::job::{JobKind, JobState};
use reel_queue::token::Scope;

const STATES: [JobState; 5] = [
    JobState::Queued,
    JobState::Running,
    JobState::Done,
    JobState::Failed,
    JobState::Cancelled,
];

/// Labels of one tape queue: mode, target, pool.
type QueueLabels = (String, String, String);

/// Labels of one tape queue's hold: mode, target, pool, rule.
type HoldLabels = (String, String, String, String);

/// The server's recorder and what it has reported.
pub(super) struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    /// Tape queues reported at the last scrape, so that a queue that emptied reads 0.
    queues: Mutex<BTreeSet<QueueLabels>>,
    /// Holds reported at the last scrape, so that a rule that stopped holding reads 0.
    holds: Mutex<BTreeSet<HoldLabels>>,
}

impl Metrics {
    pub(super) fn new() -> Metrics {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            metrics::describe_gauge!("reel_jobs", "Jobs by kind and state");
            metrics::describe_gauge!(
                "reel_tape_queue_bytes",
                metrics::Unit::Bytes,
                "Bytes of queued tape requests per cartridge (reads) or pool (writes)"
            );
            metrics::describe_gauge!(
                "reel_tape_queue_files",
                "Queued tape requests per cartridge (reads) or pool (writes)"
            );
            metrics::describe_gauge!(
                "reel_tape_queue_oldest_seconds",
                metrics::Unit::Seconds,
                "Age of the oldest queued tape request per cartridge (reads) or pool (writes)"
            );
            metrics::describe_gauge!(
                "reel_tape_queue_held",
                "1 for the rule holding a tape queue now (served, due, below_threshold, drive_cap, drives_busy, cartridge_in_drive, cartridge_out, no_writable_cartridge, no_drive_up, no_worker)"
            );
            metrics::describe_gauge!(
                "reel_serve_area_bytes",
                metrics::Unit::Bytes,
                "Bytes taken in the upload spool and the staging area (area=spool|staging)"
            );
            metrics::describe_gauge!(
                "reel_serve_area_limit_bytes",
                metrics::Unit::Bytes,
                "The budgets of the upload spool and the staging area ([serve] spool_bytes, staging_bytes)"
            );
            metrics::describe_gauge!(
                "reel_store_up",
                "1 when the last scrape could read the job store, else 0"
            );
            metrics::describe_counter!(
                "reel_http_requests_total",
                "HTTP requests by route, method and status"
            );
            metrics::describe_histogram!(
                "reel_http_request_duration_seconds",
                metrics::Unit::Seconds,
                "HTTP request duration by route and method"
            );
        });
        Metrics {
            recorder,
            handle,
            queues: Mutex::new(BTreeSet::new()),
            holds: Mutex::new(BTreeSet::new()),
        }
    }

    fn with<T>(&self, f: impl FnOnce() -> T) -> T {
        metrics::with_local_recorder(&self.recorder, f)
    }

    fn http(&self, route: String, method: String, status: u16, seconds: f64) {
        self.with(|| {
            metrics::counter!("reel_http_requests_total", "route" => route.clone(), "method" => method.clone(), "status" => status.to_string())
                .increment(1);
            metrics::histogram!("reel_http_request_duration_seconds", "route" => route, "method" => method)
                .record(seconds);
        });
    }

    /// Read the job and queue figures from the store into the gauges.
    async fn refresh(&self, state: &AppState) -> Result<()> {
        let counts = job_counts(state).await?;
        let summaries = crate::queue_cmd::queues(
            state.queue().store().db(),
            state.catalogue(),
            state.config(),
        )
        .await?;
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let mut holds = self.holds.lock().unwrap_or_else(|p| p.into_inner());
        let mut now = BTreeSet::new();
        let mut held = BTreeSet::new();
        self.with(|| {
            for (area, q) in [
                ("spool", state.spool().quota()),
                ("staging", state.staging().quota()),
            ] {
                metrics::gauge!("reel_serve_area_bytes", "area" => area).set(q.used() as f64);
                metrics::gauge!("reel_serve_area_limit_bytes", "area" => area)
                    .set(q.limit() as f64);
            }
            for kind in JobKind::ALL {
                for st in STATES {
                    let n = counts
                        .iter()
                        .find(|(k, s, _)| k == kind.as_str() && s == st.as_str())
                        .map_or(0, |(_, _, n)| *n);
                    metrics::gauge!("reel_jobs", "kind" => kind.as_str(), "state" => st.as_str())
                        .set(n as f64);
                }
            }
            for q in &summaries {
                let target = match (&q.cartridge, &q.pool) {
                    (Some(barcode), _) => barcode.clone(),
                    (None, pool) => pool.clone().unwrap_or_default(),
                };
                let labels = (q.mode.clone(), target, q.pool.clone().unwrap_or_default());
                let l = [
                    ("mode", labels.0.clone()),
                    ("target", labels.1.clone()),
                    ("pool", labels.2.clone()),
                ];
                metrics::gauge!("reel_tape_queue_bytes", &l).set(q.bytes as f64);
                metrics::gauge!("reel_tape_queue_files", &l).set(q.files as f64);
                metrics::gauge!("reel_tape_queue_oldest_seconds", &l)
                    .set(q.oldest_age_ms as f64 / 1000.0);
                let h = (
                    labels.0.clone(),
                    labels.1.clone(),
                    labels.2.clone(),
                    q.rule.clone(),
                );
                metrics::gauge!("reel_tape_queue_held", &hold_labels(&h)).set(1.0);
                held.insert(h);
                now.insert(labels);
            }
            for gone in holds.difference(&held) {
                metrics::gauge!("reel_tape_queue_held", &hold_labels(gone)).set(0.0);
            }
            for gone in queues.difference(&now) {
                let l = [
                    ("mode", gone.0.clone()),
                    ("target", gone.1.clone()),
                    ("pool", gone.2.clone()),
                ];
                metrics::gauge!("reel_tape_queue_bytes", &l).set(0.0);
                metrics::gauge!("reel_tape_queue_files", &l).set(0.0);
                metrics::gauge!("reel_tape_queue_oldest_seconds", &l).set(0.0);
            }
        });
        *queues = now;
        *holds = held;
        Ok(())
    }
}

fn hold_labels(h: &HoldLabels) -> [(&'static str, String); 4] {
    [
        ("mode", h.0.clone()),
        ("target", h.1.clone()),
        ("pool", h.2.clone()),
        ("rule", h.3.clone()),
    ]
}

/// `(kind, state, count)` over all jobs.
async fn job_counts(state: &AppState) -> Result<Vec<(String, String, i64)>> {
    state.queue().store().counts().await
}

/// Count every request by route (the pattern, not the path), method and status.
pub(super) async fn track(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |m| m.as_str().to_string());
    // Only the methods the API knows become a label; any other string a client sends would
    // be a new series for good (unbounded memory).
    let method = match req.method().as_str() {
        m @ ("GET" | "POST" | "PUT" | "DELETE" | "HEAD" | "OPTIONS" | "PATCH") => m.to_string(),
        _ => "other".to_string(),
    };
    let t0 = Instant::now();
    let resp = next.run(req).await;
    state.metrics().http(
        route,
        method,
        resp.status().as_u16(),
        t0.elapsed().as_secs_f64(),
    );
    resp
}

/// Prometheus metrics (text exposition format).
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "service",
    responses(
        (status = 200, description = "Prometheus text format; reel_store_up is 0 when the store could not be read", content_type = "text/plain"),
        (status = 401, description = "no valid token", body = super::ErrorBody),
        (status = 403, description = "the token lacks the read scope", body = super::ErrorBody),
    )
)]
pub(super) async fn render(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Response {
    if let Err(e) = caller.require(Scope::Read, "read the metrics") {
        return e.into_response();
    }
    let up = match state.metrics().refresh(&state).await {
        Ok(()) => 1.0,
        Err(e) => {
            tracing::warn!(error = %e, "metrics: cannot read the store; job and queue gauges are stale");
            0.0
        }
    };
    let m = state.metrics();
    m.with(|| metrics::gauge!("reel_store_up").set(up));
    m.handle.run_upkeep();
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        m.handle.render(),
    )
        .into_response()
}
