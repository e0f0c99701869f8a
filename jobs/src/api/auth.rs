//! Who is calling: every route but `/healthz`, `/openapi.json` and the dashboard's page needs an
//! API token ([`reel_queue::token`]) as `Authorization: Bearer reel_<id>.<secret>`.
//!
//! A missing, malformed, unknown, wrong or revoked token gets one and the same 401 (with
//! `WWW-Authenticate: Bearer`), so a caller learns nothing about which tokens exist; a token
//! without the scope a route needs gets 403 naming the scope. Each token has a request rate
//! ([`super::limits::RateLimiter`]) checked here, once it is known whose request it is.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, AppState};
use reel_queue::token::{Scope, Token};

/// The authenticated caller of a request, put in its extensions by [`authenticate`].
#[derive(Debug, Clone)]
pub struct Caller(pub Arc<Token>);

impl Caller {
    /// The token.
    pub fn token(&self) -> &Token {
        &self.0
    }

    /// 403 unless the token holds `scope`.
    pub fn require(&self, scope: Scope, to: &str) -> Result<(), ApiError> {
        if self.0.has(scope) {
            return Ok(());
        }
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "token {} ({}) lacks the `{scope}` scope, which is needed to {to}",
                self.0.id, self.0.name
            ),
            format!(
                "use a token with the `{scope}` scope (the operator creates one with `reel token create --scope {scope}`)"
            ),
        ))
    }

    /// Who the caller is, for the records it leaves (`token:ID (NAME)`).
    pub fn who(&self) -> String {
        format!("token:{} ({})", self.0.id, self.0.name)
    }

    /// Whether this caller may see and act on a job that `owner` submitted.
    pub fn owns_or_oversees(&self, owner: Option<&str>) -> bool {
        self.0.sees_all_jobs() || owner == Some(self.0.id.as_str())
    }
}

/// Routes open to everyone: liveness for load balancers, the API's description, and the
/// dashboard's page (its data comes from the API, with a token).
fn is_open(path: &str) -> bool {
    matches!(path, "/healthz" | "/openapi.json" | "/" | "/dashboard")
        || path.starts_with("/dashboard/")
}

fn unauthorized(why: &str) -> Response {
    let mut resp = ApiError::new(
        StatusCode::UNAUTHORIZED,
        format!("{why}: this route needs an API token"),
        "send `Authorization: Bearer reel_<id>.<secret>`; the operator creates tokens with `reel token create`",
    )
    .into_response();
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(r#"Bearer realm="reel""#),
    );
    resp
}

/// The bearer string of `Authorization: Bearer …` (the scheme is case-insensitive).
fn bearer(req: &Request) -> Option<&str> {
    bearer_of(req.headers())
}

fn bearer_of(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, rest) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(rest.trim())
}

/// Whether the request on an open route carries a valid token with `read` (which may see
/// the details of a fault: database paths, hosts).
pub(super) async fn may_read_details(state: &AppState, headers: &HeaderMap) -> bool {
    let Some(presented) = bearer_of(headers) else {
        return false;
    };
    let token = match state.tokens().authenticate(presented).await {
        Ok(t) => t,
        Err(_) => state.recent().recall(presented),
    };
    token.is_some_and(|t| t.has(Scope::Read))
}

/// Middleware: authenticate the request's token, check its rate, and record it as the
/// request's [`Caller`].
pub(super) async fn authenticate(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    if is_open(req.uri().path()) {
        return next.run(req).await;
    }
    let Some(presented) = bearer(&req) else {
        return unauthorized("no token");
    };
    let token = match state.tokens().authenticate(presented).await {
        Ok(Some(t)) => {
            state.recent().remember(presented, &t);
            t
        }
        Ok(None) => {
            state.recent().forget(presented);
            return unauthorized("the token is not valid (unknown, wrong or revoked)");
        }
        // The store is down: a token it accepted within the last minute still passes, so
        // monitoring (/metrics says reel_store_up 0) and the job views see the outage.
        Err(e) => match state.recent().recall(presented) {
            Some(t) => t,
            None => return ApiError::from(e).into_response(),
        },
    };
    if let Err(wait) = state.rate().check(&token.id) {
        return super::limits::too_many(&token.id, wait);
    }
    req.extensions_mut().insert(Caller(Arc::new(token)));
    next.run(req).await
}

/// How long a token the store accepted still passes while the store cannot be read.
pub const RECENT_AUTH: Duration = Duration::from_secs(60);

/// Tokens the store accepted lately, by the SHA-256 of the bearer string: used only while the
/// store cannot be read. A revoke takes effect at the next request that reaches the store.
#[derive(Debug, Default)]
pub struct RecentAuth(Mutex<HashMap<[u8; 32], (Token, Instant)>>);

impl RecentAuth {
    fn key(bearer: &str) -> [u8; 32] {
        Sha256::digest(bearer.as_bytes()).into()
    }

    fn remember(&self, bearer: &str, t: &Token) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() > 10_000 {
            m.retain(|_, (_, at)| at.elapsed() < RECENT_AUTH);
        }
        m.insert(Self::key(bearer), (t.clone(), Instant::now()));
    }

    fn forget(&self, bearer: &str) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.remove(&Self::key(bearer));
    }

    fn recall(&self, bearer: &str) -> Option<Token> {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&Self::key(bearer))
            .filter(|(_, at)| at.elapsed() < RECENT_AUTH)
            .map(|(t, _)| t.clone())
    }
}
