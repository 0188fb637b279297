//! Redis access: the connection pool, the Lua scripts, and one typed wrapper per script.

pub mod locks;
mod pool;
pub mod pubsub;
mod scripts;
pub mod seckill;

use std::sync::Arc;
use std::time::Duration;

use deadpool::Runtime;

use crate::metrics::Metrics;
use pool::{LeanManager, Pool, PoolError};

pub use pool::Connection;

/// How to reach Redis.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    pub url: String,
    pub pool_size: usize,
    /// Bounds connecting, waiting for a pooled connection, and each command,
    /// so a stalled Redis yields a prompt 503 instead of a hung request.
    pub timeout: Duration,
}

/// A failure to talk to Redis. Clients see 503 `backend-unavailable`; the
/// cause goes to the log.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("no Redis connection: {0}")]
    Pool(#[from] PoolError),
    #[error("Redis command failed: {0}")]
    Command(#[from] redis::RedisError),
    #[error("{script} replied {reply:?}, which it never should")]
    UnexpectedReply {
        script: &'static str,
        reply: Vec<i64>,
    },
}

impl BackendError {
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

/// The gateway's handle on Redis: a pool of multiplexed connections, and
/// what it takes to open the one pub/sub connection.
///
/// Cloned for every request that uses it, so it is one shared allocation.
#[derive(Clone)]
pub struct Redis(Arc<Shared>);

struct Shared {
    pool: Pool,
    client: redis::Client,
    timeout: Duration,
    metrics: Arc<Metrics>,
}

impl Redis {
    /// Builds the pool. Nothing connects until the first command, so the
    /// gateway can start (and answer 503) while Redis is down.
    pub fn new(settings: &RedisSettings, metrics: Arc<Metrics>) -> Result<Self, redis::RedisError> {
        let client = redis::Client::open(settings.url.as_str())?;
        let pool = Pool::builder(LeanManager::new(client.clone(), settings.timeout))
            .max_size(settings.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(settings.timeout))
            .create_timeout(Some(settings.timeout))
            .recycle_timeout(Some(settings.timeout))
            .build()
            .map_err(|err| {
                redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "cannot build the connection pool",
                    err.to_string(),
                ))
            })?;
        Ok(Self(Arc::new(Shared {
            pool,
            client,
            timeout: settings.timeout,
            metrics,
        })))
    }

    /// A client for connections outside the pool (the pub/sub one).
    pub fn client(&self) -> redis::Client {
        self.0.client.clone()
    }

    pub fn timeout(&self) -> Duration {
        self.0.timeout
    }

    pub async fn connection(&self) -> Result<Connection, BackendError> {
        match self.0.pool.get().await {
            Ok(object) => Ok(Connection::new(object, self.0.metrics.clone())),
            Err(err) => {
                self.0.metrics.redis_error("pool");
                Err(err.into())
            }
        }
    }

    /// Answers whether Redis responds, for `/readyz`.
    pub async fn ping(&self) -> Result<(), BackendError> {
        let mut conn = self.connection().await?;
        redis::cmd("PING").query_async::<()>(&mut conn).await?;
        Ok(())
    }

    /// Loads every script, so one that does not compile stops the start-up.
    pub async fn load_scripts(&self) -> Result<(), BackendError> {
        let mut conn = self.connection().await?;
        for script in scripts::ALL {
            script.load(&mut conn).await?;
        }
        Ok(())
    }

    /// Closes the pool: idle connections are dropped, new requests fail.
    pub fn close(&self) {
        self.0.pool.close();
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

    #[test]
    fn only_a_refused_script_stops_the_start_up() {
        assert!(server_error(ServerErrorKind::ResponseError).is_script_rejection());
        assert!(server_error(ServerErrorKind::NoPerm).is_script_rejection());
        assert!(!server_error(ServerErrorKind::BusyLoading).is_script_rejection());
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(!BackendError::Command(refused.into()).is_script_rejection());
    }
}
