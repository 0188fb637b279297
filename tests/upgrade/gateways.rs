//! A gateway of either release as a real process on a free port, with its log in a file.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use reqwest::Response;
use serde_json::Value;

use crate::redis_server::RedisServer;
use crate::{eventually, free_port, send_signal};

/// The admin token of every gateway of these tests.
pub const ADMIN: &str = "adm";

/// Which build a gateway runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The previous release (0.1.0), built from the history.
    Old,
    /// This build.
    New,
}

impl Release {
    /// `"ooN"`-style mixes: `o` old, `n` new.
    pub fn mix(letters: &str) -> Vec<Release> {
        letters
            .chars()
            .map(|letter| match letter {
                'o' => Release::Old,
                'n' => Release::New,
                other => panic!("no release {other:?}"),
            })
            .collect()
    }

    pub fn binary(self) -> PathBuf {
        match self {
            Release::New => PathBuf::from(env!("CARGO_BIN_EXE_lockgate")),
            Release::Old => {
                let path = std::env::var_os("LOCKGATE_OLD_BIN").expect(
                    "LOCKGATE_OLD_BIN names the previous release's binary \
                     (scripts/build-release.sh 0.1.0; make upgrade-short sets it)",
                );
                PathBuf::from(path)
            }
        }
    }
}

/// One `lockgate serve` of either release, killed when dropped.
pub struct Gateway {
    pub release: Release,
    pub child: Child,
    pub addr: SocketAddr,
    pub http: reqwest::Client,
    log: tempfile::NamedTempFile,
}

impl Gateway {
    /// A gateway of `release` on `redis`, with the admin token; this build's
    /// also takes `new_flags` (flags 0.1.0 does not know).
    pub async fn spawn(release: Release, redis: &RedisServer, new_flags: &[&str]) -> Self {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = tempfile::NamedTempFile::new().expect("log file");
        let mut command = Command::new(release.binary());
        command
            .args([
                "serve",
                "--listen",
                &addr.to_string(),
                "--admin-token",
                ADMIN,
            ])
            .args(redis.gateway_flags())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(log.reopen().expect("log file"))
            .stderr(log.reopen().expect("log file"));
        if release == Release::New {
            command.args(new_flags);
        }
        let child = command.spawn().expect("spawn lockgate");
        let gateway = Self {
            release,
            child,
            addr,
            http: reqwest::Client::new(),
            log,
        };
        // A debug build of the old tree starts slower than a release build.
        let ready = eventually(Duration::from_secs(30), || async {
            gateway
                .http
                .get(gateway.url("/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        })
        .await;
        assert!(
            ready,
            "{release:?} lockgate did not start:\n{}",
            gateway.logs()
        );
        gateway
    }

    /// One gateway per letter of `mix` (see [`Release::mix`]).
    pub async fn fleet(mix: &str, redis: &RedisServer, new_flags: &[&str]) -> Vec<Gateway> {
        let mut fleet = Vec::new();
        for release in Release::mix(mix) {
            fleet.push(Gateway::spawn(release, redis, new_flags).await);
        }
        fleet
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub async fn post(&self, path: &str, body: &Value) -> Response {
        self.http
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .expect("request sent")
    }

    pub async fn get(&self, path: &str) -> Response {
        self.http
            .get(self.url(path))
            .send()
            .await
            .expect("request sent")
    }

    pub async fn get_json(&self, path: &str) -> (u16, Value) {
        let response = self.get(path).await;
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn release(&self, key: &str, token: &str) -> Response {
        self.http
            .delete(self.url(&format!("/locks/{key}")))
            .header("Lock-Token", token)
            .send()
            .await
            .expect("request sent")
    }

    /// Everything the process wrote so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// Stops it as the rolling procedure does (SIGTERM) and waits for its exit.
    pub async fn stop(mut self) -> ExitStatus {
        send_signal(self.child.id(), "-TERM");
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("poll lockgate") {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{:?} lockgate did not stop:\n{}", self.release, self.logs());
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `lockgate <args>` of this build with the flags that reach `redis`, run to its end.
pub fn lockgate(redis: &RedisServer, args: &[&str]) -> Output {
    Command::new(Release::New.binary())
        .args(args)
        .args(redis.gateway_flags())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run lockgate")
}
