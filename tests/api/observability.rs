//! What the gateway shows of itself: Prometheus metrics that move by the right amounts, request ids, and logs without secrets.

use std::collections::HashMap;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{GatewayProcess, RedisServer, TestApp, eventually};

/// Every sample of a Prometheus text page, by series (name and labels).
async fn scrape(app: &TestApp) -> HashMap<String, f64> {
    let response = app.get("/metrics").await;
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let text = response.text().await.unwrap();
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            (series.to_owned(), value.parse().unwrap())
        })
        .collect()
}

fn moved(before: &HashMap<String, f64>, after: &HashMap<String, f64>, series: &str) -> f64 {
    after.get(series).copied().unwrap_or(0.0) - before.get(series).copied().unwrap_or(0.0)
}

#[tokio::test]
async fn metrics_count_what_a_workload_did() {
    let mut redis = RedisServer::start().await;
    let app = TestApp::spawn_sale(&redis, &[]).await;
    let before = scrape(&app).await;

    // Locks: 2 new grants, a re-entry, a conflict, a wait that ends in a
    // grant, 2 releases, an extension of a lapsed lease.
    let held = app.take("m:a", 30_000).await;
    app.acquire(json!({"key": "m:a", "token": held.token}))
        .await;
    app.acquire(json!({"key": "m:a"})).await;
    app.release("m:a", &held.token).await;
    let short = app.take("m:b", 150).await;
    let waited = app.acquire(json!({"key": "m:b", "wait_ms": 5_000})).await;
    assert_eq!(waited.status(), StatusCode::CREATED);
    let waited: Value = waited.json().await.unwrap();
    assert!(waited["waited_ms"].as_u64().unwrap() >= 100);
    app.release("m:b", waited["token"].as_str().unwrap()).await;
    assert_eq!(
        app.extend("m:b", &short.token, 100).await.status(),
        StatusCode::NOT_FOUND
    );
    // A sale: one order, one sold out.
    app.reset_sale("m-sale", 1, 1).await;
    for user in ["u1", "u2"] {
        app.buy("m-sale", user, 1, None).await;
    }
    app.get("/no/such/route").await;
    // A waiter shows in the gauge while it waits.
    app.take("m:c", 30_000).await;
    let waiter = {
        let request = app
            .http
            .post(app.url("/locks"))
            .json(&json!({"key": "m:c", "wait_ms": 800}));
        tokio::spawn(async move { request.send().await.unwrap().status() })
    };
    let gauge = eventually(Duration::from_secs(2), || async {
        scrape(&app).await["lockgate_lock_waiters"] == 1.0
    })
    .await;
    assert!(gauge, "the waiter never showed in lockgate_lock_waiters");
    assert_eq!(waiter.await.unwrap(), StatusCode::CONFLICT);

    let after = scrape(&app).await;
    let outcome = |name: &str| {
        moved(
            &before,
            &after,
            &format!("lockgate_lock_outcomes_total{{outcome=\"{name}\"}}"),
        )
    };
    // m:a, m:b, m:b again after waiting, m:c, the reset's sale lock and u1's
    // purchase lock (u2's purchase was answered sold out from memory).
    assert_eq!(outcome("acquired"), 6.0);
    assert_eq!(outcome("reentered"), 1.0);
    assert_eq!(outcome("conflict"), 2.0);
    assert_eq!(outcome("waited"), 1.0);
    // m:a, m:b after waiting, the sale lock, u1's lock.
    assert_eq!(outcome("released"), 4.0);
    assert_eq!(outcome("expired_on_extend"), 1.0);
    assert_eq!(
        moved(&before, &after, "lockgate_lock_wait_seconds_count"),
        2.0
    );
    assert_eq!(after["lockgate_lock_waiters"], 0.0);
    let sale = |name: &str| {
        moved(
            &before,
            &after,
            &format!("lockgate_seckill_outcomes_total{{outcome=\"{name}\"}}"),
        )
    };
    assert_eq!((sale("created"), sale("sold_out")), (1.0, 1.0));
    let requests = |route: &str, method: &str, status: u16| {
        let series = format!(
            "lockgate_http_request_duration_seconds_count{{route=\"{route}\",method=\"{method}\",status=\"{status}\"}}"
        );
        moved(&before, &after, &series)
    };
    assert_eq!(requests("/locks", "POST", 201), 4.0);
    assert_eq!(requests("/locks/{key}/ttl", "PUT", 404), 1.0);
    assert_eq!(requests("/seckill/{sku}/orders", "POST", 201), 1.0);
    assert_eq!(requests("unmatched", "GET", 404), 1.0);
    // A plain try runs acquire_plain.lua; the rest, acquire.lua.
    let acquires: f64 = ["acquire.lua", "acquire_plain.lua"]
        .iter()
        .map(|script| {
            moved(
                &before,
                &after,
                &format!("lockgate_redis_command_duration_seconds_count{{operation=\"{script}\"}}"),
            )
        })
        .sum();
    assert!(acquires >= 8.0, "{acquires} acquire scripts counted");

    // Redis errors are counted, not just answered.
    redis.kill();
    app.acquire(json!({"key": "m:down"})).await;
    let errors = scrape(&app).await;
    let failed: f64 = errors
        .iter()
        .filter(|(series, _)| series.starts_with("lockgate_redis_errors_total"))
        .map(|(_, value)| value)
        .sum();
    assert!(failed >= 1.0, "no Redis error counted");
}

/// A Redis that refuses connections is counted as `connection` errors in
/// both ways of getting a connection, never as the pool's (which means no
/// pooled connection came free in time).
#[tokio::test]
async fn a_refused_connection_counts_as_a_connection_error_in_either_pool_mode() {
    for mode in ["shared", "checkout"] {
        let mut redis = RedisServer::start_single().await;
        let app = TestApp::spawn_with(&redis, &["--redis-pool", mode]).await;
        app.take(&format!("errors:{mode}"), 30_000).await;
        redis.kill();
        for n in 0..3 {
            let refused = app
                .acquire(json!({"key": format!("errors:{mode}:{n}")}))
                .await;
            assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE, "{mode}");
        }
        let counted: HashMap<String, f64> = scrape(&app)
            .await
            .into_iter()
            .filter(|(series, _)| series.starts_with("lockgate_redis_errors_total"))
            .collect();
        let kind = |kind: &str| {
            counted
                .get(&format!("lockgate_redis_errors_total{{kind=\"{kind}\"}}"))
                .copied()
                .unwrap_or(0.0)
        };
        assert!(kind("connection") >= 1.0, "{mode}: {counted:?}");
        assert_eq!(kind("pool"), 0.0, "{mode}: {counted:?}");
    }
}

#[tokio::test]
async fn a_request_id_is_echoed_when_usable_and_made_up_otherwise() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let id_of = |response: &reqwest::Response| {
        response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_owned()
    };

    let given = app
        .http
        .get(app.url("/healthz"))
        .header("X-Request-Id", "trace-4711")
        .send()
        .await
        .unwrap();
    assert_eq!(id_of(&given), "trace-4711");

    let made = id_of(&app.get("/healthz").await);
    assert!(uuid::Uuid::parse_str(&made).is_ok(), "{made}");
    let again = id_of(&app.get("/no/such/route").await);
    assert_ne!(made, again);

    for unusable in ["x".repeat(129), "has space".to_owned()] {
        let response = app
            .http
            .get(app.url("/healthz"))
            .header("X-Request-Id", &unusable)
            .send()
            .await
            .unwrap();
        let id = id_of(&response);
        assert!(
            uuid::Uuid::parse_str(&id).is_ok(),
            "{unusable:?} was kept as {id}"
        );
    }
}

#[tokio::test]
async fn no_token_key_or_secret_reaches_the_logs() {
    let redis = RedisServer::start().await;
    let api_key = "api-key-that-must-not-leak";
    let admin = "admin-token-that-must-not-leak";
    let gateway = GatewayProcess::spawn(
        &redis,
        &[
            "--api-keys",
            api_key,
            "--admin-token",
            admin,
            "--log-format",
            "json",
        ],
        &[("RUST_LOG", "trace")],
    )
    .await;
    let http = &gateway.http;
    let bearer = |key: &str| format!("Bearer {key}");

    let grant = GatewayProcess::granted(
        gateway
            .acquire(&json!({"key": "secret:a"}))
            .header("Authorization", bearer(api_key)),
    )
    .await;
    let token = grant["token"].as_str().unwrap().to_owned();
    gateway
        .acquire(&json!({"key": "secret:a", "token": token}))
        .header("Authorization", bearer(api_key))
        .send()
        .await
        .unwrap();
    http.put(gateway.url("/locks/secret:a/ttl"))
        .header("Authorization", bearer(api_key))
        .json(&json!({"token": token, "ttl_ms": 5_000}))
        .send()
        .await
        .unwrap();
    http.delete(gateway.url("/locks/secret:a"))
        .header("Authorization", bearer(api_key))
        .header("Lock-Token", &token)
        .send()
        .await
        .unwrap();
    http.delete(gateway.url(&format!("/locks/secret:a?token={token}")))
        .header("Authorization", bearer(api_key))
        .send()
        .await
        .unwrap();
    http.delete(gateway.url("/locks/secret:a"))
        .header("Authorization", bearer("a-wrong-key-that-must-not-leak"))
        .send()
        .await
        .unwrap();
    http.put(gateway.url("/seckill/leak"))
        .header("Authorization", bearer(admin))
        .json(&json!({"stock": 1, "per_user_limit": 1}))
        .send()
        .await
        .unwrap();
    // A session's id is a secret too, wherever it is in a request.
    let session: Value = http
        .post(gateway.url("/sessions"))
        .header("Authorization", bearer(api_key))
        .json(&json!({"ttl_ms": 10_000}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let session = session["id"].as_str().unwrap().to_owned();
    http.put(gateway.url(&format!("/sessions/{session}")))
        .header("Authorization", bearer(api_key))
        .send()
        .await
        .unwrap();
    gateway
        .acquire(&json!({"key": "secret:b", "session": session}))
        .header("Authorization", bearer(api_key))
        .send()
        .await
        .unwrap();
    http.delete(gateway.url(&format!("/sessions/{session}")))
        .header("Authorization", bearer(api_key))
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let logs = gateway.logs();
    assert!(
        logs.contains("\"request\""),
        "the run logged no request spans:\n{logs}"
    );
    for secret in [
        token.as_str(),
        session.as_str(),
        api_key,
        admin,
        "a-wrong-key-that-must-not-leak",
    ] {
        assert!(!logs.contains(secret), "{secret} is in the logs");
    }
    // JSON logs: one object per line.
    for line in logs.lines().filter(|line| !line.is_empty()) {
        assert!(
            serde_json::from_str::<Value>(line).is_ok(),
            "not JSON: {line}"
        );
    }
}

#[tokio::test]
async fn text_logs_written_to_a_file_carry_no_colour_codes() {
    let redis = RedisServer::start().await;
    // Its output goes to a file, as under a service manager or `> log`.
    let gateway = GatewayProcess::spawn(&redis, &[], &[("RUST_LOG", "debug")]).await;
    GatewayProcess::granted(gateway.acquire(&json!({"key": "plain"}))).await;

    let logs = gateway.logs();
    assert!(logs.contains("lockgate serving"), "{logs}");
    assert!(!logs.contains('\u{1b}'), "colour codes in the log:\n{logs}");
}

#[tokio::test]
async fn redis_up_and_ready_follow_redis_going_away_and_coming_back() {
    let mut redis = RedisServer::start_single().await;
    let app = TestApp::spawn(&redis).await;
    let gauges = |metrics: &HashMap<String, f64>| {
        (
            metrics.get("lockgate_redis_up").copied(),
            metrics.get("lockgate_ready").copied(),
        )
    };
    assert_eq!(gauges(&scrape(&app).await), (Some(1.0), Some(1.0)));
    assert_eq!(
        scrape(&app).await.get("lockgate_lock_waiters_limit"),
        Some(&20_000.0)
    );

    redis.kill();
    // The next fleet beat (every 2 s) finds Redis gone.
    assert!(
        eventually(Duration::from_secs(8), || async {
            gauges(&scrape(&app).await) == (Some(0.0), Some(0.0))
        })
        .await,
        "{:?}",
        gauges(&scrape(&app).await)
    );
    redis.restart().await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            gauges(&scrape(&app).await) == (Some(1.0), Some(1.0))
        })
        .await,
        "{:?}",
        gauges(&scrape(&app).await)
    );
}
