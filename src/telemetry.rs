//! Logging: the tracing subscriber, and request spans that never record secrets.

use axum::http::Request;
use tracing::Span;
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber. `RUST_LOG` sets the filter (default `info`).
/// Safe to call more than once; later calls change nothing.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// The span of one request: method and path only. The query is left out
/// because `DELETE /locks/{key}?token=` carries an owner's secret.
pub fn request_span<B>(request: &Request<B>) -> Span {
    tracing::info_span!(
        "request",
        method = %request.method(),
        path = %request.uri().path(),
    )
}
