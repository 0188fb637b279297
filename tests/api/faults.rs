//! Redis faults under load: a frozen Redis gets prompt 503s and service resumes; a crashed one comes back from its AOF with every sale invariant intact; killed connections are replaced, whichever way the gateway reaches Redis.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::helpers::{RedisServer, TestApp, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_gets_prompt_503s_and_service_resumes_by_itself() {
    const CLIENTS: usize = 8;
    let redis = RedisServer::start().await;
    let app = Arc::new(TestApp::spawn_with(&redis, &["--redis-timeout-ms", "300"]).await);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (app, stop) = (app.clone(), stop.clone());
            tokio::spawn(async move {
                let mut answers = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let started = Instant::now();
                    let response = app
                        .acquire(json!({"key": format!("fault:{client}"), "ttl_ms": 2_000}))
                        .await;
                    let status = response.status();
                    if status == StatusCode::CREATED {
                        let body: Value = response.json().await.unwrap();
                        app.release(&format!("fault:{client}"), body["token"].as_str().unwrap())
                            .await;
                    } else {
                        let body: Value = response.json().await.unwrap();
                        answers.push((
                            status,
                            body["type"].as_str().unwrap_or("").to_owned(),
                            started.elapsed(),
                        ));
                        continue;
                    }
                    answers.push((status, String::new(), started.elapsed()));
                }
                answers
            })
        })
        .collect();

    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.pause();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    redis.resume();
    let resumed = Instant::now();
    let served = eventually(Duration::from_secs(5), || async {
        app.acquire(json!({"key": "fault:probe", "ttl_ms": 100}))
            .await
            .status()
            == StatusCode::CREATED
    })
    .await;
    assert!(served, "service did not resume once Redis did");
    let recovery = resumed.elapsed();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);

    let (mut unavailable, mut granted, mut total) = (0, 0, 0);
    let mut slowest_503 = Duration::ZERO;
    for client in clients {
        for (status, problem, took) in client.await.unwrap() {
            total += 1;
            match status {
                StatusCode::CREATED => granted += 1,
                StatusCode::SERVICE_UNAVAILABLE => {
                    assert_eq!(problem, "/problems/backend-unavailable");
                    // Bounded by the 300 ms Redis timeout, not a hang.
                    assert!(took < Duration::from_millis(1_200), "a 503 took {took:?}");
                    slowest_503 = slowest_503.max(took);
                    unavailable += 1;
                }
                // A timed-out acquire can still run once Redis thaws, and
                // hold the key until its 2 s lease ends or it is released.
                StatusCode::CONFLICT => assert_eq!(problem, "/problems/lock-held"),
                other => panic!("unexpected {other} {problem}"),
            }
        }
    }
    eprintln!(
        "frozen Redis: {total} requests from {CLIENTS} clients, {granted} granted, {unavailable} answered 503 \
         (slowest {slowest_503:?}), service back {recovery:?} after Redis"
    );
    assert!(
        unavailable >= CLIENTS,
        "only {unavailable} 503s while Redis was frozen"
    );
    assert!(granted > 0);
    assert!(
        recovery < Duration::from_secs(3),
        "recovery took {recovery:?}"
    );
    // Whatever a timed-out request left behind ends with its lease.
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("lockgate:lock:*")
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
    assert!(keys.is_empty(), "locks outlived their leases: {keys:?}");
}

/// Buys until one answer settles the attempt: retries a 503 (and a 409
/// `lock-held`: the crash can leave a user's lock held until its lease ends)
/// with the same Idempotency-Key, as a real client would, so a purchase
/// Redis made before it crashed comes back as a replay, not a second order.
async fn buy_settled(app: &TestApp, user: &str, key: &str) -> (StatusCode, Value) {
    loop {
        let response = app
            .http
            .post(app.url("/seckill/crash/orders"))
            .header("Idempotency-Key", key)
            .json(&json!({"user_id": user, "quantity": 1}))
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        let unsettled =
            status == StatusCode::SERVICE_UNAVAILABLE || body["type"] == "/problems/lock-held";
        if !unsettled {
            return (status, body);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_crashed_mid_load_comes_back_from_the_aof_with_every_invariant() {
    const STOCK: u64 = 300;
    const CAP: u64 = 3;
    let mut redis = RedisServer::start_with_aof().await;
    let app = Arc::new(
        TestApp::spawn_sale(
            &redis,
            &["--seckill-rate", "0", "--redis-timeout-ms", "500"],
        )
        .await,
    );
    app.reset_sale("crash", STOCK, CAP).await;
    let confirmed: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let sold_out = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..16)
        .map(|client| {
            let (app, confirmed, sold_out) = (app.clone(), confirmed.clone(), sold_out.clone());
            tokio::spawn(async move {
                let mut attempt = 0;
                while !sold_out.load(std::sync::atomic::Ordering::Relaxed) {
                    attempt += 1;
                    let user = format!("u{}", (client * 131 + attempt * 7) % 150);
                    let key = format!("c{client}-a{attempt}");
                    match buy_settled(&app, &user, &key).await {
                        (StatusCode::CREATED | StatusCode::OK, body) => {
                            let order = body["order_id"].as_str().unwrap().to_owned();
                            let mut confirmed = confirmed.lock().await;
                            if let Some(earlier) = confirmed.insert(key.clone(), order.clone()) {
                                assert_eq!(earlier, order, "{key} got two orders");
                            }
                        }
                        (StatusCode::CONFLICT, body) if body["type"] == "/problems/sold-out" => {
                            sold_out.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                        (StatusCode::CONFLICT, body) => {
                            assert_eq!(body["type"], "/problems/limit-exceeded", "{body}");
                        }
                        (status, body) => panic!("unexpected {status}: {body}"),
                    }
                }
            })
        })
        .collect();

    let midway = eventually(Duration::from_secs(20), || async {
        confirmed.lock().await.len() >= (STOCK / 3) as usize
    })
    .await;
    assert!(midway, "the load never got going");
    redis.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.restart().await;
    for client in clients {
        client.await.unwrap();
    }

    let sale: Value = app.get("/seckill/crash").await.json().await.unwrap();
    let orders = app.orders("crash").await;
    let (stock, sold) = (
        sale["stock"].as_u64().unwrap(),
        sale["sold"].as_u64().unwrap(),
    );
    assert_eq!(stock + sold, STOCK, "{sale}");
    assert_eq!(stock, 0, "{sale}");
    let sum: u64 = orders
        .iter()
        .map(|order| order["quantity"].as_u64().unwrap())
        .sum();
    assert_eq!(sum, sold, "an order without its decrement, or the reverse");
    assert_eq!(orders.len() as u64, sale["orders"].as_u64().unwrap());
    let mut per_user: HashMap<&str, u64> = HashMap::new();
    for order in &orders {
        *per_user
            .entry(order["user_id"].as_str().unwrap())
            .or_default() += 1;
    }
    assert!(
        per_user.values().all(|bought| *bought <= CAP),
        "{per_user:?}"
    );
    let recorded: std::collections::HashSet<&str> = orders
        .iter()
        .map(|order| order["order_id"].as_str().unwrap())
        .collect();
    let confirmed = confirmed.lock().await;
    for (key, order) in confirmed.iter() {
        assert!(
            recorded.contains(order.as_str()),
            "{key}'s confirmed order {order} was lost in the crash"
        );
    }
    assert_eq!(
        confirmed.len(),
        orders.len(),
        "an order exists that no client was told of"
    );
    eprintln!(
        "crashed sale: {} orders confirmed to clients, {} recorded after the AOF restart, {sold} of {STOCK} sold, none lost",
        confirmed.len(),
        orders.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_to_reach_redis_replaces_a_killed_connection() {
    let redis = RedisServer::start().await;
    for pool in ["shared", "checkout"] {
        let app = TestApp::spawn_with(&redis, &["--redis-pool", pool]).await;
        let key = format!("kill-{pool}");
        let grant = app.take(&key, 30_000).await;
        app.release(&key, &grant.token).await;

        // Every connection of the gateway but the subscriber's: the next
        // requests must find the dead ones and open new ones.
        let killed: u64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .arg("SKIPME")
            .arg("yes")
            .query_async(&mut redis.connection().await)
            .await
            .unwrap();
        assert!(killed > 0, "{pool}: no connection to kill");

        // A request already on its way to a dying connection may fail once;
        // after that, every cycle must succeed.
        let mut failed = 0;
        for round in 0..20 {
            let response = app.acquire(json!({"key": key, "ttl_ms": 30_000})).await;
            if response.status() == StatusCode::SERVICE_UNAVAILABLE && round == 0 {
                failed += 1;
                continue;
            }
            assert_eq!(
                response.status(),
                StatusCode::CREATED,
                "{pool}, round {round}"
            );
            let token = response.json::<Value>().await.unwrap()["token"]
                .as_str()
                .unwrap()
                .to_owned();
            assert_eq!(
                app.release(&key, &token).await.status(),
                StatusCode::NO_CONTENT,
                "{pool}, round {round}"
            );
        }
        assert!(failed <= 1, "{pool}");
    }
}
