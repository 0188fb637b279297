//! Batches on one Redis (`lua/batch.lua`, `src/locks/batch/at_once.rs`): every lock of a batch taken in one script, or none; without a place in each, a wait in every lock's queue, joined in the same script, and another attempt each time a lock tells the batch's instance it is ready.

use crate::scenario::{Key, Mutant, Req, Tick};
use crate::scripts::Presence;
use crate::state::{Entry, Phase, Refusal, Search, Standing};
use crate::step::{Message, Step};

/// What `batch.lua` answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Batched {
    /// Every lock: `granted`, each lease ending at `ends`.
    Granted { ends: Tick },
    /// Waiting in every lock's queue: `queued`.
    Queued,
    /// No place in some lock and no wait: `held`.
    Held,
}

impl Step<'_> {
    /// `lib/queue.lua` `tell_ready`: a batch's waiter at the head of lock
    /// `key`'s queue, with a place there, is told so on its instance's
    /// grant channel, once (`!<id>`), unless its own script runs.
    pub fn tell_ready(&mut self, key: Key, head: &Entry) {
        let told = self.lock(key).told_ready & head.id.bit() != 0;
        if self.batch == Some(head.id) || told {
            return;
        }
        self.lock_mut(key).told_ready |= head.id.bit();
        let (script, name, on) = (self.script.clone(), self.name(head.id), self.on_key(key));
        self.say(|| format!("redis: {script} tells {name} that{on} is ready for it"));
        self.tell(key, head.inst, head.id, Message::Ready);
        let gateway = self.s.gateway(head.inst.gw);
        if gateway.start != head.inst.start || !gateway.alive() {
            return;
        }
        if let Phase::Waiting { heard, .. } = &mut self.s.request_mut(head.id).phase {
            *heard = true;
        }
    }

    /// `batch.lua`'s `first_here`: the first waiter of the queue that may
    /// be served now (the gone dropped on the way).
    fn first_here(&mut self, key: Key) -> Option<Req> {
        let mut index = 0;
        while let Some(entry) = self.lock(key).queue.get(index).cloned() {
            match self.presence_of(key, &entry) {
                Presence::Here => return Some(entry.id),
                Presence::Away => index += 1,
                Presence::Gone => {
                    let (script, name) = (self.script.clone(), self.name(entry.id));
                    self.say(|| format!("redis: {script} drops {name}"));
                    self.dequeue(key, entry.id);
                }
            }
        }
        None
    }

    /// `batch.lua` for batch `id`: each lock served first; every lock
    /// taken at once when each has a place for it (nobody that may be
    /// served ahead of it, and room); else, when `join`, a wait in every
    /// queue (joined again at the end of all of them when it lost its
    /// place in one), each lock where it is ready marked told.
    pub fn batch_script(&mut self, id: Req, join: bool, wait_left: Tick) -> Batched {
        if self.fixes.is(Mutant::BatchKeyByKey) {
            return self.batch_key_by_key(id, join, wait_left);
        }
        let spec = self.scenario.spec(id).clone();
        let now = self.s.now;
        // The script knows the batch's own entry only by the waiter id it
        // is given, with the wait (a try without one takes its own entry
        // for another's: the gateway never tries while it waits).
        self.batch = join.then_some(id);
        let mut ready: Vec<(Key, bool)> = Vec::new();
        let (mut joined, mut missing) = (0, false);
        for key in spec.keys() {
            let mut ahead = false;
            if !self.lock(key).queue.is_empty() {
                self.serve(key);
                ahead = self
                    .first_here(key)
                    .is_some_and(|first| !join || first != id);
                if join && self.lock(key).queued(id).is_some() {
                    joined += 1;
                } else {
                    missing = true;
                }
            } else {
                missing = true;
            }
            ready.push((key, !ahead && self.admits(key)));
        }
        let ttl = spec.ttl;
        self.batch = None;
        if ready.iter().all(|&(_, ready)| ready) {
            for key in spec.keys() {
                if join && self.lock(key).queued(id).is_some() {
                    self.dequeue(key, id);
                }
                self.grant_place(key, id, ttl, false);
            }
            return Batched::Granted {
                ends: now.saturating_add(ttl),
            };
        }
        if !join || wait_left == 0 {
            return Batched::Held;
        }
        let rejoin = joined > 0 && missing;
        for (key, ready) in ready {
            if rejoin && self.lock(key).queued(id).is_some() {
                self.dequeue(key, id);
            }
            if self.lock(key).queued(id).is_none() {
                let entry = Entry {
                    id,
                    token: id,
                    ticket: 0,
                    inst: self.inst_of(spec.gateway),
                    deadline: now + wait_left,
                    since: now,
                    // A batch is told `ready`, never granted from the queue.
                    one: false,
                };
                self.enqueue(key, entry, None);
            }
            let lock = self.lock_mut(key);
            if ready && !rejoin {
                lock.told_ready |= id.bit();
            } else {
                lock.told_ready &= !id.bit();
            }
        }
        Batched::Queued
    }

    /// The mutant: the batch's locks one at a time, in its own order, each
    /// taken when it has a place (as a single lock's waiter would be),
    /// waiting in the queue of the first it cannot take.
    fn batch_key_by_key(&mut self, id: Req, join: bool, wait_left: Tick) -> Batched {
        let spec = self.scenario.spec(id).clone();
        let now = self.s.now;
        self.batch = Some(id);
        for key in spec.keys() {
            if self.lock(key).place(id).is_some() {
                continue;
            }
            if !self.lock(key).queue.is_empty() {
                self.serve(key);
            }
            let ahead = self.first_here(key).is_some_and(|first| first != id);
            if !ahead && self.admits(key) {
                if self.lock(key).queued(id).is_some() {
                    self.dequeue(key, id);
                }
                self.grant_place(key, id, spec.ttl, false);
                let name = spec.name;
                self.say(|| format!("redis: batch({name}) takes {key} alone"));
                continue;
            }
            self.batch = None;
            if !join || wait_left == 0 {
                return Batched::Held;
            }
            if self.lock(key).queued(id).is_none() {
                let entry = Entry {
                    id,
                    token: id,
                    ticket: 0,
                    inst: self.inst_of(spec.gateway),
                    deadline: now + wait_left,
                    since: now,
                    one: false,
                };
                self.enqueue(key, entry, None);
            }
            self.lock_mut(key).told_ready &= !id.bit();
            return Batched::Queued;
        }
        self.batch = None;
        Batched::Granted {
            ends: now.saturating_add(spec.ttl),
        }
    }

    /// The names of a batch's locks, for the notes (` x y`).
    fn batch_keys(&self, id: Req) -> String {
        self.scenario
            .spec(id)
            .keys()
            .map(|key| format!(" {key}"))
            .collect()
    }

    /// Where a batch's attempt leaves it.
    fn settle_batch(&mut self, id: Req, outcome: Batched, deadline: Tick) {
        let name = self.name(id);
        let request = self.s.request_mut(id);
        match outcome {
            Batched::Granted { ends } => {
                request.phase = Phase::Holding {
                    token: id,
                    until: ends,
                };
                request.granted = true;
                self.say(|| format!("redis: batch({name}) -> granted; {name} answered 201"));
            }
            Batched::Queued => {
                let search = match request.phase {
                    Phase::Waiting { search, .. } => search,
                    _ => Search::Idle { at: 0 },
                };
                request.phase = Phase::Waiting {
                    standing: Standing::Queued,
                    heard: false,
                    deadline,
                    ticket: 0,
                    search,
                };
                request.waited = true;
                self.say(|| format!("redis: batch({name}) -> queued"));
            }
            Batched::Held => self.leave_batch(id, Refusal::Held),
        }
    }

    /// `POST /locks/batch`: the first attempt, and the one that joins the
    /// queues, as one step.
    pub fn send_batch(&mut self, id: Req) {
        let spec = self.scenario.spec(id).clone();
        let keys = self.batch_keys(id);
        self.running(|| format!("batch({}){keys}", spec.name));
        let outcome = self.batch_script(id, spec.wait > 0, spec.wait);
        self.settle_batch(id, outcome, self.s.now + spec.wait);
    }

    /// A lock told the batch it is ready (or its ticket changed): it runs
    /// its script again.
    pub fn retry_batch(&mut self, id: Req) {
        let Phase::Waiting { deadline, .. } = self.s.request(id).phase else {
            return;
        };
        let (name, keys) = (self.name(id), self.batch_keys(id));
        self.running(|| format!("batch({name}){keys}"));
        let outcome = self.batch_script(id, true, deadline.saturating_sub(self.s.now));
        self.settle_batch(id, outcome, deadline);
    }

    /// The batch's wait ends (its deadline, shutdown, or a `held` answer):
    /// it leaves every queue (`leave.lua`, keeping: a batch is never
    /// offered a place) and is refused.
    pub fn leave_batch(&mut self, id: Req, refusal: Refusal) {
        let name = self.name(id);
        // Its answer is decided: it no longer waits while it leaves.
        self.s.request_mut(id).phase = Phase::Refused(refusal);
        for key in self.scenario.spec(id).keys() {
            self.running(|| format!("leave({name}) {key}"));
            self.leave(key, id, id, false);
            // Only the mutant takes a lock while it waits: it gives it back.
            self.release(key, id);
        }
        let status = match refusal {
            Refusal::ShuttingDown => "503 shutting-down",
            _ => "409 lock-held",
        };
        let gw = self.gateway_of(id);
        self.say(|| format!("gateway {gw}: {name} leaves each queue; answered {status}"));
    }

    /// Whether a batch that may be served now waits ahead of waiter `id`
    /// in lock `key`'s queue (it keeps the lock free for itself while it
    /// waits for its other locks: nobody behind it goes first).
    pub fn batch_ahead(&self, key: Key, id: Req) -> bool {
        let queue = &self.lock(key).queue;
        let Some(at) = queue.iter().position(|entry| entry.id == id) else {
            return false;
        };
        queue[..at]
            .iter()
            .any(|entry| self.is_batch(entry.id) && self.presence_of(key, entry) == Presence::Here)
    }
}
