//! The model: which steps each actor (Redis, the gateways, the clients, the faults, the clock) may take from a state, and what each does.
//!
//! Time passes only by `Tick`, which waits for every urgent step (one that
//! a running gateway takes at once: a tend due, a grant heard, a wait
//! ended, a renewal due, a guard's script, a sweep, a search): what runs,
//! runs in time; only a pause, a stall or a crash delays it.

use crate::deadlock::{self, CONFIRM_TICKS};
use crate::gateway::heard_in_time;
use crate::scenario::{Fixes, Gw, Hold, Key, Mutant, Req, STARTS, Scenario, Sess};
use crate::sessions;
use crate::state::{Gateway, Life, Phase, Search, Standing, State};
use crate::step::{Notes, Step};

/// One step, named by the actor that takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The clock advances one tick (300 ms).
    Tick,
    /// A client sends its request (`session_join.lua`, `acquire.lua`).
    Send(Req),
    /// A gateway claims the place its waiter heard granted (`extend.lua`).
    Claim(Req),
    /// A session's grant is confirmed by its session and takes the
    /// session's lease (`Locks::attach`: `session_join.lua`, `extend.lua`).
    Attach(Req),
    /// A gateway's waiter leaves the queue (`leave.lua`): its wait is
    /// over, its gateway shuts down, or it is unaccounted for.
    Leave(Req),
    /// A waiter gives up: its session ended, or its wait closes a cycle
    /// (`Acquisition::give_up`, `leave.lua` giving back).
    GiveUp(Req),
    /// One read of a session's wait's search for a cycle (`deadlock.rs`).
    Search(Req),
    /// A client leaves while waiting, or a streamed holder's client leaves.
    Disconnect(Req),
    /// The guard (or a stream's guard) undoes what a client that left
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
    /// A streamed session's keeper renews it (`session_keep.lua`).
    KeepSession(Sess),
    /// A gateway's sweep ends an expired session (`session_end.lua`).
    EndSession(Gw, Sess),
    /// The sweep ends the session's next lock (`session_release.lua`).
    ReleaseSessionLock(Gw),
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
    /// An operator revokes a lock (`revoke.lua`).
    Revoke(Key),
    /// Someone reads a lock (`inspect.lua`).
    Inspect(Key),
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
        assert!(
            usize::from(scenario.locks) <= crate::scenario::MAX_LOCKS
                && scenario.sessions.len() <= crate::scenario::MAX_SESSIONS,
            "too many locks or sessions"
        );
        assert!(
            usize::from(scenario.faults.crash.times) < STARTS,
            "too many restarts"
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
        if !self.scenario.sessions.is_empty() {
            deadlock::watch_searches(&self.scenario, &mut next);
        }
        next
    }

    /// Every step possible from `state`; true if one of them is urgent.
    pub(crate) fn possible(&self, s: &State, actions: &mut Vec<Action>) -> bool {
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
        self.session_steps(s, &mut offer);
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
                let due = s.now >= gateway.tend_at || gateway.tend_soon;
                if !gateway.closing && gateway.tending.is_none() && due && waiters {
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
                let (shortest, longest) = faults.pause.lasts_for(s.struck.pauses);
                let paused = s.now - since;
                if paused >= shortest {
                    offer(Action::Thaw(gw), paused >= longest);
                }
            }
            Life::Down => offer(Action::Restart(gw), false),
            Life::Stopped => {}
        }
    }

    /// The sessions' steps: each keeper's renewal, and each running
    /// gateway's sweep (every quarter second: within the tick).
    fn session_steps(&self, s: &State, offer: &mut impl FnMut(Action, bool)) {
        if self.scenario.sessions.is_empty() || !s.redis.runs() {
            return;
        }
        for (index, spec) in self.scenario.sessions.iter().enumerate() {
            let session = Sess(index as u8);
            if let Some(keeper) = spec.keeper {
                let record = s.redis.session(session);
                let period = (spec.ttl / 3).max(1);
                let due = record.expires.saturating_sub(s.now) <= spec.ttl - period;
                if s.kept & session.bit() != 0 && s.gateway(keeper).up() && due {
                    offer(Action::KeepSession(session), true);
                }
            }
        }
        for (index, gateway) in s.gateways.iter().enumerate() {
            let gw = Gw(index as u8);
            if !gateway.up() || gateway.closing {
                continue;
            }
            if gateway.sweeping.is_some() {
                offer(Action::ReleaseSessionLock(gw), true);
                continue;
            }
            for index in 0..self.scenario.sessions.len() {
                let session = Sess(index as u8);
                // One sweeper at a time, unless it stopped half way.
                let swept = s.gateways.iter().any(|other| {
                    other.up()
                        && other
                            .sweeping
                            .as_ref()
                            .is_some_and(|sweep| sweep.session == session)
                });
                if sessions::sweep_due(&self.fixes, s, session) && !swept {
                    offer(Action::EndSession(gw, session), true);
                }
            }
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
                for index in 0..self.scenario.locks {
                    let key = Key(index);
                    let lock = s.redis.lock(key);
                    if s.struck.revokes < faults.revokes && !lock.places.is_empty() {
                        offer(Action::Revoke(key), false);
                    }
                    if s.struck.inspects < faults.inspects && !lock.queue.is_empty() {
                        offer(Action::Inspect(key), false);
                    }
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
                let previous = match (self.scenario.in_order, id.0) {
                    (true, 0) | (false, _) => spec.after,
                    (true, index) => Some(Req(index - 1)),
                };
                let previous_sent = previous.is_none_or(|previous| s.request(previous).arrived > 0);
                if previous_sent && up && !gateway.closing && redis {
                    offer(Action::Send(id), false);
                }
            }
            Phase::Waiting {
                standing,
                heard,
                deadline,
                search,
                ..
            } => {
                // A batch acts on any news (a lock ready for it) by trying
                // again; a grant made outright, read in time, is answered
                // without Redis.
                let alone = match standing {
                    Standing::Outright { ends, .. } => {
                        heard_in_time(&self.scenario, &self.fixes, id, ends, s.now)
                    }
                    _ => false,
                };
                if up && (redis || alone) && heard && (standing.granted() || spec.is_batch()) {
                    offer(Action::Claim(id), true);
                }
                let unaccounted = standing == Standing::Unaccounted && heard && !spec.is_batch();
                let ends = gateway.closing || s.now >= deadline || unaccounted;
                if up && redis && ends {
                    offer(Action::Leave(id), true);
                }
                if up && spec.may_disconnect {
                    offer(Action::Disconnect(id), false);
                }
                if let Some(session) = spec.session
                    && up
                    && redis
                {
                    self.session_wait_steps(s, id, session, search, offer);
                }
            }
            Phase::Attaching => {
                if up && redis {
                    offer(Action::Attach(id), true);
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

    /// What a session's wait may do: give up when its session ended (its
    /// gateway's sweep tells it within a tick), search for a cycle (at
    /// once, then every round), refuse a confirmed cycle.
    fn session_wait_steps(
        &self,
        s: &State,
        id: Req,
        session: Sess,
        search: Search,
        offer: &mut impl FnMut(Action, bool),
    ) {
        let record = s.redis.session(session);
        let ended = !self.fixes.is(Mutant::IgnoreSessionEnd) && record.ended.is_some();
        if search == Search::Refusing {
            offer(Action::GiveUp(id), true);
        } else if let (true, Some((_, at))) = (ended, record.ended) {
            offer(Action::GiveUp(id), at < s.now);
        }
        let searching = match search {
            Search::Idle { at } => s.now >= at,
            Search::Holders { .. } => true,
            Search::Seen { sighting, .. } => {
                !self.fixes.deadlock_renewed_presence || s.now >= sighting.at + CONFIRM_TICKS
            }
            Search::Refusing => false,
        };
        let closing = s.gateway(self.scenario.spec(id).gateway).closing;
        if searching && !closing && !self.fixes.is(Mutant::NoDeadlockSearch) {
            offer(Action::Search(id), true);
        }
    }
}

/// Whether gateway `gw` has waiters registered (its interest in the lock).
fn has_waiters(scenario: &Scenario, s: &State, gw: Gw) -> bool {
    s.ids()
        .any(|id| scenario.spec(id).gateway == gw && s.request(id).waiting())
}

impl Step<'_> {
    /// Takes one step.
    pub fn take(&mut self, action: Action) {
        match action {
            Action::Tick => self.tick(),
            Action::Send(id) => self.send(id),
            Action::Claim(id) => self.claim(id),
            Action::Attach(id) => self.attach(id),
            Action::Leave(id) => self.leave_queue(id),
            Action::GiveUp(id) => self.give_up(id),
            Action::Search(id) => self.search(id),
            Action::Disconnect(id) => self.disconnect(id),
            Action::Cleanup(id) => self.clean_up(id),
            Action::Release(id) => self.release_lock(id),
            Action::Renew(id) => self.renew(id),
            Action::PlanTend(gw) => self.plan_tend(gw),
            Action::RunTend(gw) => self.run_tend(gw),
            Action::KeepSession(session) => self.keep_session(session),
            Action::EndSession(gw, session) => self.end_session(gw, session),
            Action::ReleaseSessionLock(gw) => self.release_session_lock(gw),
            Action::Pause(gw) => self.pause(gw),
            Action::Thaw(gw) => self.thaw(gw),
            Action::Crash(gw) => self.crash(gw),
            Action::Restart(gw) => self.restart(gw),
            Action::Shutdown(gw) => self.shut_down(gw),
            Action::CloseStreams(gw) => self.close_streams(gw),
            Action::Exit(gw) => self.exit(gw),
            Action::StallRedis => self.stall_redis(),
            Action::ResumeRedis => self.resume_redis(),
            Action::Revoke(key) => {
                self.s.struck.revokes += 1;
                self.running(|| "revoke".into());
                let on = self.on_key(key);
                self.say(|| format!("operator: DELETE /locks{on}?force=true"));
                self.revoke(key);
            }
            Action::Inspect(key) => {
                self.s.struck.inspects += 1;
                self.running(|| "inspect".into());
                let on = self.on_key(key);
                self.say(|| format!("someone: GET /locks{on}"));
                self.inspect(key);
            }
        }
    }

    /// The clock advances: leases and offers end, the client of a plain
    /// lock knows its lease is over, and each waiter's idle time (and a
    /// session's waiter's time after its session ended) is counted, and
    /// how long a cycle of waits has stood.
    fn tick(&mut self) {
        self.pass_tick();
        let now = self.s.now;
        let redis = self.s.redis.runs();
        for id in self.s.ids() {
            let spec = self.scenario.spec(id);
            let gateway = self.s.gateway(spec.gateway);
            let kept_running = redis && gateway.up() && gateway.steady;
            // A batch ahead that may be served keeps a lock free for itself
            // while it waits for its other locks: by design, not idle.
            let batch_ahead = spec.keys().any(|key| self.batch_ahead(key, id));
            let free = !batch_ahead
                && if spec.is_batch() {
                    spec.keys().all(|key| self.blocks_nothing(key))
                } else {
                    self.s.redis.lock(spec.key).free(now)
                };
            let orphaned = spec.session.is_some_and(|session| {
                self.s.redis.session(session).ended.is_some() && redis && gateway.up()
            });
            let request = self.s.request_mut(id);
            let waiting =
                matches!(request.phase, Phase::Waiting { deadline, .. } if now < deadline);
            request.orphaned = if waiting && orphaned {
                request.orphaned + 1
            } else {
                0
            };
            match request.phase {
                Phase::Holding { until, .. } if !spec.streamed && until <= now => {
                    request.phase = Phase::Finished;
                }
                _ if waiting && kept_running && free => {
                    request.idle += 1;
                    continue;
                }
                _ => {}
            }
            request.idle = 0;
        }
        if !self.scenario.sessions.is_empty() {
            self.s.cycle_for = if deadlock::running_cycle(self.scenario, self.s) {
                self.s.cycle_for + 1
            } else {
                0
            };
        }
    }

    /// Redis's side of a tick: the clock advances, the places whose lease
    /// (or offer) ends are gone (a key's expiry, `drop_ended`), and so is a
    /// queue whose keys expire.
    pub fn pass_tick(&mut self) {
        self.s.now += 1;
        let now = self.s.now;
        for index in 0..self.scenario.locks {
            let key = Key(index);
            for place in self.lock(key).places.clone() {
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
            self.lock_mut(key).places.retain(|place| place.ends > now);
            self.expire_queue(key);
        }
    }

    /// Whether lock `key` is free for a batch, or held only by batches
    /// that wait themselves (as a batch that took some of its locks and
    /// waits for the rest would: a circle of waits if two do).
    fn blocks_nothing(&self, key: Key) -> bool {
        let lock = self.s.redis.lock(key);
        !lock.delayed(self.s.now)
            && lock
                .places
                .iter()
                .all(|place| self.is_batch(place.token) && self.s.request(place.token).waiting())
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

    /// The process dies: its waiters, guards, streams, attachments and
    /// session keepers with it.
    fn crash(&mut self, gw: Gw) {
        self.s.struck.crashes += 1;
        let start = self.s.gateway(gw).start;
        *self.s.gateway_mut(gw) = Gateway {
            life: Life::Down,
            steady: false,
            start,
            ..Gateway::new()
        };
        let now = self.s.now;
        for id in self.s.ids() {
            let spec = self.scenario.spec(id);
            let request = self.s.request_mut(id);
            let dies = match request.phase {
                Phase::Waiting { .. } | Phase::Disconnected(_) | Phase::Attaching => true,
                Phase::Holding { .. } => spec.streamed,
                _ => false,
            };
            if spec.gateway == gw && dies {
                request.phase = Phase::Dead;
                request.died_at = now;
            }
        }
        for (index, spec) in self.scenario.sessions.iter().enumerate() {
            if spec.keeper == Some(gw) {
                self.s.kept &= !(1 << index);
            }
        }
        self.say(|| format!("gateway {gw} crashes (SIGKILL)"));
    }

    /// The process starts again: with a fresh instance id (a new nonce),
    /// or, before, the same `<hostname>:<port>`.
    fn restart(&mut self, gw: Gw) {
        let now = self.s.now;
        let fresh = self.fixes.fresh_instance_id;
        let before = self.s.gateway(gw).start;
        let start = if fresh {
            (before + 1).min(STARTS as u8 - 1)
        } else {
            before
        };
        *self.s.gateway_mut(gw) = Gateway {
            tend_at: now,
            steady: false,
            start,
            ..Gateway::new()
        };
        let inst = self.inst_of(gw);
        self.say(|| match fresh {
            true => format!("gateway {gw} starts again (instance id {inst}, a new nonce)"),
            false => format!("gateway {gw} starts again (same instance id)"),
        });
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
                self.release(self.key_of(id), id);
                self.s.request_mut(id).phase = Phase::Finished;
            }
        }
        self.s.gateway_mut(gw).streams_closed = true;
    }

    /// The drained gateway exits; a guard still running dies with it.
    fn exit(&mut self, gw: Gw) {
        self.s.gateway_mut(gw).life = Life::Stopped;
        let now = self.s.now;
        for id in self.s.ids() {
            let request = self.s.request_mut(id);
            if self.scenario.spec(id).gateway == gw
                && matches!(request.phase, Phase::Disconnected(_))
            {
                request.phase = Phase::Dead;
                request.died_at = now;
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
