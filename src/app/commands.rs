//! The binary's commands, each run to its exit status: `serve`, `run`, `orders`, `acl`, `format`, `config`, `health`, `openapi`.

use std::process::ExitCode;

use super::format::format_command;
use super::handoff::orders_command;
use super::{Gateway, shutdown_signal};
use crate::config::{AclCommand, Cli, Command, Config, ConfigCommand, HealthArgs};
use crate::{http, telemetry};

/// The exit status of a configuration error (sysexits' `EX_CONFIG`).
pub const EX_CONFIG: u8 = 78;

/// Runs the command the command line names.
pub async fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Run(args) => crate::run::run(*args).await,
        Command::ReapGroup(args) => {
            let grace = std::time::Duration::from_millis(args.grace_ms);
            crate::run::reap_group(args.pgid, grace);
            ExitCode::SUCCESS
        }
        Command::Orders(args) => {
            if args.command.is_none() {
                // No traces: nothing is held to be sent at exit.
                telemetry::init(args.worker.log_format, None).shutdown();
            }
            orders_command(*args).await
        }
        Command::Acl(command) => acl(command),
        Command::Format(command) => format_command(*command).await,
        Command::Openapi => {
            print!("{}", http::openapi_json());
            ExitCode::SUCCESS
        }
        Command::Serve(config) => serve(&config).await,
        Command::Health(args) => health(args).await,
        Command::Config(command) => config(command),
    }
}

/// `lockgate config check FILE` (0, or `EX_CONFIG` with the file, line and
/// key) and `lockgate config show [SERVE FLAGS]`.
fn config(command: ConfigCommand) -> ExitCode {
    match command {
        ConfigCommand::Check { file } => match crate::config_file::check(&file) {
            Ok(count) => {
                println!("{}: {count} settings, each valid", file.display());
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("lockgate config check: {err}");
                ExitCode::from(EX_CONFIG)
            }
        },
        ConfigCommand::Show { serve } => match crate::config_file::show(&serve) {
            Ok(lines) => {
                for line in lines {
                    println!("{line}");
                }
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("lockgate config show: {err}");
                ExitCode::from(EX_CONFIG)
            }
        },
    }
}

/// `lockgate health`: 0 when the gateway answers `/readyz` with 200, 1
/// otherwise (not ready, unreachable, a bad CA file), one line each way.
async fn health(args: HealthArgs) -> ExitCode {
    let mut builder =
        reqwest::Client::builder().timeout(std::time::Duration::from_millis(args.timeout_ms));
    if let Some(ca) = &args.ca {
        match crate::tls::client_config(ca, None) {
            Ok(tls) => builder = builder.use_preconfigured_tls(tls),
            Err(err) => {
                eprintln!("lockgate health: {err}");
                return ExitCode::FAILURE;
            }
        }
    }
    let answer = match builder.build() {
        Ok(client) => client.get(&args.url).send().await,
        Err(err) => {
            eprintln!("lockgate health: cannot make an HTTP client: {err}");
            return ExitCode::FAILURE;
        }
    };
    match answer {
        Ok(response) if response.status().is_success() => {
            println!("ready: {}", args.url);
            ExitCode::SUCCESS
        }
        Ok(response) => {
            let status = response.status();
            let body = response.text().await.unwrap_or_default();
            let body: String = body.chars().take(200).collect();
            eprintln!(
                "lockgate health: not ready: {} {status}: {}",
                args.url,
                body.trim()
            );
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("lockgate health: no answer from {}: {err}", args.url);
            ExitCode::FAILURE
        }
    }
}

/// `lockgate acl hash` (an API key on stdin, its SHA-256 hex out) and
/// `lockgate acl check FILE`.
fn acl(command: AclCommand) -> ExitCode {
    match command {
        AclCommand::Hash => {
            let mut key = String::new();
            if let Err(err) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut key) {
                eprintln!("lockgate acl hash: cannot read stdin: {err}");
                return ExitCode::FAILURE;
            }
            // The key as typed or piped, without the line's end.
            let key = key.trim_end_matches(['\n', '\r']);
            println!("{}", crate::acl::api_key_sha256(key));
            ExitCode::SUCCESS
        }
        AclCommand::Check { file } => match crate::acl::Acl::load(&file) {
            Ok(acl) => {
                let count = acl.principals();
                let noun = if count == 1 {
                    "principal"
                } else {
                    "principals"
                };
                println!("{}: {count} {noun}", file.display());
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("{err}");
                ExitCode::FAILURE
            }
        },
    }
}

/// `lockgate serve`: the gateway, until a shutdown signal. A setting at
/// fault is one line naming it and `EX_CONFIG`.
async fn serve(config: &Config) -> ExitCode {
    let instance = config.instance_id(config.listen);
    let traces = config
        .otlp_endpoint
        .as_deref()
        .map(|endpoint| telemetry::Traces {
            endpoint,
            instance: &instance,
        });
    let telemetry = telemetry::init(config.log_format, traces);
    if let Some(endpoint) = &config.otlp_endpoint {
        tracing::info!(to = %telemetry::traces_url(endpoint), "sending traces");
    }
    // Every waiting request holds a connection open: allow as many as the
    // hard limit permits, not the usual soft limit of 1024.
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::debug!(limit, "open file limit"),
        Err(err) => tracing::warn!(error = %err, "cannot raise the open file limit"),
    }
    let served = match Gateway::bind(config).await {
        Ok(gateway) => gateway
            .serve(shutdown_signal())
            .await
            .map_err(|err| err.to_string()),
        Err(err) if err.is_config() => {
            eprintln!("lockgate: {err}");
            return ExitCode::from(EX_CONFIG);
        }
        Err(err) => Err(err.to_string()),
    };
    // The spans still held are sent; the exporter waits for its answer on
    // a thread of its own while the runtime carries the request.
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(error = %err, "lockgate cannot run");
            ExitCode::FAILURE
        }
    }
}
