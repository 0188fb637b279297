//! The state of one run: Redis (one lock's keys), the gateways, the clients' requests, and the monitors that remember what a property needs from the past.

use arrayvec::ArrayVec;

use crate::scenario::{Gw, MAX_GATEWAYS, MAX_REQUESTS, Req, Scenario, Tick};

/// A list with room for every request, kept in the state itself (no heap:
/// cloning and hashing states is most of the checker's work).
pub type PerRequest<T> = ArrayVec<T, MAX_REQUESTS>;
/// A list with room for every gateway.
pub type PerGateway<T> = ArrayVec<T, MAX_GATEWAYS>;

/// A place in the lock: a holder, or a waiter offered the place from the
/// queue and not yet claimed (`lock` hash, or `holders` for many).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Place {
    pub token: Req,
    pub fence: u16,
    /// The lease's end: held while `now < ends`.
    pub ends: Tick,
    /// Offered from the queue, not yet claimed with an extension.
    pub offered: bool,
}

/// A waiter's entry in the queue (`queue` sorted set and `waiters` hash).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    pub id: Req,
    pub ticket: u8,
    /// The instance it waits on.
    pub inst: Gw,
    /// The end of its wait (Redis clock).
    pub deadline: Tick,
}

/// One lock's keys in Redis, and whether Redis runs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Redis {
    /// Frozen since this tick: no script runs.
    pub stalled_since: Option<Tick>,
    /// The live places, by token.
    pub places: PerRequest<Place>,
    /// The last fencing token issued (`fence` key).
    pub last_fence: u16,
    /// The queue, in (ticket, id) order: a sorted set orders equal scores
    /// by member.
    pub queue: PerRequest<Entry>,
    /// Each instance's presence deadline (`@<instance>` in `waiters`).
    pub presence: PerGateway<Option<Tick>>,
    /// The last ticket (`#seq` in `waiters`).
    pub seq: u8,
    /// Entries dropped because their instance's presence lapsed, kept
    /// aside until their wait ends (the fixed protocol only).
    pub dropped: PerRequest<Entry>,
}

impl Redis {
    pub fn new(gateways: u8) -> Self {
        Self {
            stalled_since: None,
            places: ArrayVec::new(),
            last_fence: 0,
            queue: ArrayVec::new(),
            presence: (0..gateways).map(|_| None).collect(),
            seq: 0,
            dropped: ArrayVec::new(),
        }
    }

    pub fn runs(&self) -> bool {
        self.stalled_since.is_none()
    }

    pub fn place(&self, token: Req) -> Option<&Place> {
        self.places.iter().find(|place| place.token == token)
    }

    pub fn queued(&self, id: Req) -> Option<&Entry> {
        self.queue.iter().find(|entry| entry.id == id)
    }

    pub fn present(&self, inst: Gw, now: Tick) -> bool {
        self.presence[usize::from(inst.0)].is_some_and(|until| until >= now)
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
/// waiters it names, each with its ticket and the end of its wait.
pub type TendPlan = PerRequest<(Req, u8, Tick)>;

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
    /// A tend planned and not yet run.
    pub tending: Option<TendPlan>,
    /// It has run a tend since it (and Redis) last resumed.
    pub steady: bool,
}

impl Gateway {
    pub fn new() -> Self {
        Self {
            life: Life::Up,
            closing: false,
            streams_closed: false,
            tend_at: 0,
            tending: None,
            steady: true,
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
    Granted,
    /// Not in the queue and no grant heard (only asked of waiters that
    /// report their position: streamed ones).
    Unaccounted,
}

/// Why a request ended without a grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// `409 lock-held`: its wait ended.
    Held,
    /// `503 shutting-down`.
    ShuttingDown,
}

/// What the handover still has to do for a client that left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cleanup {
    /// Leave the queue (the leave script), then release what it says was granted.
    Leave,
    /// Release every hold of the token.
    Release,
}

/// A request's progress, on its gateway and at its client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Unsent,
    /// In its gateway's waiting room (its ticket registered there).
    Waiting {
        standing: Standing,
        deadline: Tick,
        ticket: u8,
    },
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
    /// Its arrival (1 is first; 0 before it is sent).
    pub arrived: u8,
    /// Ticks in a row it has been left waiting, with its gateway and Redis
    /// running, while the lock was free.
    pub idle: Tick,
    /// It was offered a place and did not claim it in time: passed over
    /// by design, so arrival order no longer speaks for it.
    pub forfeited: bool,
    /// It joined the queue at some point.
    pub waited: bool,
    /// It was answered `201` for a place of its own (not a replay).
    pub granted: bool,
    /// It was sent while another request under its Idempotency-Key was
    /// waiting (a retry of a request whose answer is late).
    pub overlapped: bool,
}

impl Request {
    fn new() -> Self {
        Self {
            phase: Phase::Unsent,
            arrived: 0,
            idle: 0,
            forfeited: false,
            waited: false,
            granted: false,
            overlapped: false,
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
    /// Requests sent so far (arrivals are numbered from 1).
    pub arrivals: u8,
    pub struck: Struck,
    pub broken: Broken,
}

impl State {
    pub fn new(scenario: &Scenario) -> Self {
        Self {
            now: 0,
            redis: Redis::new(scenario.gateways),
            gateways: (0..scenario.gateways).map(|_| Gateway::new()).collect(),
            requests: scenario.requests.iter().map(|_| Request::new()).collect(),
            arrivals: 0,
            struck: Struck::default(),
            broken: Broken::default(),
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
}
