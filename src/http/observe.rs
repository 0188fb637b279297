//! Per-request observation: the request id, the request's log span, and its metrics.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use crate::metrics::Metrics;

/// The header carrying the request id, accepted from the client (or nginx)
/// and echoed back.
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The longest request id accepted from a client.
const MAX_REQUEST_ID_LEN: usize = 128;

/// Gives the request an id (the client's, if it sent a usable one), runs it
/// in a span carrying that id, method and path (never the query: `?token=`
/// is a secret), echoes the id, and counts the request by route template.
/// Added with `Router::layer`, so the route is known here.
pub async fn observe(
    State(metrics): State<Arc<Metrics>>,
    mut request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let id = request
        .headers()
        .get(&X_REQUEST_ID)
        .filter(|value| usable(value.as_bytes()))
        .cloned()
        .unwrap_or_else(|| {
            HeaderValue::try_from(uuid::Uuid::new_v4().to_string())
                .expect("a UUID is a valid header value")
        });
    request
        .headers_mut()
        .insert(X_REQUEST_ID.clone(), id.clone());
    let route = request.extensions().get::<MatchedPath>().cloned();
    let method = request.method().clone();
    let span = tracing::info_span!(
        "request",
        id = %String::from_utf8_lossy(id.as_bytes()),
        method = %method,
        path = %request.uri().path(),
    );
    let mut response = next.run(request).instrument(span.clone()).await;
    let status = response.status().as_u16();
    let elapsed = started.elapsed();
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    metrics.request(route, method.as_str(), status, elapsed);
    span.in_scope(|| tracing::debug!(status, elapsed_ms = elapsed.as_secs_f64() * 1e3, "answered"));
    response.headers_mut().insert(X_REQUEST_ID.clone(), id);
    response
}

fn usable(id: &[u8]) -> bool {
    !id.is_empty() && id.len() <= MAX_REQUEST_ID_LEN && id.iter().all(u8::is_ascii_graphic)
}
