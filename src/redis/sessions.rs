//! Typed wrappers for the session scripts, the Redis names of one session's state, and the deadline index the gateways sweep.
//!
//! A session's keys share the hash tag of its public handle, so its
//! scripts run on one Cluster slot; the deadline index
//! (`<prefix>sessions`: handle -> expiry, Unix ms) is one key of its own,
//! updated beside them. The locks of a session live on their own slots:
//! a session's end is its keys first (marked ended, its locks read), then
//! each lock (`session_release.lua`, with the lock's keys).

use redis::Value;

use super::scripts::{SESSION_END, SESSION_JOIN, SESSION_KEEP, SESSION_OPEN, SESSION_VIEW};
use super::{BackendError, Connection};

/// The Redis names of one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionKeys {
    /// The session's hash.
    pub session: String,
    /// Its locks: `<holder token> <lock key>` -> `<mode> <fencing token>
    /// <lock key>` (a batch's locks share one token).
    pub locks: String,
    /// The locks it waits for: lock key -> waiter id (what deadlock
    /// detection follows).
    pub waits: String,
    /// Every session's expiry, by handle.
    pub index: String,
}

impl SessionKeys {
    pub fn new(prefix: &str, handle: &str) -> Self {
        let session = format!("{prefix}session:{{{handle}}}");
        Self {
            locks: format!("{session}:locks"),
            waits: format!("{session}:waits"),
            session,
            index: index(prefix),
        }
    }
}

/// The deadline index of every session.
pub fn index(prefix: &str) -> String {
    format!("{prefix}sessions")
}

/// A session's lease as a script reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub ttl_ms: u64,
    pub expires_at_ms: u64,
    /// How many locks hang on it (keepalive).
    pub locks: u64,
    pub lock_delay_ms: u64,
}

/// What one new session is.
pub struct Opening<'a> {
    pub ttl_ms: u64,
    pub lock_delay_ms: u64,
    pub value: Option<&'a str>,
    pub principal: &'a str,
}

/// Runs `session_open.lua`, then puts the session in the deadline index.
/// `None` when the handle is taken (never, for a fresh id).
pub async fn open(
    conn: &mut Connection,
    keys: &SessionKeys,
    handle: &str,
    opening: Opening<'_>,
) -> Result<Option<u64>, BackendError> {
    let mut invocation = SESSION_OPEN.call_with_keys(&[&keys.session, &keys.locks]);
    invocation
        .arg(opening.ttl_ms)
        .arg(opening.lock_delay_ms)
        .arg(if opening.value.is_some() { "1" } else { "0" })
        .arg(opening.value.unwrap_or(""))
        .arg(opening.principal);
    let reply = SESSION_OPEN.run(&invocation, conn).await?;
    let expires = SESSION_OPEN.read(&reply, |reply| match reply.code() {
        "opened" => reply.number("expires_at_ms").map(Some),
        "exists" => Some(None),
        _ => None,
    })?;
    if let Some(expires) = expires {
        indexed(conn, keys, handle, expires).await?;
    }
    Ok(expires)
}

/// The session's expiry in the index the gateways sweep.
pub async fn indexed(
    conn: &mut Connection,
    keys: &SessionKeys,
    handle: &str,
    expires_at_ms: u64,
) -> Result<(), BackendError> {
    let _: () = redis::cmd("ZADD")
        .arg(&keys.index)
        .arg(expires_at_ms)
        .arg(handle)
        .query_async(conn)
        .await?;
    Ok(())
}

/// Runs `session_keep.lua` (a new `ttl_ms`, or the session's own), then
/// moves the session in the deadline index. `None`: no such session.
pub async fn keep(
    conn: &mut Connection,
    keys: &SessionKeys,
    handle: &str,
    ttl_ms: Option<u64>,
) -> Result<Option<Lease>, BackendError> {
    let mut invocation = SESSION_KEEP.call_with_keys(&[&keys.session, &keys.locks]);
    invocation.arg(ttl_ms.map_or_else(String::new, |ttl| ttl.to_string()));
    let reply = SESSION_KEEP.run(&invocation, conn).await?;
    let lease = SESSION_KEEP.read(&reply, |reply| match reply.code() {
        "kept" => Some(Some(Lease {
            ttl_ms: reply.number("ttl_ms")?,
            expires_at_ms: reply.number("expires_at_ms")?,
            locks: reply.number("locks")?,
            lock_delay_ms: 0,
        })),
        "not-found" => Some(None),
        _ => None,
    })?;
    if let Some(lease) = lease {
        indexed(conn, keys, handle, lease.expires_at_ms).await?;
    }
    Ok(lease)
}

/// A lock of the session: its holder's token, key, mode, and fencing
/// token (0 while it is being taken).
pub struct Hold<'a> {
    pub token: &'a str,
    pub key: &'a str,
    pub mode: &'a str,
    pub fencing_token: u64,
}

/// Runs `session_join.lua`: the session's lease, or `None` when it has
/// ended (the lock is not to be taken, or given back).
pub async fn join(
    conn: &mut Connection,
    keys: &SessionKeys,
    hold: Hold<'_>,
) -> Result<Option<Lease>, BackendError> {
    let mut invocation = SESSION_JOIN.call_with_keys(&[&keys.session, &keys.locks]);
    invocation
        .arg(hold.token)
        .arg(hold.key)
        .arg(hold.mode)
        .arg(hold.fencing_token);
    let reply = SESSION_JOIN.run(&invocation, conn).await?;
    SESSION_JOIN.read(&reply, |reply| match reply.code() {
        "joined" => Some(Some(Lease {
            ttl_ms: reply.number("ttl_ms")?,
            expires_at_ms: reply.number("expires_at_ms")?,
            locks: 0,
            lock_delay_ms: reply.number("lock_delay_ms")?,
        })),
        "not-found" => Some(None),
        _ => None,
    })
}

/// A lock of a session that is gone (or released): forgotten by it.
pub async fn forget(
    conn: &mut Connection,
    keys: &SessionKeys,
    token: &str,
    key: &str,
) -> Result<(), BackendError> {
    let _: () = redis::cmd("HDEL")
        .arg(&keys.locks)
        .arg(format!("{token} {key}"))
        .query_async(conn)
        .await?;
    Ok(())
}

/// Why a session ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Nobody kept it alive: its locks are freed with its lock-delay.
    Expired,
    /// `DELETE /sessions/{id}`, or its stream's client left.
    Deleted,
    /// Its streamed keeper's gateway shut down.
    ShuttingDown,
}

impl Ending {
    pub fn word(self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::Deleted => "deleted",
            Self::ShuttingDown => "shutting-down",
        }
    }

    fn of(word: &str) -> Option<Self> {
        match word {
            "expired" => Some(Self::Expired),
            "deleted" => Some(Self::Deleted),
            "shutting-down" => Some(Self::ShuttingDown),
            _ => None,
        }
    }
}

/// What `session_end.lua` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndReply {
    /// Ending (now, or since an earlier call): why, the end of the
    /// lock-delay its locks keep (0: none), its locks as (holder token,
    /// lock key), and whether this call was the one that ended it (of two
    /// instances ending it at once, only one was).
    Ending {
        why: Ending,
        delayed_until_ms: u64,
        locks: Vec<(String, String)>,
        ended_now: bool,
    },
    /// Not expired (a sweep that came early): its expiry.
    Alive {
        expires_at_ms: u64,
    },
    NotFound,
}

/// Runs `session_end.lua`: `force` ends it even alive.
pub async fn end(
    conn: &mut Connection,
    keys: &SessionKeys,
    why: Ending,
    force: bool,
) -> Result<EndReply, BackendError> {
    let mut invocation = SESSION_END.call_with_keys(&[&keys.session, &keys.locks]);
    invocation
        .arg(why.word())
        .arg(if force { "1" } else { "0" });
    let reply = SESSION_END.run(&invocation, conn).await?;
    SESSION_END.read(&reply, |reply| match reply.code() {
        "ending" => {
            let locks: Vec<(String, String)> = serde_json::from_str(reply.text("locks")?).ok()?;
            Some(EndReply::Ending {
                why: Ending::of(reply.text("why")?)?,
                delayed_until_ms: reply.number("delayed_until_ms")?,
                locks,
                ended_now: reply.flag("ended_now")?,
            })
        }
        "alive" => Some(EndReply::Alive {
            expires_at_ms: reply.number("expires_at_ms")?,
        }),
        "not-found" => Some(EndReply::NotFound),
        _ => None,
    })
}

/// How long an ended session's reason outlives it, for the instances
/// whose waiters and streams learn of its end by finding it gone.
const ENDED_KEPT_MS: u64 = 60_000;

/// A session ended (`why`, when known) and its locks freed: its keys and
/// its index entry go, but for a short-lived record of why it ended.
pub async fn drop_ended(
    conn: &mut Connection,
    keys: &SessionKeys,
    handle: &str,
    why: Option<Ending>,
) -> Result<(), BackendError> {
    let _: () = redis::cmd("DEL")
        .arg(&keys.session)
        .arg(&keys.locks)
        .arg(&keys.waits)
        .query_async(conn)
        .await?;
    if let Some(why) = why {
        let _: () = redis::pipe()
            .cmd("HSET")
            .arg(&keys.session)
            .arg("ended")
            .arg(why.word())
            .cmd("PEXPIRE")
            .arg(&keys.session)
            .arg(ENDED_KEPT_MS)
            .query_async(conn)
            .await?;
    }
    let _: () = redis::cmd("ZREM")
        .arg(&keys.index)
        .arg(handle)
        .query_async(conn)
        .await?;
    Ok(())
}

/// A session as its holder sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionView {
    pub ttl_ms: u64,
    pub expires_at_ms: u64,
    pub lock_delay_ms: u64,
    pub value: Option<String>,
    pub principal: String,
    /// Its locks: (mode, fencing token, key); 0 for one being taken.
    pub locks: Vec<(String, u64, String)>,
}

/// Runs `session_view.lua`; `None` when it is gone.
pub async fn view(
    conn: &mut Connection,
    keys: &SessionKeys,
) -> Result<Option<SessionView>, BackendError> {
    let invocation = SESSION_VIEW.call_with_keys(&[&keys.session, &keys.locks]);
    let reply = SESSION_VIEW.run(&invocation, conn).await?;
    SESSION_VIEW.read(&reply, |reply| match reply.code() {
        "alive" => {
            let locks: Vec<(String, String, String)> =
                serde_json::from_str(reply.text("locks")?).ok()?;
            Some(Some(SessionView {
                ttl_ms: reply.number("ttl_ms")?,
                expires_at_ms: reply.number("expires_at_ms")?,
                lock_delay_ms: reply.number("lock_delay_ms")?,
                value: reply.text("value").map(str::to_owned),
                principal: reply.text("principal").unwrap_or_default().to_owned(),
                locks: locks
                    .into_iter()
                    .map(|(mode, fence, key)| (mode, fence.parse().unwrap_or(0), key))
                    .collect(),
            }))
        }
        "not-found" => Some(None),
        _ => None,
    })
}

/// Up to `count` sessions whose expiry has passed by the index, and the
/// earliest expiry of the others (when to look again).
pub async fn due(
    conn: &mut Connection,
    prefix: &str,
    now_ms: u64,
    count: usize,
) -> Result<(Vec<String>, Option<u64>), BackendError> {
    let index = index(prefix);
    let (due, next): (Vec<String>, Vec<(String, f64)>) = redis::pipe()
        .cmd("ZRANGEBYSCORE")
        .arg(&index)
        .arg("-inf")
        .arg(now_ms)
        .arg("LIMIT")
        .arg(0)
        .arg(count)
        .cmd("ZRANGEBYSCORE")
        .arg(&index)
        .arg(format!("({now_ms}"))
        .arg("+inf")
        .arg("WITHSCORES")
        .arg("LIMIT")
        .arg(0)
        .arg(1)
        .query_async(conn)
        .await?;
    let next = next.first().map(|(_, score)| *score as u64);
    Ok((due, next))
}

/// Whether a session lives, as Redis holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Alive, until this expiry (Unix ms).
    Alive(u64),
    /// Ended: why, while that is still known.
    Ended(Option<Ending>),
}

/// How each of many sessions stands (their handles' keys); and the Redis
/// clock (Unix ms) as they were read.
pub async fn alive_many(
    conn: &mut Connection,
    sessions: &[SessionKeys],
) -> Result<(Vec<Liveness>, u64), BackendError> {
    let mut alive = Vec::with_capacity(sessions.len());
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok().map(str::to_owned),
        _ => None,
    };
    for keys in sessions {
        let fields: Vec<Value> = redis::cmd("HMGET")
            .arg(&keys.session)
            .arg("expires")
            .arg("ended")
            .query_async(conn)
            .await?;
        let (expires, ended) = match fields.as_slice() {
            [expires, ended] => (text(expires), text(ended)),
            _ => (None, None),
        };
        alive.push(match (expires.and_then(|e| e.parse().ok()), ended) {
            (Some(expires), None) => Liveness::Alive(expires),
            (_, ended) => Liveness::Ended(ended.as_deref().and_then(Ending::of)),
        });
    }
    let now = redis_now_ms(conn).await?;
    Ok((alive, now))
}

/// The Redis server's clock, in Unix ms.
pub async fn redis_now_ms(conn: &mut Connection) -> Result<u64, BackendError> {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await?;
    Ok(seconds * 1000 + micros / 1000)
}

/// The session waits for `key` as waiter `id` (what deadlock detection
/// follows); `None` forgets that wait.
pub async fn note_wait(
    conn: &mut Connection,
    keys: &SessionKeys,
    key: &str,
    id: Option<&str>,
) -> Result<(), BackendError> {
    let command = match id {
        Some(id) => redis::cmd("HSET").arg(&keys.waits).arg(key).arg(id).clone(),
        None => redis::cmd("HDEL").arg(&keys.waits).arg(key).clone(),
    };
    let _: () = command.query_async(conn).await?;
    Ok(())
}

/// The locks the session waits for, each with its waiter id.
pub async fn waits(
    conn: &mut Connection,
    keys: &SessionKeys,
) -> Result<Vec<(String, String)>, BackendError> {
    Ok(redis::cmd("HGETALL")
        .arg(&keys.waits)
        .query_async(conn)
        .await?)
}
