//! `GET /v1/queues`: the tape queues and the rule holding each ([`crate::queue_cmd`], as `reel
//! queue ls`); `GET /v1/failed-requests` and `POST /v1/jobs/{id}/drop-failures`: failed
//! requests to review and dropping a failed job's from the list ([`reel_queue::failed`], as
//! `reel jobs failed`). Reading needs `read`; dropping needs `operate`.

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Extension, Path as UrlPath, Query, State};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Caller;
use super::{ApiError, AppState, ErrorBody};
use crate::queue_cmd::{QueueView, queues};
use reel_queue::failed::{self, FailedRequest};
use reel_queue::token::Scope;

/// Every tape queue.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct QueueList {
    /// Highest priority, then oldest, first.
    pub queues: Vec<QueueView>,
}

/// The tape queues: per cartridge (reads) and pool (writes), files, bytes, oldest age,
/// priority, and the rule that holds each or the drives serving it.
#[utoipa::path(
    get,
    path = "/v1/queues",
    tag = "library",
    responses(
        (status = 200, description = "the queues", body = QueueList),
        (status = 403, description = "the token lacks `read`", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<QueueList>, ApiError> {
    caller.require(Scope::Read, "see the queues")?;
    let queues = queues(
        state.queue().store().db(),
        state.catalogue(),
        state.config(),
    )
    .await?;
    Ok(Json(QueueList { queues }))
}

/// Most failed requests one answer lists.
const MAX_FAILED: u32 = 1000;

/// `GET /v1/failed-requests` parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct FailedQuery {
    /// Only this job's: its id, or its first characters (at least 4) as the CLI shows them.
    pub job: Option<String>,
    /// At most this many (1 to 1000, default 50).
    pub limit: Option<u32>,
}

/// Failed requests to review.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FailedList {
    /// Newest first.
    pub failed: Vec<FailedRequest>,
}

/// The failed requests of jobs that were not cancelled and whose failures no operator
/// dropped, newest first, with their reasons.
#[utoipa::path(
    get,
    path = "/v1/failed-requests",
    tag = "jobs",
    params(FailedQuery),
    responses(
        (status = 200, description = "failed requests, newest first", body = FailedList),
        (status = 400, description = "bad limit, or a job id too short or ambiguous", body = ErrorBody),
        (status = 403, description = "the token lacks `read`", body = ErrorBody),
        (status = 404, description = "no job has that id", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn failed(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<FailedQuery>, QueryRejection>,
) -> Result<Json<FailedList>, ApiError> {
    caller.require(Scope::Read, "see failed requests")?;
    let Query(q) = query?;
    let limit = q.limit.unwrap_or(50);
    if limit == 0 || limit > MAX_FAILED {
        return Err(ApiError::bad_request(
            format!("limit {limit} is out of range"),
            format!("give a limit from 1 to {MAX_FAILED}"),
        ));
    }
    // A job named as the CLI shows it (its first characters) or whole; unknown: 404.
    let job = match q.job.as_deref().filter(|j| !j.is_empty()) {
        Some(j) => Some(state.queue().store().resolve(j).await?),
        None => None,
    };
    let failed = failed::list(state.queue().store().db(), job.as_deref(), limit).await?;
    Ok(Json(FailedList { failed }))
}

/// What dropping did.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Dropped {
    /// The job.
    pub job: String,
    /// Its failed requests, now out of the list (they stay with the job).
    pub failed: u64,
}

/// Drop a failed job's failures from the list to review; they stay with the job.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/drop-failures",
    tag = "jobs",
    params(("id" = String, Path, description = "job id")),
    responses(
        (status = 200, description = "dropped", body = Dropped),
        (status = 403, description = "the token lacks `operate`", body = ErrorBody),
        (status = 404, description = "no such job", body = ErrorBody),
        (status = 409, description = "the job has not failed", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn drop_failures(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    id: Result<UrlPath<String>, PathRejection>,
) -> Result<Json<Dropped>, ApiError> {
    caller.require(Scope::Operate, "drop failed requests")?;
    let UrlPath(id) = id?;
    let failed = failed::drop_failures(state.queue().store().db(), &id).await?;
    tracing::info!(job = %id, failed, token = %caller.token().id, "failures dropped over HTTP");
    Ok(Json(Dropped { job: id, failed }))
}
