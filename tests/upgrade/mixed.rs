//! Locks, waits, streamed locks, sessions, Idempotency-Key retries and the flash sale served by both releases at once, on one Redis and on a three-master Cluster.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::eventually;
use crate::gateways::{ADMIN, Gateway};
use crate::redis_server::RedisServer;

/// Clients contending for one exclusive key through every gateway of the
/// fleet in turn, each releasing through the next gateway: never two
/// holders at once, every request granted, and the fencing tokens strictly
/// increasing in grant order across releases.
async fn contend(fleet: &Arc<Vec<Gateway>>, key: &str, clients: usize, rounds: usize) {
    let holding = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let fences = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for client in 0..clients {
        let (fleet, holding, overlaps, fences) = (
            fleet.clone(),
            holding.clone(),
            overlaps.clone(),
            fences.clone(),
        );
        let key = key.to_owned();
        tasks.push(tokio::spawn(async move {
            for round in 0..rounds {
                let taker = &fleet[(client + round) % fleet.len()];
                let releaser = &fleet[(client + round + 1) % fleet.len()];
                let response = taker
                    .post(
                        "/locks",
                        &json!({"key": key, "ttl_ms": 20_000, "wait_ms": 30_000}),
                    )
                    .await;
                let status = response.status().as_u16();
                let grant: Value = response.json().await.unwrap_or(Value::Null);
                assert_eq!(status, 201, "{:?} refused {key}: {grant}", taker.release);
                // Set before the release is sent and cleared after: a second
                // holder granted meanwhile finds it set.
                if holding.swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                fences
                    .lock()
                    .await
                    .push(grant["fencing_token"].as_u64().expect("fencing_token"));
                tokio::time::sleep(Duration::from_millis(2)).await;
                holding.store(false, Ordering::SeqCst);
                let token = grant["token"].as_str().unwrap();
                let released = releaser.release(&key, token).await.status().as_u16();
                assert_eq!(
                    released, 204,
                    "{:?} did not release {key}",
                    releaser.release
                );
            }
        }));
    }
    for task in tasks {
        task.await.expect("a client");
    }
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two holders of {key} at once"
    );
    let fences = fences.lock().await;
    assert_eq!(fences.len(), clients * rounds);
    assert!(
        fences.windows(2).all(|pair| pair[0] < pair[1]),
        "fencing tokens not increasing in grant order: {fences:?}"
    );
}

/// A waiter on `waiting` is woken by a release on `holding`: granted soon
/// after the release, well before its wait or the lease would end.
pub(crate) async fn wake_across(holding: &Gateway, waiting: &Gateway, key: &str) {
    let (status, grant) = json_of(
        holding
            .post("/locks", &json!({"key": key, "ttl_ms": 30_000}))
            .await,
    )
    .await;
    assert_eq!(status, 201, "{grant}");
    let url = waiting.url("/locks");
    let http = waiting.http.clone();
    let key_owned = key.to_owned();
    let waiter = tokio::spawn(async move {
        let response = http
            .post(url)
            .json(&json!({"key": key_owned, "ttl_ms": 5_000, "wait_ms": 20_000}))
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), Instant::now())
    });
    // Long enough for the waiter to be queued, on a loaded machine too.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released_at = Instant::now();
    let token = grant["token"].as_str().unwrap();
    assert_eq!(holding.release(key, token).await.status().as_u16(), 204);
    let (status, granted_at) = waiter.await.unwrap();
    assert_eq!(
        status, 201,
        "the {:?} waiter was not granted",
        waiting.release
    );
    let woken = granted_at.duration_since(released_at);
    assert!(
        woken < Duration::from_secs(2),
        "{:?} waiter granted {woken:?} after the {:?} release",
        waiting.release,
        holding.release
    );
}

async fn json_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A streamed lock held through `streaming` is seen held through `reading`,
/// with its fencing token, and is free at once when its stream closes.
async fn stream_seen_across(streaming: &Gateway, reading: &Gateway, key: &str) {
    let mut stream = streaming
        .http
        .post(streaming.url("/locks"))
        .header("Accept", "text/event-stream")
        .json(&json!({"key": key, "ttl_ms": 3_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status().as_u16(), 200);
    let mut text = String::new();
    while !text.contains("\n\n") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), stream.chunk())
            .await
            .expect("the acquired event in time")
            .unwrap()
            .expect("an open stream");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("event: acquired"), "{text}");
    let data = text
        .lines()
        .find_map(|line| line.strip_prefix("data:"))
        .expect("the event's data");
    let grant: Value = serde_json::from_str(data.trim()).unwrap();
    let (status, seen) = reading.get_json(&format!("/locks/{key}")).await;
    assert_eq!(status, 200, "{seen}");
    assert_eq!(seen["held"], true);
    assert_eq!(seen["fencing_token"], grant["fencing_token"]);
    drop(stream);
    let freed = eventually(Duration::from_secs(5), || async {
        reading
            .get(&format!("/locks/{key}"))
            .await
            .status()
            .as_u16()
            == 404
    })
    .await;
    assert!(
        freed,
        "{key} still held after its {:?} stream closed",
        streaming.release
    );
}

/// A session opened on `opening` holds a lock taken on `using`; each sees
/// the other's, and deleting it on `using` frees the lock for both.
async fn session_across(opening: &Gateway, using: &Gateway, key: &str) {
    let (status, session) =
        json_of(opening.post("/sessions", &json!({"ttl_ms": 10_000})).await).await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap();
    let (status, grant) = json_of(
        using
            .post("/locks", &json!({"key": key, "session": id}))
            .await,
    )
    .await;
    assert_eq!(status, 201, "{grant}");
    let (status, seen) = opening.get_json(&format!("/sessions/{id}")).await;
    assert_eq!(status, 200, "{seen}");
    assert_eq!(seen["locks"][0]["key"], key, "{seen}");
    assert_eq!(seen["locks"][0]["fencing_token"], grant["fencing_token"]);
    let kept = opening
        .http
        .put(opening.url(&format!("/sessions/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(kept.status().as_u16(), 200);
    let deleted = using
        .http
        .delete(using.url(&format!("/sessions/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status().as_u16(), 204);
    assert_eq!(
        opening
            .get(&format!("/locks/{key}"))
            .await
            .status()
            .as_u16(),
        404
    );
}

/// An acquire under an Idempotency-Key on `first`, retried on `retry`
/// (no permissions file): the same grant again, marked as replayed.
async fn idempotent_across(first: &Gateway, retry: &Gateway, key: &str) {
    let body = json!({"key": key, "ttl_ms": 30_000});
    let idempotency = format!("retry-{key}");
    let send = |gateway: &Gateway| {
        gateway
            .http
            .post(gateway.url("/locks"))
            .header("Idempotency-Key", &idempotency)
            .json(&body)
            .send()
    };
    let (status, grant) = json_of(send(first).await.unwrap()).await;
    assert_eq!(status, 201, "{grant}");
    let again = send(retry).await.unwrap();
    let replayed = again
        .headers()
        .get("Idempotent-Replayed")
        .map(|value| value.to_str().unwrap().to_owned());
    let (status, replay) = json_of(again).await;
    assert_eq!(
        (status, replayed.as_deref()),
        (201, Some("true")),
        "{:?} retry of a {:?} grant: {replay}",
        retry.release,
        first.release
    );
    assert_eq!(replay["token"], grant["token"]);
    assert_eq!(replay["fencing_token"], grant["fencing_token"]);
    let token = grant["token"].as_str().unwrap();
    assert_eq!(retry.release(key, token).await.status().as_u16(), 204);
}

/// A sale reset on the first gateway, bought through all of them at once:
/// exactly its stock sold, to distinct buyers, and every gateway reads the
/// same sale; a purchase retried on another release is its first order.
async fn sale_across(fleet: &Arc<Vec<Gateway>>, sku: &str, stock: u64, buyers: usize) {
    let reset = fleet[0]
        .http
        .put(fleet[0].url(&format!("/seckill/{sku}")))
        .bearer_auth(ADMIN)
        .json(&json!({"stock": stock, "per_user_limit": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(reset.status().as_u16(), 200);
    let mut tasks = Vec::new();
    for buyer in 0..buyers {
        let fleet = fleet.clone();
        let sku = sku.to_owned();
        tasks.push(tokio::spawn(async move {
            let gateway = &fleet[buyer % fleet.len()];
            let buy = |gateway: &Gateway| {
                gateway
                    .http
                    .post(gateway.url(&format!("/seckill/{sku}/orders")))
                    .header("Idempotency-Key", format!("{sku}-{buyer}"))
                    .json(&json!({"user_id": format!("u-{buyer}"), "quantity": 1}))
                    .send()
            };
            let (status, order) = json_of(buy(gateway).await.unwrap()).await;
            if status == 201 {
                // The same purchase retried through the next gateway.
                let other = &fleet[(buyer + 1) % fleet.len()];
                let (again, replay) = json_of(buy(other).await.unwrap()).await;
                assert_eq!(again, 200, "{replay}");
                assert_eq!(replay["order_id"], order["order_id"]);
            } else {
                assert_eq!(
                    (status, order["type"].as_str()),
                    (409, Some("/problems/sold-out"))
                );
            }
            status
        }));
    }
    let mut sold = 0;
    for task in tasks {
        if task.await.unwrap() == 201 {
            sold += 1;
        }
    }
    assert_eq!(sold, stock, "orders answered 201");
    for gateway in fleet.iter() {
        let (status, sale) = gateway.get_json(&format!("/seckill/{sku}")).await;
        assert_eq!(status, 200);
        assert_eq!(
            (&sale["sold"], &sale["stock"], &sale["orders"]),
            (&json!(stock), &json!(0), &json!(stock)),
            "{:?} reads {sale}",
            gateway.release
        );
    }
}

/// Every check of this file, on a fleet of `mix` on `redis`.
async fn drive(mix: &str, redis: &RedisServer, clients: usize, rounds: usize) {
    let fleet = Arc::new(Gateway::fleet(mix, redis, &[]).await);
    contend(&fleet, &format!("contended-{mix}"), clients, rounds).await;
    for (a, b) in pairs(fleet.len()) {
        let (one, other) = (&fleet[a], &fleet[b]);
        let tag = format!("{mix}-{a}{b}");
        wake_across(one, other, &format!("wake-{tag}")).await;
        stream_seen_across(one, other, &format!("stream-{tag}")).await;
        session_across(one, other, &format!("session-{tag}")).await;
        idempotent_across(one, other, &format!("idem-{tag}")).await;
    }
    sale_across(&fleet, &format!("sale-{mix}"), 20, 60).await;
}

/// Every ordered pair of distinct gateways.
fn pairs(count: usize) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    for a in 0..count {
        for b in 0..count {
            if a != b {
                pairs.push((a, b));
            }
        }
    }
    pairs
}

#[tokio::test]
#[ignore = "needs the previous release: make upgrade-short"]
async fn short_old_and_new_on_one_redis() {
    let redis = RedisServer::start_single().await;
    drive("on", &redis, 6, 8).await;
}

#[tokio::test]
#[ignore = "needs the previous release: make upgrade"]
async fn every_mix_of_three_on_one_redis() {
    for mix in ["ooo", "oon", "onn", "nnn"] {
        let redis = RedisServer::start_single().await;
        drive(mix, &redis, 9, 10).await;
    }
}

#[tokio::test]
#[ignore = "needs the previous release: make upgrade"]
async fn every_mix_of_three_on_a_cluster() {
    for mix in ["ooo", "oon", "onn", "nnn"] {
        let redis = RedisServer::cluster(3).await;
        drive(mix, &redis, 9, 10).await;
    }
}
