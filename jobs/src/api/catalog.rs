//! `/v1/catalog`: objects by key prefix, and one key with where its copies are.

use axum::Extension;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::Json;
use reel_engine::catalogue::{CopyLocation, Object};
use reel_engine::format::ObjectMeta;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Caller;
use super::{ApiError, AppState, ErrorBody};
use reel_queue::error::JobsError;
use reel_queue::token::Scope;

type ApiResult<T> = std::result::Result<T, ApiError>;

/// Most objects one list returns.
const MAX_LIST: u64 = 100_000;

/// One archived generation of one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ObjectView {
    /// The key.
    pub key: String,
    /// Its generation (1 for the first archive of the key).
    pub generation: u64,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of its content, hex.
    pub sha256: String,
    /// When it was catalogued, seconds since the Unix epoch.
    pub created_unix: u64,
    /// What the filesystem gave it, when recorded: `kind` (`file` or `symlink`), `mode`
    /// (permission bits), `uid`, `gid`, `mtime_ns`, `sparse`.
    #[schema(value_type = Option<Object>)]
    pub meta: Option<ObjectMeta>,
}

impl From<&Object> for ObjectView {
    fn from(o: &Object) -> ObjectView {
        ObjectView {
            key: o.key.clone(),
            generation: o.generation,
            size: o.size,
            sha256: hex::encode(o.sha256),
            created_unix: o.created_unix,
            meta: o.meta,
        }
    }
}

/// Where one copy of an object is on tape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct CopyView {
    /// The cartridge holding the copy.
    pub barcode: String,
    /// That cartridge's state.
    pub cartridge_state: String,
    /// The container holding the copy (catalogue id).
    pub container_id: i64,
    /// The container's state (durable or verified).
    pub container_state: String,
    /// The container's tape file number.
    pub file_number: u64,
    /// Block number of the container's header record.
    pub container_first_block: u64,
    /// The container's data record size.
    pub record_size: u32,
    /// Byte offset of the object in the container's data stream.
    pub offset: u64,
    /// Length of the object in the container's data stream.
    pub length: u64,
}

impl From<&CopyLocation> for CopyView {
    fn from(c: &CopyLocation) -> CopyView {
        CopyView {
            barcode: c.barcode.clone(),
            cartridge_state: c.cartridge_state.as_str().into(),
            container_id: c.container_id,
            container_state: c.container_state.as_str().into(),
            file_number: c.file_number,
            container_first_block: c.container_first_block,
            record_size: c.record_size,
            offset: c.offset,
            length: c.length,
        }
    }
}

/// One object with its copies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ObjectCopies {
    /// The object (its newest durable generation).
    #[serde(flatten)]
    pub object: ObjectView,
    /// Where its copies are.
    pub copies: Vec<CopyView>,
}

/// `GET /v1/catalog/objects` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListObjectsQuery {
    /// Key prefix (default: every key).
    pub prefix: Option<String>,
    /// At most this many (default 1000, at most 100000).
    #[param(minimum = 1, maximum = 100000)]
    pub limit: Option<u64>,
}

/// List objects by key prefix, in key order.
#[utoipa::path(
    get,
    path = "/v1/catalog/objects",
    tag = "catalog",
    params(ListObjectsQuery),
    responses(
        (status = 200, description = "objects in key order", body = Vec<ObjectView>),
        (status = 400, description = "bad limit", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "the token lacks the read scope", body = ErrorBody),
        (status = 503, description = "catalogue unreachable", body = ErrorBody),
    )
)]
pub(super) async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: std::result::Result<Query<ListObjectsQuery>, QueryRejection>,
) -> ApiResult<Json<Vec<ObjectView>>> {
    caller.require(Scope::Read, "list the catalogue")?;
    let Query(q) = query?;
    let limit = q.limit.unwrap_or(1000);
    if limit == 0 || limit > MAX_LIST {
        return Err(ApiError::bad_request(
            format!("limit {limit} is out of range"),
            format!("give a limit from 1 to {MAX_LIST}, and page with a longer prefix"),
        ));
    }
    let prefix = q.prefix.unwrap_or_default();
    let objects = state
        .catalogue()
        .list_objects(&prefix, limit)
        .await
        .map_err(JobsError::from)?;
    Ok(Json(objects.iter().map(ObjectView::from).collect()))
}

/// One key: its newest durable generation and where its copies are.
#[utoipa::path(
    get,
    path = "/v1/catalog/objects/{key}",
    tag = "catalog",
    params(("key" = String, Path, description = "object key; slashes stay as they are, other reserved characters percent-encoded")),
    responses(
        (status = 200, description = "the object and its copies", body = ObjectCopies),
        (status = 404, description = "no durable object with that key", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "the token lacks the read scope", body = ErrorBody),
        (status = 503, description = "catalogue unreachable", body = ErrorBody),
    )
)]
pub(super) async fn find(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    key: std::result::Result<Path<String>, PathRejection>,
) -> ApiResult<Json<ObjectCopies>> {
    caller.require(Scope::Read, "look the catalogue up")?;
    let Path(key) = key?;
    let cat = state.catalogue();
    let Some(obj) = cat.object(&key).await.map_err(JobsError::from)? else {
        return Err(JobsError::NotFound {
            what: format!("no durable object with key `{key}`"),
            hint: "list keys with GET /v1/catalog/objects?prefix=…".into(),
        }
        .into());
    };
    let copies = cat
        .copies(&key, obj.generation)
        .await
        .map_err(JobsError::from)?;
    Ok(Json(ObjectCopies {
        object: ObjectView::from(&obj),
        copies: copies.iter().map(CopyView::from).collect(),
    }))
}
