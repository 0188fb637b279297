//! One streamed lock as the instance keeps it: its lease, its renewal count, and how its stream ended.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::StreamEnd;
use crate::locks::inputs::{LockKey, Token, Ttl};
use crate::redis::locks::LockKeys;
use crate::sync::lock;

/// A streamed lock's state as its stream reads it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Progress {
    pub(super) expires_at_ms: u64,
    pub(super) renewals: u64,
    pub(super) end: Option<StreamEnd>,
}

/// One streamed lock, shared by its stream (which owns it), the scheduler
/// and the release listener (which hold weak references).
pub(super) struct Holder {
    /// Tells the one current renewal entry from stale ones (a reconnect
    /// may queue a renewal while another is queued or on its way).
    pub(super) renewal: AtomicU64,
    pub(super) key: LockKey,
    pub(super) token: Token,
    pub(super) keys: LockKeys,
    pub(super) fencing_token: u64,
    pub(super) ttl: Ttl,
    /// Its lease is its session's: the session's keepalive keeps it, and
    /// this instance renews nothing (it hears its end as any holder).
    pub(super) in_session: bool,
    /// When the lease surely ends by this instance's clock: the sending time
    /// of the last renewal that Redis confirmed, plus the lease.
    pub(super) lease_end: Mutex<Instant>,
    pub(super) progress: watch::Sender<Progress>,
}

impl Holder {
    /// Ends the stream with `end`, unless it has ended already; true if this
    /// call ended it.
    pub(super) fn end(&self, end: StreamEnd) -> bool {
        self.progress.send_if_modified(|progress| {
            let first = progress.end.is_none();
            if first {
                progress.end = Some(end);
            }
            first
        })
    }

    pub(super) fn has_ended(&self) -> bool {
        self.progress.borrow().end.is_some()
    }

    pub(super) fn renewed(&self, sent: Instant, expires_at_ms: u64) {
        *lock(&self.lease_end) = sent + self.ttl.as_duration();
        self.progress.send_modify(|progress| {
            progress.expires_at_ms = expires_at_ms;
            progress.renewals += 1;
        });
    }

    pub(super) fn lease_end(&self) -> Instant {
        *lock(&self.lease_end)
    }

    /// When the stream says `lost` unless a renewal was confirmed first: a
    /// tenth of the lease (2 ms to 1 s) before [`Holder::lease_end`], so
    /// that the client hears it while the lease still holds, not after
    /// another may have been granted the lock.
    pub(super) fn lost_at(&self) -> Instant {
        let margin =
            (self.ttl.as_duration() / 10).clamp(Duration::from_millis(2), Duration::from_secs(1));
        self.lease_end() - margin
    }

    /// A third of the lease, the time between renewals.
    pub(super) fn period(&self) -> Duration {
        self.ttl.as_duration() / 3
    }
}
