//! The test's own `redis-server` on a free port (persistence off, its log in a temporary directory), stopped when dropped, with the lock library loaded as the test wants it: scaled to the tick, and perhaps a mutant.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockgate::metrics::Metrics;
use lockgate::redis::{PoolKind, Redis, RedisSettings, Topology};
use tempfile::TempDir;

pub struct RedisServer {
    child: Child,
    _dir: TempDir,
    url: String,
}

impl RedisServer {
    pub async fn start() -> Self {
        loop {
            if let Some(server) = Self::try_start().await {
                return server;
            }
        }
    }

    /// One try, on a port free a moment ago (another process may take it).
    async fn try_start() -> Option<Self> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let binary = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let mut child = Command::new(binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path())
            .arg("--logfile")
            .arg(dir.path().join("redis.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        let url = format!("redis://127.0.0.1:{port}");
        let client = redis::Client::open(url.as_str()).expect("a Redis URL");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if child.try_wait().ok().flatten().is_some() {
                return None;
            }
            if let Ok(mut conn) = client.get_multiplexed_async_connection().await
                && redis::cmd("PING")
                    .query_async::<String>(&mut conn)
                    .await
                    .is_ok()
            {
                return Some(Self {
                    child,
                    _dir: dir,
                    url,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    /// Loads `source` as the lock library (`FUNCTION LOAD REPLACE`): the
    /// wrappers call it by the name its first line gives.
    pub async fn load_library(&self, source: &str) {
        let client = redis::Client::open(self.url.as_str()).expect("a Redis URL");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the test's Redis");
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(source)
            .query_async(&mut conn)
            .await
            .expect("the lock library loads");
    }

    /// The gateway's own client of this Redis (its pool, its wrappers).
    pub fn gateway_redis(&self) -> Redis {
        let settings = RedisSettings {
            topology: Topology::Single {
                url: self.url.clone(),
            },
            pool: PoolKind::Shared,
            pool_size: 2,
            timeout: Duration::from_secs(10),
            replication: None,
            tls: None,
        };
        Redis::new(&settings, Arc::new(Metrics::default())).expect("a Redis client")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
