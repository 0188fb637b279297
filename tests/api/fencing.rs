//! Fencing tokens: strictly increasing across release, expiry, gateway and Redis restarts; no state left behind forever.

use std::time::Duration;

use reqwest::StatusCode;

use crate::helpers::{RedisServer, TestApp, eventually};

/// Takes `key` `rounds` times, ending every other lease by release and the
/// rest by expiry; returns the fencing tokens in order.
async fn acquisitions(app: &TestApp, key: &str, rounds: usize) -> Vec<u64> {
    let mut tokens = Vec::with_capacity(rounds);
    for round in 0..rounds {
        if round % 2 == 0 {
            let grant = app.take(key, 30_000).await;
            tokens.push(grant.fencing_token);
            let released = app.release(key, &grant.token).await;
            assert_eq!(released.status(), StatusCode::NO_CONTENT);
        } else {
            let grant = app.take(key, 20).await;
            tokens.push(grant.fencing_token);
            let expired = eventually(Duration::from_secs(2), || async {
                app.get(&format!("/locks/{key}")).await.status() == StatusCode::NOT_FOUND
            })
            .await;
            assert!(expired, "a 20 ms lease did not lapse");
        }
    }
    tokens
}

fn assert_strictly_increasing(tokens: &[u64]) {
    for pair in tokens.windows(2) {
        assert!(
            pair[0] < pair[1],
            "fencing tokens went {} then {}",
            pair[0],
            pair[1]
        );
    }
}

#[tokio::test]
async fn fencing_tokens_increase_across_releases_expiries_and_restarts() {
    let mut redis = RedisServer::start_with_aof().await;
    let app = TestApp::spawn(&redis).await;
    let mut tokens = acquisitions(&app, "ledger", 100).await;
    assert!(tokens[0] > 0);

    app.stop().await;
    let app = TestApp::spawn(&redis).await;
    tokens.extend(acquisitions(&app, "ledger", 4).await);

    redis.restart().await;
    let ready = eventually(Duration::from_secs(5), || async {
        app.get("/readyz").await.status() == StatusCode::OK
    })
    .await;
    assert!(
        ready,
        "the gateway did not reconnect to the restarted Redis"
    );
    tokens.extend(acquisitions(&app, "ledger", 4).await);

    assert_eq!(tokens.len(), 108);
    assert_strictly_increasing(&tokens);
}

#[tokio::test]
async fn the_fence_counter_survives_a_redis_crash_through_the_aof() {
    let mut redis = RedisServer::start_with_aof().await;
    let app = TestApp::spawn(&redis).await;
    let before = app.take("vault", 30_000).await;

    redis.restart().await;

    let mut conn = redis.connection().await;
    let counter: Option<u64> = redis::cmd("GET")
        .arg("lockgate:fence:{vault}")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        counter,
        Some(before.fencing_token),
        "the AOF lost the counter"
    );
    // The lease itself survived too, so the holder still holds it.
    let inspected = app.get("/locks/vault").await;
    assert_eq!(inspected.status(), StatusCode::OK);
}

#[tokio::test]
async fn every_key_the_gateway_writes_expires_once_its_locks_have_ended() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    acquisitions(&app, "cleanup:a", 6).await;
    let reentered = app.take("cleanup:b", 50).await;
    let response = app
        .acquire(serde_json::json!({"key": "cleanup:b", "token": reentered.token, "ttl_ms": 50}))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let extended = app.take("cleanup:c", 50).await;
    assert_eq!(
        app.extend("cleanup:c", &extended.token, 60).await.status(),
        StatusCode::OK
    );
    tokio::time::sleep(Duration::from_millis(150)).await;

    let mut conn = redis.connection().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!keys.is_empty(), "the gateway wrote nothing?");
    for key in keys {
        assert!(key.starts_with("lockgate:"), "{key} is outside the prefix");
        if key == "lockgate:meta" {
            // The one key that stands: the fleet's record, which says the
            // format of what is stored (a sale stays), a few fields an
            // instance, each dropped when it goes stale.
            continue;
        }
        assert!(
            !key.starts_with("lockgate:lock:"),
            "{key} outlived its lease"
        );
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(ttl > 0, "{key} has no expiry (PTTL {ttl})");
    }
}

/// The recipes of docs/reliability.md ("How a resource checks a fencing
/// token"), each run against its real resource: a newer holder's write
/// stands, the stale holder's later write is refused, and the holder may
/// write again under its own token.
mod recipes {
    use std::io::{Read, Seek, Write};

    use super::*;
    use crate::helpers::Postgres;

    #[tokio::test]
    async fn postgresql_refuses_a_stale_fencing_token() {
        let postgres = Postgres::start();
        sqlx::any::install_default_drivers();
        let pool = sqlx::AnyPool::connect(&postgres.url()).await.unwrap();
        sqlx::query(
            "CREATE TABLE accounts (id TEXT PRIMARY KEY, balance BIGINT, fence BIGINT NOT NULL)",
        )
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query("INSERT INTO accounts VALUES ('acct-1', 0, 0)")
            .execute(&pool)
            .await
            .unwrap();
        // The recipe: the read raises the row's fence to the reader's token
        // (refusing a smaller one), the write checks it again.
        let read = |fence: i64| {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar::<_, i64>(
                    "UPDATE accounts SET fence = $1 WHERE id = 'acct-1' AND fence <= $1 \
                     RETURNING balance",
                )
                .bind(fence)
                .fetch_optional(&pool)
                .await
                .unwrap()
            }
        };
        let write = |balance: i64, fence: i64| {
            let pool = pool.clone();
            async move {
                sqlx::query("UPDATE accounts SET balance = $2 WHERE id = 'acct-1' AND fence <= $1")
                    .bind(fence)
                    .bind(balance)
                    .execute(&pool)
                    .await
                    .unwrap()
                    .rows_affected()
            }
        };
        let (old, new) = fencing_tokens().await;
        // A read-modify-write each: the stale holder reads, the newer one
        // reads, the stale one's write comes first and is refused.
        let seen_by_old = read(old).await.expect("the stale holder reads first");
        let seen_by_new = read(new).await.expect("the newer holder reads");
        assert_eq!(
            write(seen_by_old + 1, old).await,
            0,
            "the stale write is refused"
        );
        assert_eq!(
            write(seen_by_new + 1, new).await,
            1,
            "the newer holder writes"
        );
        assert_eq!(read(new).await, Some(1), "and reads again under its token");
        assert_eq!(read(old).await, None, "the stale holder cannot even read");
        let balance: i64 = sqlx::query_scalar("SELECT balance FROM accounts")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(balance, 1, "one increment, none lost");
        pool.close().await;
    }

    #[tokio::test]
    async fn a_redis_resource_refuses_a_stale_fencing_token_with_a_lua_check() {
        // The recipe's two scripts: the read raises the fence, the write
        // checks it.
        const READ: &str = "
            local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
            if tonumber(ARGV[1]) < fence then return false end
            redis.call('HSET', KEYS[1], 'fence', ARGV[1])
            return redis.call('HGET', KEYS[1], 'value') or ''";
        const WRITE: &str = "
            local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
            if tonumber(ARGV[1]) < fence then return 0 end
            redis.call('HSET', KEYS[1], 'value', ARGV[2])
            return 1";
        let resource = RedisServer::start_single().await;
        let mut conn = resource.node(0).connection().await;
        let (read, write) = (redis::Script::new(READ), redis::Script::new(WRITE));
        let (old, new) = fencing_tokens().await;
        let mut reads = async |fence: i64| -> Option<String> {
            read.key("inventory:42")
                .arg(fence)
                .invoke_async(&mut conn)
                .await
                .unwrap()
        };
        assert_eq!(
            reads(old).await.as_deref(),
            Some(""),
            "the stale holder reads first"
        );
        assert_eq!(
            reads(new).await.as_deref(),
            Some(""),
            "the newer holder reads"
        );
        assert_eq!(reads(old).await, None, "then the stale holder is shut out");
        let mut conn = resource.node(0).connection().await;
        let mut writes = async |fence: i64, value: &str| -> i64 {
            write
                .key("inventory:42")
                .arg(fence)
                .arg(value)
                .invoke_async(&mut conn)
                .await
                .unwrap()
        };
        assert_eq!(writes(old, "from the stale holder").await, 0);
        assert_eq!(writes(new, "from the new holder").await, 1);
        let value: String = redis::cmd("HGET")
            .arg("inventory:42")
            .arg("value")
            .query_async(&mut resource.node(0).connection().await)
            .await
            .unwrap();
        assert_eq!(value, "from the new holder");
    }

    #[tokio::test]
    async fn a_file_refuses_a_stale_fencing_token_under_its_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.txt");
        // The file's first line is the fence of its last writer. Writers
        // hold an exclusive lock on the file while they compare and write.
        let write = |fence: i64, content: &str| -> bool {
            let mut file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .unwrap();
            file.lock().unwrap();
            let mut text = String::new();
            file.read_to_string(&mut text).unwrap();
            let stored: i64 = text
                .lines()
                .next()
                .and_then(|line| line.parse().ok())
                .unwrap_or(0);
            if fence < stored {
                return false;
            }
            file.set_len(0).unwrap();
            file.rewind().unwrap();
            write!(file, "{fence}\n{content}").unwrap();
            file.sync_all().unwrap();
            true
        };
        let (old, new) = fencing_tokens().await;
        assert!(write(new, "new"));
        assert!(!write(old, "stale"));
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{new}\nnew")
        );
    }

    /// Two fencing tokens a real gateway handed out: the first holder's
    /// (whose lease lapsed) and the next holder's.
    async fn fencing_tokens() -> (i64, i64) {
        let redis = RedisServer::start().await;
        let app = TestApp::spawn(&redis).await;
        let first = app.take("resource", 30).await;
        let next = loop {
            let attempt = app
                .acquire(serde_json::json!({"key": "resource", "ttl_ms": 30_000}))
                .await;
            if attempt.status() == StatusCode::CREATED {
                break attempt.json::<serde_json::Value>().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        app.stop().await;
        let token = |fence: u64| i64::try_from(fence).unwrap();
        (
            token(first.fencing_token),
            token(next["fencing_token"].as_u64().unwrap()),
        )
    }
}
