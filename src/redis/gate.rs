//! The instance's right to run scripts: open while the data format in use is one this build writes, as its fleet record's last beat read it, and that beat is recent.
//!
//! Every script but the fleet's own asks the gate first
//! ([`Function::run`](super::scripts::Function::run)), so an instance
//! never writes a layout it does not know, whichever route, waiter or
//! renewal writes. The gate is a lease on what the instance last read: a
//! beat older than half the time a record stands without one (a paused
//! process, a Redis that did not answer) may have missed a change of the
//! format, so the next script beats first, itself, and runs only on what
//! that beat reads. The fleet's heartbeat (the `fleet` module, a layer up) keeps it recent
//! otherwise, at no cost to a request: two atomic loads.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::fleet::{self, FleetState, InstanceRecord};
use super::{BackendError, Connection};
use crate::duration::millis;
use crate::sync::lock;

/// The gate of one instance on one Redis (its key prefix).
pub struct WriteGate {
    prefix: String,
    /// The lowest and the highest format this build writes.
    writes: [u32; 2],
    /// How long a record stands without a beat.
    stale: Duration,
    /// Who records the format of a Redis that has none (`0.2.0 (host:8080)`).
    by: String,
    /// The instance's key in the fleet and its record, once it has joined.
    member: Mutex<Option<(String, InstanceRecord)>>,
    /// The format in use as last read (0 before any beat).
    format: AtomicU64,
    /// When the last beat's answer came, in milliseconds since `base`
    /// (0: never).
    confirmed: AtomicU64,
    base: Instant,
    /// One beat at a time when the gate is stale: the others wait for it.
    refreshing: tokio::sync::Mutex<()>,
}

/// Why the gate is closed: the format in use, and the highest this build
/// writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unwritable {
    pub format_in_use: u32,
    pub writes: u32,
}

impl WriteGate {
    pub fn new(prefix: &str, writes: [u32; 2], stale: Duration, by: String) -> Self {
        Self {
            prefix: prefix.to_owned(),
            writes,
            stale,
            by,
            member: Mutex::new(None),
            format: AtomicU64::new(0),
            confirmed: AtomicU64::new(0),
            base: Instant::now(),
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    /// From now on each beat records the instance (`key`, `record`).
    pub fn join(&self, key: &str, record: InstanceRecord) {
        *lock(&self.member) = Some((key.to_owned(), record));
    }

    /// The instance leaves: beats read only; answers its key, if it had
    /// joined, for its record to be dropped.
    pub fn leave(&self) -> Option<String> {
        lock(&self.member).take().map(|(key, _)| key)
    }

    /// Beats: records the instance (once joined), reads the fleet, and
    /// takes the format it reads as the one in use.
    pub async fn beat(&self, conn: &mut Connection) -> Result<FleetState, BackendError> {
        let member = lock(&self.member).clone();
        let state = fleet::beat(
            conn,
            &self.prefix,
            member.as_ref().map(|(key, record)| (key.as_str(), record)),
            millis(self.stale),
            (fleet::FIRST_FORMAT, &self.by),
        )
        .await?;
        // One more than the format: 0 is "not read yet", and format 0
        // (a field that holds no format) must close the gate, not open it.
        self.format
            .store(u64::from(state.format) + 1, Ordering::Release);
        let since = millis(self.base.elapsed()).max(1);
        self.confirmed.store(since, Ordering::Release);
        Ok(state)
    }

    /// Whether a script may run now: at once when the last beat is recent,
    /// else after a beat of its own on `conn`.
    pub async fn admit(&self, conn: &mut Connection) -> Result<(), BackendError> {
        if !self.is_recent() {
            let _one_at_a_time = self.refreshing.lock().await;
            if !self.is_recent() {
                self.beat(conn).await?;
            }
        }
        match self.unwritable() {
            Some(unwritable) => Err(BackendError::Unwritable(unwritable)),
            None => Ok(()),
        }
    }

    /// The format in use as last read, once read.
    pub fn format_in_use(&self) -> Option<u32> {
        match self.format.load(Ordering::Acquire) {
            0 => None,
            stored => u32::try_from(stored - 1).ok(),
        }
    }

    /// Why no script may run, if the format in use (as last read) is one
    /// this build does not write.
    pub fn unwritable(&self) -> Option<Unwritable> {
        let format_in_use = self.format_in_use()?;
        let [lowest, highest] = self.writes;
        (!(lowest..=highest).contains(&format_in_use)).then_some(Unwritable {
            format_in_use,
            writes: highest,
        })
    }

    fn is_recent(&self) -> bool {
        let confirmed = self.confirmed.load(Ordering::Acquire);
        confirmed != 0
            && millis(self.base.elapsed()).saturating_sub(confirmed) < millis(self.stale) / 2
    }
}
