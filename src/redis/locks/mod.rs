//! Typed wrappers for the lock scripts, and the Redis names of one lock's state.
//!
//! Every lock script takes the same eight keys and three first arguments
//! (`lua/lib/base.lua`), which [`LockKeys::bind`] adds. [`grant`] holds the
//! wrappers that change who holds a lock (acquire, release, extend, leave
//! the queue, set a value, revoke); [`view`] those that read it (inspect,
//! watch, history, the instances' tending, listing).

pub mod grant;
pub mod view;

use redis::ScriptInvocation;
use serde::Deserialize;

/// How long a lock's fence counter outlives its lease. Fencing tokens stay
/// increasing without it (they never fall below the Redis clock in µs); the
/// counter only guards against the clock stepping back meanwhile. A day of one
/// short string per recently used lock name is cheap.
pub(super) const FENCE_RETENTION_MS: u64 = 24 * 60 * 60 * 1000;

/// The Redis names of one lock's state (laid out in `lua/lib/`), and its
/// channels. All share the hash tag `{<key>}`, so in Redis Cluster one lock
/// lives in one slot and its scripts run there.
#[derive(Debug, Clone)]
pub struct LockKeys {
    /// Hash: the lock and its holders (`lua/lib/holders.lua`); its TTL is
    /// the (latest) lease.
    pub lock: String,
    /// String: the last fencing token issued for the key.
    pub fence: String,
    /// Sorted set: a lock with many holders' tokens, by lease end.
    pub holders: String,
    /// Sorted set: the waiters, in arrival order (`lua/lib/queue.lua`).
    pub queue: String,
    /// Hash: what each waiter asked for, and the instances' presence.
    pub waiters: String,
    /// Hash: stands while someone watches the lock (`lua/lib/events.lua`).
    pub watch: String,
    /// Stream: the lock's events.
    pub events: String,
    /// Hash: streamed holders whose place ended by a release or revocation.
    pub gone: String,
    /// Channel: a holder's place freed (its fencing token, or `revoked`).
    pub released: String,
    /// Channel: the lock's events, for the instances' watchers.
    pub events_channel: String,
    /// The prefix of the channels that tell an instance its waiter was granted.
    granted_stem: String,
    prefix: String,
    key: String,
}

impl LockKeys {
    /// The names of lock `key` (already checked by the domain: no braces).
    pub fn new(prefix: &str, key: &str) -> Self {
        let name = |what: &str| format!("{prefix}{what}:{{{key}}}");
        Self {
            lock: name("lock"),
            fence: name("fence"),
            holders: name("holders"),
            queue: name("queue"),
            waiters: name("waiters"),
            watch: name("watch"),
            events: name("events"),
            gone: name("gone"),
            released: name("released"),
            events_channel: name("events"),
            granted_stem: format!("{}:", name("granted")),
            prefix: prefix.to_owned(),
            key: key.to_owned(),
        }
    }

    /// The lock's key, as the client named it.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The channel on which `instance` hears that one of its waiters for
    /// this lock was granted (`<waiter id> <fencing token> <lease end>`).
    pub fn granted(&self, instance: &str) -> String {
        format!("{}{instance}", self.granted_stem)
    }

    /// Adds the keys and first arguments every lock script takes
    /// (`lua/lib/base.lua`); `publish` is `PUBLISH`, or `SPUBLISH` in a
    /// Redis Cluster.
    pub fn bind<'a, 'i>(
        &self,
        invocation: &'a mut ScriptInvocation<'i>,
        publish: &str,
    ) -> &'a mut ScriptInvocation<'i> {
        invocation
            .key(&self.lock)
            .key(&self.fence)
            .key(&self.holders)
            .key(&self.queue)
            .key(&self.waiters)
            .key(&self.watch)
            .key(&self.events)
            .key(&self.gone)
            .arg(publish)
            .arg(&self.prefix)
            .arg(&self.key)
    }
}

/// How a lock admits holders. The domain hands it on as it is
/// (`locks::LockKind`), validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// One holder at a time: a plain lock (a mutex).
    Exclusive,
    /// Any number of holders at once, while no exclusive request waits
    /// ahead of a newcomer (a read lock).
    Shared,
    /// Up to this many holders at once, 2 or more (a semaphore).
    Counted(u32),
}

impl LockKind {
    /// How many may hold it at once; `None` for no bound (shared).
    pub fn limit(self) -> Option<u32> {
        match self {
            Self::Exclusive => Some(1),
            Self::Shared => None,
            Self::Counted(limit) => Some(limit),
        }
    }

    pub fn is_shared(self) -> bool {
        self == Self::Shared
    }

    /// The mode as the scripts name it.
    pub fn mode(self) -> &'static str {
        match self {
            Self::Exclusive => "exclusive",
            Self::Shared => "shared",
            Self::Counted(_) => "counted",
        }
    }

    /// The kind a script's `mode` and `limit` name.
    fn of(mode: &str, limit: u64) -> Option<Self> {
        match (mode, limit) {
            ("shared", _) => Some(Self::Shared),
            ("exclusive", 1) => Some(Self::Exclusive),
            ("counted", limit) => u32::try_from(limit).ok().map(Self::Counted),
            _ => None,
        }
    }
}

/// A held lock's state as the scripts report it, without its token; its end
/// is the expiry Redis holds. The domain hands it on as it is
/// (`locks::LockState`), so a grant, a renewal and an inspection share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockState {
    pub fencing_token: u64,
    pub holds: u64,
    pub ttl_ms: u64,
    pub expires_at_ms: u64,
}

/// One holder's lease, as anyone may see it (never its token).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LeaseView {
    pub fencing_token: u64,
    pub value: Option<String>,
    pub holds: u64,
    pub acquired_at_ms: u64,
    pub expires_at_ms: u64,
}

/// One waiter, as anyone may see it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct WaiterView {
    pub position: u64,
    pub mode: String,
    pub waiting_since_ms: u64,
}
