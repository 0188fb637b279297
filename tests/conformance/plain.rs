//! The plain scripts against the full ones: from each state (free, a plain holder, held twice, with a value or an Idempotency-Key, streamed, in a session, waited on, watched, delayed, shared, counting), `acquire_plain.lua` against `acquire.lua` (a plain try) and `release_plain.lua` against `release.lua` (each release a client can ask): the same answer and the same keys after, or the plain one's `busy` with nothing changed.
//!
//! Each state is built once on a lock of its own (lock A) through the
//! wrappers, then copied key by key (`COPY`, with its expiry) to another
//! (lock B); the plain script runs on A, the full one on B, just after. Their
//! answers and keys may differ only by the instant each ran: the
//! milliseconds of a lease's end or a grant's time, the microseconds of a
//! new fencing token (both new, both above the last).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockgate::redis::Connection;
use lockgate::redis::locks::grant::{self, AcquireReply, Attempt, Holds, ReleaseReply, Waiter};
use lockgate::redis::locks::view;
use lockgate::redis::locks::{LockKeys, LockKind, LockState};
use lockgate::redis::sessions::{self, Opening, SessionKeys};

const PUBLISH: &str = "PUBLISH";
const KEY: &str = "k";
const WHAT: [&str; 8] = [
    "lock", "fence", "holders", "queue", "waiters", "watch", "events", "gone",
];

/// A state a lock may be in, as set up through the wrappers.
#[derive(Clone, Copy, Debug)]
pub enum State {
    Free,
    Plain,
    /// Held twice by its holder (re-entered).
    Reentered,
    WithValue,
    UnderIdempotencyKey,
    Streamed,
    /// A session's holder, being attached or attached to it.
    InSession {
        attached: bool,
    },
    /// A plain holder, and a waiter.
    WaitedOn,
    /// Nobody holds it, but a waiter waits (its holder's lease ran out).
    WaitedOnFree,
    Watched,
    WatchedFree,
    /// Nobody holds it during a lock-delay.
    Delayed,
    Shared,
    Counting {
        holders: u8,
    },
}

pub const STATES: [State; 16] = [
    State::Free,
    State::Plain,
    State::Reentered,
    State::WithValue,
    State::UnderIdempotencyKey,
    State::Streamed,
    State::InSession { attached: false },
    State::InSession { attached: true },
    State::WaitedOn,
    State::WaitedOnFree,
    State::Watched,
    State::WatchedFree,
    State::Delayed,
    State::Shared,
    State::Counting { holders: 1 },
    State::Counting { holders: 2 },
];

/// What is asked of both scripts.
#[derive(Clone, Copy, Debug)]
pub enum Call {
    /// A plain try by a newcomer (`t9`).
    Try,
    /// A release by `token`, of one hold or all, with or without its
    /// fencing token (the right one, or another).
    Release {
        token: &'static str,
        holds: Holds,
        fence: Fence,
    },
}

#[derive(Clone, Copy, Debug)]
pub enum Fence {
    None,
    Right,
    Wrong,
}

pub const CALLS: [Call; 6] = [
    Call::Try,
    Call::Release {
        token: "t1",
        holds: Holds::One,
        fence: Fence::None,
    },
    Call::Release {
        token: "t1",
        holds: Holds::All,
        fence: Fence::None,
    },
    Call::Release {
        token: "t1",
        holds: Holds::One,
        fence: Fence::Right,
    },
    Call::Release {
        token: "t1",
        holds: Holds::One,
        fence: Fence::Wrong,
    },
    Call::Release {
        token: "t9",
        holds: Holds::One,
        fence: Fence::None,
    },
];

/// A try by `token` (no wait, value, Idempotency-Key or session).
pub fn attempt<'a>(token: &'a str, kind: LockKind, ttl_ms: u64) -> Attempt<'a> {
    Attempt {
        token,
        kind,
        permits: 1,
        ttl_ms,
        reenter: false,
        wait_left_ms: 0,
        waiter: None,
        streamed: false,
        value: None,
        idempotency: None,
        session: None,
    }
}

/// Builds `state` on lock `keys` (prefix `prefix`).
async fn set_up(conn: &mut Connection, prefix: &Arc<str>, keys: &LockKeys, state: State) {
    let plain = attempt("t1", LockKind::Exclusive, 30_000);
    let take = async |conn: &mut Connection, attempt: Attempt<'_>| {
        let reply = grant::acquire(conn, keys, PUBLISH, attempt).await.unwrap();
        assert!(
            matches!(
                reply,
                AcquireReply::Granted(_) | AcquireReply::Reentered(_) | AcquireReply::Queued { .. }
            ),
            "{state:?}: {reply:?}"
        );
    };
    let session = SessionKeys::new(prefix, "s");
    let open = async |conn: &mut Connection, lock_delay_ms: u64| {
        let opening = Opening {
            ttl_ms: 30_000,
            lock_delay_ms,
            value: None,
            principal: "",
        };
        sessions::open(conn, &session, "s", opening).await.unwrap();
    };
    let waiter = Waiter {
        id: "w2",
        instance: "g0",
        outright: false,
    };
    let wait = Attempt {
        waiter: Some(waiter),
        wait_left_ms: 30_000,
        ..attempt("t2", LockKind::Exclusive, 30_000)
    };
    match state {
        State::Free => {}
        State::Plain => take(conn, plain).await,
        State::Reentered => {
            take(conn, plain).await;
            take(
                conn,
                Attempt {
                    reenter: true,
                    ..plain
                },
            )
            .await;
        }
        State::WithValue => {
            take(
                conn,
                Attempt {
                    value: Some("v"),
                    ..plain
                },
            )
            .await
        }
        State::UnderIdempotencyKey => {
            let idempotency = Some(("key", "body"));
            take(
                conn,
                Attempt {
                    idempotency,
                    ..plain
                },
            )
            .await;
        }
        State::Streamed => {
            take(
                conn,
                Attempt {
                    streamed: true,
                    ..plain
                },
            )
            .await
        }
        State::InSession { attached } => {
            open(conn, 0).await;
            take(
                conn,
                Attempt {
                    session: Some("s 0"),
                    ..plain
                },
            )
            .await;
            if attached {
                grant::attach(conn, keys, PUBLISH, "t1").await.unwrap();
            }
        }
        State::WaitedOn => {
            take(conn, plain).await;
            take(conn, wait).await;
        }
        State::WaitedOnFree => {
            take(
                conn,
                Attempt {
                    ttl_ms: 100,
                    ..plain
                },
            )
            .await;
            take(conn, wait).await;
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        State::Watched => {
            take(conn, plain).await;
            view::watch(conn, keys, PUBLISH).await.unwrap();
        }
        State::WatchedFree => {
            view::watch(conn, keys, PUBLISH).await.unwrap();
        }
        State::Delayed => {
            open(conn, 30_000).await;
            take(
                conn,
                Attempt {
                    session: Some("s 30000"),
                    ..plain
                },
            )
            .await;
            grant::revoke(conn, keys, PUBLISH, 60_000, None)
                .await
                .unwrap();
        }
        State::Shared => take(conn, attempt("t1", LockKind::Shared, 30_000)).await,
        State::Counting { holders } => {
            take(conn, attempt("t1", LockKind::Counted(2), 30_000)).await;
            if holders > 1 {
                take(conn, attempt("t3", LockKind::Counted(2), 30_000)).await;
            }
        }
    }
}

fn name(prefix: &str, what: &str) -> String {
    format!("{prefix}{what}:{{{KEY}}}")
}

/// One key as Redis holds it: its type, its content (a hash's fields, a
/// sorted set's members with their scores, a string, a stream's entries'
/// fields without their ids), and its expiry (Unix ms; -1 none, -2 no key).
#[derive(Debug, PartialEq)]
struct Held {
    what: &'static str,
    content: Vec<(String, String)>,
    expires: i64,
}

async fn snapshot(conn: &mut Connection, prefix: &str) -> Vec<Held> {
    let mut keys = Vec::new();
    for what in WHAT {
        let key = name(prefix, what);
        let (kind, expires): (String, i64) = redis::pipe()
            .cmd("TYPE")
            .arg(&key)
            .cmd("PEXPIRETIME")
            .arg(&key)
            .query_async(conn)
            .await
            .unwrap();
        let content: Vec<(String, String)> = match kind.as_str() {
            "hash" => {
                let fields: BTreeMap<String, String> = redis::cmd("HGETALL")
                    .arg(&key)
                    .query_async(conn)
                    .await
                    .unwrap();
                fields.into_iter().collect()
            }
            "zset" => redis::cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(conn)
                .await
                .unwrap(),
            "string" => {
                let value: String = redis::cmd("GET").arg(&key).query_async(conn).await.unwrap();
                vec![(String::new(), value)]
            }
            "stream" => {
                let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
                    .arg(&key)
                    .arg("-")
                    .arg("+")
                    .query_async(conn)
                    .await
                    .unwrap();
                entries.into_iter().flat_map(|(_, fields)| fields).collect()
            }
            _ => Vec::new(),
        };
        keys.push(Held {
            what,
            content,
            expires,
        });
    }
    keys
}

/// Whether two values are the same, but for the instant each was made:
/// times (Unix ms) within `ms`, fencing tokens (µs) within `ms` thousand.
fn close(a: &str, b: &str, ms: u64) -> bool {
    if a == b {
        return true;
    }
    let (Ok(a), Ok(b)) = (a.parse::<i64>(), b.parse::<i64>()) else {
        return false;
    };
    let (at, ms) = (a.min(b), ms as i64);
    let gap = (a - b).abs();
    (at > 100_000_000_000_000 && gap <= ms * 1000) || (at > 100_000_000_000 && gap <= ms)
}

fn same_keys(plain: &[Held], full: &[Held], ms: u64) -> Result<(), String> {
    for (a, b) in plain.iter().zip(full) {
        let fields = a.content.len() == b.content.len()
            && a.content
                .iter()
                .zip(&b.content)
                .all(|((fa, va), (fb, vb))| fa == fb && close(va, vb, ms));
        if !fields || !close(&a.expires.to_string(), &b.expires.to_string(), ms) {
            return Err(format!("{}: plain {a:?}, full {b:?}", a.what));
        }
    }
    Ok(())
}

/// The fencing token recorded for `t1`, if it holds.
async fn fence_of_t1(conn: &mut Connection, prefix: &str) -> Option<u64> {
    let fields: Vec<Option<u64>> = redis::cmd("HMGET")
        .arg(name(prefix, "lock"))
        .arg("owner")
        .arg("fence")
        .arg("f:t1")
        .query_async::<Vec<Option<String>>>(conn)
        .await
        .unwrap()
        .into_iter()
        .map(|field| field.and_then(|v| v.parse().ok()))
        .collect();
    fields[1].or(fields[2])
}

/// What one script answered.
#[derive(Debug)]
enum Answer {
    Busy,
    Acquired(AcquireReply),
    Released(ReleaseReply),
}

fn same_answer(plain: &Answer, full: &Answer, last_fence: u64, ms: u64) -> bool {
    let state = |a: &LockState, b: &LockState| {
        a.holds == b.holds
            && a.ttl_ms == b.ttl_ms
            && a.session == b.session
            && a.fencing_token > last_fence
            && b.fencing_token > last_fence
            && close(
                &a.fencing_token.to_string(),
                &b.fencing_token.to_string(),
                ms,
            )
            && close(
                &a.expires_at_ms.to_string(),
                &b.expires_at_ms.to_string(),
                ms,
            )
    };
    match (plain, full) {
        (
            Answer::Acquired(AcquireReply::Granted(a)),
            Answer::Acquired(AcquireReply::Granted(b)),
        ) => state(a, b),
        (
            Answer::Acquired(AcquireReply::Held {
                free_in_ms: a,
                delayed_until_ms: a_delay,
            }),
            Answer::Acquired(AcquireReply::Held {
                free_in_ms: b,
                delayed_until_ms: b_delay,
            }),
        ) => a.abs_diff(*b) <= ms && a_delay == b_delay,
        (Answer::Released(a), Answer::Released(b)) => a == b,
        _ => false,
    }
}

async fn call(
    conn: &mut Connection,
    keys: &LockKeys,
    call: Call,
    fence: Option<u64>,
    plain: bool,
) -> Answer {
    match call {
        Call::Try => {
            let attempt = attempt("t9", LockKind::Exclusive, 20_000);
            if plain {
                match grant::acquire_plain(conn, keys, attempt).await.unwrap() {
                    Some(reply) => Answer::Acquired(reply),
                    None => Answer::Busy,
                }
            } else {
                Answer::Acquired(
                    grant::acquire_full(conn, keys, PUBLISH, attempt)
                        .await
                        .unwrap(),
                )
            }
        }
        Call::Release { token, holds, .. } => {
            let asked = (token, fence);
            if plain {
                match grant::release_plain(conn, keys, PUBLISH, asked, holds)
                    .await
                    .unwrap()
                {
                    Some(reply) => Answer::Released(reply),
                    None => Answer::Busy,
                }
            } else {
                Answer::Released(
                    grant::release_full(conn, keys, PUBLISH, asked, holds)
                        .await
                        .unwrap(),
                )
            }
        }
    }
}

/// Runs `call` from `state`, plain on one copy and full on the other:
/// whether the plain one answered (else it said `busy`), or how they
/// differ. `n` makes the locks' prefixes.
pub async fn compare(
    conn: &mut Connection,
    n: usize,
    state: State,
    asked: Call,
) -> Result<bool, String> {
    let (prefix_a, prefix_b): (Arc<str>, Arc<str>) =
        (format!("p{n}a:").into(), format!("p{n}b:").into());
    let (a, b) = (LockKeys::new(&prefix_a, KEY), LockKeys::new(&prefix_b, KEY));
    set_up(conn, &prefix_a, &a, state).await;
    for what in WHAT {
        let _: i64 = redis::cmd("COPY")
            .arg(name(&prefix_a, what))
            .arg(name(&prefix_b, what))
            .query_async(conn)
            .await
            .unwrap();
    }
    let last_fence: u64 = redis::cmd("GET")
        .arg(name(&prefix_a, "fence"))
        .query_async::<Option<u64>>(conn)
        .await
        .unwrap()
        .unwrap_or(0);
    let fence = match asked {
        Call::Release {
            fence: Fence::Right,
            ..
        } => fence_of_t1(conn, &prefix_a).await,
        Call::Release {
            fence: Fence::Wrong,
            ..
        } => fence_of_t1(conn, &prefix_a).await.map(|f| f + 1),
        _ => None,
    };
    let before = snapshot(conn, &prefix_a).await;
    let started = Instant::now();
    let plain = call(conn, &a, asked, fence, true).await;
    let full = call(conn, &b, asked, fence, false).await;
    let ms = started.elapsed().as_millis() as u64 + 2;
    let after_plain = snapshot(conn, &prefix_a).await;
    let after_full = snapshot(conn, &prefix_b).await;
    let mut why = String::new();
    match plain {
        Answer::Busy if after_plain != before => {
            let _ = write!(
                why,
                "busy, yet it changed the lock: {before:?} -> {after_plain:?}"
            );
        }
        Answer::Busy => return Ok(false),
        _ if !same_answer(&plain, &full, last_fence, ms) => {
            let _ = write!(why, "plain {plain:?}, full {full:?}");
        }
        _ => match same_keys(&after_plain, &after_full, ms) {
            Ok(()) => return Ok(true),
            Err(keys) => {
                let _ = write!(why, "the same answer ({plain:?}), other keys: {keys}");
            }
        },
    }
    Err(format!("{state:?}, {asked:?}: {why}"))
}

/// Every state with every call: how many the plain scripts answered
/// themselves, and each difference.
pub async fn compare_all(conn: &mut Connection) -> (usize, Vec<String>) {
    let (mut answered, mut differ) = (0, Vec::new());
    let mut n = 0;
    for state in STATES {
        for asked in CALLS {
            n += 1;
            match compare(conn, n, state, asked).await {
                Ok(plain) => answered += usize::from(plain),
                Err(why) => differ.push(why),
            }
        }
    }
    (answered, differ)
}
