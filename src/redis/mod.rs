//! Redis access: one Redis through a pool, or a Redis Cluster; the Lua scripts, and one typed wrapper per script.

mod connection;
pub mod fleet;
mod gate;
pub mod handoff;
pub mod locks;
mod pool;
pub mod pubsub;
pub mod scan;
mod scripts;
pub mod seckill;
pub mod segments;
pub mod sentinel;
pub mod sessions;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use deadpool::Runtime;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use tokio::sync::OnceCell;

use crate::duration::millis;
use crate::metrics::Metrics;
use pool::{ClusterManager, ClusterPool, LeanManager, Pool, PoolError, SharedConnections};
use pubsub::Subscriber;
use sentinel::Primary;
use tls::RedisTls;

pub use connection::Connection;
pub use gate::{Unwritable, WriteGate};
pub use scripts::library;

/// How to reach Redis.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    pub topology: Topology,
    /// How requests get a connection to one Redis.
    pub pool: PoolKind,
    /// Connections: shared by every request, or at most this many checked
    /// out at once.
    pub pool_size: usize,
    /// Bounds connecting, waiting for a pooled connection, and each command,
    /// so a stalled Redis yields a prompt 503 instead of a hung request.
    pub timeout: Duration,
    /// When set, writes that grant, extend or buy wait for replicas.
    pub replication: Option<Replication>,
    /// The CA and client certificate for `rediss://` (else a `rediss://`
    /// URL trusts the system's CAs and presents no certificate).
    pub tls: Option<RedisTls>,
}

/// One Redis, or a Redis Cluster.
#[derive(Debug, Clone)]
pub enum Topology {
    Single {
        url: String,
    },
    /// Seed nodes; the rest of the cluster is discovered from them.
    Cluster {
        nodes: Vec<String>,
    },
}

impl RedisSettings {
    /// The size of the pool of connections a request has to itself: the
    /// `checkout` setting's, or the one kept for replica-confirmed writes
    /// beside shared connections.
    fn checkout_size(&self) -> usize {
        match self.pool {
            PoolKind::Checkout => self.pool_size,
            PoolKind::Shared => CONFIRMING_CONNECTIONS,
        }
    }
}

/// The most replica-confirmed writes in flight at once beside shared
/// connections: each holds a connection while `WAIT` blocks it.
const CONFIRMING_CONNECTIONS: usize = 16;

/// How requests get a connection to one Redis; `make bench` measures both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PoolKind {
    /// `pool_size` multiplexed connections, each shared by any number of
    /// requests, taken in turn with no checkout.
    Shared,
    /// Each request checks a connection out of a pool of `pool_size`, whose
    /// liveness is known without a round trip.
    Checkout,
}

impl PoolKind {
    /// The connections a pool of this kind has unless told otherwise: one
    /// shared connection leaves the most requests' commands in one write.
    pub fn default_size(self) -> usize {
        match self {
            Self::Shared => 1,
            Self::Checkout => 16,
        }
    }
}

/// How many replicas must confirm a write (`WAIT`), and how long to wait.
#[derive(Debug, Clone, Copy)]
pub struct Replication {
    pub replicas: u32,
    pub timeout: Duration,
}

/// A failure to talk to Redis. Clients see 503 `backend-unavailable` (500
/// `internal` for a reply a script may never give: a bug); the cause goes to
/// the log.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("no Redis connection: {0}")]
    Pool(#[from] PoolError),
    #[error("Redis command failed: {0}")]
    Command(#[from] redis::RedisError),
    #[error("{script} replied {reply}, which it never should")]
    UnexpectedReply { script: &'static str, reply: String },
    /// A write that needed its replicas' confirmation did not get it in
    /// time (it stands on the primary, which may yet lose it).
    #[error("too few replicas confirmed the write in time")]
    NotConfirmed,
    /// The data format in use is one this build does not write: no script
    /// runs (see [`WriteGate`]).
    #[error("the data format in use is {}, and this build writes at most {}", .0.format_in_use, .0.writes)]
    Unwritable(Unwritable),
}

impl BackendError {
    /// What failed to give a connection, as `lockgate_redis_errors_total`
    /// counts it: `pool` only when no pooled connection came free in time;
    /// a connection refused or timed out (whichever way connections are
    /// had) as the connection's own error.
    fn kind(&self) -> &'static str {
        match self {
            Self::Pool(PoolError::Backend(err)) | Self::Command(err) => connection::error_kind(err),
            Self::Pool(PoolError::Timeout(_)) => "pool",
            Self::Pool(_) => "connection",
            Self::UnexpectedReply { .. } | Self::NotConfirmed => "server",
            Self::Unwritable(_) => "format",
        }
    }

    /// Whether a TLS handshake with Redis was refused for a certificate
    /// (an untrusted CA, a missing or unknown client certificate): a
    /// setting at fault, which stops the start-up.
    pub fn is_certificate_refusal(&self) -> bool {
        match self {
            Self::Command(err) => tls::is_certificate_refusal(err),
            Self::Pool(err) => tls::is_certificate_refusal(err),
            _ => false,
        }
    }

    /// Whether Redis refused a script for good: it does not compile (`ERR`)
    /// or the user may not run scripts (`NOPERM`). Anything else at start-up
    /// (refused connections, `LOADING` while Redis reads its AOF) passes.
    pub fn is_script_rejection(&self) -> bool {
        use redis::{ErrorKind, ServerErrorKind};
        matches!(
            self,
            Self::Command(err) if matches!(
                err.kind(),
                ErrorKind::Server(ServerErrorKind::ResponseError | ServerErrorKind::NoPerm)
            )
        )
    }
}

/// The gateway's handle on Redis: a pool of multiplexed connections to one
/// Redis, or one shared cluster connection (itself multiplexed per node).
///
/// Cloned for every request that uses it, so it is one shared allocation.
#[derive(Clone)]
pub struct Redis(Arc<RedisState>);

struct RedisState {
    backend: Backend,
    timeout: Duration,
    replication: Option<Replication>,
    tls: Option<RedisTls>,
    metrics: Arc<Metrics>,
    /// Set when the instance joins its fleet; the `orders` worker and the
    /// operator's commands run with none.
    gate: std::sync::OnceLock<Arc<WriteGate>>,
}

enum Backend {
    Single {
        connections: SingleConnections,
        /// Connections a request has to itself: the `checkout` setting's,
        /// and those for replica-confirmed writes (`WAIT` blocks the
        /// connection it runs on).
        checkout: Pool,
        primary: Primary,
    },
    /// A pool would add nothing: the cluster connection multiplexes every
    /// request over one connection per node and reconnects by itself. It is
    /// opened on first use, so the gateway starts while the cluster is down.
    Cluster {
        nodes: Vec<String>,
        client: Box<ClusterClient>,
        connection: OnceCell<ClusterConnection>,
        /// Connections for replica-confirmed writes, when replicas must
        /// confirm them (see [`Redis::confirming_connection`]).
        confirming: Option<ClusterPool>,
    },
}

/// Where requests to one Redis get their connection ([`PoolKind`]).
enum SingleConnections {
    Shared(Box<SharedConnections>),
    Checkout,
}

impl Redis {
    /// Builds the pool (or the cluster client). Nothing connects until the
    /// first command, so the gateway can start, and answer 503, while Redis
    /// is down.
    pub fn new(settings: &RedisSettings, metrics: Arc<Metrics>) -> Result<Self, redis::RedisError> {
        let backend = match &settings.topology {
            Topology::Single { url } => {
                let primary = Primary::from_url(url, settings.tls.as_ref())?;
                let connections = match settings.pool {
                    PoolKind::Shared => {
                        SingleConnections::Shared(Box::new(SharedConnections::new(
                            LeanManager::new(
                                primary.clone(),
                                settings.timeout,
                                settings.tls.clone(),
                            ),
                            settings.pool_size,
                        )))
                    }
                    PoolKind::Checkout => SingleConnections::Checkout,
                };
                Backend::Single {
                    connections,
                    checkout: single_pool(&primary, settings)?,
                    primary,
                }
            }
            Topology::Cluster { nodes } => {
                let client = cluster_client(nodes, settings).build()?;
                let confirming = settings
                    .replication
                    .map(|_| confirming_pool(nodes, settings))
                    .transpose()?;
                Backend::Cluster {
                    client: Box::new(client),
                    nodes: nodes.clone(),
                    connection: OnceCell::new(),
                    confirming,
                }
            }
        };
        Ok(Self(Arc::new(RedisState {
            backend,
            timeout: settings.timeout,
            replication: settings.replication,
            tls: settings.tls.clone(),
            metrics,
            gate: std::sync::OnceLock::new(),
        })))
    }

    /// From now on every script but the fleet's asks `gate` first.
    pub fn gate_scripts(&self, gate: Arc<WriteGate>) {
        let _ = self.0.gate.set(gate);
    }

    /// Starts the instance's subscription task, for waiters and sale resets:
    /// one pub/sub connection to one Redis, or sharded subscriptions on the
    /// cluster nodes that own each channel's slot.
    pub fn subscriber(&self) -> Result<Subscriber, redis::RedisError> {
        let timeout = self.0.timeout;
        match &self.0.backend {
            Backend::Single { primary, .. } => Ok(Subscriber::start(primary.clone(), timeout)),
            Backend::Cluster { nodes, .. } => Ok(Subscriber::start_cluster(
                cluster_builder(nodes, timeout, self.0.tls.as_ref()),
                timeout,
            )),
        }
    }

    /// The command `release.lua` publishes with: a cluster's sharded pub/sub
    /// delivers within the slot's shard, not to every node.
    pub fn publish_command(&self) -> &'static str {
        match self.0.backend {
            Backend::Single { .. } => "PUBLISH",
            Backend::Cluster { .. } => "SPUBLISH",
        }
    }

    /// Whether it is a Redis Cluster (a script sees only one slot's keys).
    pub fn is_cluster(&self) -> bool {
        matches!(self.0.backend, Backend::Cluster { .. })
    }

    /// Whether writes must be confirmed by replicas (`--redis-wait-replicas`).
    pub fn confirms_writes(&self) -> bool {
        self.0.replication.is_some()
    }

    /// The bound on each Redis operation.
    pub fn timeout(&self) -> Duration {
        self.0.timeout
    }

    pub async fn connection(&self) -> Result<Connection, BackendError> {
        let metrics = self.0.metrics.clone();
        let opened = match &self.0.backend {
            Backend::Single {
                connections,
                checkout,
                ..
            } => match connections {
                SingleConnections::Shared(shared) => shared
                    .get()
                    .await
                    .map(|live| Connection::shared(live, metrics))
                    .map_err(BackendError::from),
                // Boxed: deadpool's checkout is some 11 KB of state, which
                // every Redis call's future would otherwise carry.
                SingleConnections::Checkout => Box::pin(checkout.get())
                    .await
                    .map(|object| Connection::pooled(object, metrics))
                    .map_err(BackendError::from),
            },
            Backend::Cluster {
                client, connection, ..
            } => match connection.get() {
                Some(shared) => Ok(Connection::cluster(shared.clone(), metrics)),
                // Boxed, as above: only the first call connects.
                None => Box::pin(connection.get_or_try_init(|| client.get_async_connection()))
                    .await
                    .map(|shared| Connection::cluster(shared.clone(), metrics))
                    .map_err(BackendError::from),
            },
        };
        match opened {
            Ok(conn) => Ok(conn.gated(self.0.gate.get())),
            Err(err) => {
                self.0.metrics.redis_error(err.kind());
                Err(err)
            }
        }
    }

    /// A connection for a write that replicas must confirm (`WAIT`, see
    /// [`Redis::replicated`]): `WAIT` blocks the connection it runs on, so
    /// it is one this request has to itself, out of a pool kept apart from
    /// the connections every other request shares.
    async fn confirming_connection(&self) -> Result<Connection, BackendError> {
        if self.0.replication.is_none() {
            return self.connection().await;
        }
        let metrics = self.0.metrics.clone();
        let leased = match &self.0.backend {
            // Boxed, as in `connection`.
            Backend::Single { checkout, .. } => Box::pin(checkout.get())
                .await
                .map(|object| Connection::pooled(object, metrics)),
            Backend::Cluster {
                confirming: Some(pool),
                ..
            } => Box::pin(pool.get())
                .await
                .map(|object| Connection::cluster_leased(object, metrics)),
            Backend::Cluster {
                confirming: None, ..
            } => return self.connection().await,
        };
        match leased.map_err(BackendError::from) {
            Ok(conn) => Ok(conn.gated(self.0.gate.get())),
            Err(err) => {
                self.0.metrics.redis_error(err.kind());
                Err(err)
            }
        }
    }

    /// Whether a grant from the queue may be made in one write (data
    /// format 2 in use, as the fleet's last beat read it): this instance's
    /// waiters then say they take one outright.
    pub fn grants_outright(&self) -> bool {
        self.0
            .gate
            .get()
            .and_then(|gate| gate.format_in_use())
            .is_some_and(|format| format >= 2)
    }

    /// Runs `write` (a script that may change `key`), on a connection of
    /// its own when replicas must confirm writes; then, if `wrote` says the
    /// reply changed something, waits for the replicas to confirm it.
    /// Returns the reply and whether it stands confirmed: always, when
    /// nothing was written, `confirm` is false, or no confirmation is
    /// configured.
    pub async fn write<T>(
        &self,
        key: &str,
        confirm: bool,
        write: impl AsyncFnOnce(&mut Connection) -> Result<T, BackendError>,
        wrote: impl FnOnce(&T) -> bool,
    ) -> Result<(T, bool), BackendError> {
        let mut conn = if confirm {
            self.confirming_connection().await?
        } else {
            self.connection().await?
        };
        let reply = write(&mut conn).await?;
        let confirmed = !confirm || !wrote(&reply) || self.replicated(&mut conn, key).await?;
        Ok((reply, confirmed))
    }

    /// After a write to `key` on `conn`: whether enough replicas confirmed it
    /// (`WAIT`), when replica confirmation is configured; `true` otherwise.
    async fn replicated(&self, conn: &mut Connection, key: &str) -> Result<bool, BackendError> {
        let Some(replication) = self.0.replication else {
            return Ok(true);
        };
        let timeout_ms = millis(replication.timeout);
        let mut wait = redis::cmd("WAIT");
        wait.arg(replication.replicas).arg(timeout_ms);
        let confirmed: u64 = conn.query_at_key(&wait, key).await?;
        Ok(confirmed >= u64::from(replication.replicas))
    }

    /// Answers whether Redis responds, for `/readyz` (in a cluster, every node).
    pub async fn ping(&self) -> Result<(), BackendError> {
        let mut conn = self.connection().await?;
        redis::cmd("PING").query_async::<()>(&mut conn).await?;
        Ok(())
    }

    /// Loads the library of every script (in a cluster, on every
    /// primary), so one that does not compile stops the start-up.
    pub async fn load_scripts(&self) -> Result<(), BackendError> {
        let mut conn = self.connection().await?;
        scripts::load_library(&mut conn).await
    }

    /// Closes the pools (idle connections are dropped, new requests fail)
    /// and drops the shared connections.
    pub fn close(&self) {
        if let Backend::Single {
            connections,
            checkout,
            ..
        } = &self.0.backend
        {
            checkout.close();
            if let SingleConnections::Shared(shared) = connections {
                shared.close();
            }
        }
    }
}

fn single_pool(primary: &Primary, settings: &RedisSettings) -> Result<Pool, redis::RedisError> {
    let manager = LeanManager::new(primary.clone(), settings.timeout, settings.tls.clone());
    build_pool(manager, settings.checkout_size(), settings.timeout)
}

/// The connections for replica-confirmed writes on a cluster. Their client
/// never retries: a `WAIT` retried after its primary died would be asked
/// of another node, on another connection, which has nothing to wait for
/// and would answer at once as if the write were confirmed.
fn confirming_pool(
    nodes: &[String],
    settings: &RedisSettings,
) -> Result<ClusterPool, redis::RedisError> {
    let client = cluster_client(nodes, settings).retries(0).build()?;
    let manager = ClusterManager::new(client, settings.timeout);
    build_pool(manager, settings.checkout_size(), settings.timeout)
}

/// A deadpool pool of `size` over `manager` (its objects wrapped as `W`),
/// every wait bounded by `timeout`.
fn build_pool<M, W>(
    manager: M,
    size: usize,
    timeout: Duration,
) -> Result<deadpool::managed::Pool<M, W>, redis::RedisError>
where
    M: deadpool::managed::Manager,
    W: From<deadpool::managed::Object<M>>,
{
    deadpool::managed::Pool::<M, W>::builder(manager)
        .max_size(size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(timeout))
        .create_timeout(Some(timeout))
        .recycle_timeout(Some(timeout))
        .build()
        .map_err(|err| {
            redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "cannot build the connection pool",
                err.to_string(),
            ))
        })
}

/// A cluster client with the gateway's timeouts and TLS settings.
fn cluster_client(nodes: &[String], settings: &RedisSettings) -> ClusterClientBuilder {
    cluster_builder(nodes, settings.timeout, settings.tls.as_ref())
}

/// A cluster client with `timeout` on each operation; with TLS settings,
/// every node is reached by TLS with them (`rediss://` seeds alone: the
/// system's CAs).
fn cluster_builder(
    nodes: &[String],
    timeout: Duration,
    tls: Option<&RedisTls>,
) -> ClusterClientBuilder {
    let builder = ClusterClientBuilder::new(nodes.iter().map(String::as_str))
        .connection_timeout(timeout)
        .response_timeout(timeout);
    match tls {
        Some(tls) => builder.certs(tls.certificates()),
        None => builder,
    }
}

/// The error for a Redis operation that ran out of time.
fn timed_out(_: tokio::time::error::Elapsed) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::{ErrorKind, ServerErrorKind};

    fn server_error(kind: ServerErrorKind) -> BackendError {
        BackendError::Command(redis::RedisError::from((
            ErrorKind::Server(kind),
            "from Redis",
        )))
    }

    /// Every Redis call awaits a connection, inline, in the future of the
    /// request that makes it: opening one (or checking one out of
    /// deadpool's pool, some 11 KB of state) is boxed, so that taking an
    /// open one costs those futures (and every copy of them, and each of
    /// 10 000 waiting requests) almost nothing. This bound (a debug
    /// build's future is larger than a release build's) catches an
    /// opening awaited inline again.
    #[test]
    fn taking_a_connection_keeps_a_small_future() {
        fn future_size<F>(_: fn(&'static Redis) -> F) -> usize {
            std::mem::size_of::<F>()
        }
        for (call, size) in [
            ("connection", future_size(Redis::connection)),
            (
                "confirming_connection",
                future_size(Redis::confirming_connection),
            ),
        ] {
            println!("{call}: {size} bytes");
            assert!(size <= 512, "Redis::{call}'s future is {size} bytes");
        }
    }

    #[test]
    fn only_a_refused_script_stops_the_start_up() {
        assert!(server_error(ServerErrorKind::ResponseError).is_script_rejection());
        assert!(server_error(ServerErrorKind::NoPerm).is_script_rejection());
        assert!(!server_error(ServerErrorKind::BusyLoading).is_script_rejection());
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(!BackendError::Command(refused.into()).is_script_rejection());
    }
}
