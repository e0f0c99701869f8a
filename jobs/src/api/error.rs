//! Errors of the HTTP API: a JSON body with the cause, a hint and the status; the status follows
//! what went wrong (400 bad input, 404 unknown job or key, 409 state conflict, 503 store down).

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use reel_engine::catalogue::{CatalogueError, StoreFault};
use serde::Serialize;
use utoipa::ToSchema;

use reel_queue::error::JobsError;

/// The body of every error response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: String,
    /// What to do about it.
    pub hint: String,
    /// The HTTP status, repeated for clients that only keep the body.
    pub status: u16,
    /// On a 409 of `GET /v1/objects/{key}`: where the object's recall stands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recall: Option<RecallState>,
}

/// Where an object's recall to the staging area stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct RecallState {
    /// `none` (not asked for: POST /v1/stage/{key}), `queued`, `running`, `failed` or
    /// `cancelled`.
    pub state: String,
    /// The recall job, if there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// Why it failed, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An error answered to an HTTP client.
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    cause: String,
    hint: String,
    retry_after: Option<u64>,
    recall: Option<Box<RecallState>>,
}

const STORE_HINT: &str = "the job store or catalogue database failed: check that the database at the [store] url is up, reachable from reel serve and writable (GET /healthz probes a write), then retry";

impl ApiError {
    /// An error with this status, cause and hint.
    pub fn new(status: StatusCode, cause: impl Into<String>, hint: impl Into<String>) -> ApiError {
        ApiError {
            status,
            cause: cause.into(),
            hint: hint.into(),
            retry_after: None,
            recall: None,
        }
    }

    /// The same error, saying where an object's recall stands.
    pub fn with_recall(
        mut self,
        state: &str,
        job: Option<String>,
        error: Option<String>,
    ) -> ApiError {
        self.recall = Some(Box::new(RecallState {
            state: state.to_string(),
            job,
            error,
        }));
        self
    }

    /// The same error, telling the client to try again after `seconds` (`Retry-After`).
    pub fn retry_after(mut self, seconds: u64) -> ApiError {
        self.retry_after = Some(seconds);
        self
    }

    /// 400: the request is wrong.
    pub fn bad_request(cause: impl Into<String>, hint: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, cause, hint)
    }

    /// The status it answers with.
    pub fn status(&self) -> StatusCode {
        self.status
    }
}

impl From<JobsError> for ApiError {
    fn from(e: JobsError) -> ApiError {
        use StatusCode as S;
        let cause = e.to_string();
        let (status, hint): (StatusCode, String) = match &e {
            JobsError::Config { .. } => (
                S::BAD_REQUEST,
                "fix the request; the request bodies are described in GET /openapi.json".into(),
            ),
            JobsError::Invalid(_) => (
                S::BAD_REQUEST,
                "fix the request and submit it again; nothing was queued".into(),
            ),
            JobsError::Io { .. } => (
                S::BAD_REQUEST,
                "paths are on the server host: give absolute paths that exist there and that reel serve and the workers can read".into(),
            ),
            JobsError::NoSuchJob(_) => (
                S::NOT_FOUND,
                "list jobs with GET /v1/jobs; finished jobs are pruned after [worker] retention_hours".into(),
            ),
            JobsError::NotFound { hint, .. } => (S::NOT_FOUND, hint.clone()),
            JobsError::Refused { hint, .. } => (S::BAD_REQUEST, hint.clone()),
            JobsError::BadJobState { hint, .. } => (S::CONFLICT, hint.clone()),
            JobsError::LeaseBusy { .. } | JobsError::Fenced { .. } | JobsError::Cancelled(_) => (
                S::CONFLICT,
                "the resource is busy or changed meanwhile; look again and retry".into(),
            ),
            JobsError::Database { .. } | JobsError::Queue { .. } => match e.store_fault() {
                Some(f) => (S::SERVICE_UNAVAILABLE, store_fault_hint(f)),
                None => (S::SERVICE_UNAVAILABLE, STORE_HINT.into()),
            },
            JobsError::Migrate(_) => (S::SERVICE_UNAVAILABLE, STORE_HINT.into()),
            JobsError::Catalogue(c) => return catalogue_error(c),
            // Keys are the server's: a client cannot fix a missing key or a refused key file.
            JobsError::Key(k) if k.is_retryable() => (
                S::SERVICE_UNAVAILABLE,
                "the key manager did not answer; retry later".into(),
            ),
            JobsError::Key(_) => (
                S::INTERNAL_SERVER_ERROR,
                "the server's keys need an operator: see docs/OPERATIONS.md, Encryption keys"
                    .into(),
            ),
            JobsError::ConfigRead { .. }
            | JobsError::Payload { .. }
            | JobsError::RequestDetail { .. }
            | JobsError::RequestFailed { .. }
            | JobsError::JobEnded { .. }
            | JobsError::Differs(_)
            | JobsError::Recovery(_)
            | JobsError::Internal(_)
            | JobsError::DriveFailed { .. }
            | JobsError::Session(_) => (
                S::INTERNAL_SERVER_ERROR,
                "see the log of reel serve for details".into(),
            ),
        };
        if status.is_server_error() {
            tracing::warn!(status = status.as_u16(), error = %cause, "API request failed");
        }
        ApiError::new(status, cause, hint)
    }
}

/// The hint of a store that cannot take writes: what is wrong with it, never "unreachable" (a
/// full disk answered every query but the writes).
fn store_fault_hint(f: StoreFault) -> String {
    format!(
        "{f}: {}; nothing was changed by this request, send it again once that is mended",
        f.advice()
    )
}

fn catalogue_error(e: &CatalogueError) -> ApiError {
    use StatusCode as S;
    if let Some(f) = e.store_fault() {
        tracing::warn!(status = 503, error = %e, "API request failed in the catalogue's store");
        return ApiError::new(S::SERVICE_UNAVAILABLE, e.to_string(), store_fault_hint(f));
    }
    let (status, hint) = match e {
        CatalogueError::Open { .. } | CatalogueError::Database { .. } => {
            (S::SERVICE_UNAVAILABLE, STORE_HINT)
        }
        CatalogueError::InvalidKey { .. }
        | CatalogueError::InvalidInput { .. }
        | CatalogueError::OutOfRange { .. } => (
            S::BAD_REQUEST,
            "fix the key or value; keys are UTF-8 paths without empty or dot segments",
        ),
        CatalogueError::UnknownHold { .. } => {
            (S::NOT_FOUND, "list the holds with GET /v1/holds?all=true")
        }
        CatalogueError::UnknownCartridge { .. }
        | CatalogueError::UnknownPool { .. }
        | CatalogueError::UnknownContainer { .. } => (
            S::NOT_FOUND,
            "look up what the catalogue knows with GET /v1/catalog/objects",
        ),
        CatalogueError::CartridgeRefused { .. } | CatalogueError::ContainerRefused { .. } => (
            S::CONFLICT,
            "the catalogue refused the change in its current state",
        ),
        CatalogueError::Held { .. } => (
            S::CONFLICT,
            "an admin releases the hold with POST /v1/holds/{id}/release once it may be lifted",
        ),
        CatalogueError::Retained { .. } => (
            S::CONFLICT,
            "its storage class's retention ([lifecycle.retention]) keeps it until it ends",
        ),
        CatalogueError::PastQuarantine { .. } => (
            S::CONFLICT,
            "only what was deleted within [lifecycle] quarantine_days comes back",
        ),
        _ => (
            S::INTERNAL_SERVER_ERROR,
            "see the log of reel serve for details",
        ),
    };
    if status.is_server_error() {
        tracing::warn!(status = status.as_u16(), error = %e, "API request failed in the catalogue");
    }
    ApiError::new(status, e.to_string(), hint)
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> ApiError {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the request body is larger than [serve] max_body_bytes allows",
                "send a smaller body: recall a prefix rather than a million keys, or split the job",
            );
        }
        ApiError::bad_request(
            format!("bad JSON body: {}", r.body_text()),
            "send Content-Type: application/json and a body as described in GET /openapi.json",
        )
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> ApiError {
        ApiError::bad_request(
            format!("bad query string: {}", r.body_text()),
            "the query parameters are described in GET /openapi.json",
        )
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> ApiError {
        ApiError::bad_request(
            format!("bad path: {}", r.body_text()),
            "the routes are described in GET /openapi.json",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: self.cause,
            hint: self.hint,
            status: self.status.as_u16(),
            recall: self.recall.map(|r| *r),
        };
        let mut resp = (self.status, Json(body)).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(s),
            );
        }
        resp
    }
}
