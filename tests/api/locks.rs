//! Lock semantics over HTTP: mutual exclusion, token safety, expiry, re-entry.

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{RedisServer, TestApp, assert_problem, command_calls};

const CLIENTS: usize = 50;
const ROUNDS: usize = 20;

/// Each client does `ROUNDS` read-modify-write cycles on a counter in Redis:
/// read it on one connection, pause, write it back +1 on another. Returns the
/// final counter.
async fn count_concurrently(app: Arc<TestApp>, redis: &RedisServer, locked: bool) -> u64 {
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let app = app.clone();
        let mut reader = redis.connection().await;
        let mut writer = redis.connection().await;
        clients.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let token = if locked {
                    Some(take_with_retries(&app, "counter", client).await)
                } else {
                    None
                };
                let value: u64 = reader
                    .get::<_, Option<u64>>("counter")
                    .await
                    .unwrap()
                    .unwrap_or(0);
                // Widen the window a lost update needs.
                tokio::time::sleep(Duration::from_millis(1)).await;
                let () = writer.set("counter", value + 1).await.unwrap();
                if let Some(token) = token {
                    let released = app.release("counter", &token).await;
                    assert_eq!(released.status(), StatusCode::NO_CONTENT);
                }
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    redis.connection().await.get("counter").await.unwrap()
}

/// Takes `key`, waiting on the server and retrying on 409 after a short
/// pause that differs per client.
async fn take_with_retries(app: &TestApp, key: &str, client: usize) -> String {
    loop {
        let response = app
            .acquire(json!({"key": key, "ttl_ms": 10_000, "wait_ms": 1_000}))
            .await;
        match response.status() {
            StatusCode::CREATED => {
                let body: Value = response.json().await.unwrap();
                return body["token"].as_str().unwrap().to_owned();
            }
            StatusCode::CONFLICT => {
                let pause = 2 + (client % 7) as u64;
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            other => panic!("unexpected {other} while taking {key}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_makes_concurrent_read_modify_write_cycles_exact() {
    let redis = RedisServer::start().await;
    let app = Arc::new(TestApp::spawn(&redis).await);

    let counted = count_concurrently(app, &redis, true).await;

    assert_eq!(counted, (CLIENTS * ROUNDS) as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lock_the_same_workload_loses_updates() {
    let redis = RedisServer::start().await;
    let app = Arc::new(TestApp::spawn(&redis).await);

    let counted = count_concurrently(app, &redis, false).await;

    assert!(
        counted < (CLIENTS * ROUNDS) as u64,
        "unlocked clients lost no update ({counted}): the locked test proves nothing"
    );
}

#[tokio::test]
async fn only_the_owner_token_releases_or_extends_and_an_expired_lock_is_gone() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let grant = app.take("orders:7", 300).await;
    let stranger = "0b6e2f4c-3d5a-4f1e-9a8b-7c6d5e4f3a2b";

    let body = assert_problem(app.release("orders:7", stranger).await, 409, "not-owner").await;
    assert_eq!(body["key"], "orders:7");
    assert!(
        !body.to_string().contains(&grant.token),
        "the holder is revealed"
    );
    assert_problem(
        app.extend("orders:7", stranger, 300).await,
        409,
        "not-owner",
    )
    .await;

    let extended = app.extend("orders:7", &grant.token, 200).await;
    assert_eq!(extended.status(), StatusCode::OK);
    let body: Value = extended.json().await.unwrap();
    assert_eq!(body["ttl_ms"], 200);
    assert_eq!(body["fencing_token"], grant.fencing_token);

    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_problem(
        app.release("orders:7", &grant.token).await,
        404,
        "lock-not-found",
    )
    .await;
    assert_problem(
        app.extend("orders:7", &grant.token, 300).await,
        404,
        "lock-not-found",
    )
    .await;
    assert_problem(app.get("/locks/orders:7").await, 404, "lock-not-found").await;
}

#[tokio::test]
async fn the_right_token_releases_and_the_lock_is_free_again() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let grant = app.take("jobs:nightly", 30_000).await;

    let released = app
        .http
        .delete(app.url("/locks/jobs:nightly"))
        .query(&[("token", &grant.token)])
        .send()
        .await
        .unwrap();
    assert_eq!(released.status(), StatusCode::NO_CONTENT);

    assert_problem(app.get("/locks/jobs:nightly").await, 404, "lock-not-found").await;
    app.take("jobs:nightly", 30_000).await;
}

/// A lock nobody waits for or watches pays only for what a plain lock needs:
/// the plain try and release, each one call, a handful of commands inside
/// them, and none of the queue's, events' or many holders' commands. A
/// bound, not a count: the cycle's cost is measured in `make bench`
/// (docs/performance.md); this catches the plain path gone or the full
/// scripts run beside it.
#[tokio::test]
async fn a_plain_cycle_runs_the_plain_functions_alone() {
    let redis = RedisServer::start_single().await;
    let app = TestApp::spawn(&redis).await;
    // A first cycle, so that loading the library is not counted.
    let grant = app.take("jobs:plain", 30_000).await;
    app.release("jobs:plain", &grant.token).await;

    let before = command_calls(&redis).await;
    let grant = app.take("jobs:plain", 30_000).await;
    let released = app.release("jobs:plain", &grant.token).await;
    assert_eq!(released.status(), StatusCode::NO_CONTENT);
    let after = command_calls(&redis).await;
    let ran = |name: &str| after.get(name).unwrap_or(&0) - before.get(name).unwrap_or(&0);

    assert_eq!(ran("fcall"), 2, "two calls, a try and a release: {after:?}");
    // Inside them (9 today: EXISTS, TIME, the fence's SET, HSET, PEXPIREAT;
    // HMGET, EXISTS, DEL, PUBLISH), less the INFO that read the counts.
    let inside: u64 = after
        .keys()
        .filter(|name| !["fcall", "info"].contains(&name.as_str()))
        .map(|name| ran(name))
        .sum();
    assert!(
        (5..=12).contains(&inside),
        "{inside} commands in a plain cycle: {after:?}"
    );
    for unpaid in ["zrank", "zadd", "xadd", "hgetall", "zrangebyscore", "hget"] {
        assert_eq!(ran(unpaid), 0, "{unpaid} ran in a plain cycle: {after:?}");
    }
}

#[tokio::test]
async fn a_lapsed_lease_lets_another_client_take_the_lock() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let first = app.take("reports", 200).await;

    let refused = app.acquire(json!({"key": "reports"})).await;
    let body = assert_problem(refused, 409, "lock-held").await;
    let retry_after_ms = body["retry_after_ms"].as_u64().unwrap();
    assert!((1..=200).contains(&retry_after_ms), "{body}");

    tokio::time::sleep(Duration::from_millis(260)).await;
    let second = app.take("reports", 200).await;
    assert_ne!(second.token, first.token);
    assert!(second.fencing_token > first.fencing_token);
}

#[tokio::test]
async fn a_refusal_says_when_to_retry_in_whole_seconds() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    app.take("batch", 4_500).await;

    let refused = app.acquire(json!({"key": "batch"})).await;
    assert_eq!(refused.headers()["retry-after"], "5");
    let body = assert_problem(refused, 409, "lock-held").await;
    assert!(body["retry_after_ms"].as_u64().unwrap() > 4_000);
}

#[tokio::test]
async fn re_entry_counts_holds_up_and_down_and_keeps_the_fencing_token() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let grant = app.take("tree:root", 30_000).await;
    assert_eq!(grant.holds, 1);

    for holds in 2..=3 {
        let response = app
            .acquire(json!({"key": "tree:root", "token": grant.token, "ttl_ms": 30_000}))
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["holds"], holds);
        assert_eq!(body["fencing_token"], grant.fencing_token);
        assert_eq!(body["token"], grant.token.as_str());
    }
    let inspected: Value = app.get("/locks/tree:root").await.json().await.unwrap();
    assert_eq!(inspected["holds"], 3);
    assert_eq!(inspected["fencing_token"], grant.fencing_token);
    assert!(
        inspected.get("token").is_none(),
        "GET must not reveal the token"
    );

    for holds_left in [2, 1] {
        let response = app.release("tree:root", &grant.token).await;
        assert_eq!(response.status(), StatusCode::OK);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body, json!({"key": "tree:root", "holds": holds_left}));
    }
    assert_eq!(
        app.release("tree:root", &grant.token).await.status(),
        StatusCode::NO_CONTENT
    );
    assert_problem(
        app.release("tree:root", &grant.token).await,
        404,
        "lock-not-found",
    )
    .await;
}

#[tokio::test]
async fn re_entry_with_a_token_that_does_not_hold_the_lock_is_refused() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let holder = app.take("shared", 30_000).await;
    let other = app.take("other", 30_000).await;

    let response = app
        .acquire(json!({"key": "shared", "token": other.token}))
        .await;
    assert_problem(response, 409, "not-owner").await;

    let response = app
        .acquire(json!({"key": "free", "token": holder.token}))
        .await;
    assert_problem(response, 409, "not-owner").await;
}

#[tokio::test]
async fn a_grant_says_where_the_lock_lives_and_when_its_lease_ends() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;

    let response = app
        .acquire(json!({"key": "orders:42", "ttl_ms": 5_000}))
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(response.headers()["location"], "/locks/orders:42");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["key"], "orders:42");
    assert_eq!(body["ttl_ms"], 5_000);
    assert_eq!(body["holds"], 1);
    assert_eq!(body["waited_ms"], 0);
    let (redis_now_s, _): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
    let expires_at_ms = body["expires_at_ms"].as_u64().unwrap();
    let remaining = expires_at_ms.saturating_sub(redis_now_s * 1000);
    assert!((3_000..=6_000).contains(&remaining), "{body}");

    let inspected: Value = app.get("/locks/orders:42").await.json().await.unwrap();
    assert_eq!(inspected["held"], true);
    assert_eq!(inspected["expires_at_ms"], expires_at_ms);
    assert!(inspected["ttl_ms"].as_u64().unwrap() <= 5_000);
}

#[tokio::test]
async fn every_response_names_the_instance_that_served_it() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let grant = app.take("audit", 30_000).await;

    let responses = [
        app.get("/healthz").await,
        app.get("/readyz").await,
        app.get("/locks/audit").await,
        app.acquire(json!({"key": "audit"})).await,
        app.get("/no/such/route").await,
        app.http
            .patch(app.url("/locks/audit"))
            .send()
            .await
            .unwrap(),
        app.http
            .post(app.url("/locks"))
            .body("{}")
            .send()
            .await
            .unwrap(),
        app.release("audit", &grant.token).await,
        app.get("/openapi.json").await,
        app.get("/docs/").await,
    ];
    for response in responses {
        assert_eq!(
            response.headers()["x-instance-id"],
            app.instance_id.as_str(),
            "{} {}",
            response.status(),
            response.url()
        );
    }
}
