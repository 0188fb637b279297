//! Every setting is checked at start: a value that cannot work stops `lockgate serve` with one line saying which and why.

use std::process::Command;

/// Runs `lockgate serve` with `args` and `env`; returns its exit code and
/// what it wrote (an argument's error to stderr, a start error to its log).
fn serve(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_lockgate"))
        .arg("serve")
        .args(args)
        .envs(env.iter().copied())
        // Nothing must start: a port nobody could take, should it get that far.
        .env("LOCKGATE_LISTEN", "127.0.0.1:1")
        .env_remove("RUST_LOG")
        .output()
        .expect("run lockgate");
    let mut written = String::from_utf8_lossy(&output.stderr).into_owned();
    written.push_str(&String::from_utf8_lossy(&output.stdout));
    (output.status.code(), written)
}

#[test]
fn a_setting_that_cannot_work_stops_the_start_with_one_line() {
    for (flag, value) in [
        // A GCRA interval of 0 µs would refuse every purchase.
        ("--seckill-rate", "1000001"),
        ("--seckill-client-rate", "2000000"),
        // Braces would break the hash tags (CROSSSLOT in a cluster).
        ("--key-prefix", "lock{gate}:"),
        ("--key-prefix", "}"),
        ("--redis-wait-timeout-ms", "0"),
        ("--max-wait-ms", "100000000000"),
        ("--max-ttl-ms", "9"),
        ("--header-timeout-ms", "0"),
        ("--idle-timeout-ms", "0"),
        ("--body-limit-bytes", "1"),
        ("--header-limit-bytes", "100"),
        ("--request-timeout-ms", "0"),
        ("--listen", "nowhere"),
        ("--trusted-proxies", "nginx"),
    ] {
        let (code, stderr) = serve(&[flag, value], &[]);
        assert_eq!(code, Some(2), "{flag} {value}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{flag} {value}: {stderr}");
        assert!(stderr.contains(flag), "{flag} {value}: {stderr}");
    }
    // The same from the environment.
    let (code, stderr) = serve(&[], &[("LOCKGATE_SECKILL_RATE", "1000001")]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--seckill-rate"), "{stderr}");
}

#[test]
fn a_buyer_token_key_that_is_no_key_stops_the_start() {
    let (code, stderr) = serve(
        &["--buyer-jwt-public-key=-----BEGIN PUBLIC KEY-----\nnot a key\n-----END PUBLIC KEY-----"],
        &[],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("buyer token key"), "{stderr}");
    assert_eq!(
        stderr
            .trim()
            .lines()
            .filter(|line| line.contains("ERROR"))
            .count(),
        1,
        "{stderr}"
    );
    let (code, stderr) = serve(
        &[
            "--buyer-jwt-secret",
            "s",
            "--buyer-jwt-public-key",
            "/no/such/key.pem",
        ],
        &[],
    );
    assert_eq!(code, Some(2), "both keys at once: {stderr}");
}

/// `--config FILE`: the file's settings, below flags and the environment;
/// a bad file stops the start with the file, line and key.
#[tokio::test]
async fn a_settings_file_gives_what_no_flag_or_variable_gives() {
    let redis = crate::helpers::RedisServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lockgate.toml");
    std::fs::write(
        &file,
        "# a gateway's settings\nmax_ttl_ms = 2000\nmax_wait_ms = 1500\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let gateway = crate::helpers::GatewayProcess::spawn(
        &redis,
        &["--config", path],
        &[("LOCKGATE_MAX_WAIT_MS", "2500")],
    )
    .await;
    let too_long = gateway
        .acquire(&serde_json::json!({"key": "file", "ttl_ms": 3000}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        too_long.status(),
        422,
        "the file's max_ttl_ms is not in force"
    );
    let held = gateway
        .acquire(&serde_json::json!({"key": "file", "ttl_ms": 2000}))
        .send()
        .await
        .unwrap();
    assert_eq!(held.status(), 201);
    // The variable wins over the file: a 2 s wait is allowed.
    let waited = gateway
        .acquire(&serde_json::json!({"key": "file", "ttl_ms": 1000, "wait_ms": 2200}))
        .send()
        .await
        .unwrap();
    assert_eq!(waited.status(), 201, "LOCKGATE_MAX_WAIT_MS did not win");

    std::fs::write(&file, "max_ttl_ms = 2000\nmax_tll_ms = 5\n").unwrap();
    let (code, written) = serve(&["--config", path], &[]);
    assert_eq!(code, Some(78), "{written}");
    assert_eq!(
        written.trim(),
        format!(
            "lockgate serve: {path}:2: max_tll_ms: not a setting of lockgate serve (the keys are the README's variables without LOCKGATE_, in lower case)"
        )
    );
    let check = Command::new(env!("CARGO_BIN_EXE_lockgate"))
        .args(["config", "check", path])
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(78));

    std::fs::write(&file, "max_ttl_ms = 2000\nadmin_token = \"hidden\"\n").unwrap();
    let show = Command::new(env!("CARGO_BIN_EXE_lockgate"))
        .args(["config", "show", "--config", path, "--max-wait-ms", "900"])
        .env_remove("LOCKGATE_MAX_WAIT_MS")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(show.status.success(), "{show:?}");
    assert!(shown.contains("max_ttl_ms = \"2000\"  # file"), "{shown}");
    assert!(shown.contains("max_wait_ms = \"900\"  # flag"), "{shown}");
    assert!(shown.contains("admin_token = (set)  # file"), "{shown}");
    assert!(
        shown.contains("listen = \"127.0.0.1:8080\"  # default"),
        "{shown}"
    );
    assert!(!shown.contains("hidden"), "{shown}");
}
