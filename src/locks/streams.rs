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
//! A stream ends in one of four ways, each decided once ([`Holder::end`]):
//! the client leaves (the lock is released at once, every hold of it); the
//! holder releases it with `DELETE` (heard as the release message, which
//! carries the lock's fencing token); a renewal finds the lock gone or held
//! by another token, or cannot reach Redis before the lease would end
//! (`lost`); or the instance shuts down (released, then `lost`).

use std::cmp::Ordering as Order;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{AcquireRequest, Lease, LockError, LockKey, Locks, Token, Ttl, WaitRefused};
use crate::metrics::{Metrics, RenewalOutcome};
use crate::redis::locks::{self as scripts, ExtendReply, LockKeys};
use crate::redis::pubsub::{Listener, Subscriber};

/// Renewals due within this much of each other go to Redis in one batch.
const BATCH_WINDOW: Duration = Duration::from_millis(5);
/// How soon a renewal that could not reach Redis is tried again (never past
/// the lease's end).
const RETRY_AFTER: Duration = Duration::from_millis(250);

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
}

impl LostReason {
    /// The reason as the `lost` event names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gone => "lock-gone",
            Self::HeldByAnother => "held-by-another",
            Self::BackendUnavailable => "backend-unavailable",
            Self::ShuttingDown => "shutting-down",
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

/// A streamed lock's state as its stream reads it.
#[derive(Debug, Clone, Copy)]
struct Progress {
    expires_at_ms: u64,
    renewals: u64,
    end: Option<StreamEnd>,
}

/// One streamed lock, shared by its stream (which owns it), the scheduler
/// and the release listener (which hold weak references).
struct Holder {
    /// Tells the one current renewal entry from stale ones (a reconnect
    /// may queue a renewal while another is queued or on its way).
    renewal: AtomicU64,
    key: LockKey,
    token: Token,
    keys: LockKeys,
    fencing_token: u64,
    ttl: Ttl,
    /// When the lease surely ends by this instance's clock: the sending time
    /// of the last renewal that Redis confirmed, plus the lease.
    lease_end: Mutex<Instant>,
    progress: watch::Sender<Progress>,
}

impl Holder {
    /// Ends the stream with `end`, unless it has ended already; true if this
    /// call ended it.
    fn end(&self, end: StreamEnd) -> bool {
        self.progress.send_if_modified(|progress| {
            let first = progress.end.is_none();
            if first {
                progress.end = Some(end);
            }
            first
        })
    }

    fn has_ended(&self) -> bool {
        self.progress.borrow().end.is_some()
    }

    fn renewed(&self, sent: Instant, expires_at_ms: u64) {
        *lock(&self.lease_end) = sent + self.ttl.as_duration();
        self.progress.send_modify(|progress| {
            progress.expires_at_ms = expires_at_ms;
            progress.renewals += 1;
        });
    }

    fn lease_end(&self) -> Instant {
        *lock(&self.lease_end)
    }

    /// A third of the lease, the time between renewals.
    fn period(&self) -> Duration {
        self.ttl.as_duration() / 3
    }
}

/// A queue entry: what to do for a streamed lock, and when.
struct Due {
    at: Instant,
    task: Task,
    holder: Weak<Holder>,
}

#[derive(Clone, Copy)]
enum Task {
    /// Renew the lease, if this is still the holder's current renewal.
    Renew(u64),
    /// The lease ends now unless a renewal moved its end: the lock is lost.
    Deadline,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Order> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    /// Reversed, so the `BinaryHeap` pops the earliest first.
    fn cmp(&self, other: &Self) -> Order {
        other.at.cmp(&self.at)
    }
}

/// Every streamed lock of one gateway instance, and their renewal scheduler.
#[derive(Clone)]
pub struct Streams(Arc<Shared>);

struct Shared {
    locks: Locks,
    subscriber: Subscriber,
    metrics: Arc<Metrics>,
    queue: Mutex<BinaryHeap<Due>>,
    /// Told when an entry earlier than any before may have been queued.
    queued: Notify,
    /// The streamed locks by release channel, for release messages.
    by_channel: Mutex<HashMap<String, Vec<Weak<Holder>>>>,
    held: AtomicUsize,
    closing: CancellationToken,
}

impl Streams {
    /// Starts the renewal scheduler and listens for release messages.
    pub fn new(locks: Locks, subscriber: Subscriber, metrics: Arc<Metrics>) -> Self {
        let shared = Arc::new(Shared {
            locks,
            subscriber: subscriber.clone(),
            metrics,
            queue: Mutex::new(BinaryHeap::new()),
            queued: Notify::new(),
            by_channel: Mutex::new(HashMap::new()),
            held: AtomicUsize::new(0),
            closing: CancellationToken::new(),
        });
        subscriber.listen(shared.clone());
        tokio::spawn(schedule(shared.clone()));
        Self(shared)
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
        let mut lease = self.0.locks.acquire(request).await?;
        let handover = lease.handover.take();
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
            lease_end: Mutex::new(Instant::now() + ttl.as_duration()),
            progress,
        });
        let subscribed = self.0.register(&holder);
        // From here the stream's guard releases the lock if this future is
        // dropped; the grant's handover has nothing left to do.
        let streamed = StreamedLock {
            lease,
            holder,
            progress: watched,
            seen_renewals: 0,
            finished: false,
            streams: self.clone(),
        };
        if let Some(handover) = handover {
            handover.complete();
        }
        // Confirmed before the client hears of the grant, so a `DELETE` it
        // sends at once is heard as the release it is.
        let timeout = self.0.locks.0.redis.timeout();
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
        if let Err(err) = self.0.locks.release_many(&releases).await {
            tracing::warn!(error = %err, locks = holders.len(), "could not release the streamed locks at shutdown; their leases will end");
        }
        for holder in holders {
            holder.end(StreamEnd::Lost(LostReason::ShuttingDown));
        }
    }
}

impl Shared {
    /// Adds a new streamed lock to the queue and the release listener;
    /// returns the confirmation of its channel's subscription.
    fn register(&self, holder: &Arc<Holder>) -> tokio::sync::oneshot::Receiver<()> {
        self.held.fetch_add(1, Ordering::AcqRel);
        self.renew_at(holder, Instant::now() + holder.period());
        let mut by_channel = lock(&self.by_channel);
        by_channel
            .entry(holder.keys.channel.clone())
            .or_default()
            .push(Arc::downgrade(holder));
        self.subscriber.subscribe(&holder.keys.channel)
    }

    fn forget(&self, holder: &Arc<Holder>) {
        let channel = &holder.keys.channel;
        let mut by_channel = lock(&self.by_channel);
        self.subscriber.unsubscribe(channel);
        if let Some(holders) = by_channel.get_mut(channel) {
            holders.retain(|other| !std::ptr::eq(other.as_ptr(), Arc::as_ptr(holder)));
            if holders.is_empty() {
                by_channel.remove(channel);
            }
        }
        self.held.fetch_sub(1, Ordering::AcqRel);
    }

    /// Queues the holder's next renewal at `at`, replacing any queued before.
    fn renew_at(&self, holder: &Arc<Holder>, at: Instant) {
        let current = holder.renewal.fetch_add(1, Ordering::AcqRel) + 1;
        self.enqueue(holder, Task::Renew(current), at);
    }

    fn enqueue(&self, holder: &Arc<Holder>, task: Task, at: Instant) {
        let mut queue = lock(&self.queue);
        let earliest = queue.peek().is_none_or(|head| at < head.at);
        queue.push(Due {
            at,
            task,
            holder: Arc::downgrade(holder),
        });
        drop(queue);
        // The scheduler sleeps until the earliest entry: wake it only when
        // this one comes sooner.
        if earliest {
            self.queued.notify_one();
        }
    }

    /// Every streamed lock still held on this instance.
    fn live(&self) -> Vec<Arc<Holder>> {
        lock(&self.by_channel)
            .values()
            .flatten()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Renews now the streamed locks `holders` (all, if `None`): a message
    /// may have been missed, so their state is asked of Redis at once.
    fn renew_now(&self, channel: Option<&str>) {
        let holders: Vec<Arc<Holder>> = match channel {
            Some(channel) => lock(&self.by_channel)
                .get(channel)
                .into_iter()
                .flatten()
                .filter_map(Weak::upgrade)
                .collect(),
            None => self.live(),
        };
        let now = Instant::now();
        for holder in &holders {
            self.renew_at(holder, now);
        }
    }

    /// Takes every entry due by `now` from the queue: the locks to renew,
    /// and ends the streams whose lease ran out unrenewed.
    fn due(&self, now: Instant) -> Vec<Arc<Holder>> {
        let mut queue = lock(&self.queue);
        let mut renew = Vec::new();
        while queue.peek().is_some_and(|due| due.at <= now) {
            let Some(due) = queue.pop() else { break };
            let Some(holder) = due.holder.upgrade() else {
                continue;
            };
            if holder.has_ended() {
                continue;
            }
            match due.task {
                Task::Renew(renewal) if renewal == holder.renewal.load(Ordering::Acquire) => {
                    renew.push(holder)
                }
                // Replaced by a later renewal entry.
                Task::Renew(_) => {}
                // A renewal since moved the lease's end: not due after all.
                Task::Deadline if holder.lease_end() > due.at => {}
                Task::Deadline => self.lose(&holder, LostReason::BackendUnavailable),
            }
        }
        renew
    }

    fn next_due(&self) -> Option<Instant> {
        lock(&self.queue).peek().map(|due| due.at)
    }

    fn lose(&self, holder: &Arc<Holder>, reason: LostReason) {
        if !holder.end(StreamEnd::Lost(reason)) {
            return;
        }
        self.metrics.renewal(RenewalOutcome::Lost);
        tracing::info!(key = %holder.key, reason = reason.as_str(), "a streamed lock was lost");
        if reason == LostReason::BackendUnavailable {
            // If Redis comes back before the lease ends, a renewal still on
            // its way may yet extend it: free it rather than leave it held
            // by a stream that has ended.
            let (locks, holder) = (self.locks.clone(), holder.clone());
            tokio::spawn(async move {
                let _ = locks.release_all(&holder.key, &holder.token).await;
            });
        }
    }

    /// Renews `batch` in one round trip and hands each outcome to its stream.
    async fn renew(self: Arc<Self>, batch: Vec<Arc<Holder>>) {
        let sent = Instant::now();
        for holder in &batch {
            // Should this renewal hang past the lease, the stream ends then.
            self.enqueue(holder, Task::Deadline, holder.lease_end());
        }
        let renewals: Vec<_> = batch
            .iter()
            .map(|holder| (holder.keys.clone(), holder.token.expose(), holder.ttl))
            .collect();
        let outcomes = self.locks.extend_many(&renewals).await;
        if self.closing.is_cancelled() {
            // The shutdown releases these locks and ends their streams.
            return;
        }
        for (index, holder) in batch.iter().enumerate() {
            let outcome = match &outcomes {
                Ok(outcomes) => outcomes
                    .get(index)
                    .map_or(Err(()), |outcome| match outcome {
                        Ok(reply) => Ok(*reply),
                        Err(_) => Err(()),
                    }),
                Err(_) => Err(()),
            };
            match outcome {
                Ok(ExtendReply::Extended(state)) => {
                    self.metrics.renewal(RenewalOutcome::Renewed);
                    holder.renewed(sent, state.expires_at_ms);
                    self.renew_at(holder, sent + holder.period());
                }
                Ok(ExtendReply::NotFound) => self.lose(holder, LostReason::Gone),
                Ok(ExtendReply::NotOwner) => self.lose(holder, LostReason::HeldByAnother),
                Err(()) => {
                    self.metrics.renewal(RenewalOutcome::Failed);
                    let retry = (Instant::now() + RETRY_AFTER).min(holder.lease_end());
                    self.renew_at(holder, retry);
                }
            }
        }
        if let Err(err) = &outcomes {
            tracing::warn!(error = %err, locks = batch.len(), "could not renew streamed locks; retrying until their leases end");
        }
    }
}

/// The scheduler: sleeps until the earliest due entry, then renews every
/// lock due by then (and a few milliseconds beyond) in one batch.
async fn schedule(shared: Arc<Shared>) {
    loop {
        let next = shared.next_due();
        tokio::select! {
            () = shared.closing.cancelled() => return,
            () = shared.queued.notified() => continue,
            () = sleep_until(next) => {}
        }
        let batch = shared.due(Instant::now() + BATCH_WINDOW);
        if !batch.is_empty() {
            tokio::spawn(shared.clone().renew(batch));
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Listener for Shared {
    fn message(&self, channel: &str, payload: &[u8]) {
        // At shutdown the instance releases its streamed locks itself, and
        // their streams say `shutting-down`, not `released`.
        if self.closing.is_cancelled() {
            return;
        }
        // The payload is the released holder's fencing token.
        let Some(fence) = std::str::from_utf8(payload)
            .ok()
            .and_then(|text| text.parse::<u64>().ok())
        else {
            return;
        };
        let by_channel = lock(&self.by_channel);
        for holder in by_channel.get(channel).into_iter().flatten() {
            if let Some(holder) = holder.upgrade()
                && holder.fencing_token == fence
            {
                holder.end(StreamEnd::Released);
            }
        }
    }

    fn reconnected(&self) {
        self.renew_now(None);
    }

    fn resubscribed(&self, channel: &str) {
        self.renew_now(Some(channel));
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
    streams: Streams,
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

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every change under these locks is a single push, pop or assignment,
    // so a panic elsewhere leaves them consistent: poisoning is ignored.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Locks {
    /// Gives back every hold of many locks in one round trip.
    async fn release_many(
        &self,
        releases: &[(LockKeys, String)],
    ) -> Result<(), crate::redis::BackendError> {
        let mut conn = self.0.redis.connection().await?;
        let publish = self.0.redis.publish_command();
        let items: Vec<(&LockKeys, &str)> = releases
            .iter()
            .map(|(keys, token)| (keys, token.as_str()))
            .collect();
        scripts::release_many(&mut conn, &items, publish).await
    }

    /// Renews many leases in one round trip (see [`Streams`]).
    async fn extend_many(
        &self,
        renewals: &[(LockKeys, String, Ttl)],
    ) -> Result<Vec<Result<ExtendReply, crate::redis::BackendError>>, crate::redis::BackendError>
    {
        let mut conn = self.0.redis.connection().await?;
        let items: Vec<scripts::Renewal<'_>> = renewals
            .iter()
            .map(|(keys, token, ttl)| (keys, token.as_str(), ttl.as_millis()))
            .collect();
        scripts::extend_many(&mut conn, &items).await
    }
}
