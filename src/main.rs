//! The `lockgate` binary: `serve` runs the gateway, `openapi` prints its OpenAPI document.

use std::process::ExitCode;

use clap::Parser;
use lockgate::app::{Gateway, shutdown_signal};
use lockgate::config::{Cli, Command};
use lockgate::{http, telemetry};

#[tokio::main]
async fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Openapi => {
            print!("{}", http::openapi_json());
            ExitCode::SUCCESS
        }
        Command::Serve(config) => {
            telemetry::init(config.log_format);
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
