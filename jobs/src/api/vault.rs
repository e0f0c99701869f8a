//! `/v1/vault…`: sending cartridges offsite and bringing them back, as `reel cartridge
//! export|import|imports|wanted|vaulted` do it ([`crate::vault_cmd`]), and
//! `/v1/cleaning-cartridges` (`reel cartridge cleaning`): the cartridges that are not data.
//! Reading needs `read`; an export or an import needs `operate` and is recorded as done by
//! the token.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Extension, Path as UrlPath, State};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Caller;
use super::{ApiError, AppState, ErrorBody};
use crate::vault_cmd::{VaultView, Wanted};
use reel_queue::cartridge_import::{CartridgeImport, CartridgeImports};
use reel_queue::error::JobsError;
use reel_queue::token::Scope;

/// `POST /v1/vault/export`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExportRequest {
    /// The cartridges (1 to 1000 barcodes, each once).
    pub barcodes: Vec<String>,
    /// Where they go: one line, at most 200 bytes.
    pub to: String,
}

/// `POST /v1/vault/import`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportRequest {
    /// Only these (default: everything in the mail slots; at most 1000).
    #[serde(default)]
    pub barcodes: Vec<String>,
    /// Only a worker of this library does it (its name as in drive names; default: any).
    #[serde(default)]
    pub library: String,
}

/// Cartridges just exported.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Exported {
    /// Each, with where it went.
    pub exported: Vec<VaultView>,
}

/// Every exported cartridge.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Vaulted {
    /// By barcode.
    pub vaulted: Vec<VaultView>,
}

/// What waiting work needs brought back.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WantedList {
    /// Most waited-for first.
    pub wanted: Vec<Wanted>,
}

fn by(caller: &Caller) -> String {
    caller.who()
}

/// Export cartridges: each becomes `exported` at once (no new work takes it; recalls only it
/// can serve wait for it) and a worker moves it to a free mail slot.
#[utoipa::path(
    post,
    path = "/v1/vault/export",
    tag = "library",
    request_body = ExportRequest,
    responses(
        (status = 200, description = "exported", body = Exported),
        (status = 400, description = "no barcode, a malformed one, one given twice, one already exported or being repacked, or a bad location", body = ErrorBody),
        (status = 403, description = "the token lacks `operate`", body = ErrorBody),
        (status = 404, description = "no such cartridge (none was exported)", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn export(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: std::result::Result<Json<ExportRequest>, JsonRejection>,
) -> Result<Json<Exported>, ApiError> {
    caller.require(Scope::Operate, "export cartridges")?;
    let Json(req) = body?;
    let exported =
        crate::vault_cmd::export(state.catalogue(), &req.barcodes, &req.to, &by(&caller)).await?;
    Ok(Json(Exported { exported }))
}

/// Ask for cartridges to be taken in from the mail slots; a worker holding the library does it
/// at its next maintenance pass (`GET /v1/vault/imports/{id}` tells what it did).
#[utoipa::path(
    post,
    path = "/v1/vault/import",
    tag = "library",
    request_body = ImportRequest,
    responses(
        (status = 202, description = "asked for", body = CartridgeImport),
        (status = 400, description = "a malformed barcode, one given twice, more than 1000, or a bad library name", body = ErrorBody),
        (status = 403, description = "the token lacks `operate`", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn import(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: std::result::Result<Json<ImportRequest>, JsonRejection>,
) -> Result<(axum::http::StatusCode, Json<CartridgeImport>), ApiError> {
    caller.require(Scope::Operate, "import cartridges")?;
    let Json(req) = body?;
    let r = crate::vault_cmd::import(
        state.queue().store().db(),
        &req.library,
        &req.barcodes,
        &by(&caller),
    )
    .await?;
    Ok((axum::http::StatusCode::ACCEPTED, Json(r)))
}

/// One import request and what the worker did.
#[utoipa::path(
    get,
    path = "/v1/vault/imports/{id}",
    tag = "library",
    params(("id" = i64, Path, description = "the request's number")),
    responses(
        (status = 200, description = "the request", body = CartridgeImport),
        (status = 400, description = "not a number", body = ErrorBody),
        (status = 403, description = "the token lacks `read`", body = ErrorBody),
        (status = 404, description = "no such request", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn import_status(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    id: std::result::Result<UrlPath<i64>, PathRejection>,
) -> Result<Json<CartridgeImport>, ApiError> {
    caller.require(Scope::Read, "see the library")?;
    let UrlPath(id) = id?;
    CartridgeImports::new(state.queue().store().db().clone())
        .get(id)
        .await?
        .map(Json)
        .ok_or_else(|| {
            JobsError::NotFound {
                what: format!("no import request {id}"),
                hint: "`reel cartridge imports` lists them".into(),
            }
            .into()
        })
}

/// Every exported cartridge: where it went and whether it has left the library.
#[utoipa::path(
    get,
    path = "/v1/vault",
    tag = "library",
    responses(
        (status = 200, description = "the exported cartridges", body = Vaulted),
        (status = 403, description = "the token lacks `read`", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn vaulted(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Vaulted>, ApiError> {
    caller.require(Scope::Read, "see the library")?;
    Ok(Json(Vaulted {
        vaulted: crate::vault_cmd::vaulted(state.catalogue()).await?,
    }))
}

/// The exported cartridges that waiting recalls need, with how much waits for each.
#[utoipa::path(
    get,
    path = "/v1/vault/wanted",
    tag = "library",
    responses(
        (status = 200, description = "what to bring back", body = WantedList),
        (status = 403, description = "the token lacks `read`", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn wanted(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<WantedList>, ApiError> {
    caller.require(Scope::Read, "see the library")?;
    Ok(Json(WantedList {
        wanted: crate::vault_cmd::wanted(state.catalogue(), state.queue().store().db()).await?,
    }))
}

/// The cleaning cartridges reel has seen.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CleaningList {
    /// By barcode.
    #[schema(value_type = Vec<Object>)]
    pub cleaning_cartridges: Vec<reel_engine::catalogue::CleaningCartridge>,
}

/// Cleaning cartridges: how often reel cleaned a drive with each, and which are used up.
#[utoipa::path(
    get,
    path = "/v1/cleaning-cartridges",
    tag = "library",
    responses(
        (status = 200, description = "the cleaning cartridges", body = CleaningList),
        (status = 403, description = "the token lacks `read`", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn cleaning(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<CleaningList>, ApiError> {
    caller.require(Scope::Read, "see the library")?;
    Ok(Json(CleaningList {
        cleaning_cartridges: state
            .catalogue()
            .cleaning_cartridges()
            .await
            .map_err(JobsError::Catalogue)?,
    }))
}
