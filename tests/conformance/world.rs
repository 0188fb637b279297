//! What one sequence is about, drawn from its seed: the locks (one or two, plain or counting), the instances (and which take grants outright), the sessions and the 2-4 requests, as the model's scenario; and the names the real side gives each of them.

use std::fmt;
use std::sync::Arc;

use lockgate::redis::locks::{LockKeys, LockKind};
use lockgate::redis::sessions::SessionKeys;
use lockgate_model::scenario::{
    Faults, Gw, Key, Req, RequestSpec, Scenario, Sess, SessionSpec, Tick,
};

use crate::clock::Ticks;

/// A small, fast, seedable generator (SplitMix64): the same seed draws the
/// same sequence everywhere.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// 0 to `n - 1`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// `low` to `high`, both included.
    pub fn between(&mut self, low: u8, high: u8) -> u8 {
        low + self.below(usize::from(high - low) + 1) as u8
    }

    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    /// One of `items` (not empty).
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

const NAMES: [&str; 4] = ["R0", "R1", "R2", "R3"];

/// One sequence's setting, as the model's scenario has it.
pub struct World {
    pub scenario: Scenario,
    /// Every lock's kind: plain, or counting with the scenario's limit.
    pub kind: LockKind,
}

impl World {
    pub fn draw(rng: &mut Rng) -> Self {
        let locks = if rng.chance(50) { 2 } else { 1 };
        let limit: u8 = if rng.chance(25) { 2 } else { 1 };
        let gateways = rng.between(2, 3);
        let sessions: Vec<SessionSpec> = (0..rng.pick(&[0, 0, 1, 2]))
            .map(|_| SessionSpec {
                ttl: rng.between(2, 8),
                lock_delay: rng.pick(&[0, 1, 2, 3]),
                keeper: None,
            })
            .collect();
        let count = rng.between(2, 4);
        let mut requests: Vec<RequestSpec> = Vec::new();
        for index in 0..count {
            let spec = match twin_of(rng, &requests) {
                Some(first) => {
                    let key = requests[first].idempotency_key.unwrap_or(first as u8);
                    requests[first].idempotency_key = Some(key);
                    // The same body under the same key: only the instance differs.
                    let first_gw = requests[first].gateway.0;
                    RequestSpec {
                        name: NAMES[usize::from(index)],
                        gateway: Gw((first_gw + rng.between(1, gateways - 1)) % gateways),
                        ..requests[first].clone()
                    }
                }
                None => fresh(rng, NAMES[usize::from(index)], gateways, locks, &sessions),
            };
            requests.push(spec);
        }
        let kind = match limit {
            1 => LockKind::Exclusive,
            limit => LockKind::Counted(u32::from(limit)),
        };
        // Mostly a fleet in data format 2 (every instance takes a grant
        // outright), some in format 1, some mixed (an instance of each
        // kind, as while a fleet changes format).
        let every = (1u8 << gateways) - 1;
        let two_step = match rng.below(10) {
            0..5 => 0,
            5..7 => every,
            _ => rng.below(usize::from(every) + 1) as u8,
        };
        let scenario = Scenario {
            name: "conformance",
            about: "a differential test's sequence",
            gateways,
            two_step,
            locks,
            limit,
            sessions,
            requests,
            faults: Faults::default(),
            horizon: Tick::MAX,
            in_order: false,
            expect: Vec::new(),
        };
        Self { scenario, kind }
    }

    pub fn ids(&self) -> impl Iterator<Item = Req> + use<> {
        (0..self.scenario.requests.len() as u8).map(Req)
    }

    pub fn keys(&self) -> impl Iterator<Item = Key> + use<> {
        (0..self.scenario.locks).map(Key)
    }

    pub fn spec(&self, id: Req) -> &RequestSpec {
        self.scenario.spec(id)
    }
}

/// Sometimes a retry: the index of an earlier request (one lock, no
/// session) whose body a new request repeats under its Idempotency-Key.
fn twin_of(rng: &mut Rng, requests: &[RequestSpec]) -> Option<usize> {
    let candidates: Vec<usize> = (0..requests.len())
        .filter(|&i| !requests[i].is_batch() && requests[i].session.is_none())
        .collect();
    (!candidates.is_empty() && rng.chance(20)).then(|| rng.pick(&candidates))
}

fn fresh(
    rng: &mut Rng,
    name: &'static str,
    gateways: u8,
    locks: u8,
    sessions: &[SessionSpec],
) -> RequestSpec {
    let gateway = rng.below(usize::from(gateways)) as u8;
    // Waits long enough, often, for a presence to lapse (4 ticks untended)
    // while the wait still stands.
    let wait = if rng.chance(25) {
        0
    } else {
        rng.between(1, 12)
    };
    let ttl = rng.between(1, 6);
    if locks == 2 && rng.chance(20) {
        let first = rng.between(0, 1);
        return RequestSpec::batch(name, gateway, first, 1 - first, wait, ttl);
    }
    let mut spec = if rng.chance(15) {
        RequestSpec::streamed(name, gateway, wait, ttl)
    } else {
        RequestSpec::plain(name, gateway, wait, ttl)
    };
    spec = spec.on(rng.between(0, locks - 1));
    if !sessions.is_empty() && rng.chance(55) {
        spec = spec.in_session(rng.below(sessions.len()) as u8);
    }
    spec
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.scenario;
        let kind = match self.kind {
            LockKind::Counted(limit) => format!("counting ({limit} places)"),
            _ => "plain".to_owned(),
        };
        let two_step: Vec<String> = (0..s.gateways)
            .map(Gw)
            .filter(|&gw| !s.takes_outright(gw))
            .map(|gw| gw.to_string())
            .collect();
        let outright = match two_step.len() {
            0 => "each takes grants outright".to_owned(),
            n if n == usize::from(s.gateways) => "each two-step".to_owned(),
            _ => format!("{} two-step", two_step.join(", ")),
        };
        writeln!(
            f,
            "  {} {kind} lock(s), {} instances ({outright})",
            s.locks, s.gateways
        )?;
        for (index, session) in s.sessions.iter().enumerate() {
            writeln!(
                f,
                "  session {}: ttl {} ticks, lock-delay {}",
                Sess(index as u8),
                session.ttl,
                session.lock_delay
            )?;
        }
        for spec in &s.requests {
            let keys: Vec<String> = spec.keys().map(|key| key.to_string()).collect();
            write!(
                f,
                "  {} on {}: {} wait {} ttl {}",
                spec.name,
                spec.gateway,
                keys.join("+"),
                spec.wait,
                spec.ttl
            )?;
            if spec.streamed {
                write!(f, " streamed")?;
            }
            if let Some(key) = spec.idempotency_key {
                write!(f, " Idempotency-Key K{key}")?;
            }
            if let Some(session) = spec.session {
                write!(f, " in {session}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// What the real side calls each thing: tokens `t<n>`, waiter ids `w<n>`,
/// instances `g<n>`, sessions `s<n>`, Idempotency-Keys `k<n>` (request
/// hash `b<n>`), under a key prefix of the sequence's own.
pub struct Names {
    pub prefix: Arc<str>,
    pub locks: Vec<LockKeys>,
    pub sessions: Vec<SessionKeys>,
}

impl Names {
    pub fn new(prefix: &str, world: &World) -> Self {
        let prefix: Arc<str> = Arc::from(prefix);
        Self {
            locks: world
                .keys()
                .map(|key| LockKeys::new(&prefix, &key.to_string()))
                .collect(),
            sessions: (0..world.scenario.sessions.len())
                .map(|index| SessionKeys::new(&prefix, &handle(Sess(index as u8))))
                .collect(),
            prefix,
        }
    }

    pub fn lock(&self, key: Key) -> &LockKeys {
        &self.locks[usize::from(key.0)]
    }

    pub fn session(&self, session: Sess) -> &SessionKeys {
        &self.sessions[usize::from(session.0)]
    }
}

pub fn token(req: Req) -> String {
    format!("t{}", req.0)
}

pub fn waiter(req: Req) -> String {
    format!("w{}", req.0)
}

pub fn instance(gw: Gw) -> String {
    format!("g{}", gw.0)
}

pub fn handle(session: Sess) -> String {
    format!("s{}", session.0)
}

/// The Idempotency-Key `key` and the hash of the one body sent under it.
pub fn idempotency(key: u8) -> (String, String) {
    (format!("k{key}"), format!("b{key}"))
}

/// What a session's lock records of its session (`<handle> <lock-delay
/// ms>`), its lock-delay counted from a step (see [`Ticks::delay_ms`]).
pub fn session_record(world: &World, ticks: &Ticks, session: Sess) -> String {
    let delay = world.scenario.session(session).lock_delay;
    format!("{} {}", handle(session), ticks.delay_ms(delay))
}

/// The number after a name's letter (`t3` -> 3), if it is one of ours.
pub fn number(name: &str, letter: char) -> Option<u8> {
    name.strip_prefix(letter)?.parse().ok()
}
