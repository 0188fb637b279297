//! The fleet: this build's version and data formats, the live instances of every version on one Redis, the format in use (a gateway that does not write it grants nothing, and refuses to start), `lockgate format`, and the function libraries nobody names deleted after their grace.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{ADMIN, RedisServer, TestApp, assert_problem, eventually};

const META: &str = "lockgate:meta";

/// `lockgate <args>` with the flags that reach `redis`, run to its end.
fn lockgate(redis: &RedisServer, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lockgate"))
        .args(args)
        .args(redis.gateway_flags())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run lockgate")
}

async fn admin_instances(app: &TestApp) -> Vec<Value> {
    let response = app
        .http
        .get(app.url("/admin/instances"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    body["instances"].as_array().expect("instances").clone()
}

async fn set_format(redis: &RedisServer, format: u32) {
    set_format_text(redis, &format.to_string()).await;
}

#[tokio::test]
async fn version_names_this_build_and_the_format_in_use() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let version: Value = app.get("/version").await.json().await.unwrap();
    assert_eq!(
        version,
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "formats": {"reads": [1, 2], "writes": 2},
            "format_in_use": 2,
        })
    );
    // The first instance on a Redis records the format it found in use
    // (1, what a release that keeps no record wrote), and, alone in the
    // fleet, raises it to the highest it writes before it serves.
    let recorded: Option<u32> = redis::cmd("HGET")
        .arg(META)
        .arg("format")
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
    assert_eq!(recorded, Some(2));

    let printed = Command::new(env!("CARGO_BIN_EXE_lockgate"))
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&printed.stdout),
        format!(
            "lockgate {}\ndata formats: reads 1 and 2, writes 1..2\n",
            env!("CARGO_PKG_VERSION")
        )
    );
}

#[tokio::test]
async fn every_live_instance_is_listed_and_a_stopped_one_leaves() {
    let redis = RedisServer::start().await;
    let first = TestApp::spawn_with(&redis, &["--admin-token", ADMIN]).await;
    let second = TestApp::spawn_with(&redis, &["--admin-token", ADMIN]).await;

    let both = eventually(Duration::from_secs(5), || async {
        admin_instances(&first).await.len() == 2
    })
    .await;
    assert!(both, "{:?}", admin_instances(&first).await);
    let instances = admin_instances(&first).await;
    let ids: Vec<&str> = instances
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [&first.instance_id, &second.instance_id],
        "oldest first"
    );
    for instance in &instances {
        assert_eq!(instance["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(instance["formats"], json!({"reads": [1, 2], "writes": 2}));
        assert!(instance["started_at_ms"].as_u64().unwrap() > 0);
    }
    assert_eq!(instances[1]["address"], second.addr.to_string());
    let metrics = first.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains(&format!(
            "lockgate_build_info{{version=\"{}\",format_reads=\"1,2\",format_writes=\"1..2\"}} 1",
            env!("CARGO_PKG_VERSION")
        )),
        "{metrics}"
    );
    let counted = eventually(Duration::from_secs(5), || async {
        first
            .get("/metrics")
            .await
            .text()
            .await
            .unwrap()
            .contains(&format!(
                "lockgate_instances{{version=\"{}\"}} 2",
                env!("CARGO_PKG_VERSION")
            ))
    })
    .await;
    assert!(counted, "lockgate_instances does not count both");

    // A stopped instance drops its record at once, not after it goes stale.
    second.stop().await;
    let left = eventually(Duration::from_secs(4), || async {
        admin_instances(&first).await.len() == 1
    })
    .await;
    assert!(left, "{:?}", admin_instances(&first).await);

    let anonymous = first.get("/admin/instances").await;
    assert_problem(anonymous, 401, "unauthorized").await;
}

/// A newer release raised the format in use beyond what this build writes:
/// a running gateway stops granting (503 format-unsupported, not ready)
/// until it is lowered, and a starting one refuses to start (exit 78, one
/// line that says why).
#[tokio::test]
async fn a_format_this_build_does_not_write_stops_its_grants_and_its_start() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let held = app.take("before", 30_000).await;

    set_format(&redis, 3).await;
    let closed = eventually(Duration::from_secs(5), || async {
        app.get("/readyz").await.status() == StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
    assert!(closed, "still ready with format 3 in use");
    let ready: Value = app.get("/readyz").await.json().await.unwrap();
    assert_eq!(
        ready,
        json!({"status": "format", "format_in_use": 3, "writes": 2})
    );
    let refused = app.acquire(json!({"key": "after"})).await;
    let problem = assert_problem(refused, 503, "format-unsupported").await;
    assert!(
        problem["detail"].as_str().unwrap().contains('3'),
        "{problem}"
    );
    // Nothing was written: the held lock is as it was, and "after" was never taken.
    let owner: Option<String> = redis::cmd("HGET")
        .arg("lockgate:lock:{before}")
        .arg("owner")
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
    assert_eq!(owner.as_deref(), Some(held.token.as_str()));

    let started = Instant::now();
    let starting = lockgate(&redis, &["serve", "--listen", "127.0.0.1:0"]);
    assert_eq!(starting.status.code(), Some(78), "{starting:?}");
    let stderr = String::from_utf8_lossy(&starting.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("format") && lines[0].contains('3'),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));

    set_format(&redis, 2).await;
    let open = eventually(Duration::from_secs(5), || async {
        app.get("/readyz").await.status() == StatusCode::OK
    })
    .await;
    assert!(open, "not ready again with format 2 back in use");
    assert_eq!(
        app.acquire(json!({"key": "after"})).await.status(),
        StatusCode::CREATED
    );
    assert_eq!(
        app.release("before", &held.token).await.status(),
        StatusCode::NO_CONTENT
    );
}

#[tokio::test]
async fn format_status_raise_and_lower_from_the_command_line() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;

    let status = lockgate(&redis, &["format", "status", "--json"]);
    assert!(status.status.success(), "{status:?}");
    let document: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(document["format_in_use"], 2);
    assert_eq!(document["instances"][0]["id"], app.instance_id);
    assert_eq!(document["instances"][0]["formats"]["writes"], json!([1, 2]));
    assert_eq!(document["unnamed_libraries"], json!([]));
    let migrations = document["migrations"].as_array().unwrap();
    assert_eq!(migrations.len(), 2, "{document}");
    assert_eq!(migrations[0]["to"], 1);
    assert_eq!(
        (migrations[1]["from"].clone(), migrations[1]["to"].clone()),
        (json!(1), json!(2)),
        "{document}"
    );

    let text = lockgate(&redis, &["format", "status"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("data format in use: 2"), "{text}");
    assert!(text.contains(&app.instance_id), "{text}");

    // Every live instance writes 2 at most: nothing to raise.
    let raise = lockgate(&redis, &["format", "raise"]);
    assert_eq!(raise.status.code(), Some(0), "{raise:?}");
    assert!(String::from_utf8_lossy(&raise.stdout).starts_with("nothing to raise"));
    let below = lockgate(&redis, &["format", "lower", "--to", "0"]);
    assert_eq!(below.status.code(), Some(1), "{below:?}");

    // Lowered to 1 by an operator, it stays there (no automatic raise
    // undoes it), serving, until an operator raises it again.
    let lower = lockgate(&redis, &["format", "lower"]);
    assert_eq!(lower.status.code(), Some(0), "{lower:?}");
    let stays = eventually(Duration::from_secs(5), || async {
        app.get("/version").await.json::<Value>().await.unwrap()["format_in_use"] == 1
    })
    .await;
    assert!(stays, "the gateway did not follow the lower");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let version: Value = app.get("/version").await.json().await.unwrap();
    assert_eq!(version["format_in_use"], 1, "raised again by itself");
    assert_eq!(app.get("/readyz").await.status(), StatusCode::OK);
    let raise = lockgate(&redis, &["format", "raise"]);
    assert_eq!(raise.status.code(), Some(0), "{raise:?}");

    // Raising beyond what a live instance writes is refused, and changes nothing.
    let beyond = lockgate(&redis, &["format", "raise", "--to", "3"]);
    assert_eq!(beyond.status.code(), Some(1), "{beyond:?}");
    let why = String::from_utf8_lossy(&beyond.stderr);
    assert!(why.starts_with("lockgate format raise: refused: "), "{why}");
    assert!(why.contains(&app.instance_id), "{why}");
    assert_eq!(app.get("/readyz").await.status(), StatusCode::OK);
    let format: u32 = redis::cmd("HGET")
        .arg(META)
        .arg("format")
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
    assert_eq!(format, 2);

    // Redis not answering: exit 3, said on stderr (2 is a usage error).
    let nowhere = Command::new(env!("CARGO_BIN_EXE_lockgate"))
        .args(["format", "status", "--redis-url", "redis://127.0.0.1:1"])
        .args(["--redis-timeout-ms", "500"])
        .output()
        .unwrap();
    assert_eq!(nowhere.status.code(), Some(3), "{nowhere:?}");
    assert!(String::from_utf8_lossy(&nowhere.stderr).contains("cannot read the fleet's record"));
}

/// The Redis URLs of every primary (one, or each master of a Cluster).
fn primaries(redis: &RedisServer) -> Vec<String> {
    if redis.gateway_flags()[0] == "--redis-cluster-nodes" {
        redis.gateway_flags()[1]
            .split(',')
            .map(str::to_owned)
            .collect()
    } else {
        vec![redis.url()]
    }
}

async fn libraries_on(url: &str) -> Vec<String> {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let listed: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(&mut conn)
        .await
        .unwrap();
    listed
        .iter()
        .filter_map(|library| {
            let redis::Value::Array(fields) = library else {
                return None;
            };
            let mut fields = fields.iter();
            while let Some(field) = fields.next() {
                let value = fields.next()?;
                if let (redis::Value::BulkString(name), redis::Value::BulkString(value)) =
                    (field, value)
                    && name == b"library_name"
                {
                    return Some(String::from_utf8_lossy(value).into_owned());
                }
            }
            None
        })
        .collect()
}

/// A library an older release (or a stopped instance of another build)
/// left loaded is deleted once nobody named it for the grace; this
/// build's own is kept, and one deleted under a running gateway is loaded
/// again by its next call, which is answered as if nothing happened.
#[tokio::test]
async fn a_function_library_nobody_names_is_deleted_after_its_grace() {
    let redis = RedisServer::start().await;
    let stale = "lockgate_0000dead00";
    for url in primaries(&redis) {
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(format!(
                "#!lua name={stale}\nredis.register_function('{stale}_noop', function() return 1 end)"
            ))
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let app = TestApp::spawn_with(&redis, &["--library-grace-ms", "1000"]).await;
    let held = app.take("kept", 60_000).await;
    let own: Vec<String> = libraries_on(&primaries(&redis)[0])
        .await
        .into_iter()
        .filter(|name| name != stale)
        .collect();
    assert_eq!(own.len(), 1, "{own:?}");

    let gone = eventually(Duration::from_secs(15), || async {
        for url in primaries(&redis) {
            if libraries_on(&url).await.iter().any(|name| name == stale) {
                return false;
            }
        }
        true
    })
    .await;
    assert!(gone, "the unnamed library is still loaded");
    for url in primaries(&redis) {
        let left = libraries_on(&url).await;
        assert!(
            left.iter().all(|name| own.contains(name)),
            "{url}: {left:?}"
        );
    }

    // Its own library deleted under it: the next calls load it again.
    for url in primaries(&redis) {
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let () = redis::cmd("FUNCTION")
            .arg("FLUSH")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    assert_eq!(
        app.acquire(json!({"key": "kept"})).await.status(),
        StatusCode::CONFLICT
    );
    assert_eq!(
        app.release("kept", &held.token).await.status(),
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.acquire(json!({"key": "kept"})).await.status(),
        StatusCode::CREATED
    );
}

async fn hset(redis: &RedisServer, field: &str, value: &str) {
    let () = redis::cmd("HSET")
        .arg(META)
        .arg(field)
        .arg(value)
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
}

/// What a hand (or a bug elsewhere) may write into the record: an
/// instance record that is none is dropped as a stale one is, and the
/// gateways go on granting; a migrations field that is not JSON is read as
/// none. One bad field must not stop every beat (and so every grant).
#[tokio::test]
async fn a_record_written_wrong_is_dropped_and_grants_go_on() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_with(&redis, &["--admin-token", ADMIN]).await;
    for (field, value) in [
        ("i:empty#1", "[]"),
        ("i:cut#1", "{not json"),
        (
            "i:unbeaten#1",
            r#"{"id":"x","version":"9.9.9","writes":[1,1]}"#,
        ),
        (
            "i:never#1",
            r#"{"id":"x","writes":[1,1],"seen_at_ms":"never"}"#,
        ),
        ("migrations", "not json"),
    ] {
        hset(&redis, field, value).await;
    }
    // Past the gate's 5 s: the next request beats, and reads the record.
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    for round in 0..3 {
        let key = format!("wrong-{round}");
        assert_eq!(
            app.acquire(json!({"key": key, "ttl_ms": 1000}))
                .await
                .status(),
            StatusCode::CREATED
        );
    }
    assert_eq!(app.get("/readyz").await.status(), StatusCode::OK);
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(META)
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
    assert!(
        !fields.iter().any(|field| field.ends_with("#1")),
        "{fields:?}"
    );
    assert_eq!(admin_instances(&app).await.len(), 1);
    let status = lockgate(&redis, &["format", "status", "--json"]);
    assert!(status.status.success(), "{status:?}");
}

/// A format field that holds no format (1 to 999999999 in digits) is
/// format 0, which no build writes: nothing is granted (503, never 500),
/// /readyz says why, nothing raises it by itself, and `format raise --to
/// 1` sets it again.
#[tokio::test]
async fn a_format_field_that_holds_no_format_stops_grants_until_an_operator_sets_one() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    for junk in ["junk", "-1", "99999999999", "1.5", " 1", "0"] {
        set_format_text(&redis, junk).await;
        let closed = eventually(Duration::from_secs(5), || async {
            app.get("/readyz").await.status() == StatusCode::SERVICE_UNAVAILABLE
        })
        .await;
        assert!(closed, "format {junk:?}: still ready");
        let ready: Value = app.get("/readyz").await.json().await.unwrap();
        assert_eq!(ready["format_in_use"], 0, "format {junk:?}: {ready}");
        let refused = app.acquire(json!({"key": "junk"})).await;
        assert_problem(refused, 503, "format-unsupported").await;
        let status = lockgate(&redis, &["format", "status"]);
        assert!(status.status.success(), "{status:?}");
        assert!(String::from_utf8_lossy(&status.stdout).contains("data format in use: none"));
    }
    // No automatic raise from 0: it stays closed over a few beats.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        app.get("/readyz").await.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );

    let repaired = lockgate(&redis, &["format", "raise", "--to", "1"]);
    assert!(repaired.status.success(), "{repaired:?}");
    let open = eventually(Duration::from_secs(5), || async {
        app.get("/readyz").await.status() == StatusCode::OK
    })
    .await;
    assert!(open, "not ready after format raise --to 1");
    assert_eq!(
        app.acquire(json!({"key": "junk"})).await.status(),
        StatusCode::CREATED
    );
}

/// Sets the format field to `text`, and tells the instances on the
/// record's channel as `lockgate format` does.
async fn set_format_text(redis: &RedisServer, text: &str) {
    hset(redis, "format", text).await;
    let _: i64 = redis::cmd("PUBLISH")
        .arg(META)
        .arg("format")
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
}

/// `format status` on a Redis no gateway serves: the library the command
/// loaded itself to read the record is not taken for an older release's
/// (which would hold a raise back).
#[tokio::test]
async fn format_status_does_not_count_its_own_library_as_unnamed() {
    let redis = RedisServer::start().await;
    let status = lockgate(&redis, &["format", "status", "--json"]);
    assert!(status.status.success(), "{status:?}");
    let document: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(document["instances"], json!([]));
    assert_eq!(document["unnamed_libraries"], json!([]), "{document}");
    assert!(
        !libraries_on(&primaries(&redis)[0]).await.is_empty(),
        "no library loaded?"
    );
}
