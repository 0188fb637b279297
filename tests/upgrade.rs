//! Two releases on one Redis: the previous release's binary, built from the history (`scripts/build-release.sh`), beside this build's, as real processes in every mix, driven together.
//!
//! The tests are ignored by a plain `cargo test` (they need the old binary):
//! `make upgrade-short` and `make upgrade` build it and run them with
//! `LOCKGATE_OLD_BIN` naming it.

#[allow(dead_code)]
#[path = "api/helpers/redis_server.rs"]
mod redis_server;

#[path = "upgrade/fleet.rs"]
mod fleet;
#[path = "upgrade/gateways.rs"]
mod gateways;
#[path = "upgrade/mixed.rs"]
mod mixed;

use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

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
