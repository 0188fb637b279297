//! The connection pool: deadpool over multiplexed connections whose liveness is known without a round trip.
//!
//! deadpool-redis checks every connection with `PING` each time it leaves the
//! pool, which doubles the Redis round trips of a one-script request. Here
//! the pool opens each connection itself and runs its driver task, which
//! ends the moment the socket closes (Redis restarted, the connection was
//! killed): a connection is handed out only while its driver lives. One
//! whose command failed at the connection level (an I/O error, a timeout) is
//! thrown away instead of being returned.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use deadpool::managed::{self, Object, RecycleError, RecycleResult};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ErrorKind, Pipeline, RedisError, RedisFuture, Value,
};

use super::{scripts, timed_out};
use crate::metrics::Metrics;

/// Opens connections to one Redis and tells live ones from dead ones.
pub struct LeanManager {
    client: redis::Client,
    config: AsyncConnectionConfig,
    timeout: Duration,
}

impl LeanManager {
    pub fn new(client: redis::Client, timeout: Duration) -> Self {
        let config = AsyncConnectionConfig::new().set_response_timeout(Some(timeout));
        Self {
            client,
            config,
            timeout,
        }
    }

    async fn open(&self) -> Result<LiveConnection, RedisError> {
        let info = self.client.get_connection_info();
        let settings = info.redis_settings();
        let config = self.config.clone();
        match info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                let stream = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                stream.set_nodelay(true)?;
                let (conn, driver) =
                    MultiplexedConnection::new_with_config(settings, stream, config).await?;
                Ok(LiveConnection::drive(conn, driver))
            }
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(path).await?;
                let (conn, driver) =
                    MultiplexedConnection::new_with_config(settings, stream, config).await?;
                Ok(LiveConnection::drive(conn, driver))
            }
            _ => Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "only redis:// and redis+unix:// URLs are supported",
            ))),
        }
    }
}

/// A multiplexed connection, and whether its driver still runs.
pub struct LiveConnection {
    conn: MultiplexedConnection,
    alive: Arc<AtomicBool>,
}

impl LiveConnection {
    /// Runs the connection's driver, which ends when the socket closes.
    fn drive(
        conn: MultiplexedConnection,
        driver: impl Future<Output = ()> + Send + 'static,
    ) -> Self {
        let alive = Arc::new(AtomicBool::new(true));
        let flag = alive.clone();
        tokio::spawn(async move {
            driver.await;
            flag.store(false, Ordering::Release);
        });
        Self { conn, alive }
    }
}

impl managed::Manager for LeanManager {
    type Type = LiveConnection;
    type Error = RedisError;

    async fn create(&self) -> Result<LiveConnection, RedisError> {
        tokio::time::timeout(self.timeout, self.open())
            .await
            .map_err(timed_out)?
    }

    async fn recycle(
        &self,
        conn: &mut LiveConnection,
        _: &managed::Metrics,
    ) -> RecycleResult<RedisError> {
        if conn.alive.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err(RecycleError::message("the connection was closed"))
        }
    }
}

pub type Pool = managed::Pool<LeanManager>;
pub type PoolError = managed::PoolError<RedisError>;

/// A connection out of the pool. If a command on it fails at the connection
/// level, it is detached when dropped, and the pool opens a fresh one when
/// needed. Every command's latency and failure go to the metrics.
pub struct Connection {
    object: Option<Object<LeanManager>>,
    broken: bool,
    metrics: Arc<Metrics>,
}

impl Connection {
    pub fn new(object: Object<LeanManager>, metrics: Arc<Metrics>) -> Self {
        Self {
            object: Some(object),
            broken: false,
            metrics,
        }
    }
}

impl Connection {
    fn inner(&mut self) -> &mut MultiplexedConnection {
        // `object` is only emptied by `drop`.
        &mut self.object.as_mut().expect("a live pooled connection").conn
    }

    fn note<T>(&mut self, operation: &str, started: Instant, result: &Result<T, RedisError>) {
        self.metrics.redis_command(operation, started.elapsed());
        let Err(err) = result else {
            return;
        };
        let kind = if err.is_timeout() {
            "timeout"
        } else if err.is_unrecoverable_error() {
            "connection"
        } else {
            "server"
        };
        self.metrics.redis_error(kind);
        if kind != "server" {
            self.broken = true;
        }
    }
}

/// A command's name for metrics: a script's file name for `EVALSHA`, else
/// the command in lower case.
fn operation(cmd: &Cmd) -> Cow<'static, str> {
    let mut args = cmd.args_iter().filter_map(|arg| match arg {
        redis::Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let command = args.next().unwrap_or_default();
    if command.eq_ignore_ascii_case(b"evalsha")
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
            let result = self.inner().req_packed_command(cmd).await;
            self.note(&operation(cmd), started, &result);
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
            let result = self.inner().req_packed_commands(cmd, offset, count).await;
            self.note("pipeline", started, &result);
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.object
            .as_ref()
            .map_or(0, |object| object.conn.get_db())
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if self.broken
            && let Some(object) = self.object.take()
        {
            drop(Object::take(object));
        }
    }
}
