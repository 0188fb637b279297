//! The flash sale across several gateway instances: no oversell, caps, idempotency, rate limits, resets, and the lock it runs under.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::sync::Mutex;

mod segments;

use crate::helpers::{
    ADMIN, Case, RedisServer, TestApp, assert_problem, case, command_calls, eventually,
};

/// Three instances on one Redis, with rate limits out of the way.
async fn three_instances(redis: &RedisServer) -> Vec<Arc<TestApp>> {
    let mut apps = Vec::new();
    for _ in 0..3 {
        apps.push(Arc::new(
            TestApp::spawn_sale(
                redis,
                &["--seckill-rate", "10000", "--seckill-burst", "10000"],
            )
            .await,
        ));
    }
    apps
}

/// Redis's count of the data commands it has run (every node's, in a cluster):
/// not the connection and cluster housekeeping this test's own connection
/// (and the cluster client) cause.
async fn redis_commands(redis: &RedisServer) -> u64 {
    let housekeeping = ["info", "hello", "ping"];
    command_calls(redis)
        .await
        .iter()
        .filter(|(name, _)| !housekeeping.contains(&name.as_str()))
        .filter(|(name, _)| !name.starts_with("cluster") && !name.starts_with("client"))
        .map(|(_, calls)| calls)
        .sum()
}

/// What a client saw, for checking against the sale afterwards.
#[derive(Default)]
struct Seen {
    /// order_id -> (user, quantity), from every 201.
    created: HashMap<String, (String, u64)>,
    /// Idempotency-Key -> (order_id, user, quantity) of each 201, for replays.
    by_key: HashMap<String, (String, String, u64)>,
    replays: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_thousand_attempts_on_three_instances_sell_exactly_the_stock() {
    const USERS: u64 = 500;
    const ATTEMPTS: u64 = 3_000;
    const CLIENTS: u64 = 64;
    let redis = RedisServer::start().await;
    let apps = three_instances(&redis).await;
    apps[0].reset_sale("phone", 100, 2).await;

    let seen = Arc::new(Mutex::new(Seen::default()));
    let running = Arc::new(AtomicBool::new(true));
    // Samples the sale throughout: the invariant must hold at every moment.
    let sampler = {
        let (app, running) = (apps[1].clone(), running.clone());
        tokio::spawn(async move {
            let mut samples = 0;
            while running.load(Ordering::Relaxed) {
                let sale = app.sale("phone").await;
                let (stock, sold) = (
                    sale["stock"].as_i64().unwrap(),
                    sale["sold"].as_i64().unwrap(),
                );
                assert!(stock >= 0, "{sale}");
                assert_eq!(stock + sold, 100, "{sale}");
                samples += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            samples
        })
    };
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (apps, seen) = (apps.clone(), seen.clone());
            tokio::spawn(async move {
                let mut mine: Vec<(String, String, String, u64)> = Vec::new();
                for attempt in (client..ATTEMPTS).step_by(CLIENTS as usize) {
                    let app = &apps[(attempt % 3) as usize];
                    // Every fifth attempt replays one of this client's orders.
                    if attempt % 5 == 4 && !mine.is_empty() {
                        let (key, order_id, user, quantity) =
                            &mine[(attempt as usize) % mine.len()];
                        let response = app.buy("phone", user, *quantity, Some(key)).await;
                        assert_eq!(response.status(), StatusCode::OK, "a replay bought again");
                        let body: Value = response.json().await.unwrap();
                        assert_eq!(
                            &body["order_id"],
                            order_id.as_str(),
                            "a replay got another order"
                        );
                        seen.lock().await.replays += 1;
                        continue;
                    }
                    let user = format!("user-{}", (attempt * 7919) % USERS);
                    let quantity = 1 + attempt % 2;
                    let key = format!("attempt-{attempt}");
                    let response = app.buy("phone", &user, quantity, Some(&key)).await;
                    match response.status() {
                        StatusCode::CREATED => {
                            let body: Value = response.json().await.unwrap();
                            let order_id = body["order_id"].as_str().unwrap().to_owned();
                            let mut seen = seen.lock().await;
                            seen.created
                                .insert(order_id.clone(), (user.clone(), quantity));
                            seen.by_key
                                .insert(key.clone(), (order_id.clone(), user.clone(), quantity));
                            mine.push((key, order_id, user, quantity));
                        }
                        StatusCode::CONFLICT => {
                            let body: Value = response.json().await.unwrap();
                            let slug = body["type"].as_str().unwrap();
                            assert!(
                                ["/problems/sold-out", "/problems/limit-exceeded"].contains(&slug),
                                "{body}"
                            );
                        }
                        other => panic!("unexpected {other}: {}", response.text().await.unwrap()),
                    }
                }
            })
        })
        .collect();
    for client in clients {
        client.await.unwrap();
    }
    running.store(false, Ordering::Relaxed);
    assert!(sampler.await.unwrap() > 0);

    let seen = seen.lock().await;
    let sale = apps[2].sale("phone").await;
    assert_eq!(
        (sale["sold"].as_u64(), sale["stock"].as_u64()),
        (Some(100), Some(0)),
        "{sale}"
    );
    let orders = apps[0].orders("phone").await;
    let recorded: HashMap<String, (String, u64)> = orders
        .iter()
        .map(|order| {
            (
                order["order_id"].as_str().unwrap().to_owned(),
                (
                    order["user_id"].as_str().unwrap().to_owned(),
                    order["quantity"].as_u64().unwrap(),
                ),
            )
        })
        .collect();
    assert_eq!(
        recorded.len(),
        orders.len(),
        "an order id was recorded twice"
    );
    assert_eq!(recorded, seen.created, "the stream and the 201s disagree");
    assert_eq!(
        recorded.values().map(|(_, quantity)| quantity).sum::<u64>(),
        100
    );
    let mut per_user: HashMap<&str, u64> = HashMap::new();
    for (user, quantity) in recorded.values() {
        *per_user.entry(user).or_default() += quantity;
    }
    assert!(per_user.values().all(|bought| *bought <= 2), "{per_user:?}");
    assert!(seen.replays > 100, "only {} replays", seen.replays);
}

#[tokio::test]
async fn twenty_simultaneous_purchases_by_one_user_buy_exactly_the_cap() {
    let redis = RedisServer::start().await;
    let apps = three_instances(&redis).await;
    apps[0].reset_sale("lamp", 100, 2).await;

    let attempts: Vec<_> = (0..20)
        .map(|attempt| {
            let app = apps[attempt % 3].clone();
            tokio::spawn(async move { app.buy("lamp", "eager", 1, None).await.status() })
        })
        .collect();
    let mut statuses = Vec::new();
    for attempt in attempts {
        statuses.push(attempt.await.unwrap());
    }

    let bought = statuses
        .iter()
        .filter(|status| **status == StatusCode::CREATED)
        .count();
    assert_eq!(bought, 2, "{statuses:?}");
    assert!(
        statuses
            .iter()
            .all(|s| [StatusCode::CREATED, StatusCode::CONFLICT].contains(s))
    );
    assert_eq!(apps[0].sale("lamp").await["sold"], 2);
}

#[tokio::test]
async fn the_rate_limit_holds_across_instances_and_only_for_that_user() {
    let redis = RedisServer::start().await;
    let flags = ["--seckill-rate", "2", "--seckill-burst", "5"];
    let apps = [
        TestApp::spawn_sale(&redis, &flags).await,
        TestApp::spawn_sale(&redis, &flags).await,
        TestApp::spawn_sale(&redis, &flags).await,
    ];
    apps[0].reset_sale("book", 1_000, 1_000).await;

    let mut statuses = Vec::new();
    let mut refused = None;
    for attempt in 0..9 {
        let response = apps[attempt % 3].buy("book", "hasty", 1, None).await;
        statuses.push(response.status());
        assert_eq!(
            response.headers()["ratelimit-policy"],
            "\"seckill\";q=5;w=3"
        );
        if response.status() == StatusCode::TOO_MANY_REQUESTS && refused.is_none() {
            refused = Some(response);
        }
    }
    assert_eq!(&statuses[..5], &[StatusCode::CREATED; 5], "{statuses:?}");
    assert!(
        statuses[5..]
            .iter()
            .all(|s| *s == StatusCode::TOO_MANY_REQUESTS),
        "{statuses:?}"
    );

    let refused = refused.unwrap();
    let retry_after: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=3).contains(&retry_after), "Retry-After {retry_after}");
    let limit = refused.headers()["ratelimit"].to_str().unwrap().to_owned();
    let (remaining, reset) = parse_rate_limit(&limit);
    assert_eq!(remaining, 0, "{limit}");
    assert!((1..=3).contains(&reset), "{limit}");
    let body = assert_problem(refused, 429, "rate-limited").await;
    assert!(body["retry_after_ms"].as_u64().unwrap() <= 1_000, "{body}");

    let other = apps[1].buy("book", "patient", 1, None).await;
    assert_eq!(other.status(), StatusCode::CREATED);
    let (remaining, _) = parse_rate_limit(other.headers()["ratelimit"].to_str().unwrap());
    assert_eq!(remaining, 4);

    tokio::time::sleep(Duration::from_secs(retry_after)).await;
    assert_eq!(
        apps[2].buy("book", "hasty", 1, None).await.status(),
        StatusCode::CREATED
    );
    assert_eq!(apps[0].sale("book").await["sold"], 7);
}

/// `"seckill";r=<remaining>;t=<seconds>` -> (remaining, seconds).
fn parse_rate_limit(header: &str) -> (u64, u64) {
    let field = |name: &str| -> u64 {
        header
            .split(';')
            .find_map(|part| part.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name} in {header}"))
            .parse()
            .unwrap()
    };
    assert!(header.starts_with("\"seckill\";"), "{header}");
    (field("r"), field("t"))
}

#[tokio::test]
async fn a_sold_out_sale_answers_from_memory_until_a_reset_on_any_instance() {
    let redis = RedisServer::start().await;
    let apps = three_instances(&redis).await;
    apps[0].reset_sale("ticket", 1, 1).await;
    assert_eq!(
        apps[0].buy("ticket", "first", 1, None).await.status(),
        StatusCode::CREATED
    );
    for app in &apps[1..] {
        assert_problem(app.buy("ticket", "late", 1, None).await, 409, "sold-out").await;
    }

    // Every instance now knows: a purchase without an Idempotency-Key runs
    // no Redis command at all.
    let before = redis_commands(&redis).await;
    for app in &apps {
        assert_problem(app.buy("ticket", "later", 1, None).await, 409, "sold-out").await;
    }
    assert_eq!(
        redis_commands(&redis).await,
        before,
        "a sold-out purchase touched Redis"
    );

    let sale = apps[2].reset_sale("ticket", 3, 1).await;
    assert_eq!(sale["stock"], 3);
    for (app, user) in apps.iter().zip(["a", "b", "c"]) {
        let bought = eventually(Duration::from_secs(2), || async {
            app.buy("ticket", user, 1, None).await.status() == StatusCode::CREATED
        })
        .await;
        assert!(bought, "an instance still answers sold out after the reset");
    }
    let sale = apps[0].sale("ticket").await;
    assert_eq!(
        (sale["sold"].as_u64(), sale["initial_stock"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(
        apps[1].orders("ticket").await.len(),
        3,
        "old orders survived the reset"
    );
}

/// Two instances that have both learned that `sku` (created twice, stock
/// 1) sold out; then every key in Redis is lost.
async fn sold_out_then_flushed(redis: &RedisServer, sku: &str) -> Vec<Arc<TestApp>> {
    let apps: Vec<_> = three_instances(redis).await.into_iter().take(2).collect();
    apps[0].reset_sale(sku, 1, 1).await;
    apps[0].reset_sale(sku, 1, 1).await;
    apps[0].bought(sku, "first", 1, None).await;
    for app in &apps {
        assert_problem(app.buy(sku, "late", 1, None).await, 409, "sold-out").await;
    }
    let () = redis::cmd("FLUSHALL")
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
    apps
}

#[tokio::test]
async fn a_sale_created_again_after_its_keys_were_lost_sells_on_every_instance_at_once() {
    let redis = RedisServer::start_single().await;
    let apps = sold_out_then_flushed(&redis, "lamp").await;

    let sale = apps[1].reset_sale("lamp", 10, 5).await;

    assert_eq!(sale["stock"], 10);
    for (app, user) in apps.iter().zip(["a", "b"]) {
        // Sooner than a sold-out flag would lapse by itself: the reset cleared it.
        let bought = eventually(Duration::from_secs(1), || async {
            app.buy("lamp", user, 1, None).await.status() == StatusCode::CREATED
        })
        .await;
        assert!(
            bought,
            "{user}: still sold out after the sale was created again"
        );
    }
}

#[tokio::test]
async fn a_sale_whose_keys_were_lost_is_not_refused_from_memory_for_long() {
    let redis = RedisServer::start_single().await;
    let apps = sold_out_then_flushed(&redis, "vase").await;

    for app in &apps {
        let gone = eventually(Duration::from_secs(6), || async {
            app.buy("vase", "b", 1, None).await.status() == StatusCode::NOT_FOUND
        })
        .await;
        assert!(
            gone,
            "a sale that no longer exists is still answered sold out"
        );
    }
}

#[tokio::test]
async fn a_replay_after_the_sale_sold_out_still_returns_the_original_order() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_sale(&redis, &[]).await;
    app.reset_sale("watch", 1, 1).await;
    let first = app.bought("watch", "w", 1, Some("key-1")).await;
    assert_problem(
        app.buy("watch", "x", 1, Some("key-2")).await,
        409,
        "sold-out",
    )
    .await;

    let replay = app.buy("watch", "w", 1, Some("key-1")).await;
    assert_eq!(replay.status(), StatusCode::OK);
    let replayed: Value = replay.json().await.unwrap();
    assert_eq!(replayed, first);
    assert_problem(
        app.buy("watch", "w", 2, Some("key-1")).await,
        422,
        "idempotency-key-reused",
    )
    .await;
}

#[tokio::test]
async fn a_reset_clears_the_old_sales_orders_counts_and_keys() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_sale(&redis, &[]).await;
    app.reset_sale("bike", 10, 1).await;
    let old = app.bought("bike", "rider", 1, Some("ride-1")).await;
    assert_problem(
        app.buy("bike", "rider", 1, None).await,
        409,
        "limit-exceeded",
    )
    .await;

    app.reset_sale("bike", 5, 1).await;

    // The key is free again: the same request is a new purchase.
    let again = app.buy("bike", "rider", 1, Some("ride-1")).await;
    assert_eq!(again.status(), StatusCode::CREATED);
    let new: Value = again.json().await.unwrap();
    assert_ne!(new["order_id"], old["order_id"]);
    assert_eq!(new["stock_left"], 4);
    let orders = app.orders("bike").await;
    assert_eq!(orders.len(), 1);
    let mine: Value = app
        .get("/seckill/bike/orders?user_id=rider")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(mine["orders"].as_array().unwrap().len(), 1);
}

/// Where the sale keeps its own locks, apart from those of `/locks`.
const SALE_LOCKS: &str = "lockgate:internal:";

#[tokio::test]
async fn a_purchase_waits_for_its_users_lock_and_proceeds_when_it_is_released() {
    let redis = RedisServer::start().await;
    let app = Arc::new(TestApp::spawn_sale(&redis, &[]).await);
    app.reset_sale("desk", 10, 5).await;
    // As a purchase of ada's on another instance would hold it.
    let held = redis
        .take_lock(SALE_LOCKS, "seckill:desk:ada", 30_000)
        .await;

    let buyer = {
        let app = app.clone();
        tokio::spawn(async move {
            let response = app.buy("desk", "ada", 1, None).await;
            (response.status(), Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !buyer.is_finished(),
        "the purchase did not wait for the user's lock"
    );
    assert_eq!(app.sale("desk").await["sold"], 0);
    // Another user is not held up.
    assert_eq!(
        app.buy("desk", "bob", 1, None).await.status(),
        StatusCode::CREATED
    );

    let released_at = Instant::now();
    redis
        .release_lock(SALE_LOCKS, "seckill:desk:ada", &held)
        .await;
    let (status, answered) = buyer.await.unwrap();
    assert_eq!(status, StatusCode::CREATED);
    assert!(answered - released_at < Duration::from_millis(200));
    assert_eq!(app.sale("desk").await["sold"], 2);
}

/// On one Redis the purchase script gives up the user's lock itself, as
/// the lock's plain release would (the lock gone when the answer comes, its
/// release channel told): a purchase is the rate check with the lock's
/// try, and the script; no call of its own for the release.
#[tokio::test]
async fn on_one_redis_the_purchase_script_releases_the_users_lock() {
    use futures_util::StreamExt;

    let redis = RedisServer::start_single().await;
    let app = TestApp::spawn_sale(&redis, &[]).await;
    app.reset_sale("desk", 10, 5).await;
    // A first purchase, so that loading the scripts is not counted.
    app.bought("desk", "bob", 1, None).await;
    let mut released = redis.node(0).client().get_async_pubsub().await.unwrap();
    released
        .subscribe(format!("{SALE_LOCKS}released:{{seckill:desk:ada}}"))
        .await
        .unwrap();

    let before = command_calls(&redis).await;
    app.bought("desk", "ada", 1, None).await;
    let held: bool = redis::cmd("EXISTS")
        .arg(format!("{SALE_LOCKS}lock:{{seckill:desk:ada}}"))
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
    assert!(!held, "the user's lock outlived the answer");
    let told = tokio::time::timeout(Duration::from_secs(2), released.on_message().next()).await;
    assert!(
        matches!(told, Ok(Some(_))),
        "the lock's release channel was not told"
    );
    // Long enough for a release after the answer to have been counted.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = command_calls(&redis).await;
    let ran = |name: &str| after.get(name).unwrap_or(&0) - before.get(name).unwrap_or(&0);
    // The rate check, the lock's try and the purchase (which released the
    // lock): three calls, no release of its own.
    assert_eq!(ran("fcall"), 3, "{after:?}");
    assert_eq!(ran("evalsha"), 0, "{after:?}");
    assert_eq!(app.sale("desk").await["sold"], 2);
}

/// A user's purchases queued for the lock: each purchase script finds the
/// next one waiting and leaves the release to the lock's own, which grants
/// the lock to the waiter; every purchase goes through.
#[tokio::test]
async fn purchases_queued_for_their_users_lock_each_get_it_in_turn() {
    let redis = RedisServer::start().await;
    let app = Arc::new(
        TestApp::spawn_sale(
            &redis,
            &["--seckill-rate", "10000", "--seckill-burst", "10000"],
        )
        .await,
    );
    app.reset_sale("desk", 10, 5).await;
    let held = redis
        .take_lock(SALE_LOCKS, "seckill:desk:ada", 30_000)
        .await;
    let buyers: Vec<_> = (0..3)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { app.buy("desk", "ada", 1, None).await.status() })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(app.sale("desk").await["sold"], 0, "a purchase did not wait");
    redis
        .release_lock(SALE_LOCKS, "seckill:desk:ada", &held)
        .await;
    for buyer in buyers {
        let status = tokio::time::timeout(Duration::from_secs(5), buyer)
            .await
            .expect("a queued purchase never got the lock")
            .unwrap();
        assert_eq!(status, StatusCode::CREATED);
    }
    assert_eq!(app.sale("desk").await["sold"], 3);
}

#[tokio::test]
async fn a_purchase_whose_lock_stays_held_answers_lock_held() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_sale(&redis, &["--seckill-lock-wait-ms", "300"]).await;
    app.reset_sale("desk", 10, 5).await;
    redis
        .take_lock(SALE_LOCKS, "seckill:desk:ada", 30_000)
        .await;

    let started = Instant::now();
    let response = app.buy("desk", "ada", 1, None).await;

    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_problem(response, 409, "lock-held").await;
    assert_eq!(app.sale("desk").await["sold"], 0);
}

/// A sale reset of `kit` by the admin, with `body`.
fn reset(what: &'static str, body: Value, status: u16, slug: &'static str) -> Case {
    case(what, Method::PUT, "/seckill/kit", status, slug)
        .json(body.to_string())
        .bearer(ADMIN)
}

/// A purchase of `kit` with the JSON `body`.
fn buy(what: &'static str, body: &str, status: u16, slug: &'static str) -> Case {
    case(what, Method::POST, "/seckill/kit/orders", status, slug).json(body)
}

fn bad_sale_requests() -> Vec<Case> {
    let terms = json!({"stock": 5, "per_user_limit": 1}).to_string();
    vec![
        case(
            "no admin token",
            Method::PUT,
            "/seckill/kit",
            401,
            "unauthorized",
        )
        .json(terms.clone()),
        case(
            "a wrong admin token",
            Method::PUT,
            "/seckill/kit",
            403,
            "forbidden",
        )
        .json(terms)
        .bearer("guess"),
        reset(
            "negative stock",
            json!({"stock": -1, "per_user_limit": 1}),
            422,
            "invalid-field",
        )
        .field("stock"),
        reset(
            "a zero cap",
            json!({"stock": 5, "per_user_limit": 0}),
            422,
            "invalid-field",
        )
        .field("per_user_limit"),
        reset("no cap", json!({"stock": 5}), 400, "malformed-body"),
        reset(
            "stock as text",
            json!({"stock": "5", "per_user_limit": 1}),
            400,
            "malformed-body",
        ),
        reset(
            "stock beyond the maximum",
            json!({"stock": 2e9, "per_user_limit": 1}),
            422,
            "invalid-field",
        )
        .field("stock"),
        buy(
            "quantity zero",
            r#"{"user_id": "u", "quantity": 0}"#,
            422,
            "invalid-field",
        )
        .field("quantity"),
        buy(
            "quantity negative",
            r#"{"user_id": "u", "quantity": -3}"#,
            422,
            "invalid-field",
        )
        .field("quantity"),
        buy(
            "quantity fractional",
            r#"{"user_id": "u", "quantity": 1.5}"#,
            422,
            "invalid-field",
        )
        .field("quantity"),
        buy(
            "quantity huge",
            r#"{"user_id": "u", "quantity": 1000000000000}"#,
            422,
            "invalid-field",
        )
        .field("quantity"),
        buy(
            "quantity as text",
            r#"{"user_id": "u", "quantity": "1"}"#,
            400,
            "malformed-body",
        ),
        buy("no user", r#"{"quantity": 1}"#, 400, "malformed-body"),
        buy(
            "a user with a colon",
            r#"{"user_id": "a:b"}"#,
            422,
            "invalid-field",
        )
        .field("user_id"),
        buy("an empty user", r#"{"user_id": ""}"#, 422, "invalid-field").field("user_id"),
        buy(
            "an unknown field",
            r#"{"user_id": "u", "extra": 1}"#,
            400,
            "malformed-body",
        ),
        buy("not JSON", "not json", 400, "malformed-body"),
        case(
            "no content type",
            Method::POST,
            "/seckill/kit/orders",
            415,
            "unsupported-media-type",
        )
        .body(r#"{"user_id": "u"}"#),
        buy(
            "an Idempotency-Key with a space",
            r#"{"user_id": "u"}"#,
            422,
            "invalid-field",
        )
        .header("idempotency-key", "has space")
        .field("Idempotency-Key"),
        case(
            "a purchase from no sale",
            Method::POST,
            "/seckill/nothing/orders",
            404,
            "sale-not-found",
        )
        .json(r#"{"user_id": "u", "quantity": 1}"#),
        case(
            "no sale",
            Method::GET,
            "/seckill/nothing",
            404,
            "sale-not-found",
        ),
        case(
            "the orders of no sale",
            Method::GET,
            "/seckill/nothing/orders",
            404,
            "sale-not-found",
        ),
        case(
            "a sku with a space",
            Method::GET,
            "/seckill/a%20b",
            422,
            "invalid-field",
        )
        .field("sku"),
        case(
            "orders of a bad user",
            Method::GET,
            "/seckill/kit/orders?user_id=a:b",
            422,
            "invalid-field",
        )
        .field("user_id"),
        buy(
            "past the cap",
            r#"{"user_id": "u", "quantity": 3}"#,
            409,
            "limit-exceeded",
        ),
        buy(
            "past the stock",
            r#"{"user_id": "u", "quantity": 11}"#,
            409,
            "sold-out",
        ),
    ]
}

#[tokio::test]
async fn every_bad_sale_request_gets_its_documented_4xx() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_sale(&redis, &[]).await;
    app.reset_sale("kit", 10, 2).await;

    for case in bad_sale_requests() {
        case.check(&app).await;
    }

    // None of it bought anything or changed the sale.
    let sale = app.sale("kit").await;
    assert_eq!(
        (sale["sold"].as_u64(), sale["stock"].as_u64()),
        (Some(0), Some(10)),
        "{sale}"
    );
    let users: HashSet<String> = app
        .orders("kit")
        .await
        .iter()
        .map(|order| order["user_id"].to_string())
        .collect();
    assert!(users.is_empty());
}

#[tokio::test]
async fn a_client_cannot_hold_the_sales_own_locks() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_sale(&redis, &[]).await;
    app.reset_sale("desk", 10, 5).await;

    // The names the sale's locks go by are a client's own locks here.
    app.take("seckill:desk:ada", 3_600_000).await;
    app.take("seckill:desk", 3_600_000).await;
    let started = Instant::now();
    let bought = app.buy("desk", "ada", 1, None).await;

    assert_eq!(bought.status(), StatusCode::CREATED);
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(app.reset_sale("desk", 3, 1).await["stock"], 3);
}

#[tokio::test]
async fn without_an_admin_token_sale_administration_is_refused_and_says_how_to_enable_it() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;

    let response = app
        .http
        .put(app.url("/seckill/open"))
        .bearer_auth("anything")
        .json(&json!({"stock": 1, "per_user_limit": 1}))
        .send()
        .await
        .unwrap();

    let problem = assert_problem(response, 403, "administration-disabled").await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("LOCKGATE_ADMIN_TOKEN"),
        "{problem}"
    );
    assert_problem(app.get("/seckill/open").await, 404, "sale-not-found").await;
}

/// The switch exists only in a `bench` build (`cargo test --features bench`).
#[cfg(feature = "bench")]
#[tokio::test]
async fn with_the_user_lock_switched_off_a_held_user_lock_delays_nothing() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_sale(&redis, &["--seckill-user-lock", "false"]).await;
    app.reset_sale("desk", 10, 5).await;
    redis
        .take_lock(SALE_LOCKS, "seckill:desk:ada", 30_000)
        .await;

    let started = Instant::now();
    let response = app.buy("desk", "ada", 1, None).await;

    assert_eq!(response.status(), StatusCode::CREATED);
    assert!(started.elapsed() < Duration::from_millis(500));
}
