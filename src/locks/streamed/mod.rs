//! Streamed locks: held while their client stays connected, renewed by the gateway, released the moment the client leaves.
//!
//! A streamed lock is an ordinary grant plus a renewal duty. One scheduler
//! per instance keeps every streamed lock's next renewal in a queue ordered
//! by due time and renews those due together in one batch (one pipeline on
//! one Redis), so a thousand streamed locks cost no thousand timers and no
//! idle Redis connection. Each lock's progress reaches its stream through a
//! `watch` channel, which keeps only the newest state: a client that reads
//! slowly gets the latest lease, not a backlog.
//!
//! The parts: [`renewals`] (the scheduler and the release listener) and
//! [`holder`] (one streamed lock's state).
//!
//! A stream ends in one of four ways, each decided once (`Holder::end`):
//! the client leaves (the lock is released at once, every hold of it); the
//! holder releases it with `DELETE` (heard as the release message, which
//! carries the lock's fencing token); a renewal finds the lock gone or held
//! by another token, or cannot reach Redis before the lease would end
//! (`lost`); or the instance shuts down (released, then `lost`).

mod holder;
mod renewals;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio::time::Instant;

use super::acquire::{AcquireRequest, Lease};
use super::error::LockError;
use super::shared::Locks;
use super::waiting::WaitRefused;
use crate::metrics::Metrics;
use crate::redis::pubsub::Subscriber;
use holder::{Holder, Progress};
use renewals::Renewals;

/// Why a streamed lock ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// Its holder released it with `DELETE` and the token.
    Released,
    /// It is no longer held for this stream.
    Lost(LostReason),
    /// The client closed the connection (nobody hears of this end).
    Left,
}

/// Why a streamed lock was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostReason {
    /// A renewal found no lock: its lease ran out, or it was deleted.
    Gone,
    /// A renewal found the lock held under another token.
    HeldByAnother,
    /// No renewal reached Redis before the lease would end.
    BackendUnavailable,
    /// The instance is shutting down; it released the lock first.
    ShuttingDown,
    /// An operator revoked the lock (`DELETE ?force=true`).
    Revoked,
    /// The session it hung on ended (expired, or deleted).
    SessionEnded,
}

impl LostReason {
    /// The reason as the `lost` event names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gone => "lock-gone",
            Self::HeldByAnother => "held-by-another",
            Self::BackendUnavailable => "backend-unavailable",
            Self::ShuttingDown => "shutting-down",
            Self::Revoked => "revoked",
            Self::SessionEnded => "session-ended",
        }
    }
}

/// What a stream tells its client after the grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEvent {
    /// The lease was renewed; it now ends at this instant (Unix ms, Redis clock).
    Renewed { expires_at_ms: u64 },
    /// The last event: how the stream ended.
    Ended(StreamEnd),
}

/// Every streamed lock of one gateway instance, and their renewal scheduler.
#[derive(Clone)]
pub struct StreamedLocks(Arc<Renewals>);

impl StreamedLocks {
    /// Starts the renewal scheduler and listens for release messages.
    pub fn new(locks: Locks, subscriber: Subscriber, metrics: Arc<Metrics>) -> Self {
        Self(Renewals::start(locks, subscriber, metrics))
    }

    /// Streamed locks held on this instance now.
    pub fn held(&self) -> usize {
        self.0.held.load(Ordering::Acquire)
    }

    /// Takes a lock (waiting as `request` says) that this instance renews
    /// until the returned [`StreamedLock`] is dropped or its stream ends.
    /// A re-entry token is not allowed: the caller checks.
    pub async fn hold(&self, request: AcquireRequest) -> Result<StreamedLock, LockError> {
        if self.0.closing.is_cancelled() {
            return Err(WaitRefused::ShuttingDown.into());
        }
        let ttl = request.ttl;
        let request = AcquireRequest {
            streamed: true,
            ..request
        };
        let mut lease = self.0.locks.acquire(request).await?;
        let guard = lease.guard.take();
        let (progress, watched) = watch::channel(Progress {
            expires_at_ms: lease.state.expires_at_ms,
            renewals: 0,
            end: None,
        });
        let holder = Arc::new(Holder {
            renewal: AtomicU64::new(0),
            keys: self.0.locks.keys(&lease.key),
            key: lease.key.clone(),
            token: lease.token,
            fencing_token: lease.state.fencing_token,
            ttl,
            in_session: lease.state.session.is_some(),
            lease_end: Mutex::new(Instant::from_std(lease.lease_from) + ttl.as_duration()),
            progress,
        });
        let subscribed = self.0.register(&holder);
        // From here the stream's guard releases the lock if this future is
        // dropped; the grant's guard has nothing left to do.
        let streamed = StreamedLock {
            lease,
            holder,
            progress: watched,
            seen_renewals: 0,
            finished: false,
            streams: self.clone(),
        };
        if let Some(guard) = guard {
            guard.complete();
        }
        // Confirmed before the client hears of the grant, so a `DELETE` it
        // sends at once is heard as the release it is.
        let timeout = self.0.locks.redis().timeout();
        let _ = tokio::time::timeout(timeout, subscribed).await;
        Ok(streamed)
    }

    /// At shutdown: stops renewing, releases every streamed lock (in one
    /// round trip), then ends each stream with `lost` (`shutting-down`).
    pub async fn close(&self) {
        self.0.closing.cancel();
        let holders = self.0.live();
        let releases: Vec<_> = holders
            .iter()
            .map(|holder| (holder.keys.clone(), holder.token.expose()))
            .collect();
        if let Err(err) = self.0.release_many(&releases).await {
            tracing::warn!(error = %err, locks = holders.len(), "could not release the streamed locks at shutdown; their leases will end");
        }
        for holder in holders {
            holder.end(StreamEnd::Lost(LostReason::ShuttingDown));
        }
    }
}

/// A granted streamed lock and its stream of events. Dropping it (the
/// client left) releases the lock at once, unless its stream has ended.
pub struct StreamedLock {
    lease: Lease,
    holder: Arc<Holder>,
    progress: watch::Receiver<Progress>,
    seen_renewals: u64,
    finished: bool,
    streams: StreamedLocks,
}

impl StreamedLock {
    /// The grant, as a `201` would report it.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The next event: a renewal, or how the stream ended (after which
    /// there are no more).
    pub async fn next(&mut self) -> Option<StreamEvent> {
        if self.finished {
            return None;
        }
        loop {
            let progress = *self.progress.borrow_and_update();
            if progress.renewals > self.seen_renewals {
                self.seen_renewals = progress.renewals;
                return Some(StreamEvent::Renewed {
                    expires_at_ms: progress.expires_at_ms,
                });
            }
            if let Some(end) = progress.end {
                self.finished = true;
                return Some(StreamEvent::Ended(end));
            }
            // The sender lives in the holder, which this lock owns.
            if self.progress.changed().await.is_err() {
                return None;
            }
        }
    }
}

impl Drop for StreamedLock {
    fn drop(&mut self) {
        self.streams.0.forget(&self.holder);
        if !self.holder.end(StreamEnd::Left) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (locks, key, token) = (
            self.streams.0.locks.clone(),
            self.holder.key.clone(),
            self.holder.token,
        );
        tracing::debug!(%key, "the client of a streamed lock left; releasing it");
        runtime.spawn(async move {
            if let Err(err) = locks.release_all(&key, &token).await {
                tracing::debug!(%key, error = %err, "could not release a streamed lock; its lease will end");
            }
        });
    }
}
