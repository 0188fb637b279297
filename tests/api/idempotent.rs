//! Idempotent acquire: a retry with the same `Idempotency-Key` and body gets the grant it made, on any instance; another body is refused; a grant whose answer was lost is never orphaned.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{RedisServer, TestApp, assert_problem, eventually};

async fn acquire_with_key(app: &TestApp, key: &str, body: &Value) -> reqwest::Response {
    app.http
        .post(app.url("/locks"))
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_gets_the_same_grant_on_any_instance() {
    let redis = RedisServer::start().await;
    let (one, two) = (TestApp::spawn(&redis).await, TestApp::spawn(&redis).await);
    for (lock, body) in [
        ("plain", json!({"key": "plain", "ttl_ms": 30_000})),
        ("pool", json!({"key": "pool", "limit": 3, "value": "w1"})),
        ("book", json!({"key": "book", "mode": "shared"})),
    ] {
        let first = acquire_with_key(&one, &format!("try-{lock}"), &body).await;
        assert_eq!(first.status(), StatusCode::CREATED);
        assert!(first.headers().get("idempotent-replayed").is_none());
        let first: Value = first.json().await.unwrap();

        let again = acquire_with_key(&two, &format!("try-{lock}"), &body).await;
        assert_eq!(again.status(), StatusCode::CREATED, "{lock}");
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        let again: Value = again.json().await.unwrap();
        assert_eq!(again["token"], first["token"], "{lock}");
        assert_eq!(again["fencing_token"], first["fencing_token"], "{lock}");
        assert_eq!(again["holds"], 1, "{lock}: a replay is no re-entry");

        let status: Value = one
            .get(&format!("/locks/{lock}"))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(
            status["holders"], 1,
            "{lock}: the retry made a second holder"
        );
    }
}

#[tokio::test]
async fn the_same_key_with_another_body_is_refused_and_a_released_grant_is_forgotten() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let body = json!({"key": "job", "ttl_ms": 30_000});
    let grant: Value = acquire_with_key(&app, "k-1", &body)
        .await
        .json()
        .await
        .unwrap();

    let other = acquire_with_key(&app, "k-1", &json!({"key": "job", "ttl_ms": 20_000})).await;
    let problem = assert_problem(other, 422, "idempotency-key-reused").await;
    assert_eq!(problem["key"], "job");
    // Naming another lock is another body too, on any instance.
    let elsewhere = TestApp::spawn(&redis).await;
    let other_lock = acquire_with_key(
        &elsewhere,
        "k-1",
        &json!({"key": "job-2", "ttl_ms": 30_000}),
    )
    .await;
    assert_problem(other_lock, 422, "idempotency-key-reused").await;
    assert_problem(app.get("/locks/job-2").await, 404, "lock-not-found").await;

    app.release("job", grant["token"].as_str().unwrap()).await;
    let fresh = acquire_with_key(&app, "k-1", &body).await;
    assert_eq!(fresh.status(), StatusCode::CREATED);
    assert!(fresh.headers().get("idempotent-replayed").is_none());
    let fresh: Value = fresh.json().await.unwrap();
    assert_ne!(fresh["token"], grant["token"]);
    assert!(fresh["fencing_token"].as_u64() > grant["fencing_token"].as_u64());
}

/// Sends a waiting `POST /locks` with an Idempotency-Key over a raw
/// connection and closes it after `give_up`; returns what the server wrote.
async fn abandoned(app: &TestApp, key: &str, body: &Value, give_up: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = body.to_string();
    let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let request = format!(
        "POST /locks HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Idempotency-Key: {key}\r\nContent-Length: {}\r\n\r\n{body}",
        app.addr,
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    tokio::time::sleep(give_up).await;
    stream.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// The client gives up around the moment its wait is granted, so its
/// answer may be lost; its retry gets that grant (or a new one if none was
/// made), and nothing is left held once the retry's grant is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_answer_was_lost_is_the_retrys_and_never_an_orphan() {
    let redis = RedisServer::start().await;
    let (one, two) = (TestApp::spawn(&redis).await, TestApp::spawn(&redis).await);
    let mut replayed = 0;
    for trial in 0..20u64 {
        let lock = format!("lost:{trial}");
        one.take(&lock, 120).await;
        let key = format!("attempt-{trial}");
        let body = json!({"key": lock, "ttl_ms": 30_000, "wait_ms": 5_000});
        let answer = abandoned(&one, &key, &body, Duration::from_millis(100 + trial * 2)).await;
        let first_token = answer.starts_with("HTTP/1.1 201").then(|| {
            let body: Value =
                serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
            body["token"].as_str().unwrap().to_owned()
        });

        let retry = acquire_with_key(&two, &key, &body).await;
        assert_eq!(retry.status(), StatusCode::CREATED, "trial {trial}");
        let was_replayed = retry.headers().get("idempotent-replayed").is_some();
        let retry: Value = retry.json().await.unwrap();
        if let Some(token) = first_token {
            assert_eq!(
                retry["token"],
                token.as_str(),
                "trial {trial}: a second grant"
            );
        }
        if was_replayed {
            replayed += 1;
        }
        two.release(&lock, retry["token"].as_str().unwrap()).await;
        let free = eventually(Duration::from_millis(500), || async {
            one.get(&format!("/locks/{lock}")).await.status() == StatusCode::NOT_FOUND
        })
        .await;
        assert!(free, "trial {trial}: an orphaned grant holds {lock}");
    }
    assert!(
        replayed > 0,
        "no retry was a replay: the test proves nothing"
    );
}

/// Two waiting requests with the same Idempotency-Key and body, on two
/// instances (a client's retry while its first request still waits): one
/// grant, answered to both, for every kind of lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_waiting_requests_under_one_key_get_one_grant() {
    let redis = RedisServer::start().await;
    let (one, two) = (TestApp::spawn(&redis).await, TestApp::spawn(&redis).await);
    for (lock, body) in [
        ("wplain", json!({"key": "wplain", "wait_ms": 10_000})),
        (
            "wpool",
            json!({"key": "wpool", "limit": 2, "wait_ms": 10_000}),
        ),
        (
            "wbook",
            json!({"key": "wbook", "mode": "shared", "wait_ms": 10_000}),
        ),
    ] {
        // Held so that both requests wait: exclusively (a counting lock by
        // both its places).
        let holders: Vec<String> = if lock == "wpool" {
            let mut tokens = Vec::new();
            for _ in 0..2 {
                let grant = one.acquire(json!({"key": lock, "limit": 2})).await;
                let grant: Value = grant.json().await.unwrap();
                tokens.push(grant["token"].as_str().unwrap().to_owned());
            }
            tokens
        } else {
            vec![one.take(lock, 30_000).await.token]
        };
        let idempotency_key = format!("twin-{lock}");
        let first = {
            let request = one
                .http
                .post(one.url("/locks"))
                .header("Idempotency-Key", &idempotency_key)
                .json(&body);
            tokio::spawn(request.send())
        };
        let queued = eventually(Duration::from_secs(5), || async {
            let status: Value = one
                .get(&format!("/locks/{lock}"))
                .await
                .json()
                .await
                .unwrap();
            status["waiters"]
                .as_array()
                .is_some_and(|waiters| waiters.len() == 1)
        })
        .await;
        assert!(queued, "{lock}: the first request never queued");
        let second = {
            let request = two
                .http
                .post(two.url("/locks"))
                .header("Idempotency-Key", &idempotency_key)
                .json(&body);
            tokio::spawn(request.send())
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        for token in &holders {
            one.release(lock, token).await;
        }
        let first = first.await.unwrap().unwrap();
        let second = second.await.unwrap().unwrap();
        assert_eq!(first.status(), StatusCode::CREATED, "{lock}: the first");
        assert_eq!(second.status(), StatusCode::CREATED, "{lock}: the retry");
        let (first, second): (Value, Value) =
            (first.json().await.unwrap(), second.json().await.unwrap());
        assert_eq!(first["token"], second["token"], "{lock}: two grants");
        assert_eq!(first["fencing_token"], second["fencing_token"], "{lock}");
        let status: Value = one
            .get(&format!("/locks/{lock}"))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(status["holders"], 1, "{lock}: {status}");
    }
}

async fn release_with_key(app: &TestApp, key: &str, token: &str, idem: &str) -> reqwest::Response {
    app.http
        .delete(app.url(&format!("/locks/{key}")))
        .header("Lock-Token", token)
        .header("Idempotency-Key", idem)
        .send()
        .await
        .unwrap()
}

fn replayed(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|value| value == "true")
}

/// A release under an Idempotency-Key answers its retry what it did,
/// however the lock stands since (free, or held by another), never
/// giving back a second hold of a re-entered lock; another token with
/// the same key is refused.
#[tokio::test]
async fn a_retried_release_under_its_key_is_answered_what_it_did() {
    let redis = RedisServer::start().await;
    let (one, two) = (TestApp::spawn(&redis).await, TestApp::spawn(&redis).await);
    let first = one.take("rel:plain", 30_000).await;
    let released = release_with_key(&one, "rel:plain", &first.token, "rel-1").await;
    assert_eq!(released.status(), StatusCode::NO_CONTENT);
    assert!(!replayed(&released));
    // Another holder takes it; the retry, through any instance, is still
    // the release it was, and takes nothing from the new holder.
    let next = two.take("rel:plain", 30_000).await;
    let again = release_with_key(&two, "rel:plain", &first.token, "rel-1").await;
    assert_eq!(again.status(), StatusCode::NO_CONTENT);
    assert!(replayed(&again));
    let held: Value = one.get("/locks/rel:plain").await.json().await.unwrap();
    assert_eq!(held["fencing_token"], next.fencing_token);
    // The same key from another token is not its release.
    let other = release_with_key(&one, "rel:plain", &next.token, "rel-1").await;
    assert_problem(other, 422, "idempotency-key-reused").await;

    // A re-entered lock: one hold back, and a retry gives back no second.
    let grant = one.take("rel:twice", 30_000).await;
    let reentered = one
        .acquire(json!({"key": "rel:twice", "token": grant.token}))
        .await;
    assert_eq!(reentered.status(), StatusCode::OK);
    for retry in [false, true] {
        let released = release_with_key(&one, "rel:twice", &grant.token, "rel-2").await;
        assert_eq!(released.status(), StatusCode::OK);
        assert_eq!(replayed(&released), retry);
        assert_eq!(released.json::<Value>().await.unwrap()["holds"], 1);
    }
    let state: Value = one.get("/locks/rel:twice").await.json().await.unwrap();
    assert_eq!(state["holds"], 1, "{state}");
}

/// A release answered 503 while Redis stalled takes effect once Redis
/// runs again; its retry under the same key says it was released, where
/// one without a key can only be told the token holds nothing.
#[tokio::test]
async fn a_release_answered_503_that_took_effect_is_answered_released_on_its_retry() {
    let redis = RedisServer::start_single().await;
    let app = TestApp::spawn_with(&redis, &["--redis-timeout-ms", "200"]).await;
    let grant = app.take("rel:stalled", 30_000).await;
    redis.pause();
    let stalled = release_with_key(&app, "rel:stalled", &grant.token, "rel-3").await;
    assert_eq!(stalled.status(), StatusCode::SERVICE_UNAVAILABLE);
    redis.resume();
    let freed = eventually(Duration::from_secs(2), || async {
        app.get("/locks/rel:stalled").await.status() == StatusCode::NOT_FOUND
    })
    .await;
    assert!(freed, "the release sent before the stall never ran");
    let retry = release_with_key(&app, "rel:stalled", &grant.token, "rel-3").await;
    assert_eq!(retry.status(), StatusCode::NO_CONTENT);
    assert!(replayed(&retry));
}
