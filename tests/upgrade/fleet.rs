//! The fleet record beside a release that keeps none (0.1.0), its function library deleted once it stops, a format raise refused, the move to the one-write hand-off (format 2) once it is gone, and a rollback that keeps every lock.

use std::time::Duration;

use serde_json::{Value, json};

use crate::eventually;
use crate::gateways::{ADMIN, Gateway, Release, lockgate};
use crate::mixed::wake_across;
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
    // Raised as the new instance joined: the old one had left no trace yet
    // (its library is loaded by its first script call).
    assert_eq!(version["format_in_use"], 2);
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

    // Lowered for the old release, the format is not raised again while
    // its library is loaded.
    let lower = lockgate(&redis, &["format", "lower"]);
    assert_eq!(lower.status.code(), Some(0), "{lower:?}");
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

/// How many grants from the queue `gateway`'s waiters took in `writes`
/// writes (`lockgate_lock_queue_grants_total`).
async fn queue_grants(gateway: &Gateway, writes: &str) -> u64 {
    let page = gateway.get("/metrics").await.text().await.unwrap();
    let series = format!("lockgate_lock_queue_grants_total{{writes=\"{writes}\"}} ");
    page.lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0, |count| count.parse().unwrap())
}

/// The format in use, as `gateway` (this build) answers it.
async fn format_in_use(gateway: &Gateway) -> Value {
    gateway.get_json("/version").await.1["format_in_use"].clone()
}

/// Beside a running 0.1.0 (its library loaded before this build starts)
/// the fleet stays at format 1, and every grant from the queue, either
/// way between the releases, is offered and claimed. Once 0.1.0 is gone
/// (its library deleted after the grace), the fleet raises itself to
/// format 2: a waiter that queued before the switch is still granted
/// (offered, as its entry asked), and grants from then on take one write.
#[tokio::test]
#[ignore = "needs the previous release: make upgrade-short"]
async fn short_the_fleet_moves_to_the_one_write_hand_off_once_the_old_release_is_gone() {
    let redis = RedisServer::start_single().await;
    let old = Gateway::spawn(Release::Old, &redis, &[]).await;
    let (status, grant) = json_of(old.post("/locks", &json!({"key": "first"})).await).await;
    assert_eq!(status, 201, "{grant}");
    assert_eq!(
        old.release("first", grant["token"].as_str().unwrap())
            .await
            .status()
            .as_u16(),
        204
    );
    let grace = ["--library-grace-ms", "8000"];
    let new = Gateway::spawn(Release::New, &redis, &grace).await;
    assert_eq!(format_in_use(&new).await, 1);

    wake_across(&old, &new, "old-to-new").await;
    wake_across(&new, &old, "new-to-old").await;
    assert_eq!(queue_grants(&new, "two").await, 1);
    assert_eq!(queue_grants(&new, "one").await, 0);

    // A waiter queued under format 1, granted after the switch.
    let (status, held) = json_of(
        new.post("/locks", &json!({"key": "across", "ttl_ms": 60_000}))
            .await,
    )
    .await;
    assert_eq!(status, 201, "{held}");
    let across = {
        let (http, url) = (new.http.clone(), new.url("/locks"));
        tokio::spawn(async move {
            let body = json!({"key": "across", "ttl_ms": 5_000, "wait_ms": 60_000});
            http.post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    assert!(old.stop().await.success());
    let raised = eventually(Duration::from_secs(40), || async {
        format_in_use(&new).await == 2
    })
    .await;
    assert!(raised, "{}", format_status(&redis));
    let document = format_status(&redis);
    let last = &document["migrations"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (last["from"].clone(), last["to"].clone()),
        (json!(1), json!(2)),
        "{document}"
    );

    assert_eq!(
        new.release("across", held["token"].as_str().unwrap())
            .await
            .status()
            .as_u16(),
        204
    );
    assert_eq!(across.await.unwrap(), 201);
    assert_eq!(queue_grants(&new, "two").await, 2, "offered, as it queued");

    let second = Gateway::spawn(Release::New, &redis, &grace).await;
    wake_across(&new, &second, "new-to-new").await;
    wake_across(&second, &new, "back").await;
    assert_eq!(queue_grants(&second, "one").await, 1);
    assert_eq!(queue_grants(&new, "one").await, 1);
    assert_eq!(queue_grants(&new, "two").await, 2);
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
