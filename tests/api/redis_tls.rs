//! TLS to Redis (`rediss://`): a client certificate, a Cluster over TLS, a certificate from another CA refused at start-up.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::helpers::security::*;
use crate::helpers::{RedisServer, TestApp};

/// A waiter on `key` (30 s lease, waiting up to 10 s), answered in a task.
fn tls_waiter(app: &TestApp, key: &str) -> tokio::task::JoinHandle<(StatusCode, Value, Instant)> {
    let request = app
        .http
        .post(app.url("/locks"))
        .json(&json!({"key": key, "ttl_ms": 30_000, "wait_ms": 10_000}));
    tokio::spawn(async move {
        let response = request.send().await.unwrap();
        let answered = Instant::now();
        (response.status(), response.json().await.unwrap(), answered)
    })
}

/// Takes `key`, queues a waiter behind it, releases it: the waiter is
/// granted at once (woken by pub/sub over the same TLS Redis).
async fn take_wait_release(app: &TestApp, key: &str, subscribed: impl AsyncFn() -> bool) {
    let holder = app.take(key, 30_000).await;
    let waiter = tls_waiter(app, key);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !subscribed().await {
        assert!(Instant::now() < deadline, "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let released_at = Instant::now();
    assert_eq!(
        app.release(key, &holder.token).await.status(),
        StatusCode::NO_CONTENT
    );
    let (status, body, answered) = waiter.await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(body["fencing_token"].as_u64().unwrap() > holder.fencing_token);
    // Generous for a loaded machine; a waiter nobody woke would wait its 10 s.
    let woke_after = answered - released_at;
    assert!(
        woke_after < Duration::from_secs(2),
        "woken {woke_after:?} after the release"
    );
    let token = body["token"].as_str().unwrap();
    assert_eq!(
        app.release(key, token).await.status(),
        StatusCode::NO_CONTENT
    );
}

#[tokio::test]
async fn redis_over_tls_with_a_client_certificate_grants_and_wakes_waiters() {
    let dir = TempDir::new().unwrap();
    let certs = certificates(dir.path(), &["gateway"]);
    let redis = RedisServer::start_tls(&certs).await;
    // Redis speaks TLS only, and only to clients with a certificate.
    let url = redis.url();
    let plain = redis::Client::open(url.replace("rediss://", "redis://")).unwrap();
    assert!(plain.get_multiplexed_async_connection().await.is_err());
    let anonymous = redis::Client::build_with_tls(
        url.as_str(),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(std::fs::read(certs.join("ca.pem")).unwrap()),
        },
    )
    .unwrap();
    let refused = async {
        let mut conn = anonymous.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await
    };
    assert!(
        refused.await.is_err(),
        "a client without a certificate was served"
    );

    for pool in ["shared", "checkout"] {
        let app = TestApp::spawn_with(&redis, &["--redis-pool", pool]).await;
        let key = format!("tls:{pool}");
        let channels = format!("lockgate:granted:{{{key}}}:*");
        take_wait_release(&app, &key, async || {
            let subscribed: Vec<String> = redis::cmd("PUBSUB")
                .arg("CHANNELS")
                .arg(&channels)
                .query_async(&mut redis.connection().await)
                .await
                .unwrap();
            !subscribed.is_empty()
        })
        .await;
        assert_eq!(app.get("/readyz").await.status(), StatusCode::OK);
        app.stop().await;
    }
}

#[tokio::test]
async fn a_cluster_over_tls_grants_and_wakes_waiters() {
    let dir = TempDir::new().unwrap();
    let certs = certificates(dir.path(), &["gateway"]);
    let redis = RedisServer::cluster_tls(3, &certs).await;
    let app = TestApp::spawn(&redis).await;
    // One key on each master: every node is reached over TLS.
    for key in redis.one_key_per_master(3).await {
        let channel = format!("lockgate:granted:{{{key}}}:*");
        take_wait_release(&app, &key, async || {
            let mut subscribed = 0;
            for index in 0..3 {
                let channels: Vec<String> = redis::cmd("PUBSUB")
                    .arg("SHARDCHANNELS")
                    .arg(&channel)
                    .query_async(&mut redis.node(index).connection().await)
                    .await
                    .unwrap();
                subscribed += channels.len();
            }
            subscribed > 0
        })
        .await;
    }
    assert_eq!(app.get("/readyz").await.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_redis_certificate_from_another_ca_or_none_of_ours_stops_serve_with_status_78() {
    let dir = TempDir::new().unwrap();
    let certs = certificates(dir.path(), &["gateway"]);
    let other = TempDir::new().unwrap();
    let other_certs = certificates(other.path(), &["gateway"]);
    let redis = RedisServer::start_tls(&certs).await;
    let pem = |certs: &Path, name: &str| certs.join(name).to_string_lossy().into_owned();
    let url = redis.url();
    let plain_url = url.replace("rediss://", "redis://");
    // Serve's flags for Redis at `url`, trusting the CA file `ca`, with the
    // gateway's certificate from the folder `client` when there is one.
    let flags = |url: &str, ca: String, client: Option<&Path>| {
        let mut flags = vec![
            "--redis-url".to_string(),
            url.to_string(),
            "--redis-tls-ca".to_string(),
            ca,
        ];
        if let Some(client) = client {
            flags.extend([
                "--redis-tls-cert".to_string(),
                pem(client, "gateway.pem"),
                "--redis-tls-key".to_string(),
                pem(client, "gateway-key.pem"),
            ]);
        }
        flags
    };
    let cases = [
        // Redis's certificate is not signed by the CA we trust.
        (
            flags(&url, pem(&other_certs, "ca.pem"), Some(&certs)),
            "certificate",
        ),
        // Ours is not signed by the CA Redis trusts.
        (
            flags(&url, pem(&certs, "ca.pem"), Some(&other_certs)),
            "certificate",
        ),
        // None at all, to a Redis that requires one.
        (flags(&url, pem(&certs, "ca.pem"), None), "certificate"),
        (flags(&plain_url, pem(&certs, "ca.pem"), None), "rediss://"),
        (flags(&url, pem(&certs, "missing.pem"), None), "missing.pem"),
    ];
    for (flags, reason) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_lockgate"))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(&flags)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{flags:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(reason), "{flags:?}: {stderr}");
    }
}
