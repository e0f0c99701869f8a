//! Objects in and out over HTTP, for clients with no filesystem shared with reel:
//!
//! - `PUT /v1/objects/{key}` streams the body into the [`spool`](super::spool) and queues an
//!   archive job of it (202 with the job; `x-reel-sha256` on the request is checked, on the
//!   answer it is the body's);
//! - `POST /v1/stage/{key}` queues a recall of the object into the
//!   [`staging`](super::staging) area (202 with the stage), or says it is staged (200);
//! - `GET /v1/objects/{key}` streams a staged object (with `Range`), or answers 409 with the
//!   state of its recall.
//!
//! The same tokens, scopes and key prefixes apply as to the job routes.

use std::io::SeekFrom;
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Extension, Path as UrlPath, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use reel_engine::catalogue::{Object, validate_key};
use rustix::fs::OFlags;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use utoipa::{IntoParams, ToSchema};

use super::auth::Caller;
use super::jobs::{JobView, check_keys, submit};
use super::range::{Wanted, wanted};
use super::spool::UploadLimits;
use super::staging::{Stage, StageState, Staging};
use super::{ApiError, AppState, ErrorBody};
use reel_engine::session::destination::Overwrite;
use reel_queue::error::JobsError;
use reel_queue::job::{ArchiveJob, ArchiveSource, JobSpec, RecallJob};
use reel_queue::token::Scope;

type ApiResult<T> = std::result::Result<T, ApiError>;

/// The header carrying a body's SHA-256 (64 hex digits), on an upload and a download.
pub const SHA256_HEADER: &str = "x-reel-sha256";

/// Longest file name a spooled or staged object may have (its key's last segment).
const MAX_NAME_BYTES: usize = 255;

/// Query of `PUT /v1/objects/{key}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PutParams {
    /// Storage class (default: `[archive] default_class`).
    #[param(min_length = 1)]
    pub class: Option<String>,
    /// Priority of the archive job, -1000 to 1000 (capped by the token's).
    #[param(minimum = -1000, maximum = 1000)]
    pub priority: Option<i32>,
}

/// A stage: where an object's recall for `GET /v1/objects/{key}` stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct StageView {
    /// The key.
    pub key: String,
    /// The generation staged.
    pub generation: u64,
    /// Its size in bytes.
    pub size: u64,
    /// `queued` or `running` (GET answers 409 meanwhile), or `staged` (GET streams it).
    pub state: String,
    /// The recall job (follow it with GET /v1/jobs/{id}).
    pub job: String,
}

fn key_of(key: std::result::Result<UrlPath<String>, PathRejection>) -> ApiResult<String> {
    let UrlPath(key) = key?;
    validate_key(&key).map_err(|e| {
        ApiError::bad_request(
            format!("`key`: {e}"),
            "give a key of UTF-8 segments joined by single `/`, without `.` or `..` segments",
        )
    })?;
    Ok(key)
}

/// The key's last segment, the file name it is spooled and staged under.
fn file_name(key: &str) -> ApiResult<&str> {
    let name = key.rsplit('/').next().unwrap_or(key);
    if name.len() > MAX_NAME_BYTES {
        return Err(ApiError::bad_request(
            format!(
                "`key`: its last segment is {} bytes; objects sent over HTTP need one of at most {MAX_NAME_BYTES} bytes (a file name)",
                name.len()
            ),
            "shorten the key's last segment",
        ));
    }
    Ok(name)
}

async fn object_of(state: &AppState, key: &str) -> ApiResult<Object> {
    state
        .catalogue()
        .object(key)
        .await
        .map_err(|e| ApiError::from(JobsError::Catalogue(e)))?
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no object has the key `{key}`"),
                "list keys with GET /v1/catalog/objects?prefix=…",
            )
        })
}

/// A symbolic link archived as an object has no bytes to download (its target is its content).
fn downloadable(key: &str, obj: &Object) -> ApiResult<()> {
    if matches!(
        obj.meta.as_ref().map(|m| m.kind),
        Some(reel_engine::format::ObjectKind::Symlink)
    ) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("`{key}` is a symbolic link, not a file: there are no bytes to download"),
            "recall it with POST /v1/jobs/recall into a directory of your token's roots",
        ));
    }
    Ok(())
}

fn sha256_header(headers: &HeaderMap) -> ApiResult<Option<[u8; 32]>> {
    let mut all = headers.get_all(SHA256_HEADER).iter();
    let Some(v) = all.next() else {
        return Ok(None);
    };
    if all.next().is_some() {
        return Err(ApiError::bad_request(
            format!("`{SHA256_HEADER}` is given more than once"),
            "send one SHA-256 of the body",
        ));
    }
    let bad = || {
        ApiError::bad_request(
            format!("`{SHA256_HEADER}` is not a SHA-256: give 64 hexadecimal digits"),
            "send the SHA-256 of the body as 64 hex digits, or leave the header out",
        )
    };
    let text = v.to_str().map_err(|_| bad())?;
    let bytes = hex::decode(text.trim()).map_err(|_| bad())?;
    bytes.try_into().map(Some).map_err(|_| bad())
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// Upload an object: the body is archived under `key`.
#[utoipa::path(
    put,
    path = "/v1/objects/{key}",
    tag = "objects",
    params(("key" = String, Path, description = "object key"), PutParams,
        ("x-reel-sha256" = Option<String>, Header, description = "SHA-256 of the body, 64 hex digits; checked before anything is queued")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "the object's bytes, streamed"),
    responses(
        (status = 202, description = "received whole and durable; the archive job is queued (its result says when the object is on tape)", body = JobView,
            headers(("x-reel-sha256" = String, description = "SHA-256 of the body received"))),
        (status = 400, description = "a bad key, class, priority or checksum header; a body that broke off or whose SHA-256 is not the one given", body = ErrorBody),
        (status = 403, description = "the token lacks `submit`, or the key is outside its key prefixes", body = ErrorBody),
        (status = 408, description = "the body stalled", body = ErrorBody),
        (status = 409, description = "an earlier upload of the key is still being archived (the job is named)", body = ErrorBody),
        (status = 413, description = "larger than [serve] max_object_bytes", body = ErrorBody),
        (status = 503, description = "the spool is full for now (Retry-After), or the store is unreachable", body = ErrorBody),
        (status = 507, description = "the object alone is larger than the spool", body = ErrorBody),
    )
)]
pub(super) async fn put_object(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    key: std::result::Result<UrlPath<String>, PathRejection>,
    params: std::result::Result<Query<PutParams>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    caller.require(Scope::Submit, "upload objects")?;
    let key = key_of(key)?;
    let Query(params) = params?;
    check_keys(&caller, "key", [key.as_str()])?;
    let name = file_name(&key)?;
    let class = params
        .class
        .unwrap_or_else(|| state.config().archive.default_class.clone());
    reel_queue::submission::check_class(state.config(), &class).map_err(JobsError::from)?;
    let expected = sha256_header(&headers)?;
    if headers.contains_key(header::TRANSFER_ENCODING)
        && headers.contains_key(header::CONTENT_LENGTH)
    {
        return Err(ApiError::bad_request(
            "the request has both Content-Length and Transfer-Encoding",
            "send one of them (RFC 9112 §6.3): a proxy and this server could read the body differently",
        ));
    }
    let mut upload = state.spool().claim(&key, state.queue().store()).await?;
    let serve = &state.config().serve;
    let limits = UploadLimits {
        max_bytes: serve.max_object_bytes,
        idle: Duration::from_secs(serve.request_timeout_seconds.max(1)),
    };
    // From here on, a refusal drops `upload`, which removes what was received.
    let received = upload
        .receive(name, body, content_length(&headers), expected, limits)
        .await?;
    // A token revoked while its upload streamed queues nothing.
    if !state.tokens().still_active(&caller.token().id).await? {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "the token was revoked during the upload; nothing was queued",
            "ask the operator for a valid token",
        ));
    }
    let spec = JobSpec::Archive(ArchiveJob {
        source: ArchiveSource::Files(vec![received.path.clone()]),
        key_prefix: key[..key.len() - name.len()].to_string(),
        storage_class: class,
        confine: None,
    });
    let (status, Json(view)) = submit(&state, &caller, spec, params.priority).await?;
    if let Err(e) = upload.mark(&view.id) {
        // Unrecorded, the upload would be removed as an orphan under its job: cancel the job
        // instead, and say so.
        tracing::error!(job = %view.id, error = ?e, "cannot record the job of an upload; cancelling it");
        let _ = state.queue().cancel(&view.id).await;
        return Err(e);
    }
    tracing::info!(job = %view.id, %key, bytes = received.size, "object uploaded and queued for archive");
    let mut resp = (status, Json(view)).into_response();
    if let Ok(v) = HeaderValue::from_str(&hex::encode(received.sha256)) {
        resp.headers_mut().insert(SHA256_HEADER, v);
    }
    Ok(resp)
}

/// Stage an object for `GET /v1/objects/{key}`: recall it from tape into the staging area.
#[utoipa::path(
    post,
    path = "/v1/stage/{key}",
    tag = "objects",
    params(("key" = String, Path, description = "object key")),
    responses(
        (status = 200, description = "staged already, or being staged: GET it once `state` is `staged`", body = StageView),
        (status = 202, description = "the recall is queued", body = StageView),
        (status = 400, description = "a bad key", body = ErrorBody),
        (status = 403, description = "the token lacks `submit`, or the key is outside its key prefixes", body = ErrorBody),
        (status = 404, description = "no such object", body = ErrorBody),
        (status = 503, description = "the staging area is full for now (Retry-After), or the store is unreachable", body = ErrorBody),
        (status = 507, description = "the object alone is larger than the staging area", body = ErrorBody),
    )
)]
pub(super) async fn stage_object(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    key: std::result::Result<UrlPath<String>, PathRejection>,
) -> ApiResult<(StatusCode, Json<StageView>)> {
    caller.require(Scope::Submit, "stage objects")?;
    let key = key_of(key)?;
    check_keys(&caller, "key", [key.as_str()])?;
    file_name(&key)?;
    let obj = object_of(&state, &key).await?;
    downloadable(&key, &obj)?;
    let staging = state.staging();
    let view = |state: &str, job: String| StageView {
        key: key.clone(),
        generation: obj.generation,
        size: obj.size,
        state: state.to_string(),
        job,
    };
    // One stage decision at a time: two requests for one key queue one recall.
    let _one = staging.lock().lock().await;
    match staging
        .state(&key, obj.generation, state.queue().store())
        .await?
    {
        StageState::Ready { .. } => {
            let job = staging
                .record(&Staging::name(&key, obj.generation))
                .map(|s| s.job)
                .unwrap_or_default();
            return Ok((StatusCode::OK, Json(view("staged", job))));
        }
        StageState::Pending { job, state: s } => {
            return Ok((StatusCode::OK, Json(view(s.as_str(), job))));
        }
        StageState::None | StageState::Ended { .. } => {}
    }
    staging.quota().take(obj.size).map_err(|f| f.into_error())?;
    let name = Staging::name(&key, obj.generation);
    let dir = match staging.prepare(&name) {
        Ok(d) => d,
        Err(e) => {
            staging.quota().give_back(obj.size);
            tracing::error!(error = %e, "cannot prepare a stage");
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the staging area failed: {}", e.kind()),
                "the operator finds the cause in reel serve's log ([serve] staging_dir)",
            ));
        }
    };
    let spec = JobSpec::Recall(RecallJob {
        selection: reel_queue::job::RecallSelection::Keys(vec![key.clone()]),
        destination: dir.clone(),
        overwrite: Overwrite::Never,
        confine: None,
    });
    let job = match submit(&state, &caller, spec, None).await {
        Ok((_, Json(v))) => v.id,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            staging.quota().give_back(obj.size);
            return Err(e);
        }
    };
    let stage = Stage {
        key: key.clone(),
        generation: obj.generation,
        size: obj.size,
        job: job.clone(),
    };
    if let Err(e) = staging.write_record(&name, &stage) {
        tracing::error!(%job, error = %e, "cannot record a stage; its recall runs, GET will not find it");
    }
    tracing::info!(%job, %key, "object staging queued");
    Ok((StatusCode::ACCEPTED, Json(view("queued", job))))
}

/// Download a staged object, whole or a byte range.
#[utoipa::path(
    get,
    path = "/v1/objects/{key}",
    tag = "objects",
    params(("key" = String, Path, description = "object key"),
        ("range" = Option<String>, Header, description = "one byte range: bytes=A-B, bytes=A- or bytes=-N")),
    responses(
        (status = 200, description = "the whole object", content_type = "application/octet-stream", body = Vec<u8>,
            headers(("x-reel-sha256" = String, description = "SHA-256 of the whole object"))),
        (status = 206, description = "the range asked for", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 400, description = "a bad key", body = ErrorBody),
        (status = 403, description = "the token lacks `read`, or the key is outside its key prefixes", body = ErrorBody),
        (status = 404, description = "no such object", body = ErrorBody),
        (status = 409, description = "not staged: the body says where its recall stands (`recall`); POST /v1/stage/{key} stages it", body = ErrorBody),
        (status = 416, description = "the range lies past the end", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn get_object(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    key: std::result::Result<UrlPath<String>, PathRejection>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    caller.require(Scope::Read, "download objects")?;
    let key = key_of(key)?;
    check_keys(&caller, "key", [key.as_str()])?;
    let obj = object_of(&state, &key).await?;
    downloadable(&key, &obj)?;
    let stage = state
        .staging()
        .state(&key, obj.generation, state.queue().store())
        .await?;
    let dir = match stage {
        StageState::Ready { dir } => dir,
        StageState::None => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("`{key}` is on tape and not staged"),
                format!(
                    "POST /v1/stage/{key} to recall it, then GET it once the stage says `staged`"
                ),
            )
            .with_recall("none", None, None));
        }
        StageState::Pending { job, state: s } => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("`{key}` is being recalled (job {job}, {})", s.as_str()),
                "GET it again once the job is done (GET /v1/jobs/{id} follows it)",
            )
            .with_recall(s.as_str(), Some(job), None));
        }
        StageState::Ended {
            job,
            state: s,
            error,
        } => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "the recall of `{key}` ended {} (job {job}){}",
                    s.as_str(),
                    error
                        .as_deref()
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default()
                ),
                format!("POST /v1/stage/{key} to try again"),
            )
            .with_recall(s.as_str(), Some(job), error));
        }
    };
    let path = dir.join(&key);
    let fd = reel_engine::session::confine::open_beneath(
        &dir,
        &path,
        OFlags::RDONLY | OFlags::NONBLOCK,
    )
    .map_err(|e| {
        tracing::error!(path = %path.display(), error = %e, "a staged object cannot be opened");
        ApiError::new(
            StatusCode::CONFLICT,
            format!("the staged copy of `{key}` is gone"),
            format!("POST /v1/stage/{key} to stage it again"),
        )
        .with_recall("none", None, None)
    })?;
    // Opened without blocking (a FIFO planted in the staging area cannot hold the request)
    // and served only if it is a regular file.
    let file = std::fs::File::from(fd);
    let size = file
        .metadata()
        .ok()
        .filter(|m| m.is_file())
        .map_or(u64::MAX, |m| m.len());
    let mut file = tokio::fs::File::from_std(file);
    if size != obj.size {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "the staged copy of `{key}` has {size} bytes, not the object's {}",
                obj.size
            ),
            format!("POST /v1/stage/{key} to stage it again"),
        )
        .with_recall("none", None, None));
    }
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    let mut resp = match wanted(range, size) {
        Wanted::Unsatisfiable => {
            let mut r = ApiError::new(
                StatusCode::RANGE_NOT_SATISFIABLE,
                format!(
                    "the range `{}` lies past the end of `{key}` ({size} bytes)",
                    range.unwrap_or_default()
                ),
                "ask for bytes from 0 to size - 1",
            )
            .into_response();
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                r.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            return Ok(r);
        }
        Wanted::Whole => {
            let mut r = Response::new(Body::from_stream(tokio_util::io::ReaderStream::new(file)));
            r.headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(size));
            r
        }
        Wanted::Part(part) => {
            file.seek(SeekFrom::Start(part.start)).await.map_err(|e| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("cannot seek in the staged copy: {}", e.kind()),
                    "retry; the operator finds the cause in reel serve's log",
                )
            })?;
            let len = part.end - part.start;
            let body = Body::from_stream(tokio_util::io::ReaderStream::new(file.take(len)));
            let mut r = Response::new(body);
            *r.status_mut() = StatusCode::PARTIAL_CONTENT;
            r.headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
            if let Ok(v) =
                HeaderValue::from_str(&format!("bytes {}-{}/{size}", part.start, part.end - 1))
            {
                r.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            r
        }
    };
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Ok(v) = HeaderValue::from_str(&hex::encode(obj.sha256)) {
        h.insert(SHA256_HEADER, v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("\"{}\"", hex::encode(obj.sha256))) {
        h.insert(header::ETAG, v);
    }
    Ok(resp)
}

/// Remove what the spool and the staging area no longer need, every [`JANITOR_EVERY`], until
/// `stop`.
pub(super) async fn janitor(state: AppState, stop: tokio_util::sync::CancellationToken) {
    loop {
        let store = state.queue().store();
        let uploads = state.spool().sweep(store).await;
        let stages = state.staging().sweep(store).await;
        if uploads + stages > 0 {
            tracing::info!(uploads, stages, "removed finished uploads and stages");
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(JANITOR_EVERY) => {}
        }
    }
}

/// How often the janitor looks.
pub const JANITOR_EVERY: Duration = Duration::from_secs(5);
