//! Who may do what: permissions by key prefix (the longest decides, a refusal reveals nothing), sessions owned by their principal, `lockgate acl hash` and `check`.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use reqwest::StatusCode;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::helpers::security::*;
use crate::helpers::{RedisServer, TestApp, assert_problem};

#[tokio::test]
async fn the_longest_prefix_decides_and_a_refusal_reveals_nothing() {
    let redis = RedisServer::start().await;
    let dir = TempDir::new().unwrap();
    let acl = write(dir.path(), "acl.toml", &two_services());
    let app = TestApp::spawn_with(&redis, &["--acl-file", acl.to_str().unwrap()]).await;
    let http = &app.http;
    let acquire = |key: &str| http.post(app.url("/locks")).json(&json!({"key": key}));

    // Its own prefix: granted.
    let own = as_(BILLING_KEY, acquire("billing:1")).await;
    assert_eq!(own.status(), StatusCode::CREATED);
    let own: Value = own.json().await.unwrap();

    // Another's: refused, naming principal, permission and key, the same
    // whether the lock is free or held (by ops).
    let free = assert_problem(
        as_(BILLING_KEY, acquire("orders:1")).await,
        403,
        "forbidden",
    )
    .await;
    assert_eq!(free["key"], "orders:1");
    let detail = free["detail"].as_str().unwrap();
    assert!(detail.contains("billing") && detail.contains("lock") && detail.contains("orders:1"));
    let held = as_(OPS_KEY, acquire("orders:1")).await;
    assert_eq!(held.status(), StatusCode::CREATED);
    let held: Value = held.json().await.unwrap();
    let refused = assert_problem(
        as_(BILLING_KEY, acquire("orders:1")).await,
        403,
        "forbidden",
    )
    .await;
    assert_eq!(refused, free, "a refusal says nothing of the lock");

    // Read only under billing:audit: (the longer prefix wins) and shared:.
    assert_problem(
        as_(BILLING_KEY, acquire("billing:audit:1")).await,
        403,
        "forbidden",
    )
    .await;
    let inspect = |key: &str| http.get(app.url(&format!("/locks/{key}")));
    assert_eq!(
        as_(BILLING_KEY, inspect("billing:audit:1")).await.status(),
        404
    );
    assert_eq!(as_(BILLING_KEY, inspect("shared:x")).await.status(), 404);
    let refused = assert_problem(
        as_(BILLING_KEY, inspect("orders:1")).await,
        403,
        "forbidden",
    )
    .await;
    assert!(refused["detail"].as_str().unwrap().contains("read"));
    let watch = http.get(app.url("/locks/orders:1/events"));
    assert_problem(as_(BILLING_KEY, watch).await, 403, "forbidden").await;

    // Release, extend, value, mode of another's key: refused before the token counts.
    let token = held["token"].as_str().unwrap();
    let release = http
        .delete(app.url("/locks/orders:1"))
        .header("Lock-Token", token);
    assert_problem(as_(BILLING_KEY, release).await, 403, "forbidden").await;
    let extend = http
        .put(app.url("/locks/orders:1/ttl"))
        .json(&json!({"token": token, "ttl_ms": 5000}));
    assert_problem(as_(BILLING_KEY, extend).await, 403, "forbidden").await;
    let value = http
        .put(app.url("/locks/orders:1/value"))
        .json(&json!({"token": token, "value": "x"}));
    assert_problem(as_(BILLING_KEY, value).await, 403, "forbidden").await;
    let mode = http
        .put(app.url("/locks/orders:1/mode"))
        .json(&json!({"token": token, "mode": "shared"}));
    assert_problem(as_(BILLING_KEY, mode).await, 403, "forbidden").await;

    // A batch needs lock on every key; a refused one holds nothing.
    let batch = http
        .post(app.url("/locks/batch"))
        .json(&json!({"locks": [{"key": "billing:2"}, {"key": "orders:2"}]}));
    assert_problem(as_(BILLING_KEY, batch).await, 403, "forbidden").await;
    assert_eq!(as_(OPS_KEY, inspect("billing:2")).await.status(), 404);

    // The listing shows only what may be read.
    assert_eq!(as_(OPS_KEY, acquire("shared:x")).await.status(), 201);
    let list: Value = as_(BILLING_KEY, http.get(app.url("/locks?prefix=")))
        .await
        .json()
        .await
        .unwrap();
    let mut keys: Vec<&str> = list["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|lock| lock["key"].as_str().unwrap())
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["billing:1", "shared:x"]);
    let all: Value = as_(OPS_KEY, http.get(app.url("/locks?prefix=")))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(all["locks"].as_array().unwrap().len(), 3);

    // Revoking needs revoke: billing has none, ops has.
    let revoke = || http.delete(app.url("/locks/billing:1?force=true"));
    assert_problem(as_(BILLING_KEY, revoke()).await, 403, "forbidden").await;
    assert_eq!(as_(OPS_KEY, revoke()).await.status(), 204);
    let gone = http
        .delete(app.url("/locks/billing:1"))
        .header("Lock-Token", own["token"].as_str().unwrap());
    assert_eq!(as_(BILLING_KEY, gone).await.status(), 404);

    // No known principal: 401.
    assert_problem(
        as_("not-a-key", acquire("billing:3")).await,
        401,
        "unauthorized",
    )
    .await;
    let anonymous = acquire("billing:3").send().await.unwrap();
    assert_problem(anonymous, 401, "unauthorized").await;
    app.stop().await;
}

#[tokio::test]
async fn a_session_belongs_to_the_principal_that_opened_it() {
    let redis = RedisServer::start().await;
    let dir = TempDir::new().unwrap();
    let acl = write(dir.path(), "acl.toml", &two_services());
    let app = TestApp::spawn_with(&redis, &["--acl-file", acl.to_str().unwrap()]).await;
    let http = &app.http;
    let opened = as_(
        BILLING_KEY,
        http.post(app.url("/sessions")).json(&json!({})),
    )
    .await;
    assert_eq!(opened.status(), StatusCode::CREATED);
    let id = opened.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let session = app.url(&format!("/sessions/{id}"));
    for request in [
        http.put(&session),
        http.get(&session),
        http.delete(&session),
    ] {
        assert_problem(as_(OPS_KEY, request).await, 403, "forbidden").await;
    }
    let attach = |key: &str| {
        http.post(app.url("/locks"))
            .json(&json!({"key": key, "session": id}))
    };
    assert_problem(as_(OPS_KEY, attach("orders:7")).await, 403, "forbidden").await;
    let batch = http
        .post(app.url("/locks/batch"))
        .json(&json!({"locks": [{"key": "orders:8"}], "session": id}));
    assert_problem(as_(OPS_KEY, batch).await, 403, "forbidden").await;
    // Its owner uses it as ever.
    assert_eq!(as_(BILLING_KEY, attach("billing:7")).await.status(), 201);
    assert_eq!(as_(BILLING_KEY, http.put(&session)).await.status(), 200);
    assert_eq!(as_(BILLING_KEY, http.delete(&session)).await.status(), 204);
    app.stop().await;
}

#[tokio::test]
async fn acl_hash_and_check() {
    let mut hash = Command::new(env!("CARGO_BIN_EXE_lockgate"))
        .args(["acl", "hash"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    hash.stdin.take().unwrap().write_all(b"test\n").unwrap();
    let out = hash.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    );
    let dir = TempDir::new().unwrap();
    let good = write(dir.path(), "good.toml", &two_services());
    let check = |path: &Path| {
        Command::new(env!("CARGO_BIN_EXE_lockgate"))
            .args(["acl", "check"])
            .arg(path)
            .output()
            .unwrap()
    };
    let out = check(&good);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).ends_with(": 2 principals\n"),
        "{out:?}"
    );
    let bad = write(
        dir.path(),
        "bad.toml",
        "[principals.a]\nclient_cert = \"a\"\nrules = [ { prefix = \"x\", allow = [\"write\"] } ]\n",
    );
    let out = check(&bad);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 3"),
        "{out:?}"
    );
}

/// An Idempotency-Key is its principal's: another principal sending the
/// same key and body is a new request of its own (refused while the lock
/// is held), never the first principal's grant answered again.
#[tokio::test]
async fn an_idempotency_key_is_scoped_to_its_principal() {
    let redis = RedisServer::start().await;
    let dir = TempDir::new().unwrap();
    let acl = write(dir.path(), "acl.toml", &two_services());
    let one = TestApp::spawn_with(&redis, &["--acl-file", acl.to_str().unwrap()]).await;
    let two = TestApp::spawn_with(&redis, &["--acl-file", acl.to_str().unwrap()]).await;
    let body = json!({"key": "billing:7", "ttl_ms": 30_000});
    let acquire = |app: &TestApp| {
        app.http
            .post(app.url("/locks"))
            .header("Idempotency-Key", "b7f6c1d2-retry-me")
            .json(&body)
    };
    let granted = as_(BILLING_KEY, acquire(&one)).await;
    assert_eq!(granted.status(), StatusCode::CREATED);
    let grant: Value = granted.json().await.unwrap();

    // Its own retry, through either gateway, is answered the grant again.
    let replayed = as_(BILLING_KEY, acquire(&two)).await;
    assert_eq!(replayed.status(), StatusCode::CREATED);
    assert_eq!(replayed.headers()["idempotent-replayed"], "true");
    assert_eq!(
        replayed.json::<Value>().await.unwrap()["token"],
        grant["token"]
    );

    // Another principal with the same key and body gets no token of it.
    for app in [&one, &two] {
        let other = as_(OPS_KEY, acquire(app)).await;
        let problem = assert_problem(other, 409, "lock-held").await;
        assert!(
            !problem
                .to_string()
                .contains(grant["token"].as_str().unwrap())
        );
    }
    // And once the lock is free, the same key is a grant of its own for it.
    let released = one
        .http
        .delete(one.url("/locks/billing:7"))
        .header("Lock-Token", grant["token"].as_str().unwrap())
        .bearer_auth(BILLING_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(released.status(), StatusCode::NO_CONTENT);
    let own = as_(OPS_KEY, acquire(&one)).await;
    assert_eq!(own.status(), StatusCode::CREATED);
    assert!(own.headers().get("idempotent-replayed").is_none());
    one.stop().await;
    two.stop().await;
}
