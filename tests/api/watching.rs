//! Watching a lock: a snapshot, then every change in order with an id, resumed through another instance with nothing missed or repeated, `expired` on time, `gap` when the history is gone, and nothing written for a lock nobody watches.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{ADMIN, Event, EventStream, RedisServer, TestApp, assert_problem, eventually};

/// Opens `GET /locks/{key}/events` on `app`, resuming after `last_seen`.
async fn watch(app: &TestApp, key: &str, last_seen: Option<&str>) -> EventStream {
    let mut request = app.http.get(app.url(&format!("/locks/{key}/events")));
    if let Some(id) = last_seen {
        request = request.header("Last-Event-ID", id);
    }
    EventStream::of(request.send().await.unwrap())
}

async fn next(events: &mut EventStream) -> Event {
    events
        .next(Duration::from_secs(3))
        .await
        .expect("the watch ended")
}

/// The `(name, data)` of the next `count` events, checking that each has
/// an id that comes after the one before.
async fn take(events: &mut EventStream, count: usize, after: &mut String) -> Vec<(String, Value)> {
    let mut taken = Vec::new();
    for _ in 0..count {
        let event = next(events).await;
        let id = event.id.clone().expect("an event without an id");
        assert!(later(&id, after), "{id} does not come after {after}");
        *after = id;
        taken.push((event.name, event.data));
    }
    taken
}

/// Whether stream id `a` comes after `b` (`<ms>-<seq>`).
fn later(a: &str, b: &str) -> bool {
    let parse = |id: &str| {
        let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
        (
            ms.parse::<u64>().unwrap_or(0),
            seq.parse::<u64>().unwrap_or(0),
        )
    };
    parse(a) > parse(b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_sees_every_change_in_order_and_resumes_through_another_instance() {
    let redis = RedisServer::start().await;
    let (one, two) = (TestApp::spawn(&redis).await, TestApp::spawn(&redis).await);
    let mut watcher = watch(&two, "leader", None).await;
    let snapshot = next(&mut watcher).await;
    assert_eq!(snapshot.name, "snapshot");
    assert_eq!(
        snapshot.data,
        json!({"key": "leader", "held": false, "waiters": []})
    );
    let mut last = snapshot.id.clone().unwrap();

    let grant: Value = one
        .acquire(json!({"key": "leader", "value": "10.0.0.7:9000", "ttl_ms": 30_000}))
        .await
        .json()
        .await
        .unwrap();
    let fence = grant["fencing_token"].clone();
    let acquired = take(&mut watcher, 1, &mut last).await;
    assert_eq!(
        acquired,
        [(
            "acquired".to_owned(),
            json!({"key": "leader", "fencing_token": fence, "value": "10.0.0.7:9000",
                "mode": "exclusive", "expires_at_ms": grant["expires_at_ms"], "session": null})
        )]
    );
    // The client goes away here; the lock changes while it is gone.
    drop(watcher);
    let token = grant["token"].as_str().unwrap();
    let proclaimed = one
        .http
        .put(one.url("/locks/leader/value"))
        .json(&json!({"token": token, "value": "10.0.0.8:9000"}))
        .send()
        .await
        .unwrap();
    assert_eq!(proclaimed.status(), StatusCode::OK);
    // The answer tells the lease as it stands, the value set.
    let lease: Value = proclaimed.json().await.unwrap();
    assert_eq!(lease["expires_at_ms"], grant["expires_at_ms"], "{lease}");
    let left = lease["ttl_ms"].as_u64().unwrap();
    assert!(
        left > 0 && left <= grant["ttl_ms"].as_u64().unwrap(),
        "{lease}"
    );
    one.release("leader", token).await;
    let second = one.take("leader", 300).await;
    let taken_at = Instant::now();

    // Back through the other instance, after the last event it saw.
    let mut watcher = watch(&one, "leader", Some(&last)).await;
    let missed = take(&mut watcher, 3, &mut last).await;
    let names: Vec<&str> = missed.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["value", "released", "acquired"], "{missed:?}");
    assert_eq!(
        missed[0].1,
        json!({"key": "leader", "fencing_token": fence, "value": "10.0.0.8:9000"})
    );
    assert_eq!(
        missed[1].1,
        json!({"key": "leader", "fencing_token": fence})
    );
    assert_eq!(missed[2].1["fencing_token"], second.fencing_token);
    assert_eq!(missed[2].1["value"], Value::Null);

    // Then live: the 300 ms lease runs out with nobody touching the key.
    let expired = take(&mut watcher, 1, &mut last).await;
    let after = taken_at.elapsed();
    assert_eq!(
        expired,
        [(
            "expired".to_owned(),
            json!({"key": "leader", "fencing_token": second.fencing_token})
        )]
    );
    assert!(
        after < Duration::from_millis(300 + 1_000),
        "expired {after:?} after a 300 ms lease was granted"
    );
    assert!(
        after >= Duration::from_millis(250),
        "expired after {after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_lock_reports_its_holders_comings_and_goings() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let mut watcher = watch(&app, "pool", None).await;
    let mut last = next(&mut watcher).await.id.unwrap();
    let counted = json!({"key": "pool", "limit": 3, "value": "worker-1"});
    let first: Value = app.acquire(counted.clone()).await.json().await.unwrap();
    let second: Value = app
        .acquire(json!({"key": "pool", "limit": 3, "ttl_ms": 200}))
        .await
        .json()
        .await
        .unwrap();
    app.release("pool", first["token"].as_str().unwrap()).await;

    let events = take(&mut watcher, 4, &mut last).await;
    let seen: Vec<(&str, &Value)> = events
        .iter()
        .map(|(name, data)| (name.as_str(), &data["fencing_token"]))
        .collect();
    assert_eq!(
        seen,
        [
            ("acquired", &first["fencing_token"]),
            ("acquired", &second["fencing_token"]),
            ("released", &first["fencing_token"]),
            ("expired", &second["fencing_token"]),
        ]
    );
    assert_eq!(events[0].1["mode"], "counted");
    assert_eq!(events[0].1["value"], "worker-1");
}

/// A waiter granted from the queue is announced once it has claimed its
/// place: with the lease it asked for, not the second it was offered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_granted_from_the_queue_is_announced_with_its_whole_lease() {
    let redis = RedisServer::start().await;
    let (one, two) = (TestApp::spawn(&redis).await, TestApp::spawn(&redis).await);
    let holder = one.take("desk", 30_000).await;
    let mut watcher = watch(&one, "desk", None).await;
    let mut last = next(&mut watcher).await.id.unwrap();
    let request = two
        .http
        .post(two.url("/locks"))
        .json(&json!({"key": "desk", "ttl_ms": 30_000, "wait_ms": 10_000, "value": "next"}));
    let waiter = tokio::spawn(async move { request.send().await.unwrap() });
    let queued = eventually(Duration::from_secs(5), || async {
        let status: Value = one.get("/locks/desk").await.json().await.unwrap();
        status["waiters"].as_array().is_some_and(|w| w.len() == 1)
    })
    .await;
    assert!(queued);

    one.release("desk", &holder.token).await;
    let grant: Value = waiter.await.unwrap().json().await.unwrap();
    let events = take(&mut watcher, 2, &mut last).await;
    assert_eq!(
        events,
        [
            (
                "released".to_owned(),
                json!({"key": "desk", "fencing_token": holder.fencing_token})
            ),
            (
                "acquired".to_owned(),
                json!({"key": "desk", "fencing_token": grant["fencing_token"], "value": "next",
                    "mode": "exclusive", "expires_at_ms": grant["expires_at_ms"],
                    "session": null})
            ),
        ]
    );
}

#[tokio::test]
async fn a_watcher_told_of_a_gap_gets_a_fresh_snapshot() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let holder = app.take("old", 30_000).await;

    // An id from before the lock's history began.
    let mut watcher = watch(&app, "old", Some("1-0")).await;
    let gap = next(&mut watcher).await;
    assert_eq!((gap.name.as_str(), &gap.data), ("gap", &json!({})));
    let snapshot = next(&mut watcher).await;
    assert_eq!(snapshot.name, "snapshot");
    assert_eq!(snapshot.data["held"], true);
    assert_eq!(snapshot.data["fencing_token"], holder.fencing_token);
    let mut last = snapshot.id.unwrap();

    app.release("old", &holder.token).await;
    let released = take(&mut watcher, 1, &mut last).await;
    assert_eq!(released[0].0, "released");
}

#[tokio::test]
async fn a_lock_nobody_watches_writes_no_event() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let holder = app.take("quiet", 30_000).await;
    app.release("quiet", &holder.token).await;
    app.take("quiet", 10).await;
    tokio::time::sleep(Duration::from_millis(50)).await;

    for name in ["events", "watch"] {
        let exists: u64 = redis::cmd("EXISTS")
            .arg(format!("lockgate:{name}:{{quiet}}"))
            .query_async(&mut redis.connection().await)
            .await
            .unwrap();
        assert_eq!(exists, 0, "{name} written for a lock nobody watches");
    }
}

/// A plain lock taken before anyone watched, and watched since, is released
/// with an event: its release leaves nobody's watch to the plain path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_started_on_a_held_plain_lock_sees_its_release() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let holder = app.take("watched-late", 30_000).await;
    let mut watcher = watch(&app, "watched-late", None).await;
    let snapshot = next(&mut watcher).await;
    assert_eq!(snapshot.name, "snapshot");
    assert_eq!(snapshot.data["held"], json!(true), "{}", snapshot.data);
    let mut last = snapshot.id.clone().unwrap();

    let released = app.release("watched-late", &holder.token).await;
    assert_eq!(released.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        take(&mut watcher, 1, &mut last).await,
        [(
            "released".to_owned(),
            json!({"key": "watched-late", "fencing_token": holder.fencing_token})
        )]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_lock_ends_its_holders_stream_tells_its_watchers_and_fences_the_old_holder() {
    let redis = RedisServer::start().await;
    let (one, two) = (
        TestApp::spawn_sale(&redis, &[]).await,
        TestApp::spawn_sale(&redis, &[]).await,
    );
    let mut holder = EventStream::of(one.stream(json!({"key": "stuck", "ttl_ms": 30_000})).await);
    let acquired = next(&mut holder).await;
    assert_eq!(acquired.name, "acquired");
    let old_fence = acquired.data["fencing_token"].as_u64().unwrap();
    let old_token = acquired.data["token"].as_str().unwrap().to_owned();
    let mut watcher = watch(&two, "stuck", None).await;
    let mut last = next(&mut watcher).await.id.unwrap();
    let revoke = |bearer: Option<&str>| {
        let request = two.http.delete(two.url("/locks/stuck?force=true"));
        match bearer {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
        .send()
    };

    assert_problem(revoke(None).await.unwrap(), 401, "unauthorized").await;
    assert_problem(
        revoke(Some("not-the-admin")).await.unwrap(),
        403,
        "forbidden",
    )
    .await;
    let revoked_at = Instant::now();
    assert_eq!(
        revoke(Some(ADMIN)).await.unwrap().status(),
        StatusCode::NO_CONTENT
    );

    // Renewals may come at any time (a cluster's subscription confirmation
    // asks for one); the end comes at once.
    let mut lost = next(&mut holder).await;
    while lost.name == "renewed" {
        lost = next(&mut holder).await;
    }
    assert_eq!(
        (lost.name.as_str(), &lost.data),
        ("lost", &json!({"reason": "revoked", "key": "stuck"}))
    );
    assert!(revoked_at.elapsed() < Duration::from_millis(500));
    let told = take(&mut watcher, 1, &mut last).await;
    assert_eq!(
        told,
        [(
            "revoked".to_owned(),
            json!({"key": "stuck", "fencing_token": old_fence})
        )]
    );
    assert_problem(revoke(Some(ADMIN)).await.unwrap(), 404, "lock-not-found").await;
    assert_problem(
        one.release("stuck", &old_token).await,
        404,
        "lock-not-found",
    )
    .await;
    let next_holder = two.take("stuck", 30_000).await;
    assert!(next_holder.fencing_token > old_fence);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_counting_lock_ends_every_holder_and_serves_the_queue() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_sale(&redis, &[]).await;
    let counted = json!({"key": "slots", "limit": 2, "ttl_ms": 30_000});
    let mut holders = Vec::new();
    for _ in 0..2 {
        let grant: Value = app.acquire(counted.clone()).await.json().await.unwrap();
        holders.push(grant["token"].as_str().unwrap().to_owned());
    }
    let mut waiting = counted.clone();
    waiting["wait_ms"] = json!(10_000);
    let request = app.http.post(app.url("/locks")).json(&waiting);
    let waiter = tokio::spawn(async move { request.send().await.unwrap().status() });
    let queued = eventually(Duration::from_secs(5), || async {
        let status: Value = app.get("/locks/slots").await.json().await.unwrap();
        status["waiters"].as_array().is_some_and(|w| w.len() == 1)
    })
    .await;
    assert!(queued);

    let revoked = app
        .http
        .delete(app.url("/locks/slots?force=true"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), StatusCode::NO_CONTENT);
    assert_eq!(waiter.await.unwrap(), StatusCode::CREATED);
    for token in holders {
        let extended = app.extend("slots", &token, 30_000).await;
        assert!(
            matches!(extended.status().as_u16(), 404 | 409),
            "a revoked holder renewed its lease: {}",
            extended.status()
        );
    }
}

/// A watcher resuming at the newest event gets its answer at once, though
/// nothing happens to the lock: the status and headers do not wait for the
/// next change.
#[tokio::test]
async fn a_watcher_resuming_at_the_newest_event_is_answered_at_once() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    app.take("quiet", 60_000).await;
    let mut first = watch(&app, "quiet", None).await;
    let mut last = String::new();
    take(&mut first, 1, &mut last).await;
    drop(first);
    let resumed = tokio::time::timeout(
        Duration::from_secs(2),
        app.http
            .get(app.url("/locks/quiet/events"))
            .header("Last-Event-ID", &last)
            .send(),
    )
    .await
    .expect("no answer while the lock stays as it is")
    .unwrap();
    assert_eq!(resumed.status(), StatusCode::OK);
}

/// A watcher resuming after an event the history no longer keeps (more
/// than about a thousand events came since) is told `gap` and given a
/// fresh snapshot: never the kept events alone, with those between
/// skipped in silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_resuming_past_the_kept_history_is_told_of_the_gap() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let mut first = watch(&app, "busy", None).await;
    let mut last = String::new();
    take(&mut first, 1, &mut last).await;
    // Another watcher keeps the lock watched (its events written) meanwhile.
    let _keeping = watch(&app, "busy", None).await;
    drop(first);
    for _ in 0..1_200 {
        let grant = app.take("busy", 30_000).await;
        app.release("busy", &grant.token).await;
    }
    let mut resumed = watch(&app, "busy", Some(&last)).await;
    let gap = next(&mut resumed).await;
    assert_eq!(gap.name, "gap", "{:?}", gap.data);
    assert_eq!(next(&mut resumed).await.name, "snapshot");
}

/// A `Last-Event-ID` newer than every event is none this history sent: a
/// gap and a fresh snapshot, and the events after it come as usual; one
/// that no stream id can be (a part above 2^64 - 1) is refused.
#[tokio::test]
async fn a_last_event_id_from_the_future_gets_a_snapshot_and_the_events_after_it() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let holder = app.take("ahead", 60_000).await;
    for id in [
        "99999999999999-0",
        "18446744073709551615-18446744073709551615",
    ] {
        let mut watcher = watch(&app, "ahead", Some(id)).await;
        assert_eq!(next(&mut watcher).await.name, "gap", "{id}");
        let snapshot = next(&mut watcher).await;
        assert_eq!(snapshot.name, "snapshot", "{id}");
        let mut last = snapshot.id.unwrap();
        let value = app
            .http
            .put(app.url("/locks/ahead/value"))
            .json(&json!({"token": holder.token, "value": id}))
            .send()
            .await
            .unwrap();
        assert_eq!(value.status(), StatusCode::OK);
        assert_eq!(take(&mut watcher, 1, &mut last).await[0].0, "value", "{id}");
    }
    let overflowing = app
        .http
        .get(app.url("/locks/ahead/events"))
        .header("Last-Event-ID", "18446744073709551616-0")
        .send()
        .await
        .unwrap();
    assert_problem(overflowing, 422, "invalid-field").await;
}

/// Revoking one hold by its fencing token ends that hold only: a
/// revocation that names a hold already gone (released, and the lock
/// granted anew) leaves the new holder's lock alone.
#[tokio::test]
async fn a_revocation_naming_a_fencing_token_ends_only_that_hold() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_with(&redis, &["--admin-token", ADMIN]).await;
    let revoke = |key: &str, fence: Option<u64>| {
        let mut url = format!("/locks/{key}?force=true");
        if let Some(fence) = fence {
            url.push_str(&format!("&fencing_token={fence}"));
        }
        app.http.delete(app.url(&url)).bearer_auth(ADMIN).send()
    };
    let old = app.take("stuck", 30_000).await;
    app.release("stuck", &old.token).await;
    let new = app.take("stuck", 30_000).await;
    let stale = revoke("stuck", Some(old.fencing_token)).await.unwrap();
    assert_problem(stale, 404, "lock-not-found").await;
    let status: Value = app.get("/locks/stuck").await.json().await.unwrap();
    assert_eq!(
        status["fencing_token"], new.fencing_token,
        "the new hold was ended"
    );
    assert_eq!(
        revoke("stuck", Some(new.fencing_token))
            .await
            .unwrap()
            .status(),
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.get("/locks/stuck").await.status(),
        StatusCode::NOT_FOUND
    );

    // Of a counting lock's holders, only the one named.
    let mut fences = Vec::new();
    for _ in 0..2 {
        let grant = app.acquire(json!({"key": "pool", "limit": 2})).await;
        fences.push(
            grant.json::<Value>().await.unwrap()["fencing_token"]
                .as_u64()
                .unwrap(),
        );
    }
    assert_eq!(
        revoke("pool", Some(fences[0])).await.unwrap().status(),
        StatusCode::NO_CONTENT
    );
    let status: Value = app.get("/locks/pool").await.json().await.unwrap();
    assert_eq!(status["holders"], 1, "{status}");
    assert_eq!(status["leases"][0]["fencing_token"], fences[1]);

    // Without force, a fencing token guards a release: the hold goes only
    // if it has that fencing token.
    let held = app.take("guarded", 30_000).await;
    let release = |fence: u64| {
        app.http
            .delete(app.url(&format!("/locks/guarded?fencing_token={fence}")))
            .header("Lock-Token", &held.token)
            .send()
    };
    assert_problem(
        release(held.fencing_token + 1).await.unwrap(),
        409,
        "not-owner",
    )
    .await;
    assert_eq!(app.get("/locks/guarded").await.status(), StatusCode::OK);
    assert_eq!(
        release(held.fencing_token).await.unwrap().status(),
        StatusCode::NO_CONTENT
    );
}

/// A lock taken in a session, at once or after a wait, is announced with
/// its session's lease (as the snapshot shows it), not the grant's first
/// one, and with the session's public handle.
#[tokio::test]
async fn an_acquired_event_of_a_lock_in_a_session_carries_the_sessions_lease() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let session: Value = app
        .post_json("/sessions", &json!({"ttl_ms": 60_000}))
        .await
        .json()
        .await
        .unwrap();
    let id = session["id"].as_str().unwrap();
    let mut watcher = watch(&app, "sess:watched", None).await;
    let mut last = next(&mut watcher).await.id.unwrap();
    let blocker = app.take("sess:watched", 300).await;

    // Waits behind a 300 ms lease, then is granted in its session.
    let grant: Value = app
        .acquire(json!({"key": "sess:watched", "session": id, "ttl_ms": 1000, "wait_ms": 5000}))
        .await
        .json()
        .await
        .unwrap();
    let events = take(&mut watcher, 3, &mut last).await;
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["acquired", "expired", "acquired"], "{events:?}");
    assert_eq!(events[0].1["session"], Value::Null);
    let acquired = &events[2].1;
    assert_eq!(acquired["fencing_token"], grant["fencing_token"]);
    let view: Value = app.get("/locks/sess:watched").await.json().await.unwrap();
    let session_lease = &view["leases"][0];
    assert_eq!(
        acquired["session"], session_lease["session"],
        "{acquired} {view}"
    );
    assert_eq!(
        acquired["expires_at_ms"], session_lease["expires_at_ms"],
        "{acquired} {view}"
    );
    // Nobody kept the session alive: its lease is the one it opened with.
    assert_eq!(acquired["expires_at_ms"], session["expires_at_ms"]);
    assert_eq!(grant["expires_at_ms"], session["expires_at_ms"]);
    drop(blocker);
}
