//! Connections to one Redis: a fixed set of shared multiplexed connections, or a pool to check them out of.
//!
//! The gateway's requests share a few multiplexed connections, taken in
//! turn with no checkout ([`SharedConnections`]): commands of concurrent
//! requests leave in one write and their replies come back in one read,
//! which is what makes it the fastest of the three ways measured by `make
//! bench` (see the README's dependency notes). A connection a request must
//! have to itself (`WAIT` blocks the connection it runs on) comes from the
//! checkout pool ([`Pool`]), which is also the `checkout` setting.
//!
//! Every connection here is opened by [`LeanManager`], which runs its driver
//! task, and the driver ends the moment the socket closes (Redis restarted,
//! the connection was killed): liveness is known without a round trip,
//! where deadpool-redis sends `UNWATCH` and `PING` on every checkout. One
//! whose command failed at the connection level (an I/O error, a timeout) is
//! thrown away (see `Connection`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool::managed::{self, RecycleError, RecycleResult};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, ErrorKind, RedisError};

use super::sentinel::Primary;
use super::timed_out;
use super::tls::RedisTls;
use crate::sync::lock;

/// Opens connections to one Redis and tells live ones from dead ones.
pub struct LeanManager {
    primary: Primary,
    config: AsyncConnectionConfig,
    timeout: Duration,
    tls: Option<RedisTls>,
}

impl LeanManager {
    pub fn new(primary: Primary, timeout: Duration, tls: Option<RedisTls>) -> Self {
        let config = AsyncConnectionConfig::new().set_response_timeout(Some(timeout));
        Self {
            primary,
            config,
            timeout,
            tls,
        }
    }

    async fn open(&self) -> Result<LiveConnection, RedisError> {
        // Asked anew for each connection: after a failover, the new primary.
        let client = self.primary.client(self.timeout).await?;
        let info = client.get_connection_info();
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
            ConnectionAddr::TcpTls { host, port, .. } => {
                let stream = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                stream.set_nodelay(true)?;
                let tls = match &self.tls {
                    Some(tls) => tls.clone(),
                    // rediss:// with no TLS file: the system's CAs.
                    None => RedisTls::from_files(None, None).map_err(|why| {
                        RedisError::from((ErrorKind::InvalidClientConfig, "TLS", why))
                    })?,
                };
                let stream = tls.connect(host, stream).await?;
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
                "only redis://, rediss:// and redis+unix:// URLs are supported",
            ))),
        }
    }
}

/// A multiplexed connection, and whether its driver still runs (cleared
/// too when a command on it failed at the connection level).
#[derive(Clone)]
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
        if conn.is_alive() {
            Ok(())
        } else {
            Err(RecycleError::message("the connection was closed"))
        }
    }
}

pub type Pool = managed::Pool<LeanManager>;

/// A fixed set of multiplexed connections, handed out in turn: a request
/// clones a handle on one (no checkout, no wait), and any number of
/// requests share each. A dead one is reopened by the next request that
/// picks it; only that request waits for the reconnect.
pub struct SharedConnections {
    manager: LeanManager,
    slots: Box<[Slot]>,
    next: AtomicUsize,
    /// Set by `close`: no connection is opened any more.
    closed: AtomicBool,
}

#[derive(Default)]
struct Slot {
    current: Mutex<Option<LiveConnection>>,
    /// Held while the slot reconnects, so one request opens the connection
    /// and the others that picked the slot meanwhile use it.
    opening: tokio::sync::Mutex<()>,
}

impl SharedConnections {
    /// `size` slots (at least one); nothing connects until the first use.
    pub fn new(manager: LeanManager, size: usize) -> Self {
        Self {
            manager,
            slots: (0..size.max(1)).map(|_| Slot::default()).collect(),
            next: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// The next connection in turn, opened first if it is not alive.
    pub async fn get(&self) -> Result<LiveConnection, RedisError> {
        self.open_for_use()?;
        let turn = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        let slot = &self.slots[turn];
        if let Some(live) = slot.live() {
            return Ok(live);
        }
        // Boxed: opening a connection takes kilobytes of state, which every
        // Redis call's future would otherwise carry though it is open.
        Box::pin(self.open(slot)).await
    }

    /// Opens `slot`'s connection, unless a request that picked it too did
    /// meanwhile.
    async fn open(&self, slot: &Slot) -> Result<LiveConnection, RedisError> {
        let timeout = self.manager.timeout;
        let _opening = tokio::time::timeout(timeout, slot.opening.lock())
            .await
            .map_err(timed_out)?;
        if let Some(live) = slot.live() {
            return Ok(live);
        }
        let opened = managed::Manager::create(&self.manager).await?;
        // Closed while it connected: it is not kept.
        self.open_for_use()?;
        *slot.lock() = Some(opened.clone());
        Ok(opened)
    }

    fn open_for_use(&self) -> Result<(), RedisError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(RedisError::from((
                ErrorKind::Client,
                "the Redis connections are closed",
            )));
        }
        Ok(())
    }

    /// Drops every connection; later uses fail, as from a closed pool.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        for slot in &self.slots {
            slot.lock().take();
        }
    }
}

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<LiveConnection>> {
        lock(&self.current)
    }

    fn live(&self) -> Option<LiveConnection> {
        self.lock().as_ref().filter(|live| live.is_alive()).cloned()
    }
}
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

    fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Marks it dead: a command on it failed at the connection level, so
    /// the next request to pick its slot opens a fresh one.
    pub(super) fn discard(&self) {
        self.alive.store(false, Ordering::Release);
    }

    pub(super) fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}
