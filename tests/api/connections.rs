//! The server's own limits on connections: a request head must arrive in time, an idle kept-alive connection closes, an oversized head gets a problem document; requests that wait, and streamed locks, are never cut.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::{EventStream, RedisServer, TestApp, eventually};

/// Reads until the server closes the connection (or `within` runs out);
/// returns what it sent, or `None` if it kept the connection open.
async fn until_closed(stream: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    let mut received = Vec::new();
    let read = tokio::time::timeout(within, stream.read_to_end(&mut received)).await;
    match read {
        Ok(_) => Some(received),
        Err(_) => None,
    }
}

#[tokio::test]
async fn connections_that_send_half_a_head_or_nothing_are_closed_after_the_header_timeout() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_with(&redis, &["--header-timeout-ms", "400"]).await;
    let mut slow = Vec::new();
    for _ in 0..50 {
        let mut stream = TcpStream::connect(app.addr).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        slow.push(stream);
    }
    let mut silent = TcpStream::connect(app.addr).await.unwrap();
    let started = Instant::now();

    for stream in &mut slow {
        let closed = until_closed(stream, Duration::from_secs(3)).await;
        assert!(closed.is_some(), "a half-sent head kept its connection");
    }
    assert!(
        until_closed(&mut silent, Duration::from_secs(3))
            .await
            .is_some()
    );
    assert!(
        started.elapsed() >= Duration::from_millis(350),
        "closed after {:?}, before the timeout",
        started.elapsed()
    );
    // The server still serves.
    assert_eq!(app.get("/healthz").await.status(), StatusCode::OK);
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed_after_the_idle_timeout() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_with(
        &redis,
        &["--idle-timeout-ms", "600", "--header-timeout-ms", "5000"],
    )
    .await;
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = [0u8; 1024];
    let read = stream.read(&mut answer).await.unwrap();
    assert!(answer[..read].starts_with(b"HTTP/1.1 200"));
    let answered = Instant::now();

    let closed = until_closed(&mut stream, Duration::from_secs(5)).await;

    assert!(closed.is_some(), "the idle connection was kept");
    let idle = answered.elapsed();
    assert!(
        (Duration::from_millis(500)..Duration::from_millis(2_000)).contains(&idle),
        "closed after {idle:?} idle"
    );
}

#[tokio::test]
async fn waiting_requests_and_streamed_locks_outlive_both_timeouts() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_with(
        &redis,
        &[
            "--header-timeout-ms",
            "300",
            "--idle-timeout-ms",
            "300",
            "--stream-keep-alive-ms",
            "5000",
        ],
    )
    .await;
    app.take("long", 30_000).await;
    let mut stream = EventStream::of(app.stream(json!({"key": "streamed", "ttl_ms": 600})).await);

    let started = Instant::now();
    let waited = app.acquire(json!({"key": "long", "wait_ms": 1_500})).await;

    assert_eq!(waited.status(), StatusCode::CONFLICT, "the wait was cut");
    assert!(started.elapsed() >= Duration::from_millis(1_500));
    let body: Value = waited.json().await.unwrap();
    assert_eq!(body["type"], "/problems/lock-held");
    // The stream, open all along, is still renewed.
    stream.until("renewed", Duration::from_secs(2)).await;
    assert_eq!(app.get("/locks/streamed").await.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_request_head_over_the_limit_is_answered_with_a_problem_whatever_its_size() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_with(&redis, &["--header-limit-bytes", "4096"]).await;

    for padding in [6_000, 64_000, 1_000_000] {
        let response = app
            .http
            .get(app.url("/healthz"))
            .header("X-Padding", "p".repeat(padding))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "{padding}"
        );
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json"
        );
        assert_eq!(
            response.headers()["x-instance-id"],
            app.instance_id.as_str()
        );
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["type"], "/problems/headers-too-large", "{padding}");
    }
}

/// Sends a request with `headers` header lines (the `Host` among them) over
/// a raw connection, written `chunk` bytes at a time; the answer's head and body.
async fn with_headers(app: &TestApp, headers: usize, chunk: usize) -> (String, String) {
    let mut head = String::from("GET /healthz HTTP/1.1\r\nHost: x\r\n");
    for n in 1..headers {
        head.push_str(&format!("X-H{n}: {n}\r\n"));
    }
    head.push_str("Connection: close\r\n\r\n");
    let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    for part in head.as_bytes().chunks(chunk) {
        stream.write_all(part).await.unwrap();
        if chunk < head.len() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    // Read up to the end of the body its content-length announces: after a
    // refusal the gateway keeps reading (and dropping) what a client sends,
    // until the client closes.
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&answer).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let head = head.to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length: "))
                .and_then(|value| value.trim().parse::<usize>().ok());
            if length.is_some_and(|length| body.len() >= length) {
                return (head, body.to_owned());
            }
        }
        let read = stream.read(&mut buffer).await.unwrap();
        assert!(
            read > 0,
            "the connection closed before a whole answer: {text}"
        );
        answer.extend_from_slice(&buffer[..read]);
    }
}

#[tokio::test]
async fn too_many_header_lines_get_the_same_problem_as_too_many_header_bytes() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;

    // `Connection` is one more: 99 + 1 is the most hyper (and so the gateway) takes.
    let (head, _) = with_headers(&app, 99, usize::MAX).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    for (headers, chunk) in [
        (100, usize::MAX),
        (120, usize::MAX),
        (120, 7),
        (1_000, 4096),
    ] {
        let (head, body) = with_headers(&app, headers, chunk).await;
        assert!(head.starts_with("http/1.1 431"), "{headers}: {head}");
        assert!(
            head.contains("content-type: application/problem+json"),
            "{head}"
        );
        assert!(
            head.contains(&format!(
                "x-instance-id: {}",
                app.instance_id.to_ascii_lowercase()
            )),
            "{head}"
        );
        let problem: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(problem["type"], "/problems/headers-too-large", "{body}");
        assert!(
            problem["detail"].as_str().unwrap().contains("header lines"),
            "{body}"
        );
    }
}

#[tokio::test]
async fn made_up_methods_add_no_metric_series() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let series = |text: &str| {
        text.lines()
            .filter(|line| line.starts_with("lockgate_http_request_duration_seconds_count"))
            .count()
    };
    app.get("/healthz").await;
    let before = series(&app.get("/metrics").await.text().await.unwrap());

    for n in 0..50 {
        let method = reqwest::Method::from_bytes(format!("M{n}").as_bytes()).unwrap();
        let response = app
            .http
            .request(method, app.url("/locks/a"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    }

    let text = app.get("/metrics").await.text().await.unwrap();
    // One new series for all 50 (route /locks/{key}, method other, 405),
    // and the /metrics request itself.
    assert!(series(&text) <= before + 2, "{text}");
    assert!(
        text.contains(
            "lockgate_http_request_duration_seconds_count{route=\"/locks/{key}\",method=\"other\",status=\"405\"} 50"
        ),
        "{text}"
    );
}

/// `POST /locks` with `body`, as raw bytes: the head, then the body.
fn acquire_request(body: &str) -> (String, String) {
    let head = format!(
        "POST /locks HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    (head, body.to_owned())
}

#[tokio::test]
async fn a_waiter_whose_body_came_after_its_head_is_still_seen_leaving() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let held = app.acquire(json!({"key": "split", "ttl_ms": 30_000})).await;
    assert_eq!(held.status(), StatusCode::CREATED);
    // Several, since which of the connection's reader and its watch sees
    // the body first is up to the scheduler.
    let mut waiters = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(app.addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (head, body) = acquire_request(r#"{"key":"split","ttl_ms":5000,"wait_ms":30000}"#);
        stream.write_all(head.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        stream.write_all(body.as_bytes()).await.unwrap();
        waiters.push(stream);
    }
    let queued = eventually(Duration::from_secs(5), || async {
        let status: Value = app.get("/locks/split").await.json().await.unwrap();
        status["waiters"].as_array().is_some_and(|w| w.len() == 4)
    })
    .await;
    assert!(queued, "the four requests are not all waiting");

    drop(waiters);

    let left = eventually(Duration::from_secs(2), || async {
        let status: Value = app.get("/locks/split").await.json().await.unwrap();
        status["waiters"].as_array().is_some_and(Vec::is_empty)
    })
    .await;
    assert!(left, "waiters whose clients left are still queued");
}
