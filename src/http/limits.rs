//! Request limits answered as problem documents: the size of the headers, and how long a request may take.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// The bounds every request is held to.
#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    /// The most bytes of header names and values together.
    pub header_bytes: usize,
    /// The longest a request may take, its lock wait included.
    pub timeout: Duration,
}

/// Refuses oversized headers (431) and ends requests that outlive the
/// timeout (503). A request ended this way is dropped like one whose client
/// left, so a lock it was granted meanwhile is released.
pub async fn enforce(
    State(limits): State<RequestLimits>,
    request: Request,
    next: Next,
) -> Response {
    let header_bytes: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if header_bytes > limits.header_bytes {
        return ApiError::HeadersTooLarge(limits.header_bytes).into_response();
    }
    tokio::time::timeout(limits.timeout, next.run(request))
        .await
        .unwrap_or_else(|_| ApiError::RequestTimeout.into_response())
}
