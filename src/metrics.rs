//! Prometheus metrics: counters and histograms kept in atomics, rendered as text for `GET /metrics`.
//!
//! One [`Metrics`] per gateway instance (not a global), so several instances
//! in one test process keep their own counts.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sync::lock;
use std::time::Duration;

/// Histogram bucket bounds, in seconds: from half a millisecond (a Redis
/// round trip) to a minute (the longest lock wait).
const BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// A Prometheus histogram (cumulative buckets, sum and count).
#[derive(Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        if let Some(index) = BUCKETS.iter().position(|bound| seconds <= *bound) {
            self.buckets[index].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let separator = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (bound, bucket) in BUCKETS.iter().zip(&self.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{separator}le=\"{bound}\"}} {cumulative}"
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{separator}le=\"+Inf\"}} {count}"
        );
        let braces = |labels: &str| {
            if labels.is_empty() {
                String::new()
            } else {
                format!("{{{labels}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {sum}", braces(labels));
        let _ = writeln!(out, "{name}_count{} {count}", braces(labels));
    }
}

/// Counters keyed by a label value, created on first use.
#[derive(Default)]
struct LabelledCounters(Mutex<BTreeMap<String, u64>>);

impl LabelledCounters {
    fn add(&self, label: &str) {
        self.add_n(label, 1);
    }

    fn add_n(&self, label: &str, n: u64) {
        let mut counters = lock(&self.0);
        match counters.get_mut(label) {
            Some(count) => *count += n,
            None => {
                counters.insert(label.to_owned(), n);
            }
        }
    }

    fn render(&self, out: &mut String, name: &str, help: &str, label: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        let counters = lock(&self.0);
        for (value, count) in counters.iter() {
            let _ = writeln!(out, "{name}{{{label}=\"{value}\"}} {count}");
        }
    }
}

/// Histograms keyed by a label value, created on first use. Looked up by
/// `&str`, so observing allocates only for a new series.
#[derive(Default)]
struct LabelledHistograms(Mutex<BTreeMap<String, Histogram>>);

impl LabelledHistograms {
    fn observe(&self, label: &str, elapsed: Duration) {
        let mut histograms = lock(&self.0);
        match histograms.get(label) {
            Some(histogram) => histogram.observe(elapsed),
            None => histograms
                .entry(label.to_owned())
                .or_default()
                .observe(elapsed),
        }
    }

    /// Renders each series with `labels_of(value)` as its labels.
    fn render(&self, out: &mut String, name: &str, labels_of: impl Fn(&str) -> String) {
        let histograms = lock(&self.0);
        for (value, histogram) in histograms.iter() {
            histogram.render(out, name, &labels_of(value));
        }
    }
}

/// Request histograms by route, then method and status. Looked up by
/// `&str`, so observing allocates only for a new series.
#[derive(Default)]
struct RequestHistograms(Mutex<BTreeMap<String, Answers>>);

/// One route's histograms by method and status.
type Answers = Vec<(String, u16, Histogram)>;

impl RequestHistograms {
    fn observe(&self, route: &str, method: &str, status: u16, elapsed: Duration) {
        let mut routes = lock(&self.0);
        if !routes.contains_key(route) {
            routes.insert(route.to_owned(), Vec::new());
        }
        let Some(answers) = routes.get_mut(route) else {
            return;
        };
        // A route sees a handful of (method, status) pairs: a scan is cheapest.
        match answers
            .iter()
            .find(|(known, code, _)| known == method && *code == status)
        {
            Some((_, _, histogram)) => histogram.observe(elapsed),
            None => {
                let histogram = Histogram::default();
                histogram.observe(elapsed);
                answers.push((method.to_owned(), status, histogram));
            }
        }
    }

    fn render(&self, out: &mut String, name: &str) {
        let routes = lock(&self.0);
        for (route, answers) in routes.iter() {
            for (method, status, histogram) in answers {
                let labels = format!("route=\"{route}\",method=\"{method}\",status=\"{status}\"");
                histogram.render(out, name, &labels);
            }
        }
    }
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
    fn label(self) -> &'static str {
        match self {
            Self::Renewed => "renewed",
            Self::Failed => "failed",
            Self::Lost => "lost",
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

/// Every metric of one gateway instance.
#[derive(Default)]
pub struct Metrics {
    requests: RequestHistograms,
    lock_outcomes: LabelledCounters,
    renewals: LabelledCounters,
    lock_wait: Histogram,
    sale_outcomes: LabelledCounters,
    rate_limited: LabelledCounters,
    redis_commands: LabelledHistograms,
    redis_errors: LabelledCounters,
    lock_events: LabelledCounters,
    orders_stored: LabelledCounters,
    orders_dead_lettered: LabelledCounters,
    orders_lost: LabelledCounters,
    /// Per sale: orders in Redis not yet stored, and the age (ms) of the
    /// oldest, as the hand-off last read them.
    handoff: Mutex<BTreeMap<String, (u64, u64)>>,
}

impl Metrics {
    /// A finished request: its route template (or `unmatched`), method and status.
    pub fn request(&self, route: &str, method: &str, status: u16, elapsed: Duration) {
        self.requests.observe(route, method, status, elapsed);
    }

    pub fn lock(&self, outcome: LockOutcome) {
        self.lock_outcomes.add(outcome.label());
    }

    /// A streamed lock's renewal and what became of it.
    pub fn renewal(&self, outcome: RenewalOutcome) {
        self.renewals.add(outcome.label());
    }

    /// How long a request waited for a lock (granted or not).
    pub fn lock_wait(&self, waited: Duration) {
        self.lock_wait.observe(waited);
    }

    /// An event of a lock watched here, heard once: `acquired`, `released`, ...
    pub fn lock_event(&self, kind: &str) {
        self.lock_events.add(kind);
    }

    /// A purchase's outcome: `created`, `replayed`, `sold_out`, ...
    pub fn sale(&self, outcome: &str) {
        self.sale_outcomes.add(outcome);
    }

    /// A request refused by a rate limit (`user` or `client`).
    pub fn rate_limited(&self, scope: &str) {
        self.rate_limited.add(scope);
    }

    /// A Redis command (or script, by its name) and how long it took.
    pub fn redis_command(&self, operation: &str, elapsed: Duration) {
        self.redis_commands.observe(operation, elapsed);
    }

    /// A failed Redis operation: `connection`, `timeout`, `server` or `pool`.
    pub fn redis_error(&self, kind: &str) {
        self.redis_errors.add(kind);
    }

    /// Orders of a sale the hand-off stored (and acknowledged).
    pub fn orders_stored(&self, sku: &str, stored: u64) {
        if stored > 0 {
            self.orders_stored.add_n(sku, stored);
        }
    }

    /// An order of a sale moved to its dead letters.
    pub fn orders_dead_lettered(&self, sku: &str) {
        self.orders_dead_lettered.add(sku);
    }

    /// Orders of a sale that were pending but whose stream entries were gone.
    pub fn orders_lost(&self, sku: &str, lost: u64) {
        self.orders_lost.add_n(sku, lost);
    }

    /// A sale's orders not yet stored, and how old the oldest is.
    pub fn handoff_gauges(&self, sku: &str, pending: u64, lag_ms: u64) {
        lock(&self.handoff).insert(sku.to_owned(), (pending, lag_ms));
    }

    /// The Prometheus text exposition of everything, with the gauges read now.
    pub fn render(&self, gauges: Gauges) -> String {
        let mut out = String::with_capacity(16 * 1024);
        let _ = writeln!(
            out,
            "# HELP lockgate_http_request_duration_seconds HTTP requests by route, method and status, and how long they took.\n\
             # TYPE lockgate_http_request_duration_seconds histogram"
        );
        self.requests
            .render(&mut out, "lockgate_http_request_duration_seconds");
        self.lock_outcomes.render(
            &mut out,
            "lockgate_lock_outcomes_total",
            "Lock requests by outcome.",
            "outcome",
        );
        let _ = writeln!(
            out,
            "# HELP lockgate_lock_wait_seconds How long lock requests waited for another owner.\n\
             # TYPE lockgate_lock_wait_seconds histogram"
        );
        self.lock_wait
            .render(&mut out, "lockgate_lock_wait_seconds", "");
        let _ = writeln!(
            out,
            "# HELP lockgate_lock_waiters Requests waiting for a lock on this instance now.\n\
             # TYPE lockgate_lock_waiters gauge\nlockgate_lock_waiters {}",
            gauges.waiters
        );
        let _ = writeln!(
            out,
            "# HELP lockgate_streamed_locks Streamed locks held on this instance now.\n\
             # TYPE lockgate_streamed_locks gauge\nlockgate_streamed_locks {}",
            gauges.streamed_locks
        );
        let _ = writeln!(
            out,
            "# HELP lockgate_lock_watchers Watchers of locks open on this instance now.\n\
             # TYPE lockgate_lock_watchers gauge\nlockgate_lock_watchers {}",
            gauges.watchers
        );
        let _ = writeln!(
            out,
            "# HELP lockgate_lock_queue_length Requests waiting in the queues of the locks this instance has waiters on, on every instance.\n\
             # TYPE lockgate_lock_queue_length gauge\nlockgate_lock_queue_length {}",
            gauges.queued
        );
        self.lock_events.render(
            &mut out,
            "lockgate_lock_events_total",
            "Events of the locks watched on this instance, as heard, by event.",
            "event",
        );
        self.renewals.render(
            &mut out,
            "lockgate_stream_renewals_total",
            "Renewals of streamed locks by outcome.",
            "outcome",
        );
        self.sale_outcomes.render(
            &mut out,
            "lockgate_seckill_outcomes_total",
            "Flash-sale purchase requests by outcome.",
            "outcome",
        );
        self.rate_limited.render(
            &mut out,
            "lockgate_rate_limited_total",
            "Requests refused by a rate limit, by scope.",
            "scope",
        );
        let _ = writeln!(
            out,
            "# HELP lockgate_redis_command_duration_seconds Redis commands and scripts by operation, and how long they took.\n\
             # TYPE lockgate_redis_command_duration_seconds histogram"
        );
        self.redis_commands.render(
            &mut out,
            "lockgate_redis_command_duration_seconds",
            |operation| format!("operation=\"{operation}\""),
        );
        self.redis_errors.render(
            &mut out,
            "lockgate_redis_errors_total",
            "Failed Redis operations by kind.",
            "kind",
        );
        self.render_handoff(&mut out);
        out
    }

    /// The order hand-off's metrics (only where a hand-off runs).
    fn render_handoff(&self, out: &mut String) {
        let handoff = lock(&self.handoff);
        if handoff.is_empty() {
            return;
        }
        self.orders_stored.render(
            out,
            "lockgate_orders_stored_total",
            "Orders the hand-off stored in the database, by sale.",
            "sku",
        );
        self.orders_dead_lettered.render(
            out,
            "lockgate_orders_dead_letters_total",
            "Orders moved to a sale's dead-letter stream after their last delivery, by sale.",
            "sku",
        );
        self.orders_lost.render(
            out,
            "lockgate_orders_lost_total",
            "Pending orders whose stream entries were gone before they were stored, by sale.",
            "sku",
        );
        let _ = writeln!(
            out,
            "# HELP lockgate_orders_pending Orders recorded in Redis and not yet stored, by sale.
             # TYPE lockgate_orders_pending gauge"
        );
        for (sku, (pending, _)) in handoff.iter() {
            let _ = writeln!(out, "lockgate_orders_pending{{sku=\"{sku}\"}} {pending}");
        }
        let _ = writeln!(
            out,
            "# HELP lockgate_orders_handoff_lag_seconds Age of a sale's oldest order not yet stored.
             # TYPE lockgate_orders_handoff_lag_seconds gauge"
        );
        for (sku, (_, lag_ms)) in handoff.iter() {
            let _ = writeln!(
                out,
                "lockgate_orders_handoff_lag_seconds{{sku=\"{sku}\"}} {}",
                *lag_ms as f64 / 1000.0
            );
        }
    }
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
        assert!(
            text.contains("lockgate_lock_wait_seconds_bucket{le=\"0.001\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("lockgate_lock_wait_seconds_bucket{le=\"0.005\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("lockgate_lock_wait_seconds_bucket{le=\"0.05\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("lockgate_lock_wait_seconds_bucket{le=\"+Inf\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("lockgate_lock_wait_seconds_sum 0.043\n"),
            "{text}"
        );
        assert!(text.contains("lockgate_lock_waiters 7\n"), "{text}");
        assert!(text.contains("lockgate_streamed_locks 2\n"), "{text}");
        assert!(text.contains("lockgate_lock_watchers 3\n"), "{text}");
        assert!(text.contains("lockgate_lock_queue_length 4\n"), "{text}");
    }

    #[test]
    fn labelled_series_count_separately() {
        let metrics = Metrics::default();
        metrics.lock(LockOutcome::Acquired);
        metrics.lock(LockOutcome::Acquired);
        metrics.lock(LockOutcome::Conflict);
        metrics.request("/locks", "POST", 201, Duration::from_millis(1));
        let text = metrics.render(Gauges::default());
        assert!(text.contains("lockgate_lock_outcomes_total{outcome=\"acquired\"} 2\n"));
        assert!(text.contains("lockgate_lock_outcomes_total{outcome=\"conflict\"} 1\n"));
        assert!(text.contains(
            "lockgate_http_request_duration_seconds_count{route=\"/locks\",method=\"POST\",status=\"201\"} 1\n"
        ));
    }
}
