//! The connection pool: deadpool over multiplexed connections whose liveness is known without a round trip.
//!
//! deadpool-redis checks every connection with `PING` each time it leaves the
//! pool, which doubles the Redis round trips of a one-script request. Here
//! the pool opens each connection itself and runs its driver task, which
//! ends the moment the socket closes (Redis restarted, the connection was
//! killed): a connection is handed out only while its driver lives. One
//! whose command failed at the connection level (an I/O error, a timeout) is
//! thrown away instead of being returned.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadpool::managed::{self, Metrics, Object, RecycleError, RecycleResult};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ErrorKind, Pipeline, RedisError, RedisFuture, Value,
};

use super::timed_out;

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

    async fn recycle(&self, conn: &mut LiveConnection, _: &Metrics) -> RecycleResult<RedisError> {
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
/// needed.
pub struct Connection {
    object: Option<Object<LeanManager>>,
    broken: bool,
}

impl From<Object<LeanManager>> for Connection {
    fn from(object: Object<LeanManager>) -> Self {
        Self {
            object: Some(object),
            broken: false,
        }
    }
}

impl Connection {
    fn inner(&mut self) -> &mut MultiplexedConnection {
        // `object` is only emptied by `drop`.
        &mut self.object.as_mut().expect("a live pooled connection").conn
    }

    fn note<T>(&mut self, result: &Result<T, RedisError>) {
        if let Err(err) = result
            && (err.is_unrecoverable_error() || err.is_timeout())
        {
            self.broken = true;
        }
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let result = self.inner().req_packed_command(cmd).await;
            self.note(&result);
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
            let result = self.inner().req_packed_commands(cmd, offset, count).await;
            self.note(&result);
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
