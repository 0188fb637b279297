//! Server-side waiting: woken by release or expiry without polling, fair across instances, bounded in connections, safe on disconnect and on subscription loss.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{
    RedisServer, TestApp, assert_problem, eventually, lock_keys, lock_script, sample,
};

/// Generous for a loaded CI box, yet far below any lease or poll interval a
/// sleep-and-retry client would use.
const WAKE_BOUND: Duration = Duration::from_millis(100);

/// A lease's end is found by a timer set for it, not by a message: on a
/// loaded two-core box that timer and the grant after it were seen 107 ms
/// late. Still well below the second a missed expiry would wait (the next
/// tend).
const EXPIRY_WAKE_BOUND: Duration = Duration::from_millis(300);

/// How many instances are subscribed to their grant channel of `key`
/// (each has one while it has waiters on the lock).
async fn subscribers(redis: &RedisServer, key: &str) -> u64 {
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg(format!("lockgate:granted:{{{key}}}:*"))
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
    channels.len() as u64
}

async fn wait_for_subscribers(redis: &RedisServer, key: &str, count: u64) {
    let subscribed = eventually(Duration::from_secs(5), || async {
        subscribers(redis, key).await >= count
    })
    .await;
    assert!(subscribed, "{count} instance(s) never subscribed to {key}");
}

/// Runs of the acquire script so far, by the gateway's own count.
async fn acquire_scripts(app: &TestApp) -> u64 {
    let series = "lockgate_redis_command_duration_seconds_count{operation=\"acquire.lua\"}";
    let text = app.get("/metrics").await.text().await.unwrap();
    sample(&text, series).map_or(0, |count| count.parse().unwrap())
}

fn spawn_waiter(
    app: &TestApp,
    key: &str,
    ttl_ms: u64,
    wait_ms: u64,
) -> tokio::task::JoinHandle<(StatusCode, Value, Instant)> {
    let request = app
        .http
        .post(app.url("/locks"))
        .json(&json!({"key": key, "ttl_ms": ttl_ms, "wait_ms": wait_ms}));
    tokio::spawn(async move {
        let response = request.send().await.unwrap();
        let answered = Instant::now();
        let status = response.status();
        (status, response.json().await.unwrap(), answered)
    })
}

#[tokio::test]
async fn a_release_wakes_the_waiter_at_once() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let holder = app.take("orders:1", 30_000).await;
    let waiter = spawn_waiter(&app, "orders:1", 30_000, 10_000);
    wait_for_subscribers(&redis, "orders:1", 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let released_at = Instant::now();
    assert_eq!(
        app.release("orders:1", &holder.token).await.status(),
        StatusCode::NO_CONTENT
    );
    let (status, body, answered) = waiter.await.unwrap();

    assert_eq!(status, StatusCode::CREATED, "{body}");
    let woke_after = answered - released_at;
    assert!(
        woke_after < WAKE_BOUND,
        "woken {woke_after:?} after the release"
    );
    assert!(body["waited_ms"].as_u64().unwrap() >= 200, "{body}");
    assert!(body["fencing_token"].as_u64().unwrap() > holder.fencing_token);
}

#[tokio::test]
async fn an_expiry_wakes_the_waiter_within_the_lease() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let taken_at = Instant::now();
    app.take("orders:2", 500).await;

    let waiter = spawn_waiter(&app, "orders:2", 30_000, 10_000);
    let (status, body, answered) = waiter.await.unwrap();

    assert_eq!(status, StatusCode::CREATED, "{body}");
    let after = answered - taken_at;
    assert!(
        after >= Duration::from_millis(450),
        "granted {after:?} into a 500 ms lease"
    );
    assert!(
        after < Duration::from_millis(500) + EXPIRY_WAKE_BOUND,
        "granted {after:?} after a 500 ms lease"
    );
}

#[tokio::test]
async fn a_waiter_does_not_poll_and_gives_up_with_lock_held() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    app.take("orders:3", 30_000).await;
    let calls_before = acquire_scripts(&app).await;

    let started = Instant::now();
    let response = app
        .acquire(json!({"key": "orders:3", "ttl_ms": 1000, "wait_ms": 2000}))
        .await;
    let waited = started.elapsed();

    let calls = acquire_scripts(&app).await - calls_before;
    assert!(
        calls <= 4,
        "a 2 s wait ran the acquire script {calls} times"
    );
    assert!(
        waited >= Duration::from_millis(2000),
        "gave up after {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(2000) + WAKE_BOUND * 3,
        "gave up after {waited:?}"
    );
    assert_eq!(response.headers()["retry-after"], "28");
    let body = assert_problem(response, 409, "lock-held").await;
    let retry_after_ms = body["retry_after_ms"].as_u64().unwrap();
    assert!((27_000..=28_000).contains(&retry_after_ms), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_across_two_instances_each_get_the_lock_once_in_fencing_order() {
    const WAITERS: usize = 200;
    let redis = RedisServer::start().await;
    let apps = [TestApp::spawn(&redis).await, TestApp::spawn(&redis).await];
    let holder = apps[0].take("queue", 30_000).await;
    let grants = Arc::new(AtomicUsize::new(0));

    let mut waiters = Vec::new();
    for waiter in 0..WAITERS {
        let app = &apps[waiter % 2];
        let request = app
            .http
            .post(app.url("/locks"))
            .json(&json!({"key": "queue", "ttl_ms": 30_000, "wait_ms": 60_000}));
        let release = app.http.delete(app.url("/locks/queue"));
        let grants = grants.clone();
        waiters.push(tokio::spawn(async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), StatusCode::CREATED);
            let body: Value = response.json().await.unwrap();
            // Counted before releasing, so the count orders the grants.
            let order = grants.fetch_add(1, Ordering::SeqCst);
            let token = body["token"].as_str().unwrap().to_owned();
            let released = release.header("Lock-Token", token).send().await.unwrap();
            assert_eq!(released.status(), StatusCode::NO_CONTENT);
            (order, body["fencing_token"].as_u64().unwrap())
        }));
    }
    wait_for_subscribers(&redis, "queue", 2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    apps[0].release("queue", &holder.token).await;

    let mut granted = Vec::new();
    for waiter in waiters {
        granted.push(waiter.await.unwrap());
    }
    granted.sort();
    let orders: Vec<usize> = granted.iter().map(|(order, _)| *order).collect();
    assert_eq!(
        orders,
        (0..WAITERS).collect::<Vec<_>>(),
        "a waiter was granted twice or never"
    );
    for pair in granted.windows(2) {
        assert!(
            pair[0].1 < pair[1].1,
            "fencing tokens out of grant order: {pair:?}"
        );
    }
    assert!(granted[0].1 > holder.fencing_token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_waiters_share_the_pool_and_one_subscription() {
    const WAITERS: usize = 1000;
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_with(&redis, &["--redis-pool-size", "8"]).await;
    app.take("hot", 30_000).await;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();

    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            let request = http
                .post(app.url("/locks"))
                .json(&json!({"key": "hot", "wait_ms": 4_000}));
            tokio::spawn(async move { request.send().await.unwrap().status() })
        })
        .collect();
    wait_for_subscribers(&redis, "hot", 1).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let clients: String = redis.client_list().await;
    let connections = clients.lines().count();
    // At most the 8 of the pool + 1 subscription + this test's own, plus slack.
    assert!(
        connections <= 8 + 1 + 3,
        "{connections} Redis connections:\n{clients}"
    );

    for waiter in waiters {
        assert_eq!(waiter.await.unwrap(), StatusCode::CONFLICT);
    }
}

#[tokio::test]
async fn a_client_that_stops_waiting_is_not_granted_and_the_next_waiter_is() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let holder = app.take("desk", 30_000).await;
    let impatient = app
        .http
        .post(app.url("/locks"))
        .timeout(Duration::from_millis(300))
        .json(&json!({"key": "desk", "ttl_ms": 30_000, "wait_ms": 20_000}))
        .send();
    assert!(impatient.await.unwrap_err().is_timeout());
    let patient = spawn_waiter(&app, "desk", 30_000, 20_000);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let released_at = Instant::now();
    app.release("desk", &holder.token).await;
    let (status, body, answered) = patient.await.unwrap();

    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(
        answered - released_at < WAKE_BOUND,
        "the next waiter waited {:?}",
        answered - released_at
    );
    let token = body["token"].as_str().unwrap();
    assert_eq!(
        app.release("desk", token).await.status(),
        StatusCode::NO_CONTENT
    );
    assert_problem(app.get("/locks/desk").await, 404, "lock-not-found").await;
}

/// Sends a waiting `POST /locks` over a raw connection, gives up after
/// `give_up` by closing the sending side (the client's FIN), and returns
/// whatever the server still wrote: the grant, if it was handed over before
/// the server noticed the client leaving.
async fn waiting_request_abandoned(app: &TestApp, body: &Value, give_up: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = body.to_string();
    let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let request = format!(
        "POST /locks HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        app.addr,
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    tokio::time::sleep(give_up).await;
    stream.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut answer)).await;
    assert!(
        read.is_ok(),
        "the server neither answered nor closed the connection"
    );
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn a_grant_that_races_a_disconnect_is_released_unless_it_was_handed_over() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let mut handed_over = 0;
    for trial in 0..20u64 {
        let key = format!("race:{trial}");
        app.take(&key, 100).await;
        // The client gives up around the moment the lease ends and the
        // waiter is granted: before, during or after the grant.
        let give_up = Duration::from_millis(90 + trial % 20);
        let request = json!({"key": key, "ttl_ms": 30_000, "wait_ms": 5_000});
        let answer = waiting_request_abandoned(&app, &request, give_up).await;
        if answer.starts_with("HTTP/1.1 201") {
            // Written before the server saw the client go: the client has
            // the grant, so releasing it is the client's job.
            handed_over += 1;
            let body: Value =
                serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
            app.release(&key, body["token"].as_str().unwrap()).await;
        } else {
            assert!(
                answer.is_empty(),
                "trial {trial}: unexpected answer {answer}"
            );
        }
        let free = eventually(Duration::from_millis(500), || async {
            app.get(&format!("/locks/{key}")).await.status() == StatusCode::NOT_FOUND
        })
        .await;
        assert!(
            free,
            "trial {trial}: a client that left holds {key} without having been told"
        );
    }
    assert!(
        handed_over < 20,
        "no trial raced the grant: the test proves nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_subscription_loses_no_wake_up() {
    const WAITERS: usize = 10;
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let holder = app.take("ledger", 30_000).await;
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            let request = app
                .http
                .post(app.url("/locks"))
                .json(&json!({"key": "ledger", "ttl_ms": 30_000, "wait_ms": 20_000}));
            let release = app.http.delete(app.url("/locks/ledger"));
            tokio::spawn(async move {
                let response = request.send().await.unwrap();
                assert_eq!(response.status(), StatusCode::CREATED);
                let body: Value = response.json().await.unwrap();
                let token = body["token"].as_str().unwrap().to_owned();
                // Hold briefly, then pass the lock on.
                tokio::time::sleep(Duration::from_millis(20)).await;
                release
                    .header("Lock-Token", token)
                    .send()
                    .await
                    .unwrap()
                    .status()
            })
        })
        .collect();
    wait_for_subscribers(&redis, "ledger", 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Kill the subscription and release the lock in one transaction, so the
    // release message goes out while the gateway is surely not subscribed:
    // it is lost, and only the resubscribe's retry can save the waiters.
    let started = Instant::now();
    let (killed, subscribed_then, released): (u64, Vec<String>, Vec<String>) = redis::pipe()
        .atomic()
        .cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .cmd("PUBSUB")
        .arg("CHANNELS")
        .arg("lockgate:granted:{ledger}:*")
        .cmd("EVAL")
        .arg(lock_script("release.lua"))
        .arg(8)
        .arg(lock_keys("lockgate:", "ledger"))
        .arg("PUBLISH")
        .arg("lockgate:")
        .arg("ledger")
        .arg(&holder.token)
        .arg("one")
        .arg(60_000)
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
    assert_eq!((killed, subscribed_then.len()), (1, 0));
    assert_eq!(
        released.first().map(String::as_str),
        Some("released"),
        "the holder's release did not free the lock: {released:?}"
    );

    for waiter in waiters {
        assert_eq!(waiter.await.unwrap(), StatusCode::NO_CONTENT);
    }
    // Every waiter got its turn long before the 30 s lease that a lost
    // wake-up would have cost.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    let unsubscribed = eventually(Duration::from_secs(2), || async {
        subscribers(&redis, "ledger").await == 0
    })
    .await;
    assert!(
        unsubscribed,
        "the last waiter left, but the channel is still subscribed"
    );
}

#[tokio::test]
async fn beyond_the_cap_a_waiter_is_refused_with_503() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_with(&redis, &["--max-waiters", "2"]).await;
    app.take("cap", 30_000).await;
    let waiters = [
        spawn_waiter(&app, "cap", 1_000, 3_000),
        spawn_waiter(&app, "cap", 1_000, 3_000),
    ];
    wait_for_subscribers(&redis, "cap", 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let refused = app.acquire(json!({"key": "cap", "wait_ms": 3_000})).await;
    assert_eq!(refused.headers()["retry-after"], "1");
    assert_problem(refused, 503, "too-many-waiters").await;
    // Trying once (no wait) is still allowed.
    assert_problem(app.acquire(json!({"key": "cap"})).await, 409, "lock-held").await;
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap().0, StatusCode::CONFLICT);
    }
}

/// The ids of the connections in pub/sub mode (flag `P`).
async fn pubsub_clients(redis: &RedisServer) -> Vec<String> {
    let clients: String = redis.client_list().await;
    clients
        .lines()
        .filter(|line| {
            line.split(' ').any(|field| {
                field
                    .strip_prefix("flags=")
                    .is_some_and(|flags| flags.contains('P'))
            })
        })
        .filter_map(|line| line.split(' ').find_map(|field| field.strip_prefix("id=")))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn an_idle_gateway_keeps_its_one_subscription_connection() {
    let redis = RedisServer::start_single().await;
    let _app = TestApp::spawn(&redis).await;
    let subscribed = eventually(Duration::from_secs(5), || async {
        pubsub_clients(&redis).await.len() == 1
    })
    .await;
    assert!(subscribed, "no pub/sub connection");
    let before = pubsub_clients(&redis).await;

    // Three health checks (every 5 s) come and go.
    tokio::time::sleep(Duration::from_secs(16)).await;

    assert_eq!(
        pubsub_clients(&redis).await,
        before,
        "the pub/sub connection was replaced while idle"
    );
}

/// A wait that runs out tells when the lock frees as it stands then: a
/// holder that renewed during the wait pushed that later than first heard
/// (a hint of 0 would send the client straight back).
#[tokio::test]
async fn a_wait_that_runs_out_hints_at_the_renewed_lease() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let holder = app.take("renewed", 900).await;
    let waiting = {
        let app_url = app.url("/locks");
        tokio::spawn(async move {
            reqwest::Client::new()
                .post(app_url)
                .json(&json!({"key": "renewed", "ttl_ms": 1000, "wait_ms": 1000}))
                .send()
                .await
                .unwrap()
        })
    };
    // Renewed while the other waits: the lease now ends ~1.5 s from here.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let renewed = app.extend("renewed", &holder.token, 1500).await;
    assert_eq!(renewed.status(), StatusCode::OK);
    let refused = waiting.await.unwrap();
    let body = assert_problem(refused, 409, "lock-held").await;
    let retry_after_ms = body["retry_after_ms"].as_u64().unwrap();
    assert!((500..=1500).contains(&retry_after_ms), "{body}");
}
