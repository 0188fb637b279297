//! Deadlock detection (`src/locks/acquire/deadlock.rs`): a session's wait searches, read by read, for a cycle of waits through the holders' sessions, confirms it by a second search, and only the youngest wait of the cycle is refused; and what a real cycle is, for the properties.

use crate::scenario::{Key, Mutant, PRESENCE, Req, Scenario, Sess, Tick};
use crate::state::{Cleanup, Phase, Search, Sighting, State};
use crate::step::Step;

/// The longest cycle followed (`MAX_DEPTH`).
const MAX_DEPTH: usize = 16;

/// How many ticks after a first sighting the second search comes
/// (`CONFIRM_AFTER`, a round and some: 500 ms, rounded up to whole ticks so
/// that every running gateway tends in between).
pub const CONFIRM_TICKS: Tick = 2;

/// One wait of a session (`Wait`): the lock it waits for, since when, as
/// which waiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Wait {
    session: Sess,
    key: Key,
    since: Tick,
    waiter: Req,
}

/// The keys of a cycle, in order, as one number: what the second search
/// compares with the first's.
fn keys_code(path: &[Wait]) -> u8 {
    path.iter()
        .enumerate()
        .fold(path.len() as u8, |code, (i, wait)| {
            code | (wait.key.0 << (4 + i))
        })
}

/// Whether `start` is the youngest wait of `cycle` (ties: the larger waiter id).
fn youngest(start: &Wait, cycle: &[Wait]) -> bool {
    cycle
        .iter()
        .all(|wait| (wait.since, wait.waiter) <= (start.since, start.waiter))
}

fn sessions_in(set: u8) -> impl Iterator<Item = Sess> {
    (0..8u8).filter(move |i| set & (1 << i) != 0).map(Sess)
}

impl Step<'_> {
    /// `holding_sessions`: the sessions holding lock `key` now, read with
    /// `inspect.lua` (whose `live_waiters` drops the gone waiters).
    fn holding_sessions(&mut self, key: Key) -> u8 {
        self.running(|| "inspect".into());
        self.inspect(key);
        holders(self.scenario, self.s, key)
    }

    /// `waits_of`: the waits of `session` that its locks' queues confirm
    /// (an entry with the session whose instance's presence is current by
    /// Redis's clock; before, any entry, present or not). In a second
    /// search, after a sighting at `seen_at`: only those whose presence
    /// was renewed since (`renewed_between`).
    fn waits_of(&self, session: Sess, seen_at: Option<Tick>) -> Vec<Wait> {
        let mut waits = Vec::new();
        for index in 0..self.scenario.locks {
            let key = Key(index);
            let lock = self.lock(key);
            for entry in &lock.queue {
                let here = lock.present(entry.inst, self.s.now);
                let renewed = match seen_at {
                    Some(at) if self.fixes.deadlock_renewed_presence => lock
                        .presence_of(entry.inst)
                        .is_some_and(|until| until > at + PRESENCE),
                    _ => true,
                };
                if self.scenario.spec(entry.id).session == Some(session)
                    && (here || !self.fixes.deadlock_waits_here)
                    && renewed
                {
                    waits.push(Wait {
                        session,
                        key,
                        since: entry.since,
                        waiter: entry.id,
                    });
                }
            }
        }
        waits
    }

    /// `search`: depth first from the wait at the end of `path` (its
    /// lock's holders already read, for the first); true when it comes
    /// back to the start's session.
    fn search_from(
        &mut self,
        start: &Wait,
        path: &mut Vec<Wait>,
        seen: &mut u8,
        holders: Option<u8>,
        seen_at: Option<Tick>,
    ) -> bool {
        if path.len() > MAX_DEPTH {
            return false;
        }
        let last = *path.last().expect("the start");
        let holders = holders.unwrap_or_else(|| self.holding_sessions(last.key));
        if holders & start.session.bit() != 0 && path.len() > 1 {
            return true;
        }
        for holder in sessions_in(holders) {
            if *seen & holder.bit() != 0 {
                continue;
            }
            *seen |= holder.bit();
            for wait in self.waits_of(holder, seen_at) {
                path.push(wait);
                if self.search_from(start, path, seen, None, seen_at) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }

    /// One read of the search from waiter `id`'s wait (`closes_a_cycle`,
    /// `refused`): the start's wait and its lock's holders; then the rest
    /// of the search; a cycle it is the youngest of is searched again
    /// (`CONFIRM_TICKS` later, or within the tick before
    /// `deadlock_renewed_presence`) and, the same, refused.
    pub fn search(&mut self, id: Req) {
        let Phase::Waiting { search, .. } = self.s.request(id).phase else {
            return;
        };
        let (name, key, gw) = (self.name(id), self.key_of(id), self.gateway_of(id));
        let session = self.scenario.spec(id).session.expect("a session's wait");
        let now = self.s.now;
        let next = match search {
            Search::Idle { .. } => match self.lock(key).queued(id).map(|entry| entry.since) {
                None => Search::Idle { at: now + 1 },
                Some(since) => {
                    // A new search: the monitor starts watching for a real
                    // cycle through this wait (`watch_searches`).
                    self.s.request_mut(id).cycle_seen = false;
                    Search::Holders {
                        holders: self.holding_sessions(key),
                        since,
                        confirming: None,
                    }
                }
            },
            Search::Seen { sighting, since } => Search::Holders {
                holders: self.holding_sessions(key),
                since,
                confirming: Some(sighting),
            },
            Search::Holders {
                holders,
                since,
                confirming,
            } => {
                let start = Wait {
                    session,
                    key,
                    since,
                    waiter: id,
                };
                let (mut path, mut seen) = (vec![start], session.bit());
                let seen_at = confirming.map(|sighting| sighting.at);
                let found = self.search_from(&start, &mut path, &mut seen, Some(holders), seen_at)
                    && youngest(&start, &path);
                let keys = keys_code(&path);
                let cycle: String = path.iter().map(|wait| format!(" {}", wait.key)).collect();
                let next = match (found, confirming) {
                    (false, _) => Search::Idle { at: now + 1 },
                    (true, None) if !self.fixes.is(Mutant::DeadlockUnconfirmed) => Search::Seen {
                        sighting: Sighting { keys, at: now },
                        since,
                    },
                    (true, Some(first)) if first.keys != keys => Search::Idle { at: now + 1 },
                    (true, _) => Search::Refusing,
                };
                if found {
                    let what = match next {
                        Search::Refusing => "refuses it",
                        Search::Seen { .. } => "searches again",
                        _ => "a different one: waits on",
                    };
                    self.say(|| {
                        format!("gateway {gw}: {name}'s search finds the cycle{cycle}, {name} the youngest: {what}")
                    });
                }
                next
            }
            Search::Refusing => Search::Refusing,
        };
        if let Phase::Waiting { search, .. } = &mut self.s.request_mut(id).phase {
            *search = next;
        }
    }
}

/// The sessions holding lock `key` (a set).
fn holders(scenario: &Scenario, s: &State, key: Key) -> u8 {
    s.redis
        .lock(key)
        .places
        .iter()
        .filter_map(|place| scenario.spec(place.token).session)
        .fold(0, |set, session| set | session.bit())
}

/// Whether request `id` truly waits for its lock: its client waits (or
/// has just left, its leave on its way), or its gateway died less than a
/// presence ago (Redis cannot know yet); and nothing of the lock was
/// granted to it. `running`: only a wait whose gateway and Redis keep
/// running.
fn truly_waits(scenario: &Scenario, s: &State, id: Req, running: bool) -> bool {
    let spec = scenario.spec(id);
    let request = s.request(id);
    let lock = s.redis.lock(spec.key);
    if spec.session.is_none() || lock.place(request.token).is_some() {
        return false;
    }
    let gateway = s.gateway(spec.gateway);
    match request.phase {
        Phase::Waiting { .. } => !running || (gateway.up() && gateway.steady && s.redis.runs()),
        Phase::Disconnected(Cleanup::Leave) => !running && lock.queued(id).is_some(),
        Phase::Dead => {
            !running
                && lock
                    .queued(id)
                    .is_some_and(|entry| lock.present(entry.inst, s.now))
        }
        _ => false,
    }
}

/// Whether a real cycle of waits runs through request `id`'s: it waits
/// for a lock another session holds, which (through the locks its
/// requests wait for, and their holders) waits for one `id`'s session
/// holds.
pub fn in_cycle(scenario: &Scenario, s: &State, id: Req, running: bool) -> bool {
    if !truly_waits(scenario, s, id, running) {
        return false;
    }
    let spec = scenario.spec(id);
    let start = spec.session.expect("a session's wait").bit();
    let mut seen = start;
    let mut frontier = holders(scenario, s, spec.key) & !start;
    while frontier != 0 {
        seen |= frontier;
        let mut next = 0;
        for other in s.ids() {
            let other_spec = scenario.spec(other);
            let in_frontier = other_spec
                .session
                .is_some_and(|session| frontier & session.bit() != 0);
            if !in_frontier || !truly_waits(scenario, s, other, running) {
                continue;
            }
            let held_by = holders(scenario, s, other_spec.key);
            if held_by & start != 0 {
                return true;
            }
            next |= held_by & !seen;
        }
        frontier = next;
    }
    false
}

/// The monitor of `deadlock-only-cycles`: notes, for each wait searching
/// for a cycle, whether a real one runs through it now.
pub fn watch_searches(scenario: &Scenario, s: &mut State) {
    for id in s.ids() {
        let searching = matches!(
            s.request(id).phase,
            Phase::Waiting { search, .. } if !matches!(search, Search::Idle { .. })
        );
        if searching && !s.request(id).cycle_seen && in_cycle(scenario, s, id, false) {
            s.request_mut(id).cycle_seen = true;
        }
    }
}

/// Whether an answer `deadlock` to `id` now is sound: a real cycle ran
/// through its wait during its search, and it still waits (nothing of
/// its lock granted to it).
pub fn refusal_sound(scenario: &Scenario, s: &State, id: Req) -> bool {
    s.request(id).cycle_seen && truly_waits(scenario, s, id, false)
}

/// Whether some cycle of waits on running gateways stands.
pub fn running_cycle(scenario: &Scenario, s: &State) -> bool {
    s.ids().any(|id| in_cycle(scenario, s, id, true))
}
