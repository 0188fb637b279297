//! This instance's part of the fair queue: its waiters, told of their grants by message, and its interest in the locks it tends.
//!
//! The queue itself is in Redis (`lua/lib/queue.lua`): a waiter joins it in
//! the acquire script, and a place that frees goes to the head of the queue
//! in the same script that frees it, whichever instance the head waits on.
//! The script then tells that instance, on the lock's grant channel for it
//! (`<prefix>granted:{<key>}:<instance>`), which this instance subscribes
//! while it has waiters on the lock: one message, to one instance, for one
//! waiter. A waiter's [`Ticket`] hears its [`Standing`] change.
//!
//! Every few hundred milliseconds, and when a lease it knows of ends, the
//! instance tends each lock it has waiters or watchers on ([`tending`]):
//! its waiters keep their places while it lives, a lease that ran out
//! (which no release announces) hands its place on, and a grant whose
//! message was missed is found.

pub mod tending;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::redis::locks::LockKeys;
use crate::redis::pubsub::{Listener, Subscriber};
use crate::sync::lock;
use crate::telemetry::trace_context::RemoteSpan;

/// Why a request may not wait here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WaitRefused {
    #[error("this instance already has its maximum of {0} waiting requests")]
    TooManyWaiters(usize),
    #[error("this instance is shutting down")]
    ShuttingDown,
}

/// Where a waiter stands, as this instance last heard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// In the queue, at this position (1 is next; 0 before it was heard).
    Queued { position: u64 },
    /// Granted a place: its fencing token and lease end (Redis's clock),
    /// whether the grant is for the whole lease (`outright`: nothing to
    /// claim) or an offer (short, until claimed), and, when traces are on,
    /// the span of the release that granted it.
    Granted {
        fencing_token: u64,
        expires_at_ms: u64,
        outright: bool,
        released_by: Option<RemoteSpan>,
    },
    /// Not in the queue any more, and no grant was heard: granted with the
    /// message missed, or passed over. Leaving the queue tells which.
    Unaccounted,
    /// A batch's waiter: one of its locks has a place for it now (it
    /// takes all its locks itself, when each has). Each time it is told,
    /// the count goes up.
    Ready(u64),
}

/// The waiting room of this instance.
#[derive(Clone)]
pub struct Waiting(Arc<Room>);

struct Room {
    /// The locks this instance has waiters or watchers on, by their grant
    /// channel for this instance.
    locks: Mutex<HashMap<String, Interest>>,
    subscriber: Subscriber,
    instance: Arc<str>,
    waiting: AtomicUsize,
    max_waiters: usize,
    /// Told when a lock should be tended sooner than the next round.
    tend_soon: Notify,
    /// Cancelled at shutdown: every waiter stops, and no one may start.
    closing: CancellationToken,
}

/// This instance's interest in one lock.
struct Interest {
    keys: LockKeys,
    waiters: HashMap<Arc<str>, Slot>,
    /// Watch hubs of this instance on the lock (one at most).
    watchers: usize,
    /// When to tend it next, before the next round: a lease it knows of ends.
    due: Option<Instant>,
    /// Every waiter's position is asked at the next tending (a grant
    /// message may have been missed).
    check_all: bool,
    /// Told each time the lock's watch had lapsed and began again.
    restarts: watch::Sender<u64>,
    /// How many waited in the lock's queue (on every instance) when it
    /// was last tended.
    queued: u64,
}

/// A waiter's standing, and whether it wants to hear its position.
struct Slot {
    standing: watch::Sender<Standing>,
    reports_position: bool,
}

impl Waiting {
    /// The waiting room of `instance`; its tending runs until shutdown.
    ///
    /// The queue knows the room as the instance's id and a nonce of this
    /// start: a gateway started again under the same id must not renew
    /// the presence its killed predecessor's waiters read, or they would
    /// be offered places nobody will claim.
    pub fn new(subscriber: Subscriber, instance: &str, max_waiters: usize) -> Self {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let room = Arc::new(Room {
            locks: Mutex::new(HashMap::new()),
            subscriber: subscriber.clone(),
            instance: format!("{instance}#{}", &nonce[..8]).into(),
            waiting: AtomicUsize::new(0),
            max_waiters,
            tend_soon: Notify::new(),
            closing: CancellationToken::new(),
        });
        subscriber.listen(room.clone());
        Self(room)
    }

    /// The instance's id, as the queue names it.
    pub fn instance(&self) -> &str {
        &self.0.instance
    }

    /// Stops every waiting request (each answers that the instance is
    /// shutting down) and refuses new ones.
    pub fn close(&self) {
        self.0.closing.cancel();
    }

    /// Requests waiting on this instance now.
    pub fn count(&self) -> usize {
        self.0.waiting.load(Ordering::Acquire)
    }

    /// Requests waiting, on every instance, in the queues of the locks this
    /// instance has waiters on, as last tended (a total: no key is named).
    pub fn queued(&self) -> u64 {
        self.0
            .lock()
            .values()
            .filter(|interest| !interest.waiters.is_empty())
            .map(|interest| interest.queued)
            .sum()
    }

    /// Whether this instance has waiters on lock `keys` (so is subscribed
    /// to its grant channel): the lock is contended, and a request for it
    /// goes straight to the full scripts.
    pub fn has_waiters_on(&self, keys: &LockKeys) -> bool {
        let locks = self.0.lock();
        // An instance with no waiters anywhere (the uncontended path) names
        // no channel.
        !locks.is_empty()
            && locks
                .get(&keys.granted(&self.0.instance))
                .is_some_and(|interest| !interest.waiters.is_empty())
    }

    /// Registers waiter `id` on lock `keys`, subscribing the lock's grant
    /// channel for this instance if it is the first; `reports_position`
    /// asks for its position at every tending.
    pub fn enter(
        &self,
        keys: &LockKeys,
        id: &str,
        reports_position: bool,
    ) -> Result<Ticket, WaitRefused> {
        let room = &self.0;
        if room.closing.is_cancelled() {
            return Err(WaitRefused::ShuttingDown);
        }
        if room.waiting.fetch_add(1, Ordering::AcqRel) >= room.max_waiters {
            room.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(WaitRefused::TooManyWaiters(room.max_waiters));
        }
        let channel = keys.granted(&room.instance);
        let id: Arc<str> = id.into();
        let (standing, heard) = watch::channel(Standing::Queued { position: 0 });
        // The request goes out while the map is locked, so the subscriber
        // sees subscribes and unsubscribes in the order the map changed.
        let subscribed = {
            let mut locks = room.lock();
            let interest = locks
                .entry(channel.clone())
                .or_insert_with(|| Interest::new(keys));
            interest.waiters.insert(
                id.clone(),
                Slot {
                    standing,
                    reports_position,
                },
            );
            room.subscriber.subscribe(&channel)
        };
        Ok(Ticket {
            waiting: self.clone(),
            channel,
            id,
            heard,
            subscribed: Some(subscribed),
        })
    }

    /// Notes that a lease of lock `keys` ends in `free_in`: it is tended
    /// then, so a place that frees by expiry goes on at once.
    pub fn due(&self, keys: &LockKeys, free_in: std::time::Duration) {
        let channel = keys.granted(&self.0.instance);
        let at = Instant::now() + free_in;
        let sooner = {
            let mut locks = self.0.lock();
            let Some(interest) = locks.get_mut(&channel) else {
                return;
            };
            let sooner = interest.due.is_none_or(|due| at < due);
            if sooner {
                interest.due = Some(at);
            }
            sooner
        };
        if sooner {
            self.0.tend_soon.notify_one();
        }
    }

    /// Registers a watch hub on lock `keys` (the lock is tended, and its
    /// watch kept, while one is); the receiver counts the times the watch
    /// had lapsed and began again.
    pub fn watch(&self, keys: &LockKeys) -> watch::Receiver<u64> {
        let channel = keys.granted(&self.0.instance);
        let mut locks = self.0.lock();
        let interest = locks.entry(channel).or_insert_with(|| Interest::new(keys));
        interest.watchers += 1;
        let restarts = interest.restarts.subscribe();
        drop(locks);
        self.0.tend_soon.notify_one();
        restarts
    }

    /// Undoes one [`Waiting::watch`] of lock `keys`.
    pub fn unwatch(&self, keys: &LockKeys) {
        let channel = keys.granted(&self.0.instance);
        let mut locks = self.0.lock();
        if let Some(interest) = locks.get_mut(&channel) {
            interest.watchers = interest.watchers.saturating_sub(1);
            if interest.is_idle() {
                locks.remove(&channel);
            }
        }
    }

    fn leave(&self, channel: &str, id: &str) {
        let mut locks = self.0.lock();
        // Each waiter's subscription is counted: the channel is unsubscribed
        // when the last one leaves.
        self.0.subscriber.unsubscribe(channel);
        if let Some(interest) = locks.get_mut(channel) {
            interest.waiters.remove(id);
            if interest.is_idle() {
                locks.remove(channel);
            }
        }
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Room {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Interest>> {
        lock(&self.locks)
    }
}

impl Interest {
    fn new(keys: &LockKeys) -> Self {
        Self {
            keys: keys.clone(),
            waiters: HashMap::new(),
            watchers: 0,
            due: None,
            check_all: false,
            restarts: watch::channel(0).0,
            queued: 0,
        }
    }

    fn is_idle(&self) -> bool {
        self.waiters.is_empty() && self.watchers == 0
    }
}

impl Listener for Room {
    /// A grant for one of this instance's waiters: `<id> <fencing token>
    /// <lease end>`, then `outright` for a grant of the whole lease, then
    /// the release's `traceparent` when it was traced; or, for a batch's
    /// waiter, `<id> ready`.
    fn message(&self, channel: &str, payload: &[u8]) {
        let text = String::from_utf8_lossy(payload);
        let mut parts = text.split(' ');
        let (Some(id), Some(first)) = (parts.next(), parts.next()) else {
            return;
        };
        let locks = self.lock();
        let Some(slot) = locks
            .get(channel)
            .and_then(|interest| interest.waiters.get(id))
        else {
            return;
        };
        if first == "ready" {
            slot.standing.send_modify(|standing| {
                let told = match standing {
                    Standing::Ready(times) => *times + 1,
                    _ => 1,
                };
                *standing = Standing::Ready(told);
            });
            return;
        }
        let (Ok(fencing_token), Some(Ok(expires_at_ms))) =
            (first.parse(), parts.next().map(str::parse))
        else {
            return;
        };
        let mut next = parts.next();
        let outright = next == Some("outright");
        if outright {
            next = parts.next();
        }
        slot.standing.send_replace(Standing::Granted {
            fencing_token,
            expires_at_ms,
            outright,
            // The release's `traceparent`, after the grant when it was traced.
            released_by: next.and_then(RemoteSpan::parse),
        });
    }

    /// Grants may have been missed: every waiter's standing is asked at once.
    fn reconnected(&self) {
        for interest in self.lock().values_mut() {
            interest.check_all = true;
        }
        self.tend_soon.notify_one();
    }

    fn resubscribed(&self, channel: &str) {
        if let Some(interest) = self.lock().get_mut(channel) {
            interest.check_all = true;
            self.tend_soon.notify_one();
        }
    }
}

/// A waiter's place in this instance's waiting room; dropping it leaves.
/// (Leaving the queue in Redis is the acquisition's part.)
pub struct Ticket {
    waiting: Waiting,
    channel: String,
    id: Arc<str>,
    heard: watch::Receiver<Standing>,
    subscribed: Option<oneshot::Receiver<()>>,
}

impl Ticket {
    /// The waiter's id in the queue.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Completes once the grant channel's subscription is confirmed (or
    /// could not be made, in which case the reconnect has every waiter's
    /// standing asked). Joining the queue only after this closes the gap
    /// in which a grant would go unheard.
    pub async fn subscribed(&mut self) {
        if let Some(confirmation) = self.subscribed.take() {
            let _ = confirmation.await;
        }
    }

    /// Notes the standing the queue answered with when the waiter joined.
    pub fn joined(&self, position: u64) {
        if let Some(slot) = self
            .waiting
            .0
            .lock()
            .get(&self.channel)
            .and_then(|interest| interest.waiters.get(&self.id))
        {
            slot.standing.send_if_modified(|standing| {
                // A grant heard before the join's answer stands.
                let queued = matches!(standing, Standing::Queued { .. });
                if queued {
                    *standing = Standing::Queued { position };
                }
                queued
            });
        }
    }

    /// Notes that the waiter queues again (its offer lapsed, or its place
    /// was found gone): whatever it heard of its old entry no longer
    /// stands, so only a grant heard for the new one counts, and a tend
    /// can find it unaccounted again.
    pub fn requeue(&mut self) {
        if let Some(slot) = self
            .waiting
            .0
            .lock()
            .get(&self.channel)
            .and_then(|interest| interest.waiters.get(&self.id))
        {
            slot.standing.send_replace(Standing::Queued { position: 0 });
        }
        self.heard.mark_unchanged();
    }

    /// Completes when the standing changes; returns the new one.
    pub async fn changed(&mut self) -> Standing {
        let _ = self.heard.changed().await;
        *self.heard.borrow_and_update()
    }

    /// The standing now.
    pub fn standing(&self) -> Standing {
        *self.heard.borrow()
    }

    /// Cancelled when the instance starts shutting down.
    pub fn closing(&self) -> CancellationToken {
        self.waiting.0.closing.clone()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.waiting.leave(&self.channel, &self.id);
    }
}
