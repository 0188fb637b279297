//! Event-driven waiting: local waiters per lock, woken one per release message from the shared subscription.
//!
//! Each instance keeps, per release channel, the queue of its requests
//! waiting on that lock. The channel is subscribed while the queue is not
//! empty (each waiter's subscription is counted by the subscriber). A
//! release message wakes the longest-waiting local waiter that is not already
//! awake, which retries the acquire script: one retry per release per
//! instance, not a herd. Waiters need no Redis connection while they wait.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use crate::redis::pubsub::{Listener, Subscriber};
use crate::sync::lock;

/// Why a request may not wait here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WaitRefused {
    #[error("this instance already has its maximum of {0} waiting requests")]
    TooManyWaiters(usize),
    #[error("this instance is shutting down")]
    ShuttingDown,
}

/// The registry of this instance's waiting requests.
#[derive(Clone)]
pub struct Waiting {
    registry: Arc<Registry>,
    subscriber: Subscriber,
    /// Cancelled at shutdown: every waiter stops, and no one may start.
    closing: CancellationToken,
}

struct Registry {
    queues: Mutex<HashMap<String, Vec<Arc<Waiter>>>>,
    waiting: AtomicUsize,
    max_waiters: usize,
}

/// One waiting request's wake-up slot.
struct Waiter {
    /// Set when a message picked this waiter and it has not retried yet, so
    /// the next message picks someone else.
    woken: AtomicBool,
    notify: Notify,
    /// An exclusive or counted request (one that shared requests wait
    /// behind once it is marked as a waiting writer).
    writer: bool,
}

impl Waiter {
    fn wake(&self) {
        self.woken.store(true, Ordering::Release);
        self.notify.notify_one();
    }
}

impl Waiting {
    pub fn new(subscriber: Subscriber, max_waiters: usize) -> Self {
        let registry = Arc::new(Registry {
            queues: Mutex::new(HashMap::new()),
            waiting: AtomicUsize::new(0),
            max_waiters,
        });
        subscriber.listen(registry.clone());
        Self {
            registry,
            subscriber,
            closing: CancellationToken::new(),
        }
    }

    /// Stops every waiting request (each answers that the instance is
    /// shutting down) and refuses new ones.
    pub fn close(&self) {
        self.closing.cancel();
    }

    /// Joins the queue of `channel`, subscribing it if this is its first
    /// local waiter; `writer` for a request that is not shared.
    pub fn enter(&self, channel: &str, writer: bool) -> Result<Ticket, WaitRefused> {
        if self.closing.is_cancelled() {
            return Err(WaitRefused::ShuttingDown);
        }
        let registry = &self.registry;
        if registry.waiting.fetch_add(1, Ordering::AcqRel) >= registry.max_waiters {
            registry.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(WaitRefused::TooManyWaiters(registry.max_waiters));
        }
        let waiter = Arc::new(Waiter {
            woken: AtomicBool::new(false),
            notify: Notify::new(),
            writer,
        });
        // The request goes out while the lock is held, so the subscriber sees
        // subscribes and unsubscribes in the order the queues changed.
        let subscribed = {
            let mut queues = registry.lock();
            let queue = queues.entry(channel.to_owned()).or_default();
            queue.push(waiter.clone());
            self.subscriber.subscribe(channel)
        };
        Ok(Ticket {
            waiting: self.clone(),
            channel: channel.to_owned(),
            waiter,
            subscribed: Some(subscribed),
        })
    }

    /// Requests waiting on this instance now.
    pub fn count(&self) -> usize {
        self.registry.waiting.load(Ordering::Acquire)
    }

    fn leave(&self, channel: &str, waiter: &Arc<Waiter>) {
        let mut queues = self.registry.lock();
        // Each waiter's subscription is counted: the channel is unsubscribed
        // when the last one leaves (and no other part of the gateway needs it).
        self.subscriber.unsubscribe(channel);
        if let Some(queue) = queues.get_mut(channel) {
            queue.retain(|other| !Arc::ptr_eq(other, waiter));
            if queue.is_empty() {
                queues.remove(channel);
            } else if waiter.woken.load(Ordering::Acquire) {
                // It was picked for a release but left before retrying: pass
                // the wake-up on, or the lock may sit free while others sleep.
                wake_one(queue);
            }
        }
        self.registry.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Vec<Arc<Waiter>>>> {
        lock(&self.queues)
    }
}

/// Wakes the longest-waiting waiter not already awake.
fn wake_one(queue: &[Arc<Waiter>]) {
    if let Some(waiter) = queue.iter().find(|w| !w.woken.load(Ordering::Acquire)) {
        waiter.wake();
    }
}

impl Listener for Registry {
    fn message(&self, channel: &str, _payload: &[u8]) {
        if let Some(queue) = self.lock().get(channel) {
            wake_one(queue);
        }
    }

    fn resubscribed(&self, channel: &str) {
        if let Some(queue) = self.lock().get(channel) {
            for waiter in queue {
                waiter.wake();
            }
        }
    }

    fn reconnected(&self) {
        for queue in self.lock().values() {
            for waiter in queue {
                waiter.wake();
            }
        }
    }
}

/// A place in a lock's wait queue; dropping it leaves the queue.
pub struct Ticket {
    waiting: Waiting,
    channel: String,
    waiter: Arc<Waiter>,
    subscribed: Option<oneshot::Receiver<()>>,
}

impl Ticket {
    /// Completes once the channel's subscription is confirmed (or could not
    /// be made, in which case the reconnect will wake this waiter). Retrying
    /// the lock only after this closes the gap in which a release would go
    /// unheard.
    pub async fn subscribed(&mut self) {
        if let Some(confirmation) = self.subscribed.take() {
            let _ = confirmation.await;
        }
    }

    /// Completes when the instance starts shutting down.
    pub async fn closing(&self) {
        self.waiting.closing.cancelled().await;
    }

    /// Wakes the longest-waiting other waiter not already awake: this one
    /// was granted and there is room for more (a place of a counting lock,
    /// or readers after a writer), so each grant passes the wake-up on
    /// rather than one release waking everyone.
    pub fn wake_next(&self) {
        self.wake_first(|_| true);
    }

    /// Wakes the longest-waiting writer not already awake: this shared
    /// request found the key free but for a waiting writer, and may have
    /// taken the wake-up that was that writer's.
    pub fn wake_writer(&self) {
        self.wake_first(|waiter| waiter.writer);
    }

    fn wake_first(&self, wanted: impl Fn(&Waiter) -> bool) {
        let queues = self.waiting.registry.lock();
        if let Some(queue) = queues.get(&self.channel) {
            let next = queue.iter().find(|w| {
                !Arc::ptr_eq(w, &self.waiter) && !w.woken.load(Ordering::Acquire) && wanted(w)
            });
            if let Some(waiter) = next {
                waiter.wake();
            }
        }
    }

    /// Completes when a release (or a reconnect) picks this waiter.
    pub async fn woken(&self) {
        self.waiter.notify.notified().await;
        self.waiter.woken.store(false, Ordering::Release);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.waiting.leave(&self.channel, &self.waiter);
    }
}
