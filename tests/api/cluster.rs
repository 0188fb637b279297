//! Redis Cluster: locks spread over three masters, waiting across slots wakes promptly, a stopped master takes only its own slots.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{RedisServer, TestApp, assert_problem, eventually};

#[tokio::test]
async fn locks_spread_over_every_master_and_fencing_tokens_still_increase() {
    let redis = RedisServer::cluster(3).await;
    let app = TestApp::spawn(&redis).await;

    let mut last: HashMap<String, u64> = HashMap::new();
    for round in 0..3 {
        for index in 0..30 {
            let key = format!("spread:{index}");
            let grant = app.take(&key, if round == 1 { 20 } else { 30_000 }).await;
            if let Some(before) = last.insert(key.clone(), grant.fencing_token) {
                assert!(
                    grant.fencing_token > before,
                    "{key}: {} after {before}",
                    grant.fencing_token
                );
            }
            if round == 1 {
                let lapsed = eventually(Duration::from_secs(2), || async {
                    app.get(&format!("/locks/{key}")).await.status() == StatusCode::NOT_FOUND
                })
                .await;
                assert!(lapsed);
            } else if round == 0 {
                assert_eq!(
                    app.release(&key, &grant.token).await.status(),
                    StatusCode::NO_CONTENT
                );
            }
        }
    }
    // The last round still holds all 30: every master holds some of them.
    for index in 0..3 {
        let keys: u64 = redis::cmd("DBSIZE")
            .query_async(&mut redis.node(index).connection().await)
            .await
            .unwrap();
        assert!(keys > 0, "master {index} holds no lock");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_on_keys_of_different_masters_wakes_promptly() {
    let redis = RedisServer::cluster(3).await;
    let app = Arc::new(TestApp::spawn(&redis).await);
    let keys = redis.one_key_per_master(3).await;

    let mut holders = Vec::new();
    for key in &keys {
        holders.push(app.take(key, 30_000).await);
    }
    let waiters: Vec<_> = keys
        .iter()
        .map(|key| {
            let request = app
                .http
                .post(app.url("/locks"))
                .json(&json!({"key": key, "ttl_ms": 30_000, "wait_ms": 10_000}));
            tokio::spawn(async move {
                let response = request.send().await.unwrap();
                (Instant::now(), response.status())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;

    for ((key, holder), waiter) in keys.iter().zip(&holders).zip(waiters) {
        let released_at = Instant::now();
        assert_eq!(
            app.release(key, &holder.token).await.status(),
            StatusCode::NO_CONTENT
        );
        let (answered, status) = waiter.await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "{key}");
        let woke_after = answered - released_at;
        assert!(
            woke_after < Duration::from_millis(100),
            "{key} woke {woke_after:?} after its release"
        );
    }
}

#[tokio::test]
async fn a_stopped_master_takes_only_its_own_slots_and_comes_back() {
    let mut redis = RedisServer::cluster(3).await;
    let app = TestApp::spawn_with(&redis, &["--redis-timeout-ms", "500"]).await;
    let keys = redis.one_key_per_master(3).await;
    for key in &keys {
        let grant = app.take(key, 30_000).await;
        app.release(key, &grant.token).await;
    }

    redis.node_mut(1).kill();

    let refused = eventually(Duration::from_secs(10), || async {
        app.acquire(json!({"key": keys[1], "ttl_ms": 1_000}))
            .await
            .status()
            == StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
    assert!(refused, "a key of the stopped master was still served");
    let body = assert_problem(
        app.acquire(json!({"key": keys[1]})).await,
        503,
        "backend-unavailable",
    )
    .await;
    assert!(body["detail"].is_string());
    for key in [&keys[0], &keys[2]] {
        let served = eventually(Duration::from_secs(10), || async {
            let response = app.acquire(json!({"key": key, "ttl_ms": 1_000})).await;
            response.status() == StatusCode::CREATED
        })
        .await;
        assert!(served, "{key}, on a running master, was not served");
    }

    redis.node_mut(1).restart().await;
    let back = eventually(Duration::from_secs(20), || async {
        app.acquire(json!({"key": keys[1], "ttl_ms": 1_000}))
            .await
            .status()
            == StatusCode::CREATED
    })
    .await;
    assert!(
        back,
        "the master's keys were not served again after it returned"
    );
    let ready = eventually(Duration::from_secs(10), || async {
        app.get("/readyz").await.status() == StatusCode::OK
    })
    .await;
    assert!(ready, "/readyz did not recover once every master was back");
}

#[tokio::test]
async fn a_reset_missed_while_the_subscription_was_down_clears_the_sold_out_flag() {
    let redis = RedisServer::cluster(3).await;
    let app = TestApp::spawn_sale(&redis, &["--seckill-rate", "0"]).await;
    app.reset_sale("flag", 1, 1).await;
    app.bought("flag", "a", 1, None).await;
    assert_problem(app.buy("flag", "b", 1, None).await, 409, "sold-out").await;

    // Restocked by a reset whose message this instance never hears.
    let sale = "lockgate:sale:{flag}";
    let () = redis::Script::new(include_str!("../../lua/reset_sale.lua"))
        .key(sale)
        .key(format!("{sale}:users"))
        .key(format!("{sale}:idem"))
        .key(format!("{sale}:orders"))
        .key(format!("{sale}:by-user"))
        .arg(5)
        .arg(1)
        .arg("a-channel-nobody-hears")
        .arg("flag")
        .invoke_async(&mut redis.connection().await)
        .await
        .unwrap();
    assert_problem(app.buy("flag", "c", 1, None).await, 409, "sold-out").await;
    // The instance's subscriptions drop, and are renewed.
    for index in 0..3 {
        let _: redis::RedisResult<u64> = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("pubsub")
            .query_async(&mut redis.node(index).connection().await)
            .await;
    }

    let sells = eventually(Duration::from_secs(10), || async {
        app.buy("flag", "c", 1, None).await.status() == StatusCode::CREATED
    })
    .await;
    assert!(
        sells,
        "a stale sold-out flag outlived the renewed subscription"
    );
}

/// Moves the slot of `key`'s lock from master `from` to master `to`, keys
/// and all, as `redis-cli --cluster reshard` does.
async fn move_slot(redis: &RedisServer, key: &str, from: usize, to: usize) {
    let node = |index: usize| redis.node(index);
    let lock = format!("lockgate:lock:{{{key}}}");
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(&lock)
        .query_async(&mut node(from).connection().await)
        .await
        .unwrap();
    let id = |index: usize| async move {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query_async::<String>(&mut node(index).connection().await)
            .await
            .unwrap()
    };
    let (source, target) = (id(from).await, id(to).await);
    let setslot = |index: usize, how: &'static str, id: String| async move {
        let () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(how)
            .arg(id)
            .query_async(&mut node(index).connection().await)
            .await
            .unwrap();
    };
    setslot(to, "IMPORTING", source.clone()).await;
    setslot(from, "MIGRATING", target.clone()).await;
    let keys: Vec<String> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot)
        .arg(100)
        .query_async(&mut node(from).connection().await)
        .await
        .unwrap();
    if !keys.is_empty() {
        let () = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(node(to).port)
            .arg("")
            .arg(0)
            .arg(5_000)
            .arg("KEYS")
            .arg(&keys)
            .query_async(&mut node(from).connection().await)
            .await
            .unwrap();
    }
    // In the order the cluster specification gives (and redis-cli
    // follows): the new owner first, then the old, then the rest. Told the
    // other way round, the old owner redirects to a node that does not yet
    // own the slot and sends it back: a client that follows the redirects
    // then waits out its retries' back-off.
    let others = (0..3).filter(|index| *index != from && *index != to);
    for index in [to, from].into_iter().chain(others) {
        setslot(index, "NODE", target.clone()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_after_its_locks_slot_moved_to_another_master() {
    let redis = RedisServer::cluster(3).await;
    let app = Arc::new(TestApp::spawn(&redis).await);
    let keys = redis.one_key_per_master(3).await;
    let key = keys[0].clone();
    let holder = app.take(&key, 30_000).await;
    let waiter = {
        let request = app
            .http
            .post(app.url("/locks"))
            .json(&json!({"key": key, "ttl_ms": 30_000, "wait_ms": 20_000}));
        tokio::spawn(async move {
            let response = request.send().await.unwrap();
            (Instant::now(), response.status())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The lock's slot moves: its old master drops the waiter's sharded
    // subscription (SUNSUBSCRIBE), its new master publishes the release.
    move_slot(&redis, &key, 0, 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released_at = Instant::now();
    assert_eq!(
        app.release(&key, &holder.token).await.status(),
        StatusCode::NO_CONTENT
    );
    let (answered, status) = waiter.await.unwrap();

    assert_eq!(status, StatusCode::CREATED);
    let woke_after = answered - released_at;
    assert!(
        woke_after < Duration::from_millis(100),
        "woken {woke_after:?} after the release"
    );
}
