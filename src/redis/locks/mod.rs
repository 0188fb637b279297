//! Typed wrappers for the lock scripts, and the Redis names of one lock's state.
//!
//! Every lock script takes the same eight keys and three first arguments
//! (`lua/lib/base.lua`), which [`LockKeys::bind`] adds. [`grant`] holds the
//! wrappers that change who holds a lock (acquire, release, extend, leave
//! the queue, set a value, revoke); [`batch`] those that take several locks
//! at once or change a holder's mode; [`view`] those that read it (inspect,
//! watch, history, the instances' tending, listing).

pub mod batch;
pub mod grant;
pub mod view;

use std::sync::Arc;

use serde::Deserialize;

/// How long a lock's fence counter outlives its lease. Fencing tokens stay
/// increasing without it (they never fall below the Redis clock in µs); the
/// counter only guards against the clock stepping back meanwhile. A day of one
/// short string per recently used lock name is cheap.
pub(super) const FENCE_RETENTION_MS: u64 = 24 * 60 * 60 * 1000;

/// The Redis names of one lock's state (laid out in `lua/lib/`), and its
/// channels. All share the hash tag `{<key>}`, so in Redis Cluster one lock
/// lives in one slot and its scripts run there. Only the prefix and the key
/// are kept: each name is written when it is used (a request's script call
/// writes all eight straight into its command).
#[derive(Debug, Clone)]
pub struct LockKeys {
    prefix: Arc<str>,
    key: String,
}

/// What a script of another domain needs to release a plain holder's hold
/// in its own call, as `release_plain.lua` does (`lua/lib/plain.lua`).
#[derive(Debug, Clone)]
pub struct PlainRelease {
    /// The lock's lock, queue and watch keys.
    pub keys: [String; 3],
    /// `PUBLISH` (or `SPUBLISH`).
    pub publish: &'static str,
    /// The lock's release channel.
    pub channel: String,
    /// The holder's token.
    pub token: String,
}

/// The lock's Redis keys, in the order every lock script takes them
/// (`lua/lib/base.lua`): `lock` (a hash, the lock and its holders; its TTL
/// the latest lease), `fence` (the last fencing token issued), `holders`
/// (a lock with many holders' tokens by lease end), `queue` and `waiters`
/// (the fair queue), `watch` and `events` (while someone watches) and
/// `gone` (streamed holders whose place ended by a release or revocation).
const KEY_NAMES: [&str; 8] = [
    "lock", "fence", "holders", "queue", "waiters", "watch", "events", "gone",
];

impl LockKeys {
    /// The names of lock `key` (already checked by the domain: no braces).
    pub fn new(prefix: &Arc<str>, key: &str) -> Self {
        Self {
            prefix: prefix.clone(),
            key: key.to_owned(),
        }
    }

    /// `<prefix><what>:{<key>}`, built without the formatting machinery
    /// (a tenth of `format!`'s cost, measured with callgrind): several of
    /// these are built for every lock call.
    fn name(&self, what: &str) -> String {
        let mut name = String::with_capacity(self.prefix.len() + what.len() + self.key.len() + 3);
        self.write_name(&mut name, what);
        name
    }

    fn write_name(&self, name: &mut String, what: &str) {
        name.push_str(&self.prefix);
        name.push_str(what);
        name.push_str(":{");
        name.push_str(&self.key);
        name.push('}');
    }

    /// The lock's key, as the client named it.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The lock's hash (the key a write is confirmed at).
    pub fn lock(&self) -> String {
        self.name("lock")
    }

    /// The queue (waiter id -> ticket) and what each waiter asked for.
    pub fn queue(&self) -> (String, String) {
        (self.name("queue"), self.name("waiters"))
    }

    /// The keys a plain try uses (`acquire_plain.lua`): the lock, its
    /// fence counter, its queue and its watch key.
    pub fn plain_try(&self) -> [String; 4] {
        [
            self.name("lock"),
            self.name("fence"),
            self.name("queue"),
            self.name("watch"),
        ]
    }

    /// The keys a plain holder's release uses (`lib/plain.lua`):
    /// the lock, its queue and its watch key.
    pub fn plain_release(&self) -> [String; 3] {
        [self.name("lock"), self.name("queue"), self.name("watch")]
    }

    /// The channel on which a holder's place freed is told (its fencing
    /// token, or `revoked <fencing token>`).
    pub fn released(&self) -> String {
        self.name("released")
    }

    /// The channel of the lock's events, for the instances' watchers.
    pub fn events_channel(&self) -> String {
        self.name("events")
    }

    /// The channel on which `instance` hears that one of its waiters for
    /// this lock was granted (`<waiter id> <fencing token> <lease end>`).
    pub fn granted(&self, instance: &str) -> String {
        let mut name = self.name("granted");
        name.push(':');
        name.push_str(instance);
        name
    }

    /// Writes the keys and first arguments every lock script takes
    /// (`lua/lib/base.lua`) into `call`; `publish` is `PUBLISH`, or
    /// `SPUBLISH` in a Redis Cluster.
    pub fn bind(&self, call: &mut redis::Cmd, publish: &str) {
        call.arg(KEY_NAMES.len());
        self.bind_keys(call);
        call.arg(publish).arg(&*self.prefix).arg(&self.key);
    }

    /// The lock's prefix, as the scripts take it after `publish`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Writes the lock's eight keys into `call` (a script over several
    /// locks takes each lock's in turn).
    pub fn bind_keys(&self, call: &mut redis::Cmd) {
        let mut name = String::with_capacity(self.prefix.len() + self.key.len() + 12);
        for what in KEY_NAMES {
            name.clear();
            self.write_name(&mut name, what);
            call.arg(name.as_str());
        }
    }

    /// How many keys each lock gives a script.
    pub const COUNT: usize = KEY_NAMES.len();
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockState {
    pub fencing_token: u64,
    pub holds: u64,
    pub ttl_ms: u64,
    pub expires_at_ms: u64,
    /// The public handle of the session the hold hangs on: its lease is
    /// then the session's (`expires_at_ms` is not a time).
    pub session: Option<String>,
}

/// One holder's lease, as anyone may see it (never its token).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LeaseView {
    pub fencing_token: u64,
    pub value: Option<String>,
    pub holds: u64,
    pub acquired_at_ms: u64,
    pub expires_at_ms: u64,
    /// The public handle of the session the hold hangs on, if any.
    #[serde(default)]
    pub session: Option<String>,
    /// The places it takes of a counting lock (absent for other kinds).
    #[serde(default)]
    pub permits: Option<u64>,
}

/// One waiter, as anyone may see it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct WaiterView {
    pub position: u64,
    pub mode: String,
    pub waiting_since_ms: u64,
}

/// A counting lock's places as the scripts take them: `<limit>`, or
/// `<limit> <permits>` for a holder that takes more than one.
pub fn places(kind: LockKind, permits: u32) -> String {
    let limit = kind.limit().unwrap_or(1);
    if permits > 1 {
        format!("{limit} {permits}")
    } else {
        limit.to_string()
    }
}
