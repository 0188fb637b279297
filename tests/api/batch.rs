//! Several locks at once (`POST /locks/batch`): all or none, one token, one wait budget, never a circle of batches, streamed or in a session.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{EventStream, GatewayProcess, RedisServer, TestApp, assert_problem};

async fn batch(app: &TestApp, body: Value) -> reqwest::Response {
    app.post_json("/locks/batch", &body).await
}

async fn held(app: &TestApp, key: &str) -> bool {
    app.get(&format!("/locks/{key}")).await.status() == StatusCode::OK
}

/// Whether the tests run against a Redis Cluster, where a batch is taken
/// lock by lock (and a waiting batch may be seen holding part of it).
fn on_a_cluster() -> bool {
    std::env::var("LOCKGATE_TEST_REDIS").is_ok_and(|mode| mode == "cluster")
}

#[tokio::test]
async fn a_batch_takes_every_lock_for_one_token_or_none() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let response = batch(
        &app,
        json!({"locks": [{"key": "acct:1"}, {"key": "acct:2", "mode": "shared"},
                         {"key": "pool:a", "limit": 3, "permits": 2}], "ttl_ms": 20_000}),
    )
    .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let grant: Value = response.json().await.unwrap();
    let token = grant["token"].as_str().unwrap();
    let locks = grant["locks"].as_array().unwrap();
    let keys: Vec<&str> = locks
        .iter()
        .map(|lock| lock["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["acct:1", "acct:2", "pool:a"]);
    assert_eq!(locks[1]["mode"], "shared");
    assert!(
        locks
            .iter()
            .all(|lock| lock["fencing_token"].as_u64() > Some(0))
    );
    let pool: Value = app.get("/locks/pool:a").await.json().await.unwrap();
    assert_eq!(pool["leases"][0]["permits"], 2, "{pool}");

    // Each lock is an ordinary hold of the one token.
    assert_eq!(
        app.extend("acct:2", token, 30_000).await.status(),
        StatusCode::OK
    );
    for key in ["acct:1", "acct:2", "pool:a"] {
        assert_eq!(
            app.release(key, token).await.status(),
            StatusCode::NO_CONTENT
        );
    }

    // One held by another: refused naming it, and nothing of the batch held.
    let other = app.take("acct:2", 20_000).await;
    let refused = batch(
        &app,
        json!({"locks": [{"key": "acct:1"}, {"key": "acct:2"}]}),
    )
    .await;
    let problem = assert_problem(refused, 409, "lock-held").await;
    assert_eq!(problem["key"], "acct:2");
    assert!(problem["retry_after_ms"].as_u64() > Some(0));
    assert!(
        !held(&app, "acct:1").await,
        "a refused batch left a lock held"
    );
    assert_eq!(
        app.release("acct:2", &other.token).await.status(),
        StatusCode::NO_CONTENT
    );
}

/// A waiting batch is granted when its last lock frees, all at once; while
/// it waits, no observer sees any of its locks held, and the wait is the
/// batch's whole budget, not each lock's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_batch_is_granted_whole_when_its_last_lock_frees() {
    let redis = RedisServer::start().await;
    let (one, two) = (TestApp::spawn(&redis).await, TestApp::spawn(&redis).await);
    let holder_a = one.take("w:a", 30_000).await;
    let holder_c = one.take("w:c", 30_000).await;
    let waiting = {
        let body = json!({"locks": [{"key": "w:a"}, {"key": "w:b"}, {"key": "w:c"}],
                          "wait_ms": 10_000});
        let request = two.http.post(two.url("/locks/batch")).json(&body);
        tokio::spawn(request.send())
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let one_step = !on_a_cluster();
    if one_step {
        assert!(!held(&one, "w:b").await, "part of a waiting batch is held");
    }
    assert_eq!(
        one.release("w:a", &holder_a.token).await.status(),
        StatusCode::NO_CONTENT
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "granted with w:c still held");
    if one_step {
        for key in ["w:a", "w:b"] {
            assert!(!held(&one, key).await, "{key} of a waiting batch is held");
        }
        // A newcomer for a lock the batch waits at the head of waits
        // behind it.
        let newcomer = one.acquire(json!({"key": "w:b"})).await;
        assert_problem(newcomer, 409, "lock-held").await;
    }
    let released_at = Instant::now();
    assert_eq!(
        one.release("w:c", &holder_c.token).await.status(),
        StatusCode::NO_CONTENT
    );
    let granted = waiting.await.unwrap().unwrap();
    assert_eq!(granted.status(), StatusCode::CREATED);
    assert!(
        released_at.elapsed() < Duration::from_secs(2),
        "granted {:?} after its last lock freed",
        released_at.elapsed()
    );
    let grant: Value = granted.json().await.unwrap();
    assert!(grant["waited_ms"].as_u64() > Some(500));
    for key in ["w:a", "w:b", "w:c"] {
        let lock: Value = one
            .get(&format!("/locks/{key}"))
            .await
            .json()
            .await
            .unwrap();
        let fence = grant["locks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|lock| lock["key"] == key)
            .unwrap()["fencing_token"]
            .clone();
        assert_eq!(lock["fencing_token"], fence, "{key}: {lock}");
    }

    // The wait is the batch's: half a second in all, though two locks are held.
    let started = Instant::now();
    let refused = batch(
        &two,
        json!({"locks": [{"key": "w:a"}, {"key": "w:c"}], "wait_ms": 500}),
    )
    .await;
    assert_problem(refused, 409, "lock-held").await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_millis(1_400),
        "a 500 ms batch wait took {took:?}"
    );
}

/// Many clients over three instances take 2 to 5 of 12 keys in random
/// orders, with waits: every batch is granted within its budget (none
/// waits for another in a circle), and no two exclusive holds overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_in_any_order_never_deadlock_nor_overlap() {
    let redis = RedisServer::start().await;
    let apps = Arc::new([
        TestApp::spawn(&redis).await,
        TestApp::spawn(&redis).await,
        TestApp::spawn(&redis).await,
    ]);
    let holding = Arc::new(std::sync::Mutex::new(
        std::collections::HashSet::<String>::new(),
    ));
    let clients: Vec<_> = (0..12u64)
        .map(|client| {
            let (apps, holding) = (apps.clone(), holding.clone());
            tokio::spawn(async move {
                let mut seed = client.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                let mut next = move |bound: u64| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed % bound
                };
                let mut outcomes = Vec::new();
                for round in 0..6 {
                    let app = &apps[usize::try_from(next(3)).unwrap()];
                    let mut keys: Vec<String> = (0..12).map(|k| format!("rnd:{k}")).collect();
                    for i in (1..keys.len()).rev() {
                        keys.swap(i, usize::try_from(next(i as u64 + 1)).unwrap());
                    }
                    keys.truncate(2 + usize::try_from(next(4)).unwrap());
                    let locks: Vec<Value> = keys.iter().map(|key| json!({"key": key})).collect();
                    let started = Instant::now();
                    let response = batch(
                        app,
                        json!({"locks": locks, "ttl_ms": 10_000, "wait_ms": 8_000}),
                    )
                    .await;
                    let status = response.status();
                    if status != StatusCode::CREATED {
                        outcomes.push((round, status, started.elapsed(), false));
                        continue;
                    }
                    let grant: Value = response.json().await.unwrap();
                    let overlap = {
                        let mut held = holding.lock().unwrap();
                        let overlap = keys.iter().any(|key| held.contains(key));
                        held.extend(keys.iter().cloned());
                        overlap
                    };
                    tokio::time::sleep(Duration::from_millis(5 + next(20))).await;
                    {
                        let mut held = holding.lock().unwrap();
                        for key in &keys {
                            held.remove(key);
                        }
                    }
                    let token = grant["token"].as_str().unwrap();
                    for key in &keys {
                        assert_eq!(
                            app.release(key, token).await.status(),
                            StatusCode::NO_CONTENT
                        );
                    }
                    outcomes.push((round, status, started.elapsed(), overlap));
                }
                outcomes
            })
        })
        .collect();
    let mut batches = 0;
    for client in clients {
        for (round, status, took, overlap) in client.await.unwrap() {
            batches += 1;
            assert_eq!(status, StatusCode::CREATED, "round {round} waited {took:?}");
            assert!(!overlap, "two batches held one key at once");
        }
    }
    assert_eq!(batches, 72);
}

/// On a Redis Cluster a batch is taken lock by lock: one refused gives back
/// what it took before its answer; one whose gateway is killed holds
/// nothing past its lease. (On one Redis, the same holds trivially.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_or_abandoned_batch_holds_nothing_after() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    // The keys sort a < b: a is taken first on a Cluster, then b refused.
    let other = app.take("left:b", 30_000).await;
    let refused = batch(
        &app,
        json!({"locks": [{"key": "left:b"}, {"key": "left:a"}], "wait_ms": 300}),
    )
    .await;
    assert_problem(refused, 409, "lock-held").await;
    assert!(!held(&app, "left:a").await, "a refused batch kept left:a");

    let mut gateway = GatewayProcess::spawn(&redis, &[], &[]).await;
    let waiting = gateway
        .http
        .post(gateway.url("/locks/batch"))
        .json(&json!({"locks": [{"key": "left:a"}, {"key": "left:b"}],
                      "ttl_ms": 1_000, "wait_ms": 20_000}))
        .send();
    let waiting = tokio::spawn(waiting);
    tokio::time::sleep(Duration::from_millis(500)).await;
    gateway.child.kill().unwrap();
    let _ = gateway.child.wait();
    let _ = waiting.await;
    assert_eq!(
        app.release("left:b", &other.token).await.status(),
        StatusCode::NO_CONTENT
    );
    // Whatever it took, its lease (a second) ends it.
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    for key in ["left:a", "left:b"] {
        assert!(!held(&app, key).await, "{key} outlived a killed batch");
    }
    let again = batch(
        &app,
        json!({"locks": [{"key": "left:a"}, {"key": "left:b"}]}),
    )
    .await;
    assert_eq!(again.status(), StatusCode::CREATED);
}

/// A batch's grant is, to a watcher, an ordinary `acquired` of each key.
#[tokio::test]
async fn watchers_see_a_batch_as_acquired_events() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let watched = app
        .http
        .get(app.url("/locks/seen:b/events"))
        .send()
        .await
        .unwrap();
    let mut events = EventStream::of(watched);
    assert_eq!(
        events.next(Duration::from_secs(2)).await.unwrap().name,
        "snapshot"
    );
    let response = batch(
        &app,
        json!({"locks": [{"key": "seen:a"}, {"key": "seen:b"}]}),
    )
    .await;
    let grant: Value = response.json().await.unwrap();
    let acquired = events.until("acquired", Duration::from_secs(2)).await;
    assert_eq!(
        acquired.data["fencing_token"],
        grant["locks"][1]["fencing_token"]
    );
}

#[tokio::test]
async fn bad_batches_are_refused_and_hold_nothing() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let many: Vec<Value> = (0..65)
        .map(|n| json!({"key": format!("bad:{n}")}))
        .collect();
    for (body, slug, field) in [
        (json!({"locks": []}), "invalid-field", "locks"),
        (json!({"locks": many}), "invalid-field", "locks"),
        (
            json!({"locks": [{"key": "bad:1"}, {"key": "bad:1"}]}),
            "invalid-field",
            "locks",
        ),
        (
            json!({"locks": [{"key": "bad:1"}, {"key": "bad:2", "limit": 2, "permits": 3}]}),
            "invalid-field",
            "permits",
        ),
        (
            json!({"locks": [{"key": "bad:1", "mode": "shared", "permits": 1}]}),
            "invalid-field",
            "permits",
        ),
        (
            json!({"locks": [{"key": "bad:1"}], "wait_ms": -1}),
            "invalid-field",
            "wait_ms",
        ),
        (
            json!({"locks": [{"key": "bad:1"}], "ttl_ms": 5}),
            "invalid-field",
            "ttl_ms",
        ),
    ] {
        let problem = assert_problem(batch(&app, body.clone()).await, 422, slug).await;
        assert_eq!(problem["field"], field, "{body}");
    }
    let unknown = batch(&app, json!({"locks": [{"key": "bad:1", "ttl_ms": 5}]})).await;
    assert_problem(unknown, 400, "malformed-body").await;
    for n in 0..3 {
        assert!(!held(&app, &format!("bad:{n}")).await);
    }
    // A lock named `batch` keeps its routes.
    let grant = app.take("batch", 10_000).await;
    assert_eq!(app.get("/locks/batch").await.status(), StatusCode::OK);
    assert_eq!(
        app.release("batch", &grant.token).await.status(),
        StatusCode::NO_CONTENT
    );
}

/// A batch taken in a session hangs every lock on it: deleting the session
/// frees them all, and the session showed each.
#[tokio::test]
async fn a_batch_in_a_session_ends_with_it() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let session: Value = app
        .post_json("/sessions", &json!({"ttl_ms": 10_000}))
        .await
        .json()
        .await
        .unwrap();
    let id = session["id"].as_str().unwrap();
    let response = batch(
        &app,
        json!({"locks": [{"key": "sb:a"}, {"key": "sb:b", "mode": "shared"}], "session": id}),
    )
    .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let grant: Value = response.json().await.unwrap();
    assert_eq!(grant["expires_at_ms"], session["expires_at_ms"]);
    let status: Value = app
        .get(&format!("/sessions/{id}"))
        .await
        .json()
        .await
        .unwrap();
    let mut keys: Vec<&str> = status["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|lock| lock["key"].as_str().unwrap())
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["sb:a", "sb:b"], "{status}");
    let deleted = app
        .http
        .delete(app.url(&format!("/sessions/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    for key in ["sb:a", "sb:b"] {
        assert!(!held(&app, key).await, "{key} outlived its session");
    }
}

/// A streamed batch of `keys` (exclusive), its stream and its grant.
async fn streamed_batch(app: &TestApp, keys: &[&str], extra: Value) -> (EventStream, Value) {
    let locks: Vec<Value> = keys.iter().map(|key| json!({"key": key})).collect();
    let mut body = json!({"locks": locks, "ttl_ms": 300});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    let response = app.stream_batch(body).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut stream = EventStream::of(response);
    let acquired = stream.next(Duration::from_secs(5)).await.expect("an event");
    assert_eq!(acquired.name, "acquired", "{acquired:?}");
    (stream, acquired.data)
}

/// Whether `key` is freed within a second.
async fn freed(app: &TestApp, key: &str) -> bool {
    crate::helpers::eventually(Duration::from_secs(1), || async { !held(app, key).await }).await
}

#[tokio::test]
async fn a_streamed_batch_is_renewed_by_the_gateway_and_released_when_its_client_leaves() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let (mut stream, grant) = streamed_batch(&app, &["acct:1", "acct:2"], json!({})).await;
    assert!(uuid::Uuid::parse_str(grant["token"].as_str().unwrap()).is_ok());
    assert_eq!(grant["locks"].as_array().map(Vec::len), Some(2), "{grant}");

    // Renewed as one, every third of the 300 ms lease, well past it.
    let mut last_end = grant["expires_at_ms"].as_u64().unwrap();
    for _ in 0..6 {
        let renewed = stream.next(Duration::from_secs(2)).await.unwrap();
        assert_eq!(renewed.name, "renewed", "{renewed:?}");
        let end = renewed.data["expires_at_ms"].as_u64().unwrap();
        assert!(
            end > last_end,
            "the leases did not move: {end} after {last_end}"
        );
        last_end = end;
    }
    for (index, key) in ["acct:1", "acct:2"].iter().enumerate() {
        let state: Value = app
            .get(&format!("/locks/{key}"))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(
            state["fencing_token"], grant["locks"][index]["fencing_token"],
            "{state}"
        );
    }

    // The client leaves: every lock of it is released at once.
    drop(stream);
    assert!(freed(&app, "acct:1").await && freed(&app, "acct:2").await);
}

#[tokio::test]
async fn releasing_one_lock_of_a_streamed_batch_ends_it_and_gives_back_the_others() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let (mut stream, grant) = streamed_batch(&app, &["seat:9", "pay:9"], json!({})).await;
    let token = grant["token"].as_str().unwrap();
    assert_eq!(
        app.release("seat:9", token).await.status(),
        StatusCode::NO_CONTENT
    );
    let released = stream.until("released", Duration::from_secs(2)).await;
    assert_eq!(released.data, json!({"key": "seat:9"}));
    assert!(
        stream.next(Duration::from_millis(300)).await.is_none(),
        "the stream ended"
    );
    // Held while the stream is open, but not as a part of a batch.
    assert!(freed(&app, "pay:9").await, "the other lock was given back");
}

#[tokio::test]
async fn a_revoked_lock_of_a_streamed_batch_ends_it_with_lost_naming_that_lock() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_sale(&redis, &[]).await;
    let (mut stream, _) = streamed_batch(&app, &["a:1", "b:1"], json!({})).await;
    let revoked = app
        .http
        .delete(app.url("/locks/b:1?force=true"))
        .bearer_auth(crate::helpers::ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), StatusCode::NO_CONTENT);
    let lost = stream.until("lost", Duration::from_secs(2)).await;
    assert_eq!(lost.data, json!({"reason": "revoked", "key": "b:1"}));
    assert!(freed(&app, "a:1").await, "the other lock was given back");
}

#[tokio::test]
async fn a_streamed_batch_in_a_session_is_not_renewed_and_ends_with_the_session() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let opened: Value = app
        .post_json("/sessions", &json!({"ttl_ms": 5000}))
        .await
        .json()
        .await
        .unwrap();
    let id = opened["id"].as_str().unwrap();
    let (mut stream, grant) = streamed_batch(&app, &["x:1", "y:1"], json!({"session": id})).await;
    assert_eq!(
        grant["expires_at_ms"], opened["expires_at_ms"],
        "the session's lease"
    );
    // The session's lease holds them: nothing to renew.
    let quiet = stream.read_for(Duration::from_millis(400)).await;
    assert!(quiet.is_empty(), "{quiet:?}");
    let ended = app
        .http
        .delete(app.url(&format!("/sessions/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status(), StatusCode::NO_CONTENT);
    let lost = stream.until("lost", Duration::from_secs(2)).await;
    assert_eq!(lost.data["reason"], "session-ended", "{lost:?}");
    assert!(freed(&app, "x:1").await && freed(&app, "y:1").await);
}

#[tokio::test]
async fn a_streamed_batch_is_refused_with_the_ordinary_answers() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let holder = app.take("held:1", 10_000).await;
    let refused = app
        .stream_batch(json!({"locks": [{"key": "free:1"}, {"key": "held:1"}], "wait_ms": 100}))
        .await;
    let problem = assert_problem(refused, 409, "lock-held").await;
    assert_eq!(problem["key"], "held:1");
    assert!(!held(&app, "free:1").await, "a refused batch holds nothing");
    assert_eq!(
        app.release("held:1", &holder.token).await.status(),
        StatusCode::NO_CONTENT
    );
}

/// A batch waiting for a lock held in a session waits (its session's lease
/// is far ahead) and is answered as any batch is when its wait runs out.
#[tokio::test]
async fn a_batch_waits_for_a_lock_held_in_a_session() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let opened: Value = app
        .post_json("/sessions", &json!({"ttl_ms": 30_000}))
        .await
        .json()
        .await
        .unwrap();
    let taken = app
        .acquire(json!({"key": "sess:held", "session": opened["id"]}))
        .await;
    assert_eq!(taken.status(), StatusCode::CREATED);
    let refused = batch(
        &app,
        json!({"locks": [{"key": "sess:free"}, {"key": "sess:held"}], "wait_ms": 300}),
    )
    .await;
    let problem = assert_problem(refused, 409, "lock-held").await;
    assert_eq!(problem["key"], "sess:held");
    assert!(!held(&app, "sess:free").await);
}
