//! The gateway's side of a request (`src/locks/acquire/`, `src/locks/streamed/`), its tending (`src/locks/waiting/tending.rs`) and its shutdown (`src/app/mod.rs`): each step one round trip to Redis, or none.

use crate::scenario::{Fixes, Gw, HEARD_LATE, Mutant, Req, Scenario, TICK_MS, Tick};
use crate::scripts::{Acquired, Left};
use crate::state::{Cleanup, Phase, Refusal, Search, Standing, TendPlan};
use crate::step::Step;

/// Why a waiter leaves the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    /// Its wait is over: `409` unless it was granted meanwhile.
    Deadline,
    /// Its gateway heard it is no longer queued: it leaves to learn why,
    /// then queues again.
    Unaccounted,
    /// Its gateway shuts down: `503`.
    Shutdown,
}

/// Whether waiter `id`, having heard a grant made outright that ends at
/// `ends`, answers it without a write at `now` (`Acquisition::taken`): when
/// the lease left (none, once it ended) and `HEARD_LATE`, or half a
/// shorter lease, make the whole lease (without
/// `Fixes::short_lease_heard_late`, `HEARD_LATE` alone: a lease no longer
/// than it is answered whenever read).
pub fn heard_in_time(scenario: &Scenario, fixes: &Fixes, id: Req, ends: Tick, now: Tick) -> bool {
    let ttl = scenario.ttl_of(id);
    let left = ends.saturating_sub(now);
    let late = match fixes.short_lease_heard_late {
        true => HEARD_LATE.min(ttl / 2),
        false => HEARD_LATE,
    };
    left.saturating_add(late) >= ttl
}

/// Ticks in milliseconds, as a client would write them.
fn ms(ticks: u8) -> u32 {
    u32::from(ticks) * TICK_MS
}

impl Step<'_> {
    /// The client sends its request: a session's lock joins its session
    /// (`session_join.lua`), then the first attempt, and the second that
    /// joins the queue, as one step (a first attempt that finds no place
    /// changes nothing, so the join may as well come at once).
    pub fn send(&mut self, id: Req) {
        let spec = self.scenario.spec(id).clone();
        self.s.arrivals += 1;
        self.s.request_mut(id).arrived = self.s.arrivals;
        if spec.idempotency_key.is_some() {
            let scenario = self.scenario;
            let overlapped = self.s.ids().any(|other| {
                other != id
                    && scenario.spec(other).idempotency_key == spec.idempotency_key
                    && self.s.request(other).waiting()
            });
            self.s.request_mut(id).overlapped = overlapped;
        }
        let name = spec.name;
        let path = if spec.streamed {
            "/locks/{key}/stream"
        } else {
            "/locks"
        };
        let on = match spec.also {
            Some(also) => format!("/batch {} {also}", spec.key),
            None => self.on_key(spec.key),
        };
        self.say(|| {
            let idem = match spec.idempotency_key {
                Some(key) => format!(", Idempotency-Key K{key}"),
                None => String::new(),
            };
            let lease = match spec.session {
                Some(session) => format!("session {session}"),
                None => format!("ttl_ms {}", ms(spec.ttl)),
            };
            format!(
                "client {name} -> gateway {}: POST {path}{on} (wait_ms {}, {lease}{idem})",
                spec.gateway,
                ms(spec.wait),
            )
        });
        if spec.is_batch() {
            self.send_batch(id);
            return;
        }
        if let Some(session) = spec.session
            && !self.session_join(session, id)
        {
            self.say(|| format!("redis: session_join({name}) -> not-found"));
            self.refuse(id, Refusal::SessionEnded);
            return;
        }
        self.running(|| format!("acquire({name}){on}"));
        let outcome = self.acquire(spec.key, id, id, spec.wait > 0, spec.wait);
        let deadline = self.s.now + spec.wait;
        self.settle_attempt(id, outcome, deadline);
    }

    /// Where an attempt leaves the request.
    fn settle_attempt(&mut self, id: Req, outcome: Acquired, deadline: Tick) {
        let name = self.name(id);
        let now = self.s.now;
        let in_session = self.scenario.spec(id).session.is_some();
        match outcome {
            Acquired::Granted { ends, fence } => {
                let request = self.s.request_mut(id);
                request.granted_fence = fence;
                if in_session {
                    request.phase = Phase::Attaching;
                    self.say(|| format!("redis: acquire({name}) -> granted; attaching it"));
                } else {
                    request.phase = Phase::Holding {
                        token: request.token,
                        until: ends,
                    };
                    request.granted = request.token == id;
                    self.say(|| format!("redis: acquire({name}) -> granted; {name} answered 201"));
                }
            }
            Acquired::Replayed { token, ends, fence } => {
                let request = self.s.request_mut(id);
                request.phase = Phase::Holding { token, until: ends };
                request.granted_fence = fence;
                self.say(|| {
                    format!(
                        "redis: acquire({name}) -> replayed (the key's grant); {name} answered 201"
                    )
                });
            }
            Acquired::Queued {
                ticket,
                token,
                heard: told,
            } => {
                let request = self.s.request_mut(id);
                // A waiter that attempts again has its standing reset to
                // `Queued { position: 0 }` first; before-model, its ticket
                // kept what it last held (`Ticket::joined` sets only a
                // queued standing): a grant heard, or unaccounted, stood.
                let (mut standing, mut heard, search) = match request.phase {
                    Phase::Waiting { search, .. } if self.fixes.requeue_resets_standing => {
                        (Standing::Queued, false, search)
                    }
                    Phase::Waiting {
                        standing, search, ..
                    } => (standing, false, search),
                    _ => (Standing::Queued, false, Search::Idle { at: now }),
                };
                if let Some(told) = told {
                    (standing, heard) = (told, true);
                }
                request.token = token;
                request.phase = Phase::Waiting {
                    standing,
                    heard,
                    deadline,
                    ticket,
                    search,
                };
                request.waited = true;
                let twin = if token != id {
                    format!(" (with {}'s token)", self.name(token))
                } else {
                    String::new()
                };
                self.say(|| format!("redis: acquire({name}) -> queued at ticket {ticket}{twin}"));
            }
            Acquired::Held => {
                self.say(|| format!("redis: acquire({name}) -> held; {name} answered 409"));
                self.s.request_mut(id).phase = Phase::Refused(Refusal::Held);
            }
        }
    }

    /// The wait loop acted on its ticket's news.
    fn seen(&mut self, id: Req) {
        if let Phase::Waiting { heard, .. } = &mut self.s.request_mut(id).phase {
            *heard = false;
        }
    }

    /// The waiter heard its grant: one made outright is answered at once
    /// (unless heard late); an offer it claims for its whole lease
    /// (`extend.lua`), and a place gone meanwhile sends it back to the queue.
    pub fn claim(&mut self, id: Req) {
        self.seen(id);
        if self.is_batch(id) {
            self.retry_batch(id);
            return;
        }
        if let Phase::Waiting {
            standing: Standing::Outright { fence, ends },
            ..
        } = self.s.request(id).phase
            && heard_in_time(self.scenario, &self.fixes, id, ends, self.s.now)
        {
            // No write: the message's fencing token and lease's end, even
            // once that lease is over (a session's lock finds out when it
            // attaches).
            let in_session = self.scenario.spec(id).session.is_some();
            self.s.broken.answered_after_lease |= !in_session && ends <= self.s.now;
            self.s.request_mut(id).outright = true;
            let name = self.name(id);
            self.answer_grant(id, fence, ends, || {
                format!("{name} heard its grant outright (fence {fence}, until t={ends})")
            });
            return;
        }
        let name = self.name(id);
        self.running(|| format!("extend({name})"));
        let deadline = self.deadline(id);
        if self.claimed(id) {
            return;
        }
        self.forfeit(id);
        self.requeue(id, deadline);
    }

    /// `extend.lua` for a waiter's offered place: true, and the client
    /// answered `201` (a session's lock: once attached), if the place was
    /// still its own.
    fn claimed(&mut self, id: Req) -> bool {
        let ttl = self.scenario.ttl_of(id);
        let (name, key, gw) = (self.name(id), self.key_of(id), self.gateway_of(id));
        let token = self.s.request(id).token;
        match self.extend(key, token, ttl) {
            Some(until) => {
                let fence = self.lock(key).place(token).map_or(0, |place| place.fence);
                self.answer_grant(id, fence, until, || {
                    format!("extend({name}) claims the place")
                });
                true
            }
            None => {
                self.say(|| format!("gateway {gw}: extend({name}) -> the offer is gone"));
                false
            }
        }
    }

    /// The grant's answer (`how` it came, for the notes): `201` with its
    /// fencing token and lease's end, or, for a session's lock, the
    /// attachment first.
    fn answer_grant(&mut self, id: Req, fence: u16, until: Tick, how: impl FnOnce() -> String) {
        let (name, gw) = (self.name(id), self.gateway_of(id));
        let in_session = self.scenario.spec(id).session.is_some();
        let request = self.s.request_mut(id);
        let token = request.token;
        request.granted_fence = fence;
        if in_session {
            request.phase = Phase::Attaching;
            self.say(|| format!("gateway {gw}: {}", how()));
        } else {
            request.phase = Phase::Holding { token, until };
            request.granted = token == id;
            self.say(|| format!("gateway {gw}: {}; {name} answered 201", how()));
        }
    }

    /// `Locks::attach`: the session confirms it holds the lock
    /// (`session_join.lua` with the fencing token), then the lock takes
    /// the session's lease (`extend.lua`, attach); the client is answered
    /// `201`. A session ended meanwhile: the grant is released and the
    /// client answered `404`.
    pub fn attach(&mut self, id: Req) {
        let (name, key, gw) = (self.name(id), self.key_of(id), self.gateway_of(id));
        let session = self.scenario.spec(id).session.expect("a session's lock");
        let token = self.s.request(id).token;
        self.running(|| format!("release({name})"));
        if !self.s.redis.session(session).alive(self.s.now) {
            self.release(key, token);
            self.say(|| {
                format!(
                    "gateway {gw}: session_join({name}) -> not-found: released, {name} answered 404"
                )
            });
            self.s.request_mut(id).phase = Phase::Refused(Refusal::SessionEnded);
            return;
        }
        if self.attach_place(key, token) {
            let request = self.s.request_mut(id);
            request.phase = Phase::Holding {
                token,
                until: crate::scenario::FOREVER,
            };
            request.granted = token == id;
            self.say(|| format!("gateway {gw}: attach({name}) to {session}; {name} answered 201"));
        } else {
            self.say(|| format!("gateway {gw}: attach({name}) -> lost; {name} answered 404"));
            self.s.request_mut(id).phase = Phase::Refused(Refusal::SessionEnded);
        }
    }

    /// Its offer is gone unclaimed: passed over by design, unless a twin
    /// gave it back.
    fn forfeit(&mut self, id: Req) {
        let request = self.s.request_mut(id);
        request.forfeited |= !request.robbed;
        request.robbed = false;
    }

    /// The wait's end, while the request waits.
    fn deadline(&self, id: Req) -> Tick {
        match self.s.request(id).phase {
            Phase::Waiting { deadline, .. } => deadline,
            _ => self.s.now,
        }
    }

    /// Another attempt as a waiter, with what is left of the wait.
    fn requeue(&mut self, id: Req, deadline: Tick) {
        let (name, key) = (self.name(id), self.key_of(id));
        let left = deadline.saturating_sub(self.s.now);
        let token = self.s.request(id).token;
        let on = self.on_key(key);
        self.running(|| format!("acquire({name}){on}"));
        let outcome = self.acquire(key, id, token, true, left);
        self.settle_attempt(id, outcome, deadline);
    }

    /// The waiter leaves the queue: its wait is over, its gateway shuts
    /// down, or it is unaccounted for. The leave (and the claim of a place
    /// it says was granted) as one step.
    pub fn leave_queue(&mut self, id: Req) {
        let Phase::Waiting {
            standing, deadline, ..
        } = self.s.request(id).phase
        else {
            return;
        };
        self.seen(id);
        let gateway = self.s.gateway(self.gateway_of(id));
        if self.is_batch(id) {
            let refusal = match gateway.closing {
                true => Refusal::ShuttingDown,
                false => Refusal::Held,
            };
            self.leave_batch(id, refusal);
            return;
        }
        let why = if gateway.closing {
            Why::Shutdown
        } else if self.s.now >= deadline {
            Why::Deadline
        } else {
            debug_assert_eq!(standing, Standing::Unaccounted);
            Why::Unaccounted
        };
        let (name, key, token) = (self.name(id), self.key_of(id), self.s.request(id).token);
        self.running(|| format!("leave({name})"));
        // At shutdown, `give_up`: a place offered meanwhile goes on
        // (before, a request under an Idempotency-Key kept it for its twin
        // or retry).
        let give_back = why == Why::Shutdown
            && self.fixes.shutdown_gives_back
            && (self.fixes.shutdown_gives_back_keyed
                || self.scenario.spec(id).idempotency_key.is_none());
        let left = self.leave(key, id, token, give_back);
        let because = match why {
            Why::Deadline => "its wait is over",
            Why::Unaccounted => "it is no longer queued",
            Why::Shutdown if give_back => "shutting down (leave and give back)",
            Why::Shutdown => "shutting down",
        };
        let gw = self.gateway_of(id);
        self.say(|| format!("gateway {gw}: {name} leaves, {because}: leave({name}) -> {left:?}"));
        match (why, left) {
            (Why::Shutdown, Left::Granted) => {
                // As it was, the wait loop's `leave` claims what was
                // granted, and the 503 follows whatever it held; fixed,
                // an offer kept for a twin is left to lapse.
                if !self.fixes.shutdown_gives_back {
                    self.claimed(id);
                }
                self.refuse(id, Refusal::ShuttingDown);
            }
            (Why::Shutdown, _) => self.refuse(id, Refusal::ShuttingDown),
            (Why::Deadline, Left::Granted) => {
                if !self.claimed(id) {
                    self.refuse(id, Refusal::Held);
                }
            }
            (Why::Deadline, _) => self.refuse(id, Refusal::Held),
            (Why::Unaccounted, Left::Granted) => {
                if !self.claimed(id) {
                    self.forfeit(id);
                    self.requeue(id, deadline);
                }
            }
            (Why::Unaccounted, _) => self.requeue(id, deadline),
        }
    }

    /// `Acquisition::give_up`: the wait ends, its session having ended
    /// (`404`: a place offered meanwhile goes on, `leave.lua` giving back)
    /// or its wait closing a cycle: `leave.lua` keeping a place granted
    /// meanwhile, which it claims and answers (before-model: giving it
    /// back), else `409 deadlock`.
    pub fn give_up(&mut self, id: Req) {
        let Phase::Waiting { search, .. } = self.s.request(id).phase else {
            return;
        };
        let refusal = match search {
            Search::Refusing => Refusal::Deadlock,
            _ => Refusal::SessionEnded,
        };
        let (name, key, token, gw) = (
            self.name(id),
            self.key_of(id),
            self.s.request(id).token,
            self.gateway_of(id),
        );
        // As it stands before it leaves: whether a `deadlock` answer is sound.
        let sound = crate::deadlock::refusal_sound(self.scenario, self.s, id);
        let claims = refusal == Refusal::Deadlock && self.fixes.deadlock_claims_grant;
        let give_back = !claims
            && (self.scenario.spec(id).idempotency_key.is_none()
                || refusal == Refusal::SessionEnded);
        self.running(|| format!("leave({name})"));
        let left = self.leave(key, id, token, give_back);
        let because = match refusal {
            Refusal::Deadlock => "its wait closes a cycle",
            _ => "its session ended",
        };
        self.say(|| format!("gateway {gw}: {name} gives up, {because}: leave({name}) -> {left:?}"));
        if claims && left == Left::Granted && self.claimed(id) {
            return;
        }
        if refusal == Refusal::Deadlock && !sound {
            self.s.broken.false_deadlock = true;
        }
        self.refuse(id, refusal);
    }

    fn refuse(&mut self, id: Req, refusal: Refusal) {
        let name = self.name(id);
        self.s.request_mut(id).phase = Phase::Refused(refusal);
        let status = match refusal {
            Refusal::Held => "409 lock-held",
            Refusal::ShuttingDown => "503 shutting-down",
            Refusal::SessionEnded => "404 session-not-found",
            Refusal::Deadlock => "409 deadlock",
        };
        let gw = self.gateway_of(id);
        self.say(|| format!("gateway {gw}: {name} answered {status}"));
    }

    /// The client left: a waiting request's ticket goes at once, and its
    /// guard leaves the queue in the background; a streamed lock's guard
    /// releases it.
    pub fn disconnect(&mut self, id: Req) {
        let name = self.name(id);
        let request = self.s.request_mut(id);
        request.phase = match request.phase {
            Phase::Waiting { .. } => Phase::Disconnected(Cleanup::Leave),
            _ => Phase::Disconnected(Cleanup::Release),
        };
        self.say(|| format!("client {name} disconnects"));
    }

    /// The guard's (or the stream guard's) next script: fixed, the guard
    /// leaves giving back what was offered, in one script; as it was, it
    /// leaves and then releases what the leave says was granted. A request
    /// under an Idempotency-Key keeps what it was granted, for its retry.
    pub fn clean_up(&mut self, id: Req) {
        let (name, key, token) = (self.name(id), self.key_of(id), self.s.request(id).token);
        let Phase::Disconnected(cleanup) = self.s.request(id).phase else {
            return;
        };
        let keep = self.scenario.spec(id).idempotency_key.is_some();
        let next = match cleanup {
            Cleanup::Leave => {
                self.running(|| format!("leave({name})"));
                let give_back = self.fixes.shutdown_gives_back && !keep;
                match self.leave(key, id, token, give_back) {
                    Left::Granted if !keep => Phase::Disconnected(Cleanup::Release),
                    _ => Phase::Finished,
                }
            }
            Cleanup::Release => {
                self.running(|| format!("release({name})"));
                self.release(key, token);
                Phase::Finished
            }
        };
        let (gw, script) = match cleanup {
            Cleanup::Leave => (self.gateway_of(id), "leave"),
            Cleanup::Release => (self.gateway_of(id), "release"),
        };
        self.say(|| format!("gateway {gw}: {name}'s client left: {script}({name})"));
        self.s.request_mut(id).phase = next;
    }

    /// The client releases its lock (`DELETE`).
    pub fn release_lock(&mut self, id: Req) {
        let (name, key) = (self.name(id), self.key_of(id));
        let token = match self.s.request(id).phase {
            Phase::Holding { token, .. } => token,
            _ => id,
        };
        let on = match self.scenario.spec(id).also {
            Some(also) => format!(" {key}, then {also}"),
            None => self.on_key(key),
        };
        self.say(|| format!("client {name}: DELETE /locks{on}"));
        self.running(|| format!("release({name})"));
        for key in self.scenario.spec(id).keys() {
            self.release(key, token);
        }
        self.s.request_mut(id).phase = Phase::Finished;
    }

    /// The stream's renewal (`extend.lua`); a lock gone ends it `lost`.
    pub fn renew(&mut self, id: Req) {
        let (name, key) = (self.name(id), self.key_of(id));
        let ttl = self.scenario.spec(id).ttl;
        self.running(|| format!("extend({name})"));
        let request_phase = match self.extend(key, id, ttl) {
            Some(until) => Phase::Holding { token: id, until },
            None => {
                let gw = self.gateway_of(id);
                self.say(|| {
                    format!("gateway {gw}: extend({name}) finds it gone: the stream ends lost")
                });
                Phase::Finished
            }
        };
        self.s.request_mut(id).phase = request_phase;
    }

    /// A tending round begins (`Room::plans`): the plan names the waiters
    /// in this instance's waiting room, with their tickets and deadlines,
    /// and asks the positions of the streamed ones (of every one, on a
    /// lock whose `check_all` is set). A tend wanted sooner than the round
    /// plans only the locks that asked for it.
    pub fn plan_tend(&mut self, gw: Gw) {
        let now = self.s.now;
        let gateway = self.s.gateway(gw);
        let round = now >= gateway.tend_at;
        let check_all = gateway.check_all;
        let mut plan = TendPlan::default();
        for id in self.s.ids() {
            if self.gateway_of(id) != gw {
                continue;
            }
            let key_bit = self
                .scenario
                .spec(id)
                .keys()
                .fold(0, |bits, key| bits | 1 << key.0);
            if !round && check_all & key_bit == 0 {
                continue;
            }
            if let Phase::Waiting {
                deadline, ticket, ..
            } = self.s.request(id).phase
            {
                plan.waiters.push((id, ticket, deadline));
                if self.scenario.spec(id).streamed || check_all & key_bit != 0 {
                    plan.asked |= id.bit();
                }
            }
        }
        let gateway = self.s.gateway_mut(gw);
        gateway.tending = Some(plan);
        gateway.check_all = 0;
        gateway.tend_soon = false;
        if round {
            gateway.tend_at = now + 1;
        }
    }

    /// The planned tend reaches Redis: one `tend.lua` per lock, in one
    /// pipeline (taken here as one step).
    pub fn run_tend(&mut self, gw: Gw) {
        let plan = self.s.gateway_mut(gw).tending.take().unwrap_or_default();
        if !self.s.gateway(gw).steady {
            self.say(|| {
                format!("redis: tend({gw}) runs, the first since gateway {gw} or Redis resumed")
            });
        }
        for index in 0..self.scenario.locks {
            let key = crate::scenario::Key(index);
            if plan.waiters.iter().any(|&(id, _, _)| self.covers(id, key)) {
                self.running(|| format!("tend({gw})"));
                self.tend(key, gw, &plan);
            }
        }
        self.s.gateway_mut(gw).steady = true;
    }

    /// Whether request `id`'s wait ends with its session now: its gateway
    /// has learnt that the session ended (its sweep asked, within a tick).
    pub fn session_over(&self, id: Req) -> bool {
        let Some(session) = self.scenario.spec(id).session else {
            return false;
        };
        !self.fixes.is(Mutant::IgnoreSessionEnd) && self.s.redis.session(session).ended.is_some()
    }
}
