//! TLS to the gateway: client certificates naming principals, certificates reloaded on `SIGHUP`, plain HTTP to the TLS port, `lockgate run` over TLS; a CA made at test time by `scripts/make-certs.sh`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use serde_json::json;
use tempfile::TempDir;

use crate::helpers::security::*;
use crate::helpers::{EventStream, RedisServer, eventually, sample, send_signal};

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
            gateway
                .logs()
                .contains("not reloaded: the settings in force are unchanged")
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
        logs.contains("lockgate::audit") && logs.contains("reloaded"),
        "{logs}"
    );

    // A certificate reload: new handshakes get the new certificate, and a
    // broken one leaves the old in force.
    let server_pem = std::fs::read(certs.join("server.pem")).unwrap();
    // All or nothing: the permissions file narrowed in the same reload is
    // not put in force either.
    std::fs::write(certs.join("server.pem"), b"not a certificate").unwrap();
    std::fs::write(&acl, two_services()).unwrap();
    send_signal(gateway.child.id(), "-HUP");
    assert!(
        eventually(Duration::from_secs(5), || async {
            gateway.logs().contains("the TLS files")
        })
        .await
    );
    assert_eq!(acquire("orders:4").send().await.unwrap().status(), 201);
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

/// The certificate's notAfter, as openssl reads it, in Unix seconds.
fn not_after(pem: &Path) -> i64 {
    let out = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-enddate", "-in"])
        .arg(pem)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let date = text.trim().strip_prefix("notAfter=").unwrap().to_owned();
    let out = std::process::Command::new("date")
        .args(["-u", "-d", &date, "+%s"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn the_listeners_certificate_expiry_is_a_metric_that_follows_a_reload() {
    let redis = RedisServer::start_single().await;
    let dir = TempDir::new().unwrap();
    let certs = dir.path().join("certs");
    let make = |days: &str| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/make-certs.sh");
        let out = std::process::Command::new(script)
            .arg(&certs)
            .env("LOCKGATE_CERT_DAYS", days)
            .output()
            .unwrap();
        assert!(out.status.success(), "make-certs.sh: {out:?}");
    };
    make("20");
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
    let client = tls_client(&certs, None);
    let expiry = || async {
        let text = client
            .get(gateway.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        sample(
            &text,
            "lockgate_tls_certificate_expiry_timestamp_seconds{certificate=\"listener\"}",
        )
        .map(|value| value.parse::<i64>().unwrap())
    };
    let first = not_after(&certs.join("server.pem"));
    assert_eq!(expiry().await, Some(first));

    // A certificate for 400 days (of the same CA) put in force by SIGHUP.
    std::fs::remove_file(certs.join("server.pem")).unwrap();
    std::fs::remove_file(certs.join("server-key.pem")).unwrap();
    make("400");
    let renewed = not_after(&certs.join("server.pem"));
    assert!(renewed > first + 300 * 86_400);
    send_signal(gateway.child.id(), "-HUP");
    assert!(
        eventually(Duration::from_secs(5), || async {
            expiry().await == Some(renewed)
        })
        .await,
        "the metric still says {:?}",
        expiry().await
    );
}
