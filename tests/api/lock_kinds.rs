//! Shared (read-write) and counting locks: many holders, each with its own token, lease and fencing token.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{GatewayProcess, Grant, RedisServer, TestApp, assert_problem, eventually};

/// Takes `key` as `fields` say (key added), and returns the grant.
async fn take(app: &TestApp, key: &str, fields: Value) -> Grant {
    let mut body = fields;
    body["key"] = json!(key);
    let response = app.acquire(body.clone()).await;
    assert_eq!(response.status(), StatusCode::CREATED, "taking {body}");
    Grant::from(response.json::<Value>().await.unwrap())
}

async fn inspect(app: &TestApp, key: &str) -> Value {
    let response = app.get(&format!("/locks/{key}")).await;
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

#[tokio::test]
async fn many_shared_holders_hold_at_once_each_with_its_own_token_lease_and_holds() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;

    let mut readers = Vec::new();
    for _ in 0..5 {
        readers.push(take(&app, "config", json!({"mode": "shared", "ttl_ms": 10_000})).await);
    }

    let tokens: std::collections::HashSet<_> = readers.iter().map(|r| r.token.clone()).collect();
    assert_eq!(tokens.len(), 5);
    let status = inspect(&app, "config").await;
    assert_eq!(status["mode"], "shared");
    assert_eq!(status["holders"], 5);
    assert_eq!(status["holds"], 5);
    assert!(status.get("limit").is_none(), "{status}");
    assert!(!status.to_string().contains(&readers[0].token));

    // One reader re-enters, another renews its own lease only.
    let reentered = app
        .acquire(json!({"key": "config", "mode": "shared", "token": readers[0].token}))
        .await;
    assert_eq!(reentered.status(), StatusCode::OK);
    let reentered: Value = reentered.json().await.unwrap();
    assert_eq!(reentered["holds"], 2);
    assert_eq!(reentered["fencing_token"], readers[0].fencing_token);
    let renewed = app.extend("config", &readers[1].token, 60_000).await;
    assert_eq!(renewed.status(), StatusCode::OK);
    let renewed: Value = renewed.json().await.unwrap();
    assert_eq!(renewed["fencing_token"], readers[1].fencing_token);
    assert!(inspect(&app, "config").await["ttl_ms"].as_u64().unwrap() > 30_000);

    // Releasing: one hold of the re-entered reader, then another reader.
    let one_hold = app.release("config", &readers[0].token).await;
    assert_eq!(one_hold.status(), StatusCode::OK);
    assert_eq!(
        app.release("config", &readers[2].token).await.status(),
        StatusCode::NO_CONTENT
    );
    let status = inspect(&app, "config").await;
    assert_eq!(status["holders"], 4);
    assert_eq!(status["holds"], 4);
    // A released reader's token holds nothing any more.
    assert_problem(
        app.release("config", &readers[2].token).await,
        409,
        "not-owner",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exclusive_request_waits_for_every_reader_and_holds_new_readers_back() {
    let redis = RedisServer::start().await;
    let app = Arc::new(TestApp::spawn(&redis).await);
    let mut readers = Vec::new();
    for _ in 0..3 {
        readers.push(take(&app, "doc", json!({"mode": "shared", "ttl_ms": 30_000})).await);
    }

    let writer = {
        let app = app.clone();
        tokio::spawn(async move {
            let response = app.acquire(json!({"key": "doc", "wait_ms": 10_000})).await;
            (Instant::now(), response)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The writer waits: a new reader may not slip in ahead of it, and a
    // reader that waits is granted only after the writer.
    let late = app.acquire(json!({"key": "doc", "mode": "shared"})).await;
    assert_problem(late, 409, "lock-held").await;
    let waiting_reader = {
        let app = app.clone();
        tokio::spawn(async move {
            let response = app
                .acquire(json!({"key": "doc", "mode": "shared", "wait_ms": 10_000}))
                .await;
            (Instant::now(), response)
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    for reader in &readers[..2] {
        assert_eq!(
            app.release("doc", &reader.token).await.status(),
            StatusCode::NO_CONTENT
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !writer.is_finished(),
        "granted while a reader still held the lock"
    );
    let last_release = Instant::now();
    app.release("doc", &readers[2].token).await;

    let (granted_at, response) = writer.await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let writer = Grant::from(response.json::<Value>().await.unwrap());
    assert!(granted_at.duration_since(last_release) < Duration::from_millis(500));
    assert!(writer.fencing_token > readers[2].fencing_token);
    let status = inspect(&app, "doc").await;
    assert_eq!(
        (status["mode"].as_str(), status["limit"].as_u64()),
        (Some("exclusive"), Some(1))
    );
    assert!(
        !waiting_reader.is_finished(),
        "a reader was granted beside the writer"
    );

    let writer_released = Instant::now();
    app.release("doc", &writer.token).await;
    let (granted_at, response) = waiting_reader.await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    assert!(granted_at.duration_since(writer_released) < Duration::from_millis(500));
    let reader = Grant::from(response.json::<Value>().await.unwrap());
    assert!(reader.fencing_token > writer.fencing_token);
}

/// Sends `fields` (key added) as a waiting request in a task; it answers with
/// when it was answered.
fn wait_for(
    app: &Arc<TestApp>,
    key: &str,
    fields: Value,
) -> tokio::task::JoinHandle<(Instant, reqwest::Response)> {
    let app = app.clone();
    let mut body = fields;
    body["key"] = json!(key);
    tokio::spawn(async move {
        let response = app.acquire(body).await;
        (Instant::now(), response)
    })
}

/// A writer that waits holds new readers back; if its gateway dies, its
/// place must not outlive it by more than about a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_whose_gateway_died_holds_readers_back_for_a_second_at_most() {
    let redis = RedisServer::start().await;
    let app = Arc::new(TestApp::spawn(&redis).await);
    let reader = take(&app, "k", json!({"mode": "shared", "ttl_ms": 60_000})).await;
    let mut doomed = GatewayProcess::spawn(&redis, &[], &[]).await;
    let writer = doomed
        .acquire(&json!({"key": "k", "wait_ms": 40_000, "ttl_ms": 60_000}))
        .send();
    let writer = tokio::spawn(writer);
    // Until the writer waits, readers still come in.
    let waits = eventually(Duration::from_secs(5), || async {
        app.acquire(json!({"key": "k", "mode": "shared"}))
            .await
            .status()
            == StatusCode::CONFLICT
    })
    .await;
    assert!(waits, "the writer never held readers back");
    doomed.child.kill().unwrap();
    let _ = doomed.child.wait();
    drop(writer);
    let waiting_reader = wait_for(&app, "k", json!({"mode": "shared", "wait_ms": 20_000}));
    let killed = Instant::now();

    assert_eq!(
        app.release("k", &reader.token).await.status(),
        StatusCode::NO_CONTENT
    );
    let (answered, response) = waiting_reader.await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    assert!(
        answered - killed < Duration::from_millis(2_500),
        "a dead writer held a waiting reader back for {:?}",
        answered - killed
    );
    let another = app.acquire(json!({"key": "k", "mode": "shared"})).await;
    assert_eq!(another.status(), StatusCode::CREATED);
}

/// Writers and readers wait in one queue and are served in arrival order:
/// a reader that came before a writer is not overtaken by it, and a writer
/// that came before readers holds them back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_and_readers_are_served_in_arrival_order() {
    let redis = RedisServer::start().await;
    let app = Arc::new(TestApp::spawn(&redis).await);
    let pause = || tokio::time::sleep(Duration::from_millis(200));
    let reader = take(&app, "page", json!({"mode": "shared", "ttl_ms": 30_000})).await;

    // The queue, oldest first: a writer, a reader held back by it, a second
    // writer.
    let first_writer = wait_for(&app, "page", json!({"wait_ms": 20_000}));
    pause().await;
    let held_back = wait_for(&app, "page", json!({"mode": "shared", "wait_ms": 20_000}));
    pause().await;
    let second_writer = wait_for(&app, "page", json!({"wait_ms": 20_000}));
    pause().await;

    app.release("page", &reader.token).await;
    let (_, response) = first_writer.await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let first = Grant::from(response.json::<Value>().await.unwrap());

    // Its release goes to the reader that came before the second writer.
    let released = Instant::now();
    app.release("page", &first.token).await;
    let (granted_at, response) = held_back.await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    assert!(
        granted_at.duration_since(released) < Duration::from_secs(1),
        "the reader waited {:?} for a free lock",
        granted_at.duration_since(released)
    );
    let shared = Grant::from(response.json::<Value>().await.unwrap());
    assert!(
        !second_writer.is_finished(),
        "the second writer overtook the reader"
    );

    app.release("page", &shared.token).await;
    let (_, response) = second_writer.await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let second = Grant::from(response.json::<Value>().await.unwrap());
    assert!(first.fencing_token < shared.fencing_token);
    assert!(shared.fencing_token < second.fencing_token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_a_writer_leaves_every_waiting_reader_is_granted_at_once() {
    let redis = RedisServer::start().await;
    let app = Arc::new(TestApp::spawn(&redis).await);
    let writer = app.take("report", 30_000).await;
    let mut waiting = Vec::new();
    for _ in 0..4 {
        let app = app.clone();
        waiting.push(tokio::spawn(async move {
            let response = app
                .acquire(json!({"key": "report", "mode": "shared", "wait_ms": 10_000}))
                .await;
            (Instant::now(), response.status())
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let released = Instant::now();
    app.release("report", &writer.token).await;

    for reader in waiting {
        let (granted_at, status) = reader.await.unwrap();
        assert_eq!(status, StatusCode::CREATED);
        // Each grant wakes the next: well before any lease or wait ends.
        assert!(granted_at.duration_since(released) < Duration::from_millis(500));
    }
    assert_eq!(inspect(&app, "report").await["holders"], 4);
}

/// Clients that each take a place of the `limit`-place lock `key`, count
/// themselves in (in Redis), work briefly, count out and release, for
/// `rounds` rounds. Returns the most found inside at once.
async fn hold_places(
    apps: Vec<Arc<TestApp>>,
    redis: &RedisServer,
    key: &'static str,
    limit: u64,
    clients: usize,
    rounds: usize,
) -> i64 {
    let mut tasks = Vec::new();
    for client in 0..clients {
        let app = apps[client % apps.len()].clone();
        let mut counter = redis.connection().await;
        tasks.push(tokio::spawn(async move {
            let mut most = 0;
            for _ in 0..rounds {
                let response = app
                    .acquire(
                        json!({"key": key, "limit": limit, "ttl_ms": 10_000, "wait_ms": 20_000}),
                    )
                    .await;
                assert_eq!(response.status(), StatusCode::CREATED);
                let grant = Grant::from(response.json::<Value>().await.unwrap());
                let inside: i64 = counter.incr("inside", 1).await.unwrap();
                most = most.max(inside);
                tokio::time::sleep(Duration::from_millis(3)).await;
                let _: i64 = counter.decr("inside", 1).await.unwrap();
                assert_eq!(
                    app.release(key, &grant.token).await.status(),
                    StatusCode::NO_CONTENT
                );
            }
            most
        }));
    }
    let mut most = 0;
    for task in tasks {
        most = most.max(task.await.unwrap());
    }
    most
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counting_lock_admits_at_most_its_limit_across_two_instances() {
    let redis = RedisServer::start().await;
    let apps = vec![
        Arc::new(TestApp::spawn(&redis).await),
        Arc::new(TestApp::spawn(&redis).await),
    ];

    let most = hold_places(apps.clone(), &redis, "gpus", 3, 32, 8).await;

    assert!(most <= 3, "{most} holders at once, the limit is 3");
    assert_eq!(
        most, 3,
        "the places were never all used: nothing was tested"
    );
    assert_eq!(
        apps[0].get("/locks/gpus").await.status(),
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn a_crashed_holders_place_returns_when_its_own_lease_ends() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    // Two holders that never come back, one with a short lease.
    take(&app, "slots", json!({"limit": 2, "ttl_ms": 300})).await;
    let long = take(&app, "slots", json!({"limit": 2, "ttl_ms": 30_000})).await;

    let started = Instant::now();
    let third = app
        .acquire(json!({"key": "slots", "limit": 2, "wait_ms": 5_000}))
        .await;

    assert_eq!(third.status(), StatusCode::CREATED);
    let waited = started.elapsed();
    assert!(
        (Duration::from_millis(200)..Duration::from_millis(1_500)).contains(&waited),
        "granted after {waited:?}, the short lease was 300 ms"
    );
    let status = inspect(&app, "slots").await;
    assert_eq!(status["holders"], 2);
    assert_eq!(status["limit"], 2);
    // The other holder's lease is its own: still held.
    assert_eq!(
        app.extend("slots", &long.token, 30_000).await.status(),
        StatusCode::OK
    );

    // A reader that crashes: a writer waiting for it is granted at its lease end.
    take(&app, "cache", json!({"mode": "shared", "ttl_ms": 300})).await;
    let started = Instant::now();
    let writer = app.acquire(json!({"key": "cache", "wait_ms": 5_000})).await;
    assert_eq!(writer.status(), StatusCode::CREATED);
    assert!(started.elapsed() < Duration::from_millis(1_500));
}

#[tokio::test]
async fn limits_and_modes_must_agree_with_how_the_lock_is_held() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;

    // A counting lock of 3 places: another limit, or none, is refused at once.
    let counted = take(&app, "pool", json!({"limit": 3})).await;
    for asked in [
        json!({"key": "pool", "limit": 2}),
        json!({"key": "pool", "wait_ms": 5_000}),
    ] {
        let started = Instant::now();
        let refused = assert_problem(app.acquire(asked).await, 409, "limit-mismatch").await;
        assert_eq!(refused["limit"], 3, "{refused}");
        assert_eq!(refused["key"], "pool");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "a mismatch does not wait"
        );
    }
    // A plain lock has one place.
    app.take("mutex", 30_000).await;
    let refused = assert_problem(
        app.acquire(json!({"key": "mutex", "limit": 3})).await,
        409,
        "limit-mismatch",
    )
    .await;
    assert_eq!(refused["limit"], 1);

    // Re-entry keeps the mode the lock was taken in.
    let reader = take(&app, "rw", json!({"mode": "shared"})).await;
    let as_writer = app
        .acquire(json!({"key": "rw", "token": reader.token}))
        .await;
    assert_problem(as_writer, 409, "mode-conflict").await;
    let writer = app.take("rw2", 30_000).await;
    let as_reader = app
        .acquire(json!({"key": "rw2", "mode": "shared", "token": writer.token}))
        .await;
    assert_problem(as_reader, 409, "mode-conflict").await;
    let same_limit = app
        .acquire(json!({"key": "pool", "limit": 3, "token": counted.token}))
        .await;
    assert_eq!(same_limit.status(), StatusCode::OK);

    // Bad fields are 422s naming the field.
    for (body, field) in [
        (json!({"key": "k", "mode": "shared", "limit": 2}), "limit"),
        (json!({"key": "k", "limit": 0}), "limit"),
        (json!({"key": "k", "limit": 10_001}), "limit"),
        (json!({"key": "k", "limit": 2.5}), "limit"),
        (json!({"key": "k", "mode": "read"}), "mode"),
    ] {
        let problem = assert_problem(app.acquire(body.clone()).await, 422, "invalid-field").await;
        assert_eq!(problem["field"], field, "{body}");
    }
    let range = assert_problem(
        app.acquire(json!({"key": "k", "limit": 10_001})).await,
        422,
        "invalid-field",
    )
    .await;
    assert_eq!(
        (range["minimum"].as_u64(), range["maximum"].as_u64()),
        (Some(1), Some(10_000))
    );
    // None of the refusals took anything.
    assert_eq!(app.get("/locks/k").await.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn fencing_tokens_strictly_increase_across_every_kind_of_grant() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let mut fences = Vec::new();

    for kind in [
        json!({"mode": "shared"}),
        json!({}),
        json!({"limit": 4}),
        json!({"mode": "shared"}),
        json!({}),
    ] {
        let holders = if kind.get("mode").is_some() || kind.get("limit").is_some() {
            3
        } else {
            1
        };
        let mut grants = Vec::new();
        for _ in 0..holders {
            let grant = take(&app, "fenced", kind.clone()).await;
            fences.push(grant.fencing_token);
            grants.push(grant);
        }
        assert_eq!(
            inspect(&app, "fenced").await["fencing_token"],
            fences[fences.len() - 1]
        );
        for grant in grants {
            assert_eq!(
                app.release("fenced", &grant.token).await.status(),
                StatusCode::NO_CONTENT
            );
        }
    }

    assert_eq!(fences.len(), 11);
    assert!(
        fences.windows(2).all(|pair| pair[0] < pair[1]),
        "{fences:?}"
    );
}

#[tokio::test]
async fn a_lock_with_many_holders_leaves_nothing_behind_when_its_leases_end() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    take(&app, "brief", json!({"limit": 2, "ttl_ms": 300})).await;
    take(&app, "brief", json!({"limit": 2, "ttl_ms": 200})).await;
    let mut conn = redis.connection().await;
    for key in ["lockgate:lock:{brief}", "lockgate:holders:{brief}"] {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            (1..=300).contains(&ttl),
            "{key} lives {ttl} ms, past the latest lease"
        );
    }

    tokio::time::sleep(Duration::from_millis(400)).await;

    for key in [
        "lockgate:lock:{brief}",
        "lockgate:holders:{brief}",
        "lockgate:writers:{brief}",
    ] {
        let exists: i64 = redis::cmd("EXISTS")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(exists, 0, "{key} outlived its leases");
    }
    assert_eq!(
        app.get("/locks/brief").await.status(),
        StatusCode::NOT_FOUND
    );
}
