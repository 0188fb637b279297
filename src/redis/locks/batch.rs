//! Typed wrappers for `batch.lua` (several locks for one token, all or none, in one step on one Redis) and `mode.lua` (a holder's upgrade or downgrade).

use super::grant::{NoPlace, Waiter};
use super::{FENCE_RETENTION_MS, LockKeys, LockKind, LockState, places};
use crate::redis::scripts::{BATCH, MODE, Reply};
use crate::redis::{BackendError, Connection};

/// One lock of a batch.
#[derive(Debug, Clone, Copy)]
pub struct BatchLock<'a> {
    pub keys: &'a LockKeys,
    pub kind: LockKind,
    pub permits: u32,
}

/// What a batch asks for, besides its locks.
#[derive(Debug, Clone, Copy)]
pub struct BatchAttempt<'a> {
    pub token: &'a str,
    pub ttl_ms: u64,
    /// How long the batch may still wait, in milliseconds.
    pub wait_left_ms: u64,
    /// Wait in every lock's queue as this waiter if not every lock has a
    /// place now; `None`: try once.
    pub waiter: Option<Waiter<'a>>,
    pub value: Option<&'a str>,
    /// The session it is taken in: `<handle> <lock-delay ms>`.
    pub session: Option<&'a str>,
}

/// What `batch.lua` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchReply {
    /// Every lock: their fencing tokens in the batch's order, and the
    /// lease's end.
    Granted {
        fencing_tokens: Vec<u64>,
        expires_at_ms: u64,
    },
    /// Waiting in every lock's queue: the first lock without a place now,
    /// and each lock's time until a place may free (0: it has one); the
    /// end of a lock-delay that alone keeps `key`.
    Queued {
        key: String,
        free_in_ms: Vec<u64>,
        delayed_until_ms: Option<u64>,
    },
    /// No place in `key`, and no wait.
    Held {
        key: String,
        free_in_ms: u64,
        delayed_until_ms: Option<u64>,
    },
    /// `key` is held with another limit.
    LimitMismatch { key: String, limit: u64 },
}

/// Runs `batch.lua` over `locks` (one Redis: their keys are in many slots).
pub async fn batch(
    conn: &mut Connection,
    locks: &[BatchLock<'_>],
    publish: &str,
    attempt: BatchAttempt<'_>,
) -> Result<BatchReply, BackendError> {
    let keys: Vec<LockKeys> = locks.iter().map(|lock| lock.keys.clone()).collect();
    let mut call = BATCH.call_many(&keys, publish);
    call.arg(locks.len());
    for lock in locks {
        call.arg(lock.keys.key())
            .arg(lock.kind.mode())
            .arg(places(lock.kind, lock.permits));
    }
    let (waiter_id, instance) = attempt.waiter.map_or(("", ""), |w| (w.id, w.instance));
    call.arg(attempt.token)
        .arg(attempt.ttl_ms)
        .arg(FENCE_RETENTION_MS)
        .arg(attempt.wait_left_ms)
        .arg(waiter_id)
        .arg(instance)
        .arg(if attempt.value.is_some() { "1" } else { "0" })
        .arg(attempt.value.unwrap_or(""))
        .arg(attempt.session.unwrap_or(""));
    let reply = BATCH.run(&call, conn).await?;
    BATCH.read(&reply, |reply| match reply.code() {
        "granted" => Some(BatchReply::Granted {
            fencing_tokens: numbers(reply.text("fences")?)?,
            expires_at_ms: reply.number("expires_at_ms")?,
        }),
        "queued" => Some(BatchReply::Queued {
            key: reply.text("key")?.to_owned(),
            free_in_ms: numbers(reply.text("free_in_ms")?)?,
            delayed_until_ms: reply.number("delayed_until_ms"),
        }),
        "held" => Some(BatchReply::Held {
            key: reply.text("key")?.to_owned(),
            free_in_ms: reply.number("free_in_ms")?,
            delayed_until_ms: reply.number("delayed_until_ms"),
        }),
        "limit-mismatch" => Some(BatchReply::LimitMismatch {
            key: reply.text("key")?.to_owned(),
            limit: reply.number("limit")?,
        }),
        _ => None,
    })
}

/// Comma-separated whole numbers.
fn numbers(text: &str) -> Option<Vec<u64>> {
    text.split(',').map(|number| number.parse().ok()).collect()
}

/// A holder's change of mode.
#[derive(Debug, Clone, Copy)]
pub struct ModeChange<'a> {
    pub token: &'a str,
    /// `exclusive` (upgrade) or `shared` (downgrade).
    pub mode: &'a str,
    pub wait_left_ms: u64,
    /// Wait at the head of the queue as this waiter if it cannot upgrade
    /// now; `None`: try once.
    pub waiter: Option<Waiter<'a>>,
}

/// What `mode.lua` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModeReply {
    /// Held in the mode asked for: the hold (a new fencing token after an
    /// upgrade), its mode.
    Changed {
        state: LockState,
        mode: String,
    },
    /// Waiting to upgrade; a place may free in `free_in_ms`.
    Queued {
        free_in_ms: u64,
    },
    /// Others hold it shared, and no wait.
    Held {
        free_in_ms: u64,
    },
    /// Another holder waits to upgrade already.
    Deadlock,
    /// A counting lock's holder, which has no other mode.
    ModeConflict,
    Lost(NoPlace),
}

/// Runs `mode.lua`.
pub async fn change_mode(
    conn: &mut Connection,
    keys: &LockKeys,
    publish: &str,
    change: ModeChange<'_>,
) -> Result<ModeReply, BackendError> {
    let mut call = MODE.call(keys, publish);
    let (waiter_id, instance) = change.waiter.map_or(("", ""), |w| (w.id, w.instance));
    call.arg(change.token)
        .arg(change.mode)
        .arg(FENCE_RETENTION_MS)
        .arg(change.wait_left_ms)
        .arg(waiter_id)
        .arg(instance);
    let reply = MODE.run(&call, conn).await?;
    MODE.read(&reply, |reply| match reply.code() {
        "changed" => Some(ModeReply::Changed {
            state: changed_state(reply)?,
            mode: reply.text("mode")?.to_owned(),
        }),
        "queued" => Some(ModeReply::Queued {
            free_in_ms: reply.number("free_in_ms")?,
        }),
        "held" => Some(ModeReply::Held {
            free_in_ms: reply.number("free_in_ms")?,
        }),
        "deadlock" => Some(ModeReply::Deadlock),
        "mode-conflict" => Some(ModeReply::ModeConflict),
        "not-found" => Some(ModeReply::Lost(NoPlace::NotFound)),
        "not-owner" => Some(ModeReply::Lost(NoPlace::NotOwner)),
        _ => None,
    })
}

fn changed_state(reply: &Reply) -> Option<LockState> {
    Some(LockState {
        fencing_token: reply.number("fence")?,
        holds: reply.number("holds")?,
        // The lease is unchanged: what is left of it.
        ttl_ms: reply.number("ttl_ms")?,
        expires_at_ms: reply.number("expires_at_ms")?,
        session: reply
            .text("session")
            .filter(|handle| !handle.is_empty())
            .map(str::to_owned),
    })
}
