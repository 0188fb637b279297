//! Time for both sides: the model counts ticks, the scripts read the Redis clock (`TIME`) and Redis expires keys by it, so real time passes, a tick of it per model tick.
//!
//! A sequence starts at `start`; model tick k stands for the real instant
//! `start + k * tick`, and every script of tick k runs (and is read) within
//! `window` after it. Each duration given to the scripts (and each of the
//! library's four constants, scaled to the tick) is chosen so that the
//! instant it makes falls in the middle of a tick, never near a boundary
//! where a step of tick k could land on either side of it:
//!
//! * an end (a lease, an offer, a lock-delay: held while `now < end` in
//!   the model) half a tick early: `n * tick - tick / 2`;
//! * a deadline (a wait, a presence, a session's expiry: standing while
//!   `now <= until`) a quarter of a tick late: `n * tick + tick / 4`; the
//!   queue's keys, kept a presence past the last deadline, then expire half
//!   a tick past a tick's start, as an end does;
//! * a freshness (`FRESH_MS`: a presence renewed so lately that its waiter
//!   is granted outright) `FRESH` ticks and a half, as far from a renewal
//!   `FRESH` ticks back as from one a tick before it.
//!
//! So any step of tick k sees what the model sees at tick k, if it runs
//! within a quarter of a tick (less a margin) of the tick's start; one that
//! ran later is measured, and its sequence is inconclusive and run again.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockgate_model::scenario::{AWAY, FRESH, OFFER, PRESENCE, Tick};

/// The lease a session's holder has once attached (`SESSION_LEASE` in
/// `lua/lib/holders.lua`): no end in time, the model's `FOREVER`.
pub const SESSION_LEASE_MS: u64 = 4_503_599_627_370_496;

/// A tick in the model's time, as read from Redis: what an end or a
/// deadline falls on (`i64::MAX` for a session's lease).
pub type At = i64;

/// `FOREVER` (a session's lease) as an [`At`].
pub const FOREVER_AT: At = At::MAX;

fn wall_us() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970");
    since.as_micros() as u64
}

/// One sequence's clock.
#[derive(Clone, Copy, Debug)]
pub struct Ticks {
    tick_ms: u64,
    start_us: u64,
}

impl Ticks {
    /// Tick 0 starts now; `tick_ms` a multiple of 4 (its quarters are whole ms).
    pub fn start(tick_ms: u64) -> Self {
        assert!(
            tick_ms >= 40 && tick_ms.is_multiple_of(4),
            "a tick of {tick_ms} ms"
        );
        Self {
            tick_ms,
            start_us: wall_us(),
        }
    }

    fn tick_start_us(&self, tick: Tick) -> u64 {
        self.start_us + u64::from(tick) * self.tick_ms * 1000
    }

    /// Waits until tick `tick` starts.
    pub async fn reach(&self, tick: Tick) {
        loop {
            let at = self.tick_start_us(tick);
            let now = wall_us();
            if now >= at {
                return;
            }
            tokio::time::sleep(Duration::from_micros(at - now)).await;
        }
    }

    /// How long after a tick's start its scripts may run: a quarter of a
    /// tick, less a margin for the clock's milliseconds and Redis's.
    fn window_us(&self) -> u64 {
        (self.tick_ms / 4).saturating_sub(4) * 1000
    }

    /// Whether a script of tick `tick` that ends now ran too late for the
    /// mapping to hold.
    pub fn late(&self, tick: Tick) -> bool {
        wall_us() > self.tick_start_us(tick) + self.window_us()
    }

    /// Whether a read of tick `tick` that ends now came too late: before
    /// half a tick, where leases, offers, lock-delays and the queue's keys
    /// end, what it reads is what stood at the tick's start.
    pub fn read_late(&self, tick: Tick) -> bool {
        let window = (self.tick_ms / 2).saturating_sub(4) * 1000;
        wall_us() > self.tick_start_us(tick) + window
    }

    /// How far past tick `tick`'s start it is now, in ms (for reports).
    pub fn ms_into(&self, tick: Tick) -> f64 {
        (wall_us() as f64 - self.tick_start_us(tick) as f64) / 1000.0
    }

    /// A lease (or an extension) of `ticks`: it ends half a tick before
    /// tick `now + ticks` starts.
    pub fn lease_ms(&self, ticks: Tick) -> u64 {
        u64::from(ticks) * self.tick_ms - self.tick_ms / 2
    }

    /// A wait of `ticks` (0: no wait): it stands through tick `now + ticks`.
    pub fn wait_ms(&self, ticks: Tick) -> u64 {
        match ticks {
            0 => 0,
            ticks => self.until_ms(ticks),
        }
    }

    /// A session's lease of `ticks`: it is alive through tick `now + ticks`.
    pub fn until_ms(&self, ticks: Tick) -> u64 {
        u64::from(ticks) * self.tick_ms + self.tick_ms / 4
    }

    /// A lock-delay of `ticks` counted from a step (a revocation): no
    /// place is granted before tick `now + ticks`.
    pub fn delay_ms(&self, ticks: Tick) -> u64 {
        match ticks {
            0 => 0,
            ticks => self.lease_ms(ticks),
        }
    }

    /// A lock-delay of `ticks` counted from a session's expiry (a deadline,
    /// a quarter of a tick late): it ends half a tick before tick
    /// `expiry + ticks`, as [`Ticks::delay_ms`]'s does.
    pub fn delay_after_expiry_ms(&self, ticks: Tick) -> u64 {
        match ticks {
            0 => 0,
            ticks => u64::from(ticks) * self.tick_ms - self.tick_ms * 3 / 4,
        }
    }

    fn ticks_of(&self, ms: u64) -> f64 {
        (ms as f64 * 1000.0 - self.start_us as f64) / (self.tick_ms as f64 * 1000.0)
    }

    /// The tick an end (`ms`, Unix) falls on: held before it, gone at it.
    pub fn end_tick(&self, ms: u64) -> At {
        if ms >= SESSION_LEASE_MS {
            return FOREVER_AT;
        }
        self.ticks_of(ms).ceil() as At
    }

    /// The last tick a deadline (`ms`, Unix) stands through.
    pub fn until_tick(&self, ms: u64) -> At {
        self.ticks_of(ms).floor() as At
    }

    /// The tick of a step's own instant (`since`): Redis's milliseconds
    /// are cut, so one at a tick's start may read a hair before it.
    pub fn instant_tick(&self, ms: u64) -> At {
        self.ticks_of(ms + 2).floor() as At
    }

    /// The lock library with its four timing constants scaled to the
    /// tick, as the model's are (`PRESENCE`, `OFFER`, `AWAY`, `FRESH`
    /// ticks): `source` is the library as the gateway loads it, under its
    /// name. A freshness of `FRESH` ticks and a half: a presence renewed
    /// in tick t's first quarter is fresh in every script of tick t +
    /// `FRESH`, and in none of tick t + `FRESH` + 1.
    pub fn scaled_library(&self, source: &str) -> String {
        let presence = self.until_ms(PRESENCE);
        let offer = self.lease_ms(OFFER);
        let away = u64::from(AWAY) * self.tick_ms;
        let fresh = u64::from(FRESH) * self.tick_ms + self.tick_ms / 2;
        let mut scaled = source.to_owned();
        for (name, ms) in [
            ("PRESENCE_MS", presence),
            ("OFFER_MS", offer),
            ("AWAY_MS", away),
            ("FRESH_MS", fresh),
        ] {
            let pattern = format!("local {name} = ");
            let mut found = scaled.match_indices(&pattern);
            let at = match (found.next(), found.next()) {
                (Some((at, _)), None) => at + pattern.len(),
                _ => panic!("`{pattern}` is not in the lock library exactly once"),
            };
            let end = at
                + scaled[at..]
                    .find(|c: char| !c.is_ascii_digit())
                    .expect("a constant ends");
            scaled.replace_range(at..end, &ms.to_string());
        }
        scaled
    }
}

/// A model tick as an [`At`] (`FOREVER` as [`FOREVER_AT`]).
pub fn at(tick: Tick) -> At {
    match tick {
        lockgate_model::scenario::FOREVER => FOREVER_AT,
        tick => At::from(tick),
    }
}
