//! Who may do what: permissions by key prefix, secrets from files, the audit trail, TLS to the gateway (with client certificates and reloads) and to Redis, with a CA made at test time by `scripts/make-certs.sh`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::helpers::{
    EventStream, Nginx, RedisServer, TestApp, assert_problem, eventually, free_port, send_signal,
};

const BILLING_KEY: &str = "billing-secret-key";
const OPS_KEY: &str = "ops-secret-key";
const ADMIN: &str = "admin-secret-token";

/// A permissions file for two services: billing locks its own keys and
/// reads shared ones; ops (by API key or client certificate) does anything.
fn two_services() -> String {
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

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a test file");
    path
}

/// Sends `request` with `Authorization: Bearer <key>`.
async fn as_(key: &str, request: reqwest::RequestBuilder) -> reqwest::Response {
    request.bearer_auth(key).send().await.expect("request sent")
}

#[tokio::test]
async fn the_longest_prefix_decides_and_a_refusal_reveals_nothing() {
    let redis = RedisServer::start().await;
    let dir = TempDir::new().unwrap();
    let acl = write(dir.path(), "acl.toml", &two_services());
    let app = TestApp::spawn_with(&redis, &["--acl-file", acl.to_str().unwrap()]).await;
    let http = &app.http;
    let acquire = |key: &str| http.post(app.url("/locks")).json(&json!({"key": key}));

    // Its own prefix: granted.
    let own = as_(BILLING_KEY, acquire("billing:1")).await;
    assert_eq!(own.status(), StatusCode::CREATED);
    let own: Value = own.json().await.unwrap();

    // Another's: refused, naming principal, permission and key, the same
    // whether the lock is free or held (by ops).
    let free = assert_problem(
        as_(BILLING_KEY, acquire("orders:1")).await,
        403,
        "forbidden",
    )
    .await;
    assert_eq!(free["key"], "orders:1");
    let detail = free["detail"].as_str().unwrap();
    assert!(detail.contains("billing") && detail.contains("lock") && detail.contains("orders:1"));
    let held = as_(OPS_KEY, acquire("orders:1")).await;
    assert_eq!(held.status(), StatusCode::CREATED);
    let held: Value = held.json().await.unwrap();
    let refused = assert_problem(
        as_(BILLING_KEY, acquire("orders:1")).await,
        403,
        "forbidden",
    )
    .await;
    assert_eq!(refused, free, "a refusal says nothing of the lock");

    // Read only under billing:audit: (the longer prefix wins) and shared:.
    assert_problem(
        as_(BILLING_KEY, acquire("billing:audit:1")).await,
        403,
        "forbidden",
    )
    .await;
    let inspect = |key: &str| http.get(app.url(&format!("/locks/{key}")));
    assert_eq!(
        as_(BILLING_KEY, inspect("billing:audit:1")).await.status(),
        404
    );
    assert_eq!(as_(BILLING_KEY, inspect("shared:x")).await.status(), 404);
    let refused = assert_problem(
        as_(BILLING_KEY, inspect("orders:1")).await,
        403,
        "forbidden",
    )
    .await;
    assert!(refused["detail"].as_str().unwrap().contains("read"));
    let watch = http.get(app.url("/locks/orders:1/events"));
    assert_problem(as_(BILLING_KEY, watch).await, 403, "forbidden").await;

    // Release, extend, value, mode of another's key: refused before the token counts.
    let token = held["token"].as_str().unwrap();
    let release = http
        .delete(app.url("/locks/orders:1"))
        .header("Lock-Token", token);
    assert_problem(as_(BILLING_KEY, release).await, 403, "forbidden").await;
    let extend = http
        .put(app.url("/locks/orders:1/ttl"))
        .json(&json!({"token": token, "ttl_ms": 5000}));
    assert_problem(as_(BILLING_KEY, extend).await, 403, "forbidden").await;
    let value = http
        .put(app.url("/locks/orders:1/value"))
        .json(&json!({"token": token, "value": "x"}));
    assert_problem(as_(BILLING_KEY, value).await, 403, "forbidden").await;
    let mode = http
        .put(app.url("/locks/orders:1/mode"))
        .json(&json!({"token": token, "mode": "shared"}));
    assert_problem(as_(BILLING_KEY, mode).await, 403, "forbidden").await;

    // A batch needs lock on every key; a refused one holds nothing.
    let batch = http
        .post(app.url("/locks/batch"))
        .json(&json!({"locks": [{"key": "billing:2"}, {"key": "orders:2"}]}));
    assert_problem(as_(BILLING_KEY, batch).await, 403, "forbidden").await;
    assert_eq!(as_(OPS_KEY, inspect("billing:2")).await.status(), 404);

    // The listing shows only what may be read.
    assert_eq!(as_(OPS_KEY, acquire("shared:x")).await.status(), 201);
    let list: Value = as_(BILLING_KEY, http.get(app.url("/locks?prefix=")))
        .await
        .json()
        .await
        .unwrap();
    let mut keys: Vec<&str> = list["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|lock| lock["key"].as_str().unwrap())
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["billing:1", "shared:x"]);
    let all: Value = as_(OPS_KEY, http.get(app.url("/locks?prefix=")))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(all["locks"].as_array().unwrap().len(), 3);

    // Revoking needs revoke: billing has none, ops has.
    let revoke = || http.delete(app.url("/locks/billing:1?force=true"));
    assert_problem(as_(BILLING_KEY, revoke()).await, 403, "forbidden").await;
    assert_eq!(as_(OPS_KEY, revoke()).await.status(), 204);
    let gone = http
        .delete(app.url("/locks/billing:1"))
        .header("Lock-Token", own["token"].as_str().unwrap());
    assert_eq!(as_(BILLING_KEY, gone).await.status(), 404);

    // No known principal: 401.
    assert_problem(
        as_("not-a-key", acquire("billing:3")).await,
        401,
        "unauthorized",
    )
    .await;
    let anonymous = acquire("billing:3").send().await.unwrap();
    assert_problem(anonymous, 401, "unauthorized").await;
    app.stop().await;
}

#[tokio::test]
async fn a_session_belongs_to_the_principal_that_opened_it() {
    let redis = RedisServer::start().await;
    let dir = TempDir::new().unwrap();
    let acl = write(dir.path(), "acl.toml", &two_services());
    let app = TestApp::spawn_with(&redis, &["--acl-file", acl.to_str().unwrap()]).await;
    let http = &app.http;
    let opened = as_(
        BILLING_KEY,
        http.post(app.url("/sessions")).json(&json!({})),
    )
    .await;
    assert_eq!(opened.status(), StatusCode::CREATED);
    let id = opened.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let session = app.url(&format!("/sessions/{id}"));
    for request in [
        http.put(&session),
        http.get(&session),
        http.delete(&session),
    ] {
        assert_problem(as_(OPS_KEY, request).await, 403, "forbidden").await;
    }
    let attach = |key: &str| {
        http.post(app.url("/locks"))
            .json(&json!({"key": key, "session": id}))
    };
    assert_problem(as_(OPS_KEY, attach("orders:7")).await, 403, "forbidden").await;
    let batch = http
        .post(app.url("/locks/batch"))
        .json(&json!({"locks": [{"key": "orders:8"}], "session": id}));
    assert_problem(as_(OPS_KEY, batch).await, 403, "forbidden").await;
    // Its owner uses it as ever.
    assert_eq!(as_(BILLING_KEY, attach("billing:7")).await.status(), 201);
    assert_eq!(as_(BILLING_KEY, http.put(&session)).await.status(), 200);
    assert_eq!(as_(BILLING_KEY, http.delete(&session)).await.status(), 204);
    app.stop().await;
}

#[tokio::test]
async fn acl_hash_and_check() {
    let mut hash = Command::new(env!("CARGO_BIN_EXE_lockgate"))
        .args(["acl", "hash"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    hash.stdin.take().unwrap().write_all(b"test\n").unwrap();
    let out = hash.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    );
    let dir = TempDir::new().unwrap();
    let good = write(dir.path(), "good.toml", &two_services());
    let check = |path: &Path| {
        Command::new(env!("CARGO_BIN_EXE_lockgate"))
            .args(["acl", "check"])
            .arg(path)
            .output()
            .unwrap()
    };
    let out = check(&good);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).ends_with(": 2 principals\n"),
        "{out:?}"
    );
    let bad = write(
        dir.path(),
        "bad.toml",
        "[principals.a]\nclient_cert = \"a\"\nrules = [ { prefix = \"x\", allow = [\"write\"] } ]\n",
    );
    let out = check(&bad);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 3"),
        "{out:?}"
    );
}

/// The real binary, serving on a free port, its log in a file; killed when dropped.
struct Served {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Served {
    /// Starts `lockgate serve` with `flags` and waits until its port answers.
    fn start(redis_flags: &[String], flags: &[&str], log_dir: &Path) -> Self {
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

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn url(&self, path: &str) -> String {
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
fn certificates(dir: &Path, clients: &[&str]) -> PathBuf {
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
fn tls_client(certs: &Path, client: Option<&str>) -> reqwest::Client {
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
fn curl(certs: &Path, client: Option<&str>, extra: &[&str], url: &str) -> (i32, String) {
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

#[tokio::test]
async fn tls_with_client_certificates_names_the_principal_and_reloads_on_sighup() {
    let redis = RedisServer::start_single().await;
    let dir = TempDir::new().unwrap();
    let certs = certificates(dir.path(), &["ops.internal", "billing", "stranger"]);
    let acl = write(dir.path(), "acl.toml", &two_services());
    let pem = |name: &str| certs.join(name).to_string_lossy().into_owned();
    let mut gateway = Served::start(
        &redis.gateway_flags(),
        &[
            "--tls-cert",
            &pem("server.pem"),
            "--tls-key",
            &pem("server-key.pem"),
            "--tls-client-ca",
            &pem("ca.pem"),
            "--acl-file",
            acl.to_str().unwrap(),
            "--admin-token",
            ADMIN,
        ],
        dir.path(),
    );

    // HTTP/2 and HTTP/1.1 by ALPN; the certificate names the principal.
    let list = gateway.url("/locks?prefix=");
    assert_eq!(
        curl(&certs, Some("ops.internal"), &["--http2"], &list),
        (0, "2 200".into())
    );
    assert_eq!(
        curl(&certs, Some("billing"), &["--http1.1"], &list),
        (0, "1.1 200".into())
    );
    // A certificate that names no principal: 401; none at all: no handshake.
    assert_eq!(
        curl(&certs, Some("stranger"), &[], &list),
        (0, "2 401".into())
    );
    assert_ne!(curl(&certs, None, &[], &list).0, 0);
    // TLS 1.1 and older are refused.
    assert_ne!(
        curl(
            &certs,
            Some("ops.internal"),
            &["--tlsv1.1", "--tls-max", "1.1"],
            &list
        )
        .0,
        0
    );

    let billing = tls_client(&certs, Some("billing"));
    let acquire = |key: &str| {
        billing
            .post(gateway.url("/locks"))
            .json(&json!({"key": key, "ttl_ms": 1500}))
    };
    assert_eq!(acquire("billing:1").send().await.unwrap().status(), 201);
    assert_eq!(acquire("orders:1").send().await.unwrap().status(), 403);

    // A streamed lock held across the reloads.
    let stream = billing
        .post(gateway.url("/locks"))
        .header("Accept", "text/event-stream")
        .json(&json!({"key": "billing:streamed", "ttl_ms": 300}))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let mut events = EventStream::of(stream);
    events.until("acquired", Duration::from_secs(5)).await;

    // A file that does not parse leaves the old one in force.
    std::fs::write(&acl, "[principals.billing\n").unwrap();
    send_signal(gateway.child.id(), "-HUP");
    assert!(
        eventually(Duration::from_secs(5), || async {
            gateway.logs().contains("permissions file not reloaded")
        })
        .await,
        "{}",
        gateway.logs()
    );
    assert_eq!(acquire("billing:2").send().await.unwrap().status(), 201);
    assert_eq!(acquire("orders:2").send().await.unwrap().status(), 403);

    // A good one takes effect for the next request.
    let wider = two_services().replace(
        r#"{ prefix = "shared:", allow = ["read"] }"#,
        r#"{ prefix = "shared:", allow = ["read"] }, { prefix = "orders:", allow = ["lock"] }"#,
    );
    std::fs::write(&acl, wider).unwrap();
    send_signal(gateway.child.id(), "-HUP");
    assert!(
        eventually(Duration::from_secs(5), || async {
            acquire("orders:3").send().await.unwrap().status() == 201
        })
        .await
    );
    // The streamed lock carried on through both reloads.
    events.until("renewed", Duration::from_secs(2)).await;
    let logs = gateway.logs();
    assert!(
        logs.contains("lockgate::audit") && logs.contains("reload-permissions"),
        "{logs}"
    );

    // A certificate reload: new handshakes get the new certificate, and a
    // broken one leaves the old in force.
    let server_pem = std::fs::read(certs.join("server.pem")).unwrap();
    std::fs::write(certs.join("server.pem"), b"not a certificate").unwrap();
    send_signal(gateway.child.id(), "-HUP");
    assert!(
        eventually(Duration::from_secs(5), || async {
            gateway.logs().contains("TLS files not reloaded")
        })
        .await
    );
    assert_eq!(
        curl(&certs, Some("ops.internal"), &[], &list),
        (0, "2 200".into())
    );
    std::fs::write(certs.join("server.pem"), server_pem).unwrap();
    events.until("renewed", Duration::from_secs(2)).await;
    assert!(gateway.child.try_wait().unwrap().is_none(), "still serving");
}

#[tokio::test]
async fn plain_http_to_the_tls_port_gets_no_answer_and_no_log_flood() {
    let redis = RedisServer::start_single().await;
    let dir = TempDir::new().unwrap();
    let certs = certificates(dir.path(), &[]);
    let pem = |name: &str| certs.join(name).to_string_lossy().into_owned();
    let gateway = Served::start(
        &redis.gateway_flags(),
        &[
            "--tls-cert",
            &pem("server.pem"),
            "--tls-key",
            &pem("server-key.pem"),
        ],
        dir.path(),
    );
    let before = gateway.logs().len();
    for _ in 0..200 {
        let mut stream = TcpStream::connect(gateway.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        assert!(
            !answer.starts_with(b"HTTP/"),
            "an HTTP answer on the TLS port"
        );
    }
    let grown = gateway.logs().len() - before;
    assert!(
        grown < 2_000,
        "200 plain requests wrote {grown} bytes of log"
    );
    // And HTTPS works.
    assert_eq!(
        curl(&certs, None, &[], &gateway.url("/healthz")),
        (0, "2 200".into())
    );
}

/// `lockgate serve` with `flags`: its exit status and what it wrote.
fn serve_refused(redis: &RedisServer, flags: &[&str]) -> (Option<i32>, String) {
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

#[tokio::test]
async fn missing_unreadable_or_mismatched_files_stop_serve_with_status_78() {
    let redis = RedisServer::start_single().await;
    let dir = TempDir::new().unwrap();
    let certs = certificates(dir.path(), &["billing"]);
    let pem = |name: &str| certs.join(name).to_string_lossy().into_owned();
    let bad_acl = write(dir.path(), "bad.toml", "[principals.x]\nrules = 3\n");
    let missing = dir
        .path()
        .join("missing.pem")
        .to_string_lossy()
        .into_owned();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "--tls-cert".into(),
                missing.clone(),
                "--tls-key".into(),
                pem("server-key.pem"),
            ],
            "missing.pem",
        ),
        (
            vec![
                "--tls-cert".into(),
                pem("server.pem"),
                "--tls-key".into(),
                missing.clone(),
            ],
            "missing.pem",
        ),
        (
            vec![
                "--tls-cert".into(),
                pem("server.pem"),
                "--tls-key".into(),
                pem("billing-key.pem"),
            ],
            "not the key",
        ),
        (
            vec![
                "--tls-cert".into(),
                pem("server.pem"),
                "--tls-key".into(),
                pem("server-key.pem"),
                "--tls-client-ca".into(),
                missing.clone(),
            ],
            "missing.pem",
        ),
        (
            vec![
                "--tls-cert".into(),
                pem("server-key.pem"),
                "--tls-key".into(),
                pem("server-key.pem"),
            ],
            "no PEM certificate",
        ),
        (vec!["--acl-file".into(), missing.clone()], "missing.pem"),
        (
            vec!["--acl-file".into(), bad_acl.to_string_lossy().into_owned()],
            "line 2",
        ),
        (
            vec!["--admin-token-file".into(), missing.clone()],
            "missing.pem",
        ),
    ];
    for (flags, reason) in cases {
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let (status, stderr) = serve_refused(&redis, &flags);
        assert_eq!(status, Some(78), "{flags:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(reason), "{flags:?}: {stderr}");
    }
}

#[tokio::test]
async fn secrets_come_from_files_and_are_never_logged() {
    let password = "redis-pass-from-file";
    let redis = RedisServer::start_single().await;
    // Set once the server is up: the harness's readiness check has no password.
    let mut admin = redis.connection().await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg(password)
        .query_async(&mut admin)
        .await
        .unwrap();
    let dir = TempDir::new().unwrap();
    let admin_file = write(dir.path(), "admin", &format!("{ADMIN}\n"));
    let keys_file = write(
        dir.path(),
        "keys",
        &format!("# services\n{BILLING_KEY}\n{OPS_KEY}\n"),
    );
    let password_file = write(dir.path(), "redis-password", password);
    let redis_url = vec!["--redis-url".to_owned(), redis.url()];
    let gateway = Served::start(
        &redis_url,
        &[
            "--admin-token-file",
            admin_file.to_str().unwrap(),
            "--api-keys-file",
            keys_file.to_str().unwrap(),
            "--redis-password-file",
            password_file.to_str().unwrap(),
            "--log-format",
            "json",
        ],
        dir.path(),
    );
    let http = reqwest::Client::new();
    let url = |path: &str| format!("http://{}{path}", gateway.addr);
    let acquire = || http.post(url("/locks")).json(&json!({"key": "files:1"}));
    assert_eq!(acquire().send().await.unwrap().status(), 401);
    let granted = as_(OPS_KEY, acquire()).await;
    assert_eq!(granted.status(), 201, "the password reached Redis");
    assert_eq!(
        as_(BILLING_KEY, http.get(url("/locks/files:1")))
            .await
            .status(),
        200
    );
    // The admin token from its file revokes; the audit trail has it.
    let revoke = http.delete(url("/locks/files:1?force=true"));
    assert_eq!(as_(ADMIN, revoke).await.status(), 204);
    // A flood of refusals writes about a line a second.
    for _ in 0..300 {
        let _ = as_("wrong", acquire()).await;
    }
    let logs = gateway.logs();
    let audit: Vec<&str> = logs
        .lines()
        .filter(|line| line.contains("lockgate::audit"))
        .collect();
    assert!(
        audit
            .iter()
            .any(|line| line.contains("\"revoke\"") && line.contains("revoked")),
        "{logs}"
    );
    let refusals = audit
        .iter()
        .filter(|line| line.contains("authenticate"))
        .count();
    assert!(
        (1..=5).contains(&refusals),
        "{refusals} refusal lines for 300 refusals"
    );
    for secret in [password, ADMIN, BILLING_KEY, OPS_KEY] {
        assert!(!logs.contains(secret), "the log shows {secret}");
    }
}

#[tokio::test]
async fn lockgate_run_over_tls_with_a_client_certificate() {
    let redis = RedisServer::start_single().await;
    let dir = TempDir::new().unwrap();
    let certs = certificates(dir.path(), &["ops.internal"]);
    let acl = write(dir.path(), "acl.toml", &two_services());
    let pem = |name: &str| certs.join(name).to_string_lossy().into_owned();
    let gateway = Served::start(
        &redis.gateway_flags(),
        &[
            "--tls-cert",
            &pem("server.pem"),
            "--tls-key",
            &pem("server-key.pem"),
            "--tls-client-ca",
            &pem("ca.pem"),
            "--acl-file",
            acl.to_str().unwrap(),
        ],
        dir.path(),
    );
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_lockgate"))
        .args(["run", "--url", &gateway.url(""), "--ca", &pem("ca.pem")])
        .args([
            "--cert",
            &pem("ops.internal.pem"),
            "--cert-key",
            &pem("ops.internal-key.pem"),
        ])
        .args([
            "jobs:nightly",
            "--",
            "sh",
            "-c",
            "echo $LOCKGATE_FENCING_TOKEN",
        ])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}\n{}", gateway.logs());
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u64>()
            .is_ok()
    );
    // Without the client certificate, the gateway cannot be reached (69).
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_lockgate"))
        .args(["run", "--url", &gateway.url(""), "--ca", &pem("ca.pem")])
        .args(["jobs:nightly", "--", "true"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(69), "{out:?}");
}

/// A waiter on `key` (30 s lease, waiting up to 10 s), answered in a task.
fn tls_waiter(app: &TestApp, key: &str) -> tokio::task::JoinHandle<(StatusCode, Value, Instant)> {
    let request = app
        .http
        .post(app.url("/locks"))
        .json(&json!({"key": key, "ttl_ms": 30_000, "wait_ms": 10_000}));
    tokio::spawn(async move {
        let response = request.send().await.unwrap();
        let answered = Instant::now();
        (response.status(), response.json().await.unwrap(), answered)
    })
}

/// Takes `key`, queues a waiter behind it, releases it: the waiter is
/// granted at once (woken by pub/sub over the same TLS Redis).
async fn take_wait_release(app: &TestApp, key: &str, subscribed: impl AsyncFn() -> bool) {
    let holder = app.take(key, 30_000).await;
    let waiter = tls_waiter(app, key);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !subscribed().await {
        assert!(Instant::now() < deadline, "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let released_at = Instant::now();
    assert_eq!(
        app.release(key, &holder.token).await.status(),
        StatusCode::NO_CONTENT
    );
    let (status, body, answered) = waiter.await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(body["fencing_token"].as_u64().unwrap() > holder.fencing_token);
    // Generous for a loaded machine; a waiter nobody woke would wait its 10 s.
    let woke_after = answered - released_at;
    assert!(
        woke_after < Duration::from_secs(2),
        "woken {woke_after:?} after the release"
    );
    let token = body["token"].as_str().unwrap();
    assert_eq!(
        app.release(key, token).await.status(),
        StatusCode::NO_CONTENT
    );
}

#[tokio::test]
async fn redis_over_tls_with_a_client_certificate_grants_and_wakes_waiters() {
    let dir = TempDir::new().unwrap();
    let certs = certificates(dir.path(), &["gateway"]);
    let redis = RedisServer::start_tls(&certs).await;
    // Redis speaks TLS only, and only to clients with a certificate.
    let url = redis.url();
    let plain = redis::Client::open(url.replace("rediss://", "redis://")).unwrap();
    assert!(plain.get_multiplexed_async_connection().await.is_err());
    let anonymous = redis::Client::build_with_tls(
        url.as_str(),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(std::fs::read(certs.join("ca.pem")).unwrap()),
        },
    )
    .unwrap();
    let refused = async {
        let mut conn = anonymous.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await
    };
    assert!(
        refused.await.is_err(),
        "a client without a certificate was served"
    );

    for pool in ["shared", "checkout"] {
        let app = TestApp::spawn_with(&redis, &["--redis-pool", pool]).await;
        let key = format!("tls:{pool}");
        let channels = format!("lockgate:granted:{{{key}}}:*");
        take_wait_release(&app, &key, async || {
            let subscribed: Vec<String> = redis::cmd("PUBSUB")
                .arg("CHANNELS")
                .arg(&channels)
                .query_async(&mut redis.connection().await)
                .await
                .unwrap();
            !subscribed.is_empty()
        })
        .await;
        assert_eq!(app.get("/readyz").await.status(), StatusCode::OK);
        app.stop().await;
    }
}

#[tokio::test]
async fn a_cluster_over_tls_grants_and_wakes_waiters() {
    let dir = TempDir::new().unwrap();
    let certs = certificates(dir.path(), &["gateway"]);
    let redis = RedisServer::cluster_tls(3, &certs).await;
    let app = TestApp::spawn(&redis).await;
    // One key on each master: every node is reached over TLS.
    for key in redis.one_key_per_master(3).await {
        let channel = format!("lockgate:granted:{{{key}}}:*");
        take_wait_release(&app, &key, async || {
            let mut subscribed = 0;
            for index in 0..3 {
                let channels: Vec<String> = redis::cmd("PUBSUB")
                    .arg("SHARDCHANNELS")
                    .arg(&channel)
                    .query_async(&mut redis.node(index).connection().await)
                    .await
                    .unwrap();
                subscribed += channels.len();
            }
            subscribed > 0
        })
        .await;
    }
    assert_eq!(app.get("/readyz").await.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_redis_certificate_from_another_ca_or_none_of_ours_stops_serve_with_status_78() {
    let dir = TempDir::new().unwrap();
    let certs = certificates(dir.path(), &["gateway"]);
    let other = TempDir::new().unwrap();
    let other_certs = certificates(other.path(), &["gateway"]);
    let redis = RedisServer::start_tls(&certs).await;
    let pem = |certs: &Path, name: &str| certs.join(name).to_string_lossy().into_owned();
    let url = redis.url();
    let plain_url = url.replace("rediss://", "redis://");
    // Serve's flags for Redis at `url`, trusting the CA file `ca`, with the
    // gateway's certificate from the folder `client` when there is one.
    let flags = |url: &str, ca: String, client: Option<&Path>| {
        let mut flags = vec![
            "--redis-url".to_string(),
            url.to_string(),
            "--redis-tls-ca".to_string(),
            ca,
        ];
        if let Some(client) = client {
            flags.extend([
                "--redis-tls-cert".to_string(),
                pem(client, "gateway.pem"),
                "--redis-tls-key".to_string(),
                pem(client, "gateway-key.pem"),
            ]);
        }
        flags
    };
    let cases = [
        // Redis's certificate is not signed by the CA we trust.
        (
            flags(&url, pem(&other_certs, "ca.pem"), Some(&certs)),
            "certificate",
        ),
        // Ours is not signed by the CA Redis trusts.
        (
            flags(&url, pem(&certs, "ca.pem"), Some(&other_certs)),
            "certificate",
        ),
        // None at all, to a Redis that requires one.
        (flags(&url, pem(&certs, "ca.pem"), None), "certificate"),
        (flags(&plain_url, pem(&certs, "ca.pem"), None), "rediss://"),
        (flags(&url, pem(&certs, "missing.pem"), None), "missing.pem"),
    ];
    for (flags, reason) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_lockgate"))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(&flags)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{flags:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(reason), "{flags:?}: {stderr}");
    }
}

// Multi-threaded: the curl calls block their thread, and the gateways
// behind nginx run on this test's runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_terminates_tls_for_clients_over_http2() {
    let redis = RedisServer::start_single().await;
    let dir = TempDir::new().unwrap();
    let certs = certificates(dir.path(), &[]);
    let apps = [
        TestApp::spawn(&redis).await,
        TestApp::spawn(&redis).await,
        TestApp::spawn(&redis).await,
    ];
    let nginx = Nginx::start_tls([apps[0].addr, apps[1].addr, apps[2].addr], &certs).await;
    assert!(nginx.url("/").starts_with("https://"));
    // HTTP/2 and HTTP/1.1 by ALPN, to plain-HTTP instances behind it.
    let locks = nginx.url("/locks?prefix=");
    assert_eq!(
        curl(&certs, None, &["--http2"], &locks),
        (0, "2 200".into())
    );
    assert_eq!(
        curl(&certs, None, &["--http1.1"], &locks),
        (0, "1.1 200".into())
    );
    // A lock through it, held and given back.
    let client = tls_client(&certs, None);
    let granted = client
        .post(nginx.url("/locks"))
        .json(&json!({"key": "tls:nginx", "ttl_ms": 10_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(granted.status(), StatusCode::CREATED);
    let body: Value = granted.json().await.unwrap();
    let released = client
        .delete(nginx.url("/locks/tls:nginx"))
        .query(&[("token", body["token"].as_str().unwrap())])
        .send()
        .await
        .unwrap();
    assert_eq!(released.status(), StatusCode::NO_CONTENT);
}

// Multi-threaded: the curl calls block their thread, and the gateways
// behind nginx run on this test's runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_passes_tls_through_to_gateways_that_check_client_certificates() {
    let redis = RedisServer::start_single().await;
    let dir = TempDir::new().unwrap();
    let certs = certificates(dir.path(), &["ops.internal", "billing"]);
    let acl = write(dir.path(), "acl.toml", &two_services());
    let pem = |name: &str| certs.join(name).to_string_lossy().into_owned();
    let flags = [
        "--tls-cert",
        &pem("server.pem"),
        "--tls-key",
        &pem("server-key.pem"),
        "--tls-client-ca",
        &pem("ca.pem"),
        "--acl-file",
        acl.to_str().unwrap(),
    ];
    let apps = [
        TestApp::spawn_with(&redis, &flags).await,
        TestApp::spawn_with(&redis, &flags).await,
        TestApp::spawn_with(&redis, &flags).await,
    ];
    let nginx = Nginx::start_passthrough([apps[0].addr, apps[1].addr, apps[2].addr]).await;
    // The instance sees the client's certificate, so its principal: ops
    // may lock anything, billing only its own keys.
    let ops = tls_client(&certs, Some("ops.internal"));
    let billing = tls_client(&certs, Some("billing"));
    for round in 0..3 {
        let key = format!("jobs:passthrough-{round}");
        let granted = ops
            .post(nginx.url("/locks"))
            .json(&json!({"key": key, "ttl_ms": 10_000}))
            .send()
            .await
            .unwrap();
        assert_eq!(granted.status(), StatusCode::CREATED);
        let refused = billing
            .post(nginx.url("/locks"))
            .json(&json!({"key": key, "ttl_ms": 10_000}))
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    }
    // HTTP/2 by ALPN with the instance itself, through the stream proxy.
    assert_eq!(
        curl(
            &certs,
            Some("ops.internal"),
            &["--http2"],
            &nginx.url("/healthz")
        ),
        (0, "2 200".into())
    );
    // Without a certificate, no handshake.
    assert_ne!(curl(&certs, None, &[], &nginx.url("/healthz")).0, 0);
}

/// What a permissions check costs: lock cycles (acquire, release) through a
/// gateway with a 1000-rule permissions file against one with an API key
/// only, on the same Redis, in alternating rounds. A measurement, not a
/// check: `cargo test --test api security::acl_cost -- --ignored --nocapture` (figures
/// in docs/security.md).
#[tokio::test]
#[ignore = "a measurement; run on demand"]
async fn acl_cost_with_1000_rules() {
    let redis = RedisServer::start_single().await;
    let dir = TempDir::new().unwrap();
    let mut rules = String::from("rules = [\n");
    for index in 0..999 {
        rules.push_str(&format!(
            "  {{ prefix = \"svc{index}:part{}:\", allow = [\"read\"] }},\n",
            index % 7
        ));
    }
    rules.push_str("  { prefix = \"bench:\", allow = [\"read\", \"lock\"] } ]\n");
    let file = format!(
        "[principals.bench]\napi_key_sha256 = \"{}\"\n{rules}",
        lockgate::acl::api_key_sha256(BILLING_KEY)
    );
    let acl = write(dir.path(), "acl.toml", &file);
    let with_acl = TestApp::spawn_with(&redis, &["--acl-file", acl.to_str().unwrap()]).await;
    let without = TestApp::spawn_with(&redis, &["--api-keys", BILLING_KEY]).await;
    let cycle = |app: &TestApp, key: String| {
        let http = app.http.clone();
        let url = app.url("");
        async move {
            let grant: Value = as_(
                BILLING_KEY,
                http.post(format!("{url}/locks")).json(&json!({"key": key})),
            )
            .await
            .json()
            .await
            .unwrap();
            let release = http
                .delete(format!("{url}/locks/{key}"))
                .header("Lock-Token", grant["token"].as_str().unwrap());
            assert_eq!(as_(BILLING_KEY, release).await.status(), 204);
        }
    };
    let (mut acl_total, mut plain_total) = (Duration::ZERO, Duration::ZERO);
    let rounds = 20;
    let per_round = 200;
    for round in 0..rounds {
        for (app, total) in [(&with_acl, &mut acl_total), (&without, &mut plain_total)] {
            let started = Instant::now();
            for index in 0..per_round {
                cycle(app, format!("bench:{round}:{index}")).await;
            }
            *total += started.elapsed();
        }
    }
    let cycles = f64::from(rounds * per_round);
    let acl_us = acl_total.as_secs_f64() * 1e6 / cycles;
    let plain_us = plain_total.as_secs_f64() * 1e6 / cycles;
    println!(
        "lock cycle: {acl_us:.1} µs with 1000 rules, {plain_us:.1} µs with an API key only ({:+.2}%)",
        (acl_us / plain_us - 1.0) * 100.0
    );
    with_acl.stop().await;
    without.stop().await;
}
