//! The model: which steps each actor (Redis, the gateways, the clients, the faults, the clock) may take from a state, and what each does.
//!
//! Time passes only by `Tick`, which waits for every urgent step (one that
//! a running gateway takes at once: a tend due, a grant heard, a wait
//! ended, a renewal due, a handover's script): what runs, runs in time;
//! only a pause, a stall or a crash delays it.

use stateright::{Model, Property};

use crate::properties;
use crate::scenario::{Fixes, Gw, Hold, Req, Scenario};
use crate::state::{Gateway, Life, Phase, Standing, State};
use crate::step::{Notes, Step};

/// One step, named by the actor that takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The clock advances one tick (300 ms).
    Tick,
    /// A client sends its request (`acquire.lua`).
    Send(Req),
    /// A gateway claims the place its waiter heard granted (`extend.lua`).
    Claim(Req),
    /// A gateway's waiter leaves the queue (`leave.lua`): its wait is
    /// over, its gateway shuts down, or it is unaccounted for.
    Leave(Req),
    /// A client leaves while waiting, or a streamed holder's client leaves.
    Disconnect(Req),
    /// The handover (or a stream's guard) undoes what a client that left
    /// may hold (`leave.lua`, `release.lua`).
    Cleanup(Req),
    /// A client releases its lock (`release.lua`).
    Release(Req),
    /// A streamed lock's renewal (`extend.lua`).
    Renew(Req),
    /// A gateway's tending round begins (`tending.rs` `plans`).
    PlanTend(Gw),
    /// The planned tend runs in Redis (`tend.lua`).
    RunTend(Gw),
    Pause(Gw),
    Thaw(Gw),
    Crash(Gw),
    Restart(Gw),
    /// SIGTERM.
    Shutdown(Gw),
    /// At shutdown, the streamed locks are released (`Streams::close`).
    CloseStreams(Gw),
    /// The drained gateway exits.
    Exit(Gw),
    StallRedis,
    ResumeRedis,
    /// An operator revokes the lock (`revoke.lua`).
    Revoke,
    /// Someone reads the lock (`inspect.lua`).
    Inspect,
}

/// A scenario under one protocol.
pub struct LockModel {
    pub scenario: Scenario,
    pub fixes: Fixes,
    /// Check only this property (when looking for its shortest counterexample).
    pub only: Option<&'static str>,
}

impl LockModel {
    pub fn new(scenario: Scenario, fixes: Fixes) -> Self {
        assert!(
            scenario.requests.len() <= crate::scenario::MAX_REQUESTS,
            "too many requests"
        );
        assert!(
            usize::from(scenario.gateways) <= crate::scenario::MAX_GATEWAYS,
            "too many gateways"
        );
        Self {
            scenario,
            fixes,
            only: None,
        }
    }

    /// Takes `action` from `state`, noting what happened in `notes`.
    pub fn apply(&self, state: &State, action: Action, notes: &mut Notes) -> State {
        let mut next = state.clone();
        let mut step = Step::new(&mut next, &self.scenario, self.fixes, notes);
        step.take(action);
        next
    }

    /// Every step possible from `state`; true if one of them is urgent.
    fn possible(&self, s: &State, actions: &mut Vec<Action>) -> bool {
        let mut urgent = false;
        let mut offer = |action, now: bool| {
            actions.push(action);
            urgent |= now;
        };
        let redis = s.redis.runs();
        for id in s.ids() {
            self.request_steps(s, id, redis, &mut offer);
        }
        for (index, gateway) in s.gateways.iter().enumerate() {
            self.gateway_steps(s, Gw(index as u8), gateway, &mut offer);
        }
        self.redis_steps(s, &mut offer);
        urgent
    }

    /// The steps of gateway `gw` itself: tending, shutting down, and the
    /// faults that may strike it.
    fn gateway_steps(
        &self,
        s: &State,
        gw: Gw,
        gateway: &Gateway,
        offer: &mut impl FnMut(Action, bool),
    ) {
        let faults = &self.scenario.faults;
        let redis = s.redis.runs();
        match gateway.life {
            Life::Up => {
                let waiters = has_waiters(&self.scenario, s, gw);
                if !gateway.closing
                    && gateway.tending.is_none()
                    && s.now >= gateway.tend_at
                    && waiters
                {
                    offer(Action::PlanTend(gw), true);
                }
                if gateway.tending.is_some() && redis {
                    offer(Action::RunTend(gw), true);
                }
                if gateway.closing && !gateway.streams_closed && redis {
                    offer(Action::CloseStreams(gw), true);
                }
                if gateway.closing && gateway.streams_closed && !waiters {
                    offer(Action::Exit(gw), true);
                }
                if faults.pause.strikes(gw) && s.struck.pauses < faults.pause.times {
                    offer(Action::Pause(gw), false);
                }
                if faults.crash.strikes(gw) && s.struck.crashes < faults.crash.times {
                    offer(Action::Crash(gw), false);
                }
                let shutdowns_left = s.struck.shutdowns < faults.shutdown.times;
                if !gateway.closing && faults.shutdown.strikes(gw) && shutdowns_left {
                    offer(Action::Shutdown(gw), false);
                }
            }
            Life::Paused { since } => {
                let (shortest, longest) = faults.pause.lasts;
                let paused = s.now - since;
                if paused >= shortest {
                    offer(Action::Thaw(gw), paused >= longest);
                }
            }
            Life::Down => offer(Action::Restart(gw), false),
            Life::Stopped => {}
        }
    }

    /// Redis's own steps (a stall and its end) and the operators' scripts.
    fn redis_steps(&self, s: &State, offer: &mut impl FnMut(Action, bool)) {
        let faults = &self.scenario.faults;
        match s.redis.stalled_since {
            Some(since) => {
                let (shortest, longest) = faults.redis_stall.lasts;
                let stalled = s.now - since;
                if stalled >= shortest {
                    offer(Action::ResumeRedis, stalled >= longest);
                }
            }
            None => {
                if s.struck.stalls < faults.redis_stall.times {
                    offer(Action::StallRedis, false);
                }
                if s.struck.revokes < faults.revokes && !s.redis.places.is_empty() {
                    offer(Action::Revoke, false);
                }
                if s.struck.inspects < faults.inspects && !s.redis.queue.is_empty() {
                    offer(Action::Inspect, false);
                }
            }
        }
    }

    /// The steps of request `id` (its client's and its gateway's).
    fn request_steps(&self, s: &State, id: Req, redis: bool, offer: &mut impl FnMut(Action, bool)) {
        let spec = self.scenario.spec(id);
        let gateway = s.gateway(spec.gateway);
        let up = gateway.up();
        match s.request(id).phase {
            Phase::Unsent => {
                let previous_sent =
                    !self.scenario.in_order || id.0 == 0 || s.request(Req(id.0 - 1)).arrived > 0;
                if previous_sent && up && !gateway.closing && redis {
                    offer(Action::Send(id), false);
                }
            }
            Phase::Waiting {
                standing, deadline, ..
            } => {
                if up && redis && standing == Standing::Granted {
                    offer(Action::Claim(id), true);
                }
                let ends =
                    gateway.closing || s.now >= deadline || standing == Standing::Unaccounted;
                if up && redis && ends {
                    offer(Action::Leave(id), true);
                }
                if up && spec.may_disconnect {
                    offer(Action::Disconnect(id), false);
                }
            }
            Phase::Holding { token, until } if spec.streamed => {
                let period = (spec.ttl / 3).max(1);
                let due = until.saturating_sub(s.now) <= spec.ttl - period;
                if up && redis && !gateway.closing && due {
                    offer(Action::Renew(id), true);
                }
                if up && spec.may_disconnect && token == id {
                    offer(Action::Disconnect(id), false);
                }
            }
            Phase::Holding { token, .. } => {
                let some_gateway = s.gateways.iter().any(|g| g.up() && !g.closing);
                if token == id && spec.hold == Hold::Releases && redis && some_gateway {
                    offer(Action::Release(id), false);
                }
            }
            Phase::Disconnected(_) => {
                if up && redis {
                    offer(Action::Cleanup(id), true);
                }
            }
            Phase::Refused(_) | Phase::Finished | Phase::Dead => {}
        }
    }
}

/// Whether gateway `gw` has waiters registered (its interest in the lock).
fn has_waiters(scenario: &Scenario, s: &State, gw: Gw) -> bool {
    s.ids().any(|id| {
        scenario.spec(id).gateway == gw && matches!(s.request(id).phase, Phase::Waiting { .. })
    })
}

impl Step<'_> {
    /// Takes one step.
    pub fn take(&mut self, action: Action) {
        match action {
            Action::Tick => self.tick(),
            Action::Send(id) => self.send(id),
            Action::Claim(id) => self.claim(id),
            Action::Leave(id) => self.leave_queue(id),
            Action::Disconnect(id) => self.disconnect(id),
            Action::Cleanup(id) => self.clean_up(id),
            Action::Release(id) => self.release_lock(id),
            Action::Renew(id) => self.renew(id),
            Action::PlanTend(gw) => self.plan_tend(gw),
            Action::RunTend(gw) => self.run_tend(gw),
            Action::Pause(gw) => self.pause(gw),
            Action::Thaw(gw) => self.thaw(gw),
            Action::Crash(gw) => self.crash(gw),
            Action::Restart(gw) => self.restart(gw),
            Action::Shutdown(gw) => self.shut_down(gw),
            Action::CloseStreams(gw) => self.close_streams(gw),
            Action::Exit(gw) => self.exit(gw),
            Action::StallRedis => self.stall_redis(),
            Action::ResumeRedis => self.resume_redis(),
            Action::Revoke => {
                self.s.struck.revokes += 1;
                self.running(|| "revoke".into());
                self.say(|| "operator: DELETE /locks?force=true".into());
                self.revoke();
            }
            Action::Inspect => {
                self.s.struck.inspects += 1;
                self.running(|| "inspect".into());
                self.say(|| "someone: GET /locks".into());
                self.inspect();
            }
        }
    }

    /// The clock advances: leases and offers end, the client of a plain
    /// lock knows its lease is over, and each waiter's idle time is counted.
    fn tick(&mut self) {
        self.s.now += 1;
        let now = self.s.now;
        for place in self.s.redis.places.clone() {
            if place.ends <= now {
                let name = self.name(place.token);
                let what = if place.offered {
                    "offer lapses unclaimed"
                } else {
                    "lease ends"
                };
                self.say(|| format!("redis: {name}'s {what}"));
            }
        }
        self.s.redis.places.retain(|place| place.ends > now);
        self.s.redis.dropped.retain(|entry| entry.deadline >= now);
        let free = self.s.redis.places.is_empty();
        let redis = self.s.redis.runs();
        for id in self.s.ids() {
            let spec = self.scenario.spec(id);
            let gateway = self.s.gateway(spec.gateway);
            let kept_running = redis && gateway.up() && gateway.steady;
            let request = self.s.request_mut(id);
            match request.phase {
                Phase::Holding { until, .. } if !spec.streamed && until <= now => {
                    request.phase = Phase::Finished;
                }
                Phase::Waiting { deadline, .. } if kept_running && free && now < deadline => {
                    request.idle += 1;
                    continue;
                }
                _ => {}
            }
            request.idle = 0;
        }
    }

    fn pause(&mut self, gw: Gw) {
        self.s.struck.pauses += 1;
        let now = self.s.now;
        let gateway = self.s.gateway_mut(gw);
        gateway.life = Life::Paused { since: now };
        gateway.steady = false;
        self.say(|| format!("gateway {gw} paused (SIGSTOP)"));
    }

    fn thaw(&mut self, gw: Gw) {
        self.s.gateway_mut(gw).life = Life::Up;
        self.say(|| format!("gateway {gw} resumes (SIGCONT)"));
    }

    /// The process dies: its waiters, handovers and streams with it.
    fn crash(&mut self, gw: Gw) {
        self.s.struck.crashes += 1;
        *self.s.gateway_mut(gw) = Gateway {
            life: Life::Down,
            steady: false,
            ..Gateway::new()
        };
        for id in self.s.ids() {
            let spec = self.scenario.spec(id);
            let request = self.s.request_mut(id);
            let dies = match request.phase {
                Phase::Waiting { .. } | Phase::Disconnected(_) => true,
                Phase::Holding { .. } => spec.streamed,
                _ => false,
            };
            if spec.gateway == gw && dies {
                request.phase = Phase::Dead;
            }
        }
        self.say(|| format!("gateway {gw} crashes (SIGKILL)"));
    }

    fn restart(&mut self, gw: Gw) {
        let now = self.s.now;
        *self.s.gateway_mut(gw) = Gateway {
            tend_at: now,
            steady: false,
            ..Gateway::new()
        };
        self.say(|| format!("gateway {gw} starts again (same instance id)"));
    }

    /// SIGTERM: waits end (each leaves with a 503), nothing new starts,
    /// tending stops; the streamed locks are released next.
    fn shut_down(&mut self, gw: Gw) {
        self.s.struck.shutdowns += 1;
        let streams = self.s.ids().any(|id| self.holds_stream_on(id, gw));
        let gateway = self.s.gateway_mut(gw);
        gateway.closing = true;
        gateway.streams_closed = !streams;
        self.say(|| format!("gateway {gw} shutting down (SIGTERM)"));
    }

    fn holds_stream_on(&self, id: Req, gw: Gw) -> bool {
        let spec = self.scenario.spec(id);
        spec.streamed
            && spec.gateway == gw
            && matches!(self.s.request(id).phase, Phase::Holding { .. })
    }

    /// `Streams::close`: every streamed lock released in one pipeline; the
    /// streams end `lost` (`shutting-down`).
    fn close_streams(&mut self, gw: Gw) {
        for id in self.s.ids() {
            if self.holds_stream_on(id, gw) {
                let name = self.name(id);
                self.running(|| format!("release({name})"));
                self.say(|| format!("gateway {gw}: releases streamed {name} (shutdown)"));
                self.release(id);
                self.s.request_mut(id).phase = Phase::Finished;
            }
        }
        self.s.gateway_mut(gw).streams_closed = true;
    }

    /// The drained gateway exits; a handover still running dies with it.
    fn exit(&mut self, gw: Gw) {
        self.s.gateway_mut(gw).life = Life::Stopped;
        for id in self.s.ids() {
            let request = self.s.request_mut(id);
            if self.scenario.spec(id).gateway == gw
                && matches!(request.phase, Phase::Disconnected(_))
            {
                request.phase = Phase::Dead;
            }
        }
        self.say(|| format!("gateway {gw} exits"));
    }

    fn stall_redis(&mut self) {
        self.s.struck.stalls += 1;
        self.s.redis.stalled_since = Some(self.s.now);
        for gateway in &mut self.s.gateways {
            gateway.steady = false;
        }
        self.say(|| "redis stalls".into());
    }

    fn resume_redis(&mut self) {
        self.s.redis.stalled_since = None;
        self.say(|| "redis resumes (its clock went on)".into());
    }
}

impl Model for LockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State::new(&self.scenario)]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let urgent = self.possible(state, actions);
        if !urgent && state.now < self.scenario.horizon {
            actions.push(Action::Tick);
        }
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        Some(self.apply(state, action, &mut Notes::default()))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut all = properties::all();
        if let Some(only) = self.only {
            all.retain(|property| property.name == only);
        }
        all
    }
}
