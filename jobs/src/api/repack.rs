//! Repack and reclaim over HTTP, as `reel repack` and `reel reclaim` do them
//! ([`crate::repack_cmd`]). Both move or erase data no single client owns, so they need
//! `operate`.
//!
//! - `POST /v1/jobs/repack` queues a repack job for the cartridges a selection names;
//!   `POST /v1/repack/dry-run` says which those are, with what they hold.
//! - `GET /v1/repack/policy` says what the pools' policies would start now.
//! - `POST /v1/jobs/reclaim` queues a reclaim job; `GET /v1/reclaim` says what may be
//!   reclaimed and what keeps the others.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Extension, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Caller;
use super::jobs::{JobView, submit};
use super::{ApiError, AppState, ErrorBody};
use reel_queue::job::RepackSelection;
use reel_queue::repack_select::{Candidate, PolicyPlan};
use reel_queue::token::Scope;

type ApiResult<T> = std::result::Result<T, ApiError>;

/// `POST /v1/jobs/repack` and `POST /v1/repack/dry-run`: which cartridges (every condition
/// given must hold; at least one), and where their objects go.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RepackRequest {
    /// These barcodes.
    #[serde(default)]
    pub barcodes: Vec<String>,
    /// Cartridges of this pool.
    pub pool: Option<String>,
    /// Cartridges in this state: full, active, disabled or broken.
    pub state: Option<String>,
    /// Cartridges of this media generation (LTO-5 … LTO-10).
    pub media: Option<String>,
    /// Cartridges whose live bytes are below this fraction of their written bytes.
    pub live_below: Option<f64>,
    /// The pool the copies go to (default: each cartridge's own).
    pub to_pool: Option<String>,
    /// Only add a copy in `to_pool` where an object has none.
    #[serde(default)]
    pub add_copies: bool,
    /// Priority (higher first; default 5, below user work).
    pub priority: Option<i32>,
}

impl RepackRequest {
    fn selection(&self) -> RepackSelection {
        RepackSelection {
            barcodes: self.barcodes.clone(),
            pool: self.pool.clone(),
            state: self.state.clone(),
            media: self.media.clone(),
            live_below: self.live_below,
        }
    }

    fn check(&self) -> ApiResult<()> {
        if self.add_copies && self.to_pool.is_none() {
            return Err(ApiError::bad_request(
                "`add_copies` needs `to_pool`",
                "name the pool the missing copies go to",
            ));
        }
        Ok(())
    }
}

/// The cartridges a repack would empty.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RepackPlanView {
    /// In the order the job repacks them.
    pub cartridges: Vec<Candidate>,
}

/// `POST /v1/jobs/reclaim`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReclaimRequest {
    /// The cartridges to reclaim (each once, at most 1000).
    pub barcodes: Vec<String>,
    /// Priority (higher first).
    pub priority: Option<i32>,
}

/// `GET /v1/reclaim` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ReclaimQuery {
    /// One cartridge (default: every full or disabled cartridge).
    pub barcode: Option<String>,
}

/// What may be reclaimed, and what keeps the others.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ReclaimChecks {
    /// One per cartridge.
    pub cartridges: Vec<ReclaimCheckView>,
}

/// One cartridge's reclaim check.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ReclaimCheckView {
    /// The cartridge.
    pub barcode: String,
    /// Its state.
    pub state: String,
    /// Live copies.
    pub live: u64,
    /// Copies of deleted objects still in quarantine.
    pub quarantined: u64,
    /// Copies an active legal hold covers.
    pub held: u64,
    /// Copies under retention.
    pub retained: u64,
    /// Bytes reclaim gives back.
    pub used_bytes: u64,
    /// Why it is kept; absent when it may be reclaimed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_because: Option<String>,
}

/// Repack cartridges: every live object moved to cartridges of a pool (or only the copies a
/// pool lacks added), read in tape order and written through the normal write path, below user
/// work. The source is `repacking` while it runs, `full` with no live data after.
#[utoipa::path(
    post,
    path = "/v1/jobs/repack",
    tag = "jobs",
    request_body = RepackRequest,
    responses(
        (status = 202, description = "queued", body = JobView),
        (status = 400, description = "bad request, naming the field: no condition, an unknown barcode, state, media or pool, a ratio out of range, a cartridge repacked already or that nothing reads, a selection that matches nothing", body = ErrorBody),
        (status = 403, description = "the token lacks `operate`", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn submit_repack(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: std::result::Result<Json<RepackRequest>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<JobView>)> {
    caller.require(Scope::Operate, "repack")?;
    let Json(req) = body?;
    req.check()?;
    let (spec, _) = crate::repack_cmd::repack_job(
        state.catalogue(),
        state.queue().store(),
        req.selection(),
        req.to_pool.clone(),
        req.add_copies,
        caller.who(),
    )
    .await?;
    submit(&state, &caller, spec, req.priority).await
}

/// Which cartridges a repack would empty, with what they hold; nothing is queued.
#[utoipa::path(
    post,
    path = "/v1/repack/dry-run",
    tag = "library",
    request_body = RepackRequest,
    responses(
        (status = 200, description = "what a repack would take", body = RepackPlanView),
        (status = 400, description = "as for POST /v1/jobs/repack", body = ErrorBody),
        (status = 403, description = "the token lacks `operate`", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn dry_run(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: std::result::Result<Json<RepackRequest>, JsonRejection>,
) -> ApiResult<Json<RepackPlanView>> {
    caller.require(Scope::Operate, "plan a repack")?;
    let Json(req) = body?;
    req.check()?;
    // The job's own checks, so a dry run refuses what the job would.
    let (_, cartridges) = crate::repack_cmd::repack_job(
        state.catalogue(),
        state.queue().store(),
        req.selection(),
        req.to_pool.clone(),
        req.add_copies,
        caller.who(),
    )
    .await?;
    Ok(Json(RepackPlanView { cartridges }))
}

/// What the pools' repack and reclaim policies (`[repack.pools.POOL]`) would start now.
#[utoipa::path(
    get,
    path = "/v1/repack/policy",
    tag = "library",
    responses(
        (status = 200, description = "the plan", body = PolicyPlan),
        (status = 403, description = "the token lacks `operate`", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn policy(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<PolicyPlan>> {
    caller.require(Scope::Operate, "see the repack policy")?;
    let plan =
        crate::repack_cmd::plan(state.catalogue(), state.config(), state.queue().store()).await?;
    Ok(Json(plan))
}

/// Reclaim cartridges: each relabelled with a new label epoch and given back to its pool.
/// Refused while one holds a live, held, retained or quarantined object.
#[utoipa::path(
    post,
    path = "/v1/jobs/reclaim",
    tag = "jobs",
    request_body = ReclaimRequest,
    responses(
        (status = 202, description = "queued", body = JobView),
        (status = 400, description = "no cartridge, one listed twice, or one holding something to keep, with reads queued or named by an unfinished repack or reclaim (the reason says what)", body = ErrorBody),
        (status = 403, description = "the token lacks `operate`", body = ErrorBody),
        (status = 404, description = "a cartridge the catalogue does not know", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn submit_reclaim(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: std::result::Result<Json<ReclaimRequest>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<JobView>)> {
    caller.require(Scope::Operate, "reclaim")?;
    let Json(req) = body?;
    if req.barcodes.is_empty() {
        return Err(ApiError::bad_request(
            "`barcodes` is empty",
            "name the cartridges to reclaim (GET /v1/reclaim lists what may be)",
        ));
    }
    let spec = crate::repack_cmd::reclaim_job(
        state.catalogue(),
        state.queue().store(),
        req.barcodes,
        caller.who(),
    )
    .await?;
    submit(&state, &caller, spec, req.priority).await
}

/// What may be reclaimed now, and what keeps the others.
#[utoipa::path(
    get,
    path = "/v1/reclaim",
    tag = "library",
    params(ReclaimQuery),
    responses(
        (status = 200, description = "the checks", body = ReclaimChecks),
        (status = 400, description = "a bad query string", body = ErrorBody),
        (status = 403, description = "the token lacks `operate`", body = ErrorBody),
        (status = 404, description = "no such cartridge", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn reclaim_checks(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: std::result::Result<Query<ReclaimQuery>, QueryRejection>,
) -> ApiResult<Json<ReclaimChecks>> {
    caller.require(Scope::Operate, "see reclaim checks")?;
    let Query(q) = query?;
    let names: Vec<String> = q.barcode.into_iter().collect();
    let checks = reel_queue::repack_select::reclaim_checks(state.catalogue(), &names).await?;
    Ok(Json(ReclaimChecks {
        cartridges: checks
            .into_iter()
            .map(|c| ReclaimCheckView {
                kept_because: c.refusal(),
                barcode: c.barcode,
                state: c.state,
                live: c.live,
                quarantined: c.quarantined,
                held: c.held,
                retained: c.retained,
                used_bytes: c.used_bytes,
            })
            .collect(),
    }))
}
