//! The live dashboard of `reel serve`: one page, a stylesheet and a script, built into the
//! binary (no toolchain at install), served to anyone at `/` and `/dashboard`. The page holds
//! no data: its script asks the operator for an API token and polls the same API every client
//! uses (`GET /v1/library`, `GET /v1/jobs`) every 5 s with it, so what it shows is exactly what
//! the token may read.
//!
//! Served with a Content-Security-Policy that allows only this origin's script and style and
//! API calls (no inline script, no framing), and `Cache-Control: no-cache` so an upgraded
//! binary's page is picked up at the next load.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

const PAGE: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/dashboard.js");
const STYLE: &str = include_str!("dashboard/dashboard.css");

/// What the page may load: its own script, style and API; nothing inline, no frames.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                      img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

/// `GET /` and `GET /dashboard`: the page.
pub(super) async fn page() -> Response {
    asset(PAGE, "text/html; charset=utf-8")
}

/// `GET /dashboard/dashboard.js`
pub(super) async fn script() -> Response {
    asset(SCRIPT, "text/javascript; charset=utf-8")
}

/// `GET /dashboard/dashboard.css`
pub(super) async fn style() -> Response {
    asset(STYLE, "text/css; charset=utf-8")
}
