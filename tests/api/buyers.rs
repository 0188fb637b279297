//! The sale's buyers, proven by JWT: the buyer is the token's `sub`, a body naming another is refused, and a buyer lists only its own orders. And paging through a sale's orders.

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::{RequestBuilder, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{ADMIN, RedisServer, TestApp, assert_problem, command_calls};

const SECRET: &str = "buyer-token-secret";
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/api/fixtures");

/// A buyer token for `sub`, valid for `lifetime_s` seconds (negative: expired).
fn token(key: &EncodingKey, algorithm: Algorithm, sub: &str, lifetime_s: i64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let claims = json!({"sub": sub, "exp": now + lifetime_s});
    jsonwebtoken::encode(&Header::new(algorithm), &claims, key).unwrap()
}

fn hs256(sub: &str) -> String {
    token(
        &EncodingKey::from_secret(SECRET.as_bytes()),
        Algorithm::HS256,
        sub,
        600,
    )
}

async fn sale_with_buyer_tokens(redis: &RedisServer, flags: &[&str]) -> TestApp {
    let mut all = vec!["--seckill-rate", "0"];
    all.extend_from_slice(flags);
    let app = TestApp::spawn_sale(redis, &all).await;
    app.reset_sale("gadget", 100, 3).await;
    app
}

fn buy(app: &TestApp, body: Value) -> RequestBuilder {
    app.http.post(app.url("/seckill/gadget/orders")).json(&body)
}

#[tokio::test]
async fn with_a_buyer_secret_the_buyer_is_the_tokens_sub() {
    let redis = RedisServer::start().await;
    let app = sale_with_buyer_tokens(&redis, &["--buyer-jwt-secret", SECRET]).await;

    let bought = buy(&app, json!({"quantity": 1}))
        .bearer_auth(hs256("alice"))
        .send()
        .await
        .unwrap();
    assert_eq!(bought.status(), StatusCode::CREATED);
    let order: Value = bought.json().await.unwrap();
    assert_eq!(order["user_id"], "alice");
    let named = buy(&app, json!({"user_id": "alice"}))
        .bearer_auth(hs256("alice"))
        .send()
        .await
        .unwrap();
    assert_eq!(named.status(), StatusCode::CREATED);

    // Another buyer's name in the body, no token, a forged or expired one:
    // refused, and nothing bought.
    let impostor = buy(&app, json!({"user_id": "bob"}))
        .bearer_auth(hs256("alice"))
        .send()
        .await
        .unwrap();
    assert_problem(impostor, 403, "forbidden").await;
    let anonymous = buy(&app, json!({"user_id": "bob"})).send().await.unwrap();
    assert_eq!(anonymous.headers()["www-authenticate"], "Bearer");
    assert_problem(anonymous, 401, "unauthorized").await;
    let forged = token(
        &EncodingKey::from_secret(b"guess"),
        Algorithm::HS256,
        "bob",
        600,
    );
    let forged = buy(&app, json!({}))
        .bearer_auth(forged)
        .send()
        .await
        .unwrap();
    assert_problem(forged, 401, "unauthorized").await;
    let key = EncodingKey::from_secret(SECRET.as_bytes());
    let expired = token(&key, Algorithm::HS256, "bob", -3_600);
    let expired = buy(&app, json!({}))
        .bearer_auth(expired)
        .send()
        .await
        .unwrap();
    assert_problem(expired, 401, "unauthorized").await;
    let sale: Value = app.get("/seckill/gadget").await.json().await.unwrap();
    assert_eq!(sale["sold"], 2, "{sale}");
}

#[tokio::test]
async fn a_buyer_lists_only_its_own_orders_and_the_admin_all() {
    let redis = RedisServer::start().await;
    let app = sale_with_buyer_tokens(&redis, &["--buyer-jwt-secret", SECRET]).await;
    for buyer in ["alice", "bob", "alice"] {
        let bought = buy(&app, json!({}))
            .bearer_auth(hs256(buyer))
            .send()
            .await
            .unwrap();
        assert_eq!(bought.status(), StatusCode::CREATED);
    }
    let list = |path: &str, bearer: Option<String>| {
        let request = app.http.get(app.url(path));
        match bearer {
            Some(bearer) => request.bearer_auth(bearer),
            None => request,
        }
        .send()
    };

    let mine: Value = list("/seckill/gadget/orders", Some(hs256("alice")))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let buyers: Vec<&str> = mine["orders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|order| order["user_id"].as_str().unwrap())
        .collect();
    assert_eq!(buyers, ["alice", "alice"]);
    let theirs = list("/seckill/gadget/orders?user_id=bob", Some(hs256("alice")))
        .await
        .unwrap();
    assert_problem(theirs, 403, "forbidden").await;
    let nobody = list("/seckill/gadget/orders", None).await.unwrap();
    assert_problem(nobody, 401, "unauthorized").await;
    let all: Value = list("/seckill/gadget/orders", Some(ADMIN.into()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(all["orders"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn buyer_tokens_signed_with_rsa_or_ec_keys_check_against_the_public_key() {
    let redis = RedisServer::start().await;
    for (algorithm, name) in [(Algorithm::RS256, "rs256"), (Algorithm::ES256, "es256")] {
        let public = format!("{FIXTURES}/buyer-{name}-public.pem");
        let private =
            std::fs::read(format!("{FIXTURES}/buyer-{name}-private-test-only.pem")).unwrap();
        let key = match algorithm {
            Algorithm::RS256 => EncodingKey::from_rsa_pem(&private).unwrap(),
            _ => EncodingKey::from_ec_pem(&private).unwrap(),
        };
        // The key given as a path, and as the PEM itself.
        let pem = std::fs::read_to_string(&public).unwrap();
        for setting in [public.as_str(), pem.as_str()] {
            let app = sale_with_buyer_tokens(&redis, &["--buyer-jwt-public-key", setting]).await;
            let bought = buy(&app, json!({}))
                .bearer_auth(token(&key, algorithm, "carol", 600))
                .send()
                .await
                .unwrap();
            assert_eq!(bought.status(), StatusCode::CREATED, "{name}");
            // A token signed with the shared-secret scheme is not accepted.
            let hs = buy(&app, json!({}))
                .bearer_auth(hs256("carol"))
                .send()
                .await
                .unwrap();
            assert_problem(hs, 401, "unauthorized").await;
        }
    }
}

/// Every page of sale `pages`'s orders for `query`: each page's size, and
/// the orders of all of them.
async fn every_page(app: &TestApp, query: &str) -> (Vec<usize>, Vec<Value>) {
    let (mut sizes, mut orders) = (Vec::new(), Vec::new());
    let mut cursor = String::new();
    loop {
        let page: Value = app
            .get(&format!("/seckill/pages/orders?{query}{cursor}"))
            .await
            .json()
            .await
            .unwrap();
        let listed = page["orders"].as_array().unwrap();
        sizes.push(listed.len());
        orders.extend(listed.iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => return (sizes, orders),
        }
    }
}

#[tokio::test]
async fn orders_come_a_page_at_a_time_and_one_users_without_reading_everyones() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_sale(&redis, &["--seckill-rate", "0"]).await;
    app.reset_sale("pages", 1_000, 1_000).await;
    for n in 0..250 {
        app.bought("pages", &format!("u{}", n % 5), 1, None).await;
    }
    let (sizes, all) = every_page(&app, "limit=100").await;
    assert_eq!(sizes, [100, 100, 50]);
    assert_eq!(all, app.orders("pages").await);

    let before = command_calls(&redis).await;
    let (_, theirs) = every_page(&app, "user_id=u3&limit=20").await;
    let after = command_calls(&redis).await;

    assert_eq!(theirs.len(), 50);
    assert!(theirs.iter().all(|order| order["user_id"] == "u3"));
    assert_eq!(
        after.get("xrange"),
        before.get("xrange"),
        "listing one user's orders read the whole stream"
    );

    let body = assert_problem(
        app.get("/seckill/pages/orders?limit=1001").await,
        422,
        "invalid-field",
    )
    .await;
    assert_eq!(body["field"], "limit");
    let body = assert_problem(
        app.get("/seckill/pages/orders?cursor=nope").await,
        422,
        "invalid-field",
    )
    .await;
    assert_eq!(body["field"], "cursor");
}
