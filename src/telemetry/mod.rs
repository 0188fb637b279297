//! Logging and tracing: the tracing subscriber (text or JSON lines), and, with `--otlp-endpoint`, spans sent by OTLP (request spans are made in `server::observe`).
//!
//! With no endpoint the subscriber is the one it always was: a formatter
//! filtered by `RUST_LOG`, so the spans made only for traces (Redis calls,
//! lock waits, at debug level) are disabled at their call sites and cost
//! next to nothing. With one, an OpenTelemetry layer beside the formatter
//! takes the gateway's spans whatever `RUST_LOG` says, and JSON lines carry
//! the trace and span ids.

mod json;
mod otlp;
pub mod trace_context;

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Metadata;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

pub use otlp::traces_url;

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable text.
    Text,
    /// One JSON object a line.
    Json,
}

/// Whether spans go to a collector: the request path asks before it does
/// any work for a trace (reading `traceparent`, naming the release's
/// trace to the script that hands the lock on).
static TRACING: AtomicBool = AtomicBool::new(false);

/// Whether traces are being sent.
pub fn tracing_on() -> bool {
    TRACING.load(Ordering::Relaxed)
}

/// What [`init`] set up that must be ended at exit: the span exporter,
/// which sends what it still holds when shut down.
#[must_use = "dropping the guard does not send the spans still held; call shutdown"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Sends the spans still held (for [`LAST_SPANS`] at most: a collector
    /// that does not answer does not hold the exit up) and stops the
    /// exporter.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(err) = provider.shutdown_with_timeout(LAST_SPANS)
        {
            tracing::warn!(error = %err, "the last spans were not all sent");
        }
    }
}

/// How long the exit waits for the last spans to be sent.
const LAST_SPANS: std::time::Duration = std::time::Duration::from_secs(2);

/// Who sends the traces: the service's name, version and instance.
pub struct Traces<'a> {
    /// The collector's base URL (`http://collector:4318`).
    pub endpoint: &'a str,
    /// The instance's id (`service.instance.id`).
    pub instance: &'a str,
}

/// Installs the global subscriber, writing to standard output, and with
/// `traces` the exporter to the collector. `RUST_LOG` sets the log filter
/// (default `info`). Safe to call more than once; later calls change
/// nothing. Called inside the Tokio runtime (the exporter sends through it).
pub fn init(format: LogFormat, traces: Option<Traces<'_>>) -> Telemetry {
    let filter = || EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // A log file or a collector gets plain text. On a terminal the default
    // stays: colours, unless NO_COLOR is set (tracing-subscriber reads it).
    let plain = !std::io::stdout().is_terminal();
    let Some(traces) = traces else {
        let mut builder = tracing_subscriber::fmt().with_env_filter(filter());
        if plain {
            builder = builder.with_ansi(false);
        }
        let _ = match format {
            LogFormat::Text => builder.try_init(),
            LogFormat::Json => builder.json().try_init(),
        };
        return Telemetry { provider: None };
    };
    let provider = match otlp::provider(traces.endpoint, traces.instance) {
        Ok(provider) => provider,
        Err(err) => {
            // The endpoint was checked when the settings were read: what
            // fails here is the exporter itself. Logged once, without traces.
            let telemetry = init(format, None);
            tracing::error!(error = %err, "cannot send traces; serving without them");
            return telemetry;
        }
    };
    let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "lockgate");
    let spans = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(filter_fn(traced));
    let mut text = tracing_subscriber::fmt::layer();
    if plain {
        text = text.with_ansi(false);
    }
    let logs = match format {
        LogFormat::Text => text.with_filter(filter()).boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .event_format(json::WithTraceIds::default())
            .with_filter(filter())
            .boxed(),
    };
    if tracing_subscriber::registry()
        .with(spans)
        .with(logs)
        .try_init()
        .is_ok()
    {
        TRACING.store(true, Ordering::Relaxed);
    }
    Telemetry {
        provider: Some(provider),
    }
}

/// What goes into traces: the gateway's own spans, at any level (a Redis
/// call, a lock wait), and warnings and errors, as events of their span.
fn traced(metadata: &Metadata<'_>) -> bool {
    if metadata.is_span() {
        metadata.target().starts_with("lockgate")
    } else {
        *metadata.level() <= tracing::Level::WARN
    }
}
