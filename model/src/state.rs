//! The state of one run: Redis (each lock's keys, each session's), the gateways, the clients' requests, and the monitors that remember what a property needs from the past.

use arrayvec::ArrayVec;

use crate::scenario::{
    FRESH, Gw, Inst, Key, MAX_GATEWAYS, MAX_LOCKS, MAX_REQUESTS, MAX_SESSIONS, PRESENCE, Req,
    STARTS, Scenario, Sess, Tick,
};

/// A list with room for every request, kept in the state itself (no heap:
/// cloning and hashing states is most of the checker's work).
pub type PerRequest<T> = ArrayVec<T, MAX_REQUESTS>;
/// A list with room for every gateway.
pub type PerGateway<T> = ArrayVec<T, MAX_GATEWAYS>;
pub type PerLock<T> = ArrayVec<T, MAX_LOCKS>;
pub type PerSession<T> = ArrayVec<T, MAX_SESSIONS>;

/// A place in a lock: a holder, or a waiter offered the place from the
/// queue and not yet claimed (`lock` hash, or `holders` for many).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Place {
    pub token: Req,
    pub fence: u16,
    /// The lease's end: held while `now < ends` (`FOREVER`: a session's).
    pub ends: Tick,
    /// Offered from the queue, not yet claimed with an extension.
    pub offered: bool,
    /// The waiters told of a grant from the queue (an offer, or made
    /// outright: a head and its Idempotency-Key twins) that have not yet
    /// left, none of them having claimed it (see `Fixes::give_back_alone`).
    pub told: u8,
}

/// A waiter's entry in the queue (`queue` sorted set and `waiters` hash).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    /// Its waiter id.
    pub id: Req,
    /// The token it is granted under: its own, or (a retry under an
    /// Idempotency-Key) the one it shares with the request it waits with.
    pub token: Req,
    pub ticket: u8,
    /// The instance it waits on.
    pub inst: Inst,
    /// The end of its wait (Redis clock).
    pub deadline: Tick,
    /// When it joined (`since`, what the deadlock search compares).
    pub since: Tick,
    /// Its instance takes a grant outright (`one`, from its own
    /// `acquire.lua`'s ARGV[19]).
    pub one: bool,
}

/// One lock's keys in Redis.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Lock {
    /// The live places, by token.
    pub places: PerRequest<Place>,
    /// The last fencing token issued (`fence` key).
    pub last_fence: u16,
    /// The queue, in (ticket, id) order: a sorted set orders equal scores
    /// by member.
    pub queue: PerRequest<Entry>,
    /// Each instance's presence deadline (`@<instance>` in `waiters`), by
    /// gateway and start.
    pub presence: PerGateway<[Option<Tick>; STARTS]>,
    /// The last ticket (`#seq` in `waiters`).
    pub seq: u8,
    /// No place is granted before this tick (the `delayed` field:
    /// lock-delay); 0 for none.
    pub delayed_until: Tick,
    /// The batches' waiters told this lock is ready for them (`!<id>` in
    /// `waiters`), a set.
    pub told_ready: u8,
    /// The queue's keys (`queue`, `waiters`) expire after this tick: a
    /// presence past the latest deadline of the waiters that joined since
    /// they were made (`enqueue` only ever lengthens their life); 0 while
    /// there is no queue.
    pub kept_until: Tick,
}

impl Lock {
    fn new(gateways: u8) -> Self {
        Self {
            places: ArrayVec::new(),
            last_fence: 0,
            queue: ArrayVec::new(),
            presence: (0..gateways).map(|_| [None; STARTS]).collect(),
            seq: 0,
            delayed_until: 0,
            told_ready: 0,
            kept_until: 0,
        }
    }

    pub fn place(&self, token: Req) -> Option<&Place> {
        self.places.iter().find(|place| place.token == token)
    }

    pub fn queued(&self, id: Req) -> Option<&Entry> {
        self.queue.iter().find(|entry| entry.id == id)
    }

    /// Instance `inst`'s presence deadline, if it has one.
    pub fn presence_of(&self, inst: Inst) -> Option<Tick> {
        self.presence[usize::from(inst.gw.0)][usize::from(inst.start)]
    }

    pub fn presence_mut(&mut self, inst: Inst) -> &mut Option<Tick> {
        &mut self.presence[usize::from(inst.gw.0)][usize::from(inst.start)]
    }

    /// Whether `inst`'s presence is current by Redis's clock.
    pub fn present(&self, inst: Inst, now: Tick) -> bool {
        self.presence_of(inst).is_some_and(|until| until >= now)
    }

    /// Whether `inst`'s presence is fresh enough for an outright grant:
    /// renewed within `FRESH` (its deadline at least now + `PRESENCE` -
    /// `FRESH`).
    pub fn fresh(&self, inst: Inst, now: Tick) -> bool {
        self.presence_of(inst).is_some_and(|until| {
            u16::from(until) + u16::from(FRESH) >= u16::from(now) + u16::from(PRESENCE)
        })
    }

    pub fn delayed(&self, now: Tick) -> bool {
        self.delayed_until > now
    }

    /// Nobody holds it and no lock-delay keeps it.
    pub fn free(&self, now: Tick) -> bool {
        self.places.is_empty() && !self.delayed(now)
    }
}

/// Why a session ended (`Ending` in `src/redis/sessions.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ending {
    /// Nobody kept it alive: its locks keep its lock-delay.
    Expired,
}

/// One session's keys in Redis (`session:{<handle>}`, its `:locks`, and
/// its entry in the deadline index).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Session {
    /// Alive while `now <= expires` (`expires` field, and its score in the
    /// deadline index).
    pub expires: Tick,
    /// Marked ended (`ended`), and when.
    pub ended: Option<(Ending, Tick)>,
    /// The end of the lock-delay its locks keep (`delayed_until`).
    pub delayed_until: Tick,
    /// The tokens of its locks (`:locks`), granted or being taken.
    pub locks: u8,
    /// Its keys and index entry are gone (`drop_ended`).
    pub dropped: bool,
}

impl Session {
    /// Alive for `session_keep.lua`, `session_join.lua`: not ended, not expired.
    pub fn alive(&self, now: Tick) -> bool {
        self.ended.is_none() && now <= self.expires
    }
}

/// Redis: its locks and sessions, and whether it runs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Redis {
    /// Frozen since this tick: no script runs.
    pub stalled_since: Option<Tick>,
    pub locks: PerLock<Lock>,
    pub sessions: PerSession<Session>,
}

impl Redis {
    pub fn new(scenario: &Scenario) -> Self {
        Self {
            stalled_since: None,
            locks: (0..scenario.locks)
                .map(|_| Lock::new(scenario.gateways))
                .collect(),
            sessions: scenario
                .sessions
                .iter()
                .map(|spec| Session {
                    expires: spec.ttl,
                    ended: None,
                    delayed_until: 0,
                    locks: 0,
                    dropped: false,
                })
                .collect(),
        }
    }

    pub fn runs(&self) -> bool {
        self.stalled_since.is_none()
    }

    pub fn lock(&self, key: Key) -> &Lock {
        &self.locks[usize::from(key.0)]
    }

    pub fn lock_mut(&mut self, key: Key) -> &mut Lock {
        &mut self.locks[usize::from(key.0)]
    }

    pub fn session(&self, session: Sess) -> &Session {
        &self.sessions[usize::from(session.0)]
    }

    pub fn session_mut(&mut self, session: Sess) -> &mut Session {
        &mut self.sessions[usize::from(session.0)]
    }

    /// Some place of any lock held under `token`.
    pub fn holds(&self, token: Req) -> bool {
        self.locks.iter().any(|lock| lock.place(token).is_some())
    }
}

/// Whether a gateway's process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Life {
    Up,
    /// Stopped by SIGSTOP at this tick.
    Paused {
        since: Tick,
    },
    /// Killed; it may start again with the same id.
    Down,
    /// Exited after SIGTERM.
    Stopped,
}

/// A tend planned from the gateway's waiting room and sent to Redis: the
/// waiters it names, each with its ticket and the end of its wait, and
/// those whose positions it asks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TendPlan {
    pub waiters: PerRequest<(Req, u8, Tick)>,
    /// The waiters whose positions are asked (streamed ones, or every one
    /// of a lock whose `check_all` was set).
    pub asked: u8,
}

/// A sweep under way on a gateway (`Sessions::finish`): the session it
/// ended, and the tokens whose locks it has still to end.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sweep {
    pub session: Sess,
    pub pending: u8,
    pub delayed_until: Tick,
}

/// One gateway instance.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Gateway {
    pub life: Life,
    /// SIGTERM received: waits end, nothing new starts, tending stops.
    pub closing: bool,
    /// At shutdown, its streamed locks have been released.
    pub streams_closed: bool,
    /// The next tending round.
    pub tend_at: Tick,
    /// A tend is wanted at once (`tend_soon`: a lapsed tend's `check_all`).
    pub tend_soon: bool,
    /// Per lock: every waiter's position is asked at the next tend.
    pub check_all: u8,
    /// A tend planned and not yet run.
    pub tending: Option<TendPlan>,
    /// It has run a tend since it (and Redis) last resumed.
    pub steady: bool,
    /// Its instance id in the waiting room (see [`Inst`]): which start of
    /// the process it is.
    pub start: u8,
    /// A session it is ending (the sweep's `finish`).
    pub sweeping: Option<Sweep>,
}

impl Gateway {
    pub fn new() -> Self {
        Self {
            life: Life::Up,
            closing: false,
            streams_closed: false,
            tend_at: 0,
            tend_soon: false,
            check_all: 0,
            tending: None,
            steady: true,
            sweeping: None,
            start: 0,
        }
    }

    pub fn up(&self) -> bool {
        self.life == Life::Up
    }

    /// Its process lives (running or paused): messages reach it.
    pub fn alive(&self) -> bool {
        matches!(self.life, Life::Up | Life::Paused { .. })
    }
}

impl Default for Gateway {
    fn default() -> Self {
        Self::new()
    }
}

/// Where a waiter stands, as its gateway last heard (`Standing` in
/// `src/locks/waiting/mod.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Standing {
    Queued,
    /// Offered a place, to claim (`<id> <fence> <ends>`).
    Granted,
    /// Granted its place outright, with this fencing token and lease's end
    /// (`<id> <fence> <ends> outright`): the gateway answers at once.
    Outright {
        fence: u16,
        ends: Tick,
    },
    /// Not in the queue and no grant heard (a tend that asked its
    /// position found none).
    Unaccounted,
}

impl Standing {
    /// A grant was heard (to claim, or outright).
    pub fn granted(self) -> bool {
        matches!(self, Standing::Granted | Standing::Outright { .. })
    }
}

/// Why a request ended without a grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// `409 lock-held`: its wait ended.
    Held,
    /// `503 shutting-down`.
    ShuttingDown,
    /// `404 session-not-found`: its session ended.
    SessionEnded,
    /// `409 deadlock`: its wait closed a cycle, as its youngest.
    Deadlock,
}

/// What the handover still has to do for a client that left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cleanup {
    /// Leave the queue (the leave script), then release what it says was granted.
    Leave,
    /// Release every hold of the token.
    Release,
}

/// A session's wait looking for a cycle (`deadlock.rs`): one read of
/// Redis a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Search {
    /// The next search is due at this tick (`CHECK_EVERY`, one tick).
    Idle { at: Tick },
    /// The start's wait (joined at `since`) and its lock's holders were
    /// read: the sessions holding it (a set); `confirming`: the keys of
    /// the cycle the first search saw, when this is the second.
    Holders {
        holders: u8,
        since: Tick,
        confirming: Option<Sighting>,
    },
    /// A cycle was seen, to search again: a moment later, or (with
    /// `Fixes::deadlock_renewed_presence`) more than a round later, once
    /// every live instance of it has renewed its presence.
    Seen { sighting: Sighting, since: Tick },
    /// Confirmed: the wait leaves and is answered `409 deadlock`.
    Refusing,
}

/// A cycle a deadlock search saw first: its keys, and the tick it was seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sighting {
    pub keys: u8,
    pub at: Tick,
}

/// A request's progress, on its gateway and at its client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Unsent,
    /// In its gateway's waiting room (its ticket registered there).
    Waiting {
        /// What the ticket holds now.
        standing: Standing,
        /// The ticket changed since the wait loop last looked: it acts on it.
        heard: bool,
        deadline: Tick,
        ticket: u8,
        search: Search,
    },
    /// Granted in a session; the session is to confirm it and the lock
    /// to take the session's lease (`Locks::attach`) before the answer.
    Attaching,
    /// Its client was answered `201` and holds `token` (its own, or the
    /// earlier grant an Idempotency-Key replayed) until `until`.
    Holding {
        token: Req,
        until: Tick,
    },
    /// Its client was answered that nothing was granted.
    Refused(Refusal),
    /// Its client left; the handover is undoing what it may hold.
    Disconnected(Cleanup),
    /// Over: released, expired, lost, or cleaned up after its client left.
    Finished,
    /// Its gateway died under it.
    Dead,
}

/// One client request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Request {
    pub phase: Phase,
    /// The token it acts with: its own id, or the one it shares with the
    /// request it waits with under an Idempotency-Key.
    pub token: Req,
    /// Its arrival (1 is first; 0 before it is sent).
    pub arrived: u8,
    /// Ticks in a row it has been left waiting, with its gateway and Redis
    /// running, while its lock was free.
    pub idle: Tick,
    /// Ticks in a row it has gone on waiting, its gateway and Redis
    /// running, after its session ended.
    pub orphaned: Tick,
    /// It was offered a place and did not claim it in time: passed over
    /// by design, so arrival order no longer speaks for it.
    pub forfeited: bool,
    /// A twin (a request under its Idempotency-Key, sharing its token)
    /// gave back the place it was offered before it could claim it.
    pub robbed: bool,
    /// It joined the queue at some point.
    pub waited: bool,
    /// The fencing token of the place it was answered `201` for (its own,
    /// shared, or replayed); 0 before.
    pub granted_fence: u16,
    /// It was answered `201` for a place of its own (not a replay).
    pub granted: bool,
    /// It was answered on a grant made outright (no claim).
    pub outright: bool,
    /// It was sent while another request under its Idempotency-Key was
    /// waiting (a retry of a request whose answer is late).
    pub overlapped: bool,
    /// When its gateway died under it.
    pub died_at: Tick,
    /// A real cycle of waits ran through its wait at some moment since its
    /// search for one (the first of two) began.
    pub cycle_seen: bool,
}

impl Request {
    fn new(id: Req) -> Self {
        Self {
            phase: Phase::Unsent,
            token: id,
            arrived: 0,
            idle: 0,
            orphaned: 0,
            forfeited: false,
            robbed: false,
            waited: false,
            granted_fence: 0,
            granted: false,
            outright: false,
            overlapped: false,
            died_at: 0,
            cycle_seen: false,
        }
    }

    /// The client was answered that nothing was granted.
    pub fn refused(&self) -> bool {
        matches!(self.phase, Phase::Refused(_))
    }

    /// The request is over for its client and its gateway.
    pub fn ended(&self) -> bool {
        matches!(self.phase, Phase::Refused(_) | Phase::Finished)
    }

    pub fn waiting(&self) -> bool {
        matches!(self.phase, Phase::Waiting { .. })
    }
}

/// What the monitors saw break (properties about the past).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Broken {
    /// A place went to a request while an earlier one that kept running waited.
    pub arrival_order: bool,
    /// A fencing token no larger than an earlier one.
    pub fencing: bool,
    /// A place went to a request that had already ended.
    pub granted_after_end: bool,
    /// A session's lock was freed while its session had not expired.
    pub freed_before_expiry: bool,
    /// A place was granted before a lock-delay ended.
    pub lock_delay: bool,
    /// A wait was answered `deadlock` though no real cycle ran through it
    /// during its search, or though it no longer waited.
    pub false_deadlock: bool,
    /// A place was offered to a waiter whose gateway died more than a
    /// presence earlier.
    pub offered_to_dead: bool,
    /// A place was granted outright to a waiter whose gateway died more
    /// than `FRESH` earlier.
    pub outright_to_dead: bool,
    /// A place a client was answered `201` for was given back by another
    /// request's script (a twin's `leave.lua`).
    pub grant_taken: bool,
    /// A client was answered `201` on a grant message alone (made
    /// outright) once the lease it told of was over.
    pub answered_after_lease: bool,
}

/// How many of each fault have struck.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Struck {
    pub pauses: u8,
    pub crashes: u8,
    pub shutdowns: u8,
    pub stalls: u8,
    pub revokes: u8,
    pub inspects: u8,
}

/// Everything at one moment.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub now: Tick,
    pub redis: Redis,
    pub gateways: PerGateway<Gateway>,
    pub requests: PerRequest<Request>,
    /// The sessions whose streamed keeper still keeps them (a set).
    pub kept: u8,
    /// Requests sent so far (arrivals are numbered from 1).
    pub arrivals: u8,
    pub struck: Struck,
    pub broken: Broken,
    /// Per lock: no place may be granted before this tick (the lock-delay
    /// the contract owes, as the monitor reckons it).
    pub delay_owed: PerLock<Tick>,
    /// Ticks in a row a cycle of waits on running gateways has stood.
    pub cycle_for: Tick,
}

impl State {
    pub fn new(scenario: &Scenario) -> Self {
        let kept = scenario
            .sessions
            .iter()
            .enumerate()
            .filter(|(_, spec)| spec.keeper.is_some())
            .fold(0, |set, (index, _)| set | (1 << index));
        Self {
            now: 0,
            redis: Redis::new(scenario),
            gateways: (0..scenario.gateways).map(|_| Gateway::new()).collect(),
            requests: (0..scenario.requests.len() as u8)
                .map(|id| Request::new(Req(id)))
                .collect(),
            kept,
            arrivals: 0,
            struck: Struck::default(),
            broken: Broken::default(),
            delay_owed: (0..scenario.locks).map(|_| 0).collect(),
            cycle_for: 0,
        }
    }

    pub fn gateway(&self, gw: Gw) -> &Gateway {
        &self.gateways[usize::from(gw.0)]
    }

    pub fn gateway_mut(&mut self, gw: Gw) -> &mut Gateway {
        &mut self.gateways[usize::from(gw.0)]
    }

    pub fn request(&self, req: Req) -> &Request {
        &self.requests[usize::from(req.0)]
    }

    pub fn request_mut(&mut self, req: Req) -> &mut Request {
        &mut self.requests[usize::from(req.0)]
    }

    /// Every request, by id.
    pub fn ids(&self) -> impl Iterator<Item = Req> + use<> {
        (0..self.requests.len() as u8).map(Req)
    }

    /// The requests that act with `token`.
    pub fn sharing(&self, token: Req) -> impl Iterator<Item = Req> + '_ {
        self.ids()
            .filter(move |&id| self.request(id).token == token)
    }
}
