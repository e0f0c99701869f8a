//! `/v1/jobs`: submit, list, show, cancel, retry.

use reel_engine::session::destination::Overwrite;
use std::path::{Path, PathBuf};

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::response::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{ApiError, AppState, ErrorBody};
use crate::cli::{archive_spec, intake_spec, recall_spec, verify_spec};
use crate::job::{JobSpec, JobState};
use crate::queue::requests::{JobRequestCounts, TapeRequests};
use crate::queue::{JobRecord, Progress};

type ApiResult<T> = std::result::Result<T, ApiError>;

/// `POST /v1/jobs/archive`
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ArchiveRequest {
    /// Absolute paths on the server host: one directory (archived as a tree), or files.
    #[schema(example = json!(["/data/run42"]))]
    pub paths: Vec<String>,
    /// Storage class (default: `[archive] default_class`).
    #[serde(default)]
    pub class: Option<String>,
    /// Prefix of the object keys.
    #[serde(default)]
    pub key_prefix: String,
    /// Priority, higher first (default 50).
    #[serde(default)]
    pub priority: Option<i32>,
}

/// `POST /v1/jobs/recall`: `keys` or `prefix`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecallRequest {
    /// Keys to recall.
    #[serde(default)]
    pub keys: Vec<String>,
    /// Recall every key with this prefix instead.
    #[serde(default)]
    pub prefix: Option<String>,
    /// Absolute destination directory on the worker hosts (keys become relative paths).
    pub to: String,
    /// What to do with a file that exists at an object's path: `never` (the default: it is
    /// reported, not replaced; an identical file is fine), `if-newer` (replaced when the
    /// archived copy's mtime is later), `always`.
    #[serde(default)]
    #[schema(value_type = Option<String>, example = "never")]
    pub overwrite: Overwrite,
    /// Priority, higher first (default 50).
    #[serde(default)]
    pub priority: Option<i32>,
}

/// `POST /v1/jobs/verify`: exactly one of `cartridge`, `container`, `sample_every`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifyRequest {
    /// Every container of this cartridge.
    #[serde(default)]
    pub cartridge: Option<String>,
    /// One container (catalogue id).
    #[serde(default)]
    pub container: Option<i64>,
    /// A sample: one container in N over the library.
    #[serde(default)]
    pub sample_every: Option<u64>,
    /// Priority, higher first (default 10: background work).
    #[serde(default)]
    pub priority: Option<i32>,
}

/// `POST /v1/jobs/intake`: `barcodes` or `all_new`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IntakeRequest {
    /// Barcodes to take in.
    #[serde(default)]
    pub barcodes: Vec<String>,
    /// Every cartridge the library has that the catalogue does not know.
    #[serde(default)]
    pub all_new: bool,
    /// The pool the cartridges join (default: the default storage class's first pool).
    #[serde(default)]
    pub pool: Option<String>,
    /// Priority, higher first (default 50).
    #[serde(default)]
    pub priority: Option<i32>,
}

/// Objects and bytes done out of the totals known so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub struct ProgressView {
    /// Objects finished.
    pub objects_done: u64,
    /// Objects in the job.
    pub objects_total: u64,
    /// Bytes finished.
    pub bytes_done: u64,
    /// Bytes in the job.
    pub bytes_total: u64,
}

impl From<Progress> for ProgressView {
    fn from(p: Progress) -> ProgressView {
        ProgressView {
            objects_done: p.objects_done,
            objects_total: p.objects_total,
            bytes_done: p.bytes_done,
            bytes_total: p.bytes_total,
        }
    }
}

/// The tape requests of a job (what the drives do for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub struct RequestCountsView {
    /// All requests.
    pub total: u64,
    /// Done.
    pub done: u64,
    /// Failed.
    pub failed: u64,
    /// Bytes of all.
    pub bytes_total: u64,
    /// Bytes done.
    pub bytes_done: u64,
}

impl From<JobRequestCounts> for RequestCountsView {
    fn from(c: JobRequestCounts) -> RequestCountsView {
        RequestCountsView {
            total: c.total,
            done: c.done,
            failed: c.failed,
            bytes_total: c.bytes_total,
            bytes_done: c.bytes_done,
        }
    }
}

/// A job.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct JobView {
    /// Job id (UUID).
    pub id: String,
    /// `archive`, `recall`, `verify`, `intake` or `rebuild`.
    #[schema(example = "archive")]
    pub kind: String,
    /// What was asked: the job spec as queued, tagged by `kind`.
    #[schema(value_type = Object)]
    pub spec: serde_json::Value,
    /// `queued`, `running`, `done`, `failed` or `cancelled`.
    #[schema(example = "queued")]
    pub state: String,
    /// Higher first.
    pub priority: i32,
    /// Attempts started so far.
    pub attempts: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// Not started before this time (unix ms): the retry backoff.
    pub not_before_ms: i64,
    /// Worker running it, or that ran it last.
    pub worker: Option<String>,
    /// Progress.
    pub progress: ProgressView,
    /// A cancel was requested (a running job stops at its next record boundary).
    pub cancel_requested: bool,
    /// Result of a finished job.
    #[schema(value_type = Option<Object>)]
    pub result: Option<serde_json::Value>,
    /// Last error.
    pub error: Option<String>,
    /// Created (unix ms).
    pub created_ms: i64,
    /// Last change (unix ms).
    pub updated_ms: i64,
    /// Reached a final state (unix ms).
    pub finished_ms: Option<i64>,
    /// Its tape requests (only on `GET /v1/jobs/{id}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<RequestCountsView>,
}

impl From<JobRecord> for JobView {
    fn from(r: JobRecord) -> JobView {
        JobView {
            spec: serde_json::to_value(&r.spec).unwrap_or(serde_json::Value::Null),
            kind: r.kind.as_str().into(),
            state: r.state.as_str().into(),
            id: r.id,
            priority: r.priority,
            attempts: r.attempts,
            max_attempts: r.max_attempts,
            not_before_ms: r.not_before_ms,
            worker: r.worker,
            progress: r.progress.into(),
            cancel_requested: r.cancel_requested,
            result: r.result,
            error: r.error,
            created_ms: r.created_ms,
            updated_ms: r.updated_ms,
            finished_ms: r.finished_ms,
            requests: None,
        }
    }
}

/// Paths over HTTP are on the server host and must be absolute: the server's working directory
/// means nothing to the caller.
fn absolute_path(field: &str, p: &str) -> ApiResult<PathBuf> {
    let path = PathBuf::from(p);
    if p.is_empty() || path.is_relative() {
        return Err(ApiError::bad_request(
            format!("`{field}` path `{p}` is not absolute"),
            "give absolute paths as seen on the server host",
        ));
    }
    Ok(path)
}

async fn submit(
    state: &AppState,
    spec: JobSpec,
    priority: Option<i32>,
) -> ApiResult<(StatusCode, Json<JobView>)> {
    crate::submission::check(&spec, state.config(), state.catalogue()).await?;
    let rec = state.queue().submit(spec, priority).await?;
    tracing::info!(id = %rec.id, kind = %rec.kind, "job submitted over HTTP");
    Ok((StatusCode::ACCEPTED, Json(rec.into())))
}

/// Archive files or a directory tree to tape.
#[utoipa::path(
    post,
    path = "/v1/jobs/archive",
    tag = "jobs",
    request_body = ArchiveRequest,
    responses(
        (status = 202, description = "queued", body = JobView),
        (status = 400, description = "bad request, naming the field: a path missing, relative, listed twice, a symlink or special file; two paths with one key; a bad key or key_prefix; an unknown class", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn submit_archive(
    State(state): State<AppState>,
    body: std::result::Result<Json<ArchiveRequest>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<JobView>)> {
    let Json(req) = body?;
    if req.paths.is_empty() {
        return Err(ApiError::bad_request(
            "`paths` is empty",
            "give one directory, or one or more files",
        ));
    }
    let paths = req
        .paths
        .iter()
        .map(|p| absolute_path("paths", p))
        .collect::<ApiResult<Vec<_>>>()?;
    let spec = archive_spec(state.config(), &paths, req.class, req.key_prefix)?;
    submit(&state, spec, req.priority).await
}

/// Recall objects from tape into a directory.
#[utoipa::path(
    post,
    path = "/v1/jobs/recall",
    tag = "jobs",
    request_body = RecallRequest,
    responses(
        (status = 202, description = "queued", body = JobView),
        (status = 400, description = "bad request, naming the field: no keys, a bad or repeated key, keys not in the catalogue, a prefix that matches nothing, a relative destination", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn submit_recall(
    State(state): State<AppState>,
    body: std::result::Result<Json<RecallRequest>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<JobView>)> {
    let Json(req) = body?;
    let to = absolute_path("to", &req.to)?;
    let spec = recall_spec(req.keys, req.prefix, Path::new(&to), req.overwrite)?;
    submit(&state, spec, req.priority).await
}

/// Read back and check what is on tape.
#[utoipa::path(
    post,
    path = "/v1/jobs/verify",
    tag = "jobs",
    request_body = VerifyRequest,
    responses(
        (status = 202, description = "queued", body = JobView),
        (status = 400, description = "bad request, naming the field: a container or cartridge the catalogue does not know", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn submit_verify(
    State(state): State<AppState>,
    body: std::result::Result<Json<VerifyRequest>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<JobView>)> {
    let Json(req) = body?;
    let spec = verify_spec(req.cartridge, req.container, req.sample_every)?;
    submit(&state, spec, req.priority).await
}

/// Take new cartridges into the library's catalogue.
#[utoipa::path(
    post,
    path = "/v1/jobs/intake",
    tag = "jobs",
    request_body = IntakeRequest,
    responses(
        (status = 202, description = "queued", body = JobView),
        (status = 400, description = "bad request, naming the field: empty or repeated barcodes, an empty pool name", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn submit_intake(
    State(state): State<AppState>,
    body: std::result::Result<Json<IntakeRequest>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<JobView>)> {
    let Json(req) = body?;
    let spec = intake_spec(req.barcodes, req.all_new, req.pool)?;
    submit(&state, spec, req.priority).await
}

/// Most jobs one list returns.
const MAX_LIST: u32 = 1000;

/// `GET /v1/jobs` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListJobsQuery {
    /// Only jobs in this state: queued, running, done, failed, cancelled.
    pub state: Option<String>,
    /// At most this many (default 50, at most 1000).
    pub limit: Option<u32>,
}

/// List jobs, newest first.
#[utoipa::path(
    get,
    path = "/v1/jobs",
    tag = "jobs",
    params(ListJobsQuery),
    responses(
        (status = 200, description = "jobs, newest first", body = Vec<JobView>),
        (status = 400, description = "unknown state or bad limit", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn list(
    State(state): State<AppState>,
    query: std::result::Result<Query<ListJobsQuery>, QueryRejection>,
) -> ApiResult<Json<Vec<JobView>>> {
    let Query(q) = query?;
    let job_state = match q.state.as_deref() {
        None | Some("") => None,
        Some(s) => Some(s.parse::<JobState>().map_err(|e| {
            ApiError::bad_request(
                e,
                "state is one of queued, running, done, failed, cancelled",
            )
        })?),
    };
    let limit = q.limit.unwrap_or(50);
    if limit == 0 || limit > MAX_LIST {
        return Err(ApiError::bad_request(
            format!("limit {limit} is out of range"),
            format!("give a limit from 1 to {MAX_LIST}"),
        ));
    }
    let jobs = state.queue().store().list(job_state, limit).await?;
    Ok(Json(jobs.into_iter().map(JobView::from).collect()))
}

/// One job in full, with progress and its tape requests.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    params(("id" = String, Path, description = "job id")),
    responses(
        (status = 200, description = "the job", body = JobView),
        (status = 404, description = "no such job", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn show(
    State(state): State<AppState>,
    id: std::result::Result<UrlPath<String>, PathRejection>,
) -> ApiResult<Json<JobView>> {
    let UrlPath(id) = id?;
    let rec = state.queue().store().require(&id).await?;
    let counts = TapeRequests::new(state.queue().store().db().clone())
        .counts(&id)
        .await?;
    let mut view = JobView::from(rec);
    view.requests = Some(counts.into());
    Ok(Json(view))
}

/// Cancel a job: a queued one at once, a running one at its next record boundary.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/cancel",
    tag = "jobs",
    params(("id" = String, Path, description = "job id")),
    responses(
        (status = 200, description = "cancelled, or cancel requested (see `cancel_requested`)", body = JobView),
        (status = 404, description = "no such job", body = ErrorBody),
        (status = 409, description = "the job already finished", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn cancel(
    State(state): State<AppState>,
    id: std::result::Result<UrlPath<String>, PathRejection>,
) -> ApiResult<Json<JobView>> {
    let UrlPath(id) = id?;
    let rec = state.queue().cancel(&id).await?;
    tracing::info!(%id, state = %rec.state, "cancel requested over HTTP");
    Ok(Json(rec.into()))
}

/// Run a failed or cancelled job again, with fresh attempts.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/retry",
    tag = "jobs",
    params(("id" = String, Path, description = "job id")),
    responses(
        (status = 200, description = "queued again", body = JobView),
        (status = 404, description = "no such job", body = ErrorBody),
        (status = 409, description = "the job is not failed or cancelled", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn retry(
    State(state): State<AppState>,
    id: std::result::Result<UrlPath<String>, PathRejection>,
) -> ApiResult<Json<JobView>> {
    let UrlPath(id) = id?;
    let rec = state.queue().retry(&id).await?;
    tracing::info!(%id, "retried over HTTP");
    Ok(Json(rec.into()))
}
