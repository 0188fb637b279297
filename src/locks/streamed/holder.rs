//! One streamed lock as the instance keeps it (its lease, its renewals), and the state its stream shares with the other locks of a streamed batch: their renewals together and how the stream ended.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::StreamEnd;
use crate::locks::inputs::{LockKey, Token, Ttl};
use crate::redis::locks::LockKeys;
use crate::sync::lock;

/// A stream's state as the stream reads it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Progress {
    /// The earliest lease end among its locks (Unix ms, Redis clock).
    pub(super) expires_at_ms: u64,
    /// How many times every lock of the stream has been renewed.
    pub(super) renewals: u64,
    pub(super) end: Option<Ending>,
}

/// How a stream ended, and by which of its locks (its index).
#[derive(Debug, Clone, Copy)]
pub(super) struct Ending {
    pub(super) end: StreamEnd,
    pub(super) member: usize,
}

/// What the locks of one stream share: one lock for a streamed lock, each
/// lock of the batch for a streamed batch. The first of them to end ends
/// the stream.
pub(super) struct StreamState {
    progress: watch::Sender<Progress>,
    /// Each lock's renewals so far and the lease end its last one reported.
    members: Mutex<Vec<(u64, u64)>>,
}

impl StreamState {
    /// A stream of locks whose leases end at `expires_at_ms`, each.
    pub(super) fn new(expires_at_ms: &[u64]) -> (Arc<Self>, watch::Receiver<Progress>) {
        let (progress, watched) = watch::channel(Progress {
            expires_at_ms: expires_at_ms.iter().copied().min().unwrap_or(0),
            renewals: 0,
            end: None,
        });
        let members = expires_at_ms.iter().map(|ends| (0, *ends)).collect();
        let state = Self {
            progress,
            members: Mutex::new(members),
        };
        (Arc::new(state), watched)
    }

    /// Ends the stream with `end`, by lock `member`, unless it has ended
    /// already; true if this call ended it.
    pub(super) fn end(&self, end: StreamEnd, member: usize) -> bool {
        self.progress.send_if_modified(|progress| {
            let first = progress.end.is_none();
            if first {
                progress.end = Some(Ending { end, member });
            }
            first
        })
    }

    pub(super) fn ending(&self) -> Option<Ending> {
        self.progress.borrow().end
    }

    /// Lock `member` was renewed to `expires_at_ms`: the stream is renewed
    /// once every lock of it has been, to the earliest of their ends.
    fn renewed(&self, member: usize, expires_at_ms: u64) {
        let (renewals, earliest) = {
            let mut members = lock(&self.members);
            if let Some(renewed) = members.get_mut(member) {
                *renewed = (renewed.0 + 1, expires_at_ms);
            }
            let renewals = members.iter().map(|(count, _)| *count).min();
            let earliest = members.iter().map(|(_, ends)| *ends).min();
            (renewals.unwrap_or(0), earliest.unwrap_or(expires_at_ms))
        };
        self.progress.send_if_modified(|progress| {
            let news = renewals > progress.renewals;
            if news {
                progress.renewals = renewals;
                progress.expires_at_ms = earliest;
            }
            news
        });
    }
}

/// One streamed lock (alone, or one of a streamed batch), shared by its
/// stream (which owns it), the scheduler and the release listener (which
/// hold weak references).
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
    /// The stream it is part of, and its index there.
    pub(super) stream: Arc<StreamState>,
    pub(super) member: usize,
}

impl Holder {
    /// Ends its stream with `end`, unless the stream has ended already;
    /// true if this call ended it.
    pub(super) fn end(&self, end: StreamEnd) -> bool {
        self.stream.end(end, self.member)
    }

    /// Whether its stream has ended (by this lock or another of it).
    pub(super) fn has_ended(&self) -> bool {
        self.stream.ending().is_some()
    }

    pub(super) fn renewed(&self, sent: Instant, expires_at_ms: u64) {
        *lock(&self.lease_end) = sent + self.ttl.as_duration();
        self.stream.renewed(self.member, expires_at_ms);
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
