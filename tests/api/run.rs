//! `lockgate run`, the real binary against a real gateway: exit statuses, the command's environment, signals, and a lost lock stopping the whole process group.

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::process::{Child, Command};

use crate::helpers::{RedisServer, TestApp, eventually, free_port, send_signal};

/// `lockgate run` with `args`, against `app`'s gateway.
fn lockgate_run(app: &TestApp, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lockgate"));
    command
        .arg("run")
        .env("LOCKGATE_URL", app.url(""))
        .env_remove("LOCKGATE_API_KEY")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Runs to the end; returns the status and stderr.
async fn finished(mut command: Command) -> (ExitStatus, String) {
    let output = tokio::time::timeout(Duration::from_secs(20), command.output())
        .await
        .expect("lockgate run did not finish")
        .unwrap();
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

async fn wait_for_file(path: &Path) -> String {
    let appeared = eventually(Duration::from_secs(10), || async { path.exists() }).await;
    assert!(appeared, "{} never appeared", path.display());
    // Written by `echo ... > file`: give the write a moment to complete.
    tokio::time::sleep(Duration::from_millis(20)).await;
    std::fs::read_to_string(path).unwrap().trim().to_owned()
}

/// Whether the process runs: it exists and is not a zombie (an orphan
/// that died waits for init to reap it, which can take seconds here).
fn process_alive(pid: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
    !state.is_some_and(|rest| rest.starts_with('Z'))
}

async fn delete_in_redis(redis: &RedisServer, key: &str) {
    let () = redis::cmd("DEL")
        .arg(format!("lockgate:lock:{{{key}}}"))
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
}

#[tokio::test]
async fn it_exits_with_the_commands_status_and_releases_the_lock() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;

    let (status, _) = finished(lockgate_run(&app, &["job", "--", "sh", "-c", "exit 3"])).await;
    assert_eq!(status.code(), Some(3));
    assert_eq!(app.get("/locks/job").await.status(), StatusCode::NOT_FOUND);

    let script = "kill -TERM $$";
    let (status, _) = finished(lockgate_run(&app, &["job", "--", "sh", "-c", script])).await;
    assert_eq!(status.code(), Some(128 + 15));
    assert_eq!(app.get("/locks/job").await.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_command_gets_the_key_its_token_and_fencing_token() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let dir = TempDir::new().unwrap();
    let out = dir.path().join("env");
    let script = format!(
        "echo \"$LOCKGATE_KEY $LOCKGATE_TOKEN $LOCKGATE_FENCING_TOKEN\" > {}; sleep 0.5",
        out.display()
    );
    let run = lockgate_run(&app, &["billing:eu", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();

    let env = wait_for_file(&out).await;
    let [key, token, fence]: [&str; 3] = env.split(' ').collect::<Vec<_>>().try_into().unwrap();
    assert_eq!(key, "billing:eu");
    let state: Value = app.get("/locks/billing:eu").await.json().await.unwrap();
    assert_eq!(state["fencing_token"].as_u64(), fence.parse().ok());
    // The token is the holder's: it re-enters the lock.
    let reentered = app.acquire(json!({"key": key, "token": token})).await;
    assert_eq!(reentered.status(), StatusCode::OK);

    let output = run.wait_with_output().await.unwrap();
    assert!(output.status.success());
    // Every hold is given back when the command exits, the re-entry's too.
    assert_eq!(
        app.get("/locks/billing:eu").await.status(),
        StatusCode::NOT_FOUND
    );
}

/// Starts `runs` `lockgate run` of KEY with `kind_args` at once, each
/// command marking its start and end in one log; returns the most that ran
/// at the same time.
async fn most_at_once(app: &TestApp, kind_args: &[&str], runs: usize) -> usize {
    let dir = TempDir::new().unwrap();
    let log = dir.path().join("log");
    let script = format!(
        "echo + >> {log}; sleep 0.6; echo - >> {log}",
        log = log.display()
    );
    let mut children = Vec::new();
    for _ in 0..runs {
        let mut args = kind_args.to_vec();
        args.extend(["-w", "20", "pool", "--", "sh", "-c", &script]);
        children.push(lockgate_run(app, &args).spawn().unwrap());
    }
    for child in children {
        let output = child.wait_with_output().await.unwrap();
        assert!(output.status.success(), "{output:?}");
    }
    let (mut now, mut most) = (0_usize, 0);
    for mark in std::fs::read_to_string(&log).unwrap().lines() {
        if mark == "+" {
            now += 1;
            most = most.max(now);
        } else {
            now -= 1;
        }
    }
    most
}

#[tokio::test]
async fn shared_runs_overlap_and_counted_ones_up_to_their_limit() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;

    assert_eq!(most_at_once(&app, &["--shared"], 3).await, 3);
    assert_eq!(most_at_once(&app, &["--limit", "2"], 3).await, 2);
    assert_eq!(most_at_once(&app, &[], 2).await, 1);
    assert_eq!(app.get("/locks/pool").await.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_usage_error_exits_64_which_no_command_status_is_mistaken_for() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;

    for args in [
        &["job"][..],
        &["--no-such-option", "job", "--", "true"],
        &["--", "true"],
    ] {
        let (status, stderr) = finished(lockgate_run(&app, args)).await;
        assert_eq!(status.code(), Some(64), "{args:?}: {stderr}");
        // What is wrong (with what it lists) and the usage line; not the
        // whole help.
        let lines: Vec<&str> = stderr.trim().lines().collect();
        assert!(lines[0].starts_with("error: "), "{args:?}: {stderr}");
        assert!(
            lines.last().unwrap().starts_with("Usage: lockgate run"),
            "{args:?}: {stderr}"
        );
        assert!(lines.len() <= 4, "{args:?}: {stderr}");
    }
    // A missing argument is named.
    let (_, stderr) = finished(lockgate_run(&app, &["job"])).await;
    assert!(stderr.contains("<COMMAND>"), "{stderr}");
    // The command's own 2 is still the command's.
    let (status, _) = finished(lockgate_run(&app, &["job", "--", "sh", "-c", "exit 2"])).await;
    assert_eq!(status.code(), Some(2));
}

#[tokio::test]
async fn a_held_lock_exits_with_the_conflict_code_and_runs_nothing() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    app.take("busy", 30_000).await;
    let dir = TempDir::new().unwrap();
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());

    let (status, _) = finished(lockgate_run(
        &app,
        &["-n", "busy", "--", "sh", "-c", &touch],
    ))
    .await;
    assert_eq!(status.code(), Some(1));
    let (status, _) = finished(lockgate_run(
        &app,
        &["--nonblock", "-E", "9", "busy", "--", "sh", "-c", &touch],
    ))
    .await;
    assert_eq!(status.code(), Some(9));
    let started = Instant::now();
    let (status, _) = finished(lockgate_run(
        &app,
        &["-w", "0.4", "busy", "--", "sh", "-c", &touch],
    ))
    .await;
    assert_eq!(status.code(), Some(1));
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "gave up after {:?}",
        started.elapsed()
    );
    assert!(!marker.exists(), "the command ran without the lock");
}

#[tokio::test]
async fn waits_longer_than_the_gateways_longest_are_made_of_several_requests() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_with(&redis, &["--max-wait-ms", "200"]).await;
    let holder = app.take("queue", 30_000).await;
    let release_later = {
        let (http, url) = (app.http.clone(), app.url("/locks/queue"));
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(700)).await;
            http.delete(url)
                .header("Lock-Token", holder.token)
                .send()
                .await
                .unwrap();
        })
    };

    let started = Instant::now();
    let (status, stderr) = finished(lockgate_run(&app, &["-w", "5", "queue", "--", "true"])).await;

    assert!(status.success(), "{status}: {stderr}");
    assert!(started.elapsed() >= Duration::from_millis(700));
    release_later.await.unwrap();
    // Without --wait it waits as long as it takes, the same way.
    app.take("queue", 600).await;
    let (status, stderr) = finished(lockgate_run(&app, &["queue", "--", "true"])).await;
    assert!(status.success(), "{status}: {stderr}");
}

#[tokio::test]
async fn an_unreachable_or_refusing_gateway_exits_69_and_runs_nothing() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let guarded = TestApp::spawn_with(&redis, &["--api-keys", "secret"]).await;
    let dir = TempDir::new().unwrap();
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let nowhere = format!("http://127.0.0.1:{}", free_port());

    let mut unreachable = lockgate_run(&app, &["k", "--", "sh", "-c", &touch]);
    unreachable.env("LOCKGATE_URL", &nowhere);
    let cases = [
        (unreachable, "cannot reach the gateway"),
        (
            lockgate_run(&app, &["a b", "--", "sh", "-c", &touch]),
            "invalid-key",
        ),
        (
            lockgate_run(&app, &["--ttl", "0.001", "k", "--", "sh", "-c", &touch]),
            "invalid-field",
        ),
        (
            lockgate_run(&guarded, &["k", "--", "sh", "-c", &touch]),
            "unauthorized",
        ),
    ];
    for (command, problem) in cases {
        let (status, stderr) = finished(command).await;
        assert_eq!(status.code(), Some(69), "{stderr}");
        assert!(stderr.starts_with("lockgate run: "), "{stderr}");
        assert!(stderr.contains(problem), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
    assert!(!marker.exists(), "the command ran");
    // With its API key, the guarded gateway serves it.
    let mut keyed = lockgate_run(&guarded, &["k", "--", "true"]);
    keyed.env("LOCKGATE_API_KEY", "secret");
    assert!(finished(keyed).await.0.success());
}

/// What a `lockgate run` that lost its lock did.
struct Lost {
    output: std::process::Output,
    /// From the loss (the lock deleted in Redis) to lockgate run's exit.
    took: Duration,
    /// The grandchild the command started.
    grandchild: String,
}

/// Runs `script` under `key` with `options` (the script writes the pid of a
/// grandchild it starts to the path it is given), deletes the lock in Redis
/// once the grandchild runs, and waits for `lockgate run` to end.
async fn lose_the_lock(
    redis: &RedisServer,
    app: &TestApp,
    key: &str,
    options: &[&str],
    script: impl Fn(&Path) -> String,
) -> Lost {
    let dir = TempDir::new().unwrap();
    let pid_file = dir.path().join("grandchild");
    let script = script(&pid_file);
    let mut args = vec!["--ttl", "0.6"];
    args.extend_from_slice(options);
    args.extend_from_slice(&[key, "--", "sh", "-c", &script]);
    let run = lockgate_run(app, &args).spawn().unwrap();
    let grandchild = wait_for_file(&pid_file).await;
    assert!(process_alive(&grandchild));

    delete_in_redis(redis, key).await;
    let lost_at = Instant::now();
    let output = tokio::time::timeout(Duration::from_secs(10), run.wait_with_output())
        .await
        .expect("lockgate run went on without its lock")
        .unwrap();
    Lost {
        output,
        took: lost_at.elapsed(),
        grandchild,
    }
}

#[tokio::test]
async fn a_lost_lock_stops_the_whole_process_group_and_exits_75() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;

    // The command leaves a grandchild behind it, which must go too.
    let lost = lose_the_lock(&redis, &app, "nightly", &[], |pid_file| {
        format!("sleep 100 & echo $! > {}; wait", pid_file.display())
    })
    .await;

    assert_eq!(lost.output.status.code(), Some(75));
    // The gateway notices at its next renewal (every 200 ms); sh and sleep
    // stop at SIGTERM.
    assert!(lost.took < Duration::from_secs(2), "{:?}", lost.took);
    let stderr = String::from_utf8_lossy(&lost.output.stderr);
    assert!(stderr.contains("lost the lock nightly"), "{stderr}");
    let gone = eventually(Duration::from_secs(2), || async {
        !process_alive(&lost.grandchild)
    })
    .await;
    assert!(gone, "the grandchild survived the lost lock");
}

/// An operator revokes the lock while the command runs: `lockgate run`
/// hears it at once (not at its next renewal), stops the command, exits 75.
#[tokio::test]
async fn a_revoked_lock_stops_the_command_and_exits_75() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_sale(&redis, &[]).await;
    let dir = TempDir::new().unwrap();
    let started = dir.path().join("started");
    let script = format!("echo $$ > {}; sleep 100", started.display());
    let run = lockgate_run(
        &app,
        &[
            "--ttl",
            "30",
            "--value",
            "builder-7",
            "deploy",
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
    .spawn()
    .unwrap();
    wait_for_file(&started).await;
    let shown: Value = app.get("/locks/deploy").await.json().await.unwrap();
    assert_eq!(shown["leases"][0]["value"], "builder-7");

    let revoked = app
        .http
        .delete(app.url("/locks/deploy?force=true"))
        .bearer_auth(crate::helpers::ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), StatusCode::NO_CONTENT);
    let revoked_at = Instant::now();
    let output = tokio::time::timeout(Duration::from_secs(10), run.wait_with_output())
        .await
        .expect("lockgate run went on with a revoked lock")
        .unwrap();

    assert_eq!(output.status.code(), Some(75));
    // The 30 s lease is renewed every 10 s: only the revocation's message
    // can have stopped it this soon.
    assert!(
        revoked_at.elapsed() < Duration::from_secs(2),
        "{:?}",
        revoked_at.elapsed()
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("revoked"), "{stderr}");
}

#[tokio::test]
async fn what_ignores_sigterm_gets_sigkill_after_the_grace() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;

    // Ignored by sh and inherited as ignored by its child.
    let options = ["--kill-after", "0.7"];
    let lost = lose_the_lock(&redis, &app, "stubborn", &options, |pid_file| {
        format!(
            "trap '' TERM; sleep 100 & echo $! > {}; wait",
            pid_file.display()
        )
    })
    .await;

    assert_eq!(lost.output.status.code(), Some(75));
    assert!(
        lost.took >= Duration::from_millis(700),
        "SIGKILL came before the grace ended"
    );
    let gone = eventually(Duration::from_secs(2), || async {
        !process_alive(&lost.grandchild)
    })
    .await;
    assert!(gone, "the grandchild survived SIGKILL");
}

#[tokio::test]
async fn sigint_sigterm_and_sighup_reach_the_commands_process_group() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    for (signal, name) in [("-INT", "INT"), ("-TERM", "TERM"), ("-HUP", "HUP")] {
        let dir = TempDir::new().unwrap();
        let (ready, caught) = (dir.path().join("ready"), dir.path().join("caught"));
        let script = format!(
            "trap 'echo {name} > {caught}; exit 0' {name}; touch {ready}; \
             while true; do sleep 0.05; done",
            caught = caught.display(),
            ready = ready.display(),
        );
        let run = lockgate_run(&app, &["signals", "--", "sh", "-c", &script])
            .spawn()
            .unwrap();
        wait_for_file(&ready).await;

        send_signal(run.id().unwrap(), signal);
        let output = tokio::time::timeout(Duration::from_secs(10), run.wait_with_output())
            .await
            .expect("the signal did not end the command")
            .unwrap();

        assert_eq!(wait_for_file(&caught).await, name);
        assert!(output.status.success(), "{name}: {}", output.status);
        assert_eq!(
            app.get("/locks/signals").await.status(),
            StatusCode::NOT_FOUND
        );
    }
}

#[tokio::test]
async fn a_killed_lockgate_run_frees_the_lock_at_once() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let dir = TempDir::new().unwrap();
    let pid_file = dir.path().join("command");
    let script = format!("echo $$ > {}; exec sleep 100", pid_file.display());
    let mut run: Child = lockgate_run(&app, &["crashy", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    let command = wait_for_file(&pid_file).await;

    send_signal(run.id().unwrap(), "-KILL");
    let killed = Instant::now();
    let _ = run.wait().await;
    let freed = eventually(Duration::from_secs(5), || async {
        app.get("/locks/crashy").await.status() == StatusCode::NOT_FOUND
    })
    .await;

    assert!(freed);
    // Its 30 s lease did not have to run out: the stream's end freed it.
    assert!(
        killed.elapsed() < Duration::from_secs(2),
        "{:?}",
        killed.elapsed()
    );
    send_signal(command.parse().unwrap(), "-KILL");
}

/// The processes of group `pgid` that still run (zombies, which have
/// stopped and wait to be reaped, do not count).
fn live_in_group(pgid: i32) -> Vec<i32> {
    let mut live = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let mut fields = stat
            .rsplit_once(')')
            .map_or("", |(_, rest)| rest)
            .split_whitespace();
        let state = fields.next();
        let pgrp = fields.nth(1).and_then(|pgrp| pgrp.parse::<i32>().ok());
        if pgrp == Some(pgid) && state != Some("Z") {
            live.push(pid);
        }
    }
    live
}

/// `lockgate run` killed with SIGKILL (it can stop nothing itself): its
/// command and every process of the command's group end too, TERM then
/// KILL after --kill-after, so nothing runs on without the lock.
#[tokio::test]
async fn a_killed_lockgate_run_takes_its_command_and_group_with_it() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let dir = TempDir::new().unwrap();
    let pid_file = dir.path().join("command");
    // A grandchild that ignores SIGTERM, and the command itself.
    let script = format!(
        "trap '' TERM; sleep 100 & echo $$ > {}; wait",
        pid_file.display()
    );
    let mut run: Child = lockgate_run(
        &app,
        &["--kill-after", "1", "orphan", "--", "sh", "-c", &script],
    )
    .spawn()
    .unwrap();
    let pgid: i32 = wait_for_file(&pid_file).await.parse().unwrap();
    assert!(
        live_in_group(pgid).len() >= 2,
        "the command's group is not running"
    );

    send_signal(run.id().unwrap(), "-KILL");
    let _ = run.wait().await;
    let gone = eventually(Duration::from_secs(5), || async {
        live_in_group(pgid).is_empty()
    })
    .await;
    assert!(
        gone,
        "processes of the command's group outlived lockgate run: {:?}",
        live_in_group(pgid)
    );
    assert_eq!(
        app.get("/locks/orphan").await.status(),
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn the_help_explains_the_exit_statuses_with_an_example() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lockgate"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    for part in [
        "--wait",
        "--nonblock",
        "--conflict-exit-code",
        "--kill-after",
        "75",
        "69",
        "cron",
    ] {
        assert!(
            help.contains(part),
            "--help says nothing of {part}:\n{help}"
        );
    }
}

/// With several keys every lock is held while the command runs, or none:
/// one held elsewhere means the conflict code and nothing left held; the
/// command gets each key and fencing token; losing any one lock stops it.
#[tokio::test]
async fn several_keys_are_held_together_or_not_at_all() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let dir = TempDir::new().unwrap();
    let out = dir.path().join("env");
    let script = format!(
        "echo \"$LOCKGATE_KEYS|$LOCKGATE_FENCING_TOKENS|$LOCKGATE_KEY\" > {}; sleep 30",
        out.display()
    );
    let keys = ["--ttl", "3", "-k", "pair:b", "-k", "pair:a"];
    let mut run = lockgate_run(&app, &[&keys[..], &["--", "sh", "-c", &script]].concat())
        .spawn()
        .unwrap();
    let seen = wait_for_file(&out).await;
    let mut parts = seen.split('|');
    assert_eq!(parts.next(), Some("pair:a pair:b"), "{seen}");
    let fences: Vec<u64> = parts
        .next()
        .unwrap()
        .split(' ')
        .map(|fence| fence.parse().unwrap())
        .collect();
    assert_eq!(parts.next(), Some("pair:a"));
    for (key, fence) in ["pair:a", "pair:b"].iter().zip(&fences) {
        let lock: Value = app
            .get(&format!("/locks/{key}"))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(lock["fencing_token"], *fence, "{key}");
    }
    // Losing one stops the command.
    delete_in_redis(&redis, "pair:b").await;
    let status = tokio::time::timeout(Duration::from_secs(15), run.wait())
        .await
        .expect("lockgate run went on without one of its locks")
        .unwrap();
    assert_eq!(status.code(), Some(75));
    let freed = eventually(Duration::from_secs(3), || async {
        app.get("/locks/pair:a").await.status() == StatusCode::NOT_FOUND
    })
    .await;
    assert!(freed, "the other lock outlived the run");

    // One of them held elsewhere: the conflict code, nothing run, nothing held.
    let other = app.take("pair:b", 30_000).await;
    let touched = dir.path().join("ran");
    let (status, _) = finished(lockgate_run(
        &app,
        &[
            "-n",
            "-k",
            "pair:a",
            "-k",
            "pair:b",
            "--",
            "touch",
            touched.to_str().unwrap(),
        ],
    ))
    .await;
    assert_eq!(status.code(), Some(1));
    assert!(!touched.exists());
    assert_eq!(
        app.get("/locks/pair:a").await.status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        app.release("pair:b", &other.token).await.status(),
        StatusCode::NO_CONTENT
    );
}
