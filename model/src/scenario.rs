//! What one check covers: the time base, the gateways, the requests the clients make, the faults that may strike, and which protocol the gateways and scripts follow.

use std::fmt;

/// Time in ticks. One tick is one tending round (`ROUND` in
/// `src/locks/waiting/tending.rs`, 300 ms).
pub type Tick = u8;

/// The most requests and gateways a scenario may have (the state keeps
/// room for them inline).
pub const MAX_REQUESTS: usize = 6;
pub const MAX_GATEWAYS: usize = 3;

/// Milliseconds in a tick, for the traces.
pub const TICK_MS: u32 = 300;
/// An instance's presence in a queue (`PRESENCE_MS` = 1000 in
/// `lua/lib/queue.lua`): renewed at tick t it stands until t + 3 and has
/// lapsed at t + 4 (1.2 s; three missed rounds, as the gateway says).
pub const PRESENCE: Tick = 3;
/// How long a place offered from the queue stands unclaimed (`OFFER_MS`).
pub const OFFER: Tick = 3;
/// How many ticks a waiter whose gateway and Redis keep running may be
/// left waiting while the lock is free: the place must reach it by the
/// next round or the one after.
pub const SERVED_WITHIN: Tick = 2;

/// A gateway instance (A, B, C). A restarted gateway keeps its id, as
/// `<hostname>:<port>` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gw(pub u8);

impl fmt::Display for Gw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", char::from(b'A' + self.0))
    }
}

/// A client's request (its index in the scenario). It is also the
/// request's owner token and its waiter id in the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Req(pub u8);

/// What a client does with a plain lock it was granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Releases it (`DELETE`) at a moment of its choosing, or lets the
    /// lease end it.
    Releases,
    /// Never releases it: the lease ends it (a client that gave up on
    /// this request, as when its answer was lost and it retried).
    Keeps,
}

/// One request a client makes.
#[derive(Clone, Debug)]
pub struct RequestSpec {
    pub name: &'static str,
    pub gateway: Gw,
    /// A streamed lock (`POST /locks/{key}/stream`): renewed by its gateway
    /// while its client stays, released when it leaves; while it waits, its
    /// gateway asks its position at every tending.
    pub streamed: bool,
    /// How long it may wait in the queue, in ticks (0: no wait).
    pub wait: Tick,
    /// Its lease, in ticks.
    pub ttl: Tick,
    /// Its Idempotency-Key (requests with the same key have the same body).
    pub idempotency_key: Option<u8>,
    /// Its client may disconnect while it waits (or, streamed, while it holds).
    pub may_disconnect: bool,
    pub hold: Hold,
}

impl RequestSpec {
    /// A plain request on `gateway` that waits up to `wait` ticks for a
    /// lease of `ttl` ticks, and releases it when its client likes.
    pub fn plain(name: &'static str, gateway: u8, wait: Tick, ttl: Tick) -> Self {
        Self {
            name,
            gateway: Gw(gateway),
            streamed: false,
            wait,
            ttl,
            idempotency_key: None,
            may_disconnect: false,
            hold: Hold::Releases,
        }
    }

    /// A streamed request (see [`RequestSpec::streamed`]).
    pub fn streamed(name: &'static str, gateway: u8, wait: Tick, ttl: Tick) -> Self {
        Self {
            streamed: true,
            ..Self::plain(name, gateway, wait, ttl)
        }
    }

    pub fn with_key(mut self, key: u8) -> Self {
        self.idempotency_key = Some(key);
        self
    }

    pub fn disconnecting(mut self) -> Self {
        self.may_disconnect = true;
        self
    }

    pub fn keeping(mut self) -> Self {
        self.hold = Hold::Keeps;
        self
    }
}

/// A fault that may strike some gateways, with how long it lasts.
#[derive(Clone, Debug, Default)]
pub struct Fault {
    /// How many times it may strike in one run.
    pub times: u8,
    /// The gateways it may strike.
    pub gateways: Vec<Gw>,
    /// Shortest and longest duration, in ticks (pauses and stalls).
    pub lasts: (Tick, Tick),
}

impl Fault {
    pub fn on(gateways: &[u8], times: u8) -> Self {
        Self {
            times,
            gateways: gateways.iter().map(|&g| Gw(g)).collect(),
            lasts: (0, 0),
        }
    }

    pub fn lasting(mut self, shortest: Tick, longest: Tick) -> Self {
        self.lasts = (shortest, longest);
        self
    }

    pub fn strikes(&self, gateway: Gw) -> bool {
        self.gateways.contains(&gateway)
    }
}

/// The faults a run may meet.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// SIGSTOP, then SIGCONT.
    pub pause: Fault,
    /// The process dies (SIGKILL) and comes back with the same id.
    pub crash: Fault,
    /// SIGTERM: waits answer 503, streamed locks are released, then it exits.
    pub shutdown: Fault,
    /// Redis frozen (`DEBUG SLEEP`, SIGSTOP): no script runs, its clock goes on.
    pub redis_stall: Fault,
    /// An operator revokes the lock (`DELETE ?force=true`).
    pub revokes: u8,
    /// Someone reads the lock (`GET /locks/{key}`), which drops dead waiters.
    pub inspects: u8,
}

/// The protocol the scripts and gateways follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// As the repository has it today.
    AsItWas,
    /// The fixes as first proposed: every tend re-enqueues each local
    /// waiter that is neither queued nor holding, at its own ticket; a
    /// waiter answered 503 at shutdown leaves and releases in one script.
    Proposed,
    /// The proposed fixes with what the model showed they also need.
    Fixed,
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [Protocol::AsItWas, Protocol::Proposed, Protocol::Fixed];

    pub fn name(self) -> &'static str {
        match self {
            Protocol::AsItWas => "as-it-was",
            Protocol::Proposed => "proposed",
            Protocol::Fixed => "fixed",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|protocol| protocol.name() == name)
    }

    pub fn fixes(self) -> Fixes {
        match self {
            Protocol::AsItWas => Fixes {
                retend: Retend::Off,
                shutdown_leave_releases: false,
                keep_ticket_counter: false,
            },
            Protocol::Proposed => Fixes {
                retend: Retend::LocalWaiters,
                shutdown_leave_releases: true,
                keep_ticket_counter: false,
            },
            Protocol::Fixed => Fixes {
                retend: Retend::DroppedWaiters,
                shutdown_leave_releases: true,
                keep_ticket_counter: true,
            },
        }
    }
}

/// Which waiters a tend puts back in the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retend {
    /// None (as it was).
    Off,
    /// Every waiter the gateway names that is neither in the queue nor a
    /// holder, at the ticket the gateway remembers.
    LocalWaiters,
    /// Only the entries Redis dropped because their instance's presence
    /// lapsed (kept aside, with their ticket, until their wait ends), and
    /// only those the gateway still names.
    DroppedWaiters,
}

/// The changes to the protocol, one switch each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fixes {
    pub retend: Retend,
    /// A waiter answered 503 at shutdown leaves with a script that also
    /// releases a place it was granted meanwhile.
    pub shutdown_leave_releases: bool,
    /// The ticket counter (`#seq`) outlives an empty queue, so a ticket
    /// put back never ties with a newcomer's.
    pub keep_ticket_counter: bool,
}

/// One configuration to check.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    pub gateways: u8,
    /// Places of the lock: 1 for a plain lock, more for a counting lock.
    pub limit: u8,
    pub requests: Vec<RequestSpec>,
    pub faults: Faults,
    /// Time stops here.
    pub horizon: Tick,
    /// Requests are sent in the order listed (each at any tick after the one before).
    pub in_order: bool,
    /// The properties each protocol is expected to break here (as
    /// counterexamples the checker must find); every other one must hold.
    pub breaks: Vec<(Protocol, Vec<&'static str>)>,
}

impl Scenario {
    pub fn spec(&self, request: Req) -> &RequestSpec {
        &self.requests[usize::from(request.0)]
    }

    pub fn name_of(&self, request: Req) -> &'static str {
        self.spec(request).name
    }

    /// The properties `protocol` is expected to break here.
    pub fn expected_breaks(&self, protocol: Protocol) -> &[&'static str] {
        self.breaks
            .iter()
            .find(|(p, _)| *p == protocol)
            .map_or(&[], |(_, names)| names.as_slice())
    }
}
