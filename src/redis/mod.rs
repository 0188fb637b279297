//! Redis access: the connection pool, the Lua scripts, and one typed wrapper per script.

pub mod locks;
mod scripts;

use std::time::Duration;

use deadpool_redis::{Manager, Pool, Runtime};
use redis::AsyncConnectionConfig;

pub use deadpool_redis::Connection;

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
    Pool(#[from] deadpool_redis::PoolError),
    #[error("Redis command failed: {0}")]
    Command(#[from] redis::RedisError),
    #[error("{script} replied {reply:?}, which it never should")]
    UnexpectedReply {
        script: &'static str,
        reply: Vec<i64>,
    },
}

/// The gateway's handle on Redis: a pool of multiplexed connections.
#[derive(Clone)]
pub struct Redis {
    pool: Pool,
}

impl Redis {
    /// Builds the pool. Nothing connects until the first command, so the
    /// gateway can start (and answer 503) while Redis is down.
    pub fn new(settings: &RedisSettings) -> Result<Self, redis::RedisError> {
        let connection = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(settings.timeout))
            .set_response_timeout(Some(settings.timeout));
        let manager = Manager::new_with_config(settings.url.as_str(), connection)?;
        let pool = Pool::builder(manager)
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
        Ok(Self { pool })
    }

    pub async fn connection(&self) -> Result<Connection, BackendError> {
        Ok(self.pool.get().await?)
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
        self.pool.close();
    }
}
