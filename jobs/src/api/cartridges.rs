//! `GET /v1/cartridges`, `GET /v1/cartridges/{barcode}`, `POST /v1/cartridges/{barcode}/state`:
//! the catalogue's cartridges as `reel cartridge ls|show` gives them (pool, state and why,
//! location, used and free space, mounts, last mounted and written), and an operator's state
//! change ([`crate::cartridge_cmd::set_state`]). Reading needs `read`; a state change needs
//! `operate` and is recorded as done by the token.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Extension, Path as UrlPath, Query, State};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Caller;
use super::{ApiError, AppState, ErrorBody};
use crate::cartridge_cmd::{CartridgeDetail, set_state, unknown};
use reel_engine::catalogue::CartridgeState;
use reel_queue::error::JobsError;
use reel_queue::token::Scope;
use reel_queue::{ElementView, Inventory};

/// The cartridges, by barcode.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CartridgeList {
    /// By barcode.
    pub cartridges: Vec<CartridgeDetail>,
}

/// `GET /v1/cartridges` filters.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct CartridgeQuery {
    /// Only this pool's.
    pub pool: Option<String>,
    /// Only cartridges in this state.
    pub state: Option<String>,
}

/// `POST /v1/cartridges/{barcode}/state`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CartridgeStateRequest {
    /// active, disabled, broken or full.
    pub state: String,
    /// Why: one line, at most 1000 bytes.
    pub reason: String,
}

async fn elements(state: &AppState) -> Result<Vec<ElementView>, ApiError> {
    Ok(Inventory::new(state.queue().store().db().clone())
        .read()
        .await?
        .elements)
}

/// Every cartridge the catalogue knows.
#[utoipa::path(
    get,
    path = "/v1/cartridges",
    tag = "library",
    params(CartridgeQuery),
    responses(
        (status = 200, description = "the cartridges", body = CartridgeList),
        (status = 400, description = "an unknown state", body = ErrorBody),
        (status = 403, description = "the token lacks `read`", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: std::result::Result<Query<CartridgeQuery>, QueryRejection>,
) -> Result<Json<CartridgeList>, ApiError> {
    caller.require(Scope::Read, "see the cartridges")?;
    let Query(q) = query?;
    let want = match q.state.as_deref() {
        None | Some("") => None,
        Some(s) => Some(s.parse::<CartridgeState>().map_err(|_| {
            ApiError::bad_request(
                format!("`{}` is not a cartridge state", s.escape_debug()),
                "new, active, disabled, full, broken, repacking, exported",
            )
        })?),
    };
    let elements = elements(&state).await?;
    let errors = state
        .catalogue()
        .catch_counts(None)
        .await
        .map_err(JobsError::Catalogue)?;
    let cartridges = state
        .catalogue()
        .cartridges()
        .await
        .map_err(JobsError::Catalogue)?
        .into_iter()
        .filter(|c| q.pool.is_none() || c.pool == q.pool)
        .filter(|c| want.is_none_or(|s| c.state == s))
        .map(|c| CartridgeDetail::of(c, &elements, &errors))
        .collect();
    Ok(Json(CartridgeList { cartridges }))
}

/// One cartridge, with what drives reported at its last unmounts (TapeAlert flags, bytes,
/// repositions).
#[utoipa::path(
    get,
    path = "/v1/cartridges/{barcode}",
    tag = "library",
    params(("barcode" = String, Path, description = "the cartridge's barcode")),
    responses(
        (status = 200, description = "the cartridge", body = CartridgeDetail),
        (status = 403, description = "the token lacks `read`", body = ErrorBody),
        (status = 404, description = "no such cartridge", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn show(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    barcode: std::result::Result<UrlPath<String>, PathRejection>,
) -> Result<Json<CartridgeDetail>, ApiError> {
    caller.require(Scope::Read, "see the cartridges")?;
    let UrlPath(barcode) = barcode?;
    let c = state
        .catalogue()
        .cartridge(&barcode)
        .await
        .map_err(JobsError::Catalogue)?
        .ok_or_else(|| unknown(&barcode))?;
    let errors = state
        .catalogue()
        .catch_counts(Some(&barcode))
        .await
        .map_err(JobsError::Catalogue)?;
    Ok(Json(
        CartridgeDetail::of(c, &elements(&state).await?, &errors)
            .with_health(state.catalogue())
            .await?,
    ))
}

/// Set a cartridge's state, with a reason: `disabled` and `broken` stop its mounts (its queued
/// recalls read other copies or fail with the reason), `full` stops its writes, `active`
/// returns it.
#[utoipa::path(
    post,
    path = "/v1/cartridges/{barcode}/state",
    tag = "library",
    params(("barcode" = String, Path, description = "the cartridge's barcode")),
    request_body = CartridgeStateRequest,
    responses(
        (status = 200, description = "the cartridge in its new state", body = CartridgeDetail),
        (status = 400, description = "a state an operator may not set, or no reason", body = ErrorBody),
        (status = 403, description = "the token lacks `operate`", body = ErrorBody),
        (status = 404, description = "no such cartridge", body = ErrorBody),
        (status = 409, description = "the catalogue refuses the change (e.g. active for a cartridge never labelled)", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn set(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    barcode: std::result::Result<UrlPath<String>, PathRejection>,
    body: std::result::Result<Json<CartridgeStateRequest>, JsonRejection>,
) -> Result<Json<CartridgeDetail>, ApiError> {
    caller.require(Scope::Operate, "change a cartridge's state")?;
    let UrlPath(barcode) = barcode?;
    let Json(req) = body?;
    let by = format!("token:{} ({})", caller.token().id, caller.token().name);
    let (_, c) = set_state(state.catalogue(), &barcode, &req.state, &req.reason, &by).await?;
    let errors = state
        .catalogue()
        .catch_counts(Some(&barcode))
        .await
        .map_err(JobsError::Catalogue)?;
    Ok(Json(CartridgeDetail::of(
        c,
        &elements(&state).await?,
        &errors,
    )))
}
