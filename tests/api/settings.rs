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
