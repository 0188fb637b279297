//! The gateway's side of a request (`src/locks/acquire.rs`, `src/locks/handover.rs`, `src/locks/streams/`), its tending (`src/locks/waiting/tending.rs`) and its shutdown (`src/app.rs`): each step one round trip to Redis, or none.

use crate::scenario::{Gw, Req, TICK_MS};
use crate::scripts::{Acquired, Left};
use crate::state::{Cleanup, Phase, Refusal, Standing};
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

/// Ticks in milliseconds, as a client would write them.
fn ms(ticks: u8) -> u32 {
    u32::from(ticks) * TICK_MS
}

impl Step<'_> {
    /// The client sends its request: the first attempt, and the second
    /// that joins the queue, as one step (a first attempt that finds no
    /// place changes nothing, so the join may as well come at once).
    pub fn send(&mut self, id: Req) {
        let spec = self.scenario.spec(id).clone();
        self.s.arrivals += 1;
        self.s.request_mut(id).arrived = self.s.arrivals;
        if spec.idempotency_key.is_some() {
            let scenario = self.scenario;
            let overlapped = self.s.ids().any(|other| {
                other != id
                    && scenario.spec(other).idempotency_key == spec.idempotency_key
                    && matches!(self.s.request(other).phase, Phase::Waiting { .. })
            });
            self.s.request_mut(id).overlapped = overlapped;
        }
        let name = spec.name;
        let path = if spec.streamed {
            "/locks/{key}/stream"
        } else {
            "/locks"
        };
        self.say(|| {
            let key = match spec.idempotency_key {
                Some(key) => format!(", Idempotency-Key K{key}"),
                None => String::new(),
            };
            format!(
                "client {name} -> gateway {}: POST {path} (wait_ms {}, ttl_ms {}{key})",
                spec.gateway,
                ms(spec.wait),
                ms(spec.ttl)
            )
        });
        self.running(|| format!("acquire({name})"));
        let outcome = self.acquire(id, spec.wait > 0, spec.wait);
        let deadline = self.s.now + spec.wait;
        self.settle_attempt(id, outcome, deadline);
    }

    /// Where an attempt leaves the request.
    fn settle_attempt(&mut self, id: Req, outcome: Acquired, deadline: u8) {
        let name = self.name(id);
        let request = self.s.request_mut(id);
        match outcome {
            Acquired::Granted { ends } => {
                request.phase = Phase::Holding {
                    token: id,
                    until: ends,
                };
                request.granted = true;
                self.say(|| format!("redis: acquire({name}) -> granted; {name} answered 201"));
            }
            Acquired::Replayed { token, ends } => {
                request.phase = Phase::Holding { token, until: ends };
                self.say(|| {
                    format!(
                        "redis: acquire({name}) -> replayed (the key's grant); {name} answered 201"
                    )
                });
            }
            Acquired::Queued { ticket } => {
                request.phase = Phase::Waiting {
                    standing: Standing::Queued,
                    deadline,
                    ticket,
                };
                request.waited = true;
                self.say(|| format!("redis: acquire({name}) -> queued at ticket {ticket}"));
            }
            Acquired::Held => {
                request.phase = Phase::Refused(Refusal::Held);
                self.say(|| format!("redis: acquire({name}) -> held; {name} answered 409"));
            }
        }
    }

    /// The waiter heard its grant: it claims the place for its whole lease
    /// (`extend.lua`); a place gone meanwhile sends it back to the queue.
    pub fn claim(&mut self, id: Req) {
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
    /// answered `201`, if the place was still its own.
    fn claimed(&mut self, id: Req) -> bool {
        let ttl = self.scenario.spec(id).ttl;
        let name = self.name(id);
        match self.extend(id, ttl) {
            Some(until) => {
                let request = self.s.request_mut(id);
                request.phase = Phase::Holding { token: id, until };
                request.granted = true;
                let gw = self.gateway_of(id);
                self.say(|| {
                    format!("gateway {gw}: extend({name}) claims the place; {name} answered 201")
                });
                true
            }
            None => {
                let gw = self.gateway_of(id);
                self.say(|| format!("gateway {gw}: extend({name}) -> the offer is gone"));
                false
            }
        }
    }

    fn forfeit(&mut self, id: Req) {
        self.s.request_mut(id).forfeited = true;
    }

    /// The wait's end, while the request waits.
    fn deadline(&self, id: Req) -> u8 {
        match self.s.request(id).phase {
            Phase::Waiting { deadline, .. } => deadline,
            _ => self.s.now,
        }
    }

    /// Another attempt as a waiter, with what is left of the wait.
    fn requeue(&mut self, id: Req, deadline: u8) {
        let name = self.name(id);
        let left = deadline.saturating_sub(self.s.now);
        self.running(|| format!("acquire({name})"));
        let outcome = self.acquire(id, true, left);
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
        let gateway = self.s.gateway(self.gateway_of(id));
        let why = if gateway.closing {
            Why::Shutdown
        } else if self.s.now >= deadline {
            Why::Deadline
        } else {
            debug_assert_eq!(standing, Standing::Unaccounted);
            Why::Unaccounted
        };
        let name = self.name(id);
        self.running(|| format!("leave({name})"));
        let release = why == Why::Shutdown && self.fixes.shutdown_leave_releases;
        let left = self.leave(id, release);
        let because = match why {
            Why::Deadline => "its wait is over",
            Why::Unaccounted => "it is no longer queued",
            Why::Shutdown if release => "shutting down (leave and release)",
            Why::Shutdown => "shutting down",
        };
        let gw = self.gateway_of(id);
        self.say(|| format!("gateway {gw}: {name} leaves, {because}: leave({name}) -> {left:?}"));
        match (why, left) {
            (Why::Shutdown, Left::Granted) => {
                // The wait loop's `leave` claims what was granted; the
                // 503 follows whatever it held.
                self.claimed(id);
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

    fn refuse(&mut self, id: Req, refusal: Refusal) {
        let name = self.name(id);
        self.s.request_mut(id).phase = Phase::Refused(refusal);
        let status = match refusal {
            Refusal::Held => "409 lock-held",
            Refusal::ShuttingDown => "503 shutting-down",
        };
        let gw = self.gateway_of(id);
        self.say(|| format!("gateway {gw}: {name} answered {status}"));
    }

    /// The client left: a waiting request's ticket goes at once, and its
    /// handover leaves the queue in the background; a streamed lock's
    /// guard releases it.
    pub fn disconnect(&mut self, id: Req) {
        let name = self.name(id);
        let request = self.s.request_mut(id);
        request.phase = match request.phase {
            Phase::Waiting { .. } => Phase::Disconnected(Cleanup::Leave),
            _ => Phase::Disconnected(Cleanup::Release),
        };
        self.say(|| format!("client {name} disconnects"));
    }

    /// The handover's (or the stream guard's) next script.
    pub fn clean_up(&mut self, id: Req) {
        let name = self.name(id);
        let Phase::Disconnected(cleanup) = self.s.request(id).phase else {
            return;
        };
        let next = match cleanup {
            Cleanup::Leave => {
                self.running(|| format!("leave({name})"));
                match self.leave(id, false) {
                    Left::Granted => Phase::Disconnected(Cleanup::Release),
                    _ => Phase::Finished,
                }
            }
            Cleanup::Release => {
                self.running(|| format!("release({name})"));
                self.release(id);
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
        let name = self.name(id);
        self.say(|| format!("client {name}: DELETE /locks"));
        self.running(|| format!("release({name})"));
        self.release(id);
        self.s.request_mut(id).phase = Phase::Finished;
    }

    /// The stream's renewal (`extend.lua`); a lock gone ends it `lost`.
    pub fn renew(&mut self, id: Req) {
        let name = self.name(id);
        let ttl = self.scenario.spec(id).ttl;
        self.running(|| format!("extend({name})"));
        let request_phase = match self.extend(id, ttl) {
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

    /// A tending round begins: the plan names the waiters in this
    /// instance's waiting room, with their tickets and deadlines.
    pub fn plan_tend(&mut self, gw: Gw) {
        let now = self.s.now;
        let mut plan = crate::state::TendPlan::new();
        for id in self.s.ids() {
            if self.gateway_of(id) != gw {
                continue;
            }
            if let Phase::Waiting {
                deadline, ticket, ..
            } = self.s.request(id).phase
            {
                plan.push((id, ticket, deadline));
            }
        }
        let gateway = self.s.gateway_mut(gw);
        gateway.tending = Some(plan);
        gateway.tend_at = now + 1;
    }

    /// The planned tend reaches Redis.
    pub fn run_tend(&mut self, gw: Gw) {
        let plan = self.s.gateway_mut(gw).tending.take().unwrap_or_default();
        self.running(|| format!("tend({gw})"));
        if !self.s.gateway(gw).steady {
            self.say(|| {
                format!("redis: tend({gw}) runs, the first since gateway {gw} or Redis resumed")
            });
        }
        self.tend(gw, &plan);
        self.s.gateway_mut(gw).steady = true;
    }
}
