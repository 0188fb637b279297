//! nginx in front of three instances: a change is never sent twice, even when an instance answers late, and no owner token reaches its access log.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Nginx, NginxSettings, RedisServer, TestApp, eventually};

/// Three instances behind nginx, which waits 300 ms for an answer.
async fn impatient_cluster(redis: &RedisServer) -> ([TestApp; 3], Nginx) {
    let flags = ["--admin-token", "adm"];
    let apps = [
        TestApp::spawn_with(redis, &flags).await,
        TestApp::spawn_with(redis, &flags).await,
        TestApp::spawn_with(redis, &flags).await,
    ];
    let nginx = Nginx::start(
        [apps[0].addr, apps[1].addr, apps[2].addr],
        NginxSettings {
            read_timeout: "300ms",
            locks_read_timeout: "300ms",
        },
    )
    .await;
    (apps, nginx)
}

/// `POST /locks` with `body` through nginx; the grant's JSON.
async fn take_through(http: &reqwest::Client, nginx: &Nginx, body: Value) -> Value {
    let response = http
        .post(nginx.url("/locks"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        reqwest::StatusCode::CREATED,
        "taking {body}"
    );
    response.json().await.unwrap()
}

/// How many requests of `method` on `route` the instances served, together.
async fn served(apps: &[TestApp], route: &str, method: &str) -> f64 {
    let series = format!(
        "lockgate_http_request_duration_seconds_count{{route=\"{route}\",method=\"{method}\","
    );
    let mut total = 0.0;
    for app in apps {
        let text = app.get("/metrics").await.text().await.unwrap();
        total += text
            .lines()
            .filter(|line| line.starts_with(&series))
            .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum::<f64>();
    }
    total
}

/// Freezes Redis for a second (`DEBUG SLEEP`), longer than nginx waits.
async fn slow_redis(redis: &RedisServer) -> tokio::task::JoinHandle<()> {
    let mut conn = redis.node(0).connection().await;
    let sleeping = tokio::spawn(async move {
        // The connection's own response timeout may give up first: the
        // sleep happens all the same.
        let _: redis::RedisResult<()> = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(1)
            .query_async(&mut conn)
            .await;
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    sleeping
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_that_times_out_at_nginx_is_not_sent_again() {
    let redis = RedisServer::start_single_with(&["--enable-debug-command", "yes"]).await;
    let (apps, nginx) = impatient_cluster(&redis).await;
    let http = reqwest::Client::new();
    let grant = take_through(&http, &nginx, json!({"key": "twice", "ttl_ms": 60_000})).await;
    let token = grant["token"].as_str().unwrap();
    let reentered = http
        .post(nginx.url("/locks"))
        .json(&json!({"key": "twice", "token": token, "ttl_ms": 60_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(reentered.status(), StatusCode::OK);
    let reset = |stock: u64| {
        http.put(nginx.url("/seckill/once"))
            .bearer_auth("adm")
            .json(&json!({"stock": stock, "per_user_limit": 5}))
            .send()
    };
    assert_eq!(reset(10).await.unwrap().status(), StatusCode::OK);

    // Each change reaches Redis while it sleeps: nginx gives up waiting.
    let changes = [
        (
            http.delete(nginx.url("/locks/twice"))
                .header("Lock-Token", token),
            "/locks/{key}",
            "DELETE",
        ),
        (
            http.put(nginx.url("/locks/twice/ttl"))
                .json(&json!({"token": token, "ttl_ms": 60_000})),
            "/locks/{key}/ttl",
            "PUT",
        ),
        (
            http.put(nginx.url("/seckill/once"))
                .bearer_auth("adm")
                .json(&json!({"stock": 10, "per_user_limit": 5})),
            "/seckill/{sku}",
            "PUT",
        ),
        (
            http.post(nginx.url("/seckill/once/orders"))
                .json(&json!({"user_id": "u"})),
            "/seckill/{sku}/orders",
            "POST",
        ),
    ];
    // Each timeout takes its instance out of nginx's rotation for the
    // template's fail_timeout (2 s): the next change waits it out, or three
    // timeouts in a row leave nginx no instance to send the fourth to.
    let mut live_again = tokio::time::Instant::now();
    for (change, route, method) in changes {
        tokio::time::sleep_until(live_again).await;
        let before = served(&apps, route, method).await;
        let sleeping = slow_redis(&redis).await;
        live_again = tokio::time::Instant::now() + Duration::from_millis(2100);
        let answer = change.send().await.unwrap();
        assert_eq!(
            answer.status(),
            StatusCode::SERVICE_UNAVAILABLE,
            "{method} {route}"
        );
        sleeping.await.unwrap();
        let answered = eventually(Duration::from_secs(3), || async {
            served(&apps, route, method).await > before
        })
        .await;
        assert!(answered, "{method} {route} never reached an instance");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            served(&apps, route, method).await - before,
            1.0,
            "nginx sent {method} {route} more than once"
        );
    }
    // The DELETE gave back one hold of two, not both. (Asked of an instance:
    // nginx counts each timeout as a failure and rests the instances.)
    let state: Value = apps[0].get("/locks/twice").await.json().await.unwrap();
    assert_eq!(state["holds"], 1, "{state}");
}

#[tokio::test]
async fn no_owner_token_reaches_nginxs_access_log() {
    let redis = RedisServer::start().await;
    let apps = [
        TestApp::spawn(&redis).await,
        TestApp::spawn(&redis).await,
        TestApp::spawn(&redis).await,
    ];
    let nginx = Nginx::start(
        [apps[0].addr, apps[1].addr, apps[2].addr],
        NginxSettings::default(),
    )
    .await;
    let http = reqwest::Client::new();
    let grant = take_through(&http, &nginx, json!({"key": "logged"})).await;
    let token = grant["token"].as_str().unwrap();

    let released = http
        .delete(nginx.url(&format!("/locks/logged?token={token}")))
        .send()
        .await
        .unwrap();
    assert_eq!(released.status(), StatusCode::NO_CONTENT);

    // nginx flushes its access log every second.
    let logged = eventually(Duration::from_secs(5), || async {
        nginx.access_log().contains("DELETE /locks/logged")
    })
    .await;
    let log = nginx.access_log();
    assert!(logged, "the release is not in the access log:\n{log}");
    assert!(
        !log.contains(token),
        "the token is in the access log:\n{log}"
    );
    assert!(!log.contains("token="), "{log}");
}
