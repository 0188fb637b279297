//! The connection pool: deadpool over multiplexed connections whose liveness is known without a round trip.
//!
//! deadpool-redis checks every connection with `PING` each time it leaves the
//! pool, which doubles the Redis round trips of a one-script request. Here
//! the pool opens each connection itself and runs its driver task, which
//! ends the moment the socket closes (Redis restarted, the connection was
//! killed): a connection is handed out only while its driver lives. One
//! whose command failed at the connection level (an I/O error, a timeout) is
//! thrown away instead of being returned (see `Connection`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadpool::managed::{self, RecycleError, RecycleResult};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, ErrorKind, RedisError};

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

/// Opens cluster connections for writes whose replicas must confirm them:
/// `WAIT` blocks the connection it runs on, so each of these serves one
/// request at a time, apart from the cluster connection all others share.
pub struct ClusterManager {
    client: ClusterClient,
    timeout: Duration,
}

impl ClusterManager {
    pub fn new(client: ClusterClient, timeout: Duration) -> Self {
        Self { client, timeout }
    }
}

impl managed::Manager for ClusterManager {
    type Type = ClusterConnection;
    type Error = RedisError;

    async fn create(&self) -> Result<ClusterConnection, RedisError> {
        tokio::time::timeout(self.timeout, self.client.get_async_connection())
            .await
            .map_err(timed_out)?
    }

    /// The cluster connection mends itself; a broken one is detached (see
    /// `Connection`).
    async fn recycle(
        &self,
        _: &mut ClusterConnection,
        _: &managed::Metrics,
    ) -> RecycleResult<RedisError> {
        Ok(())
    }
}

pub type ClusterPool = managed::Pool<ClusterManager>;

impl LiveConnection {
    pub(super) fn connection(&mut self) -> &mut MultiplexedConnection {
        &mut self.conn
    }

    pub(super) fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}
