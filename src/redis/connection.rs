//! A connection for one request: a handle on a shared connection (one Redis, or the cluster's), or one out of a pool.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use deadpool::managed::Object;
use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, ServerErrorKind, Value};
use tracing::{Instrument, Span};

use super::BackendError;
use super::gate::WriteGate;
use super::pool::{ClusterManager, LeanManager, LiveConnection};
use super::scripts;
use crate::metrics::Metrics;
use crate::telemetry;

/// A connection for one request. Every command's latency and failure go to
/// the metrics. A connection whose command failed at the connection level
/// (an I/O error, a timeout) is given up when dropped (detached from its
/// pool, or marked dead in its shared slot), and a fresh one is opened when
/// needed; the cluster connection mends itself.
pub struct Connection {
    link: Link,
    broken: bool,
    metrics: Arc<Metrics>,
    /// What a script asks before it runs, once the instance joined its fleet.
    gate: Option<Arc<WriteGate>>,
}

enum Link {
    /// One of the shared multiplexed connections to one Redis.
    Shared(LiveConnection),
    /// `None` only once `drop` has taken it.
    Pooled(Option<Object<LeanManager>>),
    /// The shared cluster connection; or, with `lease`, one of those kept
    /// apart for replica-confirmed writes, held for this request alone.
    Cluster {
        connection: ClusterConnection,
        lease: Option<Object<ClusterManager>>,
    },
}

impl Connection {
    pub(super) fn shared(live: LiveConnection, metrics: Arc<Metrics>) -> Self {
        Self {
            link: Link::Shared(live),
            broken: false,
            metrics,
            gate: None,
        }
    }

    pub(super) fn pooled(object: Object<LeanManager>, metrics: Arc<Metrics>) -> Self {
        Self {
            link: Link::Pooled(Some(object)),
            broken: false,
            metrics,
            gate: None,
        }
    }

    pub(super) fn cluster(connection: ClusterConnection, metrics: Arc<Metrics>) -> Self {
        Self {
            link: Link::Cluster {
                connection,
                lease: None,
            },
            broken: false,
            metrics,
            gate: None,
        }
    }

    pub(super) fn cluster_leased(object: Object<ClusterManager>, metrics: Arc<Metrics>) -> Self {
        Self {
            link: Link::Cluster {
                connection: (*object).clone(),
                lease: Some(object),
            },
            broken: false,
            metrics,
            gate: None,
        }
    }

    /// Another handle on the same cluster connection, to run commands beside
    /// this one (a pipeline cannot span nodes); `None` with one Redis, where
    /// one pipeline on this connection does better.
    pub(super) fn fork(&self) -> Option<Self> {
        match &self.link {
            Link::Cluster { connection, .. } => Some(
                Self::cluster(connection.clone(), self.metrics.clone()).gated(self.gate.as_ref()),
            ),
            Link::Shared(_) | Link::Pooled(_) => None,
        }
    }

    /// The connection, with the gate its scripts ask (if any).
    pub(super) fn gated(mut self, gate: Option<&Arc<WriteGate>>) -> Self {
        self.gate = gate.cloned();
        self
    }

    /// Whether a script may run (the gate's answer; always, with none).
    pub(super) async fn admit(&mut self) -> Result<(), BackendError> {
        match self.gate.clone() {
            Some(gate) => gate.admit(self).await,
            None => Ok(()),
        }
    }

    fn inner(&mut self) -> &mut (dyn ConnectionLike + Send) {
        match &mut self.link {
            Link::Shared(live) => live.connection(),
            Link::Pooled(object) => object
                .as_mut()
                .expect("a live pooled connection")
                .connection(),
            Link::Cluster { connection, .. } => connection,
        }
    }

    /// Runs `cmd` on the Redis that holds `key`: in a cluster, that key's
    /// primary (for `WAIT`, which is about the writes this connection sent
    /// there); with one Redis, simply on this connection.
    pub async fn query_at_key<T: redis::FromRedisValue>(
        &mut self,
        cmd: &Cmd,
        key: &str,
    ) -> Result<T, RedisError> {
        let Link::Cluster { connection, .. } = &mut self.link else {
            return cmd.query_async(self).await;
        };
        let route = Route::with_slot(Slot::for_key(key), SlotAddr::Master);
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
        let started = Instant::now();
        let operation = operation(cmd);
        let span = call_span(&operation);
        // An error reply comes back as a value: made the error it is.
        let result = connection
            .route_command(cmd.clone(), routing)
            .instrument(span.clone())
            .await
            .and_then(Value::extract_error);
        self.note(operation, started, &span, &result);
        Ok(redis::from_redis_value(result?)?)
    }

    /// The primaries behind this connection, in a stable order: one Redis
    /// (`None`: this connection's own), or every master of a cluster, by
    /// address.
    pub async fn primaries(&mut self) -> Result<Vec<Option<(String, u16)>>, RedisError> {
        let Link::Cluster { .. } = &self.link else {
            return Ok(vec![None]);
        };
        // CLUSTER SLOTS: per range of slots, its start and end, then the
        // master's [host, port, id, ...], then the replicas'.
        let ranges: Vec<Vec<Value>> = redis::cmd("CLUSTER").arg("SLOTS").query_async(self).await?;
        let mut masters: Vec<(String, u16)> = ranges
            .iter()
            .filter_map(|range| match range.get(2)? {
                Value::Array(node) => {
                    let host: String = redis::from_redis_value_ref(node.first()?).ok()?;
                    let port: u16 = redis::from_redis_value_ref(node.get(1)?).ok()?;
                    Some((host, port))
                }
                _ => None,
            })
            .collect();
        masters.sort();
        masters.dedup();
        Ok(masters.into_iter().map(Some).collect())
    }

    /// Runs `cmd` on one primary, as [`Connection::primaries`] names it.
    pub async fn query_on<T: redis::FromRedisValue>(
        &mut self,
        primary: &Option<(String, u16)>,
        cmd: &Cmd,
    ) -> Result<T, RedisError> {
        let (Link::Cluster { connection, .. }, Some((host, port))) = (&mut self.link, primary)
        else {
            return cmd.query_async(self).await;
        };
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
            host: host.clone(),
            port: *port,
        });
        let started = Instant::now();
        let operation = operation(cmd);
        let span = call_span(&operation);
        // An error reply comes back as a value: made the error it is.
        let result = connection
            .route_command(cmd.clone(), routing)
            .instrument(span.clone())
            .await
            .and_then(Value::extract_error);
        self.note(operation, started, &span, &result);
        Ok(redis::from_redis_value(result?)?)
    }

    fn note<T>(
        &mut self,
        operation: Cow<'static, str>,
        started: Instant,
        span: &Span,
        result: &Result<T, RedisError>,
    ) {
        self.metrics.redis_command(operation, started.elapsed());
        let Err(err) = result else {
            return;
        };
        span.record("otel.status_code", "ERROR");
        let kind = error_kind(err);
        self.metrics.redis_error(kind);
        // A primary demoted by a failover answers READONLY: the connection
        // is given up, and the next one goes where Sentinel says.
        let demoted = err.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly);
        if kind != "server" || demoted {
            self.broken = true;
        }
    }
}

/// The span of one Redis call, for traces: only when traces are on and the
/// call is made for a request (the background's beats and sweeps, several
/// a second, would each be a trace of their own), at debug level.
fn call_span(operation: &str) -> Span {
    if !telemetry::tracing_on() || Span::current().is_none() {
        return Span::none();
    }
    tracing::debug_span!(
        "redis",
        otel.name = %format_args!("redis {operation}"),
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        db.system.name = "redis",
        db.operation.name = %operation,
    )
}

/// A command's name for metrics: a script's file name for `EVALSHA` and
/// `FCALL`, else the command in lower case.
fn operation(cmd: &Cmd) -> Cow<'static, str> {
    let mut args = cmd.args_iter().filter_map(|arg| match arg {
        redis::Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let command = args.next().unwrap_or_default();
    if (command.eq_ignore_ascii_case(b"evalsha") || command.eq_ignore_ascii_case(b"fcall"))
        && let Some(name) = args.next().and_then(scripts::name_of)
    {
        return Cow::Borrowed(name);
    }
    Cow::Owned(String::from_utf8_lossy(command).to_ascii_lowercase())
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let started = Instant::now();
            let operation = operation(cmd);
            let span = call_span(&operation);
            let result = self
                .inner()
                .req_packed_command(cmd)
                .instrument(span.clone())
                .await;
            self.note(operation, started, &span, &result);
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let started = Instant::now();
            let span = call_span("pipeline");
            let result = self
                .inner()
                .req_packed_commands(cmd, offset, count)
                .instrument(span.clone())
                .await;
            self.note(Cow::Borrowed("pipeline"), started, &span, &result);
            result
        })
    }

    fn get_db(&self) -> i64 {
        match &self.link {
            Link::Shared(live) => live.get_db(),
            Link::Pooled(object) => object.as_ref().map_or(0, |object| object.get_db()),
            Link::Cluster { connection, .. } => connection.get_db(),
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if !self.broken {
            return;
        }
        match &mut self.link {
            Link::Shared(live) => live.discard(),
            Link::Pooled(object) => {
                if let Some(object) = object.take() {
                    drop(Object::take(object));
                }
            }
            Link::Cluster { lease, .. } => {
                if let Some(object) = lease.take() {
                    drop(Object::take(object));
                }
            }
        }
    }
}

/// What failed, as `lockgate_redis_errors_total` counts it: `timeout`,
/// `connection` (refused, reset, closed) or `server` (Redis answered an
/// error).
pub(super) fn error_kind(err: &RedisError) -> &'static str {
    if err.is_timeout() {
        "timeout"
    } else if err.is_unrecoverable_error() {
        "connection"
    } else {
        "server"
    }
}
