//! Deleting and keeping data over HTTP, as `reel delete|undelete|recycle|hold` do it
//! ([`crate::lifecycle_cmd`]).
//!
//! - `POST /v1/jobs/delete` queues a delete job (`submit`, keys within the token's key
//!   prefixes); the job is recorded as asked by the token.
//! - `POST /v1/catalog/undelete` brings objects back from the recycle log (`submit`, within
//!   the token's key prefixes); `GET /v1/catalog/recycle` lists it (`read`).
//! - `GET /v1/holds` lists legal holds (`read`); placing and releasing one needs `admin`: a
//!   hold decides what no client may delete, so a client's own token cannot lift it.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Extension, Path as UrlPath, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Caller;
use super::jobs::{JobView, check_keys, submit};
use super::{ApiError, AppState, ErrorBody};
use crate::lifecycle_cmd::{HoldView, RecycledView, UndeleteView, hold_scope};
use reel_queue::error::JobsError;
use reel_queue::job::{DeleteJob, DeleteSelection, JobSpec};
use reel_queue::token::Scope;

/// `POST /v1/jobs/delete`: `keys` or `prefix`, and a `reason`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteRequest {
    /// Keys to delete (every generation of each; at most 100000, each once).
    #[serde(default)]
    pub keys: Vec<String>,
    /// Delete every key with this prefix instead (never empty).
    pub prefix: Option<String>,
    /// Why: kept in the recycle log with the token that asked.
    pub reason: String,
    /// Priority (higher first).
    pub priority: Option<i32>,
}

/// `POST /v1/catalog/undelete`: `keys` or `prefix`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UndeleteRequest {
    /// Keys to bring back (all of them or none).
    #[serde(default)]
    pub keys: Vec<String>,
    /// Bring back what was deleted under this prefix instead.
    pub prefix: Option<String>,
}

/// `GET /v1/catalog/recycle` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RecycleQuery {
    /// Key prefix (default: every key).
    pub prefix: Option<String>,
    /// At most this many (default 1000, at most 100000).
    #[param(minimum = 1, maximum = 100000)]
    pub limit: Option<u64>,
}

/// The recycle log.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RecycleList {
    /// Deleted object generations, by key and generation.
    pub objects: Vec<RecycledView>,
}

/// `GET /v1/holds` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct HoldsQuery {
    /// Released holds too.
    pub all: Option<bool>,
}

/// `POST /v1/holds`: `key` or `prefix`, and a `reason`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HoldRequest {
    /// The key to hold.
    pub key: Option<String>,
    /// Hold every key with this prefix instead.
    pub prefix: Option<String>,
    /// Why (kept with the token that placed it).
    pub reason: String,
}

/// `POST /v1/holds/{id}/release`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    /// Why (kept with the token that released it).
    pub reason: String,
}

/// The legal holds.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HoldList {
    /// Oldest first.
    pub holds: Vec<HoldView>,
}

type ApiResult<T> = std::result::Result<T, ApiError>;

/// Most entries one recycle page holds.
const MAX_LIST: u64 = 100_000;

fn keys_and_prefix(keys: Vec<String>, prefix: Option<String>) -> ApiResult<DeleteSelection> {
    DeleteSelection::new(keys, prefix).map_err(|_| {
        ApiError::bad_request(
            "`keys` and `prefix` are both given: give one, not both",
            "`keys` names those keys, `prefix` every key under it",
        )
    })
}

/// Delete objects: at once from look-ups and recalls, into the recycle log, where an undelete
/// brings them back during the quarantine. Refused when a legal hold covers what it names.
#[utoipa::path(
    post,
    path = "/v1/jobs/delete",
    tag = "jobs",
    request_body = DeleteRequest,
    responses(
        (status = 202, description = "queued", body = JobView),
        (status = 400, description = "bad request, naming the field: no keys, a bad, repeated or uncatalogued key, an empty prefix or one that matches nothing, an empty reason", body = ErrorBody),
        (status = 403, description = "the token lacks `submit`, or a key is outside its key prefixes", body = ErrorBody),
        (status = 409, description = "a legal hold covers what it names", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn submit_delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: std::result::Result<Json<DeleteRequest>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<JobView>)> {
    caller.require(Scope::Submit, "delete")?;
    let Json(req) = body?;
    let selection = keys_and_prefix(req.keys, req.prefix)?;
    match &selection {
        DeleteSelection::Keys(k) => check_keys(&caller, "keys", k.iter().map(String::as_str))?,
        DeleteSelection::Prefix(p) => check_keys(&caller, "prefix", [p.as_str()])?,
    }
    let spec = JobSpec::Delete(DeleteJob {
        selection,
        reason: req.reason,
        by: caller.who(),
    });
    submit(&state, &caller, spec, req.priority).await
}

/// Bring deleted objects back, if their deletion is younger than the quarantine: keys all or
/// none, a prefix what it can.
#[utoipa::path(
    post,
    path = "/v1/catalog/undelete",
    tag = "catalog",
    request_body = UndeleteRequest,
    responses(
        (status = 200, description = "brought back", body = UndeleteView),
        (status = 400, description = "no keys, keys and a prefix, a key that is not deleted, a prefix with nothing deleted under it", body = ErrorBody),
        (status = 403, description = "the token lacks `submit`, or a key is outside its key prefixes", body = ErrorBody),
        (status = 409, description = "deleted longer ago than the quarantine", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn undelete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: std::result::Result<Json<UndeleteRequest>, JsonRejection>,
) -> ApiResult<Json<UndeleteView>> {
    caller.require(Scope::Submit, "undelete")?;
    let Json(req) = body?;
    let selection = keys_and_prefix(req.keys, req.prefix)?;
    let (keys, prefix) = match selection {
        DeleteSelection::Keys(k) => {
            check_keys(&caller, "keys", k.iter().map(String::as_str))?;
            (k, None)
        }
        DeleteSelection::Prefix(p) => {
            check_keys(&caller, "prefix", [p.as_str()])?;
            (Vec::new(), Some(p))
        }
    };
    let out = crate::lifecycle_cmd::undelete(state.catalogue(), keys, prefix).await?;
    tracing::info!(token = %caller.token().id, keys = out.keys, "undeleted over HTTP");
    Ok(Json(out))
}

/// The recycle log: deleted objects, who deleted them, why, and until when they come back.
#[utoipa::path(
    get,
    path = "/v1/catalog/recycle",
    tag = "catalog",
    params(RecycleQuery),
    responses(
        (status = 200, description = "deleted objects by key", body = RecycleList),
        (status = 400, description = "bad limit or prefix", body = ErrorBody),
        (status = 403, description = "the token lacks `read`", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn recycle(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: std::result::Result<Query<RecycleQuery>, QueryRejection>,
) -> ApiResult<Json<RecycleList>> {
    caller.require(Scope::Read, "read the recycle log")?;
    let Query(q) = query?;
    let limit = q.limit.unwrap_or(1000);
    if limit == 0 || limit > MAX_LIST {
        return Err(ApiError::bad_request(
            format!("limit {limit} is out of range"),
            format!("give a limit from 1 to {MAX_LIST}, and page with a longer prefix"),
        ));
    }
    let objects =
        crate::lifecycle_cmd::recycle(state.catalogue(), &q.prefix.unwrap_or_default(), limit)
            .await?;
    Ok(Json(RecycleList { objects }))
}

/// The legal holds in force (with `all=true`, released ones too).
#[utoipa::path(
    get,
    path = "/v1/holds",
    tag = "catalog",
    params(HoldsQuery),
    responses(
        (status = 200, description = "the holds", body = HoldList),
        (status = 400, description = "a bad query string (`all` is `true` or `false`)", body = ErrorBody),
        (status = 403, description = "the token lacks `read`", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn holds(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: std::result::Result<Query<HoldsQuery>, QueryRejection>,
) -> ApiResult<Json<HoldList>> {
    caller.require(Scope::Read, "list legal holds")?;
    let Query(q) = query?;
    let holds = state
        .catalogue()
        .holds(q.all.unwrap_or(false))
        .await
        .map_err(JobsError::from)?;
    Ok(Json(HoldList {
        holds: holds.into_iter().map(HoldView::from).collect(),
    }))
}

/// Place a legal hold on a key or a prefix: nothing it covers is deleted until it is released.
#[utoipa::path(
    post,
    path = "/v1/holds",
    tag = "catalog",
    request_body = HoldRequest,
    responses(
        (status = 201, description = "placed", body = HoldView),
        (status = 400, description = "neither or both of a key and a prefix, a bad key, an empty prefix or reason", body = ErrorBody),
        (status = 403, description = "the token lacks `admin`", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn place_hold(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: std::result::Result<Json<HoldRequest>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<HoldView>)> {
    caller.require(Scope::Admin, "place a legal hold")?;
    let Json(req) = body?;
    let scope = hold_scope(req.key, req.prefix)?;
    let h = state
        .catalogue()
        .place_hold(&scope, &caller.who(), &req.reason)
        .await
        .map_err(JobsError::from)?;
    tracing::info!(hold = h.id, token = %caller.token().id, "legal hold placed over HTTP");
    Ok((StatusCode::CREATED, Json(h.into())))
}

/// Release a legal hold.
#[utoipa::path(
    post,
    path = "/v1/holds/{id}/release",
    tag = "catalog",
    params(("id" = i64, Path, description = "the hold's number")),
    request_body = ReleaseRequest,
    responses(
        (status = 200, description = "released", body = HoldView),
        (status = 400, description = "a hold released already, an empty reason", body = ErrorBody),
        (status = 404, description = "no such hold", body = ErrorBody),
        (status = 403, description = "the token lacks `admin`", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn release_hold(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    id: std::result::Result<UrlPath<i64>, PathRejection>,
    body: std::result::Result<Json<ReleaseRequest>, JsonRejection>,
) -> ApiResult<Json<HoldView>> {
    caller.require(Scope::Admin, "release a legal hold")?;
    let UrlPath(id) = id?;
    let Json(req) = body?;
    let h = state
        .catalogue()
        .release_hold(id, &caller.who(), &req.reason)
        .await
        .map_err(JobsError::from)?;
    tracing::info!(hold = h.id, token = %caller.token().id, "legal hold released over HTTP");
    Ok(Json(h.into()))
}
