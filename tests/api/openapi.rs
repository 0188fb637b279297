//! The OpenAPI document: the checked-in copy matches the code, and the server serves it and its UI offline.

use reqwest::StatusCode;
use serde_json::Value;

use crate::helpers::{RedisServer, TestApp};

const CHECKED_IN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json");

/// Fails when `openapi/openapi.json` differs from what the code generates.
/// Run with `UPDATE_OPENAPI=1` to rewrite it.
#[test]
fn the_checked_in_openapi_document_matches_the_code() {
    let generated = lockgate::http::openapi_json();
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(CHECKED_IN, generated).expect("write openapi/openapi.json");
    }
    let checked_in = std::fs::read_to_string(CHECKED_IN).unwrap_or_default();
    assert!(
        checked_in == generated,
        "openapi/openapi.json is stale: regenerate it with \
         `UPDATE_OPENAPI=1 cargo test --test api openapi` or `cargo run -- openapi > openapi/openapi.json`"
    );
}

/// Every pattern and bound in the document is the one its parser applies.
#[test]
fn the_documents_patterns_and_bounds_are_the_parsers() {
    use lockgate::{locks, seckill};
    let document: Value = serde_json::from_str(lockgate::http::openapi_json()).unwrap();
    let schemas = &document["components"]["schemas"];
    let patterns = [
        (&schemas["LockKeyText"], locks::key_pattern()),
        (
            &schemas["AcquireBody"]["properties"]["key"],
            locks::key_pattern(),
        ),
        (&schemas["TokenText"], locks::Token::PATTERN.to_owned()),
        (&schemas["NameText"], seckill::name_pattern()),
        (
            &schemas["OrderBody"]["properties"]["user_id"],
            seckill::name_pattern(),
        ),
        (
            &schemas["IdempotencyKeyText"],
            locks::idempotency_key_pattern(),
        ),
    ];
    for (schema, pattern) in patterns {
        assert_eq!(schema["pattern"], pattern, "{schema}");
    }
    let acquire = &schemas["AcquireBody"]["properties"];
    let orders = document["paths"]["/seckill/{sku}/orders"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|parameter| parameter["name"] == "limit")
        .unwrap()["schema"]
        .clone();
    let ranges = [
        (
            &acquire["ttl_ms"],
            locks::MIN_TTL_MS,
            locks::DEFAULT_MAX_TTL_MS,
        ),
        (&acquire["wait_ms"], 0, locks::DEFAULT_MAX_WAIT_MS),
        (&acquire["limit"], 1, locks::MAX_LIMIT),
        (
            &schemas["ExtendBody"]["properties"]["ttl_ms"],
            locks::MIN_TTL_MS,
            locks::DEFAULT_MAX_TTL_MS,
        ),
        (
            &schemas["SaleBody"]["properties"]["stock"],
            0,
            seckill::MAX_STOCK,
        ),
        (
            &schemas["SaleBody"]["properties"]["per_user_limit"],
            1,
            seckill::MAX_STOCK,
        ),
        (
            &schemas["OrderBody"]["properties"]["quantity"],
            1,
            seckill::MAX_QUANTITY,
        ),
        (&orders, 1, seckill::MAX_PAGE as u64),
    ];
    for (schema, minimum, maximum) in ranges {
        assert_eq!(schema["minimum"], minimum, "{schema}");
        assert_eq!(schema["maximum"], maximum, "{schema}");
    }
}

#[test]
fn the_document_is_openapi_3_1_and_documents_every_lock_route() {
    let document: Value = serde_json::from_str(lockgate::http::openapi_json()).unwrap();
    assert_eq!(document["openapi"], "3.1.0");
    let paths = &document["paths"];
    for (path, method) in [
        ("/locks", "post"),
        ("/locks/{key}", "delete"),
        ("/locks/{key}", "get"),
        ("/locks/{key}/ttl", "put"),
        ("/healthz", "get"),
        ("/readyz", "get"),
    ] {
        let operation = &paths[path][method];
        assert!(operation.is_object(), "{method} {path} is undocumented");
        let responses = operation["responses"].as_object().unwrap();
        for (status, response) in responses {
            if status.starts_with('4') || status.starts_with('5') {
                assert!(
                    response["content"]["application/problem+json"].is_object(),
                    "{method} {path} {status} is not documented as a problem"
                );
            }
        }
    }
}

#[test]
fn every_reference_in_the_document_resolves() {
    let document: Value = serde_json::from_str(lockgate::http::openapi_json()).unwrap();
    let mut references = Vec::new();
    collect_references(&document, &mut references);
    assert!(!references.is_empty());
    for reference in references {
        let pointer = reference.trim_start_matches('#');
        assert!(
            document.pointer(pointer).is_some(),
            "{reference} points nowhere"
        );
    }
}

fn collect_references(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get("$ref") {
                found.push(reference.clone());
            }
            map.values()
                .for_each(|inner| collect_references(inner, found));
        }
        Value::Array(items) => items
            .iter()
            .for_each(|inner| collect_references(inner, found)),
        _ => {}
    }
}

#[tokio::test]
async fn the_server_serves_the_same_document_and_swagger_ui_without_a_cdn() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;

    let served: Value = app.get("/openapi.json").await.json().await.unwrap();
    let generated: Value = serde_json::from_str(lockgate::http::openapi_json()).unwrap();
    assert_eq!(served, generated);

    let docs = app.get("/docs/").await;
    assert_eq!(docs.status(), StatusCode::OK);
    let page = docs.text().await.unwrap();
    assert!(page.contains("swagger-ui"), "{page}");
    assert!(
        !page.contains("https://"),
        "Swagger UI loads something remotely:\n{page}"
    );
    let initializer = app
        .get("/docs/swagger-initializer.js")
        .await
        .text()
        .await
        .unwrap();
    assert!(initializer.contains("/openapi.json"), "{initializer}");
    assert!(!initializer.contains("https://"), "{initializer}");
}

/// A gateway with other bounds on leases and waits serves them in its
/// document, so a client generated from it asks for what it accepts.
#[tokio::test]
async fn the_served_document_has_the_gateways_own_bounds() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_with(&redis, &["--max-wait-ms", "200", "--max-ttl-ms", "5000"]).await;
    let document: Value = app.get("/openapi.json").await.json().await.unwrap();
    let acquire = &document["components"]["schemas"]["AcquireBody"]["properties"];
    assert_eq!(acquire["wait_ms"]["maximum"], 200);
    assert_eq!(acquire["ttl_ms"]["maximum"], 5000);
    let default: Value = serde_json::from_str(lockgate::http::openapi_json()).unwrap();
    assert_eq!(
        default["components"]["schemas"]["AcquireBody"]["properties"]["wait_ms"]["maximum"],
        60_000
    );
}
