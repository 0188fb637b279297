//! nginx in front of gateways over TLS: terminating TLS for HTTP/2 clients, or passing it through to gateways that check client certificates.

use reqwest::StatusCode;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::helpers::security::*;
use crate::helpers::{Nginx, RedisServer, TestApp};

// Multi-threaded: the curl calls block their thread, and the gateways
// behind nginx run on this test's runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_terminates_tls_for_clients_over_http2() {
    let redis = RedisServer::start_single().await;
    let dir = TempDir::new().unwrap();
    let certs = certificates(dir.path(), &[]);
    let apps = [
        TestApp::spawn(&redis).await,
        TestApp::spawn(&redis).await,
        TestApp::spawn(&redis).await,
    ];
    let nginx = Nginx::start_tls([apps[0].addr, apps[1].addr, apps[2].addr], &certs).await;
    assert!(nginx.url("/").starts_with("https://"));
    // HTTP/2 and HTTP/1.1 by ALPN, to plain-HTTP instances behind it.
    let locks = nginx.url("/locks?prefix=");
    assert_eq!(
        curl(&certs, None, &["--http2"], &locks),
        (0, "2 200".into())
    );
    assert_eq!(
        curl(&certs, None, &["--http1.1"], &locks),
        (0, "1.1 200".into())
    );
    // A lock through it, held and given back.
    let client = tls_client(&certs, None);
    let granted = client
        .post(nginx.url("/locks"))
        .json(&json!({"key": "tls:nginx", "ttl_ms": 10_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(granted.status(), StatusCode::CREATED);
    let body: Value = granted.json().await.unwrap();
    let released = client
        .delete(nginx.url("/locks/tls:nginx"))
        .query(&[("token", body["token"].as_str().unwrap())])
        .send()
        .await
        .unwrap();
    assert_eq!(released.status(), StatusCode::NO_CONTENT);
}

// Multi-threaded: the curl calls block their thread, and the gateways
// behind nginx run on this test's runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_passes_tls_through_to_gateways_that_check_client_certificates() {
    let redis = RedisServer::start_single().await;
    let dir = TempDir::new().unwrap();
    let certs = certificates(dir.path(), &["ops.internal", "billing"]);
    let acl = write(dir.path(), "acl.toml", &two_services());
    let pem = |name: &str| certs.join(name).to_string_lossy().into_owned();
    let flags = [
        "--tls-cert",
        &pem("server.pem"),
        "--tls-key",
        &pem("server-key.pem"),
        "--tls-client-ca",
        &pem("ca.pem"),
        "--acl-file",
        acl.to_str().unwrap(),
    ];
    let apps = [
        TestApp::spawn_with(&redis, &flags).await,
        TestApp::spawn_with(&redis, &flags).await,
        TestApp::spawn_with(&redis, &flags).await,
    ];
    let nginx = Nginx::start_passthrough([apps[0].addr, apps[1].addr, apps[2].addr]).await;
    // The instance sees the client's certificate, so its principal: ops
    // may lock anything, billing only its own keys.
    let ops = tls_client(&certs, Some("ops.internal"));
    let billing = tls_client(&certs, Some("billing"));
    for round in 0..3 {
        let key = format!("jobs:passthrough-{round}");
        let granted = ops
            .post(nginx.url("/locks"))
            .json(&json!({"key": key, "ttl_ms": 10_000}))
            .send()
            .await
            .unwrap();
        assert_eq!(granted.status(), StatusCode::CREATED);
        let refused = billing
            .post(nginx.url("/locks"))
            .json(&json!({"key": key, "ttl_ms": 10_000}))
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    }
    // HTTP/2 by ALPN with the instance itself, through the stream proxy.
    assert_eq!(
        curl(
            &certs,
            Some("ops.internal"),
            &["--http2"],
            &nginx.url("/healthz")
        ),
        (0, "2 200".into())
    );
    // Without a certificate, no handshake.
    assert_ne!(curl(&certs, None, &[], &nginx.url("/healthz")).0, 0);
}
