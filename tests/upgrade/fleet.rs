//! The fleet record beside a release that keeps none (0.1.0), its function library deleted once it stops, a format raise refused, and a rollback that keeps every lock.

use std::time::Duration;

use serde_json::{Value, json};

use crate::eventually;
use crate::gateways::{ADMIN, Gateway, Release, lockgate};
use crate::redis_server::RedisServer;

/// The names of the `lockgate_*` function libraries loaded on `redis`.
async fn libraries(redis: &RedisServer) -> Vec<String> {
    let listed: Vec<Vec<redis::Value>> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
    let mut names = Vec::new();
    for library in listed {
        // Each library is a flat map: library_name, <name>, engine, ...
        for pair in library.chunks(2) {
            if let [
                redis::Value::BulkString(field),
                redis::Value::BulkString(name),
            ] = pair
                && field == b"library_name"
            {
                names.push(String::from_utf8_lossy(name).into_owned());
            }
        }
    }
    names.sort();
    names
}

fn format_status(redis: &RedisServer) -> Value {
    let status = lockgate(redis, &["format", "status", "--json"]);
    assert!(status.status.success(), "{status:?}");
    serde_json::from_slice(&status.stdout).unwrap()
}

#[tokio::test]
#[ignore = "needs the previous release: make upgrade-short"]
async fn short_the_fleet_record_beside_a_release_that_keeps_none() {
    let redis = RedisServer::start_single().await;
    // Long enough to read the old library as unnamed while it runs, short
    // enough to see it deleted once it stops.
    let new = Gateway::spawn(Release::New, &redis, &["--library-grace-ms", "6000"]).await;
    let old = Gateway::spawn(Release::Old, &redis, &[]).await;
    // Its first script call loads the old build's library.
    let (status, grant) = json_of(old.post("/locks", &json!({"key": "first"})).await).await;
    assert_eq!(status, 201, "{grant}");
    let token = grant["token"].as_str().unwrap();
    assert_eq!(old.release("first", token).await.status().as_u16(), 204);
    let loaded = libraries(&redis).await;
    assert_eq!(loaded.len(), 2, "{loaded:?}");

    let (status, version) = new.get_json("/version").await;
    assert_eq!(status, 200);
    assert_eq!(version["format_in_use"], 1);
    assert_eq!(old.get("/version").await.status().as_u16(), 404);
    let instances: Value = new
        .http
        .get(new.url("/admin/instances"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let instances = instances["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 1, "{instances:?}");
    assert_eq!(instances[0]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(instances[0]["address"], new.addr.to_string());

    let unnamed = eventually(Duration::from_secs(5), || async {
        format_status(&redis)["unnamed_libraries"]
            .as_array()
            .is_some_and(|unnamed| unnamed.len() == 1)
    })
    .await;
    let document = format_status(&redis);
    assert!(
        unnamed,
        "the old library is not counted as unnamed: {document}"
    );
    let old_library = document["unnamed_libraries"][0]
        .as_str()
        .expect("a library name")
        .to_owned();
    assert!(
        loaded.contains(&old_library),
        "{old_library} not in {loaded:?}"
    );
    assert_eq!(document["instances"].as_array().unwrap().len(), 1);

    let raise = lockgate(&redis, &["format", "raise", "--to", "2"]);
    assert_eq!(raise.status.code(), Some(1), "{raise:?}");
    assert!(!raise.stderr.is_empty(), "a refusal names its reason");

    assert!(old.stop().await.success());
    let deleted = eventually(Duration::from_secs(30), || async {
        !libraries(&redis).await.contains(&old_library)
    })
    .await;
    assert!(deleted, "{old_library} still loaded after its grace");
    assert_eq!(libraries(&redis).await.len(), 1);
    assert_eq!(format_status(&redis)["unnamed_libraries"], json!([]));
    // The new instance still serves.
    let (status, _) = new.get_json("/locks/nothing-here").await;
    assert_eq!(status, 404);
}

/// Locks of every kind taken on two new instances, which are then replaced
/// one at a time by old ones (SIGTERM, start, ready): every lock is still
/// held with its fencing token, and extended, kept alive and released
/// through the old release.
#[tokio::test]
#[ignore = "needs the previous release: make upgrade-short"]
async fn short_a_rollback_keeps_every_lock() {
    let redis = RedisServer::start_single().await;
    let mut fleet = Gateway::fleet("nn", &redis, &[]).await;
    let (status, session) =
        json_of(fleet[0].post("/sessions", &json!({"ttl_ms": 30_000})).await).await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let bodies = [
        json!({"key": "plain", "ttl_ms": 60_000}),
        json!({"key": "shared", "ttl_ms": 60_000, "mode": "shared"}),
        json!({"key": "counting", "ttl_ms": 60_000, "limit": 3}),
        json!({"key": "in-session", "session": id}),
    ];
    let mut grants = Vec::new();
    for (n, body) in bodies.iter().enumerate() {
        let (status, grant) = json_of(fleet[n % 2].post("/locks", body).await).await;
        assert_eq!(status, 201, "{grant}");
        grants.push(grant);
    }

    for slot in 0..2 {
        let new = fleet.remove(slot);
        assert!(new.stop().await.success());
        fleet.insert(slot, Gateway::spawn(Release::Old, &redis, &[]).await);
        // Between the two replacements the fleet is mixed: both see every lock.
        for gateway in &fleet {
            for grant in &grants {
                let key = grant["key"].as_str().unwrap();
                let (status, seen) = gateway.get_json(&format!("/locks/{key}")).await;
                assert_eq!(status, 200, "{:?} lost {key}: {seen}", gateway.release);
                assert!(
                    seen["fencing_token"] == grant["fencing_token"]
                        || seen["holders"]
                            .to_string()
                            .contains(&grant["fencing_token"].to_string()),
                    "{key}: {seen} against {grant}"
                );
            }
        }
    }
    let old = &fleet[0];
    assert_eq!(old.release, Release::Old);
    // Taken by another owner: refused, the first hold still valid.
    let (status, _) = json_of(old.post("/locks", &json!({"key": "plain"})).await).await;
    assert_eq!(status, 409);
    let extended = old
        .http
        .put(old.url("/locks/plain/ttl"))
        .json(&json!({"token": grants[0]["token"], "ttl_ms": 60_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(extended.status().as_u16(), 200);
    let kept = old
        .http
        .put(old.url(&format!("/sessions/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(kept.status().as_u16(), 200);
    for (n, grant) in grants.iter().enumerate() {
        let key = grant["key"].as_str().unwrap();
        let token = grant["token"].as_str().unwrap();
        let released = fleet[n % 2].release(key, token).await.status().as_u16();
        assert_eq!(released, 204, "releasing {key} through 0.1.0");
    }
}

async fn json_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}
