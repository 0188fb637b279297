//! The lock scripts (`lua/*.lua`, `lua/lib/*.lua`), each an atomic change of one lock's keys at the Redis clock's `now`.
//!
//! Only what decides who holds and who waits is kept: a place's token,
//! fencing token, lease end and whether it is an unclaimed offer; a
//! waiter's ticket, instance and deadline; each instance's presence. The
//! request's lease, kind and Idempotency-Key are read from the scenario.

use crate::scenario::{Gw, OFFER, PRESENCE, Req, Retend, Tick};
use crate::state::{Entry, Phase, Place, Standing};
use crate::step::Step;

/// What `acquire.lua` answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// A new place: `granted`.
    Granted { ends: Tick },
    /// The Idempotency-Key's grant still lives: `replayed` with its token.
    Replayed { token: Req, ends: Tick },
    /// In the queue with this ticket: `queued`.
    Queued { ticket: u8 },
    /// No place and no wait: `held`.
    Held,
}

/// What `leave.lua` answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Left {
    /// It was in the queue and is no longer: `left`.
    Left,
    /// It was granted a place before it left: `granted`.
    Granted,
    /// Neither (passed over, or granted and let go): `gone`.
    Gone,
    /// Granted, and the place was released in the same script (the fixed
    /// shutdown's leave).
    Released,
}

impl Step<'_> {
    /// `lib/queue.lua` `renew_presence`.
    fn renew_presence(&mut self, inst: Gw) {
        let until = self.s.now + PRESENCE;
        self.s.redis.presence[usize::from(inst.0)] = Some(until);
    }

    /// `lib/queue.lua` `dequeue`: the queue's keys (the presences and
    /// `#seq` with them) go with its last waiter.
    fn dequeue(&mut self, id: Req) {
        self.s.redis.queue.retain(|entry| entry.id != id);
        if self.s.redis.queue.is_empty() {
            self.s.redis.presence.iter_mut().for_each(|p| *p = None);
            if !self.fixes.keep_ticket_counter {
                self.s.redis.seq = 0;
            }
        }
    }

    /// Puts `entry` in the queue at its ticket.
    fn insert(&mut self, entry: Entry) {
        let queue = &mut self.s.redis.queue;
        queue.push(entry);
        queue.sort_by_key(|entry| (entry.ticket, entry.id));
    }

    /// `lib/queue.lua` `enqueue`: a new ticket at the end.
    fn enqueue(&mut self, id: Req, inst: Gw, deadline: Tick) -> u8 {
        self.s.redis.seq += 1;
        let ticket = self.s.redis.seq;
        self.insert(Entry {
            id,
            ticket,
            inst,
            deadline,
        });
        self.renew_presence(inst);
        ticket
    }

    /// A dead waiter passed over (its wait is over, or its instance's
    /// presence lapsed).
    fn drop_waiter(&mut self, entry: Entry) {
        let now = self.s.now;
        let expired = entry.deadline < now;
        self.dequeue(entry.id);
        let why = if expired {
            "its wait is over".to_string()
        } else {
            format!("gateway {}'s presence lapsed", entry.inst)
        };
        let (script, name) = (self.script.clone(), self.name(entry.id));
        self.say(|| format!("redis: {script} drops {name} ({why})"));
        if !expired && self.fixes.retend == Retend::DroppedWaiters {
            let dropped = &mut self.s.redis.dropped;
            dropped.push(entry);
            dropped.sort_by_key(|entry| entry.id);
        }
    }

    fn admits(&self) -> bool {
        self.s.redis.places.len() < usize::from(self.scenario.limit)
    }

    /// `lib/queue.lua` `serve`: the free places to the head of the queue,
    /// in order; dead heads are dropped on the way.
    pub fn serve(&mut self) {
        let now = self.s.now;
        while let Some(head) = self.s.redis.queue.first().cloned() {
            if head.deadline < now || !self.s.redis.present(head.inst, now) {
                self.drop_waiter(head);
                continue;
            }
            if !self.admits() {
                return;
            }
            let lease = self.scenario.spec(head.id).ttl.min(OFFER);
            let fence = self.grant_place(head.id, lease, true);
            self.dequeue(head.id);
            let (script, name) = (self.script.clone(), self.name(head.id));
            self.say(|| {
                format!(
                    "redis: {script} offers the place to {name} (fence {fence}, until t={})",
                    now + lease
                )
            });
            self.publish_grant(head.inst, head.id);
        }
    }

    /// The grant message on `<prefix>granted:{key}:<instance>`: heard by
    /// the instance's waiter if its process lives (a paused one reads it
    /// when it resumes).
    fn publish_grant(&mut self, inst: Gw, id: Req) {
        if self.gateway_of(id) != inst || !self.s.gateway(inst).alive() {
            return;
        }
        if let Phase::Waiting { standing, .. } = &mut self.s.request_mut(id).phase {
            *standing = Standing::Granted;
        }
    }

    /// `lib/holders.lua` `grant_place` with `next_fence`; the monitors
    /// look at each grant as it is made.
    fn grant_place(&mut self, token: Req, lease: Tick, offered: bool) -> u16 {
        let fence = self.s.redis.last_fence + 1;
        if self.s.redis.places.iter().any(|place| place.fence >= fence) {
            self.s.broken.fencing = true;
        }
        self.s.redis.last_fence = fence;
        self.watch_grant(token);
        let ends = self.s.now + lease;
        let places = &mut self.s.redis.places;
        places.push(Place {
            token,
            fence,
            ends,
            offered,
        });
        places.sort_by_key(|place| place.token);
        fence
    }

    /// What the monitors check when `token` is granted a place: that no
    /// earlier waiter that kept running still waits, and that the request
    /// has not ended.
    fn watch_grant(&mut self, token: Req) {
        let now = self.s.now;
        let grantee = self.s.request(token).clone();
        if grantee.ended() {
            self.s.broken.granted_after_end = true;
        }
        for other in self.s.ids() {
            let waiter = self.s.request(other);
            let Phase::Waiting {
                standing, deadline, ..
            } = waiter.phase
            else {
                continue;
            };
            let gateway = self.s.gateway(self.gateway_of(other));
            let kept_running = gateway.up() && gateway.steady;
            if other != token
                && kept_running
                && standing != Standing::Granted
                && now < deadline
                && !waiter.forfeited
                && waiter.arrived < grantee.arrived
            {
                self.s.broken.arrival_order = true;
            }
        }
    }

    /// Takes `token`'s place away (release or revocation).
    fn take_place(&mut self, token: Req) {
        self.s.redis.places.retain(|place| place.token != token);
    }

    /// `acquire.lua` for a new holder (never a re-entry): a place, a
    /// replay, the queue (when `join`, with `wait_left` ticks), or `held`.
    pub fn acquire(&mut self, id: Req, join: bool, wait_left: Tick) -> Acquired {
        let spec = self.scenario.spec(id).clone();
        let now = self.s.now;
        if let Some(key) = spec.idempotency_key {
            let scenario = self.scenario;
            let made = self
                .s
                .redis
                .places
                .iter()
                .find(|place| scenario.spec(place.token).idempotency_key == Some(key));
            if let Some(place) = made {
                return Acquired::Replayed {
                    token: place.token,
                    ends: place.ends,
                };
            }
        }
        // A plain lock that is held has no place for anyone: no serving.
        let plain_held = self.scenario.limit == 1 && !self.s.redis.places.is_empty();
        if !self.s.redis.queue.is_empty() && !plain_held {
            self.serve();
        }
        if self.admits() && self.s.redis.queue.is_empty() {
            self.grant_place(id, spec.ttl, false);
            return Acquired::Granted {
                ends: now + spec.ttl,
            };
        }
        if !join || wait_left == 0 {
            return Acquired::Held;
        }
        if let Some(entry) = self.s.redis.queued(id) {
            return Acquired::Queued {
                ticket: entry.ticket,
            };
        }
        let ticket = self.enqueue(id, spec.gateway, now + wait_left);
        Acquired::Queued { ticket }
    }

    /// `release.lua` (every hold): frees the place and serves the queue.
    /// False when the token held nothing.
    pub fn release(&mut self, token: Req) -> bool {
        if self.s.redis.place(token).is_none() {
            return false;
        }
        self.take_place(token);
        if !self.s.redis.queue.is_empty() {
            self.serve();
        }
        true
    }

    /// `extend.lua`: the lease ends `ttl` from now; how a waiter claims
    /// an offered place. The new end, or `None` when the token holds nothing.
    pub fn extend(&mut self, token: Req, ttl: Tick) -> Option<Tick> {
        let ends = self.s.now + ttl;
        let place = self.s.redis.places.iter_mut().find(|p| p.token == token)?;
        place.ends = ends;
        place.offered = false;
        Some(ends)
    }

    /// `leave.lua`; with `release`, the fixed shutdown's leave, which also
    /// gives back a place granted meanwhile.
    pub fn leave(&mut self, id: Req, release: bool) -> Left {
        self.s.redis.dropped.retain(|entry| entry.id != id);
        if self.s.redis.queued(id).is_some() {
            self.dequeue(id);
            if !self.s.redis.queue.is_empty() {
                self.serve();
            }
            return Left::Left;
        }
        if self.s.redis.place(id).is_none() {
            return Left::Gone;
        }
        if !release {
            return Left::Granted;
        }
        self.take_place(id);
        if !self.s.redis.queue.is_empty() {
            self.serve();
        }
        Left::Released
    }

    /// `tend.lua` for instance `inst` naming the waiters of `plan`:
    /// renews its presence, puts back its waiters as the protocol says,
    /// serves the queue, and reports positions to the waiters that ask
    /// (streamed ones): one no longer queued becomes unaccounted.
    pub fn tend(&mut self, inst: Gw, plan: &[(Req, u8, Tick)]) {
        let now = self.s.now;
        if !plan.is_empty() && !self.s.redis.queue.is_empty() {
            self.renew_presence(inst);
        }
        for &(id, ticket, deadline) in plan {
            if deadline < now || self.s.redis.queued(id).is_some() {
                continue;
            }
            let back = match self.fixes.retend {
                Retend::Off => None,
                Retend::LocalWaiters => self.s.redis.place(id).is_none().then_some(Entry {
                    id,
                    ticket,
                    inst,
                    deadline,
                }),
                Retend::DroppedWaiters => {
                    let dropped = &mut self.s.redis.dropped;
                    let at = dropped.iter().position(|entry| entry.id == id);
                    at.map(|at| dropped.remove(at))
                }
            };
            if let Some(entry) = back {
                let (script, name, ticket) = (self.script.clone(), self.name(id), entry.ticket);
                self.say(|| format!("redis: {script} puts {name} back at ticket {ticket}"));
                self.insert(entry);
                self.renew_presence(inst);
            }
        }
        if !self.s.redis.queue.is_empty() {
            self.serve();
        }
        for &(id, _, _) in plan {
            if !self.scenario.spec(id).streamed || self.s.redis.queued(id).is_some() {
                continue;
            }
            if let Phase::Waiting { standing, .. } = &mut self.s.request_mut(id).phase
                && *standing == Standing::Queued
            {
                *standing = Standing::Unaccounted;
            }
        }
    }

    /// `revoke.lua`: every place taken back, the queue served. Streamed
    /// holders hear `revoked` on the release channel and end.
    pub fn revoke(&mut self) {
        let tokens: Vec<Req> = self.s.redis.places.iter().map(|p| p.token).collect();
        for token in tokens {
            self.take_place(token);
        }
        for holder in self.s.ids() {
            let streamed = self.scenario.spec(holder).streamed;
            let alive = self.s.gateway(self.gateway_of(holder)).alive();
            let request = self.s.request_mut(holder);
            if streamed && alive && matches!(request.phase, Phase::Holding { .. }) {
                request.phase = Phase::Finished;
            }
        }
        if !self.s.redis.queue.is_empty() {
            self.serve();
        }
    }

    /// `lib/queue.lua` `live_waiters` (behind `inspect.lua`, `GET`): every
    /// dead waiter is dropped, not only the head.
    pub fn inspect(&mut self) {
        let now = self.s.now;
        let dead: Vec<Entry> = self
            .s
            .redis
            .queue
            .iter()
            .filter(|entry| entry.deadline < now || !self.s.redis.present(entry.inst, now))
            .cloned()
            .collect();
        for entry in dead {
            self.drop_waiter(entry);
        }
    }
}
