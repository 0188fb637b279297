//! Running as a systemd service, without systemd: the notifications on a `NOTIFY_SOCKET` the test opens, secrets from a credentials directory, `lockgate health`, and the shipped unit checked by `systemd-analyze` (`verify`, and `security` at most 1.2).

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::helpers::{GatewayProcess, RedisServer, free_port, sample, send_signal};

const UNIT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/lockgate.service");

/// The next notification on `socket`, at most `within` from now.
fn next_message(socket: &UnixDatagram, within: Duration) -> Option<String> {
    socket.set_read_timeout(Some(within)).unwrap();
    let mut buffer = [0; 512];
    let read = socket.recv(&mut buffer).ok()?;
    Some(String::from_utf8_lossy(&buffer[..read]).into_owned())
}

#[tokio::test]
async fn the_service_manager_hears_ready_once_redis_answers_then_the_watchdog_then_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify");
    let socket = UnixDatagram::bind(&path).unwrap();
    // Redis is not there yet: the gateway serves (503s) but is not ready.
    let mut redis = RedisServer::start_single().await;
    let port = redis.node(0).port;
    redis.kill();
    let listen = format!("127.0.0.1:{}", free_port());
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut gateway = Command::new(env!("CARGO_BIN_EXE_lockgate"))
        .args(["serve", "--listen", &listen])
        .args(["--redis-url", &format!("redis://127.0.0.1:{port}")])
        .args(["--redis-timeout-ms", "300"])
        .env("NOTIFY_SOCKET", &path)
        .env("WATCHDOG_USEC", "400000")
        .env_remove("WATCHDOG_PID")
        .env_remove("RUST_LOG")
        .stdout(log.reopen().unwrap())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    let early = next_message(&socket, Duration::from_millis(1500));
    assert_eq!(early, None, "notified before Redis answered");

    redis.restart().await;
    let ready = next_message(&socket, Duration::from_secs(5)).expect("no READY=1");
    assert_eq!(ready, format!("READY=1\nSTATUS=serving on {listen}"));
    let libraries: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
    assert_eq!(libraries.len(), 1, "ready before the library was loaded");

    // Every half WATCHDOG_USEC (200 ms): a few within a second.
    let started = Instant::now();
    let mut keepalives = 0;
    while started.elapsed() < Duration::from_secs(1) {
        if next_message(&socket, Duration::from_millis(500)).as_deref() == Some("WATCHDOG=1") {
            keepalives += 1;
        }
    }
    assert!(
        (3..=7).contains(&keepalives),
        "{keepalives} keepalives in a second"
    );

    send_signal(gateway.id(), "-TERM");
    let mut stopping = false;
    while let Some(message) = next_message(&socket, Duration::from_secs(2)) {
        if message == "STOPPING=1" {
            stopping = true;
            break;
        }
        assert_eq!(message, "WATCHDOG=1");
    }
    assert!(stopping, "no STOPPING=1");
    assert!(gateway.wait().unwrap().success());
    let logs = std::fs::read_to_string(log.path()).unwrap();
    assert!(!logs.contains("cannot notify"), "{logs}");
}

#[tokio::test]
async fn a_relative_secret_file_is_read_from_the_credentials_directory() {
    let redis = RedisServer::start().await;
    let credentials = tempfile::tempdir().unwrap();
    std::fs::write(
        credentials.path().join("admin-token"),
        "from-a-credential\n",
    )
    .unwrap();
    let gateway = GatewayProcess::spawn(
        &redis,
        &[],
        &[
            (
                "CREDENTIALS_DIRECTORY",
                credentials.path().to_str().unwrap(),
            ),
            ("LOCKGATE_ADMIN_TOKEN_FILE", "admin-token"),
        ],
    )
    .await;
    let admitted = gateway
        .http
        .get(gateway.url("/admin/instances"))
        .bearer_auth("from-a-credential")
        .send()
        .await
        .unwrap();
    assert_eq!(admitted.status(), 200);
    let refused = gateway
        .http
        .get(gateway.url("/admin/instances"))
        .bearer_auth("another")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
}

fn health(url: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lockgate"))
        .args(["health", "--url", url, "--timeout-ms", "2000"])
        .output()
        .unwrap()
}

#[tokio::test]
async fn lockgate_health_exits_0_when_ready_and_1_when_not_or_unreachable() {
    let mut redis = RedisServer::start_single().await;
    let gateway = GatewayProcess::spawn(&redis, &["--redis-timeout-ms", "300"], &[]).await;
    let ready = health(&gateway.url("/readyz"));
    assert_eq!(ready.status.code(), Some(0), "{ready:?}");

    redis.kill();
    let not_ready = tokio::task::spawn_blocking({
        let url = gateway.url("/readyz");
        move || health(&url)
    })
    .await
    .unwrap();
    assert_eq!(not_ready.status.code(), Some(1), "{not_ready:?}");
    let said = String::from_utf8_lossy(&not_ready.stderr);
    assert!(
        said.starts_with("lockgate health: not ready: ") && said.contains("503"),
        "{said}"
    );

    let nobody = health(&format!("http://127.0.0.1:{}/readyz", free_port()));
    assert_eq!(nobody.status.code(), Some(1), "{nobody:?}");
    assert!(String::from_utf8_lossy(&nobody.stderr).contains("no answer from"));
}

/// `systemd-analyze`, which the machine's systemd package ships (no
/// running systemd needed for these two).
fn systemd_analyze(args: &[&str], unit: &Path) -> std::process::Output {
    Command::new("systemd-analyze")
        .args(args)
        .arg(unit)
        .output()
        .expect("systemd-analyze (Debian's systemd package) is not installed")
}

#[test]
fn the_shipped_unit_verifies_and_is_confined_to_an_exposure_of_at_most_1_2() {
    // As installed: its ExecStart names the binary where the package puts
    // it; here, where this build is.
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("lockgate.service");
    let text = std::fs::read_to_string(UNIT).unwrap();
    assert!(
        text.contains("ExecStart=/usr/bin/lockgate serve --config /etc/lockgate/lockgate.toml")
    );
    std::fs::write(
        &unit,
        text.replace("/usr/bin/lockgate", env!("CARGO_BIN_EXE_lockgate")),
    )
    .unwrap();
    let verified = systemd_analyze(&["verify"], &unit);
    assert!(
        verified.status.success() && verified.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );

    // The threshold is in tenths: 12 is an exposure of 1.2.
    let security = systemd_analyze(&["security", "--offline=true", "--threshold=12"], &unit);
    let report = String::from_utf8_lossy(&security.stdout);
    assert!(security.status.success(), "{report}");
    let overall = report
        .lines()
        .find(|line| line.contains("Overall exposure level"))
        .expect("no overall exposure");
    let level: f64 = overall
        .split(": ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|level| level.parse().ok())
        .expect(overall);
    assert!(level <= 1.2, "{overall}");
}

/// SIGHUP puts the files in force together or not at all, and says which
/// in two series: `lockgate_config_last_reload_success` and its timestamp.
#[tokio::test]
async fn a_reload_that_is_refused_changes_nothing_and_the_metrics_say_so() {
    let redis = RedisServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("lockgate.toml");
    std::fs::write(&settings, "max_ttl_ms = 60000\n").unwrap();
    let gateway =
        GatewayProcess::spawn(&redis, &["--config", settings.to_str().unwrap()], &[]).await;
    let series = |name: &'static str| {
        let gateway = &gateway;
        async move {
            let text = gateway
                .http
                .get(gateway.url("/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            sample(&text, name).unwrap_or_else(|| panic!("no {name} in {text}"))
        }
    };
    assert_eq!(series("lockgate_config_last_reload_success").await, "1");
    let started: i64 = series("lockgate_config_last_reload_success_timestamp_seconds")
        .await
        .parse()
        .unwrap();

    // A settings file that no longer checks: refused, nothing changes.
    std::fs::write(&settings, "max_ttl_ms = \"soon\"\n").unwrap();
    send_signal(gateway.child.id(), "-HUP");
    let refused = crate::helpers::eventually(Duration::from_secs(5), || async {
        series("lockgate_config_last_reload_success").await == "0"
    })
    .await;
    assert!(refused, "{}", gateway.logs());
    assert!(
        gateway.logs().contains("not reloaded"),
        "{}",
        gateway.logs()
    );

    std::fs::write(&settings, "max_ttl_ms = 60000\n").unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    send_signal(gateway.child.id(), "-HUP");
    let took = crate::helpers::eventually(Duration::from_secs(5), || async {
        series("lockgate_config_last_reload_success").await == "1"
    })
    .await;
    assert!(took, "{}", gateway.logs());
    let at: i64 = series("lockgate_config_last_reload_success_timestamp_seconds")
        .await
        .parse()
        .unwrap();
    assert!(at > started, "{at} after {started}");
}

/// Requests in flight while SIGHUP reloads, again and again, all complete:
/// a reload swaps what new requests read, and stops nothing.
#[tokio::test]
async fn requests_under_load_all_complete_across_reloads() {
    let redis = RedisServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("lockgate.toml");
    let acl = dir.path().join("acl.toml");
    std::fs::write(
        &acl,
        // The principal of the API key "k" (`echo -n k | lockgate acl hash`).
        "[principals.loader]\napi_key_sha256 = \"8254c329a92850f6d539dd376f4816ee2764517da5e0235514af433164480d7a\"\nrules = [{ prefix = \"reload-\", allow = [\"lock\", \"read\"] }]\n",
    )
    .unwrap();
    std::fs::write(
        &settings,
        format!("acl_file = {:?}\n", acl.to_str().unwrap()),
    )
    .unwrap();
    let gateway =
        GatewayProcess::spawn(&redis, &["--config", settings.to_str().unwrap()], &[]).await;
    let pid = gateway.child.id();
    let reloading = tokio::spawn(async move {
        for _ in 0..20 {
            send_signal(pid, "-HUP");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let mut clients = Vec::new();
    for client in 0..8 {
        let http = gateway.http.clone();
        let url = gateway.url("/locks");
        clients.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            for cycle in 0..40 {
                let key = format!("reload-{client}-{cycle}");
                let granted = http
                    .post(&url)
                    .bearer_auth("k")
                    .json(&serde_json::json!({"key": key, "ttl_ms": 5000}))
                    .send()
                    .await
                    .unwrap();
                answers.push(granted.status().as_u16());
                let body: serde_json::Value = granted.json().await.unwrap_or_default();
                if let Some(token) = body["token"].as_str() {
                    let released = http
                        .delete(format!("{url}/{key}"))
                        .bearer_auth("k")
                        .header("Lock-Token", token)
                        .send()
                        .await
                        .unwrap();
                    answers.push(released.status().as_u16());
                }
            }
            answers
        }));
    }
    reloading.await.unwrap();
    for client in clients {
        let answers = client.await.unwrap();
        assert_eq!(answers.len(), 80, "{answers:?}");
        assert!(
            answers
                .iter()
                .all(|status| *status == 201 || *status == 204),
            "{answers:?}"
        );
    }
    let logs = gateway.logs();
    assert!(logs.matches("reloaded:").count() >= 10, "{logs}");
    assert!(!logs.contains("not reloaded"), "{logs}");
}
