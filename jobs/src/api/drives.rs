//! `GET /v1/drives`, `GET /v1/drives/{drive}`, `POST /v1/drives/{drive}/down|up|reset`: the
//! drives of every host and their service state, as `reel drive` shows and sets them
//! ([`crate::drive_cmd`], [`reel_queue::drive_state`]). Reading needs `read`; taking a drive
//! down or up needs `operate`, and is recorded as done by the token.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Extension, Path as UrlPath, State};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Caller;
use super::{ApiError, AppState, ErrorBody};
use crate::drive_cmd::{DriveStatus, views};
use reel_queue::DriveStates;
use reel_queue::drive_request::{DriveReset, DriveResets};
use reel_queue::error::JobsError;
use reel_queue::token::Scope;

/// Every drive a worker has seen.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DriveList {
    /// By name.
    pub drives: Vec<DriveStatus>,
}

/// `POST /v1/drives/{drive}/down` and `/up`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DriveServiceRequest {
    /// Why (required to take a drive down; for up, what was done to it). One line, at most
    /// 1000 bytes.
    #[serde(default)]
    pub reason: String,
}

async fn one(state: &AppState, drive: &str) -> Result<DriveStatus, ApiError> {
    views(state.queue().store().db())
        .await?
        .into_iter()
        .find(|v| v.service.drive == drive)
        .map(|v| v.status())
        .ok_or_else(|| {
            JobsError::NotFound {
                what: format!("no worker has seen a drive `{}`", drive.escape_debug()),
                hint: "GET /v1/drives lists the drives".into(),
            }
            .into()
        })
}

/// Every drive: in service or not (why, who, since when), its worker and what it does.
#[utoipa::path(
    get,
    path = "/v1/drives",
    tag = "library",
    responses(
        (status = 200, description = "the drives", body = DriveList),
        (status = 403, description = "the token lacks `read`", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<DriveList>, ApiError> {
    caller.require(Scope::Read, "see the drives")?;
    let drives = views(state.queue().store().db())
        .await?
        .iter()
        .map(|v| v.status())
        .collect();
    Ok(Json(DriveList { drives }))
}

/// One drive, with what it reported at its last unmounts and its last cleanings.
#[utoipa::path(
    get,
    path = "/v1/drives/{drive}",
    tag = "library",
    params(("drive" = String, Path, description = "the drive, `LIBRARY-INDEX`")),
    responses(
        (status = 200, description = "the drive", body = DriveStatus),
        (status = 403, description = "the token lacks `read`", body = ErrorBody),
        (status = 404, description = "no worker has seen that drive", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn show(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    drive: std::result::Result<UrlPath<String>, PathRejection>,
) -> Result<Json<DriveStatus>, ApiError> {
    caller.require(Scope::Read, "see the drives")?;
    let UrlPath(drive) = drive?;
    Ok(Json(
        one(&state, &drive)
            .await?
            .with_history(state.catalogue())
            .await?,
    ))
}

/// The body as a [`DriveServiceRequest`]: a JSON object (serde would take `[]` for a struct
/// whose fields all have defaults).
fn request(
    body: std::result::Result<Json<serde_json::Value>, JsonRejection>,
) -> Result<DriveServiceRequest, ApiError> {
    let Json(v) = body?;
    let hint = r#"send a JSON object: {"reason": "why"}"#;
    if !v.is_object() {
        return Err(ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "the body is not a JSON object",
            hint,
        ));
    }
    serde_json::from_value(v).map_err(|e| {
        ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            format!("the body is not a drive request: {e}"),
            hint,
        )
    })
}

fn by(caller: &Caller) -> String {
    format!("token:{} ({})", caller.token().id, caller.token().name)
}

/// Take a drive out of service, on every host: it ends its current step at a record boundary,
/// gives its claimed work back, unloads and takes no mount until it is brought up.
#[utoipa::path(
    post,
    path = "/v1/drives/{drive}/down",
    tag = "library",
    params(("drive" = String, Path, description = "the drive, `LIBRARY-INDEX`")),
    request_body = DriveServiceRequest,
    responses(
        (status = 200, description = "the drive, now down", body = DriveStatus),
        (status = 400, description = "no reason, or a malformed drive name or reason", body = ErrorBody),
        (status = 403, description = "the token lacks `operate`", body = ErrorBody),
        (status = 404, description = "no worker has seen that drive", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn down(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    drive: std::result::Result<UrlPath<String>, PathRejection>,
    body: std::result::Result<Json<serde_json::Value>, JsonRejection>,
) -> Result<Json<DriveStatus>, ApiError> {
    caller.require(Scope::Operate, "take a drive down")?;
    let UrlPath(drive) = drive?;
    let req = request(body)?;
    DriveStates::new(state.queue().store().db().clone())
        .down(&drive, &req.reason, &by(&caller))
        .await?;
    Ok(Json(one(&state, &drive).await?))
}

/// Put a drive back in service.
#[utoipa::path(
    post,
    path = "/v1/drives/{drive}/up",
    tag = "library",
    params(("drive" = String, Path, description = "the drive, `LIBRARY-INDEX`")),
    request_body = DriveServiceRequest,
    responses(
        (status = 200, description = "the drive, now up", body = DriveStatus),
        (status = 400, description = "a malformed drive name or reason", body = ErrorBody),
        (status = 403, description = "the token lacks `operate`", body = ErrorBody),
        (status = 404, description = "no worker has seen that drive", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn up(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    drive: std::result::Result<UrlPath<String>, PathRejection>,
    body: std::result::Result<Json<serde_json::Value>, JsonRejection>,
) -> Result<Json<DriveStatus>, ApiError> {
    caller.require(Scope::Operate, "bring a drive up")?;
    let UrlPath(drive) = drive?;
    let req = request(body)?;
    DriveStates::new(state.queue().store().db().clone())
        .up(&drive, &req.reason, &by(&caller))
        .await?;
    Ok(Json(one(&state, &drive).await?))
}

/// Ask the worker holding a drive that is down to recover its cartridge through the changer
/// (unload and put back, or have the robot pull it from a drive that does not answer). The
/// answer comes at once; `GET /v1/drives/{drive}/reset` says when it is done and what was done.
#[utoipa::path(
    post,
    path = "/v1/drives/{drive}/reset",
    tag = "library",
    params(("drive" = String, Path, description = "the drive, `LIBRARY-INDEX`")),
    responses(
        (status = 202, description = "asked for; the worker holding the drive does it at its next poll", body = DriveReset),
        (status = 400, description = "the drive is in service (take it down first), or a malformed name", body = ErrorBody),
        (status = 403, description = "the token lacks `operate`", body = ErrorBody),
        (status = 404, description = "no worker has seen that drive", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn reset(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    drive: std::result::Result<UrlPath<String>, PathRejection>,
) -> Result<(axum::http::StatusCode, Json<DriveReset>), ApiError> {
    caller.require(Scope::Operate, "reset a drive")?;
    let UrlPath(drive) = drive?;
    ask(
        &caller,
        &drive,
        DriveResets::new(state.queue().store().db().clone()),
    )
    .await
}

/// Record `caller`'s request of `requests`' kind for `drive`: 202 with the request.
async fn ask(
    caller: &Caller,
    drive: &str,
    requests: DriveResets,
) -> Result<(axum::http::StatusCode, Json<DriveReset>), ApiError> {
    let r = requests.request(drive, &by(caller)).await?;
    tracing::info!(%drive, token = %caller.token().id, kind = ?requests.kind(),
        "drive request asked for over HTTP");
    Ok((axum::http::StatusCode::ACCEPTED, Json(r)))
}

/// Ask for a drive to be cleaned with one of the library's cleaning cartridges: the worker
/// holding it does it between two batches (`GET …/clean` tells what it did).
#[utoipa::path(
    post,
    path = "/v1/drives/{drive}/clean",
    tag = "library",
    params(("drive" = String, Path, description = "the drive, `LIBRARY-INDEX`")),
    responses(
        (status = 202, description = "asked for", body = DriveReset),
        (status = 400, description = "a malformed name", body = ErrorBody),
        (status = 403, description = "the token lacks `operate`", body = ErrorBody),
        (status = 404, description = "no worker has seen that drive", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn clean(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    drive: std::result::Result<UrlPath<String>, PathRejection>,
) -> Result<(axum::http::StatusCode, Json<DriveReset>), ApiError> {
    caller.require(Scope::Operate, "clean a drive")?;
    let UrlPath(drive) = drive?;
    ask(
        &caller,
        &drive,
        DriveResets::cleans(state.queue().store().db().clone()),
    )
    .await
}

/// A drive's last cleaning request: when, by whom, and what the worker did.
#[utoipa::path(
    get,
    path = "/v1/drives/{drive}/clean",
    tag = "library",
    params(("drive" = String, Path, description = "the drive, `LIBRARY-INDEX`")),
    responses(
        (status = 200, description = "the last cleaning request", body = DriveReset),
        (status = 400, description = "a malformed drive name", body = ErrorBody),
        (status = 403, description = "the token lacks `read`", body = ErrorBody),
        (status = 404, description = "no worker has seen that drive, or no cleaning was asked for", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn clean_status(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    drive: std::result::Result<UrlPath<String>, PathRejection>,
) -> Result<Json<DriveReset>, ApiError> {
    caller.require(Scope::Read, "see the drives")?;
    let UrlPath(drive) = drive?;
    last_request(
        &state,
        &drive,
        DriveResets::cleans(state.queue().store().db().clone()),
        "cleaned",
        "clean",
    )
    .await
}

/// The last request of `requests`' kind for a known drive, or 404 saying how to ask.
async fn last_request(
    state: &AppState,
    drive: &str,
    requests: DriveResets,
    done: &str,
    path: &str,
) -> Result<Json<DriveReset>, ApiError> {
    DriveStates::new(state.queue().store().db().clone())
        .get_known(drive)
        .await?;
    requests.get(drive).await?.map(Json).ok_or_else(|| {
        JobsError::NotFound {
            what: format!("drive `{}` was never {done}", drive.escape_debug()),
            hint: format!("POST /v1/drives/{{drive}}/{path} asks for it"),
        }
        .into()
    })
}

/// A drive's last reset: when it was asked for, by whom, and what the worker did.
#[utoipa::path(
    get,
    path = "/v1/drives/{drive}/reset",
    tag = "library",
    params(("drive" = String, Path, description = "the drive, `LIBRARY-INDEX`")),
    responses(
        (status = 200, description = "the last reset", body = DriveReset),
        (status = 400, description = "a malformed drive name", body = ErrorBody),
        (status = 403, description = "the token lacks `read`", body = ErrorBody),
        (status = 404, description = "no worker has seen that drive, or it was never reset", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn reset_status(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    drive: std::result::Result<UrlPath<String>, PathRejection>,
) -> Result<Json<DriveReset>, ApiError> {
    caller.require(Scope::Read, "see the drives")?;
    let UrlPath(drive) = drive?;
    last_request(
        &state,
        &drive,
        DriveResets::new(state.queue().store().db().clone()),
        "reset",
        "reset",
    )
    .await
}
