//! The fair queue: waiters served in arrival order across instances, a waiter whose client or gateway went away passed over, no wake-up lost, and the queue as everyone sees it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{EventStream, GatewayProcess, RedisServer, TestApp, eventually};

/// The waiters `GET /locks/{key}` shows (none when the lock is not held).
async fn waiters(app: &TestApp, key: &str) -> Vec<Value> {
    let response = app.get(&format!("/locks/{key}")).await;
    if response.status() == StatusCode::NOT_FOUND {
        return Vec::new();
    }
    let body: Value = response.json().await.unwrap();
    body["waiters"].as_array().unwrap().clone()
}

/// Waits until `key` has `count` waiters (on any instance).
async fn queue_reaches(app: &TestApp, key: &str, count: usize) {
    let reached = eventually(Duration::from_secs(5), || async {
        waiters(app, key).await.len() == count
    })
    .await;
    assert!(reached, "{key} never had {count} waiters");
}

/// A waiting `POST /locks` on `app`, answered with the time it was.
fn wait_on(app: &TestApp, body: Value) -> tokio::task::JoinHandle<(Instant, StatusCode, Value)> {
    let request = app.http.post(app.url("/locks")).json(&body);
    tokio::spawn(async move {
        let response = request.send().await.unwrap();
        let answered = Instant::now();
        let status = response.status();
        (
            answered,
            status,
            response.json().await.unwrap_or(Value::Null),
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_arrival_order_across_instances_under_a_release_storm() {
    const WAITERS: usize = 45;
    let redis = RedisServer::start().await;
    let apps = [
        TestApp::spawn(&redis).await,
        TestApp::spawn(&redis).await,
        TestApp::spawn(&redis).await,
    ];
    let holder = apps[0].take("storm", 30_000).await;
    let granted = Arc::new(Mutex::new(Vec::new()));

    let mut tasks = Vec::new();
    for arrival in 0..WAITERS {
        let app = &apps[arrival % 3];
        let request = app
            .http
            .post(app.url("/locks"))
            .json(&json!({"key": "storm", "ttl_ms": 30_000, "wait_ms": 60_000}));
        let release = app.http.delete(app.url("/locks/storm"));
        let granted = granted.clone();
        tasks.push(tokio::spawn(async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), StatusCode::CREATED);
            let body: Value = response.json().await.unwrap();
            // Noted before the release, so the list is in grant order.
            let fence = body["fencing_token"].as_u64().unwrap();
            granted.lock().unwrap().push((arrival, fence));
            let token = body["token"].as_str().unwrap().to_owned();
            let released = release.header("Lock-Token", token).send().await.unwrap();
            assert_eq!(released.status(), StatusCode::NO_CONTENT);
        }));
        // In the queue before the next one arrives, wherever it waits.
        queue_reaches(&apps[(arrival + 1) % 3], "storm", arrival + 1).await;
    }
    let shown = waiters(&apps[2], "storm").await;
    let positions: Vec<u64> = shown
        .iter()
        .map(|w| w["position"].as_u64().unwrap())
        .collect();
    assert_eq!(positions, (1..=WAITERS as u64).collect::<Vec<_>>());

    apps[1].release("storm", &holder.token).await;
    for task in tasks {
        task.await.unwrap();
    }

    let granted = granted.lock().unwrap().clone();
    let arrivals: Vec<usize> = granted.iter().map(|(arrival, _)| *arrival).collect();
    assert_eq!(
        arrivals,
        (0..WAITERS).collect::<Vec<_>>(),
        "granted out of arrival order"
    );
    assert!(
        granted.windows(2).all(|pair| pair[0].1 < pair[1].1),
        "fencing tokens out of grant order: {granted:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_client_left_loses_its_place_at_once() {
    let redis = RedisServer::start().await;
    let (one, two) = (TestApp::spawn(&redis).await, TestApp::spawn(&redis).await);
    let holder = one.take("desk", 30_000).await;
    let impatient = one
        .http
        .post(one.url("/locks"))
        .timeout(Duration::from_millis(400))
        .json(&json!({"key": "desk", "wait_ms": 20_000}))
        .send();
    let impatient = tokio::spawn(impatient);
    queue_reaches(&two, "desk", 1).await;
    let patient = wait_on(&two, json!({"key": "desk", "wait_ms": 20_000}));
    queue_reaches(&two, "desk", 2).await;

    assert!(impatient.await.unwrap().unwrap_err().is_timeout());
    let left_at = Instant::now();
    queue_reaches(&two, "desk", 1).await;
    assert!(
        left_at.elapsed() < Duration::from_secs(1),
        "a waiter that left kept its place {:?}",
        left_at.elapsed()
    );

    let released = Instant::now();
    one.release("desk", &holder.token).await;
    let (answered, status, body) = patient.await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(answered - released < Duration::from_millis(500));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiters_of_a_killed_gateway_are_passed_over() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let holder = app.take("ledger", 30_000).await;
    let mut doomed = GatewayProcess::spawn(&redis, &[], &[]).await;
    let head = doomed
        .acquire(&json!({"key": "ledger", "wait_ms": 30_000}))
        .send();
    let head = tokio::spawn(head);
    queue_reaches(&app, "ledger", 1).await;
    let next = wait_on(&app, json!({"key": "ledger", "wait_ms": 30_000}));
    queue_reaches(&app, "ledger", 2).await;

    doomed.child.kill().unwrap();
    let _ = doomed.child.wait();
    let killed = Instant::now();
    assert!(head.await.unwrap().is_err());
    // Its gateway renewed its waiters' places every 300 ms, for a second.
    queue_reaches(&app, "ledger", 1).await;
    assert!(
        killed.elapsed() < Duration::from_millis(1_500),
        "a dead gateway's waiter kept its place {:?}",
        killed.elapsed()
    );

    let released = Instant::now();
    app.release("ledger", &holder.token).await;
    let (answered, status, body) = next.await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(answered - released < Duration::from_millis(500));
}

/// The data format in use, as `GET /version` on `app` tells it.
async fn format_in_use(app: &TestApp) -> u64 {
    let version: Value = app.get("/version").await.json().await.unwrap();
    version["format_in_use"].as_u64().unwrap()
}

/// How many grants from the queue `app`'s waiters took in `writes` writes.
async fn queue_grants(app: &TestApp, writes: &str) -> u64 {
    let page = app.get("/metrics").await.text().await.unwrap();
    let series = format!("lockgate_lock_queue_grants_total{{writes=\"{writes}\"}}");
    crate::helpers::sample(&page, &series).map_or(0, |count| count.parse().unwrap())
}

/// A fleet of this build moves to data format 2 as it starts, and a release
/// then grants the head of the queue its whole lease in one write: its
/// gateway answers it without claiming anything. With the format held at 1
/// (`--format-auto-raise false`, as beside an older release) the place is
/// offered and claimed, in two writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_granted_in_one_write_once_the_fleet_writes_format_2() {
    for (flags, format, writes, other) in [
        (&[][..], 2, "one", "two"),
        (&["--format-auto-raise", "false"][..], 1, "two", "one"),
    ] {
        let redis = RedisServer::start().await;
        let (holding, waiting) = (
            TestApp::spawn_with(&redis, flags).await,
            TestApp::spawn_with(&redis, flags).await,
        );
        assert_eq!(format_in_use(&waiting).await, format, "{flags:?}");
        let holder = holding.take("one-write", 30_000).await;
        let next = wait_on(
            &waiting,
            json!({"key": "one-write", "ttl_ms": 20_000, "wait_ms": 10_000}),
        );
        queue_reaches(&holding, "one-write", 1).await;
        holding.release("one-write", &holder.token).await;
        let (_, status, body) = next.await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(body["ttl_ms"], 20_000, "{body}");
        let view: Value = holding.get("/locks/one-write").await.json().await.unwrap();
        assert_eq!(
            view["leases"][0]["expires_at_ms"], body["expires_at_ms"],
            "the lease answered is the lease held: {view}"
        );
        assert_eq!(queue_grants(&waiting, writes).await, 1, "{flags:?}");
        assert_eq!(queue_grants(&waiting, other).await, 0, "{flags:?}");
    }
}

/// A lock held on `app`, with two waiters: the head on a gateway process of
/// its own (`flags`) asking for `ttl_ms`, then one on `next_app`. Returns
/// the holder, the head's gateway and answer, and the next waiter's.
async fn held_with_a_head_elsewhere(
    (redis, app, next_app): (&RedisServer, &TestApp, &TestApp),
    key: &str,
    ttl_ms: u64,
    flags: &[&str],
) -> (
    crate::helpers::Grant,
    GatewayProcess,
    tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>,
    tokio::task::JoinHandle<(Instant, StatusCode, Value)>,
) {
    let holder = app.take(key, 30_000).await;
    let head_gateway = GatewayProcess::spawn(redis, flags, &[]).await;
    let head = tokio::spawn(
        head_gateway
            .acquire(&json!({"key": key, "ttl_ms": ttl_ms, "wait_ms": 30_000}))
            .send(),
    );
    queue_reaches(app, key, 1).await;
    let next = wait_on(next_app, json!({"key": key, "wait_ms": 30_000}));
    queue_reaches(app, key, 2).await;
    (holder, head_gateway, head, next)
}

/// The head of the queue is granted just as its gateway stops (`SIGSTOP`,
/// its presence renewed a moment before): granted outright, the lock stays
/// with the stopped waiter for the lease it asked for (here 3 s), then
/// goes on to the next waiter, within the bound the API states. Its
/// gateway, back after that lease, does not answer the grant it heard
/// late (another holds the lock now): its waiter waits on, and is granted
/// after the next holder, with a larger fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_place_granted_outright_to_a_gateway_that_stopped_is_held_for_its_lease() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let (holder, mut doomed, head, next) =
        held_with_a_head_elsewhere((&redis, &app, &app), "relay", 3_000, &[]).await;

    crate::helpers::send_signal(doomed.child.id(), "-STOP");
    let released = Instant::now();
    app.release("relay", &holder.token).await;
    let (answered, status, body) = next.await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let waited = answered - released;
    assert!(
        waited >= Duration::from_millis(2_500) && waited < Duration::from_millis(4_500),
        "the next waiter waited {waited:?}, not the stopped one's lease (3 s) and a tending round"
    );

    crate::helpers::send_signal(doomed.child.id(), "-CONT");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(
        !head.is_finished(),
        "the stopped gateway answered a grant it heard after its lease had ended"
    );
    app.release("relay", body["token"].as_str().unwrap()).await;
    let answer = tokio::time::timeout(Duration::from_secs(5), head)
        .await
        .expect("the first waiter granted after the next holder")
        .unwrap()
        .unwrap();
    assert_eq!(answer.status(), StatusCode::CREATED);
    let granted: Value = answer.json().await.unwrap();
    assert!(
        granted["fencing_token"].as_u64() > body["fencing_token"].as_u64(),
        "{granted} after {body}"
    );
    doomed.child.kill().unwrap();
    let _ = doomed.child.wait();
}

/// A short lease granted outright to a waiter whose gateway is stopped
/// (`SIGSTOP`) just before the release, and resumed after that lease ended
/// and the next waiter took the lock: the resumed gateway does not answer
/// the grant it heard late (its lease ended while it was stopped, though
/// less than half a second of it went by), but waits on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_lease_heard_after_it_ended_is_not_answered() {
    let redis = RedisServer::start().await;
    let (app, next_app) = (TestApp::spawn(&redis).await, TestApp::spawn(&redis).await);
    let (holder, mut paused, head, next) =
        held_with_a_head_elsewhere((&redis, &app, &next_app), "short", 250, &[]).await;

    crate::helpers::send_signal(paused.child.id(), "-STOP");
    tokio::time::sleep(Duration::from_millis(50)).await;
    app.release("short", &holder.token).await;
    let (_, status, body) = next.await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    crate::helpers::send_signal(paused.child.id(), "-CONT");
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(
        !head.is_finished(),
        "the resumed gateway answered a 250 ms lease that had ended, while {body} held the lock"
    );
    paused.child.kill().unwrap();
    let _ = paused.child.wait();
}

/// A gateway that stopped more than half a second before the release is
/// not granted outright: its waiter is offered the place, which it never
/// claims, and the place goes on to the next waiter within a second or
/// two, not at the end of the lease it asked for. With the format held at
/// 1, the same holds of a gateway stopped just before the release (every
/// grant from the queue is an offer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_place_offered_to_a_gateway_that_died_goes_on_to_the_next_waiter() {
    for (flags, stopped_for) in [
        (&[][..], Duration::from_millis(700)),
        (&["--format-auto-raise", "false"][..], Duration::ZERO),
    ] {
        let redis = RedisServer::start().await;
        let app = TestApp::spawn_with(&redis, flags).await;
        let (holder, mut doomed, head, next) =
            held_with_a_head_elsewhere((&redis, &app, &app), "relay", 60_000, flags).await;

        // Stopped, not killed: its presence stands a second after its last
        // renewal, so the release offers it the place.
        crate::helpers::send_signal(doomed.child.id(), "-STOP");
        tokio::time::sleep(stopped_for).await;
        let released = Instant::now();
        app.release("relay", &holder.token).await;
        let (answered, status, body) = next.await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert!(
            answered - released < Duration::from_millis(2_500),
            "{flags:?}: the next waiter waited {:?}",
            answered - released
        );
        doomed.child.kill().unwrap();
        let _ = doomed.child.wait();
        let _ = head.await;
    }
}

/// Sends a waiting `POST /locks` over a raw connection and closes its
/// sending side after `give_up`; returns whatever the server wrote.
async fn abandoned(addr: std::net::SocketAddr, body: &Value, give_up: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = body.to_string();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /locks HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    tokio::time::sleep(give_up).await;
    stream.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_granted_as_its_client_leaves_hands_the_lock_on() {
    let redis = RedisServer::start().await;
    let (one, two) = (TestApp::spawn(&redis).await, TestApp::spawn(&redis).await);
    let mut raced = 0;
    for trial in 0..20u64 {
        let key = format!("handoff:{trial}");
        one.take(&key, 400).await;
        // The head's client gives up about when the lease ends and the
        // head is granted: before, during or after the grant.
        let give_up = Duration::from_millis(370 + trial * 3);
        let head_body = json!({"key": key, "ttl_ms": 30_000, "wait_ms": 10_000});
        let head = {
            let (addr, body) = (one.addr, head_body.clone());
            tokio::spawn(async move { abandoned(addr, &body, give_up).await })
        };
        queue_reaches(&two, &key, 1).await;
        let next = wait_on(
            &two,
            json!({"key": key, "ttl_ms": 30_000, "wait_ms": 10_000}),
        );
        let answer = head.await.unwrap();
        if answer.starts_with("HTTP/1.1 201") {
            // The client had the grant before it left: its release is its own.
            let body: Value =
                serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
            one.release(&key, body["token"].as_str().unwrap()).await;
        } else {
            raced += 1;
        }
        let (_, status, body) = next.await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "trial {trial}: {body}");
        two.release(&key, body["token"].as_str().unwrap()).await;
    }
    assert!(
        raced > 0,
        "no trial raced the grant: the test proves nothing"
    );
}

/// A release lands while a new waiter is between its first try and its
/// place in the queue, many times over: the waiter is granted every time,
/// at once, never at the end of its wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_wake_up_is_lost_when_a_release_races_a_new_waiter() {
    const TRIALS: u64 = 150;
    let redis = RedisServer::start().await;
    let (one, two) = (TestApp::spawn(&redis).await, TestApp::spawn(&redis).await);
    for trial in 0..TRIALS {
        let key = format!("race:{trial}");
        let holder = one.take(&key, 30_000).await;
        let waiter = wait_on(&two, json!({"key": key, "wait_ms": 5_000}));
        tokio::time::sleep(Duration::from_micros(trial * 37 % 3_000)).await;
        let released = Instant::now();
        one.release(&key, &holder.token).await;
        let (answered, status, body) = waiter.await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "trial {trial}: {body}");
        assert!(
            answered.saturating_duration_since(released) < Duration::from_millis(1_000),
            "trial {trial}: granted {:?} after the release",
            answered.saturating_duration_since(released)
        );
        two.release(&key, body["token"].as_str().unwrap()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_waiter_is_told_its_place_until_it_is_granted() {
    let redis = RedisServer::start().await;
    let (one, two) = (TestApp::spawn(&redis).await, TestApp::spawn(&redis).await);
    let holder = one.take("print", 30_000).await;
    let first = one.stream(json!({"key": "print", "wait_ms": 20_000})).await;
    let mut first = EventStream::of(first);
    let queued = first.next(Duration::from_secs(2)).await.unwrap();
    assert_eq!(
        (queued.name.as_str(), &queued.data),
        ("queued", &json!({"position": 1}))
    );
    let mut second = EventStream::of(two.stream(json!({"key": "print", "wait_ms": 20_000})).await);
    let queued = second.next(Duration::from_secs(2)).await.unwrap();
    assert_eq!(
        (queued.name.as_str(), &queued.data),
        ("queued", &json!({"position": 2}))
    );

    // The first leaves: the second moves up.
    drop(first);
    let moved = second.next(Duration::from_secs(2)).await.unwrap();
    assert_eq!(
        (moved.name.as_str(), &moved.data),
        ("queued", &json!({"position": 1}))
    );

    let released = Instant::now();
    one.release("print", &holder.token).await;
    let acquired = second.next(Duration::from_secs(2)).await.unwrap();
    assert_eq!(acquired.name, "acquired", "{acquired:?}");
    assert!(released.elapsed() < Duration::from_millis(500));
    assert!(acquired.data["fencing_token"].as_u64().unwrap() > holder.fencing_token);
    assert!(acquired.data["waited_ms"].as_u64().unwrap() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counting_lock_admits_from_the_head_as_places_free() {
    let redis = RedisServer::start().await;
    let (one, two) = (TestApp::spawn(&redis).await, TestApp::spawn(&redis).await);
    let counted = |extra: Value| {
        let mut body = json!({"key": "pool", "limit": 2, "ttl_ms": 30_000});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    let take = |app: &TestApp| {
        let request = app.http.post(app.url("/locks")).json(&counted(json!({})));
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), StatusCode::CREATED);
            response.json::<Value>().await.unwrap()["token"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let (a, b) = (take(&one).await, take(&two).await);
    let first = wait_on(&one, counted(json!({"wait_ms": 20_000})));
    queue_reaches(&two, "pool", 1).await;
    let second = wait_on(&two, counted(json!({"wait_ms": 20_000})));
    queue_reaches(&one, "pool", 2).await;

    one.release("pool", &a).await;
    let (_, status, _) = first.await.unwrap();
    assert_eq!(status, StatusCode::CREATED);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!second.is_finished(), "a third holder in a lock of two");
    two.release("pool", &b).await;
    let (_, status, _) = second.await.unwrap();
    assert_eq!(status, StatusCode::CREATED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_and_waiters_are_shown_to_everyone_without_a_token() {
    let redis = RedisServer::start().await;
    let (one, two) = (TestApp::spawn(&redis).await, TestApp::spawn(&redis).await);
    let reader = |value: &str| json!({"key": "doc", "mode": "shared", "value": value});
    let first = one.acquire(reader("host-a:9000")).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let first: Value = first.json().await.unwrap();
    let second: Value = two
        .acquire(reader("host-b:9000"))
        .await
        .json()
        .await
        .unwrap();
    let writer = wait_on(&one, json!({"key": "doc", "wait_ms": 20_000}));
    queue_reaches(&two, "doc", 1).await;
    let late_reader = wait_on(
        &two,
        json!({"key": "doc", "mode": "shared", "wait_ms": 20_000}),
    );
    queue_reaches(&one, "doc", 2).await;

    let response = two.get("/locks/doc").await;
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.unwrap();
    for token in [&first["token"], &second["token"]] {
        assert!(
            !text.contains(token.as_str().unwrap()),
            "a token shown: {text}"
        );
    }
    let status: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(status["mode"], "shared");
    assert_eq!(status["holders"], 2);
    let leases = status["leases"].as_array().unwrap();
    let shown: Vec<(&Value, &Value)> = leases
        .iter()
        .map(|lease| (&lease["fencing_token"], &lease["value"]))
        .collect();
    assert_eq!(
        shown,
        [
            (&first["fencing_token"], &json!("host-a:9000")),
            (&second["fencing_token"], &json!("host-b:9000"))
        ]
    );
    for lease in leases {
        assert_eq!(lease["holds"], 1);
        assert!(lease["acquired_at_ms"].as_u64() < lease["expires_at_ms"].as_u64());
    }
    let queue = status["waiters"].as_array().unwrap();
    let modes: Vec<(&Value, &Value)> = queue.iter().map(|w| (&w["position"], &w["mode"])).collect();
    assert_eq!(
        modes,
        [
            (&json!(1), &json!("exclusive")),
            (&json!(2), &json!("shared"))
        ]
    );
    assert!(queue[0]["waiting_since_ms"].as_u64() <= queue[1]["waiting_since_ms"].as_u64());

    // The writer first, then the reader that came after it.
    one.release("doc", first["token"].as_str().unwrap()).await;
    two.release("doc", second["token"].as_str().unwrap()).await;
    let (_, status, writer) = writer.await.unwrap();
    assert_eq!(status, StatusCode::CREATED);
    assert!(!late_reader.is_finished());
    one.release("doc", writer["token"].as_str().unwrap()).await;
    let (_, status, _) = late_reader.await.unwrap();
    assert_eq!(status, StatusCode::CREATED);
}

#[tokio::test]
async fn a_holder_replaces_its_value_and_only_its_own() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let leader: Value = app
        .acquire(json!({"key": "leader", "value": "10.0.0.7:9000"}))
        .await
        .json()
        .await
        .unwrap();
    let token = leader["token"].as_str().unwrap();
    let proclaim = |token: &str, value: Value| {
        app.http
            .put(app.url("/locks/leader/value"))
            .json(&json!({"token": token, "value": value}))
            .send()
    };

    let response = proclaim(token, json!("10.0.0.8:9000")).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let renewed: Value = response.json().await.unwrap();
    assert_eq!(renewed["fencing_token"], leader["fencing_token"]);
    let shown: Value = app.get("/locks/leader").await.json().await.unwrap();
    assert_eq!(shown["leases"][0]["value"], "10.0.0.8:9000");

    let stranger = "0b6e2f4c-3d5a-4f1e-9a8b-7c6d5e4f3a2b";
    let refused = proclaim(stranger, json!("evil")).await.unwrap();
    crate::helpers::assert_problem(refused, 409, "not-owner").await;
    let cleared = proclaim(token, Value::Null).await.unwrap();
    assert_eq!(cleared.status(), StatusCode::OK);
    let shown: Value = app.get("/locks/leader").await.json().await.unwrap();
    assert_eq!(shown["leases"][0]["value"], Value::Null);

    app.release("leader", token).await;
    let gone = proclaim(token, json!("late")).await.unwrap();
    crate::helpers::assert_problem(gone, 404, "lock-not-found").await;
}

#[tokio::test]
async fn held_locks_are_listed_by_prefix_a_page_at_a_time() {
    const LOCKS: usize = 57;
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let mut expected = Vec::new();
    for n in 0..LOCKS {
        let key = format!("svc:jobs:{n:03}");
        app.take(&key, 30_000).await;
        expected.push(key);
    }
    for other in ["svc:other", "svcjobs", "web:jobs:1"] {
        app.take(other, 30_000).await;
    }
    // Released: not listed.
    let gone = app.take("svc:jobs:gone", 30_000).await;
    app.release("svc:jobs:gone", &gone.token).await;

    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut request = app
            .http
            .get(app.url("/locks"))
            .query(&[("prefix", "svc:jobs:"), ("limit", "10")]);
        if let Some(cursor) = &cursor {
            request = request.query(&[("cursor", cursor)]);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let page: Value = response.json().await.unwrap();
        pages += 1;
        for lock in page["locks"].as_array().unwrap() {
            assert_eq!(lock["held"], true);
            assert!(lock["leases"][0]["fencing_token"].as_u64().is_some());
            listed.push(lock["key"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
        assert!(pages < 100, "the listing does not end");
    }
    listed.sort();
    assert_eq!(listed, expected);
    assert!(pages > 1, "{LOCKS} locks in one page of 10");

    let everything: Value = app.get("/locks?limit=1000").await.json().await.unwrap();
    let all = everything["locks"].as_array().unwrap();
    assert!(all.len() >= LOCKS + 3, "{} locks listed", all.len());
}

/// Holder on one gateway, a waiter on a second, then a waiter on a third;
/// the second gateway is frozen past its presence deadline and thawed. The
/// thawed waiter is still in the queue, and neither waiter waits while the
/// lock is free: the first granted releases, and the other is granted at
/// once, not at the end of its wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_gateway_was_frozen_is_served_once_it_thaws() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let frozen = GatewayProcess::spawn(&redis, &[], &[]).await;
    let holder = app.take("thaw", 30_000).await;
    let body = json!({"key": "thaw", "wait_ms": 20_000});
    let first = tokio::spawn(frozen.acquire(&body).send());
    queue_reaches(&app, "thaw", 1).await;
    let second = wait_on(&app, body.clone());
    queue_reaches(&app, "thaw", 2).await;

    crate::helpers::send_signal(frozen.child.id(), "-STOP");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    crate::helpers::send_signal(frozen.child.id(), "-CONT");
    // Back in the queue once its gateway tends the lock again.
    queue_reaches(&app, "thaw", 2).await;

    app.release("thaw", &holder.token).await;
    let first = first.await.unwrap().expect("the thawed waiter's answer");
    assert_eq!(first.status(), StatusCode::CREATED, "the thawed waiter");
    let token = first.json::<Value>().await.unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let released = Instant::now();
    let answer = frozen
        .http
        .delete(frozen.url("/locks/thaw"))
        .header("Lock-Token", &token)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::NO_CONTENT);
    let (answered, status, body) = second.await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(
        answered - released < Duration::from_secs(2),
        "the second waiter waited {:?} with the lock free",
        answered - released
    );
}

/// Redis frozen for longer than a presence lasts, with a waiter on each of
/// two gateways: when it thaws, no waiter has lost its place, and each is
/// granted in turn as the lock frees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_redis_stall_every_waiter_is_still_served() {
    let redis = RedisServer::start_single().await;
    let apps = [TestApp::spawn(&redis).await, TestApp::spawn(&redis).await];
    for round in 0..4 {
        let key = format!("stall:{round}");
        let holder = apps[0].take(&key, 30_000).await;
        let body = json!({"key": key, "wait_ms": 20_000, "ttl_ms": 30_000});
        let first = wait_on(&apps[0], body.clone());
        queue_reaches(&apps[1], &key, 1).await;
        let second = wait_on(&apps[1], body.clone());
        queue_reaches(&apps[1], &key, 2).await;

        // Past the presence deadline (1 s), short of the gateways' Redis
        // timeout (2 s): no connection is given up, nothing is redone.
        redis.pause();
        tokio::time::sleep(Duration::from_millis(1_800)).await;
        redis.resume();
        queue_reaches(&apps[1], &key, 2).await;

        apps[0].release(&key, &holder.token).await;
        let (_, status, grant) = first.await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "{grant}");
        let released = Instant::now();
        apps[0]
            .release(&key, grant["token"].as_str().unwrap())
            .await;
        let (answered, status, body) = second.await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "round {round}: {body}");
        assert!(
            answered - released < Duration::from_secs(2),
            "round {round}: the second waiter waited {:?} with the lock free",
            answered - released
        );
    }
}

/// Every lock held for a whole listing pass is listed exactly once, while
/// other locks under the same prefix come and go between its pages (so
/// many that Redis grows its key table meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_listing_pass_lists_every_lock_held_throughout_once() {
    const HELD: usize = 300;
    let redis = RedisServer::start().await;
    let app = Arc::new(TestApp::spawn(&redis).await);
    let mut held = std::collections::BTreeSet::new();
    for n in 0..HELD {
        let key = format!("pass:held:{n:03}");
        app.take(&key, 120_000).await;
        held.insert(key);
    }
    let churning = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let churn = {
        let (app, churning) = (app.clone(), churning.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            while churning.load(std::sync::atomic::Ordering::Relaxed) {
                // Some churning locks stay a while, the others go at once.
                let key = format!("pass:churn:{n}");
                let ttl_ms = if n.is_multiple_of(2) { 10 } else { 1_500 };
                app.acquire(json!({"key": key, "ttl_ms": ttl_ms})).await;
                n += 1;
            }
        })
    };
    for pass in 0..3 {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(cursor) => format!("/locks?prefix=pass:&limit=7&cursor={cursor}"),
                None => "/locks?prefix=pass:&limit=7".to_owned(),
            };
            let page: Value = app.get(&path).await.json().await.unwrap();
            let locks = page["locks"].as_array().unwrap();
            assert!(locks.len() <= 7, "a page of {}", locks.len());
            for lock in locks {
                let key = lock["key"].as_str().unwrap();
                if key.starts_with("pass:held:") {
                    seen.push(key.to_owned());
                }
            }
            match page["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => break,
            }
        }
        let listed: std::collections::BTreeSet<_> = seen.iter().cloned().collect();
        let missed: Vec<_> = held.difference(&listed).collect();
        assert!(missed.is_empty(), "pass {pass} missed {missed:?}");
        assert_eq!(seen.len(), HELD, "pass {pass} listed some twice");
    }
    churning.store(false, std::sync::atomic::Ordering::Relaxed);
    churn.await.unwrap();
}

/// Waiters of a gateway that was killed, then started again under the same
/// instance id: the new process renews no presence of the dead one's, so
/// the dead waiters are passed over (their instance away) and a live
/// waiter behind them is granted as the lock frees, not after each dead
/// waiter's offer lapsed unclaimed (a second each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_started_again_under_its_id_revives_none_of_its_dead_waiters() {
    const DEAD: usize = 3;
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let flags = ["--instance-id", "gateway-b"];
    let mut killed = GatewayProcess::spawn(&redis, &flags, &[]).await;
    let holder = app.take("revive", 60_000).await;
    let body = json!({"key": "revive", "wait_ms": 30_000, "ttl_ms": 30_000});
    let mut dead = Vec::new();
    for n in 1..=DEAD {
        dead.push(tokio::spawn(killed.acquire(&body).send()));
        queue_reaches(&app, "revive", n).await;
    }
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    let again = GatewayProcess::spawn(&redis, &flags, &[]).await;
    let live = wait_on(&app, body.clone());
    queue_reaches(&app, "revive", DEAD + 1).await;
    // A waiter of the new process: its presence is renewed from now on.
    let behind = tokio::spawn(again.acquire(&body).send());
    queue_reaches(&app, "revive", DEAD + 2).await;
    // Past the dead process's presence (1 s), short of taking it for dead.
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    let released = Instant::now();
    app.release("revive", &holder.token).await;
    let (answered, status, grant) = live.await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{grant}");
    assert!(
        answered - released < Duration::from_millis(DEAD as u64 * 500),
        "the live waiter was granted {:?} after the release, behind {DEAD} dead waiters",
        answered - released
    );
    behind.abort();
    for waiter in dead {
        assert!(waiter.await.unwrap().is_err(), "a killed gateway answered");
    }
}

/// A gateway paused while a place is offered to its waiter, past the
/// offer: the waiter queues again behind the lock's new holder. Paused a
/// second time for longer than an instance is taken to be away, the
/// waiter loses that place too; once its gateway is back, the waiter is
/// found missing again and queues again, and is granted the free lock,
/// not left waiting out its wait (it once kept the standing of its first
/// offer, which no tend could mark missing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_queued_again_is_found_missing_again() {
    let redis = RedisServer::start().await;
    let app = TestApp::spawn(&redis).await;
    let paused = GatewayProcess::spawn(&redis, &[], &[]).await;
    let holder = app.take("twice", 60_000).await;
    let body = json!({"key": "twice", "wait_ms": 40_000, "ttl_ms": 30_000});
    let waiter = tokio::spawn(paused.acquire(&body).send());
    queue_reaches(&app, "twice", 1).await;

    // The place is offered while its gateway is paused, and lapses
    // (paused for over half a second, it is not granted outright).
    crate::helpers::send_signal(paused.child.id(), "-STOP");
    tokio::time::sleep(Duration::from_millis(700)).await;
    app.release("twice", &holder.token).await;
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let second = app.take("twice", 60_000).await;
    crate::helpers::send_signal(paused.child.id(), "-CONT");
    queue_reaches(&app, "twice", 1).await;

    // Away past the 10 s after which an instance's waiters are dropped.
    crate::helpers::send_signal(paused.child.id(), "-STOP");
    tokio::time::sleep(Duration::from_millis(11_500)).await;
    app.release("twice", &second.token).await;
    assert!(
        waiters(&app, "twice").await.is_empty(),
        "the away waiter was kept"
    );
    let resumed = Instant::now();
    crate::helpers::send_signal(paused.child.id(), "-CONT");

    let answer = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter waited on with the lock free")
        .unwrap()
        .unwrap();
    assert_eq!(answer.status(), StatusCode::CREATED);
    assert!(
        resumed.elapsed() < Duration::from_secs(5),
        "granted {:?} after its gateway was back",
        resumed.elapsed()
    );
}

/// Waiters whose clients went away while Redis was down leave its queue
/// once it is back (the gateway tries their leave again until their wait
/// ends), so they do not stand before the waiters still there, each holding
/// them up for an offer's length once the lock frees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_gone_while_redis_was_down_leave_its_queue_once_it_is_back() {
    const WAITERS: usize = 8;
    let mut redis = RedisServer::start_with_aof().await;
    let app = TestApp::spawn(&redis).await;
    let key = "gone-in-outage";
    let holder = app.take(key, 60_000).await;
    let body = json!({"key": key, "wait_ms": 30_000, "ttl_ms": 30_000});
    let mut waiting = Vec::new();
    for n in 0..WAITERS {
        waiting.push(wait_on(&app, body.clone()));
        queue_reaches(&app, key, n + 1).await;
    }

    redis.kill();
    // Every other client goes away while Redis is down.
    let (gone, staying): (Vec<_>, Vec<_>) = waiting
        .into_iter()
        .enumerate()
        .partition(|(n, _)| n % 2 == 0);
    for (_, waiter) in &gone {
        waiter.abort();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    redis.restart().await;
    queue_reaches(&app, key, WAITERS / 2).await;

    let mut released = Instant::now();
    app.release(key, &holder.token).await;
    for (n, waiter) in staying {
        let (answered, status, grant) = waiter.await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "waiter {n}: {grant}");
        assert!(
            answered.saturating_duration_since(released) < Duration::from_millis(800),
            "waiter {n} was granted {:?} after the lock freed",
            answered.saturating_duration_since(released)
        );
        released = Instant::now();
        app.release(key, grant["token"].as_str().unwrap()).await;
    }
}
