//! The `lockgate` binary: `serve` runs the gateway, `run` holds a lock while a command runs, `orders` stores the sales' orders in a database, `openapi` prints the OpenAPI document.

use std::process::ExitCode;

use clap::Parser;
use lockgate::app::{Gateway, shutdown_signal};
use lockgate::config::{Cli, Command};
use lockgate::{http, telemetry};

/// jemalloc, not the system's malloc: it keeps no bookkeeping inside the
/// blocks it hands out, so the parts of each connection's 8 KiB buffers
/// that are never written cost no memory.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings, read when it starts (`_RJEM_MALLOC_CONF` in the
/// environment still overrides them): freed pages go back to the system at
/// once, not after ten seconds. With no background thread, pages freed
/// before a quiet spell (10 000 requests arriving, then waiting) would
/// otherwise stay resident until the next burst of work. Measured with
/// `lockbench waiters --clients 10000` (as `make bench` runs it) and this
/// setting overridden by `_RJEM_MALLOC_CONF`: 154 MiB without it, 127 MiB
/// with it, 154 MiB with a background thread and a 1 s decay instead. It
/// costs a system call (`madvise`) every other request, which did not move
/// `lockbench cycles`' CPU per request (39 µs either way).
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: &[u8; 34] = b"dirty_decay_ms:0,muzzy_decay_ms:0\0";

#[tokio::main]
async fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => err.exit(),
        Err(err) => {
            // One line naming the setting and what is wrong with it.
            let rendered = err.render().to_string();
            eprintln!("{}", rendered.lines().next().unwrap_or("invalid arguments"));
            // `lockgate run` passes its command's status on, and a command
            // may exit 2: its own usage errors say so with EX_USAGE instead.
            let run = std::env::args()
                .nth(1)
                .is_some_and(|command| command == "run");
            return ExitCode::from(if run { lockgate::run::EXIT_USAGE } else { 2 });
        }
    };
    match cli.command {
        Command::Run(args) => lockgate::run::run(*args).await,
        Command::Orders(args) => {
            if args.command.is_none() {
                telemetry::init(args.worker.log_format);
            }
            lockgate::app::orders(*args).await
        }
        Command::Openapi => {
            print!("{}", http::openapi_json());
            ExitCode::SUCCESS
        }
        Command::Serve(config) => {
            telemetry::init(config.log_format);
            // Every waiting request holds a connection open: allow as many as
            // the hard limit permits, not the usual soft limit of 1024.
            match rlimit::increase_nofile_limit(u64::MAX) {
                Ok(limit) => tracing::debug!(limit, "open file limit"),
                Err(err) => tracing::warn!(error = %err, "cannot raise the open file limit"),
            }
            let served = match Gateway::bind(&config).await {
                Ok(gateway) => gateway
                    .serve(shutdown_signal())
                    .await
                    .map_err(|err| err.to_string()),
                Err(err) => Err(err.to_string()),
            };
            match served {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    tracing::error!(error = %err, "lockgate cannot run");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
