//! Redis Cluster: locks spread over three masters, waiting across slots wakes promptly, a stopped master takes only its own slots.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{RedisServer, TestApp, assert_problem, eventually};

/// For each master, a lock key whose slot it owns: `keys[i]` lives on node `i`.
async fn one_key_per_master(redis: &RedisServer, masters: usize) -> Vec<String> {
    let mut found: HashMap<usize, String> = HashMap::new();
    for candidate in 0.. {
        let key = format!("spread:{candidate}");
        let slot_key = format!("lockgate:lock:{{{key}}}");
        for index in 0..masters {
            let mut conn = redis.node(index).connection().await;
            // A node answers KEYSLOT for any key; CLUSTER COUNTKEYSINSLOT
            // tells nothing of ownership, so ask the node's own slot table.
            let slot: u16 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(&slot_key)
                .query_async(&mut conn)
                .await
                .unwrap();
            let owned: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query_async(&mut conn)
                .await
                .unwrap();
            let owner_port = owned.iter().find_map(|range| {
                let start = redis::from_redis_value::<u16>(range[0].clone()).ok()?;
                let end = redis::from_redis_value::<u16>(range[1].clone()).ok()?;
                let master: Vec<redis::Value> = redis::from_redis_value(range[2].clone()).ok()?;
                let port = redis::from_redis_value::<u16>(master[1].clone()).ok()?;
                (start..=end).contains(&slot).then_some(port)
            });
            if owner_port == Some(redis.node(index).port) {
                found.entry(index).or_insert(key.clone());
            }
        }
        if found.len() == masters {
            break;
        }
    }
    (0..masters).map(|index| found[&index].clone()).collect()
}

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
    let keys = one_key_per_master(&redis, 3).await;

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
    let keys = one_key_per_master(&redis, 3).await;
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
