//! The real `lockgate` binary as a child process, with its log in a file.

use std::net::SocketAddr;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{RedisServer, eventually, free_port};

/// The real `lockgate` binary, serving on a free port, with its output
/// (logs) written to a file.
pub struct GatewayProcess {
    pub child: Child,
    pub addr: SocketAddr,
    pub http: reqwest::Client,
    log: tempfile::NamedTempFile,
}

impl GatewayProcess {
    pub async fn spawn(redis: &RedisServer, flags: &[&str], env: &[(&str, &str)]) -> Self {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = tempfile::NamedTempFile::new().expect("log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_lockgate"));
        command
            .args(["serve", "--listen", &addr.to_string()])
            .args(redis.gateway_flags())
            .args(flags)
            .env_remove("RUST_LOG")
            .stdout(log.reopen().expect("log file"))
            .stderr(log.reopen().expect("log file"));
        for (name, value) in env {
            command.env(name, value);
        }
        let child = command.spawn().expect("spawn lockgate");
        let process = Self {
            child,
            addr,
            http: reqwest::Client::new(),
            log,
        };
        let ready = eventually(Duration::from_secs(10), || async {
            process
                .http
                .get(process.url("/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        })
        .await;
        assert!(ready, "lockgate did not start:\n{}", process.logs());
        process
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// A `POST /locks` with the given fields, to send (or to add headers to).
    pub fn acquire(&self, body: &Value) -> reqwest::RequestBuilder {
        self.http.post(self.url("/locks")).json(body)
    }

    /// Sends a `POST /locks` built by [`GatewayProcess::acquire`] and
    /// returns the grant; panics unless it is a `201`.
    pub async fn granted(request: reqwest::RequestBuilder) -> Value {
        let response = request.send().await.expect("request sent");
        assert_eq!(response.status(), reqwest::StatusCode::CREATED);
        response.json().await.expect("grant JSON")
    }

    /// Everything the process wrote so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// Waits for the process to exit, at most `within`.
    pub async fn exit_status(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("poll lockgate") {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
