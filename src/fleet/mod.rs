//! The fleet: every instance serving one Redis (one key prefix), of whichever version, and the data format they write.
//!
//! Each instance keeps a record in `<prefix>meta` (id, version, the
//! formats it reads and writes, start time, address, its function
//! library), renewed every [`BEAT`] and dropped [`STALE`] after the last.
//! The format in use is recorded there too, with every change of it; an
//! instance runs scripts only while the format in use is one it writes
//! (the gate, `crate::redis::WriteGate`, which each beat feeds). A format
//! this build writes beyond the one in use is moved to only when every
//! live instance writes it (here, automatically, or by `lockgate format
//! raise`: [`operator`]), so a release that changes the layout keeps
//! writing the old one while an older release runs beside it.
//!
//! The function libraries no live instance names (an older release's, or
//! a stopped instance's) are deleted after a grace ([`FleetSettings`]):
//! an instance of 0.1.0, which keeps no record, loads its library again on
//! its next call, so the grace counts from its last use; until a library
//! nobody names is gone, no automatic raise happens (it is the only sign
//! of such an instance).

mod build;
pub mod operator;

pub use build::{BEAT, READS, STALE, VERSION, WRITES};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::redis::fleet::{self, FleetState, FormatChange, FormatRequest, InstanceRecord};
use crate::redis::pubsub::{Listener, Subscriber};
use crate::redis::{BackendError, Redis, Unwritable, WriteGate};
use crate::sync::lock;

/// How often the libraries nobody names are looked for (at most: a
/// grace shorter than two rounds is looked at twice per grace).
const LIBRARY_ROUND: Duration = Duration::from_secs(60);

/// The first look for them, soon after the start.
const FIRST_LIBRARY_ROUND: Duration = Duration::from_secs(5);

/// What the fleet may do by itself.
#[derive(Debug, Clone, Copy)]
pub struct FleetSettings {
    /// How long a function library no live instance names stays loaded.
    pub library_grace: Duration,
    /// Whether to raise the format in use by itself once every live
    /// instance writes a higher one this build writes too.
    pub auto_raise: bool,
}

/// Who this instance is, as its record says.
#[derive(Debug, Clone)]
pub struct Member {
    /// The configured id (`X-Instance-Id`).
    pub id: String,
    /// Where it serves.
    pub address: String,
}

/// This instance's place in its fleet.
#[derive(Clone)]
pub struct Fleet(Arc<Inner>);

struct Inner {
    redis: Redis,
    prefix: String,
    /// The configured id, which signs the changes it makes.
    id: String,
    gate: Arc<WriteGate>,
    settings: FleetSettings,
    metrics: Arc<Metrics>,
    /// The fleet as the last beat read it.
    last: Mutex<Option<FleetState>>,
    /// The libraries nobody named at the last look.
    unnamed: Mutex<Vec<String>>,
    /// Told when the format changed (its channel), or pub/sub reconnected.
    soon: Notify,
    closing: CancellationToken,
}

/// What `GET /version` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionInfo {
    pub version: &'static str,
    pub reads: &'static [u32],
    /// The highest format this build writes.
    pub writes: u32,
    /// As last read (none before Redis first answered).
    pub format_in_use: Option<u32>,
}

/// This build's version and formats.
pub fn this_build() -> VersionInfo {
    VersionInfo {
        version: VERSION,
        reads: READS,
        writes: WRITES[1],
        format_in_use: None,
    }
}

/// The start of a record's `by`: who wrote a migration.
fn by(id: &str) -> String {
    format!("{VERSION} ({id})")
}

impl Fleet {
    /// Joins the fleet of `redis`: from now on every script asks the gate,
    /// and the record is renewed until [`Fleet::leave`]. Refused when Redis
    /// answers with a format in use this build does not write (a newer
    /// release raised it); Redis not answering is not fatal (the gate stays
    /// closed to scripts, which could not run anyway, until it does).
    pub async fn join(
        (redis, subscriber): (&Redis, &Subscriber),
        prefix: &str,
        member: Member,
        settings: FleetSettings,
        metrics: Arc<Metrics>,
    ) -> Result<Self, Unwritable> {
        let gate = Arc::new(WriteGate::new(prefix, WRITES, STALE, by(&member.id)));
        // Its key in the fleet is fresh per start: an instance started
        // again under the same id is a new member.
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        gate.join(
            &format!("{}#{}", member.id, &nonce[..8]),
            InstanceRecord {
                id: member.id.clone(),
                version: VERSION.to_owned(),
                reads: READS.to_vec(),
                writes: WRITES,
                started_at_ms: unix_ms(),
                address: member.address.clone(),
                library: crate::redis::library().0.to_owned(),
                seen_at_ms: None,
            },
        );
        redis.gate_scripts(gate.clone());
        metrics.build(VERSION, READS, WRITES);
        let fleet = Self(Arc::new(Inner {
            redis: redis.clone(),
            prefix: prefix.to_owned(),
            id: member.id,
            gate,
            settings,
            metrics,
            last: Mutex::new(None),
            unnamed: Mutex::new(Vec::new()),
            soon: Notify::new(),
            closing: CancellationToken::new(),
        }));
        match fleet.beat().await {
            Ok(()) => {
                if let Some(unwritable) = fleet.unwritable() {
                    return Err(unwritable);
                }
                // The libraries first, so that a raise waits for an older
                // release that keeps no record but left its library; then
                // a fleet that can move to a newer format does so before
                // this instance serves (read again at once: the gate).
                if let Err(err) = fleet.tidy_libraries().await {
                    tracing::debug!(error = %err, "looking for unused function libraries failed");
                }
                match fleet.raise_when_all_can().await {
                    Ok(true) => {
                        if let Err(err) = fleet.beat().await {
                            tracing::debug!(error = %err, "fleet beat failed");
                        }
                    }
                    Ok(false) => {}
                    Err(err) => tracing::debug!(error = %err, "automatic format raise failed"),
                }
            }
            Err(err) => tracing::warn!(
                error = %err,
                "the fleet's record cannot be read yet; no script runs until it is"
            ),
        }
        subscriber.listen(fleet.0.clone());
        // The answer is the subscription confirmed: beats poll besides.
        drop(subscriber.subscribe(&fleet::meta_key(prefix)));
        tokio::spawn(fleet.clone().run());
        Ok(fleet)
    }

    /// What `GET /version` answers.
    pub fn version(&self) -> VersionInfo {
        VersionInfo {
            format_in_use: self.0.gate.format_in_use(),
            ..this_build()
        }
    }

    /// The live instances, as the last beat read them, oldest first.
    pub fn instances(&self) -> Vec<InstanceRecord> {
        let mut instances = lock(&self.0.last)
            .as_ref()
            .map(|state| state.instances.clone())
            .unwrap_or_default();
        instances.sort_by(|a, b| (a.started_at_ms, &a.id).cmp(&(b.started_at_ms, &b.id)));
        instances
    }

    /// Why this instance runs no script, if the format in use (as last
    /// read) is one it does not write.
    pub fn unwritable(&self) -> Option<Unwritable> {
        self.0.gate.unwritable()
    }

    /// Whether a script could run now, as a request's would: Redis
    /// answers, the record was read by a recent beat (one is made if not),
    /// and the format in use is one this build writes. `/readyz` asks it,
    /// so that it says not ready whenever requests would be refused.
    pub async fn admits(&self) -> Result<(), BackendError> {
        let mut conn = self.0.redis.connection().await?;
        self.0.gate.admit(&mut conn).await
    }

    /// Stops beating and drops the record: the fleet lists it no more, and
    /// a raise need not wait for it to go stale.
    pub async fn leave(&self) {
        self.0.closing.cancel();
        let Some(key) = self.0.gate.leave() else {
            return;
        };
        let left = async {
            let mut conn = self.0.redis.connection().await?;
            fleet::leave(&mut conn, &self.0.prefix, &key).await
        };
        if let Err(err) = left.await {
            tracing::warn!(error = %err, "the instance's fleet record stays until it goes stale");
        }
    }

    /// Beats every [`BEAT`] (sooner when told the format changed), looks
    /// for unnamed libraries every [`LIBRARY_ROUND`], until it leaves.
    async fn run(self) {
        // A short grace is looked after as often as it runs out (a beat at least).
        let round = LIBRARY_ROUND
            .min(self.0.settings.library_grace / 2)
            .max(BEAT);
        let mut libraries_due = tokio::time::Instant::now() + FIRST_LIBRARY_ROUND.min(round);
        loop {
            tokio::select! {
                () = tokio::time::sleep(BEAT) => {}
                () = self.0.soon.notified() => {}
                () = self.0.closing.cancelled() => return,
            }
            if let Err(err) = self.beat().await {
                tracing::debug!(error = %err, "fleet beat failed");
                continue;
            }
            if tokio::time::Instant::now() >= libraries_due {
                libraries_due = tokio::time::Instant::now() + round;
                if let Err(err) = self.tidy_libraries().await {
                    tracing::debug!(error = %err, "looking for unused function libraries failed");
                }
            }
            if let Err(err) = self.raise_when_all_can().await.map(drop) {
                tracing::debug!(error = %err, "automatic format raise failed");
            }
        }
    }

    /// One beat, and what it says of Redis and readiness in the metrics.
    async fn beat(&self) -> Result<(), BackendError> {
        let beaten = self.renew_and_read().await;
        self.0
            .metrics
            .beat(beaten.is_ok(), self.unwritable().is_none());
        beaten
    }

    /// The record renewed, the fleet read, the versions counted, a change
    /// of the format logged.
    async fn renew_and_read(&self) -> Result<(), BackendError> {
        let mut conn = self.0.redis.connection().await?;
        let before = self.0.gate.format_in_use();
        let state = self.0.gate.beat(&mut conn).await?;
        let mut versions: BTreeMap<String, usize> = BTreeMap::new();
        for instance in &state.instances {
            *versions.entry(instance.version.clone()).or_default() += 1;
        }
        self.0
            .metrics
            .fleet_versions(&versions.into_iter().collect::<Vec<_>>());
        if before.is_some_and(|before| before != state.format) {
            // The last migration, if it is the one that made this change
            // (a hand's edit of the field records none).
            let change = state
                .migrations
                .last()
                .filter(|change| change.to == state.format);
            match self.unwritable() {
                Some(unwritable) => tracing::error!(
                    format_in_use = unwritable.format_in_use,
                    writes = unwritable.writes,
                    by = change.map(|change| change.by.as_str()),
                    "the data format in use changed to one this build does not write: \
                     it grants nothing until the format is lowered or it is replaced by a newer release"
                ),
                None => tracing::info!(
                    format_in_use = state.format,
                    by = change.map(|change| change.by.as_str()),
                    how = change.map(|change| change.how.as_str()),
                    "the data format in use changed"
                ),
            }
        }
        *lock(&self.0.last) = Some(state);
        Ok(())
    }

    /// Notes the `lockgate_*` libraries no live instance names, and
    /// deletes those unnamed for longer than the grace.
    async fn tidy_libraries(&self) -> Result<(), BackendError> {
        let mut conn = self.0.redis.connection().await?;
        let named: Vec<String> = self
            .instances()
            .into_iter()
            .map(|instance| instance.library)
            .chain([crate::redis::library().0.to_owned()])
            .collect();
        let unnamed: Vec<String> = fleet::libraries(&mut conn)
            .await?
            .into_iter()
            .filter(|library| !named.contains(library))
            .collect();
        let grace = crate::duration::millis(self.0.settings.library_grace);
        let due = fleet::note_unnamed(&mut conn, &self.0.prefix, &unnamed, grace).await?;
        for library in &due {
            fleet::delete_library(&mut conn, library).await?;
            tracing::info!(
                library = %library,
                grace_ms = grace,
                "deleted a function library no live instance named for the grace"
            );
        }
        *lock(&self.0.unnamed) = unnamed.into_iter().filter(|l| !due.contains(l)).collect();
        Ok(())
    }

    /// Raises the format in use when every live instance writes a higher
    /// one this build writes, no library nobody names is loaded, and the
    /// last change was not an operator's lower (which only an operator's
    /// raise undoes).
    async fn raise_when_all_can(&self) -> Result<bool, BackendError> {
        if !self.0.settings.auto_raise || !lock(&self.0.unnamed).is_empty() {
            return Ok(false);
        }
        let target = {
            let last = lock(&self.0.last);
            let Some(state) = last.as_ref() else {
                return Ok(false);
            };
            // Format 0 is the field holding no format: what was meant is
            // unknown, so only an operator sets one.
            if state.format == 0 {
                return Ok(false);
            }
            if state
                .migrations
                .last()
                .is_some_and(|change| change.how == operator::LOWER)
            {
                return Ok(false);
            }
            let target = state
                .instances
                .iter()
                .map(|instance| instance.writes[1])
                .min()
                .unwrap_or(WRITES[1])
                .min(WRITES[1]);
            if target <= state.format {
                return Ok(false);
            }
            (target, state.format)
        };
        let mut conn = self.0.redis.connection().await?;
        let request = FormatRequest {
            to: target.0,
            from: Some(target.1),
            by: &by(&self.0.id),
            how: operator::AUTOMATIC_RAISE,
        };
        let change = fleet::change_format(
            &mut conn,
            &self.0.prefix,
            request,
            crate::duration::millis(STALE),
        )
        .await?;
        if let FormatChange::Changed { from, to } = change {
            tracing::info!(
                from,
                to,
                "raised the data format in use: every live instance writes it"
            );
            self.0.soon.notify_one();
            return Ok(true);
        }
        Ok(false)
    }
}

impl Listener for Inner {
    fn message(&self, channel: &str, _payload: &[u8]) {
        if channel == fleet::meta_key(&self.prefix) {
            self.soon.notify_one();
        }
    }

    fn reconnected(&self) {
        self.soon.notify_one();
    }
}

/// Now, in Unix milliseconds (the record's start time).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, crate::duration::millis)
}
