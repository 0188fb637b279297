//! A sale spread over segments: exact caps, idempotency and stock over every segment, no unit stranded in a segment, transfers a dead gateway left half done, the sold-out pushed to every instance, placement on distinct masters, and the orders of every segment.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use tokio::sync::Mutex;

use super::three_instances;
use crate::helpers::orders::{Worker, reconcile, rows};
use crate::helpers::{
    ADMIN, GatewayProcess, RedisServer, TestApp, TestConnection, assert_problem, command_calls,
    eventually, send_signal,
};

/// The segment a buyer buys in, as the gateway picks it: FNV-1a of the
/// user id, modulo the segments.
fn buyer_segment(user: &str, segments: usize) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in user.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % segments as u64) as usize
}

/// `count` user ids that all buy in segment `segment` of `segments`.
fn users_of_segment(segment: usize, segments: usize, count: usize) -> Vec<String> {
    (0..)
        .map(|n| format!("u-{n}"))
        .filter(|user| buyer_segment(user, segments) == segment)
        .take(count)
        .collect()
}

/// The Redis hash of each segment of `sku`, in order, as its first hash names them.
async fn segment_hashes(conn: &mut TestConnection, sku: &str) -> Vec<String> {
    let head = format!("lockgate:sale:{{{sku}}}");
    let tags: Option<String> = redis::cmd("HGET")
        .arg(&head)
        .arg("segment_tags")
        .query_async(conn)
        .await
        .unwrap();
    let mut hashes = vec![head];
    for tag in tags.iter().flat_map(|tags| tags.split(',')) {
        hashes.push(format!("lockgate:sale-segment:{{{sku}#{tag}}}"));
    }
    hashes
}

/// Each segment's (stock, sold, moving), straight from Redis.
async fn segment_counts(redis: &RedisServer, sku: &str) -> Vec<(u64, u64, u64)> {
    let mut conn = redis.connection().await;
    let mut counts = Vec::new();
    for hash in segment_hashes(&mut conn, sku).await {
        let (stock, sold, moving): (u64, u64, Option<u64>) = redis::cmd("HMGET")
            .arg(&hash)
            .arg(&["stock", "sold", "moving"])
            .query_async(&mut conn)
            .await
            .unwrap();
        counts.push((stock, sold, moving.unwrap_or(0)));
    }
    counts
}

/// The sale's epoch.
async fn epoch(redis: &RedisServer, sku: &str) -> u64 {
    redis::cmd("HGET")
        .arg(format!("lockgate:sale:{{{sku}}}"))
        .arg("epoch")
        .query_async(&mut redis.connection().await)
        .await
        .unwrap()
}

/// Runs one of the transfer's scripts (`segment_give.lua`, ...) on the
/// segment hash `hash`, as a gateway does: what a gateway that died
/// after it left behind.
async fn run_transfer_step(
    redis: &RedisServer,
    source: &str,
    hash: &str,
    record: &str,
    args: &[String],
) -> Vec<Value> {
    let script = redis::Script::new(source);
    let mut invocation = script.prepare_invoke();
    invocation.key(hash).key(format!("{hash}:{record}"));
    for arg in args {
        invocation.arg(arg);
    }
    let reply: redis::Value = invocation
        .invoke_async(&mut redis.connection().await)
        .await
        .unwrap();
    match reply {
        redis::Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                redis::Value::Int(n) => Value::from(n),
                other => Value::from(redis::from_redis_value::<String>(other).unwrap()),
            })
            .collect(),
        other => panic!("unexpected reply {other:?}"),
    }
}

const GIVE: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/segment_give.lua"));
const TAKE: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/segment_take.lua"));

/// Buys one unit at a time for each of `users` (once each) until the sale
/// is sold out; returns the units bought.
async fn buy_until_sold_out(app: &TestApp, sku: &str, users: &[String]) -> u64 {
    let mut bought = 0;
    for user in users {
        let response = app.buy(sku, user, 1, None).await;
        match response.status() {
            StatusCode::CREATED => bought += 1,
            StatusCode::CONFLICT => {
                let problem: Value = response.json().await.unwrap();
                assert_eq!(problem["type"], "/problems/sold-out", "{problem}");
            }
            other => panic!("unexpected {other}"),
        }
    }
    bought
}

/// The orders answered 201 (order id -> user, quantity), and the order id
/// of each Idempotency-Key.
type Created = (HashMap<String, (String, u64)>, HashMap<String, String>);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segmented_sale_on_three_instances_sells_exactly_its_stock_within_every_cap() {
    const STOCK: u64 = 240;
    const LIMIT: u64 = 2;
    const USERS: u64 = 200;
    let redis = RedisServer::start().await;
    let apps = three_instances(&redis).await;
    let sale = apps[0].reset_segmented_sale("hot", STOCK, LIMIT, 3).await;
    assert_eq!(
        (sale["segments"].as_u64(), sale["stock"].as_u64()),
        (Some(3), Some(STOCK))
    );

    // Every user tries three single units and one pair, each attempt sent
    // twice with its Idempotency-Key, spread over the instances.
    let seen: Arc<Mutex<Created>> = Arc::default();
    let mut tasks = Vec::new();
    for client in 0..16u64 {
        let (apps, seen) = (apps.clone(), seen.clone());
        tasks.push(tokio::spawn(async move {
            for user in (client..USERS).step_by(16) {
                let user = format!("buyer-{user}");
                for attempt in 0..4u64 {
                    let quantity = if attempt == 3 { 2 } else { 1 };
                    let key = format!("{user}-{attempt}");
                    for send in 0..2u64 {
                        let app = &apps[((attempt + send) % 3) as usize];
                        let response = app.buy("hot", &user, quantity, Some(&key)).await;
                        let status = response.status();
                        let body: Value = response.json().await.unwrap();
                        let mut seen = seen.lock().await;
                        match status {
                            StatusCode::CREATED => {
                                let id = body["order_id"].as_str().unwrap().to_owned();
                                assert!(
                                    seen.0
                                        .insert(id.clone(), (user.clone(), quantity))
                                        .is_none(),
                                    "an order id was created twice"
                                );
                                seen.1.insert(key.clone(), id);
                            }
                            StatusCode::OK => assert_eq!(
                                seen.1.get(&key).map(String::as_str),
                                body["order_id"].as_str(),
                                "a replay answered another order"
                            ),
                            StatusCode::CONFLICT => {
                                let slug = body["type"].as_str().unwrap();
                                assert!(
                                    ["/problems/sold-out", "/problems/limit-exceeded"]
                                        .contains(&slug),
                                    "{body}"
                                );
                            }
                            other => panic!("unexpected {other}: {body}"),
                        }
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }

    let (created, _) = &*seen.lock().await;
    let sold: u64 = created.values().map(|(_, quantity)| quantity).sum();
    let mut per_user: HashMap<&str, u64> = HashMap::new();
    for (user, quantity) in created.values() {
        *per_user.entry(user).or_default() += quantity;
    }
    assert!(
        per_user.values().all(|total| *total <= LIMIT),
        "a cap was exceeded"
    );
    // 200 users asking for up to 2 each want 400 > 240: everything sells.
    assert_eq!(sold, STOCK, "the created orders do not add up to the stock");
    let sale = apps[1].sale("hot").await;
    assert_eq!(
        (
            sale["sold"].as_u64(),
            sale["stock"].as_u64(),
            sale["orders"].as_u64()
        ),
        (Some(STOCK), Some(0), Some(created.len() as u64)),
        "{sale}"
    );
    let listed = apps[2].orders("hot").await;
    let listed: HashSet<&str> = listed
        .iter()
        .map(|o| o["order_id"].as_str().unwrap())
        .collect();
    let created_ids: HashSet<&str> = created.keys().map(String::as_str).collect();
    assert_eq!(
        listed, created_ids,
        "the listing is not every segment's orders"
    );
    let counts = segment_counts(&redis, "hot").await;
    assert_eq!(counts.len(), 3);
    assert!(
        counts
            .iter()
            .all(|(stock, _, moving)| *stock == 0 && *moving == 0),
        "{counts:?}"
    );
    assert_eq!(counts.iter().map(|(_, sold, _)| sold).sum::<u64>(), STOCK);
}

#[tokio::test]
async fn buyers_of_one_segment_alone_buy_every_unit_of_the_others() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_sale(
        &redis,
        &["--seckill-rate", "10000", "--seckill-burst", "10000"],
    )
    .await;
    app.reset_segmented_sale("dry", 30, 1, 3).await;
    // Segment 2 holds a third of the stock; its buyers alone ask for more
    // than the whole sale has.
    let users = users_of_segment(2, 3, 40);
    let bought = buy_until_sold_out(&app, "dry", &users).await;
    assert_eq!(bought, 30, "units stayed stranded in other segments");
    let sale = app.sale("dry").await;
    assert_eq!(
        (sale["sold"].as_u64(), sale["stock"].as_u64()),
        (Some(30), Some(0))
    );
    let counts = segment_counts(&redis, "dry").await;
    assert_eq!(
        counts[2].1, 30,
        "every unit sold in the buyers' segment: {counts:?}"
    );
    assert!(
        counts
            .iter()
            .all(|(stock, _, moving)| *stock == 0 && *moving == 0),
        "{counts:?}"
    );
    // One user's orders are listed from that user's segment.
    let mine = app
        .get(&format!("/seckill/dry/orders?user_id={}", users[0]))
        .await;
    let mine: Value = mine.json().await.unwrap();
    assert_eq!(mine["orders"].as_array().map(Vec::len), Some(1), "{mine}");
}

#[tokio::test]
async fn a_transfer_whose_gateway_died_after_sending_is_finished_and_loses_no_unit() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_sale(
        &redis,
        &["--seckill-rate", "10000", "--seckill-burst", "10000"],
    )
    .await;
    app.reset_segmented_sale("torn", 30, 1, 3).await;
    // The gateway serves the sale (and so sweeps it) once it bought there.
    app.bought("torn", &users_of_segment(0, 3, 1)[0], 1, None)
        .await;
    let epoch = epoch(&redis, "torn").await;
    let mut conn = redis.connection().await;
    let hashes = segment_hashes(&mut conn, "torn").await;
    // Segment 1 sends 6 units to segment 0; the second half never runs.
    let sent = run_transfer_step(
        &redis,
        GIVE,
        &hashes[1],
        "moving-out",
        &[
            "torn-transfer".into(),
            "6".into(),
            "0".into(),
            epoch.to_string(),
        ],
    )
    .await;
    assert_eq!(
        sent,
        vec![Value::from("sent"), Value::from("units"), Value::from(6)]
    );
    assert_eq!(segment_counts(&redis, "torn").await[1], (4, 0, 6));
    // Still for sale while it moves.
    assert_eq!(app.sale("torn").await["stock"], 29);

    let settled = eventually(Duration::from_secs(5), || async {
        let counts = segment_counts(&redis, "torn").await;
        counts[1].2 == 0
    })
    .await;
    assert!(settled, "the half-done transfer was never finished");
    let counts = segment_counts(&redis, "torn").await;
    // Segment 0: its 10, one sold, six received.
    assert_eq!(counts[0], (15, 1, 0), "{counts:?}");
    assert_eq!(
        counts
            .iter()
            .map(|(stock, sold, _)| stock + sold)
            .sum::<u64>(),
        30
    );
    let users = users_of_segment(1, 3, 40);
    assert_eq!(buy_until_sold_out(&app, "torn", &users).await, 29);
    assert_eq!(app.sale("torn").await["sold"], 30);
}

#[tokio::test]
async fn a_transfer_whose_gateway_died_after_the_receiver_took_it_counts_no_unit_twice() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_sale(
        &redis,
        &["--seckill-rate", "10000", "--seckill-burst", "10000"],
    )
    .await;
    app.reset_segmented_sale("twice", 12, 1, 2).await;
    let epoch = epoch(&redis, "twice").await.to_string();
    let mut conn = redis.connection().await;
    let hashes = segment_hashes(&mut conn, "twice").await;
    let id = "twice-transfer".to_owned();
    run_transfer_step(
        &redis,
        GIVE,
        &hashes[0],
        "moving-out",
        &[id.clone(), "4".into(), "1".into(), epoch.clone()],
    )
    .await;
    // The receiver takes it, and a retry of the same take adds nothing.
    for _ in 0..2 {
        let taken = run_transfer_step(
            &redis,
            TAKE,
            &hashes[1],
            "moved-in",
            &[id.clone(), "4".into(), epoch.clone()],
        )
        .await;
        assert_eq!(taken, vec![Value::from("taken")]);
    }
    assert_eq!(
        segment_counts(&redis, "twice").await,
        vec![(2, 0, 4), (10, 0, 0)]
    );
    // Every unit sells exactly once: buyers of segment 0 pull from 1, the
    // torn transfer settled on the way.
    let users = users_of_segment(0, 2, 20);
    assert_eq!(buy_until_sold_out(&app, "twice", &users).await, 12);
    let counts = segment_counts(&redis, "twice").await;
    assert!(
        counts
            .iter()
            .all(|(stock, _, moving)| *stock == 0 && *moving == 0),
        "{counts:?}"
    );
    assert_eq!(app.sale("twice").await["sold"], 12);
}

#[tokio::test]
async fn the_last_unit_sold_tells_every_instance_and_none_asks_redis_again() {
    let redis = RedisServer::start().await;
    let apps = three_instances(&redis).await;
    apps[0].reset_segmented_sale("gone", 4, 1, 2).await;
    // Every instance serves the sale before it sells out.
    for (app, user) in apps.iter().zip(["a", "b", "c"]) {
        app.bought("gone", user, 1, None).await;
    }
    apps[0].bought("gone", "d", 1, None).await;
    // The other instances are told (a generous bound: the push takes a few
    // ms), and their first purchase after that asks Redis nothing.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = purchase_calls(&redis).await;
    for app in &apps[1..] {
        assert_problem(app.buy("gone", "late", 1, None).await, 409, "sold-out").await;
    }
    assert_eq!(
        purchase_calls(&redis).await,
        before,
        "an instance was not told the sale sold out"
    );
    let sale = apps[2].reset_segmented_sale("gone", 1, 1, 2).await;
    assert_eq!(sale["stock"], 1);
    let bought = eventually(Duration::from_secs(2), || async {
        apps[1].buy("gone", "new", 1, None).await.status() == StatusCode::CREATED
    })
    .await;
    assert!(bought, "an instance still answers sold out after the reset");
}

/// The scripts and functions Redis ran (a purchase's rate check, user
/// lock and purchase script): not the background reads beside them (the
/// sweep of transfers, the refusal counts).
async fn purchase_calls(redis: &RedisServer) -> u64 {
    command_calls(redis)
        .await
        .iter()
        .filter(|(name, _)| name.starts_with("evalsha") || name.starts_with("fcall"))
        .map(|(_, calls)| calls)
        .sum()
}

/// Which master (by address) serves each segment of `sku`.
async fn masters_of_segments(redis: &RedisServer, sku: &str) -> Vec<u16> {
    let mut conn = redis.connection().await;
    let hashes = segment_hashes(&mut conn, sku).await;
    let mut node = redis.node(0).connection().await;
    let owned: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut node)
        .await
        .unwrap();
    let mut masters = Vec::new();
    for hash in hashes {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&hash)
            .query_async(&mut node)
            .await
            .unwrap();
        let port = owned.iter().find_map(|range| {
            let start: u16 = redis::from_redis_value(range[0].clone()).ok()?;
            let end: u16 = redis::from_redis_value(range[1].clone()).ok()?;
            let master: Vec<redis::Value> = redis::from_redis_value(range[2].clone()).ok()?;
            let port: u16 = redis::from_redis_value(master[1].clone()).ok()?;
            (start..=end).contains(&slot).then_some(port)
        });
        masters.push(port.expect("a master serves the slot"));
    }
    masters
}

#[tokio::test]
async fn segments_land_on_distinct_masters_of_a_cluster() {
    let redis = RedisServer::cluster(3).await;
    let app = TestApp::spawn_sale(&redis, &[]).await;
    for sku in ["tv", "radio", "camera"] {
        app.reset_segmented_sale(sku, 100, 1, 3).await;
        let masters = masters_of_segments(&redis, sku).await;
        let distinct: HashSet<u16> = masters.iter().copied().collect();
        assert_eq!(distinct.len(), 3, "{sku}: segments on {masters:?}");
    }
    app.reset_segmented_sale("tv", 100, 1, 6).await;
    let mut per_master: HashMap<u16, usize> = HashMap::new();
    for master in masters_of_segments(&redis, "tv").await {
        *per_master.entry(master).or_default() += 1;
    }
    assert_eq!(
        per_master.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2],
        "{per_master:?}"
    );
}

#[tokio::test]
async fn a_reset_to_other_segments_starts_clean_and_every_order_reaches_the_database_once() {
    let redis = RedisServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("orders.db").display());
    let app = TestApp::spawn_sale(
        &redis,
        &["--seckill-rate", "10000", "--seckill-burst", "10000"],
    )
    .await;
    let _worker = Worker::spawn(&redis, &database, "w1", &[]);
    app.reset_segmented_sale("multi", 40, 1, 3).await;
    let users: Vec<String> = (0..25).map(|n| format!("u-{n}")).collect();
    assert_eq!(buy_until_sold_out(&app, "multi", &users).await, 25);
    // Every segment's orders are stored, once.
    let stored = eventually(Duration::from_secs(10), || async {
        let sale = app.sale("multi").await;
        sale["stored"] == 25 && sale["pending"] == 0
    })
    .await;
    assert!(
        stored,
        "not every segment's orders were stored: {}",
        app.sale("multi").await
    );
    let held = rows(&database, "multi").await;
    assert_eq!((held.rows, held.distinct, held.units), (25, 25, 25));
    let checked = reconcile(&redis, &database);
    let text = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.status.success(), "{text}");
    assert!(
        text.contains("multi epoch=") && text.contains("sold=25 orders=25 rows=25 units=25"),
        "{text}"
    );

    // Down to one segment, then up to two: each sale starts clean.
    let sale = app.reset_segmented_sale("multi", 5, 1, 1).await;
    assert_eq!(
        (sale["segments"].as_u64(), sale["sold"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(buy_until_sold_out(&app, "multi", &users).await, 5);
    app.reset_segmented_sale("multi", 7, 1, 2).await;
    assert_eq!(buy_until_sold_out(&app, "multi", &users).await, 7);
    let sale = app.sale("multi").await;
    assert_eq!(
        (
            sale["segments"].as_u64(),
            sale["sold"].as_u64(),
            sale["orders"].as_u64()
        ),
        (Some(2), Some(7), Some(7))
    );
    assert_eq!(
        app.orders("multi").await.len(),
        7,
        "an old sale's orders are listed"
    );
    let stored = eventually(Duration::from_secs(10), || async {
        rows(&database, "multi").await.rows == 37
    })
    .await;
    assert!(stored, "the later sales' orders were not all stored");
    let checked = eventually(Duration::from_secs(10), || async {
        reconcile(&redis, &database).status.success()
    })
    .await;
    assert!(
        checked,
        "{}",
        String::from_utf8_lossy(&reconcile(&redis, &database).stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_killed_while_stock_moves_leaves_every_unit_for_sale() {
    const STOCK: u64 = 300;
    let redis = RedisServer::start().await;
    let flags = [
        "--admin-token",
        ADMIN,
        "--seckill-rate",
        "100000",
        "--seckill-burst",
        "100000",
    ];
    let mut doomed = GatewayProcess::spawn(&redis, &flags, &[]).await;
    let survivor = GatewayProcess::spawn(&redis, &flags, &[]).await;
    let reset = survivor
        .http
        .put(survivor.url("/seckill/storm"))
        .bearer_auth(ADMIN)
        .json(&serde_json::json!({"stock": STOCK, "per_user_limit": 1, "segments": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(reset.status(), StatusCode::OK);
    // The doomed gateway's buyers all buy in segment 0, so it keeps moving
    // stock there; it is killed in the middle of that.
    let buyers = users_of_segment(0, 3, 400);
    let doomed_url = doomed.url("/seckill/storm/orders");
    let client = doomed.http.clone();
    let progress = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let answered = progress.clone();
    let storm = tokio::spawn(async move {
        let mut sent = 0;
        for chunk in buyers.chunks(8) {
            let requests = chunk.iter().map(|user| {
                client
                    .post(&doomed_url)
                    .json(&serde_json::json!({"user_id": user, "quantity": 1}))
                    .send()
            });
            if futures_util::future::join_all(requests)
                .await
                .iter()
                .any(Result::is_err)
            {
                break;
            }
            sent += chunk.len();
            answered.store(sent, std::sync::atomic::Ordering::Relaxed);
        }
        sent
    });
    // Segment 0 holds a third of the stock: past it, every purchase there
    // first moves stock over from another segment. Killed among those.
    let moving = crate::helpers::eventually(Duration::from_secs(30), || async {
        progress.load(std::sync::atomic::Ordering::Relaxed) >= 120
    })
    .await;
    assert!(
        moving,
        "the doomed gateway's buyers never got past segment 0's stock"
    );
    send_signal(doomed.child.id(), "-KILL");
    let _ = doomed.child.wait();
    let sent = storm.await.unwrap();
    assert!(
        sent < 300,
        "the gateway died too late to matter ({sent} sent)"
    );

    // The survivor's buyers (of every segment) buy what is left: all of it.
    let users: Vec<String> = (0..600).map(|n| format!("late-{n}")).collect();
    let mut bought = 0u64;
    for user in &users {
        let response = survivor
            .http
            .post(survivor.url("/seckill/storm/orders"))
            .json(&serde_json::json!({"user_id": user, "quantity": 1}))
            .send()
            .await
            .unwrap();
        match response.status() {
            StatusCode::CREATED => bought += 1,
            StatusCode::CONFLICT => break,
            other => panic!("unexpected {other}"),
        }
    }
    let sale: Value = survivor
        .http
        .get(survivor.url("/seckill/storm"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (sale["sold"].as_u64(), sale["stock"].as_u64()),
        (Some(STOCK), Some(0)),
        "{sale}"
    );
    assert!(bought > 0);
    let counts = segment_counts(&redis, "storm").await;
    assert!(
        counts
            .iter()
            .all(|(stock, _, moving)| *stock == 0 && *moving == 0),
        "{counts:?}"
    );
    assert_eq!(counts.iter().map(|(_, sold, _)| sold).sum::<u64>(), STOCK);
}
