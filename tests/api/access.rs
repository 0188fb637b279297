//! API keys on the lock routes: 401 without one, 403 with a wrong one, served with a right one.

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{RedisServer, TestApp, assert_problem};

#[tokio::test]
async fn with_api_keys_the_lock_routes_need_one_of_them() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_with(&redis, &["--api-keys", "key-one,key-two"]).await;
    let post = |key: Option<&str>| {
        let mut request = app
            .http
            .post(app.url("/locks"))
            .json(&json!({"key": "guarded"}));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send()
    };

    let missing = post(None).await.unwrap();
    assert_eq!(missing.headers()["www-authenticate"], "Bearer");
    assert_problem(missing, 401, "unauthorized").await;
    assert_problem(post(Some("key-three")).await.unwrap(), 403, "forbidden").await;
    assert_problem(post(Some("key-on")).await.unwrap(), 403, "forbidden").await;
    let malformed = app
        .http
        .get(app.url("/locks/guarded"))
        .header("Authorization", "Basic a2V5LW9uZQ==")
        .send()
        .await
        .unwrap();
    assert_problem(malformed, 401, "unauthorized").await;

    assert_eq!(
        post(Some("key-two")).await.unwrap().status(),
        StatusCode::CREATED
    );
    let inspected = app
        .http
        .get(app.url("/locks/guarded"))
        .bearer_auth("key-one")
        .send()
        .await
        .unwrap();
    assert_eq!(inspected.status(), StatusCode::OK);
    // Operations routes stay open.
    assert_eq!(app.get("/readyz").await.status(), StatusCode::OK);
}
