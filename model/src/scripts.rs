//! The lock scripts (`lua/*.lua`, `lua/lib/*.lua`), each an atomic change of one lock's keys at the Redis clock's `now`.
//!
//! Only what decides who holds and who waits is kept: a place's token,
//! fencing token, lease end and whether it is an unclaimed offer; a
//! waiter's ticket, token, instance, deadline and arrival; each
//! instance's presence; a lock-delay. The request's lease, kind, session
//! and Idempotency-Key are read from the scenario.

use crate::scenario::{
    AWAY, FOREVER, FRESH, Gw, Inst, Key, Mutant, OFFER, PRESENCE, Req, Retend, Tick,
};
use crate::state::{Entry, Phase, Place, Standing, TendPlan};
use crate::step::{Message, Step};

/// What `acquire.lua` answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// A new place: `granted`.
    Granted { ends: Tick, fence: u16 },
    /// The Idempotency-Key's grant still lives: `replayed` with its token.
    Replayed { token: Req, ends: Tick, fence: u16 },
    /// In the queue with this ticket, granted under `token` (its own, or
    /// the one it shares with a request waiting under its
    /// Idempotency-Key); `heard`: that retry was served in the same
    /// script, and its grant message (an offer, or outright) is heard.
    Queued {
        ticket: u8,
        token: Req,
        heard: Option<Standing>,
    },
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
    /// Granted, and the place was given back in the same script: `given-back`.
    GivenBack,
    /// Granted, and not given back: a twin was told of the grant too, or
    /// has claimed it (`kept`, the rule `Fixes::give_back_alone` checks).
    Kept,
}

/// What `tend.lua` answered (its `free_in_ms` and `restarted` are not
/// modelled).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tended {
    /// The instance's waiters may have lost their places: `lapsed`.
    pub lapsed: bool,
    /// The positions asked, in order (1 is next; 0: not in the queue).
    pub positions: Vec<u8>,
    /// How many wait, on every instance.
    pub queued: u8,
}

/// Where a waiter stands for the queue (`standing` in `lib/queue.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// It may be served now.
    Here,
    /// Its instance is away (less than `AWAY_MS`): passed over, it keeps its place.
    Away,
    /// Its wait is over, or its instance has been away too long: dropped.
    Gone,
}

impl Step<'_> {
    /// `lib/queue.lua` `renew_presence`.
    fn renew_presence(&mut self, key: Key, inst: Inst) {
        let until = self.s.now + PRESENCE;
        *self.lock_mut(key).presence_mut(inst) = Some(until);
    }

    /// Gateway `gw`'s instance id now.
    pub fn inst_of(&self, gw: Gw) -> Inst {
        Inst {
            gw,
            start: self.s.gateway(gw).start,
        }
    }

    /// `lib/queue.lua` `dequeue`: the queue's keys (the presences, `#seq`,
    /// the `~<idem>` lists) go with its last waiter.
    pub fn dequeue(&mut self, key: Key, id: Req) {
        let lock = self.lock_mut(key);
        lock.queue.retain(|entry| entry.id != id);
        lock.told_ready &= !id.bit();
        if lock.queue.is_empty() {
            self.drop_queue(key);
        }
    }

    /// The queue's keys are gone (deleted with the last waiter, or
    /// expired): the waiters, presences, `#seq`, the `!<id>` marks.
    fn drop_queue(&mut self, key: Key) {
        let keep_counter = self.fixes.keep_ticket_counter;
        let lock = self.lock_mut(key);
        lock.queue.clear();
        lock.told_ready = 0;
        lock.kept_until = 0;
        lock.presence.iter_mut().for_each(|p| *p = [None; _]);
        if !keep_counter {
            lock.seq = 0;
        }
    }

    /// Redis expires the queue's keys of lock `key` once no waiter's wait
    /// that joined since they were made can still stand (a presence past
    /// the latest deadline: `enqueue`'s `PEXPIRE`), whoever is still in it.
    pub fn expire_queue(&mut self, key: Key) {
        let lock = self.lock(key);
        if lock.queue.is_empty() || self.s.now <= lock.kept_until {
            return;
        }
        let on = self.on_key(key);
        self.say(|| format!("redis: the queue's keys{on} expire"));
        self.drop_queue(key);
    }

    /// Puts `entry` in the queue at its ticket.
    fn insert(&mut self, key: Key, entry: Entry) {
        let queue = &mut self.lock_mut(key).queue;
        queue.push(entry);
        queue.sort_by_key(|entry| (entry.ticket, entry.id));
    }

    /// `lib/queue.lua` `enqueue`: at `ticket` (a retry's twin's) or a new
    /// one at the end; the instance's presence renewed.
    pub fn enqueue(&mut self, key: Key, mut entry: Entry, ticket: Option<u8>) -> u8 {
        let ticket = ticket.unwrap_or_else(|| {
            let lock = self.lock_mut(key);
            lock.seq += 1;
            lock.seq
        });
        entry.ticket = ticket;
        let (inst, kept) = (entry.inst, entry.deadline.saturating_add(PRESENCE));
        self.insert(key, entry);
        self.renew_presence(key, inst);
        let lock = self.lock_mut(key);
        lock.kept_until = lock.kept_until.max(kept);
        ticket
    }

    /// `lib/queue.lua` `standing`.
    pub fn presence_of(&self, key: Key, entry: &Entry) -> Presence {
        let now = self.s.now;
        if entry.deadline < now {
            return Presence::Gone;
        }
        match self.lock(key).presence_of(entry.inst) {
            Some(until) if until >= now => Presence::Here,
            Some(until)
                if self.fixes.away_keeps_place
                    && u16::from(until) + u16::from(AWAY) >= u16::from(now) =>
            {
                Presence::Away
            }
            _ => Presence::Gone,
        }
    }

    /// A waiter dropped from the queue: its wait is over, or its instance
    /// is taken for gone.
    fn drop_waiter(&mut self, key: Key, entry: Entry) {
        let expired = entry.deadline < self.s.now;
        self.dequeue(key, entry.id);
        let why = if expired {
            "its wait is over".to_string()
        } else if self.fixes.away_keeps_place {
            format!("gateway {} away over 10 s", entry.inst)
        } else {
            format!("gateway {}'s presence lapsed", entry.inst)
        };
        let (script, name) = (self.script.clone(), self.name(entry.id));
        self.say(|| format!("redis: {script} drops {name} ({why})"));
    }

    /// Whether a place of lock `key` is free for a new holder: room, and
    /// no lock-delay (`admits` with `held`).
    pub fn admits(&self, key: Key) -> bool {
        let lock = self.lock(key);
        lock.places.len() < usize::from(self.scenario.limit) && !lock.delayed(self.s.now)
    }

    fn idem_of(&self, id: Req) -> Option<u8> {
        self.scenario.spec(id).idempotency_key
    }

    /// `lib/queue.lua` `serve`: the free places to the waiters at the head
    /// of the queue, in order, passing over those whose instance is away
    /// and dropping the gone. True when a waiter that may be served now
    /// still waits (no newcomer may take a place before it).
    pub fn serve(&mut self, key: Key) -> bool {
        let mut index = 0;
        while let Some(head) = self.lock(key).queue.get(index).cloned() {
            match self.presence_of(key, &head) {
                Presence::Gone => self.drop_waiter(key, head),
                Presence::Away => index += 1,
                Presence::Here => {
                    if !self.admits(key) {
                        return true;
                    }
                    if self.is_batch(head.id) {
                        self.tell_ready(key, &head);
                        return true;
                    }
                    let outright = self.outright(key, &head);
                    self.hand_off(key, head, outright);
                    index = 0;
                }
            }
        }
        false
    }

    /// Whether `serve` grants `head` (that may be served) its place
    /// outright: its entry has `one` and its instance's presence is fresh
    /// (the mutant: whatever its presence's age).
    fn outright(&self, key: Key, head: &Entry) -> bool {
        let fresh =
            self.fixes.is(Mutant::OutrightStale) || self.lock(key).fresh(head.inst, self.s.now);
        self.fixes.one_write_handoff && head.one && fresh
    }

    /// `lib/queue.lua` `offer`, or (`outright`) the grant of `head`'s
    /// whole lease at once: a place for `head` and for the requests
    /// waiting under its Idempotency-Key (which share its token), each
    /// told on its instance's grant channel (with the `outright` word when
    /// the grant is and its own entry has `one`) and taken out of the queue.
    fn hand_off(&mut self, key: Key, head: Entry, outright: bool) {
        let now = self.s.now;
        let ttl = self.scenario.ttl_of(head.id);
        let lease = if outright { ttl } else { ttl.min(OFFER) };
        let fence = self.grant_place(key, head.token, lease, !outright);
        if outright {
            self.watch_outright(head.id);
        }
        let twins: Vec<Entry> = match self.idem_of(head.id) {
            Some(idem) if self.fixes.idempotency_twins => self
                .lock(key)
                .queue
                .iter()
                .filter(|entry| entry.id != head.id && self.idem_of(entry.id) == Some(idem))
                .cloned()
                .collect(),
            _ => Vec::new(),
        };
        let (script, name) = (self.script.clone(), self.name(head.id));
        let also: String = twins
            .iter()
            .map(|twin| format!(" and its twin {}", self.name(twin.id)))
            .collect();
        let ends = now.saturating_add(lease);
        self.say(|| {
            let (how, until) = match outright {
                true => ("grants", " outright"),
                false => ("offers", ""),
            };
            format!(
                "redis: {script} {how} the place to {name}{also}{until} (fence {fence}, until t={ends})"
            )
        });
        if let Some(place) = self
            .lock_mut(key)
            .places
            .iter_mut()
            .find(|place| place.token == head.token)
        {
            place.told = 1 + twins.len() as u8;
        }
        let told = |entry: &Entry| (outright && entry.one).then_some((fence, ends));
        for twin in twins {
            self.publish_grant(key, twin.inst, twin.id, told(&twin));
            self.dequeue(key, twin.id);
        }
        self.publish_grant(key, head.inst, head.id, told(&head));
        self.dequeue(key, head.id);
    }

    /// The grant message on `<prefix>granted:{key}:<instance>` (with the
    /// `outright` word, its fencing token and lease's end, when `outright`):
    /// heard by the instance's waiter if its process lives (a paused one
    /// reads it when it resumes).
    fn publish_grant(&mut self, key: Key, inst: Inst, id: Req, outright: Option<(u16, Tick)>) {
        let message = match outright {
            Some(_) => Message::Outright,
            None => Message::Offered,
        };
        self.tell(key, inst, id, message);
        let gateway = self.s.gateway(inst.gw);
        if self.gateway_of(id) != inst.gw || gateway.start != inst.start || !gateway.alive() {
            return;
        }
        if let Phase::Waiting {
            standing, heard, ..
        } = &mut self.s.request_mut(id).phase
        {
            *standing = match outright {
                Some((fence, ends)) => Standing::Outright { fence, ends },
                None => Standing::Granted,
            };
            *heard = true;
        }
    }

    /// `lib/holders.lua` `grant_place` with `next_fence`; the monitors
    /// look at each grant as it is made.
    pub fn grant_place(&mut self, key: Key, token: Req, lease: Tick, offered: bool) -> u16 {
        let lock = self.lock(key);
        let fence = lock.last_fence + 1;
        if lock.places.iter().any(|place| place.fence >= fence) {
            self.s.broken.fencing = true;
        }
        self.watch_grant(key, token, offered);
        let ends = self.s.now.saturating_add(lease);
        let lock = self.lock_mut(key);
        lock.last_fence = fence;
        lock.places.push(Place {
            token,
            fence,
            ends,
            offered,
            told: u8::from(offered),
        });
        lock.places.sort_by_key(|place| place.token);
        fence
    }

    /// What the monitors check when `token` is granted a place of lock
    /// `key`: that no earlier waiter for it that kept running still waits,
    /// that the requests acting with the token have not all ended, that no
    /// lock-delay is owed, and that an offer goes to a waiter Redis could
    /// not yet know dead.
    fn watch_grant(&mut self, key: Key, token: Req, offered: bool) {
        let now = self.s.now;
        let s = &*self.s;
        let sharing: Vec<Req> = s.sharing(token).collect();
        let all =
            |test: &dyn Fn(Req) -> bool| !sharing.is_empty() && sharing.iter().all(|&id| test(id));
        let all_ended = all(&|id| s.request(id).ended());
        let all_dead_long = all(&|id| {
            let request = s.request(id);
            request.phase == Phase::Dead && request.died_at + PRESENCE < now
        });
        let owed = s.delay_owed[usize::from(key.0)];
        let grantee_arrived = s.request(token).arrived;
        let mut out_of_order = false;
        for other in s.ids() {
            let waiter = s.request(other);
            let Phase::Waiting {
                standing, deadline, ..
            } = waiter.phase
            else {
                continue;
            };
            let gateway = s.gateway(self.gateway_of(other));
            let kept_running = gateway.up() && gateway.steady;
            if waiter.token != token
                && self.leaving != Some(other)
                && self.covers(other, key)
                && kept_running
                && (!standing.granted() || waiter.robbed)
                && now < deadline
                && !waiter.forfeited
                && waiter.arrived < grantee_arrived
            {
                out_of_order = true;
            }
        }
        let broken = &mut self.s.broken;
        broken.granted_after_end |= all_ended;
        broken.offered_to_dead |= offered && all_dead_long;
        broken.lock_delay |= now < owed;
        broken.arrival_order |= out_of_order;
    }

    /// What the monitors check when waiter `id` is granted its place
    /// outright: that its gateway was alive `FRESH` before (Redis renews no
    /// presence for a dead one).
    fn watch_outright(&mut self, id: Req) {
        let request = self.s.request(id);
        if request.phase == Phase::Dead && request.died_at + FRESH < self.s.now {
            self.s.broken.outright_to_dead = true;
        }
    }

    /// What the monitors check when waiter `id` gives back the place of
    /// `token`: that no other request was answered the grant (or is being
    /// attached to it); a twin that heard it and has yet to claim it loses
    /// it through no lapse of its own (`robbed`: arrival order still
    /// speaks for it).
    fn watch_give_back(&mut self, id: Req, token: Req) {
        for other in self.s.ids() {
            if other == id || self.s.request(other).token != token {
                continue;
            }
            let request = self.s.request_mut(other);
            match request.phase {
                Phase::Holding { token: held, .. } if held == token => {
                    self.s.broken.grant_taken = true;
                }
                Phase::Attaching => self.s.broken.grant_taken = true,
                Phase::Waiting { .. } => request.robbed = true,
                _ => {}
            }
        }
    }

    /// Takes `token`'s place of lock `key` away (release, revocation, a
    /// session's end).
    fn take_place(&mut self, key: Key, token: Req) {
        self.lock_mut(key)
            .places
            .retain(|place| place.token != token);
    }

    /// `lib/holders.lua` `delay_until`: no place is granted before `until`.
    fn delay_until(&mut self, key: Key, until: Tick) {
        if until <= self.s.now || self.fixes.is(Mutant::NoLockDelay) {
            return;
        }
        self.lock_mut(key).delayed_until = until;
        let (script, now) = (self.script.clone(), self.s.now);
        self.say(|| {
            format!(
                "redis: {script} keeps the lock delayed until t={until} ({} ms)",
                u32::from(until - now) * crate::scenario::TICK_MS
            )
        });
    }

    /// `acquire.lua` for a new holder (never a re-entry) of lock `key`
    /// acting with `token`: a place, a replay, a wait as a twin of a
    /// request under the same Idempotency-Key, the queue (when `join`,
    /// with `wait_left` ticks), or `held`.
    pub fn acquire(
        &mut self,
        key: Key,
        id: Req,
        token: Req,
        join: bool,
        wait_left: Tick,
    ) -> Acquired {
        let spec = self.scenario.spec(id).clone();
        let now = self.s.now;
        let entry = Entry {
            id,
            token,
            ticket: 0,
            inst: self.inst_of(spec.gateway),
            deadline: now + wait_left,
            since: now,
            one: self.fixes.one_write_handoff && self.scenario.takes_outright(spec.gateway),
        };
        if let Some(idem) = spec.idempotency_key {
            let made = self
                .lock(key)
                .places
                .iter()
                .find(|place| self.idem_of(place.token) == Some(idem));
            if let Some(place) = made {
                return Acquired::Replayed {
                    token: place.token,
                    ends: place.ends,
                    fence: place.fence,
                };
            }
            // A retry of a request that still waits under the same key
            // waits with it (its ticket, its token).
            let first = self
                .lock(key)
                .queue
                .iter()
                .find(|entry| self.idem_of(entry.id) == Some(idem))
                .cloned();
            if let (Some(first), true) = (first, self.fixes.idempotency_twins) {
                if !join || wait_left == 0 {
                    return Acquired::Held;
                }
                if self.lock(key).queued(id).is_none() {
                    // Its own `one`, not the first request's.
                    let twin = Entry {
                        token: first.token,
                        ..entry
                    };
                    self.enqueue(key, twin, Some(first.ticket));
                    self.serve(key);
                }
                let heard = match self.lock(key).place(first.token) {
                    _ if self.lock(key).queued(id).is_some() => None,
                    Some(place) if !place.offered && entry.one => Some(Standing::Outright {
                        fence: place.fence,
                        ends: place.ends,
                    }),
                    _ => Some(Standing::Granted),
                };
                return Acquired::Queued {
                    ticket: first.ticket,
                    token: first.token,
                    heard,
                };
            }
        }
        // A plain lock that is held has no place for anyone: no serving.
        let plain_held = self.scenario.limit == 1 && !self.lock(key).places.is_empty();
        let mut waits = false;
        if !self.lock(key).queue.is_empty() && !plain_held {
            waits = self.serve(key);
        }
        if self.admits(key) && !waits {
            let ttl = self.scenario.ttl_of(id);
            let fence = self.grant_place(key, token, ttl, false);
            return Acquired::Granted {
                ends: now.saturating_add(ttl),
                fence,
            };
        }
        if !join || wait_left == 0 {
            return Acquired::Held;
        }
        if let Some(queued) = self.lock(key).queued(id) {
            return Acquired::Queued {
                ticket: queued.ticket,
                token,
                heard: None,
            };
        }
        let ticket = self.enqueue(key, entry, None);
        Acquired::Queued {
            ticket,
            token,
            heard: None,
        }
    }

    /// `release.lua` (every hold): frees the place and serves the queue.
    /// False when the token held nothing.
    pub fn release(&mut self, key: Key, token: Req) -> bool {
        if self.lock(key).place(token).is_none() {
            return false;
        }
        self.take_place(key, token);
        if let Some(session) = self.scenario.spec(token).session {
            // The session forgets it (`Sessions::forget`).
            self.s.redis.session_mut(session).locks &= !token.bit();
        }
        if !self.lock(key).queue.is_empty() {
            self.serve(key);
        }
        true
    }

    /// `extend.lua`: the lease ends `ttl` from now (a session's holder's
    /// only lengthens); how a waiter claims an offered place. The new end,
    /// or `None` when the token holds nothing.
    pub fn extend(&mut self, key: Key, token: Req, ttl: Tick) -> Option<Tick> {
        let now = self.s.now;
        let in_session = self.scenario.spec(token).session.is_some();
        let place = self
            .lock_mut(key)
            .places
            .iter_mut()
            .find(|p| p.token == token)?;
        let ends = now.saturating_add(ttl);
        place.ends = if in_session {
            place.ends.max(ends)
        } else {
            ends
        };
        place.offered = false;
        place.told = 0;
        Some(place.ends)
    }

    /// `extend.lua` with attach: a session's holder's lease becomes its
    /// session's (`SESSION_LEASE`). False when the token holds nothing.
    pub fn attach_place(&mut self, key: Key, token: Req) -> bool {
        match self
            .lock_mut(key)
            .places
            .iter_mut()
            .find(|p| p.token == token)
        {
            Some(place) => {
                place.ends = FOREVER;
                place.offered = false;
                place.told = 0;
                true
            }
            None => false,
        }
    }

    /// `leave.lua` for waiter `id` acting with `token`; with `give_back`,
    /// a place it was granted meanwhile goes on in the same step.
    pub fn leave(&mut self, key: Key, id: Req, token: Req, give_back: bool) -> Left {
        if self.lock(key).queued(id).is_some() {
            self.dequeue(key, id);
            if !self.lock(key).queue.is_empty() {
                self.leaving = Some(id);
                self.serve(key);
                self.leaving = None;
            }
            return Left::Left;
        }
        if self.lock(key).place(token).is_none() {
            return Left::Gone;
        }
        if !give_back {
            return Left::Granted;
        }
        if self.fixes.give_back_alone {
            let place = self
                .lock_mut(key)
                .places
                .iter_mut()
                .find(|place| place.token == token)
                .expect("its place");
            // Only a grant from the queue nobody claimed, and no twin
            // told of it that has yet to leave (one told outright answers
            // its client without a write).
            if place.told != 1 {
                place.told = place.told.saturating_sub(1);
                return Left::Kept;
            }
        }
        self.watch_give_back(id, token);
        self.take_place(key, token);
        if !self.lock(key).queue.is_empty() {
            self.serve(key);
        }
        Left::GivenBack
    }

    /// `tend.lua` on lock `key` for instance `inst`, whose waiters there
    /// `plan` names: renews its presence (and tells whether it had
    /// `lapsed`), puts back its waiters as the protocol says, serves the
    /// queue, and reports positions to the waiters asked (one no longer
    /// queued becomes unaccounted: `Room::tended`). A lapsed tend that
    /// asked fewer than all has every position asked at once.
    pub fn tend(&mut self, key: Key, inst: Gw, plan: &TendPlan) {
        let now = self.s.now;
        let waiters: Vec<(Req, u8, Tick)> = plan
            .waiters
            .iter()
            .copied()
            .filter(|&(id, _, _)| self.covers(id, key))
            .collect();
        let lapsed = self.tend_presence(key, inst, !waiters.is_empty());
        if self.fixes.retend == Retend::LocalWaiters {
            for &(id, ticket, deadline) in &waiters {
                let lock = self.lock(key);
                if deadline < now || lock.queued(id).is_some() || lock.place(id).is_some() {
                    continue;
                }
                let (script, name) = (self.script.clone(), self.name(id));
                self.say(|| format!("redis: {script} puts {name} back at ticket {ticket}"));
                let entry = Entry {
                    id,
                    token: id,
                    ticket,
                    inst: self.inst_of(inst),
                    deadline,
                    since: now,
                    one: false,
                };
                self.insert(key, entry);
                self.renew_presence(key, self.inst_of(inst));
            }
        }
        if !self.lock(key).queue.is_empty() {
            self.serve(key);
        }
        let mut asked = 0;
        for &(id, _, _) in &waiters {
            if plan.asked & id.bit() == 0 {
                continue;
            }
            asked += 1;
            if self.lock(key).queued(id).is_some() {
                continue;
            }
            if let Phase::Waiting {
                standing, heard, ..
            } = &mut self.s.request_mut(id).phase
                && *standing == Standing::Queued
            {
                *standing = Standing::Unaccounted;
                *heard = true;
            }
        }
        if self.fixes.check_when_lapsed && lapsed && asked < waiters.len() {
            let (script, on) = (self.script.clone(), self.on_key(key));
            self.say(|| format!("redis: {script}{on} -> lapsed: every waiter's position is asked"));
            let gateway = self.s.gateway_mut(inst);
            gateway.check_all |= 1 << key.0;
            gateway.tend_soon = true;
        }
    }

    /// `tend.lua`'s first part: when instance `inst` has waiters on lock
    /// `key` (`waiting`), its presence is renewed if the queue exists;
    /// whether it had `lapsed` (the queue gone, or its presence missing
    /// or lapsed longer than `AWAY_MS`).
    fn tend_presence(&mut self, key: Key, inst: Gw, waiting: bool) -> bool {
        if !waiting {
            return false;
        }
        if self.lock(key).queue.is_empty() {
            return true;
        }
        let now = self.s.now;
        let presence = self.lock(key).presence_of(self.inst_of(inst));
        let lapsed =
            presence.is_none_or(|until| u16::from(until) + u16::from(AWAY) < u16::from(now));
        self.renew_presence(key, self.inst_of(inst));
        lapsed
    }

    /// `tend.lua` alone, as Redis runs it (what [`Step::tend`] does to the
    /// lock, without the gateway's side): instance `inst`'s presence
    /// renewed when it has waiters on lock `key` (`waiting`), the queue
    /// served, and the positions of the waiters `asked` (1 is next, 0 for
    /// one not in the queue).
    pub fn tend_script(&mut self, key: Key, inst: Gw, waiting: bool, asked: &[Req]) -> Tended {
        let lapsed = self.tend_presence(key, inst, waiting);
        if !self.lock(key).queue.is_empty() {
            self.serve(key);
        }
        let queue = &self.lock(key).queue;
        let positions = asked
            .iter()
            .map(|&id| {
                queue
                    .iter()
                    .position(|entry| entry.id == id)
                    .map_or(0, |at| at as u8 + 1)
            })
            .collect();
        Tended {
            lapsed,
            positions,
            queued: queue.len() as u8,
        }
    }

    /// `revoke.lua`: every place of lock `key` taken back (a session's
    /// keeps its session's lock-delay), the queue served; nothing when
    /// nobody holds it. Streamed holders hear `revoked` on the release
    /// channel and end.
    pub fn revoke(&mut self, key: Key) {
        let now = self.s.now;
        let tokens: Vec<Req> = self.lock(key).places.iter().map(|p| p.token).collect();
        if tokens.is_empty() {
            // `not-found`, before serving anyone.
            return;
        }
        for &token in &tokens {
            self.take_place(key, token);
            if let Some(session) = self.scenario.spec(token).session {
                let delay = self.scenario.session(session).lock_delay;
                let owed = &mut self.s.delay_owed[usize::from(key.0)];
                *owed = (*owed).max(now.saturating_add(delay));
                self.delay_until(key, now.saturating_add(delay));
            }
        }
        for holder in self.s.ids() {
            let streamed = self.scenario.spec(holder).streamed;
            let alive = self.s.gateway(self.gateway_of(holder)).alive();
            let request = self.s.request_mut(holder);
            if let Phase::Holding { token, .. } = request.phase
                && streamed
                && alive
                && tokens.contains(&token)
            {
                request.phase = Phase::Finished;
            }
        }
        if !self.lock(key).queue.is_empty() {
            self.serve(key);
        }
    }

    /// `lib/queue.lua` `live_waiters` (behind `inspect.lua`, `GET`): every
    /// gone waiter is dropped, not only the head.
    pub fn inspect(&mut self, key: Key) {
        let gone: Vec<Entry> = self
            .lock(key)
            .queue
            .iter()
            .filter(|entry| self.presence_of(key, entry) == Presence::Gone)
            .cloned()
            .collect();
        for entry in gone {
            self.drop_waiter(key, entry);
        }
    }

    /// `session_release.lua`: a session that expired ends its holder's
    /// place of lock `key` (`token`), keeps the lock delayed until
    /// `delayed_until`, and serves the queue. False when the token held
    /// nothing (`gone`).
    pub fn session_release(&mut self, key: Key, token: Req, delayed_until: Tick) -> bool {
        if self.lock(key).place(token).is_none() {
            return false;
        }
        if let Some(session) = self.scenario.spec(token).session {
            // The monitors: a lock its client holds is not freed while its
            // session lives, and after it the lock-delay is owed.
            let now = self.s.now;
            let expires = self.s.redis.session(session).expires;
            let answered = self
                .s
                .requests
                .iter()
                .any(|r| matches!(r.phase, Phase::Holding { token: t, .. } if t == token));
            if answered && now <= expires {
                self.s.broken.freed_before_expiry = true;
            }
            let delay = self.scenario.session(session).lock_delay;
            let owed = &mut self.s.delay_owed[usize::from(key.0)];
            *owed = (*owed).max(expires.saturating_add(delay));
        }
        self.take_place(key, token);
        self.delay_until(key, delayed_until);
        if !self.lock(key).queue.is_empty() {
            self.serve(key);
        }
        true
    }
}
