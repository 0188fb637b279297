//! Replica-confirmed grants: with a replica, grants, renewals and purchases are confirmed; with it frozen, a grant is undone and answered 503.

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{RedisServer, TestApp, assert_problem, eventually, send_signal};

/// A primary with one replica that has caught up and acknowledges writes.
async fn primary_and_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::start().await;
    let mut conn = primary.node(0).connection().await;
    // Redis 7 would otherwise wait 5 s before the first full sync.
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("repl-diskless-sync-delay")
        .arg(0)
        .query_async(&mut conn)
        .await
        .unwrap();
    let replica = RedisServer::replica_of(&primary).await;
    let synced = eventually(Duration::from_secs(10), || async {
        let mut conn = primary.node(0).connection().await;
        let () = redis::cmd("SET")
            .arg("sync-probe")
            .arg(1)
            .query_async(&mut conn)
            .await
            .unwrap();
        let confirmed: u64 = redis::cmd("WAIT")
            .arg(1)
            .arg(200)
            .query_async(&mut conn)
            .await
            .unwrap();
        confirmed == 1
    })
    .await;
    assert!(synced, "the replica did not sync");
    (primary, replica)
}

/// A gateway whose writes one replica must confirm within `timeout_ms`.
async fn confirming_gateway(primary: &RedisServer, timeout_ms: &str) -> TestApp {
    let flags = [
        "--redis-wait-replicas",
        "1",
        "--redis-wait-timeout-ms",
        timeout_ms,
    ];
    TestApp::spawn_sale(primary, &flags).await
}

#[tokio::test]
async fn with_its_replica_up_every_write_is_confirmed_and_answered() {
    let (primary, _replica) = primary_and_replica().await;
    let app = confirming_gateway(&primary, "500").await;

    let grant = app.take("confirmed", 30_000).await;
    assert_eq!(
        app.extend("confirmed", &grant.token, 10_000).await.status(),
        StatusCode::OK
    );
    let reentered = app
        .acquire(json!({"key": "confirmed", "token": grant.token}))
        .await;
    assert_eq!(reentered.status(), StatusCode::OK);
    app.reset_sale("rep", 5, 5).await;
    let bought = app
        .post_json("/seckill/rep/orders", &json!({"user_id": "u"}))
        .await;
    assert_eq!(bought.status(), StatusCode::CREATED);
}

#[tokio::test]
async fn with_its_replica_frozen_a_grant_is_undone_and_answered_503() {
    let (primary, replica) = primary_and_replica().await;
    let app = confirming_gateway(&primary, "200").await;
    let held = app.take("held", 30_000).await;
    app.reset_sale("rep", 5, 5).await;

    send_signal(replica.node(0).pid(), "-STOP");

    let refused = app.acquire(json!({"key": "unconfirmed"})).await;
    let body = assert_problem(refused, 503, "not-replicated").await;
    assert_eq!(body["key"], "unconfirmed");
    // Undone: nothing is left behind on the primary.
    assert_problem(app.get("/locks/unconfirmed").await, 404, "lock-not-found").await;
    let exists: bool = redis::cmd("EXISTS")
        .arg("lockgate:lock:{unconfirmed}")
        .query_async(&mut primary.node(0).connection().await)
        .await
        .unwrap();
    assert!(!exists);
    // A re-entry is given back too; an extension and a purchase stand on the
    // primary, and say so.
    let reentry = app
        .acquire(json!({"key": "held", "token": held.token}))
        .await;
    assert_problem(reentry, 503, "not-replicated").await;
    let state: Value = app.get("/locks/held").await.json().await.unwrap();
    assert_eq!(state["holds"], 1);
    assert_problem(
        app.extend("held", &held.token, 20_000).await,
        503,
        "not-replicated",
    )
    .await;
    let buy_once = || {
        app.http
            .post(app.url("/seckill/rep/orders"))
            .header("Idempotency-Key", "frozen-1")
            .json(&json!({"user_id": "u"}))
            .send()
    };
    assert_problem(buy_once().await.unwrap(), 503, "not-replicated").await;
    // Retried with the same key while the replica is still frozen: the
    // order still stands on the primary alone, so the replay says so too.
    assert_problem(buy_once().await.unwrap(), 503, "not-replicated").await;

    send_signal(replica.node(0).pid(), "-CONT");
    let served = eventually(Duration::from_secs(5), || async {
        app.acquire(json!({"key": "unconfirmed"})).await.status() == StatusCode::CREATED
    })
    .await;
    assert!(
        served,
        "grants were not confirmed again once the replica was back"
    );
    // The purchase did happen: the same key replays it.
    assert_eq!(buy_once().await.unwrap().status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_cluster_waiting_for_a_replica_stalls_no_other_request_to_its_node() {
    let mut redis = RedisServer::cluster(3).await;
    redis.add_cluster_replica(0).await;
    // Two locks on the master whose replica is frozen below.
    let [key, other]: [String; 2] = redis.keys_on_master(0, 2).await.try_into().unwrap();
    let app = Arc::new(
        TestApp::spawn_with(
            &redis,
            &[
                "--redis-wait-replicas",
                "1",
                "--redis-wait-timeout-ms",
                "1500",
            ],
        )
        .await,
    );
    app.take(&key, 30_000).await;
    let held = app.take(&format!("{key}-free"), 100).await;
    drop(held);

    // The replica freezes: a grant on its master waits the whole timeout
    // for it (WAIT), then is undone.
    send_signal(redis.node(3).pid(), "-STOP");
    let granting = {
        let app = app.clone();
        tokio::spawn(async move { app.acquire(json!({"key": other})).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Meanwhile another request to the same master is answered at once.
    let started = std::time::Instant::now();
    let inspected = app.get(&format!("/locks/{key}")).await;
    let took = started.elapsed();
    let refused = granting.await.unwrap();
    send_signal(redis.node(3).pid(), "-CONT");

    assert_eq!(inspected.status(), StatusCode::OK);
    assert!(
        took < Duration::from_millis(500),
        "a read waited {took:?} behind another request's WAIT"
    );
    assert_problem(refused, 503, "not-replicated").await;
}

/// A streamed lock's renewals must be confirmed too: with its replica
/// frozen, the stream is not told `renewed` for a lease a failover could
/// lose, and it ends `lost` before the last confirmed lease would.
#[tokio::test]
async fn with_its_replica_frozen_a_streamed_lock_is_renewed_no_more() {
    let (primary, replica) = primary_and_replica().await;
    let app = confirming_gateway(&primary, "200").await;
    let response = app
        .stream(json!({"key": "streamed:confirmed", "ttl_ms": 1_500}))
        .await;
    let mut events = crate::helpers::EventStream::of(response);
    let acquired = events.next(Duration::from_secs(2)).await.unwrap();
    assert_eq!(acquired.name, "acquired");
    let renewed = events.until("renewed", Duration::from_secs(2)).await;
    let confirmed_until = renewed.data["expires_at_ms"].as_u64().unwrap();

    send_signal(replica.node(0).pid(), "-STOP");
    let mut last = None;
    while let Some(event) = events.next(Duration::from_secs(5)).await {
        if event.name == "renewed" {
            // One confirmed just before the freeze may still come.
            let until = event.data["expires_at_ms"].as_u64().unwrap();
            assert!(
                until <= confirmed_until + 600,
                "renewed to {until} with the replica frozen"
            );
        }
        last = Some(event);
    }
    send_signal(replica.node(0).pid(), "-CONT");
    let last = last.expect("the stream said nothing");
    assert_eq!(last.name, "lost", "{:?}", last.data);
    assert_eq!(last.data["reason"], "backend-unavailable");
}

/// In a cluster, a grant whose primary dies while it waits for its (frozen)
/// replica is answered 503, never 201: the `WAIT` is not asked again of a
/// node that has nothing to wait for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_cluster_a_primary_dying_during_wait_confirms_nothing() {
    let mut redis = RedisServer::cluster(3).await;
    for master in 0..3 {
        redis.add_cluster_replica(master).await;
    }
    let [key, first]: [String; 2] = redis.keys_on_master(0, 2).await.try_into().unwrap();
    let app = TestApp::spawn_with(
        &redis,
        &[
            "--redis-wait-replicas",
            "1",
            "--redis-wait-timeout-ms",
            "3000",
            "--redis-timeout-ms",
            "5000",
        ],
    )
    .await;
    // The warm-up: every master's connection is open.
    app.take(&format!("{key}-warm"), 100).await;

    send_signal(redis.node(3).pid(), "-STOP");
    let refused = app.acquire(json!({"key": first})).await;
    assert_problem(refused, 503, "not-replicated").await;
    let granting = app.acquire(json!({"key": key}));
    let killing = async {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        redis.node_mut(0).kill();
    };
    let (answer, ()) = tokio::join!(granting, killing);
    send_signal(redis.node(3).pid(), "-CONT");
    assert_eq!(
        answer.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "a grant no replica confirmed was answered {}",
        answer.status()
    );
}
