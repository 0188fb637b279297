//! `lockgate orders`: the order hand-off as a process of its own, or with `reconcile` the check of the database against Redis.

use std::process::ExitCode;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::shutdown_signal;
use crate::config::{OrdersArgs, OrdersCommand, ReconcileArgs, RedisArgs, WorkerArgs};
use crate::handoff::reconcile::reconcile;
use crate::handoff::store::OrderStore;
use crate::handoff::{Handoff, HandoffSettings};
use crate::metrics::Metrics;
use crate::redis::{PoolKind, Redis, RedisSettings};

/// `lockgate orders`: a hand-off worker until Ctrl-C or SIGTERM, or with
/// `reconcile` the check of the database against Redis.
pub async fn orders_command(args: OrdersArgs) -> ExitCode {
    match args.command {
        Some(OrdersCommand::Reconcile(reconcile_args)) => reconcile_command(reconcile_args).await,
        None => worker_command(args.worker).await,
    }
}

/// Prints a line per sale and epoch; fails (1) when a sale with nothing
/// pending does not match, or (2) when it cannot check.
async fn reconcile_command(args: ReconcileArgs) -> ExitCode {
    let run = async {
        let redis = plain_redis(&args.redis)?;
        let store = OrderStore::existing(&args.database)?;
        let lines = reconcile(&redis, &store, &args.redis.key_prefix, args.sku.as_deref())
            .await
            .map_err(|err| err.to_string())?;
        store.close().await;
        Ok::<_, String>(lines)
    };
    match run.await {
        Ok(lines) => {
            for line in &lines {
                println!("{}", line.render());
            }
            if lines.iter().any(|line| line.matches() == Some(false)) {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(err) => {
            eprintln!("lockgate orders reconcile: {err}");
            ExitCode::from(2)
        }
    }
}

/// Runs a hand-off worker until Ctrl-C or SIGTERM.
async fn worker_command(worker: WorkerArgs) -> ExitCode {
    let started = async {
        let redis = plain_redis(&worker.redis)?;
        if let Err(err) = redis.load_scripts().await {
            if err.is_script_rejection() {
                return Err(err.to_string());
            }
            tracing::warn!(error = %err, "Redis is not ready yet; retrying");
        }
        let store = OrderStore::new(worker.database.as_deref().unwrap_or_default())?;
        let hostname = gethostname::gethostname().to_string_lossy().into_owned();
        let settings: HandoffSettings = worker.handoff.settings(&hostname);
        Ok(Handoff::new(
            redis,
            store,
            &worker.redis.key_prefix,
            settings,
            Arc::new(Metrics::default()),
        ))
    };
    match started.await {
        Ok(handoff) => {
            let stop = CancellationToken::new();
            let stopping = stop.clone();
            tokio::spawn(async move {
                shutdown_signal().await;
                stopping.cancel();
            });
            handoff.run(stop).await;
            ExitCode::SUCCESS
        }
        Err(err) => {
            tracing::error!(error = %err, "the order hand-off cannot run");
            ExitCode::FAILURE
        }
    }
}

/// A Redis handle for a command-line tool: one shared connection.
pub(super) fn plain_redis(args: &RedisArgs) -> Result<Redis, String> {
    let settings = RedisSettings {
        topology: args.topology(),
        pool: PoolKind::Shared,
        pool_size: 1,
        timeout: args.timeout(),
        replication: None,
        tls: args.redis_tls.clone(),
    };
    Redis::new(&settings, Arc::new(Metrics::default())).map_err(|err| err.to_string())
}
