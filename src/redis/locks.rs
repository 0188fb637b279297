//! Typed wrappers for the lock scripts, and the Redis names of one lock's state.

use redis::ScriptInvocation;

use super::scripts::{ACQUIRE, EXTEND, INSPECT, RELEASE};
use super::{BackendError, Connection};

/// How long a lock's fence counter outlives its lease. Fencing tokens stay
/// increasing without it (they never fall below the Redis clock in µs); the
/// counter only guards against the clock stepping back meanwhile. A day of one
/// short string per recently used lock name is cheap.
const FENCE_RETENTION_MS: u64 = 24 * 60 * 60 * 1000;

/// The Redis names of one lock's state. All share the hash tag `{<key>}`, so in
/// Redis Cluster one lock lives in one slot and its scripts run there.
#[derive(Debug, Clone)]
pub struct LockKeys {
    /// Hash: `owner`, `holds`, `fence`; its TTL is the lease.
    pub lock: String,
    /// String: the last fencing token issued for the key.
    pub fence: String,
    /// Pub/sub channel told when the lock is freed.
    pub channel: String,
}

impl LockKeys {
    /// The names of lock `key` (already checked by the domain: no braces).
    pub fn new(prefix: &str, key: &str) -> Self {
        Self {
            lock: format!("{prefix}lock:{{{key}}}"),
            fence: format!("{prefix}fence:{{{key}}}"),
            channel: format!("{prefix}released:{{{key}}}"),
        }
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

/// What `acquire.lua` did for a new owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireReply {
    Granted(LockState),
    Held { remaining_ms: u64 },
}

/// What `acquire.lua` did for a holder re-entering with its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReenterReply {
    Reentered(LockState),
    NotOwner,
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InspectReply {
    Held(LockState),
    NotFound,
}

/// Runs `acquire.lua` for a new owner with the fresh `token`.
pub async fn acquire(
    conn: &mut Connection,
    keys: &LockKeys,
    token: &str,
    ttl_ms: u64,
) -> Result<AcquireReply, BackendError> {
    let reply = run_acquire(conn, keys, token, ttl_ms, false).await?;
    match reply.first() {
        Some(1) => grant(&reply).map(AcquireReply::Granted),
        Some(0) => field(&reply, 3).map(|remaining_ms| AcquireReply::Held { remaining_ms }),
        _ => None,
    }
    .ok_or_else(|| ACQUIRE.unexpected(reply.clone()))
}

/// Runs `acquire.lua` to re-enter with the holder's `token`.
pub async fn reenter(
    conn: &mut Connection,
    keys: &LockKeys,
    token: &str,
    ttl_ms: u64,
) -> Result<ReenterReply, BackendError> {
    let reply = run_acquire(conn, keys, token, ttl_ms, true).await?;
    match reply.first() {
        Some(2) => grant(&reply).map(ReenterReply::Reentered),
        Some(-1) => Some(ReenterReply::NotOwner),
        _ => None,
    }
    .ok_or_else(|| ACQUIRE.unexpected(reply.clone()))
}

async fn run_acquire(
    conn: &mut Connection,
    keys: &LockKeys,
    token: &str,
    ttl_ms: u64,
    reenter: bool,
) -> Result<Vec<i64>, BackendError> {
    ACQUIRE
        .run(
            ACQUIRE
                .prepare()
                .key(&keys.lock)
                .key(&keys.fence)
                .arg(token)
                .arg(ttl_ms)
                .arg(if reenter { "1" } else { "0" })
                .arg(FENCE_RETENTION_MS),
            conn,
        )
        .await
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
    match reply.first() {
        Some(1) => Some(ReleaseReply::Released),
        Some(2) => field(&reply, 1).map(ReleaseReply::HoldsLeft),
        Some(0) => Some(ReleaseReply::NotFound),
        Some(-1) => Some(ReleaseReply::NotOwner),
        _ => None,
    }
    .ok_or_else(|| RELEASE.unexpected(reply.clone()))
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
        .arg(token)
        .arg(ttl_ms)
        .arg(FENCE_RETENTION_MS);
    invocation
}

fn extend_reply(reply: &[i64], ttl_ms: u64) -> Result<ExtendReply, BackendError> {
    match reply.first() {
        Some(1) => field(reply, 3).and_then(|expires_at_ms| {
            Some(ExtendReply::Extended(LockState {
                fencing_token: field(reply, 1)?,
                holds: field(reply, 2)?,
                ttl_ms,
                expires_at_ms,
            }))
        }),
        Some(0) => Some(ExtendReply::NotFound),
        Some(-1) => Some(ExtendReply::NotOwner),
        _ => None,
    }
    .ok_or_else(|| EXTEND.unexpected(reply.to_vec()))
}

/// Runs `inspect.lua`.
pub async fn inspect(conn: &mut Connection, keys: &LockKeys) -> Result<InspectReply, BackendError> {
    let reply = INSPECT.run(INSPECT.prepare().key(&keys.lock), conn).await?;
    match reply.first() {
        Some(1) => grant(&reply).map(InspectReply::Held),
        Some(0) => Some(InspectReply::NotFound),
        _ => None,
    }
    .ok_or_else(|| INSPECT.unexpected(reply.clone()))
}

/// Reads a [`LockState`] from replies shaped `{code, fence, holds, ttl, expires_at}`.
fn grant(reply: &[i64]) -> Option<LockState> {
    Some(LockState {
        fencing_token: field(reply, 1)?,
        holds: field(reply, 2)?,
        ttl_ms: field(reply, 3)?,
        expires_at_ms: field(reply, 4)?,
    })
}

/// A non-negative reply field; a missing or negative one is a script bug.
fn field(reply: &[i64], index: usize) -> Option<u64> {
    reply
        .get(index)
        .and_then(|value| u64::try_from(*value).ok())
}
