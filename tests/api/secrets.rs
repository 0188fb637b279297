//! Secrets and the files they come from: missing, unreadable or mismatched files stop `serve` with status 78; secrets from files are never logged.

use serde_json::json;
use tempfile::TempDir;

use crate::helpers::RedisServer;
use crate::helpers::security::*;

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
