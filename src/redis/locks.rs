//! Typed wrappers for the lock scripts, and the Redis names of one lock's state.

use redis::ScriptInvocation;

use super::scripts::{
    ACQUIRE, ACQUIRE_MANY, EXTEND, INSPECT, LuaScript, RELEASE, RENEW_MARK, Reply, WITHDRAW,
};
use super::{BackendError, Connection};

/// How long a lock's fence counter outlives its lease. Fencing tokens stay
/// increasing without it (they never fall below the Redis clock in µs); the
/// counter only guards against the clock stepping back meanwhile. A day of one
/// short string per recently used lock name is cheap.
const FENCE_RETENTION_MS: u64 = 24 * 60 * 60 * 1000;

/// The Redis names of one lock's state (laid out in `lua/lib/holders.lua`).
/// All share the hash tag `{<key>}`, so in Redis Cluster one lock lives in
/// one slot and its scripts run there.
#[derive(Debug, Clone)]
pub struct LockKeys {
    /// Hash: `owner`, `holds`, `fence` for a plain lock; `mode`, `limit`
    /// and each holder's holds and fence for one with many holders. Its TTL
    /// is the (latest) lease.
    pub lock: String,
    /// String: the last fencing token issued for the key.
    pub fence: String,
    /// Sorted set: a lock with many holders' tokens, by lease end.
    pub holders: String,
    /// Sorted set: exclusive requests waiting for shared holders to leave.
    pub writers: String,
    /// Hash: streamed holders that released the lock, until their lease
    /// would have ended.
    pub gone: String,
    /// Pub/sub channel told when a place in the lock is freed.
    pub channel: String,
}

impl LockKeys {
    /// The names of lock `key` (already checked by the domain: no braces).
    pub fn new(prefix: &str, key: &str) -> Self {
        Self {
            lock: format!("{prefix}lock:{{{key}}}"),
            fence: format!("{prefix}fence:{{{key}}}"),
            holders: format!("{prefix}holders:{{{key}}}"),
            writers: format!("{prefix}writers:{{{key}}}"),
            gone: format!("{prefix}gone:{{{key}}}"),
            channel: format!("{prefix}released:{{{key}}}"),
        }
    }
}

/// How a lock admits holders. The domain hands it on as it is
/// (`locks::LockKind`), validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// One holder at a time: a plain lock (a mutex).
    Exclusive,
    /// Any number of holders at once, while no exclusive request waits
    /// (a read lock).
    Shared,
    /// Up to this many holders at once, 2 or more (a semaphore).
    Counted(u32),
}

impl LockKind {
    /// How many may hold it at once; `None` for no bound (shared).
    pub fn limit(self) -> Option<u32> {
        match self {
            Self::Exclusive => Some(1),
            Self::Shared => None,
            Self::Counted(limit) => Some(limit),
        }
    }

    pub fn is_shared(self) -> bool {
        self == Self::Shared
    }
}

/// A held lock's state as the scripts report it, without its token; its end
/// is the expiry Redis holds. The domain hands it on as it is
/// (`locks::LockState`), so a grant, a renewal and an inspection share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockState {
    pub fencing_token: u64,
    pub holds: u64,
    pub ttl_ms: u64,
    pub expires_at_ms: u64,
}

/// A lock as `inspect.lua` sees it: its state (the newest fencing token,
/// every holder's holds together, the latest lease), its kind, and how many
/// hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inspection {
    pub state: LockState,
    pub kind: LockKind,
    pub holders: u64,
}

/// What an acquire script did for a new holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireReply {
    /// Granted; `room` when another request could be admitted now too.
    Granted { state: LockState, room: bool },
    /// No place now: one may free in `remaining_ms`. `marked` when the
    /// request was marked as a waiting writer (the grant, or a withdrawal,
    /// must remove it). `behind_writer` when nobody holds the key and only
    /// a waiting writer keeps this shared request out.
    Held {
        remaining_ms: u64,
        marked: bool,
        behind_writer: bool,
    },
    /// The key is held with another limit.
    LimitMismatch { limit: u64 },
}

/// What an acquire script did for a holder re-entering with its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReenterReply {
    Reentered(LockState),
    NotOwner,
    /// The key is held with another limit.
    LimitMismatch {
        limit: u64,
    },
    /// The token holds the lock in the other mode (shared or exclusive).
    ModeConflict,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseReply {
    Released,
    HoldsLeft(u64),
    NotFound,
    NotOwner,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtendReply {
    Extended(LockState),
    NotFound,
    NotOwner,
    /// A streamed holder's token released the lock itself.
    Released,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InspectReply {
    Held(Inspection),
    NotFound,
}

/// One attempt of a new holder: who, for how long, how long it may still
/// wait, whether an earlier attempt marked it as a waiting writer, and
/// whether it is a streamed lock's.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    pub token: &'a str,
    pub ttl_ms: u64,
    pub wait_left_ms: u64,
    pub marked: bool,
    pub streamed: bool,
}

/// Runs the acquire script of `kind` for a new holder.
pub async fn acquire(
    conn: &mut Connection,
    keys: &LockKeys,
    kind: LockKind,
    attempt: Attempt<'_>,
) -> Result<AcquireReply, BackendError> {
    let reply = run_acquire(conn, keys, kind, attempt, false).await?;
    script_of(kind).read(&reply, |reply| match reply.code() {
        "granted" => Some(AcquireReply::Granted {
            state: lock_state(reply)?,
            room: reply.flag("room")?,
        }),
        "held" => Some(AcquireReply::Held {
            remaining_ms: reply.number("remaining_ms")?,
            marked: reply.flag("marked")?,
            behind_writer: reply.flag("behind_writer")?,
        }),
        "limit-mismatch" => Some(AcquireReply::LimitMismatch {
            limit: reply.number("limit")?,
        }),
        _ => None,
    })
}

/// Runs the acquire script of `kind` to re-enter with the holder's `token`.
pub async fn reenter(
    conn: &mut Connection,
    keys: &LockKeys,
    kind: LockKind,
    token: &str,
    ttl_ms: u64,
) -> Result<ReenterReply, BackendError> {
    let attempt = Attempt {
        token,
        ttl_ms,
        wait_left_ms: 0,
        marked: false,
        streamed: false,
    };
    let reply = run_acquire(conn, keys, kind, attempt, true).await?;
    script_of(kind).read(&reply, |reply| match reply.code() {
        "reentered" => lock_state(reply).map(ReenterReply::Reentered),
        "not-owner" => Some(ReenterReply::NotOwner),
        "limit-mismatch" => Some(ReenterReply::LimitMismatch {
            limit: reply.number("limit")?,
        }),
        "mode-conflict" => Some(ReenterReply::ModeConflict),
        _ => None,
    })
}

/// A plain lock has its own, shorter script: the common case pays for
/// nothing it does not use.
fn script_of(kind: LockKind) -> &'static LuaScript {
    match kind {
        LockKind::Exclusive => &ACQUIRE,
        LockKind::Shared | LockKind::Counted(_) => &ACQUIRE_MANY,
    }
}

async fn run_acquire(
    conn: &mut Connection,
    keys: &LockKeys,
    kind: LockKind,
    attempt: Attempt<'_>,
    reenter: bool,
) -> Result<Reply, BackendError> {
    let script = script_of(kind);
    let mut invocation = script.prepare();
    invocation
        .key(&keys.lock)
        .key(&keys.fence)
        .key(&keys.holders)
        .key(&keys.writers)
        .arg(attempt.token)
        .arg(attempt.ttl_ms)
        .arg(if reenter { "1" } else { "0" })
        .arg(FENCE_RETENTION_MS);
    match kind {
        LockKind::Exclusive => {}
        LockKind::Shared => {
            invocation.arg("shared").arg(0);
        }
        LockKind::Counted(limit) => {
            invocation.arg("counted").arg(limit);
        }
    }
    invocation
        .arg(attempt.wait_left_ms)
        .arg(if attempt.marked { "1" } else { "0" })
        .arg(if attempt.streamed { "1" } else { "0" });
    script.run(&invocation, conn).await
}

/// Runs `withdraw.lua`: `token` stopped waiting without the lock, so its
/// mark as a waiting writer goes, and the lock's waiters are told.
pub async fn withdraw(
    conn: &mut Connection,
    keys: &LockKeys,
    token: &str,
    publish: &str,
) -> Result<(), BackendError> {
    let reply = WITHDRAW
        .run(
            WITHDRAW
                .prepare()
                .key(&keys.writers)
                .arg(token)
                .arg(&keys.channel)
                .arg(publish),
            conn,
        )
        .await?;
    WITHDRAW.read(&reply, |reply| {
        matches!(reply.code(), "withdrawn" | "not-marked").then_some(())
    })
}

/// Runs `renew_mark.lua`: the waiting writer `token` is still there, for
/// `wait_left_ms` more at most. False when its mark was gone.
pub async fn renew_mark(
    conn: &mut Connection,
    keys: &LockKeys,
    token: &str,
    wait_left_ms: u64,
) -> Result<bool, BackendError> {
    let reply = RENEW_MARK
        .run(
            RENEW_MARK
                .prepare()
                .key(&keys.writers)
                .arg(token)
                .arg(wait_left_ms),
            conn,
        )
        .await?;
    RENEW_MARK.read(&reply, |reply| match reply.code() {
        "renewed" => Some(true),
        "gone" => Some(false),
        _ => None,
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

/// Runs `release.lua`: one hold less (or all of them), and a message on the
/// channel (sent with `publish`) when the lock is freed.
pub async fn release(
    conn: &mut Connection,
    keys: &LockKeys,
    token: &str,
    publish: &str,
    holds: Holds,
) -> Result<ReleaseReply, BackendError> {
    let reply = RELEASE
        .run(&release_of(keys, token, publish, holds), conn)
        .await?;
    RELEASE.read(&reply, |reply| match reply.code() {
        "released" => Some(ReleaseReply::Released),
        "holds-left" => reply.number("holds").map(ReleaseReply::HoldsLeft),
        "not-found" => Some(ReleaseReply::NotFound),
        "not-owner" => Some(ReleaseReply::NotOwner),
        _ => None,
    })
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
        .map(|(keys, token)| release_of(keys, token, publish, Holds::All))
        .collect();
    RELEASE
        .run_all(&invocations, conn)
        .await?
        .into_iter()
        .try_for_each(|reply| reply.map(drop))
}

fn release_of<'a>(
    keys: &LockKeys,
    token: &str,
    publish: &str,
    holds: Holds,
) -> ScriptInvocation<'a> {
    let mut invocation = RELEASE.prepare();
    invocation
        .key(&keys.lock)
        .key(&keys.holders)
        .key(&keys.gone)
        .arg(token)
        .arg(&keys.channel)
        .arg(publish)
        .arg(match holds {
            Holds::One => "one",
            Holds::All => "all",
        });
    invocation
}

/// Runs `extend.lua`: the lease becomes `ttl_ms` from now.
pub async fn extend(
    conn: &mut Connection,
    keys: &LockKeys,
    token: &str,
    ttl_ms: u64,
) -> Result<ExtendReply, BackendError> {
    let reply = EXTEND.run(&extension(keys, token, ttl_ms), conn).await?;
    extend_reply(&reply, ttl_ms)
}

/// One lease to renew: the lock, its holder's token, the new lease in ms.
pub type Renewal<'a> = (&'a LockKeys, &'a str, u64);

/// Runs `extend.lua` for many leases at once (one pipeline on one Redis).
/// The outer error fails them all; an inner one fails only its own (a
/// cluster node that is down fails the locks it holds, not the others').
pub async fn extend_many(
    conn: &mut Connection,
    renewals: &[Renewal<'_>],
) -> Result<Vec<Result<ExtendReply, BackendError>>, BackendError> {
    let invocations: Vec<_> = renewals
        .iter()
        .map(|(keys, token, ttl_ms)| extension(keys, token, *ttl_ms))
        .collect();
    let replies = EXTEND.run_all(&invocations, conn).await?;
    Ok(replies
        .into_iter()
        .zip(renewals)
        .map(|(reply, (_, _, ttl_ms))| extend_reply(&reply?, *ttl_ms))
        .collect())
}

fn extension<'a>(keys: &LockKeys, token: &str, ttl_ms: u64) -> ScriptInvocation<'a> {
    let mut invocation = EXTEND.prepare();
    invocation
        .key(&keys.lock)
        .key(&keys.fence)
        .key(&keys.holders)
        .key(&keys.gone)
        .arg(token)
        .arg(ttl_ms)
        .arg(FENCE_RETENTION_MS);
    invocation
}

fn extend_reply(reply: &Reply, ttl_ms: u64) -> Result<ExtendReply, BackendError> {
    EXTEND.read(reply, |reply| match reply.code() {
        "extended" => Some(ExtendReply::Extended(LockState {
            fencing_token: reply.number("fence")?,
            holds: reply.number("holds")?,
            ttl_ms,
            expires_at_ms: reply.number("expires_at_ms")?,
        })),
        "not-found" => Some(ExtendReply::NotFound),
        "not-owner" => Some(ExtendReply::NotOwner),
        "released" => Some(ExtendReply::Released),
        _ => None,
    })
}

/// Runs `inspect.lua`.
pub async fn inspect(conn: &mut Connection, keys: &LockKeys) -> Result<InspectReply, BackendError> {
    let reply = INSPECT
        .run(INSPECT.prepare().key(&keys.lock).key(&keys.holders), conn)
        .await?;
    INSPECT.read(&reply, |reply| match reply.code() {
        "held" => {
            let kind = match (reply.text("mode")?, reply.number("limit")?) {
                ("shared", _) => LockKind::Shared,
                ("exclusive", 1) => LockKind::Exclusive,
                ("counted", limit) => LockKind::Counted(u32::try_from(limit).ok()?),
                _ => return None,
            };
            Some(InspectReply::Held(Inspection {
                state: lock_state(reply)?,
                kind,
                holders: reply.number("holders")?,
            }))
        }
        "not-found" => Some(InspectReply::NotFound),
        _ => None,
    })
}

/// Reads a [`LockState`] from a reply with `fence`, `holds`, `ttl_ms` and
/// `expires_at_ms`.
fn lock_state(reply: &Reply) -> Option<LockState> {
    Some(LockState {
        fencing_token: reply.number("fence")?,
        holds: reply.number("holds")?,
        ttl_ms: reply.number("ttl_ms")?,
        expires_at_ms: reply.number("expires_at_ms")?,
    })
}
