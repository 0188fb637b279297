//! Bad input gets the documented 4xx problem, never a 5xx, and changes nothing.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{ADMIN, Case, RedisServer, TestApp, assert_problem, case};

fn acquire(what: &'static str, body: Value, status: u16, slug: &'static str) -> Case {
    case(what, Method::POST, "/locks", status, slug).json(body.to_string())
}

const TOKEN: &str = "0b6e2f4c-3d5a-4f1e-9a8b-7c6d5e4f3a2b";

fn cases() -> Vec<Case> {
    let long_key = "k".repeat(201);
    vec![
        // Bodies that are not JSON, or not the right JSON.
        case("not JSON", Method::POST, "/locks", 400, "malformed-body").json("{key: orders}"),
        case("empty body", Method::POST, "/locks", 400, "malformed-body").json(""),
        case(
            "truncated JSON",
            Method::POST,
            "/locks",
            400,
            "malformed-body",
        )
        .json(r#"{"key": "a""#),
        acquire("a JSON array", json!(["orders"]), 400, "malformed-body"),
        acquire("a JSON string", json!("orders"), 400, "malformed-body"),
        acquire("no key", json!({"ttl_ms": 1000}), 400, "malformed-body"),
        acquire("key is a number", json!({"key": 42}), 400, "malformed-body"),
        acquire("key is null", json!({"key": null}), 400, "malformed-body"),
        acquire(
            "ttl_ms is a string",
            json!({"key": "a", "ttl_ms": "1000"}),
            400,
            "malformed-body",
        ),
        acquire(
            "wait_ms is a bool",
            json!({"key": "a", "wait_ms": true}),
            400,
            "malformed-body",
        ),
        acquire(
            "token is a number",
            json!({"key": "a", "token": 7}),
            400,
            "malformed-body",
        ),
        acquire(
            "an unknown field",
            json!({"key": "a", "ttl": 1000}),
            400,
            "malformed-body",
        ),
        case(
            "no content type",
            Method::POST,
            "/locks",
            415,
            "unsupported-media-type",
        )
        .raw("", r#"{"key": "a"}"#),
        case(
            "text/plain",
            Method::POST,
            "/locks",
            415,
            "unsupported-media-type",
        )
        .raw("text/plain", r#"{"key": "a"}"#),
        case(
            "form-encoded",
            Method::POST,
            "/locks",
            415,
            "unsupported-media-type",
        )
        .raw("application/x-www-form-urlencoded", "key=a"),
        case("a huge body", Method::POST, "/locks", 413, "body-too-large").json(format!(
            r#"{{"key": "a", "pad": "{}"}}"#,
            "x".repeat(64 * 1024)
        )),
        // Keys.
        acquire("empty key", json!({"key": ""}), 422, "invalid-key"),
        acquire(
            "201-character key",
            json!({"key": long_key}),
            422,
            "invalid-key",
        ),
        acquire(
            "key with a slash",
            json!({"key": "a/b"}),
            422,
            "invalid-key",
        ),
        acquire(
            "key with a space",
            json!({"key": "a b"}),
            422,
            "invalid-key",
        ),
        acquire("non-ASCII key", json!({"key": "café"}), 422, "invalid-key"),
        acquire("key with braces", json!({"key": "{a}"}), 422, "invalid-key"),
        // `/locks/..` would address no lock: curl and nginx remove dot segments.
        acquire("key of one dot", json!({"key": "."}), 422, "invalid-key"),
        acquire("key of two dots", json!({"key": ".."}), 422, "invalid-key"),
        case(
            "non-ASCII key in a path",
            Method::GET,
            "/locks/caf%C3%A9",
            422,
            "invalid-key",
        ),
        case(
            "space in a path key",
            Method::GET,
            "/locks/a%20b",
            422,
            "invalid-key",
        ),
        case(
            "slash in a path key",
            Method::GET,
            "/locks/a%2Fb",
            422,
            "invalid-key",
        ),
        case(
            "undecodable path key",
            Method::GET,
            "/locks/%FF",
            422,
            "invalid-key",
        ),
        case(
            "201 characters in a path",
            Method::GET,
            &format!("/locks/{long_key}"),
            422,
            "invalid-key",
        ),
        // Numbers out of range or not whole.
        acquire(
            "ttl_ms below 10",
            json!({"key": "a", "ttl_ms": 9}),
            422,
            "invalid-field",
        )
        .field("ttl_ms"),
        acquire(
            "ttl_ms zero",
            json!({"key": "a", "ttl_ms": 0}),
            422,
            "invalid-field",
        )
        .field("ttl_ms"),
        acquire(
            "ttl_ms negative",
            json!({"key": "a", "ttl_ms": -5}),
            422,
            "invalid-field",
        )
        .field("ttl_ms"),
        acquire(
            "ttl_ms fractional",
            json!({"key": "a", "ttl_ms": 1000.5}),
            422,
            "invalid-field",
        )
        .field("ttl_ms"),
        acquire(
            "ttl_ms above the maximum",
            json!({"key": "a", "ttl_ms": 3_600_001}),
            422,
            "invalid-field",
        )
        .field("ttl_ms"),
        acquire(
            "ttl_ms beyond u64",
            json!({"key": "a", "ttl_ms": 1e30}),
            422,
            "invalid-field",
        )
        .field("ttl_ms"),
        acquire(
            "wait_ms negative",
            json!({"key": "a", "wait_ms": -1}),
            422,
            "invalid-field",
        )
        .field("wait_ms"),
        acquire(
            "wait_ms above the maximum",
            json!({"key": "a", "wait_ms": 60_001}),
            422,
            "invalid-field",
        )
        .field("wait_ms"),
        acquire(
            "token not a UUID",
            json!({"key": "a", "token": "hunter2"}),
            422,
            "invalid-field",
        )
        .field("token"),
        // Release.
        case(
            "release without a token",
            Method::DELETE,
            "/locks/a",
            400,
            "missing-token",
        ),
        case(
            "release with a bad token header",
            Method::DELETE,
            "/locks/a",
            422,
            "invalid-token",
        )
        .header("lock-token", "not-a-uuid"),
        case(
            "release with a bad token query",
            Method::DELETE,
            "/locks/a?token=abc",
            422,
            "invalid-token",
        ),
        case(
            "release with a bad key",
            Method::DELETE,
            "/locks/a%20b",
            422,
            "invalid-key",
        )
        .header("lock-token", TOKEN),
        case(
            "release of no lock",
            Method::DELETE,
            "/locks/nothing",
            404,
            "lock-not-found",
        )
        .header("lock-token", TOKEN),
        // Extend.
        case(
            "extend without a token",
            Method::PUT,
            "/locks/a/ttl",
            400,
            "missing-token",
        )
        .json(r#"{"ttl_ms": 1000}"#),
        case(
            "extend with a bad token",
            Method::PUT,
            "/locks/a/ttl",
            422,
            "invalid-token",
        )
        .json(r#"{"token": "abc", "ttl_ms": 1000}"#),
        case(
            "extend with ttl_ms too small",
            Method::PUT,
            "/locks/a/ttl",
            422,
            "invalid-field",
        )
        .json(json!({"token": TOKEN, "ttl_ms": 1}).to_string())
        .field("ttl_ms"),
        case(
            "extend with ttl_ms as text",
            Method::PUT,
            "/locks/a/ttl",
            400,
            "malformed-body",
        )
        .json(json!({"token": TOKEN, "ttl_ms": "1000"}).to_string()),
        case(
            "extend without a body",
            Method::PUT,
            "/locks/a/ttl",
            415,
            "unsupported-media-type",
        ),
        case(
            "extend of no lock",
            Method::PUT,
            "/locks/nothing/ttl",
            404,
            "lock-not-found",
        )
        .json(json!({"token": TOKEN}).to_string()),
        // Routes and methods.
        case("unknown route", Method::GET, "/lock", 404, "not-found"),
        case(
            "empty key segment",
            Method::GET,
            "/locks/",
            404,
            "not-found",
        ),
        case(
            "nested path",
            Method::DELETE,
            "/locks/a/b",
            404,
            "not-found",
        ),
        case(
            "wrong method on /locks",
            Method::PATCH,
            "/locks",
            405,
            "method-not-allowed",
        ),
        case(
            "wrong method on a lock",
            Method::POST,
            "/locks/a",
            405,
            "method-not-allowed",
        ),
        // Values, idempotency keys, listings, watches and revocations.
        acquire(
            "a value over 1024 bytes",
            json!({"key": "a", "value": "v".repeat(1025)}),
            422,
            "invalid-field",
        )
        .field("value"),
        acquire(
            "a value that is a number",
            json!({"key": "a", "value": 7}),
            400,
            "malformed-body",
        ),
        acquire(
            "an empty Idempotency-Key",
            json!({"key": "a"}),
            422,
            "invalid-field",
        )
        .header("idempotency-key", "")
        .field("Idempotency-Key"),
        acquire(
            "an Idempotency-Key with a space",
            json!({"key": "a"}),
            422,
            "invalid-field",
        )
        .header("idempotency-key", "a b")
        .field("Idempotency-Key"),
        acquire(
            "an Idempotency-Key on a re-entry",
            json!({"key": "a", "token": TOKEN}),
            422,
            "invalid-field",
        )
        .header("idempotency-key", "k-1")
        .field("Idempotency-Key"),
        case(
            "a value without a token",
            Method::PUT,
            "/locks/a/value",
            400,
            "missing-token",
        )
        .json(json!({"value": "x"}).to_string()),
        case(
            "a value too long",
            Method::PUT,
            "/locks/a/value",
            422,
            "invalid-field",
        )
        .json(json!({"token": TOKEN, "value": "v".repeat(1025)}).to_string())
        .field("value"),
        case(
            "a listing of 0",
            Method::GET,
            "/locks?limit=0",
            422,
            "invalid-field",
        )
        .field("limit"),
        case(
            "a listing of 1001",
            Method::GET,
            "/locks?limit=1001",
            422,
            "invalid-field",
        )
        .field("limit"),
        case(
            "a made-up cursor",
            Method::GET,
            "/locks?cursor=zz",
            422,
            "invalid-field",
        )
        .field("cursor"),
        case(
            "a prefix with a space",
            Method::GET,
            "/locks?prefix=a%20b",
            422,
            "invalid-field",
        )
        .field("prefix"),
        case(
            "a prefix too long",
            Method::GET,
            &format!("/locks?prefix={long_key}"),
            422,
            "invalid-field",
        )
        .field("prefix"),
        case(
            "a repeated limit",
            Method::GET,
            "/locks?limit=1&limit=2",
            422,
            "invalid-field",
        )
        .field("query"),
        case(
            "watching a bad key",
            Method::GET,
            "/locks/a%20b/events",
            422,
            "invalid-key",
        ),
        case(
            "a made-up Last-Event-ID",
            Method::GET,
            "/locks/a/events",
            422,
            "invalid-field",
        )
        .header("last-event-id", "yesterday")
        .field("Last-Event-ID"),
        case(
            "a signed Last-Event-ID",
            Method::GET,
            "/locks/a/events",
            422,
            "invalid-field",
        )
        .header("last-event-id", "+1-0")
        .field("Last-Event-ID"),
        case(
            "force=maybe",
            Method::DELETE,
            "/locks/a?force=maybe",
            422,
            "invalid-field",
        )
        .field("force"),
        case(
            "a revocation where no admin token is set",
            Method::DELETE,
            "/locks/a?force=true",
            403,
            "administration-disabled",
        ),
        case(
            "unknown problem page",
            Method::GET,
            "/problems/nope",
            404,
            "not-found",
        ),
    ]
}

#[tokio::test]
async fn every_malformed_request_gets_its_documented_problem_and_never_a_5xx() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let holder = app.take("a", 30_000).await;

    for case in cases() {
        case.check(&app).await;
    }

    // None of it touched the lock that was held all along.
    let inspected: Value = app.get("/locks/a").await.json().await.unwrap();
    assert_eq!(inspected["fencing_token"], holder.fencing_token);
    assert_eq!(inspected["holds"], 1);
}

#[tokio::test]
async fn a_405_lists_the_allowed_methods() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;

    let response = app.http.patch(app.url("/locks/a")).send().await.unwrap();

    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    let allow = response.headers()["allow"].to_str().unwrap().to_owned();
    for method in ["GET", "DELETE"] {
        assert!(allow.contains(method), "Allow: {allow}");
    }
}

#[tokio::test]
async fn only_a_json_object_is_a_body_and_no_refusal_names_an_internal_type() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_sale(&redis, &[]).await;

    // Six elements, one per field: serde would take it as the body's fields.
    for body in [
        json!(["six:fields", 1000, 0, null, null, null]),
        json!(["orders", 1000]),
        json!("orders"),
        json!(42),
        json!(null),
    ] {
        let problem = assert_problem(app.acquire(body.clone()).await, 400, "malformed-body").await;
        let detail = problem["detail"].as_str().unwrap();
        assert_eq!(detail, "the body must be a JSON object", "{body}");
    }
    assert_eq!(
        app.get("/locks/six:fields").await.status(),
        StatusCode::NOT_FOUND
    );
    let reset = app
        .http
        .put(app.url("/seckill/phone"))
        .bearer_auth(ADMIN)
        .json(&json!([10, 2]))
        .send()
        .await
        .unwrap();
    let problem = assert_problem(reset, 400, "malformed-body").await;
    assert!(
        !problem["detail"].as_str().unwrap().contains("struct"),
        "{problem}"
    );
}

#[tokio::test]
async fn a_request_naming_two_different_tokens_is_refused_and_changes_nothing() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let held = app.take("two-tokens", 30_000).await;
    let other = "0b6e2f4c-3d5a-4f1e-9a8b-7c6d5e4f3a2b";

    for (query, header) in [(held.token.as_str(), other), (other, held.token.as_str())] {
        let response = app
            .http
            .delete(app.url(&format!("/locks/two-tokens?token={query}")))
            .header("Lock-Token", header)
            .send()
            .await
            .unwrap();
        let problem = assert_problem(response, 422, "invalid-token").await;
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("two different tokens")
        );
    }
    let extend = app
        .http
        .put(app.url("/locks/two-tokens/ttl"))
        .header("Lock-Token", other)
        .json(&json!({"token": held.token, "ttl_ms": 60_000}))
        .send()
        .await
        .unwrap();
    assert_problem(extend, 422, "invalid-token").await;
    let lock: Value = app.get("/locks/two-tokens").await.json().await.unwrap();
    assert!(lock["ttl_ms"].as_u64().unwrap() <= 30_000, "{lock}");

    // The same token in both places is one token.
    let released = app
        .http
        .delete(app.url(&format!("/locks/two-tokens?token={}", held.token)))
        .header("Lock-Token", &held.token)
        .send()
        .await
        .unwrap();
    assert_eq!(released.status(), StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn a_reentry_token_that_is_no_token_is_refused_in_plain_words() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;

    let response = app
        .acquire(json!({"key": "k", "token": "not-a-token"}))
        .await;

    let problem = assert_problem(response, 422, "invalid-field").await;
    assert_eq!(problem["field"], "token");
    assert_eq!(
        problem["detail"],
        "token must be the token of a grant: a UUID such as 0b6e2f4c-3d5a-4f1e-9a8b-7c6d5e4f3a2b"
    );
}

#[tokio::test]
async fn every_problem_type_the_document_names_has_a_page() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    // Each documented problem response names its slugs, a paragraph each:
    // "`slug`: meaning".
    let document: Value = app.get("/openapi.json").await.json().await.unwrap();
    let mut slugs = Vec::new();
    for operations in document["paths"].as_object().unwrap().values() {
        for operation in operations.as_object().unwrap().values() {
            let Some(responses) = operation["responses"].as_object() else {
                continue;
            };
            for response in responses.values() {
                if response["content"]["application/problem+json"].is_null() {
                    continue;
                }
                let description = response["description"].as_str().unwrap();
                for paragraph in description.split("\n\n") {
                    let slug = paragraph
                        .strip_prefix('`')
                        .and_then(|rest| rest.split_once("`: "));
                    slugs.push(slug.expect(paragraph).0.to_owned());
                }
            }
        }
    }
    slugs.sort_unstable();
    slugs.dedup();
    assert!(slugs.len() >= 25, "only {} slugs: {slugs:?}", slugs.len());

    for slug in slugs {
        let response = app.get(&format!("/problems/{slug}")).await;
        assert_eq!(response.status(), StatusCode::OK, "/problems/{slug}");
        let page = response.text().await.unwrap();
        assert!(page.starts_with(&format!("{slug}: ")), "{page}");
    }
}

#[tokio::test]
async fn an_integral_number_written_as_a_float_is_an_integer_as_in_json_schema() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;

    let response = app
        .acquire(json!({"key": "float", "ttl_ms": 2000.0, "wait_ms": 0.0}))
        .await;

    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["ttl_ms"], 2000);
}

/// A header sent twice with different values is refused, never one of
/// them used in silence; and a revocation on a gateway without an admin
/// token says what is off in the words of what was asked.
#[tokio::test]
async fn a_header_sent_twice_with_two_values_is_refused() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let held = app.take("twice", 30_000).await;
    let mut headers = reqwest::header::HeaderMap::new();
    headers.append("Lock-Token", held.token.parse().unwrap());
    headers.append("Lock-Token", TOKEN.parse().unwrap());
    let release = app
        .http
        .delete(app.url("/locks/twice"))
        .headers(headers)
        .send()
        .await
        .unwrap();
    let problem = assert_problem(release, 422, "invalid-field").await;
    assert_eq!(problem["field"], "Lock-Token");
    assert_eq!(app.get("/locks/twice").await.status(), StatusCode::OK);

    let mut headers = reqwest::header::HeaderMap::new();
    headers.append("Idempotency-Key", "one".parse().unwrap());
    headers.append("Idempotency-Key", "two".parse().unwrap());
    let acquire = app
        .http
        .post(app.url("/locks"))
        .headers(headers)
        .json(&json!({"key": "twice-idem"}))
        .send()
        .await
        .unwrap();
    let problem = assert_problem(acquire, 422, "invalid-field").await;
    assert_eq!(problem["field"], "Idempotency-Key");
    assert_eq!(
        app.get("/locks/twice-idem").await.status(),
        StatusCode::NOT_FOUND
    );

    let revoke = app
        .http
        .delete(app.url("/locks/twice?force=true"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    let problem = assert_problem(revoke, 403, "administration-disabled").await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("revoking locks"),
        "{problem}"
    );
}
