//! Streamed locks and streamed batches: held while their client stays connected, renewed by the gateway, released the moment the client leaves.
//!
//! A streamed lock is an ordinary grant plus a renewal duty; a streamed
//! batch is a batch's grant plus the same duty for each of its locks, one
//! stream for all of them (the first of them to end ends it, and the
//! others are given back). One scheduler
//! per instance keeps every streamed lock's next renewal in a queue ordered
//! by due time and renews those due together in one batch (one pipeline on
//! one Redis), so a thousand streamed locks cost no thousand timers and no
//! idle Redis connection. Each lock's progress reaches its stream through a
//! `watch` channel, which keeps only the newest state: a client that reads
//! slowly gets the latest lease, not a backlog.
//!
//! The parts: [`renewals`] (the scheduler and the release listener) and
//! [`holder`] (one streamed lock's state, and what a stream's locks share).
//!
//! A stream ends in one of four ways, each decided once (`StreamState::end`):
//! the client leaves (the lock is released at once, every hold of it); the
//! holder releases it with `DELETE` (heard as the release message, which
//! carries the lock's fencing token); a renewal finds the lock gone or held
//! by another token, or cannot reach Redis before the lease would end
//! (`lost`); or the instance shuts down (released, then `lost`).

mod holder;
mod renewals;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::acquire::{AcquireRequest, GrantGuard, Lease};
use super::batch::{BatchLease, BatchRequest};
use super::error::LockError;
use super::inputs::{LockKey, Token, Ttl};
use super::shared::Locks;
use super::waiting::WaitRefused;
use crate::metrics::Metrics;
use crate::redis::pubsub::Subscriber;
use holder::{Ending, Holder, Progress, StreamState};
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
        let member = Member {
            key: lease.key.clone(),
            fencing_token: lease.state.fencing_token,
            lease_from: lease.lease_from,
            expires_at_ms: lease.state.expires_at_ms,
        };
        let in_session = lease.state.session.is_some();
        let stream = self
            .start(
                lease.token,
                ttl,
                in_session,
                vec![member],
                guard.into_iter(),
            )
            .await;
        Ok(StreamedLock { lease, stream })
    }

    /// Takes every lock of a batch (or none, as [`Locks::acquire_batch`]
    /// does), renewed by this instance as one streamed lock is, until the
    /// returned [`StreamedBatch`] is dropped or any of its locks ends.
    pub async fn hold_batch(&self, request: BatchRequest) -> Result<StreamedBatch, LockError> {
        if self.0.closing.is_cancelled() {
            return Err(WaitRefused::ShuttingDown.into());
        }
        let in_session = request.session.is_some();
        let mut lease = self.0.locks.acquire_batch(request).await?;
        let guards = std::mem::take(&mut lease.guards);
        let members = lease
            .locks
            .iter()
            .map(|hold| Member {
                key: hold.key.clone(),
                fencing_token: hold.fencing_token,
                lease_from: hold.lease_from,
                expires_at_ms: hold.expires_at_ms,
            })
            .collect();
        let ttl = Ttl::fixed(Duration::from_millis(lease.ttl_ms));
        let stream = self
            .start(lease.token, ttl, in_session, members, guards.into_iter())
            .await;
        Ok(StreamedBatch { lease, stream })
    }

    /// Registers the locks of a new stream with the scheduler and the
    /// release listener, then stands the grant's guards down.
    async fn start(
        &self,
        token: Token,
        ttl: Ttl,
        in_session: bool,
        members: Vec<Member>,
        guards: impl Iterator<Item = GrantGuard>,
    ) -> Stream {
        let ends: Vec<u64> = members.iter().map(|member| member.expires_at_ms).collect();
        let (state, progress) = StreamState::new(&ends);
        let holders: Vec<Arc<Holder>> = members
            .into_iter()
            .enumerate()
            .map(|(index, member)| {
                Arc::new(Holder {
                    renewal: AtomicU64::new(0),
                    keys: self.0.locks.keys(&member.key),
                    key: member.key,
                    token,
                    fencing_token: member.fencing_token,
                    ttl,
                    in_session,
                    lease_end: Mutex::new(Instant::from_std(member.lease_from) + ttl.as_duration()),
                    stream: state.clone(),
                    member: index,
                })
            })
            .collect();
        let subscribed: Vec<_> = holders
            .iter()
            .map(|holder| self.0.register(holder))
            .collect();
        // From here the stream's drop releases the locks if this future is
        // dropped; the grant's guards have nothing left to do.
        let stream = Stream {
            members: holders,
            progress,
            seen_renewals: 0,
            finished: false,
            streams: self.clone(),
        };
        for guard in guards {
            guard.complete();
        }
        // Confirmed before the client hears of the grant, so a `DELETE` it
        // sends at once is heard as the release it is.
        let timeout = self.0.locks.redis().timeout();
        let _ = tokio::time::timeout(timeout, futures_util::future::join_all(subscribed)).await;
        stream
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

/// One lock of a new stream, as its grant left it.
struct Member {
    key: LockKey,
    fencing_token: u64,
    lease_from: std::time::Instant,
    expires_at_ms: u64,
}

/// A granted streamed lock and its stream of events. Dropping it (the
/// client left) releases the lock at once, unless its stream has ended.
pub struct StreamedLock {
    lease: Lease,
    stream: Stream,
}

impl StreamedLock {
    /// The grant, as a `201` would report it.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The next event: a renewal, or how the stream ended (after which
    /// there are no more).
    pub async fn next(&mut self) -> Option<StreamEvent> {
        self.stream.next().await
    }
}

/// A granted streamed batch and its stream of events: one stream for every
/// lock of the batch. When one of them ends (released with its token, or
/// lost), the stream ends and the others are released; dropping it (the
/// client left) releases them all at once.
pub struct StreamedBatch {
    lease: BatchLease,
    stream: Stream,
}

impl StreamedBatch {
    /// The grant, as a `201` would report it.
    pub fn lease(&self) -> &BatchLease {
        &self.lease
    }

    /// The next event: a renewal of every lock, or how the stream ended.
    pub async fn next(&mut self) -> Option<StreamEvent> {
        self.stream.next().await
    }

    /// The lock whose end ended the stream (none before the end, and none
    /// when the instance shut down, which ends every lock alike).
    pub fn ended_by(&self) -> Option<&LockKey> {
        let ending = self.stream.members.first()?.stream.ending()?;
        if ending.end == StreamEnd::Lost(LostReason::ShuttingDown) {
            return None;
        }
        Some(&self.stream.members.get(ending.member)?.key)
    }
}

/// The events of a stream of one or more locks held for one token.
struct Stream {
    members: Vec<Arc<Holder>>,
    progress: watch::Receiver<Progress>,
    seen_renewals: u64,
    finished: bool,
    streams: StreamedLocks,
}

impl Stream {
    async fn next(&mut self) -> Option<StreamEvent> {
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
            if let Some(ending) = progress.end {
                self.finished = true;
                return Some(StreamEvent::Ended(ending.end));
            }
            // The sender lives in the holders, which this stream owns.
            if self.progress.changed().await.is_err() {
                return None;
            }
        }
    }
}

impl Drop for Stream {
    /// Releases what the stream still holds: every lock when the client
    /// left, the others when one of them ended it (its own place is gone
    /// already), nothing at shutdown (which released them all).
    fn drop(&mut self) {
        for holder in &self.members {
            self.streams.0.forget(holder);
        }
        let Some(first) = self.members.first() else {
            return;
        };
        let left = first.end(StreamEnd::Left);
        let ending = first.stream.ending();
        let release: Vec<LockKey> = self
            .members
            .iter()
            .filter(|holder| match ending {
                _ if left => true,
                Some(Ending {
                    end: StreamEnd::Lost(LostReason::ShuttingDown),
                    ..
                }) => false,
                Some(ending) => ending.member != holder.member,
                None => true,
            })
            .map(|holder| holder.key.clone())
            .collect();
        if release.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (locks, token) = (self.streams.0.locks.clone(), first.token);
        tracing::debug!(key = %first.key, locks = release.len(), "a stream ended; releasing what it holds");
        // Each by the lock's own release, which also lets a session forget it.
        runtime.spawn(async move {
            let releases = release.iter().map(|key| locks.release_all(key, &token));
            for (key, released) in release.iter().zip(futures_util::future::join_all(releases).await) {
                if let Err(err) = released {
                    tracing::debug!(%key, error = %err, "could not release a streamed lock; its lease will end");
                }
            }
        });
    }
}
