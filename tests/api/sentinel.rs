//! Redis Sentinel: the gateway reaches the primary a `redis+sentinel://` URL names, and follows a failover, pub/sub included; `rediss+sentinel://` does the same over TLS.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{RedisServer, TestApp, eventually, free_port};

/// One `redis-server --sentinel` watching `primary` as `mymaster`.
struct Sentinel {
    port: u16,
    child: Child,
    _dir: tempfile::TempDir,
    /// Over TLS: the directory of `scripts/make-certs.sh`'s files.
    tls: Option<PathBuf>,
}

impl Sentinel {
    async fn watching(primary: &RedisServer) -> Self {
        Self::start(primary, None).await
    }

    /// A sentinel that speaks TLS only, requires client certificates, and
    /// reaches the (TLS) primary by TLS with `certs`'s server certificate.
    async fn watching_tls(primary: &RedisServer, certs: &Path) -> Self {
        Self::start(primary, Some(certs)).await
    }

    async fn start(primary: &RedisServer, tls: Option<&Path>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let config = dir.path().join("sentinel.conf");
        let listen = match tls {
            Some(certs) => format!(
                "port 0\ntls-port {port}\ntls-cert-file {cert}\ntls-key-file {key}\n\
                 tls-ca-cert-file {ca}\ntls-auth-clients yes\ntls-replication yes\n",
                cert = certs.join("server.pem").display(),
                key = certs.join("server-key.pem").display(),
                ca = certs.join("ca.pem").display(),
            ),
            None => format!("port {port}\n"),
        };
        std::fs::write(
            &config,
            format!(
                "{listen}bind 127.0.0.1\ndir {}\n\
                 sentinel monitor mymaster 127.0.0.1 {} 1\n\
                 sentinel down-after-milliseconds mymaster 1000\n\
                 sentinel failover-timeout mymaster 4000\n",
                dir.path().display(),
                primary.node(0).port
            ),
        )
        .unwrap();
        let child = Command::new("redis-server")
            .arg(&config)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server --sentinel");
        let sentinel = Self {
            port,
            child,
            _dir: dir,
            tls: tls.map(Path::to_path_buf),
        };
        let up = eventually(Duration::from_secs(10), || async {
            sentinel.primary_port().await.is_some()
        })
        .await;
        assert!(up, "the sentinel did not start");
        sentinel
    }

    fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}+sentinel://127.0.0.1:{}/mymaster", self.port)
    }

    async fn connection(&self) -> Option<redis::aio::MultiplexedConnection> {
        let client = match &self.tls {
            Some(certs) => redis::Client::build_with_tls(
                format!("rediss://127.0.0.1:{}", self.port),
                redis::TlsCertificates {
                    client_tls: Some(redis::ClientTlsConfig {
                        client_cert: std::fs::read(certs.join("server.pem")).ok()?,
                        client_key: std::fs::read(certs.join("server-key.pem")).ok()?,
                    }),
                    root_cert: Some(std::fs::read(certs.join("ca.pem")).ok()?),
                },
            ),
            None => redis::Client::open(format!("redis://127.0.0.1:{}", self.port)),
        };
        client.ok()?.get_multiplexed_async_connection().await.ok()
    }

    /// The primary's port as the sentinel has it.
    async fn primary_port(&self) -> Option<u16> {
        let mut conn = self.connection().await?;
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg("mymaster")
            .query_async(&mut conn)
            .await
            .ok()?;
        Some(port)
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `server` says it is a primary.
async fn is_primary(server: &RedisServer) -> bool {
    let mut conn = server.node(0).connection().await;
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    info.contains("role:master")
}

#[tokio::test]
async fn the_gateway_follows_a_sentinel_failover_with_its_waiters() {
    let primary = RedisServer::start_single().await;
    let replica = RedisServer::replica_of(&primary).await;
    let synced = eventually(Duration::from_secs(10), || async {
        let mut conn = replica.node(0).connection().await;
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await
            .unwrap_or_default();
        info.contains("master_link_status:up")
    })
    .await;
    assert!(synced, "the replica did not sync");
    let sentinel = Sentinel::watching(&primary).await;
    let app = TestApp::spawn_reaching(vec!["--redis-url".into(), sentinel.url()], &[]).await;

    let holder = app.take("held-across", 30_000).await;
    let waiter = {
        let url = app.url("/locks");
        tokio::spawn(async move {
            reqwest::Client::new()
                .post(url)
                .json(&json!({"key": "held-across", "ttl_ms": 30_000, "wait_ms": 25_000}))
                .send()
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The sentinel promotes the replica (the old primary becomes its replica).
    let mut conn = sentinel.connection().await.unwrap();
    let _: () = redis::cmd("SENTINEL")
        .arg("FAILOVER")
        .arg("mymaster")
        .query_async(&mut conn)
        .await
        .expect("SENTINEL FAILOVER");
    let promoted = eventually(Duration::from_secs(15), || async {
        sentinel.primary_port().await == Some(replica.node(0).port) && is_primary(&replica).await
    })
    .await;
    assert!(promoted, "the sentinel did not fail over");

    // The release reaches the new primary (a connection to the old one is
    // given up at its READONLY answer, so a retry gets through).
    let released = eventually(Duration::from_secs(10), || async {
        app.release("held-across", &holder.token).await.status() == StatusCode::NO_CONTENT
    })
    .await;
    assert!(released, "the release never reached the new primary");
    // The waiter hears of it through a subscription on the new primary.
    let granted = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .expect("the waiter was never served")
        .unwrap();
    assert_eq!(granted.status(), StatusCode::CREATED);
    let fresh = app
        .acquire(json!({"key": "after-failover", "ttl_ms": 5000}))
        .await;
    assert_eq!(fresh.status(), StatusCode::CREATED);
    app.stop().await;
}

#[tokio::test]
async fn over_tls_the_gateway_asks_the_sentinel_and_reaches_the_primary_with_its_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/make-certs.sh");
    let made = Command::new(script)
        .arg(&certs)
        .arg("gateway")
        .output()
        .unwrap();
    assert!(made.status.success(), "make-certs.sh: {made:?}");
    let primary = RedisServer::start_tls(&certs).await;
    let sentinel = Sentinel::watching_tls(&primary, &certs).await;
    // The primary's own flags name the CA and the gateway's certificate;
    // the URL is the sentinel's.
    let mut flags = primary.gateway_flags();
    flags[1] = sentinel.url();
    let app = TestApp::spawn_reaching(flags, &[]).await;

    let holder = app.take("tls-sentinel", 30_000).await;
    let waiter = {
        let url = app.url("/locks");
        tokio::spawn(async move {
            reqwest::Client::new()
                .post(url)
                .json(&json!({"key": "tls-sentinel", "ttl_ms": 30_000, "wait_ms": 10_000}))
                .send()
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = app.release("tls-sentinel", &holder.token).await;
    assert_eq!(released.status(), StatusCode::NO_CONTENT);
    let granted = tokio::time::timeout(Duration::from_secs(3), waiter)
        .await
        .expect("the waiter was woken")
        .unwrap();
    assert_eq!(granted.status(), StatusCode::CREATED);
}
