//! The scripts that change who holds a lock: acquire (or queue), release, extend (or claim a place from the queue), leave the queue, set a value, revoke.

use super::{FENCE_RETENTION_MS, LockKeys, LockKind, LockState};
use crate::redis::scripts::{
    ACQUIRE, ACQUIRE_PLAIN, EXTEND, FunctionCall, LEAVE, RELEASE, RELEASE_PLAIN, REVOKE, Reply,
    SESSION_RELEASE, SET_VALUE,
};
use crate::redis::{BackendError, Connection};
use crate::telemetry::trace_context;

/// One attempt at a lock: who, how, for how long, and what to do without a
/// place.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    pub token: &'a str,
    pub kind: LockKind,
    /// The places a counting lock's holder takes (1 for any other kind).
    pub permits: u32,
    pub ttl_ms: u64,
    /// Re-enter the place `token` holds.
    pub reenter: bool,
    /// How long the request may still wait, in milliseconds.
    pub wait_left_ms: u64,
    /// Join the queue as this waiter (of this instance) if there is no
    /// place now; `None`: try once.
    pub waiter: Option<Waiter<'a>>,
    /// A streamed lock's grant (its release is noted for its renewals).
    pub streamed: bool,
    /// The holder's public value.
    pub value: Option<&'a str>,
    /// The request's Idempotency-Key and the hash of the request.
    pub idempotency: Option<(&'a str, &'a str)>,
    /// The session it is taken in: `<handle> <lock-delay ms>`.
    pub session: Option<&'a str>,
}

impl Attempt<'_> {
    /// No wait, stream, value, Idempotency-Key or session: `acquire.lua`
    /// takes none of its last arguments.
    fn asks_nothing_more(&self) -> bool {
        self.waiter.is_none()
            && !self.streamed
            && self.value.is_none()
            && self.idempotency.is_none()
            && self.session.is_none()
    }
}

/// A request that may join a lock's queue.
#[derive(Debug, Clone, Copy)]
pub struct Waiter<'a> {
    pub id: &'a str,
    pub instance: &'a str,
    /// Its instance takes a grant from the queue outright, in one write
    /// (data format 2): see `lua/lib/queue.lua`.
    pub outright: bool,
}

/// What `acquire.lua` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcquireReply {
    /// A new holder's grant.
    Granted(LockState),
    /// The holder's token re-entered its place.
    Reentered(LockState),
    /// The Idempotency-Key's grant, still held: its token and state.
    Replayed {
        token: String,
        state: LockState,
    },
    /// The Idempotency-Key's grant lives, made for another request.
    KeyReused,
    /// In the queue at `position` (1 is next); a place may free in
    /// `free_in_ms`. `token`: it waits as a retry of a request waiting
    /// under the same Idempotency-Key, with that request's token (one
    /// grant serves both).
    Queued {
        position: u64,
        free_in_ms: u64,
        token: Option<String>,
        /// Redis's clock when it queued (Unix ms).
        now_ms: Option<u64>,
    },
    /// No place now, and no wait: a place may free in `free_in_ms`; a
    /// lock nobody holds is kept by a lock-delay until `delayed_until_ms`.
    Held {
        free_in_ms: u64,
        delayed_until_ms: Option<u64>,
    },
    NotOwner,
    /// Held with another limit.
    LimitMismatch {
        limit: u64,
    },
    /// The token holds the lock in the other mode (shared or exclusive).
    ModeConflict,
}

/// Runs `acquire.lua`; a plain try (an exclusive lock, one place, no wait,
/// no re-entry, value, Idempotency-Key or session) runs `acquire_plain.lua`
/// first, with the four keys and three arguments it uses, and `acquire.lua`
/// only when that says someone waits for or watches the lock.
pub async fn acquire(
    conn: &mut Connection,
    keys: &LockKeys,
    publish: &str,
    attempt: Attempt<'_>,
) -> Result<AcquireReply, BackendError> {
    if attempt.asks_nothing_more()
        && !attempt.reenter
        && attempt.kind == LockKind::Exclusive
        && attempt.permits == 1
        && let Some(reply) = acquire_plain(conn, keys, attempt).await?
    {
        return Ok(reply);
    }
    acquire_full(conn, keys, publish, attempt).await
}

/// Runs `acquire.lua` alone (what [`acquire`] runs when the plain try does
/// not apply or says the lock is busy).
pub async fn acquire_full(
    conn: &mut Connection,
    keys: &LockKeys,
    publish: &str,
    attempt: Attempt<'_>,
) -> Result<AcquireReply, BackendError> {
    let plain = attempt.asks_nothing_more();
    let mut invocation = ACQUIRE.call(keys, publish);
    let flag = |on: bool| if on { "1" } else { "0" };
    let (waiter_id, instance, outright) = attempt
        .waiter
        .map_or(("", "", false), |w| (w.id, w.instance, w.outright));
    let (idempotency_key, request_hash) = attempt.idempotency.unwrap_or(("", ""));
    invocation
        .arg(attempt.token)
        .arg(attempt.kind.mode())
        .arg(super::places(attempt.kind, attempt.permits))
        .arg(attempt.ttl_ms)
        .arg(flag(attempt.reenter))
        .arg(FENCE_RETENTION_MS)
        .arg(attempt.wait_left_ms);
    // The rest only when one of them applies: a plain try sends nine
    // arguments fewer.
    if !plain {
        invocation
            .arg(waiter_id)
            .arg(instance)
            .arg(flag(attempt.streamed))
            .arg(flag(attempt.value.is_some()))
            .arg(attempt.value.unwrap_or(""))
            .arg(idempotency_key)
            .arg(request_hash)
            .arg(attempt.session.unwrap_or(""))
            .arg(flag(outright));
    }
    let reply = ACQUIRE.run(&invocation, conn).await?;
    let ttl_ms = attempt.ttl_ms;
    ACQUIRE.read(&reply, |reply| match reply.code() {
        "granted" => lock_state(reply, ttl_ms).map(AcquireReply::Granted),
        "reentered" => lock_state(reply, ttl_ms).map(AcquireReply::Reentered),
        "replayed" => Some(AcquireReply::Replayed {
            token: reply.text("token")?.to_owned(),
            state: lock_state(reply, ttl_ms)?,
        }),
        "key-reused" => Some(AcquireReply::KeyReused),
        "queued" => Some(AcquireReply::Queued {
            position: reply.number("position")?,
            free_in_ms: reply.number("free_in_ms")?,
            token: reply.text("token").map(str::to_owned),
            now_ms: reply.number("now_ms"),
        }),
        "held" => Some(AcquireReply::Held {
            free_in_ms: reply.number("free_in_ms")?,
            delayed_until_ms: reply.number("delayed_until_ms"),
        }),
        "not-owner" => Some(AcquireReply::NotOwner),
        "limit-mismatch" => Some(AcquireReply::LimitMismatch {
            limit: reply.number("limit")?,
        }),
        "mode-conflict" => Some(AcquireReply::ModeConflict),
        _ => None,
    })
}

/// What a plain try in a session did (`acquire_plain.lua` with the
/// session's keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionTry {
    /// Granted, joined and attached: the state shows the session's lease.
    Granted(LockState),
    /// A plain lock held by another: a place may free in `free_in_ms`.
    Held { free_in_ms: u64 },
    /// Waited for, watched, of another kind or kept by a lock-delay:
    /// nothing done (the session's lock is taken the long way).
    Busy,
    /// The session has ended.
    SessionNotFound,
}

/// Runs `acquire_plain.lua` as a plain try in the session of `handle`
/// (`session`: its hash and its locks' keys), on one Redis: the session
/// checked, the lock granted, joined and attached in one step.
pub async fn acquire_in_session(
    conn: &mut Connection,
    keys: &LockKeys,
    (session, session_locks): (&str, &str),
    token: &str,
    (handle, key): (&str, &str),
) -> Result<SessionTry, BackendError> {
    let [lock, fence, queue, watch] = keys.plain_try();
    let mut invocation = ACQUIRE_PLAIN.call_with_keys(&[
        lock,
        fence,
        queue,
        watch,
        session.to_owned(),
        session_locks.to_owned(),
    ]);
    invocation
        .arg(token)
        .arg(0)
        .arg(FENCE_RETENTION_MS)
        .arg(handle)
        .arg(key);
    let reply = ACQUIRE_PLAIN.run(&invocation, conn).await?;
    ACQUIRE_PLAIN.read(&reply, |reply| match reply.code() {
        "granted" => {
            let ttl_ms = reply.number("ttl_ms")?;
            lock_state(reply, ttl_ms).map(SessionTry::Granted)
        }
        "held" => Some(SessionTry::Held {
            free_in_ms: reply.number("free_in_ms")?,
        }),
        "busy" => Some(SessionTry::Busy),
        "session-not-found" => Some(SessionTry::SessionNotFound),
        _ => None,
    })
}

/// Runs `acquire_plain.lua` (a plain try: `attempt`'s token, lease and
/// nothing else): the reply, or `None` when the lock is busy (waited for,
/// watched, or not a plain lock) and `acquire.lua` must run.
pub async fn acquire_plain(
    conn: &mut Connection,
    keys: &LockKeys,
    attempt: Attempt<'_>,
) -> Result<Option<AcquireReply>, BackendError> {
    let mut invocation = ACQUIRE_PLAIN.call_with_keys(&keys.plain_try());
    invocation
        .arg(attempt.token)
        .arg(attempt.ttl_ms)
        .arg(FENCE_RETENTION_MS);
    let reply = ACQUIRE_PLAIN.run(&invocation, conn).await?;
    let ttl_ms = attempt.ttl_ms;
    ACQUIRE_PLAIN.read(&reply, |reply| match reply.code() {
        "granted" => lock_state(reply, ttl_ms).map(|state| Some(AcquireReply::Granted(state))),
        "held" => Some(Some(AcquireReply::Held {
            free_in_ms: reply.number("free_in_ms")?,
            delayed_until_ms: None,
        })),
        "busy" => Some(None),
        _ => None,
    })
}

/// Reads a [`LockState`] from a reply with `fence`, `holds` and
/// `expires_at_ms`, for a lease of `ttl_ms`.
fn lock_state(reply: &Reply, ttl_ms: u64) -> Option<LockState> {
    Some(LockState {
        fencing_token: reply.number("fence")?,
        holds: reply.number("holds")?,
        ttl_ms,
        expires_at_ms: reply.number("expires_at_ms")?,
        session: reply
            .text("session")
            .filter(|handle| !handle.is_empty())
            .map(str::to_owned),
    })
}

/// How much of a holder's claim a release gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holds {
    /// One re-entrant hold (a `DELETE`).
    One,
    /// Every hold of the token (a streamed lock whose client left).
    All,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseReply {
    /// The place is free; the handle of the session it hung on, if any.
    Released {
        session: Option<String>,
    },
    HoldsLeft(u64),
    NotFound,
    NotOwner,
    /// The Idempotency-Key was given to a release by another token.
    KeyReused,
}

/// Runs `release.lua`: one hold less (or all of them); a freed place goes
/// to the head of the queue. `release_plain.lua` runs first, with the three
/// keys and few arguments a plain holder's release uses, and `release.lua`
/// only when that says the lock is busy (waited for, watched, not a plain
/// lock, or a streamed one).
pub async fn release(
    conn: &mut Connection,
    keys: &LockKeys,
    publish: &str,
    (token, fence): (&str, Option<u64>),
    holds: Holds,
) -> Result<ReleaseReply, BackendError> {
    if let Some(released) = release_plain(conn, keys, publish, (token, fence), holds).await? {
        return Ok(released);
    }
    release_full(conn, keys, publish, (token, fence), holds).await
}

/// Runs `release_plain.lua`: the reply, or `None` when the lock is busy
/// (no plain holder of that token that is not streamed, or waited for or
/// watched) and `release.lua` must run.
pub async fn release_plain(
    conn: &mut Connection,
    keys: &LockKeys,
    publish: &str,
    (token, fence): (&str, Option<u64>),
    holds: Holds,
) -> Result<Option<ReleaseReply>, BackendError> {
    let mut invocation = RELEASE_PLAIN.call_with_keys(&keys.plain_release());
    invocation
        .arg(publish)
        .arg(keys.released())
        .arg(token)
        .arg(holds_arg(holds));
    if let Some(fence) = fence {
        invocation.arg(fence);
    }
    let reply = RELEASE_PLAIN.run(&invocation, conn).await?;
    RELEASE_PLAIN.read(&reply, |reply| match reply.code() {
        "busy" => Some(None),
        _ => release_reply(reply).map(Some),
    })
}

/// Runs `release.lua` alone (what [`release`] runs when the plain release
/// says the lock is busy).
pub async fn release_full(
    conn: &mut Connection,
    keys: &LockKeys,
    publish: &str,
    (token, fence): (&str, Option<u64>),
    holds: Holds,
) -> Result<ReleaseReply, BackendError> {
    let mut invocation = release_of(keys, publish, token, holds);
    let traced = trace_context::current();
    match (fence, &traced) {
        (Some(fence), _) => {
            invocation.arg(fence);
        }
        (None, Some(_)) => {
            invocation.arg("");
        }
        (None, None) => {}
    }
    if let Some(traceparent) = traced {
        // No Idempotency-Key (ARGV[8], ARGV[9]), then the release's span.
        invocation.arg("").arg(0).arg(traceparent);
    }
    let reply = RELEASE.run(&invocation, conn).await?;
    RELEASE.read(&reply, release_reply)
}

/// Runs `release.lua` under an Idempotency-Key `(key, kept_ms)`: a retry
/// with the same key and token answers what the first did, whether or not
/// its answer arrived; with the reply, whether it is such an answer again.
pub async fn release_keyed(
    conn: &mut Connection,
    keys: &LockKeys,
    publish: &str,
    (token, fence): (&str, Option<u64>),
    (idempotency_key, kept_ms): (&str, u64),
) -> Result<(ReleaseReply, bool), BackendError> {
    let mut invocation = release_of(keys, publish, token, Holds::One);
    invocation
        .arg(fence.map_or_else(String::new, |fence| fence.to_string()))
        .arg(idempotency_key)
        .arg(kept_ms);
    if let Some(traceparent) = trace_context::current() {
        invocation.arg(traceparent);
    }
    let reply = RELEASE.run(&invocation, conn).await?;
    RELEASE.read(&reply, |reply| {
        Some((
            release_reply(reply)?,
            reply.flag("replayed").unwrap_or(false),
        ))
    })
}

/// Reads what `release.lua` (or `release_plain.lua`) did.
fn release_reply(reply: &Reply) -> Option<ReleaseReply> {
    match reply.code() {
        "released" => Some(ReleaseReply::Released {
            session: reply
                .text("session")
                .filter(|handle| !handle.is_empty())
                .map(str::to_owned),
        }),
        "holds-left" => reply.number("holds").map(ReleaseReply::HoldsLeft),
        "not-found" => Some(ReleaseReply::NotFound),
        "not-owner" => Some(ReleaseReply::NotOwner),
        "key-reused" => Some(ReleaseReply::KeyReused),
        _ => None,
    }
}

/// How release scripts name `holds`.
fn holds_arg(holds: Holds) -> &'static str {
    match holds {
        Holds::One => "one",
        Holds::All => "all",
    }
}

/// Runs `release.lua` for every hold of many locks at once (one pipeline
/// on one Redis). An error is the first of those that failed.
pub async fn release_many(
    conn: &mut Connection,
    releases: &[(&LockKeys, &str)],
    publish: &str,
) -> Result<(), BackendError> {
    let invocations: Vec<_> = releases
        .iter()
        .map(|(keys, token)| release_of(keys, publish, token, Holds::All))
        .collect();
    RELEASE
        .run_all(&invocations, conn)
        .await?
        .into_iter()
        .try_for_each(|reply| reply.map(drop))
}

fn release_of(keys: &LockKeys, publish: &str, token: &str, holds: Holds) -> FunctionCall {
    let mut invocation = RELEASE.call(keys, publish);
    invocation
        .arg(token)
        .arg(holds_arg(holds))
        .arg(FENCE_RETENTION_MS);
    invocation
}

/// Why a holder's token holds its place no more, as `extend.lua` and
/// `set_value.lua` tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoPlace {
    /// No such lock: the lease ran out, or it was deleted.
    NotFound,
    /// Held under other tokens.
    NotOwner,
    /// A streamed holder's token released it itself.
    Released,
    /// An operator revoked it.
    Revoked,
    /// The session it hung on ended (expired, or deleted).
    SessionEnded,
}

impl NoPlace {
    fn of(code: &str) -> Option<Self> {
        match code {
            "not-found" => Some(Self::NotFound),
            "not-owner" => Some(Self::NotOwner),
            "released" => Some(Self::Released),
            "revoked" => Some(Self::Revoked),
            "expired" | "ended" => Some(Self::SessionEnded),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtendReply {
    Extended(LockState),
    Lost(NoPlace),
}

/// Runs `extend.lua`: the lease becomes `ttl_ms` from now (also how a
/// waiter granted a place from the queue claims it for its whole lease).
pub async fn extend(
    conn: &mut Connection,
    keys: &LockKeys,
    publish: &str,
    token: &str,
    ttl_ms: u64,
) -> Result<ExtendReply, BackendError> {
    let reply = EXTEND
        .run(&extension(keys, publish, token, ttl_ms), conn)
        .await?;
    extend_reply(&reply, ttl_ms)
}

/// Runs `extend.lua` to attach a session's holder to its session: its
/// lease becomes the session's.
pub async fn attach(
    conn: &mut Connection,
    keys: &LockKeys,
    publish: &str,
    token: &str,
) -> Result<ExtendReply, BackendError> {
    let mut invocation = extension(keys, publish, token, 0);
    invocation.arg("1");
    let reply = EXTEND.run(&invocation, conn).await?;
    extend_reply(&reply, 0)
}

/// Runs `session_release.lua`: the session holder `token`'s place ends
/// with its session (`expired`: watchers get `expired`, and the lock keeps
/// its lock-delay until `delayed_until_ms`; else as a release). Whether it
/// held a place.
pub async fn session_release(
    conn: &mut Connection,
    keys: &LockKeys,
    publish: &str,
    token: &str,
    (why, delayed_until_ms): (&str, u64),
) -> Result<bool, BackendError> {
    let mut invocation = SESSION_RELEASE.call(keys, publish);
    invocation
        .arg(token)
        .arg(why)
        .arg(delayed_until_ms)
        .arg(FENCE_RETENTION_MS);
    let reply = SESSION_RELEASE.run(&invocation, conn).await?;
    SESSION_RELEASE.read(&reply, |reply| match reply.code() {
        "ended" => Some(true),
        "gone" => Some(false),
        _ => None,
    })
}

/// One lease to renew: the lock, its holder's token, the new lease in ms.
pub type Renewal<'a> = (&'a LockKeys, &'a str, u64);

/// Runs `extend.lua` for many leases at once (one pipeline on one Redis).
/// The outer error fails them all; an inner one fails only its own (a
/// cluster node that is down fails the locks it holds, not the others').
pub async fn extend_many(
    conn: &mut Connection,
    renewals: &[Renewal<'_>],
    publish: &str,
) -> Result<Vec<Result<ExtendReply, BackendError>>, BackendError> {
    let invocations: Vec<_> = renewals
        .iter()
        .map(|(keys, token, ttl_ms)| extension(keys, publish, token, *ttl_ms))
        .collect();
    let replies = EXTEND.run_all(&invocations, conn).await?;
    Ok(replies
        .into_iter()
        .zip(renewals)
        .map(|(reply, (_, _, ttl_ms))| extend_reply(&reply?, *ttl_ms))
        .collect())
}

fn extension(keys: &LockKeys, publish: &str, token: &str, ttl_ms: u64) -> FunctionCall {
    let mut invocation = EXTEND.call(keys, publish);
    invocation.arg(token).arg(ttl_ms).arg(FENCE_RETENTION_MS);
    invocation
}

fn extend_reply(reply: &Reply, ttl_ms: u64) -> Result<ExtendReply, BackendError> {
    EXTEND.read(reply, |reply| match reply.code() {
        "extended" => lock_state(reply, ttl_ms).map(ExtendReply::Extended),
        code => NoPlace::of(code).map(ExtendReply::Lost),
    })
}

/// What `leave.lua` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaveReply {
    /// Out of the queue; a place frees in `free_in_ms` (as it stands now);
    /// a lock-delay alone keeps it until `delayed_until_ms`.
    Left {
        free_in_ms: u64,
        delayed_until_ms: Option<u64>,
    },
    /// Granted a place before it left: its fencing token and lease end.
    Granted {
        fencing_token: u64,
        expires_at_ms: u64,
    },
    /// Neither in the queue nor holding (passed over).
    Gone {
        free_in_ms: u64,
        delayed_until_ms: Option<u64>,
    },
    /// Granted a place, and gave it back (the next waiter was served).
    GivenBack,
}

/// Whether a waiter that leaves keeps a place it was granted meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfGranted {
    /// It learns of the grant (and claims it, or releases it later).
    Keep,
    /// The place goes on to the next waiter in the same step: the request
    /// is answered that nothing was granted.
    GiveBack,
}

/// Runs `leave.lua`: waiter `id` (with `token`) leaves the queue.
pub async fn leave(
    conn: &mut Connection,
    keys: &LockKeys,
    publish: &str,
    (id, token): (&str, &str),
    if_granted: IfGranted,
) -> Result<LeaveReply, BackendError> {
    let mut invocation = LEAVE.call(keys, publish);
    let give_back = if if_granted == IfGranted::GiveBack {
        "1"
    } else {
        "0"
    };
    invocation
        .arg(id)
        .arg(token)
        .arg(FENCE_RETENTION_MS)
        .arg(give_back);
    let reply = LEAVE.run(&invocation, conn).await?;
    LEAVE.read(&reply, |reply| match reply.code() {
        "left" => Some(LeaveReply::Left {
            free_in_ms: reply.number("free_in_ms")?,
            delayed_until_ms: reply.number("delayed_until_ms"),
        }),
        "granted" => Some(LeaveReply::Granted {
            fencing_token: reply.number("fence")?,
            expires_at_ms: reply.number("expires_at_ms")?,
        }),
        "gone" => Some(LeaveReply::Gone {
            free_in_ms: reply.number("free_in_ms")?,
            delayed_until_ms: reply.number("delayed_until_ms"),
        }),
        "given-back" => Some(LeaveReply::GivenBack),
        _ => None,
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetValueReply {
    /// Set: the holder's lease as it stands.
    Set(LockState),
    Lost(NoPlace),
}

/// Runs `set_value.lua`: the holder's public value becomes `value` (none
/// removes it).
pub async fn set_value(
    conn: &mut Connection,
    keys: &LockKeys,
    publish: &str,
    token: &str,
    value: Option<&str>,
) -> Result<SetValueReply, BackendError> {
    let mut invocation = SET_VALUE.call(keys, publish);
    invocation
        .arg(token)
        .arg(if value.is_some() { "1" } else { "0" })
        .arg(value.unwrap_or(""));
    let reply = SET_VALUE.run(&invocation, conn).await?;
    SET_VALUE.read(&reply, |reply| match reply.code() {
        "set" => lock_state(reply, reply.number("ttl_ms")?).map(SetValueReply::Set),
        code => NoPlace::of(code).map(SetValueReply::Lost),
    })
}

/// What a revocation took back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revoked {
    /// How many places.
    pub holders: u64,
    /// The revoked holders that hung on a session: (its handle, their token).
    pub sessions: Vec<(String, String)>,
}

/// Reads `<handle> <token> <handle> <token> ...`.
fn sessions_of(text: &str) -> Vec<(String, String)> {
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .chunks_exact(2)
        .map(|pair| (pair[0].to_owned(), pair[1].to_owned()))
        .collect()
}

/// Runs `revoke.lua`: every hold ends (or the one with the fencing token
/// `only_fencing_token`); `longest_lease_ms` bounds the old
/// holders' leases, which the fence counter outlives. Returns what was
/// taken back; `None` when nobody held the lock (or that hold).
pub async fn revoke(
    conn: &mut Connection,
    keys: &LockKeys,
    publish: &str,
    longest_lease_ms: u64,
    only_fencing_token: Option<u64>,
) -> Result<Option<Revoked>, BackendError> {
    let mut invocation = REVOKE.call(keys, publish);
    invocation
        .arg(FENCE_RETENTION_MS)
        .arg(longest_lease_ms)
        .arg(only_fencing_token.map_or_else(String::new, |token| token.to_string()));
    let reply = REVOKE.run(&invocation, conn).await?;
    REVOKE.read(&reply, |reply| match reply.code() {
        "revoked" => Some(Some(Revoked {
            holders: reply.number("holders")?,
            sessions: sessions_of(reply.text("sessions")?),
        })),
        "not-found" => Some(None),
        _ => None,
    })
}

/// Names `lock` as the one an Idempotency-Key is for, for `lives_ms`,
/// unless the key names a lock already: returns the lock it named before
/// (`SET NX GET`, one step).
pub async fn claim_idempotency_key(
    conn: &mut Connection,
    prefix: &str,
    idempotency_key: &str,
    lock: &str,
    lives_ms: u64,
) -> Result<Option<String>, BackendError> {
    let record = format!("{prefix}idempotency:{{{idempotency_key}}}");
    Ok(redis::cmd("SET")
        .arg(&record)
        .arg(lock)
        .arg("NX")
        .arg("GET")
        .arg("PX")
        .arg(lives_ms)
        .query_async(conn)
        .await?)
}
