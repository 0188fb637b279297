//! Prometheus metrics: counters, gauges and histograms of the Prometheus project's own crate (`prometheus-client`), rendered in the text format for `GET /metrics`.
//!
//! One [`Metrics`] per gateway instance (not a global), so several instances
//! in one test process keep their own counts. Label values on the hot path
//! (routes, outcomes, Redis operations) are `&'static str`, interned once,
//! so counting a request allocates nothing.

use std::borrow::Cow;
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::sync::lock;

/// The content type of what [`Metrics::render`] writes.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Histogram bucket bounds, in seconds: from half a millisecond (a Redis
/// round trip) to a minute (the longest lock wait).
const BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Makes each histogram of a family with [`BUCKETS`].
#[derive(Clone, Copy)]
struct Buckets;

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(BUCKETS)
    }
}

fn histogram() -> Histogram {
    Buckets.new_metric()
}

/// The same `&'static str` for equal label values: the hot path's labels
/// (route templates, Redis commands, event kinds) come from a
/// small, fixed set, each kept once for the life of the process.
fn interned(value: &str) -> &'static str {
    static VALUES: OnceLock<Mutex<HashSet<&'static str, BuildHasherDefault<Fnv>>>> =
        OnceLock::new();
    let mut values = lock(VALUES.get_or_init(Mutex::default));
    match values.get(value) {
        Some(kept) => kept,
        None => {
            let kept: &'static str = Box::leak(value.to_owned().into_boxed_str());
            values.insert(kept);
            kept
        }
    }
}

/// FNV-1a, for [`interned`]'s few short values, each looked up several times
/// per request: the standard SipHash costs more than the lookup saves.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: &'static str,
    method: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

/// How many writes a grant from the queue took: `one` (granted outright)
/// or `two` (offered, then claimed).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WritesLabel {
    writes: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabel {
    event: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScopeLabel {
    scope: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabel {
    operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

/// A sale's series: one per sale the hand-off stores, so not interned.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SkuLabel {
    sku: String,
}

/// A build of the gateway: its version and the data formats it reads and
/// writes (`1`, `1,2`; `1..2`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    format_reads: String,
    format_writes: String,
}

/// Which certificate of the gateway's: `listener` (its HTTPS
/// certificate) or `redis_client` (the one it shows Redis).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CertificateLabel {
    certificate: &'static str,
}

/// The instances of the fleet running one version.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: String,
}

/// What happened to a lock request, as `lockgate_lock_outcomes_total` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockOutcome {
    Acquired,
    Reentered,
    /// Held by another owner (the wait, if any, ran out).
    Conflict,
    /// Acquired after waiting for another owner.
    Waited,
    Released,
    /// An extension found the lease gone.
    ExpiredOnExtend,
    /// An operator ended every hold of a lock.
    Revoked,
    /// Joined a lock's queue to wait.
    Queued,
}

impl LockOutcome {
    const ALL: [Self; 8] = [
        Self::Acquired,
        Self::Reentered,
        Self::Conflict,
        Self::Waited,
        Self::Released,
        Self::ExpiredOnExtend,
        Self::Revoked,
        Self::Queued,
    ];

    fn label(self) -> &'static str {
        match self {
            Self::Acquired => "acquired",
            Self::Reentered => "reentered",
            Self::Conflict => "conflict",
            Self::Waited => "waited",
            Self::Released => "released",
            Self::ExpiredOnExtend => "expired_on_extend",
            Self::Revoked => "revoked",
            Self::Queued => "queued",
        }
    }
}

/// What became of a streamed lock's renewal, as
/// `lockgate_stream_renewals_total` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewalOutcome {
    Renewed,
    /// Redis could not be reached; tried again until the lease would end.
    Failed,
    /// The lock was gone, held by another token, or its lease ran out
    /// before a renewal reached Redis: the stream ended with `lost`.
    Lost,
}

impl RenewalOutcome {
    const ALL: [Self; 3] = [Self::Renewed, Self::Failed, Self::Lost];

    fn label(self) -> &'static str {
        match self {
            Self::Renewed => "renewed",
            Self::Failed => "failed",
            Self::Lost => "lost",
        }
    }
}

/// What became of sessions, as `lockgate_sessions_total` counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionOutcome {
    Opened,
    /// Nobody kept it alive: its locks were freed (with its lock-delay).
    Expired,
    /// Deleted, or its stream's client left (or its gateway shut down).
    Deleted,
}

impl SessionOutcome {
    const ALL: [Self; 3] = [Self::Opened, Self::Expired, Self::Deleted];

    fn label(self) -> &'static str {
        match self {
            Self::Opened => "opened",
            Self::Expired => "expired",
            Self::Deleted => "deleted",
        }
    }
}

/// Values read at the moment `/metrics` is rendered.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gauges {
    /// Requests waiting for a lock.
    pub waiters: usize,
    /// Streamed locks held.
    pub streamed_locks: usize,
    /// Watchers of locks (`GET /locks/{key}/events`) open.
    pub watchers: usize,
    /// Requests in the queues of the locks with waiters here, on every
    /// instance.
    pub queued: u64,
}

/// The gauges [`Gauges`] are copied into when rendering.
#[derive(Default)]
struct NowGauges {
    waiters: Gauge,
    streamed_locks: Gauge,
    watchers: Gauge,
    queued: Gauge,
}

impl NowGauges {
    fn set(&self, now: Gauges) {
        let whole = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.waiters.set(whole(now.waiters as u64));
        self.streamed_locks.set(whole(now.streamed_locks as u64));
        self.watchers.set(whole(now.watchers as u64));
        self.queued.set(whole(now.queued));
    }
}

/// The order hand-off's series, rendered only where a hand-off runs.
#[derive(Default)]
struct Handoff {
    stored: Family<SkuLabel, Counter>,
    dead_lettered: Family<SkuLabel, Counter>,
    lost: Family<SkuLabel, Counter>,
    pending: Family<SkuLabel, Gauge>,
    lag_seconds: Family<SkuLabel, Gauge<f64, AtomicU64>>,
    /// Whether a hand-off has reported here.
    reported: AtomicBool,
}

/// Every metric of one gateway instance.
pub struct Metrics {
    registry: Registry,
    handoff_registry: Registry,
    requests: Family<RequestLabels, Histogram, Buckets>,
    lock_outcomes: Family<OutcomeLabel, Counter>,
    renewals: Family<OutcomeLabel, Counter>,
    queue_grants: Family<WritesLabel, Counter>,
    lock_wait: Histogram,
    lock_events: Family<EventLabel, Counter>,
    sale_outcomes: Family<OutcomeLabel, Counter>,
    stock_moved: Family<SkuLabel, Counter>,
    rate_limited: Family<ScopeLabel, Counter>,
    redis_commands: Family<OperationLabel, Histogram, Buckets>,
    redis_errors: Family<KindLabel, Counter>,
    sessions: Family<OutcomeLabel, Counter>,
    deadlocks: Counter,
    now: NowGauges,
    handoff: Handoff,
    build: Family<BuildLabels, Gauge>,
    /// Whether the last SIGHUP reload took (1) or was refused (0); 1
    /// before any.
    reload_success: Gauge,
    /// When the last reload that took was, in Unix seconds (the start's
    /// reading before any).
    reload_success_at: Gauge,
    instances: Family<VersionLabel, Gauge>,
    /// Whether the last fleet beat reached Redis (1) or not (0).
    redis_up: Gauge,
    /// Whether `/readyz` would say ready, as of the last fleet beat.
    ready: Gauge,
    /// The most requests that may wait here at once (`--max-waiters`).
    waiters_limit: Gauge,
    /// When each certificate the gateway presents stops being valid.
    certificate_expiry: Family<CertificateLabel, Gauge>,
}

/// The kinds `lockgate_redis_errors_total` counts by.
const REDIS_ERROR_KINDS: [&str; 4] = ["connection", "timeout", "server", "pool"];

impl Default for Metrics {
    fn default() -> Self {
        let metrics = Self {
            registry: Registry::default(),
            handoff_registry: Registry::default(),
            requests: Family::new_with_constructor(Buckets),
            lock_outcomes: Family::default(),
            renewals: Family::default(),
            queue_grants: Family::default(),
            lock_wait: histogram(),
            lock_events: Family::default(),
            sale_outcomes: Family::default(),
            stock_moved: Family::default(),
            rate_limited: Family::default(),
            redis_commands: Family::new_with_constructor(Buckets),
            redis_errors: Family::default(),
            sessions: Family::default(),
            deadlocks: Counter::default(),
            now: NowGauges::default(),
            handoff: Handoff::default(),
            build: Family::default(),
            instances: Family::default(),
            reload_success: Gauge::default(),
            reload_success_at: Gauge::default(),
            redis_up: Gauge::default(),
            ready: Gauge::default(),
            waiters_limit: Gauge::default(),
            certificate_expiry: Family::default(),
        };
        metrics.reload_success.set(1);
        metrics.reload_success_at.set(unix_seconds());
        metrics.start_at_zero();
        metrics.registered()
    }
}

impl Metrics {
    /// Makes the series of every known label value, at zero: a rate or
    /// an alert on one then has data before the first event, and an
    /// increase from nothing to one is seen as one.
    fn start_at_zero(&self) {
        for outcome in LockOutcome::ALL {
            let outcome = outcome.label();
            self.lock_outcomes
                .get_or_create(&OutcomeLabel { outcome })
                .inc_by(0);
        }
        for outcome in RenewalOutcome::ALL {
            let outcome = outcome.label();
            self.renewals
                .get_or_create(&OutcomeLabel { outcome })
                .inc_by(0);
        }
        for writes in ["one", "two"] {
            self.queue_grants
                .get_or_create(&WritesLabel { writes })
                .inc_by(0);
        }
        for outcome in SessionOutcome::ALL {
            let outcome = outcome.label();
            self.sessions
                .get_or_create(&OutcomeLabel { outcome })
                .inc_by(0);
        }
        for kind in REDIS_ERROR_KINDS {
            self.redis_errors
                .get_or_create(&KindLabel { kind })
                .inc_by(0);
        }
    }

    /// Registers every series under its name and help (the registry keeps
    /// handles to the same atomics the methods below count with).
    fn registered(mut self) -> Self {
        self.register_requests_and_locks();
        self.register_sales_and_redis();
        self.register_handoff();
        self.register_fleet();
        self
    }

    fn register_fleet(&mut self) {
        let r = &mut self.registry;
        r.register(
            "lockgate_build_info",
            "This build: its version and the data formats it reads and writes (always 1)",
            self.build.clone(),
        );
        r.register(
            "lockgate_instances",
            "Live instances of the fleet on this Redis (key prefix), by version, as this instance last read its record",
            self.instances.clone(),
        );
        r.register(
            "lockgate_config_last_reload_success",
            "Whether the last SIGHUP reload took (1) or was refused, the settings in force unchanged (0)",
            self.reload_success.clone(),
        );
        r.register(
            "lockgate_config_last_reload_success_timestamp_seconds",
            "When the last SIGHUP reload that took was (the start, before any), in Unix seconds",
            self.reload_success_at.clone(),
        );
        r.register(
            "lockgate_redis_up",
            "Whether this instance's last fleet beat (every 2 s) reached Redis (1) or not (0)",
            self.redis_up.clone(),
        );
        r.register(
            "lockgate_ready",
            "Whether /readyz would answer 200, as of the last fleet beat: Redis answers and the data format in use is one this build writes",
            self.ready.clone(),
        );
        r.register(
            "lockgate_tls_certificate_expiry_timestamp_seconds",
            "When a certificate the gateway presents stops being valid (its notAfter), in Unix seconds, by certificate (listener, redis_client)",
            self.certificate_expiry.clone(),
        );
    }

    /// A fleet beat: whether it reached Redis, and whether the instance
    /// would say ready (Redis answers and the format in use is one it
    /// writes).
    pub fn beat(&self, redis_up: bool, ready: bool) {
        self.redis_up.set(i64::from(redis_up));
        self.ready.set(i64::from(redis_up && ready));
    }

    /// The most requests that may wait for a lock here at once.
    pub fn waiters_limit(&self, limit: usize) {
        self.waiters_limit
            .set(i64::try_from(limit).unwrap_or(i64::MAX));
    }

    /// When a certificate the gateway presents stops being valid (its
    /// notAfter), in Unix seconds: `listener` or `redis_client`.
    pub fn certificate_expiry(&self, certificate: &'static str, not_after: i64) {
        self.certificate_expiry
            .get_or_create(&CertificateLabel { certificate })
            .set(not_after);
    }

    /// A SIGHUP reload took (`ok`), or was refused and changed nothing.
    pub fn reloaded(&self, ok: bool) {
        self.reload_success.set(i64::from(ok));
        if ok {
            self.reload_success_at.set(unix_seconds());
        }
    }

    /// This build's version and formats (`lockgate_build_info`).
    pub fn build(&self, version: &str, reads: &[u32], writes: [u32; 2]) {
        let reads: Vec<String> = reads.iter().map(u32::to_string).collect();
        let labels = BuildLabels {
            version: version.to_owned(),
            format_reads: reads.join(","),
            format_writes: format!("{}..{}", writes[0], writes[1]),
        };
        self.build.get_or_create(&labels).set(1);
    }

    /// The live instances of the fleet, counted by version: the versions
    /// no longer running are dropped.
    pub fn fleet_versions(&self, versions: &[(String, usize)]) {
        self.instances.clear();
        for (version, count) in versions {
            let count = i64::try_from(*count).unwrap_or(i64::MAX);
            self.instances
                .get_or_create(&VersionLabel {
                    version: version.clone(),
                })
                .set(count);
        }
    }

    fn register_requests_and_locks(&mut self) {
        let r = &mut self.registry;
        r.register(
            "lockgate_http_request_duration_seconds",
            "HTTP requests by route, method and status, and how long they took",
            self.requests.clone(),
        );
        r.register(
            "lockgate_lock_outcomes",
            "Lock requests by outcome",
            self.lock_outcomes.clone(),
        );
        r.register(
            "lockgate_lock_wait_seconds",
            "How long lock requests waited for another owner",
            self.lock_wait.clone(),
        );
        r.register(
            "lockgate_lock_waiters",
            "Requests waiting for a lock on this instance now",
            self.now.waiters.clone(),
        );
        r.register(
            "lockgate_lock_waiters_limit",
            "The most requests that may wait for a lock on this instance at once (--max-waiters)",
            self.waiters_limit.clone(),
        );
        r.register(
            "lockgate_streamed_locks",
            "Streamed locks held on this instance now",
            self.now.streamed_locks.clone(),
        );
        r.register(
            "lockgate_lock_watchers",
            "Watchers of locks open on this instance now",
            self.now.watchers.clone(),
        );
        r.register(
            "lockgate_lock_queue_length",
            "Requests waiting in the queues of the locks this instance has waiters on, on every instance",
            self.now.queued.clone(),
        );
        r.register(
            "lockgate_lock_events",
            "Events of the locks watched on this instance, as heard, by event",
            self.lock_events.clone(),
        );
        r.register(
            "lockgate_lock_queue_grants",
            "Grants this instance's waiters took from the queue, by the writes each took: one (granted outright) or two (offered, then claimed)",
            self.queue_grants.clone(),
        );
        r.register(
            "lockgate_stream_renewals",
            "Renewals of streamed locks by outcome",
            self.renewals.clone(),
        );
        r.register(
            "lockgate_sessions",
            "Sessions opened, expired (their locks freed with their lock-delay) and deleted, on this instance",
            self.sessions.clone(),
        );
        r.register(
            "lockgate_deadlocks",
            "Cycles of session waits found, each answered once with 409 deadlock",
            self.deadlocks.clone(),
        );
    }

    fn register_sales_and_redis(&mut self) {
        let r = &mut self.registry;
        r.register(
            "lockgate_seckill_outcomes",
            "Flash-sale purchase requests by outcome",
            self.sale_outcomes.clone(),
        );
        r.register(
            "lockgate_seckill_stock_moved",
            "Units of a segmented sale moved from one segment to another that ran dry, by sale",
            self.stock_moved.clone(),
        );
        r.register(
            "lockgate_rate_limited",
            "Requests refused by a rate limit, by scope",
            self.rate_limited.clone(),
        );
        r.register(
            "lockgate_redis_command_duration_seconds",
            "Redis commands and scripts by operation, and how long they took",
            self.redis_commands.clone(),
        );
        r.register(
            "lockgate_redis_errors",
            "Failed Redis operations by kind",
            self.redis_errors.clone(),
        );
    }

    /// The hand-off's series, in a registry of their own: rendered only
    /// where a hand-off runs.
    fn register_handoff(&mut self) {
        let (h, handoff) = (&mut self.handoff_registry, &self.handoff);
        h.register(
            "lockgate_orders_stored",
            "Orders the hand-off stored in the database, by sale",
            handoff.stored.clone(),
        );
        h.register(
            "lockgate_orders_dead_letters",
            "Orders moved to a sale's dead-letter stream after their last delivery, by sale",
            handoff.dead_lettered.clone(),
        );
        h.register(
            "lockgate_orders_lost",
            "Pending orders whose stream entries were gone before they were stored, by sale",
            handoff.lost.clone(),
        );
        h.register(
            "lockgate_orders_pending",
            "Orders recorded in Redis and not yet stored, by sale",
            handoff.pending.clone(),
        );
        h.register(
            "lockgate_orders_handoff_lag_seconds",
            "Age of a sale's oldest order not yet stored",
            handoff.lag_seconds.clone(),
        );
    }

    /// A finished request: its route template (or `unmatched`), method and status.
    pub fn request(&self, route: &str, method: &'static str, status: u16, elapsed: Duration) {
        let labels = RequestLabels {
            route: interned(route),
            method,
            status,
        };
        self.requests
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    pub fn lock(&self, outcome: LockOutcome) {
        let outcome = outcome.label();
        self.lock_outcomes
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    /// A waiter's grant from the queue: taken as granted outright (one
    /// write), or claimed (two).
    pub fn queue_grant(&self, outright: bool) {
        let writes = if outright { "one" } else { "two" };
        self.queue_grants
            .get_or_create(&WritesLabel { writes })
            .inc();
    }

    /// A streamed lock's renewal and what became of it.
    pub fn renewal(&self, outcome: RenewalOutcome) {
        let outcome = outcome.label();
        self.renewals.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    /// A session opened, expired or deleted.
    pub fn session(&self, outcome: SessionOutcome) {
        let outcome = outcome.label();
        self.sessions.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    /// A deadlock found (and its youngest waiter refused).
    pub fn deadlock(&self) {
        self.deadlocks.inc();
    }

    /// How long a request waited for a lock (granted or not).
    pub fn lock_wait(&self, waited: Duration) {
        self.lock_wait.observe(waited.as_secs_f64());
    }

    /// An event of a lock watched here, heard once: `acquired`, `released`, ...
    pub fn lock_event(&self, kind: &str) {
        let event = interned(kind);
        self.lock_events.get_or_create(&EventLabel { event }).inc();
    }

    /// A purchase's outcome: `created`, `replayed`, `sold_out`, ...
    pub fn sale(&self, outcome: &str) {
        let outcome = interned(outcome);
        self.sale_outcomes
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    /// Units of a sale moved between its segments.
    pub fn segment_transfer(&self, sku: &str, units: u64) {
        if units > 0 {
            self.stock_moved
                .get_or_create(&sku_label(sku))
                .inc_by(units);
        }
    }

    /// A request refused by a rate limit (`user` or `client`).
    pub fn rate_limited(&self, scope: &str) {
        let scope = interned(scope);
        self.rate_limited.get_or_create(&ScopeLabel { scope }).inc();
    }

    /// A Redis command (or script, by its name) and how long it took.
    pub fn redis_command(&self, operation: Cow<'static, str>, elapsed: Duration) {
        let operation = match operation {
            Cow::Borrowed(operation) => operation,
            Cow::Owned(operation) => interned(&operation),
        };
        self.redis_commands
            .get_or_create(&OperationLabel { operation })
            .observe(elapsed.as_secs_f64());
    }

    /// A failed Redis operation: `connection`, `timeout`, `server` or `pool`.
    pub fn redis_error(&self, kind: &str) {
        let kind = interned(kind);
        self.redis_errors.get_or_create(&KindLabel { kind }).inc();
    }

    /// Orders of a sale the hand-off stored (and acknowledged).
    pub fn orders_stored(&self, sku: &str, stored: u64) {
        if stored > 0 {
            self.handoff
                .stored
                .get_or_create(&sku_label(sku))
                .inc_by(stored);
        }
    }

    /// An order of a sale moved to its dead letters.
    pub fn orders_dead_lettered(&self, sku: &str) {
        self.handoff
            .dead_lettered
            .get_or_create(&sku_label(sku))
            .inc();
    }

    /// Orders of a sale that were pending but whose stream entries were gone.
    pub fn orders_lost(&self, sku: &str, lost: u64) {
        self.handoff
            .lost
            .get_or_create(&sku_label(sku))
            .inc_by(lost);
    }

    /// A sale's orders not yet stored, and how old the oldest is.
    pub fn handoff_gauges(&self, sku: &str, pending: u64, lag_ms: u64) {
        let sku = sku_label(sku);
        // The sale's counters exist from its first report, at zero.
        self.handoff.stored.get_or_create(&sku).inc_by(0);
        self.handoff.dead_lettered.get_or_create(&sku).inc_by(0);
        self.handoff.lost.get_or_create(&sku).inc_by(0);
        let pending = i64::try_from(pending).unwrap_or(i64::MAX);
        self.handoff.pending.get_or_create(&sku).set(pending);
        self.handoff
            .lag_seconds
            .get_or_create(&sku)
            .set(lag_ms as f64 / 1000.0);
        self.handoff.reported.store(true, Ordering::Relaxed);
    }

    /// The Prometheus text exposition of everything, with the gauges read
    /// now; the hand-off's series only once a hand-off reported.
    pub fn render(&self, gauges: Gauges) -> String {
        self.now.set(gauges);
        let mut out = String::with_capacity(16 * 1024);
        // Writing to a String cannot fail.
        let _ = prometheus_text::encode(&mut out, &self.registry);
        if self.handoff.reported.load(Ordering::Relaxed) {
            let _ = prometheus_text::encode(&mut out, &self.handoff_registry);
        }
        out
    }
}

fn sku_label(sku: &str) -> SkuLabel {
    SkuLabel {
        sku: sku.to_owned(),
    }
}

/// Now, in whole Unix seconds.
fn unix_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_render_cumulative_buckets_sum_and_count() {
        let metrics = Metrics::default();
        metrics.lock_wait(Duration::from_millis(3));
        metrics.lock_wait(Duration::from_millis(40));
        let text = metrics.render(Gauges {
            waiters: 7,
            streamed_locks: 2,
            watchers: 3,
            queued: 4,
        });
        for series in [
            "lockgate_lock_wait_seconds_bucket{le=\"0.001\"} 0\n",
            "lockgate_lock_wait_seconds_bucket{le=\"0.005\"} 1\n",
            "lockgate_lock_wait_seconds_bucket{le=\"0.05\"} 2\n",
            "lockgate_lock_wait_seconds_bucket{le=\"+Inf\"} 2\n",
            "lockgate_lock_wait_seconds_count 2\n",
            "lockgate_lock_waiters 7\n",
            "lockgate_streamed_locks 2\n",
            "lockgate_lock_watchers 3\n",
            "lockgate_lock_queue_length 4\n",
        ] {
            assert!(text.contains(series), "{series} missing from {text}");
        }
        let sum = text
            .lines()
            .find_map(|line| line.strip_prefix("lockgate_lock_wait_seconds_sum "))
            .and_then(|sum| sum.parse::<f64>().ok());
        assert!(sum.is_some_and(|sum| (sum - 0.043).abs() < 1e-9), "{text}");
    }

    #[test]
    fn labelled_series_count_separately() {
        let metrics = Metrics::default();
        metrics.lock(LockOutcome::Acquired);
        metrics.lock(LockOutcome::Acquired);
        metrics.lock(LockOutcome::Conflict);
        metrics.request("/locks", "POST", 201, Duration::from_millis(1));
        let text = metrics.render(Gauges::default());
        assert!(
            text.contains("# TYPE lockgate_lock_outcomes_total counter\n"),
            "{text}"
        );
        assert!(text.contains("lockgate_lock_outcomes_total{outcome=\"acquired\"} 2\n"));
        assert!(text.contains("lockgate_lock_outcomes_total{outcome=\"conflict\"} 1\n"));
        assert!(text.contains(
            "lockgate_http_request_duration_seconds_count{route=\"/locks\",method=\"POST\",status=\"201\"} 1\n"
        ));
    }

    #[test]
    fn every_known_outcome_and_error_kind_starts_at_zero() {
        let text = Metrics::default().render(Gauges::default());
        for series in [
            "lockgate_lock_outcomes_total{outcome=\"waited\"} 0\n",
            "lockgate_stream_renewals_total{outcome=\"lost\"} 0\n",
            "lockgate_sessions_total{outcome=\"expired\"} 0\n",
            "lockgate_redis_errors_total{kind=\"timeout\"} 0\n",
        ] {
            assert!(text.contains(series), "{series} missing from {text}");
        }
        let metrics = Metrics::default();
        metrics.handoff_gauges("phone", 0, 0);
        let text = metrics.render(Gauges::default());
        assert!(
            text.contains("lockgate_orders_dead_letters_total{sku=\"phone\"} 0\n"),
            "{text}"
        );
    }

    #[test]
    fn the_handoff_series_show_once_a_handoff_reported() {
        let metrics = Metrics::default();
        assert!(
            !metrics
                .render(Gauges::default())
                .contains("lockgate_orders")
        );
        metrics.handoff_gauges("phone", 3, 1500);
        metrics.orders_stored("phone", 2);
        let text = metrics.render(Gauges::default());
        assert!(
            text.contains("lockgate_orders_pending{sku=\"phone\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("lockgate_orders_handoff_lag_seconds{sku=\"phone\"} 1.5\n"),
            "{text}"
        );
        assert!(
            text.contains("lockgate_orders_stored_total{sku=\"phone\"} 2\n"),
            "{text}"
        );
    }
}
