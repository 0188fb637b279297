//! W3C trace context: a request's `traceparent` continued, and the trace of the release that granted a waiter carried to the waiter's span as a link.
//!
//! The release names its own span (`00-<trace>-<span>-<flags>`) to the
//! script that hands the lock on, which puts it on the grant message to the
//! waiter's instance, whichever instance that is.

use axum::http::HeaderMap;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry_http::HeaderExtractor;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::tracing_on;

/// Makes `span` (a request's, not yet entered) a child of the client's
/// trace when the request carries a `traceparent`.
pub fn continue_from(span: &Span, headers: &HeaderMap) {
    if !tracing_on() || !headers.contains_key("traceparent") {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

/// The current span as a `traceparent` value, when traces are on.
pub fn current() -> Option<String> {
    if !tracing_on() {
        return None;
    }
    let context = Span::current().context();
    let span = context.span();
    let ids = span.span_context();
    ids.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            ids.trace_id(),
            ids.span_id(),
            ids.trace_flags().to_u8()
        )
    })
}

/// A span of another request, as a `traceparent` names it: small and
/// `Copy`, to travel with a waiter's standing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteSpan {
    trace: [u8; 16],
    span: [u8; 8],
    flags: u8,
}

impl RemoteSpan {
    /// The span a `traceparent` value of version 00 names.
    pub fn parse(traceparent: &str) -> Option<Self> {
        let mut parts = traceparent.split('-');
        let (Some("00"), Some(trace), Some(span), Some(flags), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return None;
        };
        if trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
            return None;
        }
        let remote = Self {
            trace: TraceId::from_hex(trace).ok()?.to_bytes(),
            span: SpanId::from_hex(span).ok()?.to_bytes(),
            flags: u8::from_str_radix(flags, 16).ok()?,
        };
        remote.context().is_valid().then_some(remote)
    }

    fn context(self) -> SpanContext {
        SpanContext::new(
            TraceId::from_bytes(self.trace),
            SpanId::from_bytes(self.span),
            TraceFlags::new(self.flags),
            true,
            TraceState::default(),
        )
    }
}

/// Links `span` to `to` (the release that granted a waiter its place).
pub fn link(span: &Span, to: RemoteSpan) {
    span.add_link(to.context());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_parses_and_anything_else_does_not() {
        let ids = RemoteSpan::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
            .unwrap()
            .context();
        assert_eq!(
            ids.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(ids.span_id().to_string(), "b7ad6b7169203331");
        assert!(ids.is_sampled() && ids.is_remote());
        for bad in [
            "",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",
            "00-0af7651916cd43dd8448eb211c80319z-b7ad6b7169203331-01",
        ] {
            assert!(RemoteSpan::parse(bad).is_none(), "{bad}");
        }
    }
}
