//! Streamed locks: held while the client holds the stream, renewed by the gateway, released when it leaves; `released` and `lost` say why a stream ended.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{
    Event, EventStream, GatewayProcess, Nginx, NginxSettings, RedisServer, TestApp, assert_problem,
    eventually, send_signal,
};

/// As generous as the waiting tests' bound: far below any lease or poll.
const PROMPTLY: Duration = Duration::from_millis(100);

async fn streamed(app: &TestApp, key: &str, ttl_ms: u64) -> (EventStream, Value) {
    let mut stream = EventStream::of(app.stream(json!({"key": key, "ttl_ms": ttl_ms})).await);
    let acquired = stream.next(Duration::from_secs(5)).await.expect("an event");
    assert_eq!(acquired.name, "acquired");
    (stream, acquired.data)
}

/// Renewals may come at any time (a cluster's subscription confirmation
/// asks for one); an end may not.
fn assert_no_end(events: Vec<Event>) {
    assert!(
        events.iter().all(|event| event.name == "renewed"),
        "{events:?}"
    );
}

async fn redis_has(redis: &RedisServer, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(format!("lockgate:lock:{{{key}}}"))
        .query_async(&mut redis.connection().await)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_streamed_lock_is_acquired_then_renewed_every_third_of_its_lease() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;

    let (mut stream, grant) = streamed(&app, "report", 300).await;

    // The grant is what a 201 carries.
    assert_eq!(grant["key"], "report");
    assert_eq!(grant["ttl_ms"], 300);
    assert_eq!(grant["holds"], 1);
    assert_eq!(grant["waited_ms"], 0);
    assert!(uuid::Uuid::parse_str(grant["token"].as_str().unwrap()).is_ok());
    let mut last_end = grant["expires_at_ms"].as_u64().unwrap();
    let started = Instant::now();
    for _ in 0..6 {
        let renewed = stream.next(Duration::from_secs(2)).await.unwrap();
        assert_eq!(renewed.name, "renewed", "{renewed:?}");
        let end = renewed.data["expires_at_ms"].as_u64().unwrap();
        assert!(
            end > last_end,
            "the lease did not move: {end} after {last_end}"
        );
        last_end = end;
    }
    // Six renewals at 100 ms apart, not faster, not much slower.
    let took = started.elapsed();
    assert!(
        (Duration::from_millis(450)..Duration::from_millis(1500)).contains(&took),
        "six renewals took {took:?}"
    );
    // Held all along, well past its 300 ms lease.
    let state: Value = app.get("/locks/report").await.json().await.unwrap();
    assert_eq!(state["fencing_token"], grant["fencing_token"]);
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(metrics.contains("lockgate_streamed_locks 1\n"), "{metrics}");
    assert!(
        metrics.contains("lockgate_stream_renewals_total{outcome=\"renewed\"}"),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_idle_stream_gets_keep_alive_comments() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn_with(&redis, &["--stream-keep-alive-ms", "150"]).await;
    // A 30 s lease renews every 10 s: nothing but comments meanwhile.
    let (mut stream, _) = streamed(&app, "quiet", 30_000).await;

    let events = stream.read_for(Duration::from_millis(700)).await;

    assert_no_end(events);
    assert!(
        stream.comments >= 3,
        "{} comments in 700 ms",
        stream.comments
    );
}

#[tokio::test]
async fn closing_the_stream_releases_the_lock_and_the_next_waiter_gets_it_at_once() {
    let redis = RedisServer::start().await;
    let app = Arc::new(TestApp::spawn(&redis).await);
    let (stream, grant) = streamed(&app, "printer", 30_000).await;
    let waiter = {
        let app = app.clone();
        tokio::spawn(async move {
            let response = app
                .acquire(json!({"key": "printer", "wait_ms": 10_000}))
                .await;
            (
                Instant::now(),
                response.status(),
                response.json::<Value>().await.unwrap(),
            )
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    let left = Instant::now();
    drop(stream);
    let (granted, status, body) = waiter.await.unwrap();

    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(
        granted - left < PROMPTLY,
        "granted {:?} after the client left",
        granted - left
    );
    assert!(body["fencing_token"].as_u64() > grant["fencing_token"].as_u64());
    let gone = eventually(Duration::from_secs(1), || async {
        app.get("/metrics")
            .await
            .text()
            .await
            .unwrap()
            .contains("lockgate_streamed_locks 0\n")
    })
    .await;
    assert!(gone, "the streamed lock is still counted");
}

#[tokio::test]
async fn closing_the_stream_gives_back_every_hold_of_its_token() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let (stream, grant) = streamed(&app, "nested", 30_000).await;
    let token = grant["token"].as_str().unwrap();
    let reentered = app.acquire(json!({"key": "nested", "token": token})).await;
    assert_eq!(reentered.status(), StatusCode::OK);

    drop(stream);

    let free = eventually(Duration::from_secs(1), || async {
        !redis_has(&redis, "nested").await
    })
    .await;
    assert!(free, "a re-entered hold outlived its stream");
}

#[tokio::test]
async fn idle_streamed_locks_hold_no_redis_connection() {
    // One Redis, so that its client list shows every connection the gateway has.
    let redis = RedisServer::start_single().await;
    // Two pooled connections: were a stream to keep one, the third could not
    // be granted (it would wait for a connection, then answer 503).
    let app = TestApp::spawn_with(
        &redis,
        &["--redis-pool", "checkout", "--redis-pool-size", "2"],
    )
    .await;
    let mut streams = Vec::new();
    for n in 0..20 {
        streams.push(streamed(&app, &format!("idle:{n}"), 600).await.0);
    }
    // Every lease is renewed meanwhile, each renewal borrowing a connection.
    for stream in &mut streams {
        stream.until("renewed", Duration::from_secs(2)).await;
    }

    let gateway = redis.other_clients().await;
    // The two pooled connections and the pub/sub one.
    assert!(gateway.len() <= 3, "{gateway:#?}");
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("lockgate_streamed_locks 20\n"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_release_with_the_token_ends_the_stream_with_released() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let (mut stream, grant) = streamed(&app, "batch", 30_000).await;
    let token = grant["token"].as_str().unwrap();
    let reentered = app.acquire(json!({"key": "batch", "token": token})).await;
    assert_eq!(reentered.status(), StatusCode::OK);

    // One hold given back: still held, the stream goes on.
    assert_eq!(app.release("batch", token).await.status(), StatusCode::OK);
    assert_no_end(stream.read_for(Duration::from_millis(200)).await);
    // The last: released.
    assert_eq!(
        app.release("batch", token).await.status(),
        StatusCode::NO_CONTENT
    );
    let released = stream.next(Duration::from_secs(2)).await.unwrap();

    assert_eq!(released.name, "released");
    assert_eq!(released.data, json!({"key": "batch"}));
    assert!(
        stream.next(Duration::from_secs(2)).await.is_none(),
        "the stream went on"
    );
}

/// A `DELETE` with the token can reach Redis just before a renewal of the
/// same lock: the renewal then finds the lock gone, and may be heard before
/// the release message. It must still end the stream with `released`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_races_a_renewal_still_ends_the_stream_with_released() {
    const STREAMS: usize = 300;
    let redis = RedisServer::start().await;
    let holding = Arc::new(TestApp::spawn(&redis).await);
    let releasing = Arc::new(TestApp::spawn(&redis).await);
    let mut ends = Vec::new();
    for batch in 0..STREAMS / 30 {
        let runs: Vec<_> = (0..30)
            .map(|n| {
                let (holding, releasing) = (holding.clone(), releasing.clone());
                tokio::spawn(async move {
                    let key = format!("race:{batch}:{n}");
                    // A 300 ms lease is renewed every 100 ms: a release
                    // lands next to a renewal often, and a machine busy
                    // with other work still renews it in time (a shorter
                    // lease can truly run out there, which is another
                    // test's).
                    let (mut stream, grant) = streamed(&holding, &key, 300).await;
                    let token = grant["token"].as_str().unwrap().to_owned();
                    tokio::time::sleep(Duration::from_micros(fastrand_like(&key) % 400_000)).await;
                    let released = releasing.release(&key, &token).await.status();
                    let mut last = None;
                    while let Some(event) = stream.next(Duration::from_secs(5)).await {
                        last = Some(event);
                    }
                    (released, last.map(|event| (event.name, event.data)))
                })
            })
            .collect();
        for run in runs {
            ends.push(run.await.unwrap());
        }
    }
    let wrong: Vec<_> = ends
        .iter()
        .filter(|(released, last)| {
            *released != StatusCode::NO_CONTENT
                || last.as_ref().is_none_or(|(name, _)| name != "released")
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {STREAMS} streams released with their token did not end with `released`: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}

/// A pseudo-random number from `seed`, for spreading the releases over time.
fn fastrand_like(seed: &str) -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(seed)
}

#[tokio::test]
async fn another_holders_release_does_not_end_a_stream() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    // A release message published on the lock's channel by a holder before
    // this one carries that holder's fencing token, not this stream's.
    let (mut stream, grant) = streamed(&app, "shared-channel", 30_000).await;
    let earlier = grant["fencing_token"].as_u64().unwrap() - 1;
    let () = redis::cmd("PUBLISH")
        .arg("lockgate:released:{shared-channel}")
        .arg(earlier)
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();

    assert_no_end(stream.read_for(Duration::from_millis(300)).await);
    assert!(redis_has(&redis, "shared-channel").await);
}

#[tokio::test]
async fn shared_streamed_locks_are_renewed_and_released_each_on_its_own() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let body = json!({"key": "feed", "ttl_ms": 600, "mode": "shared"});
    let mut first = EventStream::of(app.stream(body.clone()).await);
    let mut second = EventStream::of(app.stream(body).await);
    let first_grant = first.until("acquired", Duration::from_secs(5)).await;
    let second_grant = second.until("acquired", Duration::from_secs(5)).await;
    assert_ne!(first_grant.data["token"], second_grant.data["token"]);
    let holders = |status: Value| status["holders"].as_u64();
    let status: Value = app.get("/locks/feed").await.json().await.unwrap();
    assert_eq!(holders(status), Some(2));

    // Each lease is renewed past its first end.
    first.until("renewed", Duration::from_secs(2)).await;
    second.until("renewed", Duration::from_secs(2)).await;
    tokio::time::sleep(Duration::from_millis(700)).await;

    // One client leaves: its place is freed, the other stream goes on.
    drop(first);
    let one_left = eventually(Duration::from_secs(2), || async {
        let status: Value = app.get("/locks/feed").await.json().await.unwrap();
        holders(status) == Some(1)
    })
    .await;
    assert!(one_left, "the closed stream's place was not freed");
    assert_no_end(second.read_for(Duration::from_millis(300)).await);

    let token = second_grant.data["token"].as_str().unwrap();
    assert_eq!(
        app.release("feed", token).await.status(),
        StatusCode::NO_CONTENT
    );
    let released = second.until("released", Duration::from_secs(2)).await;
    assert_eq!(released.data, json!({"key": "feed"}));
}

#[tokio::test]
async fn a_lock_deleted_in_redis_is_lost_at_the_next_renewal() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let (mut stream, _) = streamed(&app, "deleted", 600).await;

    let () = redis::cmd("DEL")
        .arg("lockgate:lock:{deleted}")
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
    let lost = stream.until("lost", Duration::from_secs(2)).await;

    assert_eq!(lost.data, json!({"reason": "lock-gone", "key": "deleted"}));
    assert!(stream.next(Duration::from_secs(2)).await.is_none());
}

#[tokio::test]
async fn a_lease_that_runs_out_while_redis_is_frozen_is_lost_then() {
    let redis = RedisServer::start_single().await;
    let app = TestApp::spawn_with(&redis, &["--redis-timeout-ms", "300"]).await;
    let (mut stream, grant) = streamed(&app, "frozen", 900).await;
    let mut lease_end = grant["expires_at_ms"].as_u64().unwrap();
    let renewed = stream.until("renewed", Duration::from_secs(2)).await;
    lease_end = lease_end.max(renewed.data["expires_at_ms"].as_u64().unwrap());

    redis.pause();
    let frozen = Instant::now();
    let lost = loop {
        let event = stream.next(Duration::from_secs(5)).await.expect("an end");
        match event.name.as_str() {
            "renewed" => lease_end = lease_end.max(event.data["expires_at_ms"].as_u64().unwrap()),
            _ => break event,
        }
    };
    let heard_at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let after = frozen.elapsed();
    redis.resume();

    assert_eq!(
        lost.data,
        json!({"reason": "backend-unavailable", "key": "frozen"})
    );
    // Before the lease's end by the Redis clock (the same machine's): the
    // client hears it while no one else can have been granted the lock.
    assert!(
        heard_at_ms < lease_end,
        "lost heard at {heard_at_ms}, after the lease's end at {lease_end}"
    );
    // Near the lease's end (at most 900 ms after the last renewal), not a
    // Redis timeout or more later.
    assert!(
        after < Duration::from_millis(900) + PROMPTLY * 2,
        "lost {after:?} after the freeze"
    );
    let gone = eventually(Duration::from_secs(2), || async {
        !redis_has(&redis, "frozen").await
    })
    .await;
    assert!(gone, "the lock outlived its lease");
}

#[tokio::test]
async fn refusals_are_the_ordinary_answers() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let holder = app.take("taken", 30_000).await;

    let held = app.stream(json!({"key": "taken"})).await;
    assert_problem(held, 409, "lock-held").await;
    // A wait that ran out after the stream began (with its place in the
    // queue) ends it with the refusal.
    let mut waited = EventStream::of(app.stream(json!({"key": "taken", "wait_ms": 300})).await);
    let queued = waited.next(Duration::from_secs(2)).await.unwrap();
    assert_eq!(
        (queued.name.as_str(), &queued.data),
        ("queued", &json!({"position": 1}))
    );
    let refused = waited.next(Duration::from_secs(2)).await.unwrap();
    assert_eq!(refused.name, "refused");
    assert_eq!(
        refused.data["type"], "/problems/lock-held",
        "{:?}",
        refused.data
    );
    assert_eq!(refused.data["status"], 409);
    assert!(
        waited.next(Duration::from_secs(2)).await.is_none(),
        "the stream went on"
    );
    let reentry = app
        .stream(json!({"key": "taken", "token": holder.token}))
        .await;
    let body = assert_problem(reentry, 422, "invalid-field").await;
    assert_eq!(body["field"], "token");
    assert_problem(app.stream(json!({"key": "a b"})).await, 422, "invalid-key").await;
    let body = assert_problem(
        app.stream(json!({"key": "k", "wait_ms": 60_001})).await,
        422,
        "invalid-field",
    )
    .await;
    assert_eq!(
        (body["minimum"].as_u64(), body["maximum"].as_u64()),
        (Some(0), Some(60_000))
    );
}

#[tokio::test]
async fn sigterm_releases_every_streamed_lock_and_ends_its_stream_with_shutting_down() {
    let redis = RedisServer::start().await;
    let mut gateway = GatewayProcess::spawn(&redis, &[], &[]).await;
    let response = gateway
        .acquire(&json!({"key": "closing", "ttl_ms": 30_000}))
        .header("Accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let mut stream = EventStream::of(response);
    assert_eq!(
        stream.next(Duration::from_secs(5)).await.unwrap().name,
        "acquired"
    );

    send_signal(gateway.child.id(), "-TERM");
    let lost = stream.until("lost", Duration::from_secs(5)).await;

    assert_eq!(lost.data, json!({"reason": "shutting-down"}));
    assert!(
        !redis_has(&redis, "closing").await,
        "released before saying so"
    );
    assert!(stream.next(Duration::from_secs(5)).await.is_none());
    let status = gateway.exit_status(Duration::from_secs(5)).await;
    assert!(
        status.is_some_and(|status| status.success()),
        "{status:?}\n{}",
        gateway.logs()
    );
}

#[tokio::test]
async fn a_killed_gateway_renews_nothing_and_its_lock_ends_with_its_lease() {
    let redis = RedisServer::start().await;
    let mut gateway = GatewayProcess::spawn(&redis, &[], &[]).await;
    let other = TestApp::spawn(&redis).await;
    let response = gateway
        .acquire(&json!({"key": "orphan", "ttl_ms": 1_000}))
        .header("Accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let mut stream = EventStream::of(response);
    stream.until("renewed", Duration::from_secs(3)).await;

    send_signal(gateway.child.id(), "-KILL");
    let killed = Instant::now();
    let _ = gateway.exit_status(Duration::from_secs(5)).await;

    assert_eq!(other.get("/locks/orphan").await.status(), StatusCode::OK);
    let expired = eventually(Duration::from_secs(3), || async {
        other.get("/locks/orphan").await.status() == StatusCode::NOT_FOUND
    })
    .await;
    let after = killed.elapsed();
    assert!(expired, "the lock outlived its lease");
    assert!(
        after <= Duration::from_millis(1_000) + PROMPTLY,
        "ended {after:?} after the kill"
    );
    assert!(
        after >= Duration::from_millis(300),
        "ended {after:?} after the kill: something released it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_nginx_a_streamed_lock_is_held_for_longer_than_its_read_timeout() {
    let redis = RedisServer::start().await;
    let flags = ["--stream-keep-alive-ms", "500"];
    let apps = [
        TestApp::spawn_with(&redis, &flags).await,
        TestApp::spawn_with(&redis, &flags).await,
        TestApp::spawn_with(&redis, &flags).await,
    ];
    // nginx cuts an upstream that says nothing for 2 s; the locks are held
    // for 10 s.
    let nginx = Nginx::start(
        [apps[0].addr, apps[1].addr, apps[2].addr],
        NginxSettings {
            locks_read_timeout: "2s",
            ..NginxSettings::default()
        },
    )
    .await;
    let http = reqwest::Client::new();
    let open = |key: &'static str, ttl_ms: u64| {
        http.post(nginx.url("/locks"))
            .header("Accept", "text/event-stream")
            .json(&json!({"key": key, "ttl_ms": ttl_ms}))
            .send()
    };
    // Renewed every 333 ms; and renewed every 10 s, kept open by comments.
    let mut renewed = EventStream::of(open("through:renewed", 1_000).await.unwrap());
    let mut quiet = EventStream::of(open("through:quiet", 30_000).await.unwrap());
    for stream in [&mut renewed, &mut quiet] {
        assert_eq!(
            stream.next(Duration::from_secs(5)).await.unwrap().name,
            "acquired"
        );
    }
    // Another client watches both locks through nginx the whole time.
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = {
        let (http, watching) = (http.clone(), watching.clone());
        let urls = [
            nginx.url("/locks/through:renewed"),
            nginx.url("/locks/through:quiet"),
        ];
        tokio::spawn(async move {
            let mut looks = 0;
            while watching.load(Ordering::Relaxed) {
                for url in &urls {
                    let status = http.get(url).send().await.unwrap().status();
                    assert_eq!(status, StatusCode::OK, "{url} was not held");
                    looks += 1;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            looks
        })
    };

    let (renewals, comments_only) = tokio::join!(
        renewed.read_for(Duration::from_secs(10)),
        quiet.read_for(Duration::from_secs(10)),
    );
    watching.store(false, Ordering::Relaxed);

    assert!(watcher.await.unwrap() > 40);
    assert!(
        renewals.iter().all(|event| event.name == "renewed"),
        "{renewals:?}"
    );
    assert!(renewals.len() >= 25, "{} renewals in 10 s", renewals.len());
    // The renewal due at 10 s, and in a cluster one at the subscription.
    assert!(comments_only.len() <= 2, "{comments_only:?}");
    assert_no_end(comments_only);
    assert!(quiet.comments >= 15, "{} comments in 10 s", quiet.comments);
    drop((renewed, quiet));
    let freed = eventually(Duration::from_secs(2), || async {
        http.get(nginx.url("/locks/through:quiet"))
            .send()
            .await
            .unwrap()
            .status()
            == StatusCode::NOT_FOUND
    })
    .await;
    assert!(
        freed,
        "closing the stream through nginx did not release the lock"
    );
}
