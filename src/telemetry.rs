//! Logging: the tracing subscriber, text or JSON (request spans are made in `http::observe`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber, writing to standard output. `RUST_LOG`
/// sets the filter (default `info`). Safe to call more than once; later calls
/// change nothing.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let mut builder = tracing_subscriber::fmt().with_env_filter(filter);
    // A log file or a collector gets plain text. On a terminal the default
    // stays: colours, unless NO_COLOR is set (tracing-subscriber reads it).
    if !std::io::stdout().is_terminal() {
        builder = builder.with_ansi(false);
    }
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
