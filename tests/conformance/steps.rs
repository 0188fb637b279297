//! The steps a sequence takes (each one script, or time passing) and what each answered, in one shape for both sides; and how the next step is drawn.

use std::fmt;

use lockgate_model::scenario::{AWAY, Gw, Key, PRESENCE, Req, Sess, Tick};
use lockgate_model::state::State;

use crate::clock::At;
use crate::world::{Rng, World};

/// One step: a script a gateway (or the sweep, or an operator) runs, as
/// the gateway runs it, or time passing.
#[derive(Clone, Debug)]
pub enum Action {
    /// `acquire.lua` (`acquire_plain.lua` first for a plain try), after
    /// `session_join.lua` for a session's lock; `batch.lua` for a batch.
    /// `join`: as a waiter that may join the queue.
    Acquire { req: Req, join: bool },
    /// `release.lua` (`release_plain.lua` first), of each of its locks.
    Release { req: Req },
    /// `extend.lua`: the lease becomes `ttl` ticks (a claim, or a renewal).
    Extend { req: Req, ttl: Tick },
    /// `extend.lua` attaching a session's holder to its session.
    Attach { req: Req },
    /// `leave.lua` from each of its locks' queues.
    Leave { req: Req, give_back: bool },
    /// `tend.lua` by instance `gw` on lock `key`: `waiting` when it has
    /// waiters there, reporting the positions of `asked`.
    Tend {
        gw: Gw,
        key: Key,
        waiting: bool,
        asked: Vec<Req>,
    },
    /// `revoke.lua`, every hold.
    Revoke { key: Key },
    /// `inspect.lua`.
    Inspect { key: Key },
    /// The sweep, for an expiry: `session_end.lua`, then, if it ended,
    /// `session_release.lua` of each lock it lists.
    Sweep { session: Sess },
    /// `session_keep.lua`.
    KeepSession { session: Sess },
    /// Time passes: `ticks` whole ticks.
    Wait { ticks: Tick },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = |req: &Req| format!("R{}", req.0);
        match self {
            Action::Acquire { req, join: true } => write!(f, "{} acquires, may wait", r(req)),
            Action::Acquire { req, join: false } => write!(f, "{} tries", r(req)),
            Action::Release { req } => write!(f, "{} releases", r(req)),
            Action::Extend { req, ttl } => write!(f, "{} extends by {ttl}", r(req)),
            Action::Attach { req } => write!(f, "{} attaches to its session", r(req)),
            Action::Leave { req, give_back } => {
                let back = if *give_back { ", giving back" } else { "" };
                write!(f, "{} leaves{back}", r(req))
            }
            Action::Tend {
                gw,
                key,
                waiting,
                asked,
            } => {
                let asked: Vec<String> = asked.iter().map(r).collect();
                write!(
                    f,
                    "{gw} tends {key} (waiting {waiting}, asks [{}])",
                    asked.join(" ")
                )
            }
            Action::Revoke { key } => write!(f, "revoke {key}"),
            Action::Inspect { key } => write!(f, "inspect {key}"),
            Action::Sweep { session } => write!(f, "the sweep ends {session}"),
            Action::KeepSession { session } => write!(f, "keep {session}"),
            Action::Wait { ticks } => write!(f, "{ticks} tick(s) pass"),
        }
    }
}

/// What `leave.lua` answered, of one lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeftAs {
    Left,
    /// Its fence (by order: see `observe::FenceBook`) and lease's end.
    Granted {
        fence: u64,
        ends: At,
    },
    Gone,
    GivenBack,
}

/// What a step answered, in terms both sides share: requests by id, times
/// as ticks, fencing tokens by their order among the lock's (1 is its
/// first grant's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Granted {
        fence: u64,
        ends: At,
    },
    Replayed {
        token: Req,
        fence: u64,
        ends: At,
    },
    /// Waiting, under `token` (its own, or its twin's).
    Queued {
        token: Req,
    },
    Held,
    /// `session_join.lua` answered `not-found`: nothing else ran.
    NoSession,
    BatchGranted {
        fences: Vec<u64>,
        ends: At,
    },
    BatchQueued,
    /// Per lock: whether a place was released.
    Released(Vec<bool>),
    /// Per lock: the lease's new end, or none (no place).
    Extended(Vec<Option<At>>),
    Left(Vec<LeftAs>),
    Tended {
        lapsed: bool,
        positions: Vec<u8>,
        queued: u8,
    },
    /// How many places were taken back.
    Revoked(u8),
    /// How many waiters may be served now.
    Inspected(u8),
    /// The sweep ended the session: its lock-delay's end (while in
    /// force), its locks' tokens, and whether each one's place ended.
    Swept {
        delayed_until: Option<At>,
        locks: Vec<Req>,
        released: Vec<bool>,
    },
    SessionAlive,
    /// Its new expiry, or none (`not-found`).
    SessionKept(Option<At>),
    Waited,
    /// A reply the model has no answer like (a script's error, or a code
    /// it never gives here).
    Unexpected(String),
}

impl Outcome {
    /// Each fencing token in it, with its lock.
    pub fn fences_mut<'a>(&'a mut self, keys: &[Key]) -> Vec<(Key, &'a mut u64)> {
        match self {
            Outcome::Granted { fence, .. } | Outcome::Replayed { fence, .. } => {
                vec![(keys[0], fence)]
            }
            Outcome::BatchGranted { fences, .. } => keys.iter().copied().zip(fences).collect(),
            Outcome::Left(left) => keys
                .iter()
                .copied()
                .zip(left)
                .filter_map(|(key, left)| match left {
                    LeftAs::Granted { fence, .. } => Some((key, fence)),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// The kinds of step, and how often each is drawn.
const WEIGHTS: [(Kind, usize); 11] = [
    (Kind::Acquire, 24),
    (Kind::Release, 11),
    (Kind::Extend, 6),
    (Kind::Attach, 4),
    (Kind::Leave, 8),
    (Kind::Tend, 12),
    (Kind::Revoke, 3),
    (Kind::Inspect, 3),
    (Kind::Sweep, 8),
    (Kind::KeepSession, 2),
    (Kind::Wait, 16),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Acquire,
    Release,
    Extend,
    Attach,
    Leave,
    Tend,
    Revoke,
    Inspect,
    Sweep,
    KeepSession,
    Wait,
}

/// The most ticks a sequence lets pass (a few long waits, past `AWAY`).
pub const MOST_TICKS: Tick = 100;

/// The most steps in one tick: all of them must run within its first
/// quarter (see `clock`).
pub const MOST_IN_A_TICK: usize = 4;

/// Draws the next step, knowing the state (the model's, which the real
/// one has agreed with so far): steps a gateway could take, most of them
/// by a request that can use them (a holder releases, a waiter leaves).
/// `in_tick`: the steps taken in this tick so far; after
/// [`MOST_IN_A_TICK`], time passes.
pub fn draw(rng: &mut Rng, world: &World, state: &State, tokens: &[Req], in_tick: usize) -> Action {
    if in_tick >= MOST_IN_A_TICK && state.now < MOST_TICKS {
        return Action::Wait { ticks: 1 };
    }
    loop {
        if let Some(action) = try_draw(rng, world, state, tokens) {
            return action;
        }
    }
}

fn try_draw(rng: &mut Rng, world: &World, state: &State, tokens: &[Req]) -> Option<Action> {
    let total: usize = WEIGHTS.iter().map(|(_, weight)| weight).sum();
    let mut roll = rng.below(total);
    let kind = WEIGHTS
        .iter()
        .find(|(_, weight)| {
            let hit = roll < *weight;
            roll = roll.saturating_sub(*weight);
            hit
        })
        .map(|(kind, _)| *kind)?;
    let ids: Vec<Req> = world.ids().collect();
    let holds = |id: Req| {
        world.spec(id).keys().any(|key| {
            state
                .redis
                .lock(key)
                .place(tokens[usize::from(id.0)])
                .is_some()
        })
    };
    let queued = |id: Req| {
        world
            .spec(id)
            .keys()
            .any(|key| state.redis.lock(key).queued(id).is_some())
    };
    let attached = |id: Req| {
        world.spec(id).keys().any(|key| {
            state
                .redis
                .lock(key)
                .place(tokens[usize::from(id.0)])
                .is_some_and(|place| place.ends == lockgate_model::scenario::FOREVER)
        })
    };
    let in_session: Vec<Req> = ids
        .iter()
        .copied()
        .filter(|&id| world.spec(id).session.is_some())
        .collect();
    let sessions = world.scenario.sessions.len();
    let key = Key(rng.below(usize::from(world.scenario.locks)) as u8);
    Some(match kind {
        Kind::Acquire => {
            // As the gateway asks: a request tries once, or waits and
            // tries again when its place is gone (no longer queued, not
            // holding); a batch tries again while it waits. A token that
            // holds a place never asks for another (re-entry is not
            // modelled), but a retry under an Idempotency-Key, answered the
            // key's grant again.
            // Often one whose lock another holds, so that it waits and is
            // served from the queue.
            let contended = |id: Req| {
                world.spec(id).keys().any(|key| {
                    let places = &state.redis.lock(key).places;
                    places.iter().any(|p| p.token != tokens[usize::from(id.0)])
                })
            };
            let req = if rng.chance(50) {
                prefer(rng, &ids, contended)
            } else {
                rng.pick(&ids)
            };
            let spec = world.spec(req);
            let join = spec.wait > 0 && rng.chance(85);
            let holding = holds(req) && spec.idempotency_key.is_none();
            let waiting = queued(req) && !(spec.is_batch() && join);
            if holding || waiting {
                return None;
            }
            Action::Acquire { req, join }
        }
        Kind::Release => {
            // Mostly a holder, often one that somebody waits for: its
            // release serves the queue.
            let waited_for = |id: Req| {
                holds(id)
                    && world
                        .spec(id)
                        .keys()
                        .any(|key| !state.redis.lock(key).queue.is_empty())
            };
            let waited = ids.iter().any(|&id| waited_for(id));
            let req = match waited && rng.chance(50) {
                true => prefer(rng, &ids, waited_for),
                false => prefer(rng, &ids, holds),
            };
            Action::Release { req }
        }
        Kind::Extend => {
            let req = prefer(rng, &ids, holds);
            let ttl = if rng.chance(70) {
                world.scenario.ttl_of(req)
            } else {
                rng.between(1, 6)
            };
            Action::Extend { req, ttl }
        }
        Kind::Attach if !in_session.is_empty() => Action::Attach {
            req: prefer(rng, &in_session, |id| holds(id) && !attached(id)),
        },
        Kind::Leave => Action::Leave {
            req: prefer(rng, &ids, queued),
            give_back: rng.chance(50),
        },
        Kind::Tend => {
            let gw = Gw(rng.below(usize::from(world.scenario.gateways)) as u8);
            let asked = ids
                .iter()
                .copied()
                .filter(|&id| {
                    let spec = world.spec(id);
                    spec.gateway == gw && spec.covers(key) && rng.chance(50)
                })
                .collect();
            Action::Tend {
                gw,
                key,
                waiting: rng.chance(85),
                asked,
            }
        }
        Kind::Revoke => Action::Revoke { key },
        Kind::Inspect => Action::Inspect { key },
        Kind::Sweep if sessions > 0 => {
            // Mostly as the sweep does: a session whose expiry has passed.
            let all: Vec<Sess> = (0..sessions as u8).map(Sess).collect();
            let due = |session: Sess| {
                let record = state.redis.session(session);
                record.ended.is_none() && record.expires < state.now
            };
            let session = match all.iter().copied().filter(|&s| due(s)).collect::<Vec<_>>() {
                due if !due.is_empty() && rng.chance(80) => rng.pick(&due),
                _ => rng.pick(&all),
            };
            Action::Sweep { session }
        }
        Kind::KeepSession if sessions > 0 => Action::KeepSession {
            session: Sess(rng.below(sessions) as u8),
        },
        Kind::Wait => {
            let long = PRESENCE + AWAY + 1;
            let ticks = match rng.below(100) {
                0..65 => 1,
                65..94 => rng.between(2, 6),
                _ => long,
            };
            if state.now + ticks > MOST_TICKS {
                return None;
            }
            Action::Wait { ticks }
        }
        _ => return None,
    })
}

/// Mostly one of `items` that `fits`, if any; else any.
fn prefer(rng: &mut Rng, items: &[Req], fits: impl Fn(Req) -> bool) -> Req {
    let fitting: Vec<Req> = items.iter().copied().filter(|&id| fits(id)).collect();
    if !fitting.is_empty() && rng.chance(75) {
        rng.pick(&fitting)
    } else {
        rng.pick(items)
    }
}
