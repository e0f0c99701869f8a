//! What one client may cost the service: the `Host` it names, the size of its headers and
//! body, how long a request may take, and how many requests a token may make per second.
//! Connections themselves (how many, how long idle) are limited where they are accepted
//! ([`super::connection`]).
//!
//! Every refusal is a JSON [`super::ErrorBody`] like the API's other errors: 400 for a missing
//! or foreign `Host` (a DNS-rebinding page in a browser names its own host there), 413 for a
//! body over `[serve] max_body_bytes`, 431 for headers over [`MAX_HEADER_BYTES`], 408 for a
//! request that takes longer than `[serve] request_timeout_seconds`, 429 with `Retry-After`
//! past a token's rate.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, AppState};
use reel_queue::config::ServeConfig;

/// Largest request head the service reads (all header names and values together); more is
/// answered 431.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// The names a request's `Host` may carry: `[serve] hosts`, plus the loopback names and the
/// listening address itself.
#[derive(Debug, Clone)]
pub struct AllowedHosts(Vec<String>);

impl AllowedHosts {
    /// From the configuration and the address the service listens on.
    pub fn new(cfg: &ServeConfig, listen: Option<SocketAddr>) -> AllowedHosts {
        let mut names: Vec<String> = cfg.hosts.iter().map(|h| h.to_ascii_lowercase()).collect();
        names.extend(["localhost", "127.0.0.1", "[::1]"].map(String::from));
        if let Some(a) = listen
            && !a.ip().is_unspecified()
        {
            names.push(match a.ip() {
                IpAddr::V4(ip) => ip.to_string(),
                IpAddr::V6(ip) => format!("[{ip}]"),
            });
        }
        names.sort();
        names.dedup();
        AllowedHosts(names)
    }

    /// Whether `host` (a `Host` header value, with or without a port) is one of them.
    pub fn allows(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        let name = match host.rsplit_once(':') {
            // `[::1]:8420` or `name:8420`, not the colons inside a bare `[::1]`.
            Some((n, port)) if !port.contains(']') && port.bytes().all(|b| b.is_ascii_digit()) => {
                n.to_string()
            }
            _ => host,
        };
        self.0.contains(&name)
    }
}

/// Middleware: refuse a request whose `Host` is missing or not one of the service's names, and
/// one whose headers are larger than [`MAX_HEADER_BYTES`].
pub(super) async fn check_host_and_headers(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let head: usize = req
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum();
    if head > MAX_HEADER_BYTES {
        return ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!("the request's headers are {head} bytes, more than {MAX_HEADER_BYTES}"),
            "send smaller headers",
        )
        .into_response();
    }
    // One Host, and an absolute-form request line (`GET http://name/…`) must name an
    // allowed host too: a proxy or a browser may act on either.
    if req.headers().get_all(header::HOST).iter().count() > 1 {
        return ApiError::bad_request(
            "the request has more than one Host header",
            "send one Host header",
        )
        .into_response();
    }
    if let Some(a) = req.uri().authority()
        && !state.hosts().allows(a.as_str())
    {
        return ApiError::bad_request(
            format!("this service does not answer to the host name `{a}`"),
            "call it by one of the names in [serve] hosts, or by its address",
        )
        .into_response();
    }
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.to_string()));
    match host {
        Some(h) if state.hosts().allows(&h) => next.run(req).await,
        Some(h) => ApiError::bad_request(
            format!("this service does not answer to the host name `{h}`"),
            "call it by one of the names in [serve] hosts (the operator adds names there), or by its address",
        )
        .into_response(),
        None => ApiError::bad_request("the request has no Host header", "send a Host header")
            .into_response(),
    }
}

/// Middleware: a request that takes longer than the configured time (a body sent byte by byte,
/// a database that hangs) is answered 408 and its work dropped.
pub(super) async fn request_timeout(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let limit = Duration::from_secs(state.config().serve.request_timeout_seconds.max(1));
    // An upload may take hours: it is bounded by the wait for each piece of its body instead
    // (the same time, see `spool::Spool::receive`).
    if req.method() == axum::http::Method::PUT && req.uri().path().starts_with("/v1/objects/") {
        return next.run(req).await;
    }
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!("the request took longer than {} s", limit.as_secs()),
            "send the request at once, and retry later if the service is busy",
        )
        .into_response(),
    }
}

/// 429 for a token past its rate, with `Retry-After` in whole seconds.
pub(super) fn too_many(token: &str, wait: Duration) -> Response {
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    let mut resp = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        format!("token {token} made more requests than [serve] rate_per_second allows"),
        format!("wait {secs} s (Retry-After) and send fewer requests; poll jobs every few seconds, not in a loop"),
    )
    .into_response();
    if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

/// A token bucket per API token: `rate` requests per second on average, up to `burst` at once.
#[derive(Debug)]
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimiter {
    /// `rate` per second (0: no limit), bursts of `burst`.
    pub fn new(rate: u32, burst: u32) -> RateLimiter {
        RateLimiter {
            rate: rate as f64,
            burst: burst.max(1) as f64,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Take one request from `token`'s bucket, or say how long until one is there.
    pub fn check(&self, token: &str) -> Result<(), Duration> {
        self.check_at(token, Instant::now())
    }

    fn check_at(&self, token: &str, now: Instant) -> Result<(), Duration> {
        if self.rate <= 0.0 {
            return Ok(());
        }
        let mut b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let (level, at) = b.entry(token.to_string()).or_insert((self.burst, now));
        let refill = now.saturating_duration_since(*at).as_secs_f64() * self.rate;
        *level = (*level + refill).min(self.burst);
        *at = now;
        if *level >= 1.0 {
            *level -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - *level) / self.rate))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_allow_loopback_configured_names_and_the_listen_address_only() {
        let cfg = ServeConfig {
            hosts: vec!["Reel.Example.org".into()],
            ..ServeConfig::default()
        };
        let h = AllowedHosts::new(&cfg, "10.1.2.3:8420".parse().ok());
        for ok in [
            "localhost",
            "localhost:8420",
            "127.0.0.1:1",
            "[::1]:8420",
            "[::1]",
            "reel.example.org",
            "REEL.EXAMPLE.ORG:443",
            "10.1.2.3:8420",
        ] {
            assert!(h.allows(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8420",
            "reel.example.org.evil",
            "",
            "10.1.2.4",
        ] {
            assert!(!h.allows(bad), "{bad}");
        }
        // A wildcard listen address is not a name.
        let h = AllowedHosts::new(&cfg, "0.0.0.0:8420".parse().ok());
        assert!(!h.allows("0.0.0.0:8420"));
    }

    #[test]
    fn a_token_bucket_refills_at_its_rate() {
        let r = RateLimiter::new(2, 3);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(r.check_at("a", t0).is_ok());
        }
        let wait = r.check_at("a", t0).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(500),
            "{wait:?}"
        );
        // Another token has its own bucket.
        assert!(r.check_at("b", t0).is_ok());
        // Half a second later one request is back.
        let t1 = t0 + Duration::from_millis(500);
        assert!(r.check_at("a", t1).is_ok());
        assert!(r.check_at("a", t1).is_err());
        // No limit at rate 0.
        let free = RateLimiter::new(0, 1);
        for _ in 0..1000 {
            assert!(free.check_at("a", t0).is_ok());
        }
    }
}
