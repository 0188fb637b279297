//! Fencing tokens: strictly increasing across release, expiry, gateway and Redis restarts; no state left behind forever.

use std::time::Duration;

use reqwest::StatusCode;

use crate::helpers::{RedisServer, TestApp, eventually};

/// Takes `key` `rounds` times, ending every other lease by release and the
/// rest by expiry; returns the fencing tokens in order.
async fn acquisitions(app: &TestApp, key: &str, rounds: usize) -> Vec<u64> {
    let mut tokens = Vec::with_capacity(rounds);
    for round in 0..rounds {
        if round % 2 == 0 {
            let grant = app.take(key, 30_000).await;
            tokens.push(grant.fencing_token);
            let released = app.release(key, &grant.token).await;
            assert_eq!(released.status(), StatusCode::NO_CONTENT);
        } else {
            let grant = app.take(key, 20).await;
            tokens.push(grant.fencing_token);
            let expired = eventually(Duration::from_secs(2), || async {
                app.get(&format!("/locks/{key}")).await.status() == StatusCode::NOT_FOUND
            })
            .await;
            assert!(expired, "a 20 ms lease did not lapse");
        }
    }
    tokens
}

fn assert_strictly_increasing(tokens: &[u64]) {
    for pair in tokens.windows(2) {
        assert!(
            pair[0] < pair[1],
            "fencing tokens went {} then {}",
            pair[0],
            pair[1]
        );
    }
}

#[tokio::test]
async fn fencing_tokens_increase_across_releases_expiries_and_restarts() {
    let mut redis = RedisServer::start_with_aof().await;
    let app = TestApp::spawn(&redis).await;
    let mut tokens = acquisitions(&app, "ledger", 100).await;
    assert!(tokens[0] > 0);

    app.stop().await;
    let app = TestApp::spawn(&redis).await;
    tokens.extend(acquisitions(&app, "ledger", 4).await);

    redis.restart().await;
    let ready = eventually(Duration::from_secs(5), || async {
        app.get("/readyz").await.status() == StatusCode::OK
    })
    .await;
    assert!(
        ready,
        "the gateway did not reconnect to the restarted Redis"
    );
    tokens.extend(acquisitions(&app, "ledger", 4).await);

    assert_eq!(tokens.len(), 108);
    assert_strictly_increasing(&tokens);
}

#[tokio::test]
async fn the_fence_counter_survives_a_redis_crash_through_the_aof() {
    let mut redis = RedisServer::start_with_aof().await;
    let app = TestApp::spawn(&redis).await;
    let before = app.take("vault", 30_000).await;

    redis.restart().await;

    let mut conn = redis.connection().await;
    let counter: Option<u64> = redis::cmd("GET")
        .arg("lockgate:fence:{vault}")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        counter,
        Some(before.fencing_token),
        "the AOF lost the counter"
    );
    // The lease itself survived too, so the holder still holds it.
    let inspected = app.get("/locks/vault").await;
    assert_eq!(inspected.status(), StatusCode::OK);
}

#[tokio::test]
async fn every_key_the_gateway_writes_expires_once_its_locks_have_ended() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    acquisitions(&app, "cleanup:a", 6).await;
    let reentered = app.take("cleanup:b", 50).await;
    let response = app
        .acquire(serde_json::json!({"key": "cleanup:b", "token": reentered.token, "ttl_ms": 50}))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let extended = app.take("cleanup:c", 50).await;
    assert_eq!(
        app.extend("cleanup:c", &extended.token, 60).await.status(),
        StatusCode::OK
    );
    tokio::time::sleep(Duration::from_millis(150)).await;

    let mut conn = redis.connection().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!keys.is_empty(), "the gateway wrote nothing?");
    for key in keys {
        assert!(key.starts_with("lockgate:"), "{key} is outside the prefix");
        assert!(
            !key.starts_with("lockgate:lock:"),
            "{key} outlived its lease"
        );
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(ttl > 0, "{key} has no expiry (PTTL {ttl})");
    }
}
