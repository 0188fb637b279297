//! The permission and TLS tests' helpers: a permissions file for two services, the real binary serving on a free port, certificates made at test time by `scripts/make-certs.sh`, TLS clients and curl over TLS.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use super::{RedisServer, free_port};

pub const BILLING_KEY: &str = "billing-secret-key";
pub const OPS_KEY: &str = "ops-secret-key";
pub const ADMIN: &str = "admin-secret-token";

/// A permissions file for two services: billing locks its own keys and
/// reads shared ones; ops (by API key or client certificate) does anything.
pub fn two_services() -> String {
    format!(
        r#"
[principals.billing]
api_key_sha256 = "{billing}"
client_cert = "billing"
rules = [ {{ prefix = "billing:", allow = ["read", "lock"] }},
          {{ prefix = "billing:audit:", allow = ["read"] }},
          {{ prefix = "shared:", allow = ["read"] }} ]

[principals.ops]
api_key_sha256 = "{ops}"
client_cert = "ops.internal"
rules = [ {{ prefix = "", allow = ["read", "lock", "revoke"] }} ]
"#,
        billing = lockgate::acl::api_key_sha256(BILLING_KEY),
        ops = lockgate::acl::api_key_sha256(OPS_KEY),
    )
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a test file");
    path
}

/// Sends `request` with `Authorization: Bearer <key>`.
pub async fn as_(key: &str, request: reqwest::RequestBuilder) -> reqwest::Response {
    request.bearer_auth(key).send().await.expect("request sent")
}

/// The real binary, serving on a free port, its log in a file; killed when dropped.
pub struct Served {
    pub child: Child,
    pub addr: SocketAddr,
    log: PathBuf,
}

impl Served {
    /// Starts `lockgate serve` with `flags` and waits until its port answers.
    pub fn start(redis_flags: &[String], flags: &[&str], log_dir: &Path) -> Self {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = log_dir.join(format!("lockgate-{}.log", addr.port()));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_lockgate"))
            .args(["serve", "--listen", &addr.to_string()])
            .args(redis_flags)
            .args(flags)
            .env("RUST_LOG", "info")
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("spawn lockgate");
        let served = Self { child, addr, log };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(served.addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "lockgate did not start:\n{}",
                served.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        served
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.addr.port())
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A CA, the server's certificate and client certificates, made now.
pub fn certificates(dir: &Path, clients: &[&str]) -> PathBuf {
    let certs = dir.join("certs");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/make-certs.sh");
    let out = Command::new(script)
        .arg(&certs)
        .args(clients)
        .output()
        .unwrap();
    assert!(out.status.success(), "make-certs.sh: {out:?}");
    certs
}

/// A TLS client trusting the test CA, presenting `client`'s certificate.
pub fn tls_client(certs: &Path, client: Option<&str>) -> reqwest::Client {
    let cert = client.map(|name| {
        (
            certs.join(format!("{name}.pem")),
            certs.join(format!("{name}-key.pem")),
        )
    });
    let config = lockgate::tls::client_config(
        &certs.join("ca.pem"),
        cert.as_ref()
            .map(|(cert, key)| (cert.as_path(), key.as_path())),
    )
    .unwrap();
    reqwest::Client::builder()
        .use_preconfigured_tls(config)
        .build()
        .unwrap()
}

/// curl over TLS: returns (exit code, the HTTP version it spoke, stdout).
pub fn curl(certs: &Path, client: Option<&str>, extra: &[&str], url: &str) -> (i32, String) {
    let mut command = Command::new("curl");
    command
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_version} %{http_code}",
        ])
        .arg("--cacert")
        .arg(certs.join("ca.pem"))
        .args(extra);
    if let Some(name) = client {
        command
            .arg("--cert")
            .arg(certs.join(format!("{name}.pem")))
            .arg("--key")
            .arg(certs.join(format!("{name}-key.pem")));
    }
    let out = command.arg(url).output().expect("curl runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// `lockgate serve` with `flags`: its exit status and what it wrote.
pub fn serve_refused(redis: &RedisServer, flags: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lockgate"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(redis.gateway_flags())
        .args(flags)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
