//! Redis unreachable: honest 503s, and service resumes by itself when Redis is back.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{RedisServer, TestApp, assert_problem, eventually};

#[tokio::test]
async fn with_redis_down_requests_answer_503_and_recover_without_a_restart() {
    let mut redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let grant = app.take("payments", 60_000).await;

    redis.kill();

    assert_problem(app.get("/readyz").await, 503, "backend-unavailable").await;
    let refused = app.acquire(json!({"key": "other"})).await;
    assert_eq!(refused.headers()["retry-after"], "1");
    let body = assert_problem(refused, 503, "backend-unavailable").await;
    assert!(
        !body["detail"].as_str().unwrap().contains("os error"),
        "{body}"
    );
    assert_problem(app.get("/locks/payments").await, 503, "backend-unavailable").await;
    assert_problem(
        app.release("payments", &grant.token).await,
        503,
        "backend-unavailable",
    )
    .await;
    assert_problem(
        app.extend("payments", &grant.token, 1_000).await,
        503,
        "backend-unavailable",
    )
    .await;
    assert_eq!(app.get("/healthz").await.status(), StatusCode::OK);

    redis.restart().await;

    let ready = eventually(Duration::from_secs(5), || async {
        app.get("/readyz").await.status() == StatusCode::OK
    })
    .await;
    assert!(ready, "/readyz did not recover");
    // The restarted Redis kept nothing, so the lock is free again.
    app.take("payments", 1_000).await;
}

#[tokio::test]
async fn the_gateway_starts_while_redis_is_down_and_serves_once_it_is_up() {
    let mut redis = RedisServer::start().await;
    redis.kill();

    let app = TestApp::spawn(&redis).await;
    assert_problem(
        app.acquire(json!({"key": "early"})).await,
        503,
        "backend-unavailable",
    )
    .await;

    redis.restart().await;
    let served = eventually(Duration::from_secs(5), || async {
        app.acquire(json!({"key": "early"})).await.status() == StatusCode::CREATED
    })
    .await;
    assert!(
        served,
        "the gateway did not start serving once Redis was up"
    );
}

#[tokio::test]
async fn a_script_redis_will_not_compile_counts_as_rejected_so_the_start_up_stops() {
    let redis = RedisServer::start().await;
    let mut conn = redis.connection().await;

    let refused = redis::Script::new("this is not Lua")
        .prepare_invoke()
        .load_async(&mut conn)
        .await
        .unwrap_err();

    assert!(lockgate::redis::BackendError::Command(refused).is_script_rejection());
}

/// The lock scripts live in Redis as one function library; a Redis that
/// lost it (restarted without persistence, `FUNCTION FLUSH`) gets it again
/// from the next request, which is answered as if nothing happened.
#[tokio::test]
async fn a_redis_that_lost_the_lock_library_gets_it_again() {
    let redis = RedisServer::start_single().await;
    let app = TestApp::spawn(&redis).await;
    let held = app.take("kept", 30_000).await;

    let () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();

    let again = app.acquire(json!({"key": "kept"})).await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    assert_eq!(
        app.release("kept", &held.token).await.status(),
        StatusCode::NO_CONTENT
    );
    let libraries: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
    assert_eq!(libraries.len(), 1, "the library was not loaded again");
}
