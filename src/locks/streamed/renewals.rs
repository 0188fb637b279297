//! The renewal scheduler of one instance's streamed locks: a queue ordered by due time, renewals due together sent in one batch, and the release messages that end streams.

use std::cmp::Ordering as Order;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::holder::Holder;
use super::{LostReason, StreamEnd};
use crate::locks::inputs::Ttl;
use crate::locks::shared::Locks;
use crate::metrics::{Metrics, RenewalOutcome};
use crate::redis::BackendError;
use crate::redis::locks::LockKeys;
use crate::redis::locks::grant::{self as scripts, ExtendReply, NoPlace};
use crate::redis::pubsub::{Listener, Subscriber};
use crate::sync::lock;

/// Renewals due within this much of each other go to Redis in one batch.
const BATCH_WINDOW: Duration = Duration::from_millis(5);
/// How soon a renewal that could not reach Redis is tried again (never past
/// the lease's end).
const RETRY_AFTER: Duration = Duration::from_millis(250);

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

/// Every streamed lock of one instance, and their renewal queue.
pub(super) struct Renewals {
    pub(super) locks: Locks,
    subscriber: Subscriber,
    metrics: Arc<Metrics>,
    queue: Mutex<BinaryHeap<Due>>,
    /// Told when an entry earlier than any before may have been queued.
    queued: Notify,
    /// The streamed locks by release channel, for release messages.
    by_channel: Mutex<HashMap<String, Vec<Weak<Holder>>>>,
    pub(super) held: AtomicUsize,
    pub(super) closing: CancellationToken,
}

impl Renewals {
    /// Starts the scheduler and listens for release messages.
    pub(super) fn start(locks: Locks, subscriber: Subscriber, metrics: Arc<Metrics>) -> Arc<Self> {
        let renewals = Arc::new(Self {
            locks,
            subscriber: subscriber.clone(),
            metrics,
            queue: Mutex::new(BinaryHeap::new()),
            queued: Notify::new(),
            by_channel: Mutex::new(HashMap::new()),
            held: AtomicUsize::new(0),
            closing: CancellationToken::new(),
        });
        subscriber.listen(renewals.clone());
        tokio::spawn(schedule(renewals.clone()));
        renewals
    }

    /// Adds a new streamed lock to the queue and the release listener;
    /// returns the confirmation of its channel's subscription.
    pub(super) fn register(&self, holder: &Arc<Holder>) -> tokio::sync::oneshot::Receiver<()> {
        self.held.fetch_add(1, Ordering::AcqRel);
        if !holder.in_session {
            self.renew_at(holder, Instant::now() + holder.period());
        }
        let channel = holder.keys.released();
        let mut by_channel = lock(&self.by_channel);
        by_channel
            .entry(channel.clone())
            .or_default()
            .push(Arc::downgrade(holder));
        self.subscriber.subscribe(&channel)
    }

    pub(super) fn forget(&self, holder: &Arc<Holder>) {
        let channel = holder.keys.released();
        let mut by_channel = lock(&self.by_channel);
        self.subscriber.unsubscribe(&channel);
        if let Some(holders) = by_channel.get_mut(&channel) {
            holders.retain(|other| !std::ptr::eq(other.as_ptr(), Arc::as_ptr(holder)));
            if holders.is_empty() {
                by_channel.remove(&channel);
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
    pub(super) fn live(&self) -> Vec<Arc<Holder>> {
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
                Task::Deadline if holder.lost_at() > due.at => {}
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
        for holder in batch.iter().filter(|holder| !holder.in_session) {
            // Should this renewal hang past the lease, the stream ends
            // first. (A session's lock has no lease of its own to end.)
            self.enqueue(holder, Task::Deadline, holder.lost_at());
        }
        let renewals: Vec<_> = batch
            .iter()
            .map(|holder| (holder.keys.clone(), holder.token.expose(), holder.ttl))
            .collect();
        let outcomes = self.extend_many(&renewals).await;
        if self.closing.is_cancelled() {
            // The shutdown releases these locks and ends their streams.
            return;
        }
        for (index, holder) in batch.iter().enumerate() {
            let outcome = match &outcomes {
                Ok(outcomes) => outcomes
                    .get(index)
                    .map_or(Err(()), |outcome| match outcome {
                        Ok(reply) => Ok(reply.clone()),
                        Err(_) => Err(()),
                    }),
                Err(_) => Err(()),
            };
            match outcome {
                // A session's lock, checked after a message may have been
                // missed: still held, and its session's keepalive keeps
                // it; nothing to renew or tell.
                Ok(ExtendReply::Extended(_)) if holder.in_session => {}
                Ok(ExtendReply::Extended(state)) => {
                    self.metrics.renewal(RenewalOutcome::Renewed);
                    holder.renewed(sent, state.expires_at_ms);
                    self.renew_at(holder, sent + holder.period());
                }
                // Released with its token (a DELETE, heard here before
                // its message): a release, not a loss.
                Ok(ExtendReply::Lost(NoPlace::Released)) => {
                    holder.end(StreamEnd::Released);
                }
                Ok(ExtendReply::Lost(NoPlace::Revoked)) => self.lose(holder, LostReason::Revoked),
                Ok(ExtendReply::Lost(NoPlace::SessionEnded)) => {
                    self.lose(holder, LostReason::SessionEnded);
                }
                Ok(ExtendReply::Lost(NoPlace::NotFound)) => self.lose(holder, LostReason::Gone),
                Ok(ExtendReply::Lost(NoPlace::NotOwner)) => {
                    self.lose(holder, LostReason::HeldByAnother)
                }
                Err(()) => {
                    self.metrics.renewal(RenewalOutcome::Failed);
                    let retry = (Instant::now() + RETRY_AFTER).min(holder.lost_at());
                    self.renew_at(holder, retry);
                }
            }
        }
        if let Err(err) = &outcomes {
            tracing::warn!(error = %err, locks = batch.len(), "could not renew streamed locks; retrying until their leases end");
        }
    }

    /// Gives back every hold of many locks in one round trip.
    pub(super) async fn release_many(
        &self,
        releases: &[(LockKeys, String)],
    ) -> Result<(), BackendError> {
        let mut conn = self.locks.redis().connection().await?;
        let publish = self.locks.publish();
        let items: Vec<(&LockKeys, &str)> = releases
            .iter()
            .map(|(keys, token)| (keys, token.as_str()))
            .collect();
        scripts::release_many(&mut conn, &items, publish).await
    }

    /// Renews many leases in one round trip (see [`StreamedLocks`]); when
    /// replicas must confirm writes, each renewal is confirmed, or counts as
    /// failed: a stream must not be told `renewed` for a lease that a
    /// failover could lose.
    async fn extend_many(
        &self,
        renewals: &[(LockKeys, String, Ttl)],
    ) -> Result<Vec<Result<ExtendReply, BackendError>>, BackendError> {
        let redis = self.locks.redis();
        if redis.confirms_writes() {
            let publish = self.locks.publish();
            let confirmed = renewals.iter().map(|(keys, token, ttl)| async move {
                let (reply, confirmed) = redis
                    .write(
                        &keys.lock(),
                        true,
                        async |conn| {
                            scripts::extend(conn, keys, publish, token, ttl.as_millis()).await
                        },
                        |reply| matches!(reply, ExtendReply::Extended(_)),
                    )
                    .await?;
                if confirmed {
                    Ok(reply)
                } else {
                    Err(BackendError::NotConfirmed)
                }
            });
            return Ok(futures_util::future::join_all(confirmed).await);
        }
        let mut conn = self.locks.redis().connection().await?;
        let items: Vec<scripts::Renewal<'_>> = renewals
            .iter()
            .map(|(keys, token, ttl)| (keys, token.as_str(), ttl.as_millis()))
            .collect();
        scripts::extend_many(&mut conn, &items, self.locks.publish()).await
    }
}

/// The scheduler: sleeps until the earliest due entry, then renews every
/// lock due by then (and a few milliseconds beyond) in one batch.
async fn schedule(renewals: Arc<Renewals>) {
    loop {
        let next = renewals.next_due();
        tokio::select! {
            () = renewals.closing.cancelled() => return,
            () = renewals.queued.notified() => continue,
            () = sleep_until(next) => {}
        }
        let batch = renewals.due(Instant::now() + BATCH_WINDOW);
        if !batch.is_empty() {
            tokio::spawn(renewals.clone().renew(batch));
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Listener for Renewals {
    fn message(&self, channel: &str, payload: &[u8]) {
        // At shutdown the instance releases its streamed locks itself, and
        // their streams say `shutting-down`, not `released`.
        if self.closing.is_cancelled() {
            return;
        }
        // The payload is the fencing token of the holder whose place ended:
        // released, or (`revoked <fence>`) revoked, or (`expired <fence>`,
        // `ended <fence>`) ended with its session.
        let text = String::from_utf8_lossy(payload);
        let (lost, fence) = if let Some(fence) = text.strip_prefix("revoked ") {
            (Some(LostReason::Revoked), fence)
        } else if let Some(fence) = text
            .strip_prefix("expired ")
            .or_else(|| text.strip_prefix("ended "))
        {
            (Some(LostReason::SessionEnded), fence)
        } else {
            (None, &*text)
        };
        let Ok(fence) = fence.parse::<u64>() else {
            return;
        };
        let by_channel = lock(&self.by_channel);
        for holder in by_channel.get(channel).into_iter().flatten() {
            let Some(holder) = holder.upgrade() else {
                continue;
            };
            if holder.fencing_token != fence {
                continue;
            }
            match lost {
                Some(reason) => self.lose(&holder, reason),
                None => {
                    holder.end(StreamEnd::Released);
                }
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
