//! The changes of a hold: upgrade (waiting at the head of the queue, a second upgrade refused as a deadlock), downgrade, several permits of a counting lock served in arrival order.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{RedisServer, TestApp, assert_problem};

async fn change_mode(app: &TestApp, key: &str, body: Value) -> reqwest::Response {
    app.http
        .put(app.url(&format!("/locks/{key}/mode")))
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// A sole shared holder upgrades at once (a new, larger fencing token); a
/// downgrade keeps its token and lets the shared waiters in.
#[tokio::test]
async fn a_sole_shared_holder_upgrades_at_once_and_downgrades_back() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let shared: Value = app
        .acquire(json!({"key": "rw", "mode": "shared", "value": "me"}))
        .await
        .json()
        .await
        .unwrap();
    let token = shared["token"].as_str().unwrap();
    let upgraded = change_mode(&app, "rw", json!({"token": token, "mode": "exclusive"})).await;
    assert_eq!(upgraded.status(), StatusCode::OK);
    let upgraded: Value = upgraded.json().await.unwrap();
    assert_eq!(upgraded["mode"], "exclusive");
    assert!(upgraded["fencing_token"].as_u64() > shared["fencing_token"].as_u64());
    let status: Value = app.get("/locks/rw").await.json().await.unwrap();
    assert_eq!(status["mode"], "exclusive", "{status}");
    assert_eq!(status["leases"][0]["value"], "me");

    let reader = {
        let request = app
            .http
            .post(app.url("/locks"))
            .json(&json!({"key": "rw", "mode": "shared", "wait_ms": 5_000}));
        tokio::spawn(request.send())
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!reader.is_finished());
    let downgraded = change_mode(&app, "rw", json!({"token": token, "mode": "shared"})).await;
    assert_eq!(downgraded.status(), StatusCode::OK);
    let downgraded: Value = downgraded.json().await.unwrap();
    assert_eq!(downgraded["fencing_token"], upgraded["fencing_token"]);
    assert_eq!(reader.await.unwrap().unwrap().status(), StatusCode::CREATED);
    let status: Value = app.get("/locks/rw").await.json().await.unwrap();
    assert_eq!(status["holders"], 2, "{status}");
    assert_eq!(
        app.release("rw", token).await.status(),
        StatusCode::NO_CONTENT
    );
}

/// An upgrade waits for the other shared holders, ahead of later arrivals;
/// a second upgrader is refused `deadlock` at once and keeps its place; an
/// upgrade whose wait runs out keeps its shared place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_waits_ahead_of_later_arrivals_and_a_second_is_refused() {
    let redis = RedisServer::start().await;
    let (one, two) = (TestApp::spawn(&redis).await, TestApp::spawn(&redis).await);
    let take_shared = |app: &TestApp| {
        let request = app
            .http
            .post(app.url("/locks"))
            .json(&json!({"key": "up", "mode": "shared", "ttl_ms": 30_000}));
        async move {
            let grant: Value = request.send().await.unwrap().json().await.unwrap();
            grant
        }
    };
    let first = take_shared(&one).await;
    let second = take_shared(&two).await;
    let (first_token, second_token) = (
        first["token"].as_str().unwrap().to_owned(),
        second["token"].as_str().unwrap().to_owned(),
    );
    let upgrading = {
        let body = json!({"token": first_token, "mode": "exclusive", "wait_ms": 10_000});
        let request = one.http.put(one.url("/locks/up/mode")).json(&body);
        tokio::spawn(request.send())
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A later reader waits behind the upgrade rather than joining in.
    let late = two.acquire(json!({"key": "up", "mode": "shared"})).await;
    assert_problem(late, 409, "lock-held").await;
    let refused = change_mode(
        &two,
        "up",
        json!({"token": second_token, "mode": "exclusive", "wait_ms": 5_000}),
    )
    .await;
    let problem = assert_problem(refused, 409, "deadlock").await;
    assert_eq!(problem["cycle"], json!(["up"]));
    let status: Value = two.get("/locks/up").await.json().await.unwrap();
    assert_eq!(
        status["holders"], 2,
        "the refused upgrader lost its place: {status}"
    );

    assert_eq!(
        two.release("up", &second_token).await.status(),
        StatusCode::NO_CONTENT
    );
    let upgraded = upgrading.await.unwrap().unwrap();
    assert_eq!(upgraded.status(), StatusCode::OK);
    let upgraded: Value = upgraded.json().await.unwrap();
    assert!(upgraded["fencing_token"].as_u64() > second["fencing_token"].as_u64());
    assert_eq!(upgraded["mode"], "exclusive");
    assert_eq!(
        one.release("up", &first_token).await.status(),
        StatusCode::NO_CONTENT
    );

    // An upgrade whose wait runs out keeps its shared place.
    let third = take_shared(&one).await;
    let fourth = take_shared(&two).await;
    let timed_out = change_mode(
        &one,
        "up",
        json!({"token": third["token"], "mode": "exclusive", "wait_ms": 300}),
    )
    .await;
    assert_problem(timed_out, 409, "lock-held").await;
    let status: Value = one.get("/locks/up").await.json().await.unwrap();
    assert_eq!(status["holders"], 2, "{status}");
    assert_eq!(status["mode"], "shared");
    drop(fourth);
}

#[tokio::test]
async fn mode_changes_by_the_wrong_holder_are_refused() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let counted: Value = app
        .acquire(json!({"key": "m:pool", "limit": 3}))
        .await
        .json()
        .await
        .unwrap();
    let conflict = change_mode(
        &app,
        "m:pool",
        json!({"token": counted["token"], "mode": "shared"}),
    )
    .await;
    assert_problem(conflict, 409, "mode-conflict").await;
    let stranger = "0b6e2f4c-3d5a-4f1e-9a8b-7c6d5e4f3a2b";
    let not_owner = change_mode(&app, "m:pool", json!({"token": stranger, "mode": "shared"})).await;
    assert_problem(not_owner, 409, "not-owner").await;
    let missing = change_mode(
        &app,
        "m:none",
        json!({"token": stranger, "mode": "exclusive"}),
    )
    .await;
    assert_problem(missing, 404, "lock-not-found").await;
    let bad = change_mode(
        &app,
        "m:pool",
        json!({"token": counted["token"], "mode": "both"}),
    )
    .await;
    assert_problem(bad, 422, "invalid-field").await;
    let status: Value = app.get("/locks/m:pool").await.json().await.unwrap();
    assert_eq!(status["holders"], 1);
}

/// Permits: a holder takes several places; the queue is served in arrival
/// order, so a large request at its head holds back a smaller one behind
/// it (neither starves).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_served_in_arrival_order_without_starving_large_requests() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let three: Value = app
        .acquire(json!({"key": "sem", "limit": 5, "permits": 3}))
        .await
        .json()
        .await
        .unwrap();
    let large = {
        let request = app
            .http
            .post(app.url("/locks"))
            .json(&json!({"key": "sem", "limit": 5, "permits": 4, "wait_ms": 10_000}));
        tokio::spawn(request.send())
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Two places are free, but the large request arrived first.
    let small = app
        .acquire(json!({"key": "sem", "limit": 5, "permits": 1}))
        .await;
    assert_problem(small, 409, "lock-held").await;
    assert!(!large.is_finished());
    let status: Value = app.get("/locks/sem").await.json().await.unwrap();
    assert_eq!(status["leases"][0]["permits"], 3, "{status}");
    assert_eq!(
        app.release("sem", three["token"].as_str().unwrap())
            .await
            .status(),
        StatusCode::NO_CONTENT
    );
    let large = large.await.unwrap().unwrap();
    assert_eq!(large.status(), StatusCode::CREATED);
    // One place left: a small request fits, a second does not.
    let small = app
        .acquire(json!({"key": "sem", "limit": 5, "permits": 1}))
        .await;
    assert_eq!(small.status(), StatusCode::CREATED);
    let full = app.acquire(json!({"key": "sem", "limit": 5})).await;
    assert_problem(full, 409, "lock-held").await;
    let too_many = app
        .acquire(json!({"key": "sem2", "limit": 2, "permits": 3}))
        .await;
    assert_problem(too_many, 422, "invalid-field").await;
}
