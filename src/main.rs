//! The `lockgate` binary: `serve` runs the gateway, `run` holds a lock while a command runs, `openapi` prints the OpenAPI document.

use std::process::ExitCode;

use clap::Parser;
use lockgate::app::{Gateway, shutdown_signal};
use lockgate::config::{Cli, Command};
use lockgate::{http, telemetry};

#[tokio::main]
async fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run(args) => lockgate::run::run(*args).await,
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
