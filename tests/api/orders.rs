//! The order hand-off: every order of every sale stored in PostgreSQL or SQLite exactly once, through worker deaths, a database that goes away, poison entries, trimmed entries and resets.

use std::time::Duration;

use redis::AsyncCommands;
use serde_json::Value;

use crate::helpers::orders::{OneWayProxy, Rows, Worker, reconcile, rows};
use crate::helpers::{Postgres, RedisServer, TestApp, TestConnection, eventually};

/// A SQLite database in a temp dir (kept alive by the returned dir).
fn sqlite() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("orders.db").display());
    (dir, url)
}

/// The sale's orders stream, as the gateway names it.
fn stream(sku: &str) -> String {
    format!("lockgate:sale:{{{sku}}}:orders")
}

/// Buys `count` single units of `sku`, one user each.
async fn buy_many(app: &TestApp, sku: &str, count: usize) {
    for n in 0..count {
        app.bought(sku, &format!("u-{n}"), 1, None).await;
    }
}

/// Waits until the sale says every order is stored (`pending` 0).
async fn all_stored(app: &TestApp, sku: &str, within: Duration) -> Value {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let sale = app.sale(sku).await;
        if sale["pending"] == 0 && sale["stored"] == sale["orders"] {
            return sale;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not everything was stored: {sale}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn rows_of(sale: &Value) -> Rows {
    let orders = sale["orders"].as_i64().unwrap();
    Rows {
        rows: orders,
        distinct: orders,
        units: sale["sold"].as_i64().unwrap(),
    }
}

#[tokio::test]
async fn every_sales_orders_reach_sqlite_once_and_reconcile() {
    // In cluster mode these skus live on different masters.
    let skus = ["phone", "laptop", "watch", "tablet"];
    let redis = RedisServer::start().await;
    let (_dir, database) = sqlite();
    // Batches of two, so that most are full and the next is read while
    // the last is stored.
    let app = TestApp::spawn_sale(&redis, &["--orders-database", &database, "--batch", "2"]).await;
    for (n, sku) in skus.iter().enumerate() {
        app.reset_sale(sku, 100, 5).await;
        buy_many(&app, sku, 5 + n).await;
    }
    for sku in skus {
        let sale = all_stored(&app, sku, Duration::from_secs(10)).await;
        assert_eq!(rows(&database, sku).await, rows_of(&sale));
    }
    let reconciled = reconcile(&redis, &database);
    let report = String::from_utf8_lossy(&reconciled.stdout);
    assert!(reconciled.status.success(), "{report}");
    for sku in skus {
        assert!(
            report
                .lines()
                .any(|line| line.starts_with(&format!("{sku} ")) && line.ends_with(" ok")),
            "{report}"
        );
    }
    // Stored and acknowledged entries are trimmed away; the listing still
    // shows every order, from the database.
    let conn = redis.connection().await;
    let emptied = eventually(Duration::from_secs(5), || {
        let mut conn = conn.clone();
        async move {
            redis::cmd("XLEN")
                .arg(stream("phone"))
                .query_async::<u64>(&mut conn)
                .await
                .is_ok_and(|length| length == 0)
        }
    })
    .await;
    assert!(emptied, "the stream still holds stored orders");
    assert_eq!(app.orders("phone").await.len(), 5);
    app.stop().await;
}

/// With a hand-off storing orders meanwhile (so each moves from the sale's
/// stream to the database, and out of the stream, at its own time), a
/// listing a few orders a page gives every order once, oldest first.
#[tokio::test]
async fn the_order_list_gives_every_order_once_wherever_it_is() {
    let redis = RedisServer::start().await;
    let (_dir, database) = sqlite();
    let app = TestApp::spawn_sale(&redis, &["--orders-database", &database, "--batch", "3"]).await;
    app.reset_sale("mixed", 1_000, 5).await;
    buy_many(&app, "mixed", 40).await;
    for round in 0..3 {
        // More come while the pages are read; the ones listed before are
        // stored (and leave the stream) meanwhile.
        let buying = {
            let (http, url) = (app.http.clone(), app.url("/seckill/mixed/orders"));
            tokio::spawn(async move {
                for n in 0..20 {
                    let order =
                        serde_json::json!({"user_id": format!("r{round}-{n}"), "quantity": 1});
                    let bought = http.post(&url).json(&order).send().await.unwrap();
                    assert_eq!(bought.status(), reqwest::StatusCode::CREATED);
                }
            })
        };
        let mut listed: Vec<Value> = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut request = app
                .http
                .get(app.url("/seckill/mixed/orders"))
                .query(&[("limit", "7")]);
            if let Some(cursor) = &cursor {
                request = request.query(&[("cursor", cursor)]);
            }
            let page: Value = request.send().await.unwrap().json().await.unwrap();
            listed.extend(page["orders"].as_array().expect("a page").clone());
            match page["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => break,
            }
        }
        buying.await.unwrap();
        let ids: Vec<&str> = listed
            .iter()
            .map(|order| order["order_id"].as_str().unwrap())
            .collect();
        let distinct: std::collections::BTreeSet<&str> = ids.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            ids.len(),
            "round {round}: an order listed twice"
        );
        // Every order bought before the listing began is in it.
        assert!(
            ids.len() >= 40 + 20 * round,
            "round {round}: {} listed",
            ids.len()
        );
    }
    let sale = all_stored(&app, "mixed", Duration::from_secs(15)).await;
    let every = app.orders("mixed").await;
    assert_eq!(every.len() as u64, sale["orders"].as_u64().unwrap());
    app.stop().await;
}

/// A gateway without the orders database cannot list the orders the
/// hand-off stored (they leave the stream): its listing says it is not
/// complete and how many are stored; one with the database lists them all.
#[tokio::test]
async fn an_instance_without_the_database_says_its_order_list_is_not_complete() {
    let redis = RedisServer::start().await;
    let (_dir, database) = sqlite();
    let storing = TestApp::spawn_sale(&redis, &["--orders-database", &database]).await;
    let other = TestApp::spawn_sale(&redis, &[]).await;
    storing.reset_sale("partial", 100, 5).await;
    buy_many(&storing, "partial", 30).await;
    all_stored(&storing, "partial", Duration::from_secs(15)).await;
    // Stored orders leave the stream once acknowledged: wait for the trim.
    let trimmed = eventually(Duration::from_secs(10), || async {
        let mut conn = redis.connection().await;
        conn.xlen::<_, u64>(stream("partial")).await.unwrap() == 0
    })
    .await;
    assert!(trimmed, "the stored orders never left the stream");

    let list = |app: &TestApp| {
        let request = app
            .http
            .get(app.url("/seckill/partial/orders"))
            .query(&[("limit", "1000")])
            .bearer_auth(crate::helpers::ADMIN);
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let whole = list(&storing).await;
    assert_eq!(whole["orders"].as_array().unwrap().len(), 30, "{whole}");
    assert_eq!(whole["complete"], true, "{whole}");
    let part = list(&other).await;
    assert_eq!(part["complete"], false, "{part}");
    assert_eq!(part["stored"], 30, "{part}");
    assert!(part["orders"].as_array().unwrap().len() < 30);
    // One buyer's orders come from its own record, on any instance.
    let mine: Value = other
        .http
        .get(other.url("/seckill/partial/orders"))
        .query(&[("user_id", "u-3")])
        .bearer_auth(crate::helpers::ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(mine["orders"].as_array().unwrap().len(), 1, "{mine}");
    assert_eq!(mine["complete"], true, "{mine}");
    storing.stop().await;
}

#[tokio::test]
async fn reconcile_fails_when_a_row_is_missing() {
    let redis = RedisServer::start_single().await;
    let (_dir, database) = sqlite();
    let app = TestApp::spawn_sale(&redis, &["--orders-database", &database]).await;
    app.reset_sale("phone", 10, 5).await;
    buy_many(&app, "phone", 3).await;
    all_stored(&app, "phone", Duration::from_secs(10)).await;
    app.stop().await;
    let file = database.trim_start_matches("sqlite://");
    let deleted = std::process::Command::new("sqlite3")
        .args([
            file,
            "DELETE FROM orders WHERE rowid = (SELECT MIN(rowid) FROM orders)",
        ])
        .status();
    if !deleted.is_ok_and(|status| status.success()) {
        // No sqlite3 program: delete through sqlx.
        sqlx::any::install_default_drivers();
        let pool = sqlx::AnyPool::connect(&database).await.unwrap();
        sqlx::query("DELETE FROM orders WHERE rowid = (SELECT MIN(rowid) FROM orders)")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    }
    let reconciled = reconcile(&redis, &database);
    let report = String::from_utf8_lossy(&reconciled.stdout);
    assert_eq!(reconciled.status.code(), Some(1), "{report}");
    assert!(
        report.contains("rows=2") && report.contains("MISMATCH"),
        "{report}"
    );
}

/// A worker whose database froze mid-batch is killed before its commit;
/// another worker takes its entries over once they were idle long enough,
/// and nothing is lost.
#[tokio::test]
async fn a_worker_killed_before_its_commit_loses_nothing_and_another_takes_over() {
    let redis = RedisServer::start_single().await;
    let postgres = Postgres::start();
    let database = postgres.url();
    let app = TestApp::spawn_sale(&redis, &[]).await;
    app.reset_sale("phone", 100, 5).await;
    let mut first = Worker::spawn(&redis, &database, "first", &[]);
    let conn = redis.connection().await;
    read_while_postgres_is_frozen(&app, &conn, &postgres, &first, 6).await;
    first.kill();
    postgres.signal_all("-CONT");
    assert_eq!(
        rows(&database, "phone").await.rows,
        0,
        "nothing was committed"
    );
    let second = Worker::spawn(&redis, &database, "second", &["--claim-idle-ms", "500"]);
    let sale = all_stored(&app, "phone", Duration::from_secs(15)).await;
    assert_eq!(rows(&database, "phone").await, rows_of(&sale));
    assert!(
        second
            .logs()
            .contains("took over orders another worker left pending"),
        "{}",
        second.logs()
    );
    app.stop().await;
}

/// A worker that committed but was killed before its acknowledgement
/// (its link to Redis dropping what it sends, after the database thawed and
/// took the commit) stores nothing twice when it comes back: its own
/// pending entries are stored again as nothing new, and counted once.
#[tokio::test]
async fn a_worker_killed_after_its_commit_stores_nothing_twice() {
    let redis = RedisServer::start_single().await;
    let postgres = Postgres::start();
    let database = postgres.url();
    let app = TestApp::spawn_sale(&redis, &[]).await;
    app.reset_sale("phone", 100, 5).await;
    let redis_port = redis.node(0).port;
    let proxy = OneWayProxy::start(format!("127.0.0.1:{redis_port}").parse().unwrap()).await;
    let through_proxy = [
        "--redis-url".to_owned(),
        format!("redis://127.0.0.1:{}", proxy.port),
    ];
    let mut worker = Worker::spawn_through(&through_proxy, &database, "solo", &[]);
    let conn = redis.connection().await;
    read_while_postgres_is_frozen(&app, &conn, &postgres, &worker, 4).await;
    // Nothing the worker sends reaches Redis any more; the database thaws:
    // the commit goes through, the acknowledgement is lost on the way.
    proxy.drop_client_bytes();
    postgres.signal_all("-CONT");
    let committed = eventually(Duration::from_secs(10), || async {
        rows(&database, "phone").await.rows == 4
    })
    .await;
    assert!(committed, "the batch was not committed:\n{}", worker.logs());
    worker.kill();
    let mut conn = conn.clone();
    assert_eq!(
        pending(&mut conn, "phone").await,
        4,
        "acknowledged before the kill"
    );
    let back = Worker::spawn(&redis, &database, "solo", &[]);
    let sale = all_stored(&app, "phone", Duration::from_secs(15)).await;
    assert_eq!(sale["stored"], 4, "counted twice: {sale}");
    assert_eq!(rows(&database, "phone").await, rows_of(&sale));
    let dead: usize = conn
        .xlen("lockgate:sale:{phone}:orders:dead")
        .await
        .unwrap();
    assert_eq!(dead, 0, "{}", back.logs());
    app.stop().await;
}

/// A worker stopped (SIGTERM) in the middle of a long stream, while each
/// batch's acknowledgement goes out with the next batch's insert: it
/// acknowledges every batch it committed before it exits, so the sale's
/// `stored` is exactly the rows in the database; the next worker stores the
/// rest, and the count ends exact.
#[tokio::test]
async fn a_worker_stopped_mid_stream_acknowledges_every_batch_it_stored() {
    let redis = RedisServer::start_single().await;
    let (_dir, database) = sqlite();
    let app = TestApp::spawn_sale(&redis, &[]).await;
    app.reset_sale("phone", 10_000, 1).await;
    // A backlog much longer than the few batches stored before the stop,
    // so that every batch is a full one and pipelined.
    let orders: i64 = 1000;
    let users: Vec<String> = (0..orders).map(|n| format!("u-{n}")).collect();
    for chunk in users.chunks(100) {
        futures_util::future::join_all(chunk.iter().map(|user| app.bought("phone", user, 1, None)))
            .await;
    }
    let mut worker = Worker::spawn(&redis, &database, "solo", &["--batch", "1"]);
    let conn = redis.connection().await;
    let stored = || {
        let mut conn = conn.clone();
        async move {
            conn.hget::<_, _, Option<i64>>("lockgate:sale:{phone}", "stored")
                .await
                .unwrap()
                .unwrap_or(0)
        }
    };
    let started = eventually(Duration::from_secs(10), || async { stored().await >= 20 }).await;
    assert!(started, "the worker stored nothing:\n{}", worker.logs());
    worker.stop();
    let counted = stored().await;
    let inserted = rows(&database, "phone").await.rows;
    assert!(
        counted < orders,
        "stopped after the whole stream: {counted}"
    );
    assert_eq!(
        counted,
        inserted,
        "the stored count is not the rows committed:\n{}",
        worker.logs()
    );
    let _next = Worker::spawn(&redis, &database, "solo", &["--batch", "1"]);
    let sale = all_stored(&app, "phone", Duration::from_secs(30)).await;
    assert_eq!(sale["stored"], orders, "{sale}");
    assert_eq!(rows(&database, "phone").await, rows_of(&sale));
    app.stop().await;
}

/// PostgreSQL stopped at once (`pg_ctl stop -m immediate`) and started
/// again while orders come in: the worker waits it out, says so once, and
/// every order is stored once.
#[tokio::test]
async fn postgres_stopped_and_started_again_under_load() {
    let redis = RedisServer::start_single().await;
    let postgres = Postgres::start();
    let database = postgres.url();
    let app = TestApp::spawn_sale(&redis, &[]).await;
    app.reset_sale("phone", 1000, 1000).await;
    let worker = Worker::spawn(&redis, &database, "solo", &[]);
    let buying = {
        let app_url = app.url("/seckill/phone/orders");
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            for n in 0..300 {
                let _ = http
                    .post(&app_url)
                    .json(&serde_json::json!({"user_id": format!("u-{}", n % 50), "quantity": 1}))
                    .send()
                    .await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    postgres.stop_immediately();
    // Longer than a connection is waited for (2 s): the worker sees it gone.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(postgres.pg_ctl_start(), "PostgreSQL did not start again");
    buying.await.unwrap();
    let sale = all_stored(&app, "phone", Duration::from_secs(20)).await;
    assert!(sale["orders"].as_u64().unwrap() > 100, "{sale}");
    assert_eq!(rows(&database, "phone").await, rows_of(&sale));
    let logs = worker.logs();
    assert_eq!(
        logs.matches("orders database unavailable").count(),
        1,
        "said once, not once a batch:\n{logs}"
    );
    assert!(logs.contains("orders database reachable again"), "{logs}");
    app.stop().await;
}

/// An entry that is no order is delivered `--max-deliveries` times, then
/// moved to the sale's dead letters; the orders around it are stored.
#[tokio::test]
async fn a_poison_entry_ends_in_the_dead_letters() {
    let redis = RedisServer::start_single().await;
    let (_dir, database) = sqlite();
    let app = TestApp::spawn_sale(&redis, &[]).await;
    app.reset_sale("phone", 100, 5).await;
    buy_many(&app, "phone", 2).await;
    let mut conn = redis.connection().await;
    let poison: String = conn
        .xadd(
            stream("phone"),
            "*",
            &[
                ("order_id", "bad-1"),
                ("user_id", "u-x"),
                ("quantity", "many"),
            ],
        )
        .await
        .unwrap();
    buy_many(&app, "phone", 2).await;
    let worker = Worker::spawn(&redis, &database, "solo", &["--max-deliveries", "3"]);
    let dead_lettered = eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        async move {
            conn.xlen::<_, usize>("lockgate:sale:{phone}:orders:dead")
                .await
                .unwrap_or(0)
                == 1
        }
    })
    .await;
    assert!(dead_lettered, "{}", worker.logs());
    let dead: redis::streams::StreamRangeReply = conn
        .xrange_all("lockgate:sale:{phone}:orders:dead")
        .await
        .unwrap();
    let letter = &dead.ids[0];
    assert_eq!(letter.get::<String>("id").as_deref(), Some(poison.as_str()));
    assert_eq!(letter.get::<String>("quantity").as_deref(), Some("many"));
    assert!(letter.get::<String>("reason").is_some());
    let sale = all_stored(&app, "phone", Duration::from_secs(10)).await;
    assert_eq!(rows(&database, "phone").await, rows_of(&sale));
    assert!(worker.logs().contains("moved to the dead letters"));
    app.stop().await;
}

/// Entries pending in a dead worker's hands whose stream entries were
/// trimmed away are counted and logged as lost when another worker claims
/// them, never dropped in silence.
#[tokio::test]
async fn a_trimmed_pending_entry_is_counted_as_lost() {
    let redis = RedisServer::start_single().await;
    let postgres = Postgres::start();
    let database = postgres.url();
    let app = TestApp::spawn_sale(&redis, &[]).await;
    app.reset_sale("phone", 100, 5).await;
    let mut first = Worker::spawn(&redis, &database, "first", &[]);
    let conn = redis.connection().await;
    read_while_postgres_is_frozen(&app, &conn, &postgres, &first, 3).await;
    first.kill();
    postgres.signal_all("-CONT");
    // An operator trims the stream with MAXLEN, pending entries and all.
    let mut conn = conn.clone();
    let _: usize = redis::cmd("XTRIM")
        .arg(stream("phone"))
        .arg("MAXLEN")
        .arg(0)
        .query_async(&mut conn)
        .await
        .unwrap();
    let second = Worker::spawn(&redis, &database, "second", &["--claim-idle-ms", "300"]);
    let counted = eventually(Duration::from_secs(10), || async {
        second.logs().contains("lost=3")
    })
    .await;
    assert!(counted, "{}", second.logs());
    assert_eq!(pending(&mut conn, "phone").await, 0);
    assert_eq!(rows(&database, "phone").await.rows, 0);
    app.stop().await;
}

/// A reset while orders of the old epoch are not yet stored keeps them
/// (the old stream is renamed and drained); both epochs end up stored, each
/// row with its epoch, and the drained stream is deleted.
#[tokio::test]
async fn a_reset_keeps_the_old_epochs_unstored_orders() {
    let redis = RedisServer::start().await;
    let (_dir, database) = sqlite();
    let app = TestApp::spawn_sale(&redis, &[]).await;
    app.reset_sale("phone", 100, 5).await;
    // A worker joins (creates the group) and stops: nothing reads now.
    let worker = Worker::spawn(&redis, &database, "solo", &[]);
    let joined = eventually(Duration::from_secs(10), || async {
        app.sale("phone").await["stored"] == 0
    })
    .await;
    assert!(joined, "{}", worker.logs());
    drop(worker);
    buy_many(&app, "phone", 5).await;
    let old_epoch_sold = app.sale("phone").await;
    assert_eq!(old_epoch_sold["pending"], 5);
    app.reset_sale("phone", 50, 5).await;
    buy_many(&app, "phone", 3).await;
    let worker = Worker::spawn(&redis, &database, "solo", &[]);
    let drained = eventually(Duration::from_secs(10), || async {
        app.sale("phone").await["pending"] == 0
    })
    .await;
    assert!(drained, "{}", worker.logs());
    let sale = app.sale("phone").await;
    assert_eq!(
        (&sale["orders"], &sale["stored"]),
        (&3.into(), &3.into()),
        "{sale}"
    );
    let both = eventually(Duration::from_secs(10), || async {
        rows(&database, "phone").await.rows == 8
    })
    .await;
    assert!(both, "{}", worker.logs());
    let reconciled = reconcile(&redis, &database);
    let report = String::from_utf8_lossy(&reconciled.stdout).into_owned();
    assert!(reconciled.status.success(), "{report}");
    let lines: Vec<&str> = report
        .lines()
        .filter(|line| line.starts_with("phone "))
        .collect();
    assert_eq!(lines.len(), 2, "a line per epoch: {report}");
    assert!(
        lines
            .iter()
            .any(|line| line.contains("rows=5") && line.ends_with("stored")),
        "{report}"
    );
    assert!(
        lines
            .iter()
            .any(|line| line.contains("rows=3") && line.ends_with("ok")),
        "{report}"
    );
    app.stop().await;
}

/// Waits until `worker` joined sale `phone` (its `stored` count is set),
/// freezes PostgreSQL (SIGSTOP), buys `count` units and waits until the
/// worker has read them all: they are pending in its hands, their insert
/// hanging on the frozen database.
async fn read_while_postgres_is_frozen(
    app: &TestApp,
    conn: &TestConnection,
    postgres: &Postgres,
    worker: &Worker,
    count: u64,
) {
    let joined = eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        async move {
            redis::cmd("HEXISTS")
                .arg("lockgate:sale:{phone}")
                .arg("stored")
                .query_async::<bool>(&mut conn)
                .await
                .unwrap_or(false)
        }
    })
    .await;
    assert!(joined, "the worker never joined:\n{}", worker.logs());
    // The migrations done (the table is there) before the freeze.
    let url = postgres.url();
    let migrated = eventually(Duration::from_secs(10), || table_exists(&url)).await;
    assert!(
        migrated,
        "the worker never made its table:\n{}",
        worker.logs()
    );
    // In its read loop, done with the database for now: its first read of
    // the stream made it a consumer of the group. (Frozen while it still
    // talked to the database, it would back off before reading anything.)
    let reading = eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        async move { reads_the_stream(&mut conn, "phone", &worker.consumer).await }
    })
    .await;
    assert!(
        reading,
        "the worker never read the stream:\n{}",
        worker.logs()
    );
    postgres.signal_all("-STOP");
    // All in the stream before the worker's next read, so that it reads
    // them in one batch: a batch it cannot store holds it (retried until
    // the database answers) before it reads more. Stopped meanwhile, the
    // worker cannot poll between two of them, however slow the machine.
    worker.signal("-STOP");
    let users: Vec<String> = (0..count).map(|n| format!("u-{n}")).collect();
    futures_util::future::join_all(users.iter().map(|user| app.bought("phone", user, 1, None)))
        .await;
    worker.signal("-CONT");
    let read = eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        async move { pending(&mut conn, "phone").await == count }
    })
    .await;
    assert!(
        read,
        "the worker did not read the orders:\n{}",
        worker.logs()
    );
}

/// Whether `consumer` has read sale `sku`'s stream (its group lists it).
async fn reads_the_stream(conn: &mut TestConnection, sku: &str, consumer: &str) -> bool {
    let consumers: Vec<redis::Value> = redis::cmd("XINFO")
        .arg("CONSUMERS")
        .arg(stream(sku))
        .arg("lockgate-orders")
        .query_async(conn)
        .await
        .unwrap_or_default();
    let wanted = redis::Value::BulkString(consumer.as_bytes().to_vec());
    consumers.iter().any(|entry| match entry {
        redis::Value::Array(fields) | redis::Value::Set(fields) => fields.contains(&wanted),
        redis::Value::Map(pairs) => pairs.iter().any(|(_, value)| *value == wanted),
        _ => false,
    })
}

/// Whether the orders table exists in the database at `url`.
async fn table_exists(url: &str) -> bool {
    sqlx::any::install_default_drivers();
    let Ok(pool) = sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
    else {
        return false;
    };
    let exists = sqlx::query("SELECT 1 FROM orders LIMIT 1")
        .fetch_optional(&pool)
        .await
        .is_ok();
    pool.close().await;
    exists
}

/// Entries of `sku`'s stream delivered and not yet acknowledged.
async fn pending(conn: &mut TestConnection, sku: &str) -> u64 {
    let summary: Vec<redis::Value> = redis::cmd("XPENDING")
        .arg(stream(sku))
        .arg("lockgate-orders")
        .query_async(conn)
        .await
        .unwrap_or_default();
    match summary.first() {
        Some(redis::Value::Int(count)) => *count as u64,
        _ => 0,
    }
}

/// A reset of a sale no worker has joined yet keeps its orders, once a
/// hand-off has worked on this Redis: the worker stores every epoch's when
/// it comes.
#[tokio::test]
async fn a_reset_before_any_worker_joined_the_sale_keeps_its_orders() {
    let redis = RedisServer::start().await;
    let (_dir, database) = sqlite();
    let app = TestApp::spawn_sale(&redis, &[]).await;
    // A worker has run here before (and is gone) ...
    app.reset_sale("earlier", 10, 5).await;
    let worker = Worker::spawn(&redis, &database, "solo", &[]);
    let joined = eventually(Duration::from_secs(10), || async {
        app.sale("earlier").await["stored"] == 0
    })
    .await;
    assert!(joined, "{}", worker.logs());
    drop(worker);
    // ... when a new sale sells and is reset twice.
    app.reset_sale("cam", 100, 5).await;
    buy_many(&app, "cam", 3).await;
    app.reset_sale("cam", 100, 5).await;
    buy_many(&app, "cam", 2).await;
    app.reset_sale("cam", 100, 5).await;
    buy_many(&app, "cam", 1).await;
    let worker = Worker::spawn(&redis, &database, "solo", &[]);
    let stored = eventually(Duration::from_secs(10), || async {
        rows(&database, "cam").await.rows == 6
    })
    .await;
    assert!(
        stored,
        "{:?}\n{}",
        rows(&database, "cam").await,
        worker.logs()
    );
    app.stop().await;
}

/// A SQLite file deleted under a running worker is a database gone: the
/// orders wait in Redis, unacknowledged, and the log says why.
#[tokio::test]
async fn a_deleted_sqlite_file_stores_nothing_and_acknowledges_nothing() {
    let redis = RedisServer::start_single().await;
    let (dir, database) = sqlite();
    let app = TestApp::spawn_sale(&redis, &["--orders-database", &database]).await;
    app.reset_sale("tv", 100, 5).await;
    buy_many(&app, "tv", 2).await;
    all_stored(&app, "tv", Duration::from_secs(10)).await;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    buy_many(&app, "tv", 3).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let sale = app.sale("tv").await;
    assert_eq!(
        (&sale["stored"], &sale["pending"]),
        (&2.into(), &3.into()),
        "{sale}"
    );
    app.stop().await;
}

/// A database that takes no row at all (read-only) is a database away, not
/// a batch of bad orders: nothing is dead-lettered, and the orders are
/// stored once a worker has a database that takes them.
#[tokio::test]
async fn a_read_only_database_dead_letters_nothing() {
    let redis = RedisServer::start_single().await;
    let (_dir, database) = sqlite();
    let app = TestApp::spawn_sale(&redis, &["--orders-database", &database]).await;
    app.reset_sale("tv", 100, 5).await;
    all_stored(&app, "tv", Duration::from_secs(10)).await;
    app.stop().await;
    let app = TestApp::spawn_sale(&redis, &[]).await;
    let read_only = Worker::spawn(
        &redis,
        &format!("{database}?mode=ro"),
        "solo",
        &["--max-deliveries", "2"],
    );
    buy_many(&app, "tv", 3).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut conn = redis.connection().await;
    let dead: usize = conn.xlen("lockgate:sale:{tv}:orders:dead").await.unwrap();
    assert_eq!(dead, 0, "{}", read_only.logs());
    assert!(
        read_only.logs().contains("orders database unavailable"),
        "{}",
        read_only.logs()
    );
    drop(read_only);
    let writable = Worker::spawn(&redis, &database, "solo", &[]);
    let sale = all_stored(&app, "tv", Duration::from_secs(10)).await;
    assert_eq!(
        rows(&database, "tv").await,
        rows_of(&sale),
        "{}",
        writable.logs()
    );
    app.stop().await;
}

/// Reconciling against a SQLite file that is not there says so, and makes
/// no file.
#[tokio::test]
async fn reconciling_a_missing_database_makes_no_file() {
    let redis = RedisServer::start_single().await;
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("typo.db");
    let reconciled = reconcile(&redis, &format!("sqlite://{}", missing.display()));
    assert_eq!(reconciled.status.code(), Some(2));
    assert!(!missing.exists());
}
