//! Sessions: one lease for many locks, kept alive through any instance, freed with every lock at its expiry (within a second, whichever instance kept it), with a visible lock-delay; a wait that ends with its session; a keepalive whose cost does not grow with the locks.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{
    ADMIN, EventStream, GatewayProcess, RedisServer, TestApp, assert_problem, command_calls,
    eventually, sample,
};

/// Opens a session on `app`; its 201 body.
async fn open(app: &TestApp, body: Value) -> Value {
    let response = app.post_json("/sessions", &body).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json().await.unwrap()
}

/// Takes `key` in `session`; the grant.
async fn take_in(app: &TestApp, key: &str, session: &str, extra: Value) -> Value {
    let mut body = json!({"key": key, "session": session});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    let response = app.acquire(body).await;
    assert_eq!(response.status(), StatusCode::CREATED, "taking {key}");
    response.json().await.unwrap()
}

fn now_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// On one Redis a lock taken in a session is checked against its session,
/// joined to it and attached in the same call as its grant (one function
/// call where it took four scripts), and its release is one call and the
/// session's `HDEL`; the session lists it with its fencing token, and its
/// lease is the session's.
#[tokio::test]
async fn a_lock_in_a_session_on_one_redis_is_taken_in_one_call() {
    let redis = RedisServer::start_single().await;
    let app = TestApp::spawn(&redis).await;
    let session = open(&app, json!({"ttl_ms": 10_000})).await;
    let id = session["id"].as_str().unwrap();
    // A first cycle, so that loading the library is not counted.
    let first = take_in(&app, "one-call:warm", id, json!({})).await;
    app.release("one-call:warm", first["token"].as_str().unwrap())
        .await;

    let before = command_calls(&redis).await;
    let grant = take_in(&app, "one-call", id, json!({})).await;
    let after_grant = command_calls(&redis).await;
    let view: Value = app
        .get(&format!("/sessions/{id}"))
        .await
        .json()
        .await
        .unwrap();
    let released = app
        .release("one-call", grant["token"].as_str().unwrap())
        .await;
    assert_eq!(released.status(), StatusCode::NO_CONTENT);
    let after = command_calls(&redis).await;
    let ran = |at: &std::collections::HashMap<String, u64>, name: &str| {
        at.get(name).unwrap_or(&0) - before.get(name).unwrap_or(&0)
    };

    assert_eq!(ran(&after_grant, "fcall"), 1, "{after_grant:?}");
    assert_eq!(ran(&after_grant, "evalsha"), 0, "{after_grant:?}");
    assert_eq!(grant["ttl_ms"], 10_000, "{grant}");
    assert_eq!(grant["expires_at_ms"], session["expires_at_ms"], "{grant}");
    assert_eq!(
        view["locks"],
        json!([{"key": "one-call", "mode": "exclusive", "fencing_token": grant["fencing_token"]}]),
        "{view}"
    );
    // The release, and the session's look (a script) between.
    assert_eq!(
        ran(&after, "fcall") + ran(&after, "evalsha"),
        3,
        "{after:?}"
    );
    assert_eq!(ran(&after, "hdel"), 1, "the session forgets it: {after:?}");
}

#[tokio::test]
async fn a_session_holds_many_locks_kept_alive_through_any_instance_and_deleted_at_once() {
    let redis = RedisServer::start().await;
    let (one, two) = (TestApp::spawn(&redis).await, TestApp::spawn(&redis).await);
    let session = open(&one, json!({"ttl_ms": 5_000, "value": "worker-7"})).await;
    let id = session["id"].as_str().unwrap();
    assert_eq!(session["ttl_ms"], 5_000);
    assert_eq!(session["lock_delay_ms"], 0);
    let a = take_in(&one, "sess:a", id, json!({"ttl_ms": 100})).await;
    let b = take_in(&two, "sess:b", id, json!({"mode": "shared"})).await;
    // The lock's lease is the session's, whatever ttl_ms said.
    assert_eq!(a["expires_at_ms"], session["expires_at_ms"]);
    assert!(b["fencing_token"].as_u64().unwrap() > 0);

    // Kept alive through the other instance; its locks with it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let kept = two
        .http
        .put(two.url(&format!("/sessions/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(kept.status(), StatusCode::OK);
    let kept: Value = kept.json().await.unwrap();
    assert_eq!(kept["locks"], 2);
    assert!(kept["expires_at_ms"].as_u64() > session["expires_at_ms"].as_u64());
    let lock: Value = one.get("/locks/sess:a").await.json().await.unwrap();
    assert_eq!(lock["expires_at_ms"], kept["expires_at_ms"], "{lock}");
    assert_eq!(
        lock["leases"][0]["session"].as_str().map(str::len),
        Some(32)
    );
    assert!(
        !lock.to_string().contains(id),
        "a lock showed its session's id"
    );

    let status: Value = one
        .get(&format!("/sessions/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(status["value"], "worker-7");
    let mut keys: Vec<&str> = status["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|lock| lock["key"].as_str().unwrap())
        .collect();
    keys.sort();
    assert_eq!(keys, ["sess:a", "sess:b"]);

    // A waiter for one of them, served when the session is deleted.
    let waiter = {
        let request = two
            .http
            .post(two.url("/locks"))
            .json(&json!({"key": "sess:a", "wait_ms": 10_000}));
        tokio::spawn(request.send())
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let deleted = one
        .http
        .delete(one.url(&format!("/sessions/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    assert_eq!(waiter.await.unwrap().unwrap().status(), StatusCode::CREATED);
    assert_eq!(
        one.get("/locks/sess:b").await.status(),
        StatusCode::NOT_FOUND
    );
    // A clean end keeps no lock-delay.
    let again = one.acquire(json!({"key": "sess:b"})).await;
    assert_eq!(again.status(), StatusCode::CREATED);
    for request in [
        one.http.put(one.url(&format!("/sessions/{id}"))),
        one.http.get(one.url(&format!("/sessions/{id}"))),
        one.http.delete(one.url(&format!("/sessions/{id}"))),
    ] {
        assert_problem(request.send().await.unwrap(), 404, "session-not-found").await;
    }
    let late = one.acquire(json!({"key": "sess:c", "session": id})).await;
    assert_problem(late, 404, "session-not-found").await;
}

/// A session nobody keeps alive expires: every lock freed, and the next
/// waiter granted, no earlier than its expiry and no later than a second
/// after, though the instance that opened it and kept it alive is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_sessions_locks_are_freed_within_a_second_of_its_expiry() {
    let redis = RedisServer::start().await;
    let mut keeper = GatewayProcess::spawn(&redis, &[], &[]).await;
    let other = TestApp::spawn(&redis).await;
    let opened = keeper
        .http
        .post(keeper.url("/sessions"))
        .json(&json!({"ttl_ms": 1_500}))
        .send()
        .await
        .unwrap();
    let session: Value = opened.json().await.unwrap();
    let id = session["id"].as_str().unwrap().to_owned();
    let keys = ["exp:a", "exp:b", "exp:c"];
    for key in keys {
        GatewayProcess::granted(keeper.acquire(&json!({"key": key, "session": id}))).await;
    }
    let kept: Value = keeper
        .http
        .put(keeper.url(&format!("/sessions/{id}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let expires_at = kept["expires_at_ms"].as_u64().unwrap();
    let waiter = {
        let request = other
            .http
            .post(other.url("/locks"))
            .json(&json!({"key": "exp:a", "wait_ms": 10_000}));
        tokio::spawn(async move {
            let response = request.send().await.unwrap();
            (now_ms(), response.status())
        })
    };
    keeper.child.kill().unwrap();
    let _ = keeper.child.wait();

    let (granted_at, status) = waiter.await.unwrap();
    assert_eq!(status, StatusCode::CREATED);
    assert!(
        granted_at + 50 >= expires_at,
        "granted {} ms early",
        expires_at - granted_at
    );
    assert!(
        granted_at <= expires_at + 1_000,
        "granted {} ms after the session expired",
        granted_at - expires_at
    );
    for key in &keys[1..] {
        assert_eq!(
            other.get(&format!("/locks/{key}")).await.status(),
            StatusCode::NOT_FOUND
        );
    }
}

/// A session with a lock-delay expires: each of its locks stays
/// unavailable until the expiry plus the delay, visibly (`GET`, a refusal's
/// `retry_after_ms`, watchers' `delayed`), and a waiter is granted as it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_sessions_locks_keep_its_lock_delay_visibly() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let session = open(&app, json!({"ttl_ms": 1_000, "lock_delay_ms": 1_500})).await;
    let id = session["id"].as_str().unwrap();
    take_in(&app, "delay:a", id, json!({})).await;
    let watcher = app
        .http
        .get(app.url("/locks/delay:a/events"))
        .send()
        .await
        .unwrap();
    let mut watcher = EventStream::of(watcher);
    assert_eq!(
        watcher.next(Duration::from_secs(2)).await.unwrap().name,
        "snapshot"
    );

    let delayed = eventually(Duration::from_secs(4), || async {
        let response = app.get("/locks/delay:a").await;
        response.status() == StatusCode::OK
            && response
                .json::<Value>()
                .await
                .is_ok_and(|body| body["held"] == false)
    })
    .await;
    assert!(delayed, "the lock was never shown delayed");
    let status: Value = app.get("/locks/delay:a").await.json().await.unwrap();
    let until = status["delayed_until_ms"].as_u64().unwrap();
    assert!(until >= session["expires_at_ms"].as_u64().unwrap() + 1_500);

    let refused = app.acquire(json!({"key": "delay:a"})).await;
    let problem = assert_problem(refused, 409, "lock-held").await;
    assert!(problem["retry_after_ms"].as_u64().unwrap() <= 1_500);
    // Nobody holds it: the refusal says it is the delay, and until when,
    // whether it tried at once, waited, or asked for it in a batch.
    let refusals = [
        problem,
        assert_problem(
            app.acquire(json!({"key": "delay:a", "wait_ms": 100})).await,
            409,
            "lock-held",
        )
        .await,
        assert_problem(
            app.post_json("/locks/batch", &json!({"locks": [{"key": "delay:a"}]}))
                .await,
            409,
            "lock-held",
        )
        .await,
        assert_problem(
            app.post_json(
                "/locks/batch",
                &json!({"locks": [{"key": "delay:b"}, {"key": "delay:a"}], "wait_ms": 100}),
            )
            .await,
            409,
            "lock-held",
        )
        .await,
    ];
    for refused in refusals {
        assert_eq!(refused["key"], "delay:a", "{refused}");
        assert_eq!(refused["delayed_until_ms"], until, "{refused}");
        let detail = refused["detail"].as_str().unwrap();
        assert!(
            detail.contains("lock-delay") && !detail.contains("another owner"),
            "{detail}"
        );
    }
    let waiter = app
        .acquire(json!({"key": "delay:a", "wait_ms": 5_000}))
        .await;
    let granted_at = now_ms();
    assert_eq!(waiter.status(), StatusCode::CREATED);
    assert!(
        granted_at + 20 >= until,
        "granted {} ms before the delay ended",
        until - granted_at
    );
    assert!(
        granted_at <= until + 500,
        "granted {} ms after the delay ended",
        granted_at - until
    );
    let events = watcher.read_for(Duration::from_millis(300)).await;
    let names: Vec<&str> = events.iter().map(|event| event.name.as_str()).collect();
    assert!(
        names.starts_with(&["expired", "delayed"]),
        "the watcher saw {names:?}"
    );
}

/// A request waiting with a session that ends stops waiting and is
/// answered `404 session-not-found` within a second, holding nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_ends_with_its_session() {
    let redis = RedisServer::start().await;
    let (one, two) = (TestApp::spawn(&redis).await, TestApp::spawn(&redis).await);
    let holder = one.take("wait:a", 30_000).await;
    for ending in ["deleted", "expired"] {
        let session = open(&one, json!({"ttl_ms": 1_000})).await;
        let id = session["id"].as_str().unwrap().to_owned();
        let waiter = {
            let body = json!({"key": "wait:a", "wait_ms": 20_000, "session": id});
            let request = two.http.post(two.url("/locks")).json(&body);
            tokio::spawn(async move {
                let response = request.send().await.unwrap();
                (Instant::now(), response)
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let ended_at = if ending == "deleted" {
            let deleted = one
                .http
                .delete(one.url(&format!("/sessions/{id}")))
                .send()
                .await
                .unwrap();
            assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
            Instant::now()
        } else {
            // Nobody keeps it alive: it ends within its ttl and a second.
            Instant::now() + Duration::from_millis(800)
        };
        let (answered, response) = waiter.await.unwrap();
        assert_problem(response, 404, "session-not-found").await;
        assert!(
            answered <= ended_at + Duration::from_millis(1_300),
            "{ending}: the wait went on {:?} after its session ended",
            answered.saturating_duration_since(ended_at)
        );
    }
    let status: Value = one.get("/locks/wait:a").await.json().await.unwrap();
    assert_eq!(status["fencing_token"], holder.fencing_token);
    assert_eq!(status["waiters"], json!([]));
}

/// A keepalive costs the same few Redis commands whether one lock or a
/// hundred hang on the session.
#[tokio::test]
async fn a_keepalive_costs_the_same_with_one_lock_or_a_hundred() {
    let redis = RedisServer::start_single().await;
    let app = TestApp::spawn(&redis).await;
    let mut costs = Vec::new();
    for count in [1, 100] {
        let session = open(&app, json!({"ttl_ms": 30_000})).await;
        let id = session["id"].as_str().unwrap();
        for n in 0..count {
            take_in(&app, &format!("cost:{count}:{n}"), id, json!({})).await;
        }
        let before: u64 = command_calls(&redis).await.values().sum();
        let kept = app
            .http
            .put(app.url(&format!("/sessions/{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(kept.status(), StatusCode::OK);
        let after: u64 = command_calls(&redis).await.values().sum();
        // Less the one INFO that read the count.
        costs.push(after - before - 1);
    }
    // Six (the script, its four commands, the index), and the sweep's few
    // a quarter second: a keepalive that touched every lock would cost a
    // hundred more.
    assert!(
        costs[1] <= costs[0] + 6,
        "a keepalive cost {costs:?} commands"
    );
    assert!(costs[0] <= 12, "a keepalive cost {} commands", costs[0]);
}

/// A streamed session lives while its response stays open: `opened`, then
/// `renewed`; closing the connection ends it and frees its locks.
#[tokio::test]
async fn a_streamed_session_lives_while_its_client_stays() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let response = app
        .http
        .post(app.url("/sessions"))
        .header("Accept", "text/event-stream")
        .json(&json!({"ttl_ms": 1_200}))
        .send()
        .await
        .unwrap();
    let mut events = EventStream::of(response);
    let opened = events.next(Duration::from_secs(2)).await.unwrap();
    assert_eq!(opened.name, "opened");
    let id = opened.data["id"].as_str().unwrap().to_owned();
    take_in(&app, "streamed:a", &id, json!({})).await;
    // Kept alive well past its lease.
    let renewed = events.until("renewed", Duration::from_secs(2)).await;
    assert!(renewed.data["expires_at_ms"].as_u64().is_some());
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(app.get("/locks/streamed:a").await.status(), StatusCode::OK);
    drop(events);
    let freed = eventually(Duration::from_secs(2), || async {
        app.get("/locks/streamed:a").await.status() == StatusCode::NOT_FOUND
    })
    .await;
    assert!(freed, "closing the stream did not end the session");
}

/// Bad input gets its problem answer, and nothing is left held.
#[tokio::test]
async fn bad_session_input_is_refused_and_leaves_nothing() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_with(&redis, &["--admin-token", ADMIN]).await;
    for (body, status, slug) in [
        (json!({"ttl": 1_000}), 400, "malformed-body"),
        (json!({"ttl_ms": 999}), 422, "invalid-field"),
        (json!({"ttl_ms": 3_600_001}), 422, "invalid-field"),
        (json!({"lock_delay_ms": 60_001}), 422, "invalid-field"),
        (json!({"ttl_ms": "10"}), 400, "malformed-body"),
    ] {
        let response = app.post_json("/sessions", &body).await;
        assert_problem(response, status, slug).await;
    }
    let malformed = app.get("/sessions/not-a-session").await;
    assert_problem(malformed, 422, "invalid-field").await;
    let bad = app
        .acquire(json!({"key": "bad:a", "session": "nope"}))
        .await;
    assert_problem(bad, 422, "invalid-field").await;
    let unknown = app
        .acquire(json!({"key": "bad:a", "session": "0b6e2f4c-3d5a-4f1e-9a8b-7c6d5e4f3a2b"}))
        .await;
    assert_problem(unknown, 404, "session-not-found").await;
    assert_eq!(
        app.get("/locks/bad:a").await.status(),
        StatusCode::NOT_FOUND
    );
    let session = open(&app, json!({})).await;
    let id = session["id"].as_str().unwrap();
    let keep = app
        .http
        .put(app.url(&format!("/sessions/{id}")))
        .json(&json!({"ttl_ms": 5}))
        .send()
        .await
        .unwrap();
    assert_problem(keep, 422, "invalid-field").await;
}

/// Two sessions, each holding what the other waits for, through two
/// instances: the wait that closes the cycle (the youngest) is refused
/// `409 deadlock` naming the cycle's keys, at once; the other goes on and
/// is granted when the refused session gives its lock back. A wait in no
/// cycle is never refused so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_of_session_waits_is_found_and_its_youngest_wait_refused() {
    let redis = RedisServer::start().await;
    let (one, two) = (TestApp::spawn(&redis).await, TestApp::spawn(&redis).await);
    let a = open(&one, json!({"ttl_ms": 30_000})).await;
    let b = open(&two, json!({"ttl_ms": 30_000})).await;
    let (a, b) = (a["id"].as_str().unwrap(), b["id"].as_str().unwrap());
    take_in(&one, "cycle:x", a, json!({})).await;
    let y = take_in(&two, "cycle:y", b, json!({})).await;

    let older = {
        let body = json!({"key": "cycle:y", "session": a, "wait_ms": 20_000});
        let request = one.http.post(one.url("/locks")).json(&body);
        tokio::spawn(request.send())
    };
    // In no cycle yet: waiting, never refused.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!older.is_finished(), "a wait in no cycle ended");

    let closing = Instant::now();
    let refused = two
        .acquire(json!({"key": "cycle:x", "session": b, "wait_ms": 20_000}))
        .await;
    let found_in = closing.elapsed();
    let problem = assert_problem(refused, 409, "deadlock").await;
    assert_eq!(problem["key"], "cycle:x");
    assert_eq!(problem["cycle"], json!(["cycle:x", "cycle:y"]));
    assert!(
        found_in < Duration::from_secs(1),
        "found {found_in:?} after it closed"
    );
    assert!(!older.is_finished(), "the older wait was refused too");

    let released = two
        .http
        .delete(two.url("/locks/cycle:y"))
        .header("Lock-Token", y["token"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(released.status(), StatusCode::NO_CONTENT);
    assert_eq!(older.await.unwrap().unwrap().status(), StatusCode::CREATED);
}

/// A batch's wait in a session is part of the search as a single wait is:
/// a cycle through it is found whichever closes it, the youngest wait
/// refused `409 deadlock` (the batch, or the single wait), the other going
/// on. `batch_closes`: the batch is the youngest.
async fn a_cycle_through_a_batch(batch_closes: bool) {
    let redis = RedisServer::start().await;
    let (one, two) = (TestApp::spawn(&redis).await, TestApp::spawn(&redis).await);
    let a = open(&one, json!({"ttl_ms": 30_000})).await;
    let b = open(&two, json!({"ttl_ms": 30_000})).await;
    let (a, b) = (a["id"].as_str().unwrap(), b["id"].as_str().unwrap());
    take_in(&one, "bcycle:x", a, json!({})).await;
    take_in(&two, "bcycle:y", b, json!({})).await;
    // Session a waits for y alone; session b's batch waits for x (and a free z).
    let single = |app: &TestApp| {
        let body = json!({"key": "bcycle:y", "session": a, "wait_ms": 20_000});
        app.http.post(app.url("/locks")).json(&body).send()
    };
    let batch = |app: &TestApp| {
        let body = json!({"locks": [{"key": "bcycle:z"}, {"key": "bcycle:x"}],
                          "session": b, "wait_ms": 20_000});
        app.http.post(app.url("/locks/batch")).json(&body).send()
    };
    let (older, closing) = if batch_closes {
        (tokio::spawn(single(&one)), batch(&two))
    } else {
        (tokio::spawn(batch(&two)), single(&one))
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!older.is_finished(), "a wait in no cycle ended");
    let started = Instant::now();
    let refused = closing.await.unwrap();
    let found_in = started.elapsed();
    let problem = assert_problem(refused, 409, "deadlock").await;
    let cycle = problem["cycle"].as_array().unwrap();
    assert_eq!(cycle.len(), 2, "{problem}");
    assert!(
        found_in < Duration::from_secs(1),
        "found {found_in:?} after it closed"
    );
    assert!(!older.is_finished(), "the older wait was refused too");
    // Nothing of a refused batch is held.
    if batch_closes {
        assert_problem(one.get("/locks/bcycle:z").await, 404, "lock-not-found").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_closes_a_cycle_of_session_waits_is_refused_deadlock() {
    a_cycle_through_a_batch(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_closes_a_cycle_through_a_waiting_batch_is_refused_deadlock() {
    a_cycle_through_a_batch(false).await;
}

/// Every kind of hold hangs on a session: a wait granted later, a
/// re-entry, a counting lock, a streamed lock (which the gateway does not
/// renew: the session is its lease); deleting the session ends them all
/// at once, the streamed holder told `lost {"reason": "session-ended"}`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_hold_hangs_on_a_session_and_ends_with_it() {
    let redis = RedisServer::start().await;
    let (one, two) = (TestApp::spawn(&redis).await, TestApp::spawn(&redis).await);
    let session = open(&one, json!({"ttl_ms": 20_000})).await;
    let id = session["id"].as_str().unwrap();

    let other = one.take("kinds:waited", 30_000).await;
    let waiter = {
        let body = json!({"key": "kinds:waited", "session": id, "wait_ms": 10_000});
        let request = two.http.post(two.url("/locks")).json(&body);
        tokio::spawn(request.send())
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        one.release("kinds:waited", &other.token).await.status(),
        StatusCode::NO_CONTENT
    );
    let waited = waiter.await.unwrap().unwrap();
    assert_eq!(waited.status(), StatusCode::CREATED);
    let waited: Value = waited.json().await.unwrap();

    let held = take_in(&one, "kinds:again", id, json!({})).await;
    let again = one
        .acquire(json!({"key": "kinds:again", "session": id, "token": held["token"]}))
        .await;
    assert_eq!(again.status(), StatusCode::OK);
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["holds"], 2);

    let counted = take_in(&two, "kinds:pool", id, json!({"limit": 3})).await;

    let streamed = one
        .stream(json!({"key": "kinds:streamed", "session": id, "ttl_ms": 200}))
        .await;
    let mut streamed = EventStream::of(streamed);
    let acquired = streamed.next(Duration::from_secs(2)).await.unwrap();
    assert_eq!(acquired.name, "acquired");
    // Its lease is the session's, and it outlives the ttl_ms it named.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let lock: Value = one.get("/locks/kinds:streamed").await.json().await.unwrap();
    assert_eq!(lock["held"], true, "{lock}");

    let status: Value = two
        .get(&format!("/sessions/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        status["locks"].as_array().map(Vec::len),
        Some(4),
        "{status}"
    );
    for (key, lock) in [("kinds:waited", &waited), ("kinds:pool", &counted)] {
        let shown: Value = one
            .get(&format!("/locks/{key}"))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(shown["expires_at_ms"], lock["expires_at_ms"], "{shown}");
    }

    let deleted = two
        .http
        .delete(two.url(&format!("/sessions/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let lost = streamed.until("lost", Duration::from_secs(2)).await;
    assert_eq!(lost.data["reason"], "session-ended");
    // Its token renews nothing now, and is told so plainly.
    let token = acquired.data["token"].as_str().unwrap();
    assert_problem(
        one.extend("kinds:streamed", token, 5_000).await,
        404,
        "lock-not-found",
    )
    .await;
    for key in [
        "kinds:waited",
        "kinds:again",
        "kinds:pool",
        "kinds:streamed",
    ] {
        assert_eq!(
            one.get(&format!("/locks/{key}")).await.status(),
            StatusCode::NOT_FOUND,
            "{key} outlived its session"
        );
    }
}

/// A revoked lock of a session with a lock-delay stays unavailable for the
/// delay; a lock of the same session released with its token is free at once.
#[tokio::test]
async fn a_revoked_lock_keeps_its_sessions_lock_delay_and_a_released_one_none() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_with(&redis, &["--admin-token", ADMIN]).await;
    let session = open(&app, json!({"ttl_ms": 20_000, "lock_delay_ms": 2_000})).await;
    let id = session["id"].as_str().unwrap();
    let released = take_in(&app, "revdelay:released", id, json!({})).await;
    take_in(&app, "revdelay:revoked", id, json!({})).await;

    let response = app
        .release("revdelay:released", released["token"].as_str().unwrap())
        .await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let after_release = app.acquire(json!({"key": "revdelay:released"})).await;
    assert_eq!(after_release.status(), StatusCode::CREATED);

    let revoked_at = now_ms();
    let revoked = app
        .http
        .delete(app.url("/locks/revdelay:revoked?force=true"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), StatusCode::NO_CONTENT);
    let status: Value = app
        .get("/locks/revdelay:revoked")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(status["held"], false, "{status}");
    let until = status["delayed_until_ms"].as_u64().unwrap();
    assert!(
        until >= revoked_at + 1_900 && until <= now_ms() + 2_000,
        "delayed until {until}, revoked at {revoked_at}"
    );
    let refused = app.acquire(json!({"key": "revdelay:revoked"})).await;
    let problem = assert_problem(refused, 409, "lock-held").await;
    assert!(problem["retry_after_ms"].as_u64().unwrap() > 1_000);
    // The session itself goes on.
    let kept = app
        .http
        .put(app.url(&format!("/sessions/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(kept.status(), StatusCode::OK);
}

/// A wait without a session pays nothing for sessions: no command of the
/// wait, its grant or its release names a session's key.
#[tokio::test]
async fn a_killed_gateways_wait_closes_no_cycle() {
    // Past its instance's presence (1 s), short of taking it for dead.
    a_killed_gateways_wait_is_no_edge(Duration::from_millis(1_500)).await;
}

/// While a killed gateway's presence still stands: its wait is confirmed
/// by no renewal of its presence, so it closes no cycle either.
#[tokio::test]
async fn a_gateway_killed_a_moment_ago_closes_no_cycle_either() {
    a_killed_gateways_wait_is_no_edge(Duration::from_millis(200)).await;
}

/// Session `theirs` holds y and waits for x through a gateway killed
/// `after` before session `mine`, holding x, waits for y: that closes no
/// cycle, and `mine` is granted y once `theirs` expires.
async fn a_killed_gateways_wait_is_no_edge(after: Duration) {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let killed = GatewayProcess::spawn(&redis, &[], &[]).await;
    let mine = open(&app, json!({"ttl_ms": 30_000})).await;
    let theirs = open(&app, json!({"ttl_ms": 4_000})).await;
    let (mine, theirs) = (mine["id"].as_str().unwrap(), theirs["id"].as_str().unwrap());
    take_in(&app, "dead:x", mine, json!({})).await;
    take_in(&app, "dead:y", theirs, json!({})).await;
    let body = json!({"key": "dead:x", "session": theirs, "wait_ms": 20_000});
    let dead_wait = tokio::spawn(killed.acquire(&body).send());
    let queued = eventually(Duration::from_secs(5), || async {
        let lock: Value = app.get("/locks/dead:x").await.json().await.unwrap();
        lock["waiters"]
            .as_array()
            .is_some_and(|waiters| waiters.len() == 1)
    })
    .await;
    assert!(queued, "the wait never queued");
    drop(killed);
    assert!(
        dead_wait.await.unwrap().is_err(),
        "a killed gateway answered"
    );
    tokio::time::sleep(after).await;

    let answer = app
        .acquire(json!({"key": "dead:y", "session": mine, "wait_ms": 15_000}))
        .await;
    let status = answer.status();
    let body: Value = answer.json().await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// A keepalive's body may be empty, `null` or `{}` (the lease keeps its
/// length), or name a new `ttl_ms`, as the document says.
#[tokio::test]
async fn a_keepalive_takes_an_empty_body_null_or_a_new_length() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let session = open(&app, json!({"ttl_ms": 5_000})).await;
    let url = app.url(&format!("/sessions/{}", session["id"].as_str().unwrap()));
    for (body, ttl_ms) in [
        ("", 5_000),
        ("null", 5_000),
        ("{}", 5_000),
        (r#"{"ttl_ms": 8000}"#, 8_000),
    ] {
        let kept = app
            .http
            .put(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(kept.status(), StatusCode::OK, "body {body:?}");
        let kept: Value = kept.json().await.unwrap();
        assert_eq!(kept["ttl_ms"], ttl_ms, "body {body:?}");
    }
}

/// A lock of a session that an operator revokes is no longer the
/// session's: not listed, not counted, whoever holds it next.
#[tokio::test]
async fn a_revoked_lock_leaves_its_session() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_sale(&redis, &[]).await;
    let session = open(&app, json!({"ttl_ms": 30_000})).await;
    let id = session["id"].as_str().unwrap();
    let shared = take_in(&app, "rev:shared", id, json!({"mode": "shared"})).await;
    take_in(&app, "rev:plain", id, json!({})).await;
    take_in(&app, "rev:kept", id, json!({})).await;
    for key in ["rev:plain", "rev:shared"] {
        let revoked = app
            .http
            .delete(app.url(&format!("/locks/{key}?force=true")))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        assert_eq!(revoked.status(), StatusCode::NO_CONTENT, "revoking {key}");
    }
    // Another holder takes one of them.
    let next = app.take("rev:plain", 30_000).await;
    assert!(next.fencing_token > shared["fencing_token"].as_u64().unwrap());

    let view: Value = app
        .get(&format!("/sessions/{id}"))
        .await
        .json()
        .await
        .unwrap();
    let keys: Vec<&str> = view["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|lock| lock["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["rev:kept"], "{view}");
    let kept: Value = app
        .http
        .put(app.url(&format!("/sessions/{id}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(kept["locks"], 1, "{kept}");
}

/// What `lockgate_sessions_total{outcome}` says on `app`.
async fn sessions_counted(app: &TestApp, outcome: &str) -> u64 {
    let text = app.get("/metrics").await.text().await.unwrap();
    let series = format!("lockgate_sessions_total{{outcome=\"{outcome}\"}}");
    sample(&text, &series).map_or(0, |value| value.parse().unwrap())
}

#[tokio::test]
async fn a_session_that_expires_is_counted_once_across_the_fleet() {
    let redis = RedisServer::start().await;
    let apps = [
        TestApp::spawn(&redis).await,
        TestApp::spawn(&redis).await,
        TestApp::spawn(&redis).await,
    ];
    for n in 0..24 {
        let session = open(&apps[0], json!({"ttl_ms": 1_000})).await;
        take_in(
            &apps[n % 3],
            &format!("counted:{n}"),
            session["id"].as_str().unwrap(),
            json!({}),
        )
        .await;
    }
    let expired = || async {
        let mut total = 0;
        for app in &apps {
            total += sessions_counted(app, "expired").await;
        }
        total
    };
    // Every instance sweeps; each expiry is counted by the one that ended it.
    assert!(
        eventually(Duration::from_secs(8), || async { expired().await >= 24 }).await,
        "{} counted",
        expired().await
    );
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(expired().await, 24);
}
