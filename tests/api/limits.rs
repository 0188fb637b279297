//! Limits answered as problems: oversized headers, and requests that outlive the request timeout.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{RedisServer, TestApp, assert_problem};

#[tokio::test]
async fn oversized_headers_are_refused_with_431() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_with(&redis, &["--header-limit-bytes", "4096"]).await;

    let response = app
        .http
        .get(app.url("/healthz"))
        .header("X-Padding", "p".repeat(5_000))
        .send()
        .await
        .unwrap();

    assert_problem(response, 431, "headers-too-large").await;
    let fine = app
        .http
        .get(app.url("/healthz"))
        .header("X-Padding", "p".repeat(1_000))
        .send();
    assert_eq!(fine.await.unwrap().status(), StatusCode::OK);
}

#[tokio::test]
async fn a_request_that_outlives_the_timeout_answers_503_and_keeps_nothing() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_with(&redis, &["--request-timeout-ms", "400"]).await;
    app.take("slow", 1_000).await;

    // The wait outlasts the request timeout; the lease ends meanwhile.
    let started = Instant::now();
    let response = app
        .acquire(json!({"key": "slow", "ttl_ms": 30_000, "wait_ms": 5_000}))
        .await;

    assert!(
        started.elapsed() < Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(response.headers()["retry-after"], "1");
    assert_problem(response, 503, "request-timeout").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    // The ended request was granted nothing: the lock is free.
    assert_problem(app.get("/locks/slow").await, 404, "lock-not-found").await;
}
