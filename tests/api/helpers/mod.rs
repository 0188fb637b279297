//! Test harness: a real `redis-server` per test on a free port (`redis_server`), the gateway served in-process (`app`, with the sale's helpers in `sale`) or as the real binary (`process`), and the checks the tests share.

mod app;
mod cases;
mod events;
mod nginx;
pub mod orders;
mod postgres;
mod process;
mod redis_server;
mod sale;
pub mod security;

use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::Response;
use serde_json::Value;

pub use app::{Grant, TestApp};
pub use cases::{Case, case};
pub use events::{Event, EventStream};
pub use nginx::{Nginx, NginxSettings};
pub use postgres::Postgres;
pub use process::GatewayProcess;
pub use redis_server::{RedisServer, TestConnection, command_calls, lock_keys, lock_script};
pub use sale::ADMIN;

/// Sends `signal` (such as `-TERM`) to a process.
pub fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {signal} {pid} failed");
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// Asserts a problem response: status, `application/problem+json`, slug; returns the body.
pub async fn assert_problem(response: Response, status: u16, slug: &str) -> Value {
    assert_eq!(response.status().as_u16(), status, "status for {slug}");
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert_eq!(content_type, "application/problem+json");
    let body: Value = response.json().await.expect("problem JSON");
    assert_eq!(body["type"], format!("/problems/{slug}"), "{body}");
    assert_eq!(body["status"], status);
    assert!(
        body["title"].is_string() && body["detail"].is_string(),
        "{body}"
    );
    body
}

/// The value of one series (its name and labels, as written) in a
/// Prometheus text page, if the page has it.
pub fn sample(page: &str, series: &str) -> Option<String> {
    page.lines().find_map(|line| {
        line.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .map(str::to_owned)
    })
}

/// Polls `check` until it holds or `within` runs out.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
