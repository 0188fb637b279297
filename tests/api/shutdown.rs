//! Graceful shutdown of the real binary: SIGTERM ends waits with 503, lets in-flight requests finish, closes Redis connections, exits 0.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::{GatewayProcess, RedisServer, assert_problem, send_signal};

#[tokio::test]
async fn sigterm_drains_ends_waits_with_503_and_exits_cleanly() {
    let redis = RedisServer::start().await;
    let mut gateway = GatewayProcess::spawn(&redis, &[], &[("RUST_LOG", "info")]).await;
    let holder = GatewayProcess::granted(gateway.acquire(&json!({"key": "held"}))).await;
    let waiter = {
        let request = gateway.acquire(&json!({"key": "held", "wait_ms": 20_000}));
        tokio::spawn(async move {
            let response = request.send().await.unwrap();
            (Instant::now(), response)
        })
    };
    // A request in flight: its body is still on its way when SIGTERM comes.
    let body = json!({"key": "in-flight"}).to_string();
    let mut slow = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    let head = format!(
        "POST /locks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    slow.write_all(&body.as_bytes()[..4]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        redis.other_clients().await.len() >= 2,
        "the gateway holds no Redis connections?"
    );

    let signalled = Instant::now();
    send_signal(gateway.child.id(), "-TERM");

    let (answered, response) = waiter.await.unwrap();
    assert!(
        answered - signalled < Duration::from_secs(1),
        "the waiter was held {:?}",
        answered - signalled
    );
    assert_eq!(response.headers()["retry-after"], "1");
    assert_problem(response, 503, "shutting-down").await;

    slow.write_all(&body.as_bytes()[4..]).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), slow.read_to_end(&mut answer))
        .await
        .expect("the in-flight request was not finished")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");

    let status = gateway
        .exit_status(Duration::from_secs(5))
        .await
        .expect("lockgate did not exit");
    assert!(status.success(), "{status}\n{}", gateway.logs());
    assert_eq!(
        redis.other_clients().await.len(),
        0,
        "Redis connections left open"
    );
    assert!(
        reqwest::get(gateway.url("/healthz")).await.is_err(),
        "still accepting connections"
    );

    // The waiter was granted nothing: the holder still holds, unchanged.
    let (owner, fence): (String, u64) = redis::cmd("HMGET")
        .arg("lockgate:lock:{held}")
        .arg("owner")
        .arg("fence")
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
    assert_eq!(owner, holder["token"].as_str().unwrap());
    assert_eq!(fence, holder["fencing_token"].as_u64().unwrap());
    assert!(
        gateway.logs().contains("lockgate stopped"),
        "{}",
        gateway.logs()
    );
}

/// A gateway that shuts down while it holds a streamed lock and has a
/// waiter for it: the streamed lock is released, and the waiter, answered
/// `503 shutting-down`, holds nothing: the lock is free for the next client
/// at once, not at the end of the lease the waiter asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_answered_shutting_down_holds_nothing() {
    let redis = RedisServer::start().await;
    let other = GatewayProcess::spawn(&redis, &[], &[]).await;
    for round in 0..3 {
        let key = format!("closing:{round}");
        let gateway = GatewayProcess::spawn(&redis, &[], &[]).await;
        let streamed = gateway
            .acquire(&json!({"key": key, "ttl_ms": 30_000}))
            .header("Accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(streamed.status(), 200);
        let waiter = tokio::spawn(
            gateway
                .acquire(&json!({"key": key, "ttl_ms": 60_000, "wait_ms": 20_000}))
                .send(),
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        send_signal(gateway.child.id(), "-TERM");
        let answer = waiter.await.unwrap().unwrap();
        assert_problem(answer, 503, "shutting-down").await;
        drop(streamed);
        let free = crate::helpers::eventually(Duration::from_secs(3), || async {
            other
                .acquire(&json!({"key": key, "ttl_ms": 1_000}))
                .send()
                .await
                .is_ok_and(|response| response.status() == 201)
        })
        .await;
        assert!(
            free,
            "round {round}: the lock stayed held after the shutdown"
        );
    }
}
