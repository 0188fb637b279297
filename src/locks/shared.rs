//! What every lock operation of one instance shares: the Redis handle, the key prefix, this instance's waiters and the metrics, handed to the lock domain's parts by name.

use std::sync::Arc;

use super::inputs::{LockKey, LockLimits};
use super::sessions::Sessions;
use super::waiting::Waiting;
use crate::metrics::Metrics;
use crate::redis::Redis;
use crate::redis::locks::LockKeys;

/// The lock operations, shared by every request of one gateway instance
/// (and cloned for each, so they are one shared allocation). Each kind of
/// operation lives in a file of its own (`acquire/`, `hold.rs`,
/// `reading.rs`); this holds what they all use.
#[derive(Clone)]
pub struct Locks(Arc<Parts>);

struct Parts {
    redis: Redis,
    prefix: Arc<str>,
    waiting: Waiting,
    sessions: Sessions,
    metrics: Arc<Metrics>,
    /// The longest lease a client may ask for: how long a revoked lock's
    /// fence counter must outlive it.
    max_ttl_ms: u64,
}

impl Locks {
    pub fn new(
        redis: Redis,
        prefix: &str,
        (waiting, sessions): (Waiting, Sessions),
        metrics: Arc<Metrics>,
        limits: LockLimits,
    ) -> Self {
        Self(Arc::new(Parts {
            redis,
            prefix: prefix.into(),
            waiting,
            sessions,
            metrics,
            max_ttl_ms: limits.max_ttl_ms,
        }))
    }

    pub(super) fn redis(&self) -> &Redis {
        &self.0.redis
    }

    /// The namespace of every Redis key the gateway writes (`lockgate:`).
    pub(super) fn prefix(&self) -> &str {
        &self.0.prefix
    }

    pub(super) fn waiting(&self) -> &Waiting {
        &self.0.waiting
    }

    /// The sessions locks are taken in.
    pub fn sessions(&self) -> &Sessions {
        &self.0.sessions
    }

    pub(super) fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    /// The longest lease a client may ask for.
    pub(super) fn max_ttl_ms(&self) -> u64 {
        self.0.max_ttl_ms
    }

    /// The Redis keys of the lock `key`.
    pub(super) fn keys(&self, key: &LockKey) -> LockKeys {
        LockKeys::new(&self.0.prefix, key.as_str())
    }

    /// The Redis keys of the lock named `key` as Redis holds it (already a
    /// lock key: read from a session's or a queue's records).
    pub(super) fn keys_of(&self, key: &str) -> LockKeys {
        LockKeys::new(&self.0.prefix, key)
    }

    /// `PUBLISH`, or `SPUBLISH` on a Redis Cluster: what the scripts send
    /// their messages with.
    pub(super) fn publish(&self) -> &'static str {
        self.0.redis.publish_command()
    }

    /// Requests waiting for a lock on this instance now.
    pub fn waiters(&self) -> usize {
        self.0.waiting.count()
    }

    /// Requests waiting, on every instance, for the locks with waiters here.
    pub fn queued(&self) -> u64 {
        self.0.waiting.queued()
    }
}
