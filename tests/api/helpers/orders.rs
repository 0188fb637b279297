//! The order hand-off's helpers: a `lockgate orders` worker as a child process, `lockgate orders reconcile`, and the rows of the orders database.

use std::process::{Child, Command, Output};

use sqlx::Row;
use sqlx::any::AnyPoolOptions;

use super::{RedisServer, send_signal};

/// A `lockgate orders` worker, with its log in a file.
pub struct Worker {
    child: Child,
    log: tempfile::NamedTempFile,
    /// Its name in the consumer group.
    pub consumer: String,
}

impl Worker {
    /// A worker named `consumer` storing `redis`'s orders into `database`.
    pub fn spawn(redis: &RedisServer, database: &str, consumer: &str, flags: &[&str]) -> Self {
        Self::spawn_through(&redis.gateway_flags(), database, consumer, flags)
    }

    /// [`Worker::spawn`], reaching Redis as `redis_flags` say (through a
    /// proxy, say).
    pub fn spawn_through(
        redis_flags: &[String],
        database: &str,
        consumer: &str,
        flags: &[&str],
    ) -> Self {
        let log = tempfile::NamedTempFile::new().expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_lockgate"))
            .args(["orders", "--database", database, "--consumer", consumer])
            .args(redis_flags)
            .args(flags)
            .env("RUST_LOG", "lockgate=debug")
            .stdout(log.reopen().expect("log file"))
            .stderr(log.reopen().expect("log file"))
            .spawn()
            .expect("spawn lockgate orders");
        Self {
            child,
            log,
            consumer: consumer.to_owned(),
        }
    }

    pub fn kill(&mut self) {
        send_signal(self.child.id(), "-KILL");
        let _ = self.child.wait();
    }

    /// Stops the worker as an operator would (SIGTERM), and waits until it
    /// has exited.
    /// Sends the worker `signal` (`-STOP`, `-CONT`) and leaves it running.
    pub fn signal(&self, signal: &str) {
        send_signal(self.child.id(), signal);
    }

    pub fn stop(&mut self) {
        send_signal(self.child.id(), "-TERM");
        let _ = self.child.wait();
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `lockgate orders reconcile`: its exit code and output.
pub fn reconcile(redis: &RedisServer, database: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lockgate"))
        .args(["orders", "reconcile", "--database", database])
        .args(redis.gateway_flags())
        .output()
        .expect("run lockgate orders reconcile")
}

/// What the database holds of one sale: rows, distinct order ids, units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rows {
    pub rows: i64,
    pub distinct: i64,
    pub units: i64,
}

/// The rows of sale `sku` in `database`.
pub async fn rows(database: &str, sku: &str) -> Rows {
    sqlx::any::install_default_drivers();
    let pool = AnyPoolOptions::new()
        .max_connections(1)
        .connect(database)
        .await
        .expect("connect to the orders database");
    let sql = if database.starts_with("postgres") {
        "SELECT COUNT(*), COUNT(DISTINCT order_id), CAST(COALESCE(SUM(quantity), 0) AS BIGINT) \
         FROM orders WHERE sku = $1"
    } else {
        "SELECT COUNT(*), COUNT(DISTINCT order_id), CAST(COALESCE(SUM(quantity), 0) AS BIGINT) \
         FROM orders WHERE sku = ?1"
    };
    let row = sqlx::query(sql)
        .bind(sku)
        .fetch_one(&pool)
        .await
        .expect("count the rows");
    let rows = Rows {
        rows: row.get(0),
        distinct: row.get(1),
        units: row.get(2),
    };
    pool.close().await;
    rows
}

/// A TCP proxy in front of one address that can stop passing the client's
/// bytes on (they are read and dropped), as a link that loses everything
/// one way: what a process sends then never arrives.
pub struct OneWayProxy {
    pub port: u16,
    dropping: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl OneWayProxy {
    pub async fn start(target: std::net::SocketAddr) -> Self {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let dropping = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = dropping.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(target).await else {
                    continue;
                };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                let flag = flag.clone();
                tokio::spawn(async move {
                    let mut buffer = vec![0; 16 * 1024];
                    while let Ok(read) = client_read.read(&mut buffer).await {
                        if read == 0 {
                            break;
                        }
                        if !flag.load(Ordering::SeqCst)
                            && server_write.write_all(&buffer[..read]).await.is_err()
                        {
                            break;
                        }
                    }
                });
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                });
            }
        });
        Self {
            port,
            dropping,
            task,
        }
    }

    /// From now on, the client's bytes are dropped.
    pub fn drop_client_bytes(&self) {
        self.dropping
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for OneWayProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
