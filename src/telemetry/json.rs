//! JSON log lines with the trace and span ids of the span they were written in, for a log shipper to join them to their trace.

use std::fmt;

use opentelemetry::trace::TraceContextExt;
use tracing::{Event, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::fmt::format::{Format, Json, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// tracing-subscriber's own JSON line, with `trace_id` and `span_id` added
/// when the event was written inside a traced span.
pub(super) struct WithTraceIds {
    json: Format<Json>,
}

impl Default for WithTraceIds {
    fn default() -> Self {
        Self {
            json: tracing_subscriber::fmt::format().json(),
        }
    }
}

impl<S, N> FormatEvent<S, N> for WithTraceIds
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = String::new();
        self.json.format_event(ctx, Writer::new(&mut line), event)?;
        let trace = tracing::Span::current().context();
        let span = trace.span();
        let ids = span.span_context();
        // The line is one object and a newline: the ids go before its brace.
        match line.trim_end().strip_suffix('}') {
            Some(object) if ids.is_valid() => writeln!(
                writer,
                "{object},\"trace_id\":\"{}\",\"span_id\":\"{}\"}}",
                ids.trace_id(),
                ids.span_id()
            ),
            _ => writer.write_str(&line),
        }
    }
}
