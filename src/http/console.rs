//! The browser console, `GET /console`: the page and its script and style, built from `console/` and embedded in the binary, so it works offline and behind any proxy.
//!
//! Like Swagger UI at `/docs`, it is a user interface over the API, not a
//! part of it: it is not in the OpenAPI document. Everything it shows it
//! reads through the documented routes.

use axum::Router;
use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use axum::response::IntoResponse;
use axum::routing::get;

use super::state::AppState;

const PAGE: &[u8] = include_bytes!("../../console/dist/index.html");
const SCRIPT: &[u8] = include_bytes!("../../console/dist/console.js");
const STYLE: &[u8] = include_bytes!("../../console/dist/console.css");

/// Nothing but this origin: no request can leave for another host, and no
/// script but the console's own runs.
const POLICY: &str = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; \
                      object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

/// The console's three files.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/console", get(|| served(PAGE, "text/html; charset=utf-8")))
        .route(
            "/console/console.js",
            get(|| served(SCRIPT, "text/javascript; charset=utf-8")),
        )
        .route(
            "/console/console.css",
            get(|| served(STYLE, "text/css; charset=utf-8")),
        )
}

async fn served(body: &'static [u8], content_type: &'static str) -> impl IntoResponse {
    (
        [
            (CONTENT_TYPE, content_type),
            (CONTENT_SECURITY_POLICY, POLICY),
            // A new binary may bring a new console: always asked again
            // (cheap, and never a stale script against a newer API).
            (CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}
