//! `/v1/jobs`: submit, list, show, cancel, retry.

use reel_engine::session::destination::Overwrite;
use std::path::PathBuf;

use axum::Extension;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::response::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Caller;
use super::{ApiError, AppState, ErrorBody};
use reel_queue::confine::{ConfineError, confine_paths};
use reel_queue::job::{
    ArchiveJob, IntakeJob, IntakeSelection, JobSpec, JobState, RecallJob, RecallSelection,
    SpecError, VerifyJob, VerifyTarget,
};
use reel_queue::requests::{JobRequestCounts, TapeRequests};
use reel_queue::store::JobFilter;
use reel_queue::token::Scope;
use reel_queue::{JobRecord, Progress};

type ApiResult<T> = std::result::Result<T, ApiError>;

/// `POST /v1/jobs/archive`
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ArchiveRequest {
    /// Absolute paths on the server host: one directory (archived as a tree), or files.
    #[schema(example = json!(["/data/run42"]), min_items = 1)]
    pub paths: Vec<String>,
    /// Storage class (default: `[archive] default_class`).
    #[serde(default)]
    pub class: Option<String>,
    /// Prefix of the object keys.
    #[serde(default)]
    pub key_prefix: String,
    /// Priority, higher first (default 50), -1000 to 1000, capped by the token's.
    #[serde(default)]
    #[schema(minimum = -1000, maximum = 1000)]
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
    #[schema(min_length = 1, pattern = "^/")]
    pub to: String,
    /// What to do with a file that exists at an object's path: `never` (the default: it is
    /// reported, not replaced; an identical file is fine), `if-newer` (replaced when the
    /// archived copy's mtime is later), `always`.
    #[serde(default)]
    #[schema(value_type = Option<String>, example = "never")]
    pub overwrite: Overwrite,
    /// Priority, higher first (default 50), -1000 to 1000, capped by the token's.
    #[serde(default)]
    #[schema(minimum = -1000, maximum = 1000)]
    pub priority: Option<i32>,
}

/// `POST /v1/jobs/verify`: exactly one of `cartridge`, `container`, `sample_every`, `label`.
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
    /// Only this cartridge's label: read it and compare it with the catalogue; a cartridge
    /// whose label differs is marked broken with what differs.
    #[serde(default)]
    pub label: Option<String>,
    /// Priority, higher first (default 10: background work), -1000 to 1000.
    #[serde(default)]
    #[schema(minimum = -1000, maximum = 1000)]
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
    /// Priority, higher first (default 50), -1000 to 1000, capped by the token's.
    #[serde(default)]
    #[schema(minimum = -1000, maximum = 1000)]
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
    /// Id of the API token that submitted it (none: the `reel` command).
    pub token: Option<String>,
    /// Its tape requests (only on `GET /v1/jobs/{id}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<RequestCountsView>,
    /// Where its outstanding requests are and why each group waits (only on
    /// `GET /v1/jobs/{id}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waits: Option<Vec<crate::queue_cmd::WaitView>>,
    /// Its last failed requests with their reasons, at most 20 (only on `GET /v1/jobs/{id}`;
    /// `requests.failed` counts them all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failures: Option<Vec<reel_queue::failed::FailedRequest>>,
}

impl From<JobRecord> for JobView {
    fn from(r: JobRecord) -> JobView {
        JobView {
            spec: compact(serde_json::to_value(&r.spec).unwrap_or(serde_json::Value::Null)),
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
            result: r.result.map(compact),
            error: r.error,
            created_ms: r.created_ms,
            updated_ms: r.updated_ms,
            finished_ms: r.finished_ms,
            token: r.token_id,
            requests: None,
            waits: None,
            failures: None,
        }
    }
}

/// Most items of one list a job view shows (keys of a recall, objects of a result).
pub const VIEW_ITEMS: usize = 20;

/// A job's spec or result as a view shows it: every list longer than [`VIEW_ITEMS`] cut to its
/// first items, with `<field>_total` beside it, so a view stays small whatever the job's size.
fn compact(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            let mut out = serde_json::Map::with_capacity(map.len());
            for (k, v) in map {
                match v {
                    Value::Array(a) if a.len() > VIEW_ITEMS => {
                        out.insert(format!("{k}_total"), Value::from(a.len()));
                        out.insert(
                            k,
                            Value::Array(a.into_iter().take(VIEW_ITEMS).map(compact).collect()),
                        );
                    }
                    other => {
                        out.insert(k, compact(other));
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => {
            // An array inside an array (a tagged enum's payload): cut it the same way.
            let n = a.len();
            let mut items: Vec<Value> = a.into_iter().take(VIEW_ITEMS).map(compact).collect();
            if n > VIEW_ITEMS {
                items.push(Value::String(format!("… {} more", n - VIEW_ITEMS)));
            }
            Value::Array(items)
        }
        other => other,
    }
}

fn confine_error(e: ConfineError) -> ApiError {
    let status = match e {
        ConfineError::Unreachable { .. } => StatusCode::BAD_REQUEST,
        _ => StatusCode::FORBIDDEN,
    };
    let hint = match e {
        ConfineError::Outside { .. } | ConfineError::NoRoots { .. } => {
            "give paths inside the token's roots (`reel token list` shows them to the operator)"
        }
        ConfineError::Own { .. } => {
            "reel's data directory, configuration, plugin and database are never archived or written by a job"
        }
        ConfineError::Unreachable { .. } => {
            "give the real path: confined jobs resolve no symbolic link on the way"
        }
    };
    ApiError::new(status, e.to_string(), hint)
}

/// Lowest and highest priority a request may ask for.
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i32> = -1000..=1000;

/// The job's priority, within what the caller may ask for: a token without `operate` gets at
/// most its maximum, also when it asks for none (the kind's default would be above it).
fn priority_for(caller: &Caller, spec: &JobSpec, asked: Option<i32>) -> ApiResult<Option<i32>> {
    let t = caller.token();
    if let Some(p) = asked
        && !PRIORITY_RANGE.contains(&p)
    {
        return Err(ApiError::bad_request(
            format!("priority {p} is out of range"),
            format!(
                "give a priority from {} to {}",
                PRIORITY_RANGE.start(),
                PRIORITY_RANGE.end()
            ),
        ));
    }
    if t.has(Scope::Operate) {
        return Ok(asked);
    }
    match asked {
        Some(p) if p > t.max_priority => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "priority {p} is above this token's maximum, {}",
                t.max_priority
            ),
            "ask for a lower priority, or have the operator raise the token's --max-priority",
        )),
        Some(p) => Ok(Some(p)),
        None => Ok(Some(spec.default_priority().min(t.max_priority))),
    }
}

/// 403 unless every key (or key prefix) is within the token's key prefixes.
pub(super) fn check_keys<'a>(
    caller: &Caller,
    field: &str,
    keys: impl IntoIterator<Item = &'a str>,
) -> ApiResult<()> {
    let t = caller.token();
    for k in keys {
        if !t.may_use_key(k) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!("`{field}` `{k}` is outside this token's key prefixes"),
                if t.key_prefixes.is_empty() {
                    "this token has no key prefixes: the operator gives them with `reel token create --key-prefix`".to_string()
                } else {
                    format!(
                        "use keys under {}",
                        t.key_prefixes
                            .iter()
                            .map(|p| format!("`{p}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
            ));
        }
    }
    Ok(())
}

/// A spec's excluded choices, worded with the request body's field names.
fn spec_error(e: SpecError) -> ApiError {
    match e {
        SpecError::KeysAndPrefix => ApiError::bad_request(
            "`keys` and `prefix` are both given: give one, not both",
            "`keys` recalls those keys, `prefix` every key under it",
        ),
        SpecError::VerifyTarget => ApiError::bad_request(
            "a verify needs exactly one target",
            "give exactly one of `cartridge`, `container`, `sample_every` or `label`",
        ),
        SpecError::BarcodesAndAllNew => ApiError::bad_request(
            "`barcodes` and `all_new` are both given: give one, not both",
            "`barcodes` takes those cartridges in, `all_new: true` every one the catalogue does not know",
        ),
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

pub(super) async fn submit(
    state: &AppState,
    caller: &Caller,
    spec: JobSpec,
    priority: Option<i32>,
) -> ApiResult<(StatusCode, Json<JobView>)> {
    let priority = priority_for(caller, &spec, priority)?;
    reel_queue::submission::check(&spec, state.config(), state.catalogue()).await?;
    let token = &caller.token().id;
    let rec = state
        .queue()
        .submit_for(spec, priority, Some(token))
        .await?;
    tracing::info!(id = %rec.id, kind = %rec.kind, %token, "job submitted over HTTP");
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
    Extension(caller): Extension<Caller>,
    body: std::result::Result<Json<ArchiveRequest>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<JobView>)> {
    caller.require(Scope::Submit, "archive")?;
    let Json(req) = body?;
    check_keys(&caller, "key_prefix", [req.key_prefix.as_str()])?;
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
    let root = confine_paths(
        "paths",
        &paths,
        &caller.token().roots,
        state.protected(),
        false,
    )
    .map_err(confine_error)?;
    let spec = JobSpec::Archive(ArchiveJob {
        source: reel_queue::submission::archive_source(&paths)
            .map_err(reel_queue::JobsError::from)?,
        key_prefix: req.key_prefix,
        storage_class: req
            .class
            .unwrap_or_else(|| state.config().archive.default_class.clone()),
        confine: Some(root),
    });
    submit(&state, &caller, spec, req.priority).await
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
    Extension(caller): Extension<Caller>,
    body: std::result::Result<Json<RecallRequest>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<JobView>)> {
    caller.require(Scope::Submit, "recall")?;
    let Json(req) = body?;
    check_keys(&caller, "keys", req.keys.iter().map(String::as_str))?;
    check_keys(&caller, "prefix", req.prefix.as_deref())?;
    let to = absolute_path("to", &req.to)?;
    let root = confine_paths(
        "to",
        std::slice::from_ref(&to),
        &caller.token().roots,
        state.protected(),
        true,
    )
    .map_err(confine_error)?;
    let spec = JobSpec::Recall(RecallJob {
        selection: RecallSelection::new(req.keys, req.prefix).map_err(spec_error)?,
        destination: to,
        overwrite: req.overwrite,
        confine: Some(root),
    });
    submit(&state, &caller, spec, req.priority).await
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
    Extension(caller): Extension<Caller>,
    body: std::result::Result<Json<VerifyRequest>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<JobView>)> {
    caller.require(Scope::Submit, "verify")?;
    let Json(req) = body?;
    let target = VerifyTarget::new(req.cartridge, req.container, req.sample_every, req.label)
        .map_err(spec_error)?;
    let spec = JobSpec::Verify(VerifyJob { target });
    submit(&state, &caller, spec, req.priority).await
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
    Extension(caller): Extension<Caller>,
    body: std::result::Result<Json<IntakeRequest>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<JobView>)> {
    caller.require(Scope::Operate, "take cartridges in")?;
    let Json(req) = body?;
    let selection = IntakeSelection::new(req.barcodes, req.all_new).map_err(spec_error)?;
    let spec = JobSpec::Intake(IntakeJob {
        selection,
        pool: req.pool,
    });
    submit(&state, &caller, spec, req.priority).await
}

/// Most jobs one page holds.
const MAX_LIST: u32 = 200;

/// `GET /v1/jobs` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListJobsQuery {
    /// Only jobs in this state: queued, running, done, failed, cancelled.
    pub state: Option<String>,
    /// At most this many (default 50, at most 200).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// The `next_cursor` of the page before: the jobs after it.
    pub cursor: Option<String>,
}

/// A page of jobs, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobPage {
    /// The jobs.
    pub jobs: Vec<JobView>,
    /// Give it as `cursor` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

fn parse_cursor(c: &str) -> Option<(i64, String)> {
    let (ms, id) = c.split_once('.')?;
    let ms = ms.parse::<i64>().ok().filter(|m| *m >= 0)?;
    (!id.is_empty() && id.len() <= 64).then(|| (ms, id.to_string()))
}

/// List jobs, newest first, a page at a time: every job with `read`, only the caller's own
/// with `submit` alone.
#[utoipa::path(
    get,
    path = "/v1/jobs",
    tag = "jobs",
    params(ListJobsQuery),
    responses(
        (status = 200, description = "a page of jobs, newest first", body = JobPage),
        (status = 400, description = "unknown state, bad limit or bad cursor", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "the token has neither read nor submit", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: std::result::Result<Query<ListJobsQuery>, QueryRejection>,
) -> ApiResult<Json<JobPage>> {
    if !caller.token().sees_all_jobs() {
        caller.require(Scope::Submit, "list jobs")?;
    }
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
            format!("give a limit from 1 to {MAX_LIST}, and page with `cursor`"),
        ));
    }
    let after = match q.cursor.as_deref() {
        None | Some("") => None,
        Some(c) => Some(parse_cursor(c).ok_or_else(|| {
            ApiError::bad_request(
                format!("cursor `{c}` is not one this service gave"),
                "give the `next_cursor` of the page before, unchanged",
            )
        })?),
    };
    let filter = JobFilter {
        state: job_state,
        token_id: (!caller.token().sees_all_jobs()).then(|| caller.token().id.clone()),
        after,
    };
    // One more than asked says whether there is a next page.
    let mut jobs = state.queue().store().page(&filter, limit + 1).await?;
    let next_cursor = if jobs.len() > limit as usize {
        jobs.truncate(limit as usize);
        jobs.last().map(|j| format!("{}.{}", j.created_ms, j.id))
    } else {
        None
    };
    Ok(Json(JobPage {
        jobs: jobs.into_iter().map(JobView::from).collect(),
        next_cursor,
    }))
}

/// The job, if the caller may see it; another's job is "no such job" to a `submit` token, so
/// it learns nothing of jobs that are not its own.
async fn visible_job(state: &AppState, caller: &Caller, id: &str) -> ApiResult<JobRecord> {
    if !caller.token().sees_all_jobs() {
        caller.require(Scope::Submit, "see jobs")?;
    }
    let rec = state.queue().store().require(id).await?;
    if !caller.owns_or_oversees(rec.token_id.as_deref()) {
        return Err(reel_queue::error::JobsError::NoSuchJob(id.to_string()).into());
    }
    Ok(rec)
}

/// One job in full, with progress, its tape requests, why its outstanding ones wait, and its
/// last failed requests with their reasons.
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
    Extension(caller): Extension<Caller>,
    id: std::result::Result<UrlPath<String>, PathRejection>,
) -> ApiResult<Json<JobView>> {
    let UrlPath(id) = id?;
    let rec = visible_job(&state, &caller, &id).await?;
    let db = state.queue().store().db();
    let counts = TapeRequests::new(db.clone()).counts(&id).await?;
    let waits = crate::queue_cmd::job_waits(db, state.catalogue(), state.config(), &rec).await?;
    let failures = reel_queue::failed::of_job(db, &id, 20).await?;
    let mut view = JobView::from(rec);
    view.requests = Some(counts.into());
    view.waits = Some(waits);
    view.failures = Some(failures);
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
    Extension(caller): Extension<Caller>,
    id: std::result::Result<UrlPath<String>, PathRejection>,
) -> ApiResult<Json<JobView>> {
    let UrlPath(id) = id?;
    may_act_on(&state, &caller, &id, "cancel").await?;
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
        (status = 409, description = "the job is not failed or cancelled, or it can no longer run as it was submitted (a source gone, a key deleted, a class no longer configured)", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn retry(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    id: std::result::Result<UrlPath<String>, PathRejection>,
) -> ApiResult<Json<JobView>> {
    let UrlPath(id) = id?;
    may_act_on(&state, &caller, &id, "retry").await?;
    reel_queue::submission::check_retry(
        state.queue().store(),
        &id,
        state.config(),
        state.catalogue(),
    )
    .await?;
    let rec = state.queue().retry(&id).await?;
    tracing::info!(%id, "retried over HTTP");
    Ok(Json(rec.into()))
}

/// A job's own submitter (with `submit`) may cancel or retry it; anyone's needs `operate`.
async fn may_act_on(state: &AppState, caller: &Caller, id: &str, what: &str) -> ApiResult<()> {
    if caller.token().has(Scope::Operate) {
        return Ok(());
    }
    if !caller.token().has(Scope::Submit) {
        return caller.require(Scope::Operate, &format!("{what} jobs"));
    }
    let rec = state.queue().store().require(id).await?;
    if rec.token_id.as_deref() == Some(caller.token().id.as_str()) {
        return Ok(());
    }
    if caller.token().has(Scope::Read) {
        // It can see the job, so say why it may not act on it.
        return caller.require(Scope::Operate, &format!("{what} another token's job"));
    }
    Err(reel_queue::error::JobsError::NoSuchJob(id.to_string()).into())
}
