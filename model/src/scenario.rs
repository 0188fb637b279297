//! What one check covers: the time base, the gateways, the locks, the sessions, the requests the clients make, the faults that may strike, and which protocol the gateways and scripts follow.

use std::fmt;

/// Time in ticks. One tick is one tending round (`ROUND` in
/// `src/locks/waiting/tending.rs`, 300 ms).
pub type Tick = u8;

/// The most requests, gateways, locks and sessions a scenario may have
/// (the state keeps room for them inline).
pub const MAX_REQUESTS: usize = 6;
pub const MAX_GATEWAYS: usize = 3;
pub const MAX_LOCKS: usize = 2;
pub const MAX_SESSIONS: usize = 2;

/// Milliseconds in a tick, for the traces.
pub const TICK_MS: u32 = 300;
/// An instance's presence in a queue (`PRESENCE_MS` = 1000 in
/// `lua/lib/queue.lua`): renewed at tick t it stands until t + 3 and has
/// lapsed at t + 4 (1.2 s; three missed rounds, as the gateway says).
pub const PRESENCE: Tick = 3;
/// How long an instance may be away before its waiters lose their places
/// (`AWAY_MS` = 10000): a presence that stood until t is gone at t + 34
/// (10 s after it lapsed, a tick at most later).
pub const AWAY: Tick = 33;
/// How long a place offered from the queue stands unclaimed (`OFFER_MS`).
pub const OFFER: Tick = 3;
/// How recent a presence must be for its waiter to be granted outright
/// (`FRESH_MS` = 500): renewed at tick t (its deadline t + 3), it is fresh
/// through t + 1, while the deadline is at least now + `PRESENCE` -
/// `FRESH` (a running gateway renews it every tick).
pub const FRESH: Tick = 1;
/// How late a grant made outright may be read for its request to be
/// answered without a write (`HEARD_LATE` = 500 ms in
/// `src/locks/acquire/attempts.rs`): read at the grant's tick or the next;
/// later (its gateway paused), it is claimed as an offer is.
pub const HEARD_LATE: Tick = 1;
/// How many ticks a waiter whose gateway and Redis keep running may be
/// left waiting while the lock is free: the place must reach it by the
/// next round or the one after.
pub const SERVED_WITHIN: Tick = 2;
/// How many ticks a running waiter may go on waiting once its session
/// has ended (the API: answered within 1 s).
pub const SESSION_ANSWERED_WITHIN: Tick = 3;
/// How many ticks a cycle of waits on running gateways may stand
/// unanswered (the API: detected within 1 s of closing).
pub const DEADLOCK_ANSWERED_WITHIN: Tick = 3;
/// A lease that ends only with its session (`SESSION_LEASE` in
/// `lua/lib/holders.lua`): never, in ticks.
pub const FOREVER: Tick = Tick::MAX;

/// A gateway (A, B, C): its host and port, the same after a restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gw(pub u8);

impl fmt::Display for Gw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", char::from(b'A' + self.0))
    }
}

/// How many starts of one gateway's process the state tells apart (a
/// scenario crashes a gateway once at most).
pub const STARTS: usize = 2;

/// A gateway's instance id in the waiting room (the `inst` of queue
/// entries, `@<instance>` presences, the grant channel): with a fresh id
/// per start (`<instance id>#<nonce>`), `start` counts the process's
/// starts; without, it stays 0 (`<hostname>:<port>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Inst {
    pub gw: Gw,
    pub start: u8,
}

impl fmt::Display for Inst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.start {
            0 => write!(f, "{}", self.gw),
            n => write!(f, "{}#{}", self.gw, n + 1),
        }
    }
}

/// A client's request (its index in the scenario). It is also the
/// request's owner token and its waiter id in the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Req(pub u8);

impl Req {
    /// The request's bit in a set of requests.
    pub fn bit(self) -> u8 {
        1 << self.0
    }
}

/// A lock key (x, y): each has its own keys in Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(pub u8);

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", char::from(b'x' + self.0))
    }
}

/// A session (S1, S2): one lease that locks hang on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sess(pub u8);

impl Sess {
    pub fn bit(self) -> u8 {
        1 << self.0
    }
}

impl fmt::Display for Sess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "S{}", self.0 + 1)
    }
}

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
    /// The lock it takes (a batch's first).
    pub key: Key,
    /// A batch (`POST /locks/batch`, on one Redis): its second lock; it
    /// takes both or neither (never streamed, in a session, or under an
    /// Idempotency-Key here).
    pub also: Option<Key>,
    /// A streamed lock (`POST /locks/{key}/stream`): renewed by its gateway
    /// while its client stays, released when it leaves; while it waits, its
    /// gateway asks its position at every tending.
    pub streamed: bool,
    /// How long it may wait in the queue, in ticks (0: no wait).
    pub wait: Tick,
    /// Its lease, in ticks (a session's lock: its session's).
    pub ttl: Tick,
    /// Its Idempotency-Key (requests with the same key have the same body).
    pub idempotency_key: Option<u8>,
    /// The session it is taken in.
    pub session: Option<Sess>,
    /// Its client may disconnect while it waits (or, streamed, while it holds).
    pub may_disconnect: bool,
    pub hold: Hold,
    /// Sent only after this request was (when the scenario's requests are
    /// not sent in the order listed).
    pub after: Option<Req>,
}

impl RequestSpec {
    /// A plain request on `gateway` for lock x that waits up to `wait`
    /// ticks for a lease of `ttl` ticks, and releases it when its client likes.
    pub fn plain(name: &'static str, gateway: u8, wait: Tick, ttl: Tick) -> Self {
        Self {
            name,
            gateway: Gw(gateway),
            key: Key(0),
            also: None,
            streamed: false,
            wait,
            ttl,
            idempotency_key: None,
            session: None,
            may_disconnect: false,
            hold: Hold::Releases,
            after: None,
        }
    }

    /// A streamed request (see [`RequestSpec::streamed`]).
    pub fn streamed(name: &'static str, gateway: u8, wait: Tick, ttl: Tick) -> Self {
        Self {
            streamed: true,
            ..Self::plain(name, gateway, wait, ttl)
        }
    }

    /// The same request for another lock.
    pub fn on(mut self, key: u8) -> Self {
        self.key = Key(key);
        self
    }

    /// A batch of lock `first` then lock `second`, on `gateway`, that
    /// waits up to `wait` ticks for a lease of `ttl` ticks on both.
    pub fn batch(
        name: &'static str,
        gateway: u8,
        first: u8,
        second: u8,
        wait: Tick,
        ttl: Tick,
    ) -> Self {
        Self {
            key: Key(first),
            also: Some(Key(second)),
            ..Self::plain(name, gateway, wait, ttl)
        }
    }

    /// Its locks, in its order.
    pub fn keys(&self) -> impl Iterator<Item = Key> + use<> {
        std::iter::once(self.key).chain(self.also)
    }

    /// Whether it takes lock `key`.
    pub fn covers(&self, key: Key) -> bool {
        self.key == key || self.also == Some(key)
    }

    pub fn is_batch(&self) -> bool {
        self.also.is_some()
    }

    pub fn with_key(mut self, key: u8) -> Self {
        self.idempotency_key = Some(key);
        self
    }

    /// Taken in session `session` (0 is S1).
    pub fn in_session(mut self, session: u8) -> Self {
        self.session = Some(Sess(session));
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

    /// Sent only after request `index` was.
    pub fn after(mut self, index: u8) -> Self {
        self.after = Some(Req(index));
        self
    }
}

/// One session a client opened before the run begins.
#[derive(Clone, Debug)]
pub struct SessionSpec {
    /// Its lease, in ticks.
    pub ttl: Tick,
    /// Its lock-delay, in ticks.
    pub lock_delay: Tick,
    /// The gateway that keeps it alive (a streamed session, renewed every
    /// third of its lease), if any; else nobody keeps it.
    pub keeper: Option<Gw>,
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
    /// The same for the second strike and after, if they differ.
    pub then_lasts: Option<(Tick, Tick)>,
}

impl Fault {
    pub fn on(gateways: &[u8], times: u8) -> Self {
        Self {
            times,
            gateways: gateways.iter().map(|&g| Gw(g)).collect(),
            lasts: (0, 0),
            then_lasts: None,
        }
    }

    pub fn lasting(mut self, shortest: Tick, longest: Tick) -> Self {
        self.lasts = (shortest, longest);
        self
    }

    /// The second strike (and after) lasts this long.
    pub fn then_lasting(mut self, shortest: Tick, longest: Tick) -> Self {
        self.then_lasts = Some((shortest, longest));
        self
    }

    /// How long the strike numbered `strike` (1 is the first) lasts.
    pub fn lasts_for(&self, strike: u8) -> (Tick, Tick) {
        match (strike, self.then_lasts) {
            (2.., Some(lasts)) => lasts,
            _ => self.lasts,
        }
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
    /// The process dies (SIGKILL) and starts again on the same host and port.
    pub crash: Fault,
    /// SIGTERM: waits answer 503, streamed locks are released, then it exits.
    pub shutdown: Fault,
    /// Redis frozen (`DEBUG SLEEP`, SIGSTOP): no script runs, its clock goes on.
    pub redis_stall: Fault,
    /// An operator revokes a lock (`DELETE ?force=true`).
    pub revokes: u8,
    /// Someone reads a lock (`GET /locks/{key}`), which drops dead waiters.
    pub inspects: u8,
}

/// The protocol the scripts and gateways follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// Before the fixes: a waiter whose instance's presence lapsed is
    /// dropped from the queue; shutdown claims a grant and answers 503;
    /// each request under an Idempotency-Key waits on its own.
    AsItWas,
    /// The fixes as first proposed: every tend re-enqueues each local
    /// waiter that is neither queued nor holding, at its own ticket; a
    /// waiter answered 503 at shutdown leaves and releases in one script.
    Proposed,
    /// The repository before the fixes of what the model found in its
    /// sessions, deadlock detection and restarts: a wait refused
    /// `deadlock` gives back a place granted meanwhile, the search counts
    /// a crashed gateway's waiter, a restarted gateway renews its dead
    /// predecessor's presence, a requeued waiter keeps a stale standing,
    /// and a waiter under an Idempotency-Key answered 503 keeps its offer.
    BeforeModel,
    /// The repository as it is: an away waiter keeps its place (for
    /// `AWAY_MS`), a tend that finds the instance was away longer has it
    /// ask where each waiter stands, shutdown gives back what was offered,
    /// Idempotency-Key twins share one ticket and token; sessions,
    /// lock-delay and deadlock detection; the five fixes that
    /// `BeforeModel` lacks; and the one-write hand-off (data format 2).
    Fixed,
}

impl Protocol {
    pub const ALL: [Protocol; 4] = [
        Protocol::AsItWas,
        Protocol::Proposed,
        Protocol::BeforeModel,
        Protocol::Fixed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Protocol::AsItWas => "as-it-was",
            Protocol::Proposed => "proposed",
            Protocol::BeforeModel => "before-model",
            Protocol::Fixed => "fixed",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|protocol| protocol.name() == name)
    }

    pub fn fixes(self) -> Fixes {
        let fixed = Fixes {
            retend: Retend::Off,
            away_keeps_place: true,
            check_when_lapsed: true,
            shutdown_gives_back: true,
            keep_ticket_counter: false,
            idempotency_twins: true,
            deadlock_waits_here: true,
            deadlock_renewed_presence: true,
            deadlock_claims_grant: true,
            fresh_instance_id: true,
            requeue_resets_standing: true,
            // Not taken: giving back a keyed offer at shutdown takes a
            // twin's claimed grant away (see `shutdown_twin`).
            shutdown_gives_back_keyed: false,
            give_back_alone: false,
            one_write_handoff: true,
            short_lease_heard_late: true,
            mutant: None,
        };
        let before_model = Fixes {
            one_write_handoff: false,
            deadlock_waits_here: false,
            deadlock_renewed_presence: false,
            deadlock_claims_grant: false,
            fresh_instance_id: false,
            requeue_resets_standing: false,
            shutdown_gives_back_keyed: false,
            ..fixed
        };
        match self {
            Protocol::AsItWas => Fixes {
                away_keeps_place: false,
                check_when_lapsed: false,
                shutdown_gives_back: false,
                idempotency_twins: false,
                ..before_model
            },
            Protocol::Proposed => Fixes {
                retend: Retend::LocalWaiters,
                away_keeps_place: false,
                check_when_lapsed: false,
                idempotency_twins: false,
                ..before_model
            },
            Protocol::BeforeModel => before_model,
            Protocol::Fixed => fixed,
        }
    }
}

/// Which waiters a tend puts back in the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Retend {
    /// None.
    Off,
    /// Every waiter the gateway names that is neither in the queue nor a
    /// holder, at the ticket the gateway remembers (proposed).
    LocalWaiters,
}

/// A deliberately broken variant of the fixed protocol: each breaks one
/// property, to show that the check of that property can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// The sweep ends a session at its expiry instant, not after it.
    SweepEarly,
    /// A session's end (and a revocation) frees its locks with no lock-delay.
    NoLockDelay,
    /// A cycle seen once is answered `deadlock`, without the second search.
    DeadlockUnconfirmed,
    /// A batch takes each of its locks that has a place for it at once,
    /// and waits for the rest (one key at a time, not all or none).
    BatchKeyByKey,
    /// No search for cycles of waits.
    NoDeadlockSearch,
    /// A wait does not end when its session does.
    IgnoreSessionEnd,
    /// `serve` grants a waiter with `one` outright whatever its presence's
    /// age (the freshness check skipped): a waiter whose gateway died a
    /// moment too early holds the lock its whole lease.
    OutrightStale,
}

impl Mutant {
    pub const ALL: [Mutant; 7] = [
        Mutant::SweepEarly,
        Mutant::NoLockDelay,
        Mutant::DeadlockUnconfirmed,
        Mutant::BatchKeyByKey,
        Mutant::NoDeadlockSearch,
        Mutant::IgnoreSessionEnd,
        Mutant::OutrightStale,
    ];

    /// Its command-line switch (without the dashes).
    pub fn name(self) -> &'static str {
        match self {
            Mutant::SweepEarly => "sweep-early",
            Mutant::NoLockDelay => "no-lock-delay",
            Mutant::DeadlockUnconfirmed => "deadlock-unconfirmed",
            Mutant::BatchKeyByKey => "batch-key-by-key",
            Mutant::NoDeadlockSearch => "no-deadlock-search",
            Mutant::IgnoreSessionEnd => "ignore-session-end",
            Mutant::OutrightStale => "outright-stale",
        }
    }
}

/// The changes to the protocol, one switch each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fixes {
    pub retend: Retend,
    /// A waiter whose instance's presence lapsed is passed over but keeps
    /// its place until the instance has been away `AWAY_MS` (else it is
    /// dropped as soon as the presence lapses).
    pub away_keeps_place: bool,
    /// `tend.lua` answers `lapsed` when the instance was away past
    /// `AWAY_MS` (or the queue is gone); the gateway then asks where each
    /// of its waiters stands, and one no longer queued queues again.
    pub check_when_lapsed: bool,
    /// A waiter answered 503 at shutdown leaves with a script that also
    /// gives back a place it was offered meanwhile.
    pub shutdown_gives_back: bool,
    /// The ticket counter (`#seq`) outlives an empty queue.
    pub keep_ticket_counter: bool,
    /// Requests under one Idempotency-Key waiting at once share one ticket
    /// and token (`~<idem>` in the waiters hash), so one grant serves them.
    pub idempotency_twins: bool,
    /// The deadlock search's `waits_of` counts a queued wait only while
    /// its instance's presence is current by Redis's clock (before: it
    /// read the queue entry, present or not).
    pub deadlock_waits_here: bool,
    /// A cycle is confirmed by a second search more than a tending round
    /// after the first (two ticks), counting only the waits whose
    /// instance renewed its presence in between, so that a gateway killed
    /// a moment ago (its presence still current) closes no cycle (before:
    /// the second search 100 ms later, within the tick).
    pub deadlock_renewed_presence: bool,
    /// A wait refused `deadlock` leaves keeping a place it was granted
    /// meanwhile (`IfGranted::Keep`), claims it and answers the grant
    /// (before: it gave it back and answered `deadlock`).
    pub deadlock_claims_grant: bool,
    /// The waiting room's instance id is `<instance id>#<nonce>`, new with
    /// each start of the process, so a restarted gateway never renews its
    /// dead predecessor's presence (before: `<hostname>:<port>`, the same
    /// after a restart).
    pub fresh_instance_id: bool,
    /// A waiter that attempts again has its ticket's standing reset to
    /// `Queued { position: 0 }` first (before: `Ticket::joined` set only a
    /// queued standing, so a stale grant or unaccounted one stood).
    pub requeue_resets_standing: bool,
    /// At shutdown a waiter under an Idempotency-Key gives back what it was
    /// granted from the queue too (before: it kept it, for a twin or a retry).
    pub shutdown_gives_back_keyed: bool,
    /// `leave.lua` gives back only a grant from the queue (an offer, or
    /// one made outright) that nobody claimed and that no twin (a request
    /// under the same Idempotency-Key, sharing the token) was told of and
    /// has yet to leave; else it answers `kept` (not the repository's; see
    /// the `shutdown-twin` scenario).
    pub give_back_alone: bool,
    /// The one-write hand-off (data format 2): a head waiter whose entry
    /// has `one` and whose instance's presence is fresh (renewed within
    /// `FRESH_MS`) is granted its whole lease at once, and its gateway
    /// answers without a write; any other is offered the place, to claim
    /// (before: every waiter offered, every grant claimed with
    /// `extend.lua`).
    pub one_write_handoff: bool,
    /// A grant made outright is taken for heard late, and claimed (so
    /// found gone if its lease ended), once more than `HEARD_LATE` or half
    /// its lease went by (before: `HEARD_LATE` alone, so that a lease no
    /// longer than it was answered on the message whenever read, ended or
    /// not; see the `frozen-short-lease` scenario).
    pub short_lease_heard_late: bool,
    pub mutant: Option<Mutant>,
}

impl Fixes {
    pub fn is(&self, mutant: Mutant) -> bool {
        self.mutant == Some(mutant)
    }
}

/// A rule a protocol does not have yet: its switch as the command line
/// writes it (`--give-back-alone on`), and the change to the fixes.
pub type Variant = (&'static str, fn(Fixes) -> Fixes);

/// One protocol (or mutant of it) checked on a scenario, with the
/// properties it is expected to break there.
#[derive(Clone, Debug)]
pub struct Expect {
    pub protocol: Protocol,
    pub mutant: Option<Mutant>,
    /// A variant of the protocol: a rule it does not have yet, named as
    /// its switch (`--give-back-alone on`), and the change.
    pub variant: Option<Variant>,
    pub breaks: Vec<&'static str>,
    /// Checked only with `--deep`.
    pub deep: bool,
}

impl Expect {
    pub fn new(protocol: Protocol, breaks: &[&'static str]) -> Self {
        Self {
            protocol,
            mutant: None,
            variant: None,
            breaks: breaks.to_vec(),
            deep: false,
        }
    }

    /// `protocol` with a rule changed (`switch` names it), expected to
    /// break `breaks`.
    pub fn variant(
        protocol: Protocol,
        switch: &'static str,
        change: fn(Fixes) -> Fixes,
        breaks: &[&'static str],
    ) -> Self {
        Self {
            variant: Some((switch, change)),
            ..Self::new(protocol, breaks)
        }
    }

    /// The fixed protocol broken by `mutant`, expected to break `breaks`.
    pub fn mutant(mutant: Mutant, breaks: &[&'static str]) -> Self {
        Self {
            mutant: Some(mutant),
            ..Self::new(Protocol::Fixed, breaks)
        }
    }

    pub fn deep_only(mut self) -> Self {
        self.deep = true;
        self
    }

    pub fn fixes(&self) -> Fixes {
        let fixes = Fixes {
            mutant: self.mutant,
            ..self.protocol.fixes()
        };
        match self.variant {
            Some((_, change)) => change(fixes),
            None => fixes,
        }
    }

    /// `fixed`, `fixed --sweep-early`, or `fixed --give-back-alone on`.
    pub fn label(&self) -> String {
        match (self.mutant, self.variant) {
            (Some(mutant), _) => format!("{} --{}", self.protocol.name(), mutant.name()),
            (None, Some((switch, _))) => format!("{} {switch}", self.protocol.name()),
            (None, None) => self.protocol.name().to_owned(),
        }
    }
}

/// One configuration to check.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    pub gateways: u8,
    /// The gateways whose waiters never take a grant outright (a set: the
    /// fleet's data format 1 in use, or a 0.1.0 instance); the others send
    /// `one` (`acquire.lua`'s ARGV[19]) when the protocol has the one-write
    /// hand-off.
    pub two_step: u8,
    /// Locks (x, y).
    pub locks: u8,
    /// Places of each lock: 1 for a plain lock, more for a counting lock.
    pub limit: u8,
    pub sessions: Vec<SessionSpec>,
    pub requests: Vec<RequestSpec>,
    pub faults: Faults,
    /// Time stops here.
    pub horizon: Tick,
    /// Requests are sent in the order listed (each at any tick after the
    /// one before); else each after the one it names, if any.
    pub in_order: bool,
    /// What is checked, and what each check is expected to break (as
    /// counterexamples the checker must find); every other property must hold.
    pub expect: Vec<Expect>,
}

impl Scenario {
    pub fn spec(&self, request: Req) -> &RequestSpec {
        &self.requests[usize::from(request.0)]
    }

    pub fn name_of(&self, request: Req) -> &'static str {
        self.spec(request).name
    }

    pub fn session(&self, session: Sess) -> &SessionSpec {
        &self.sessions[usize::from(session.0)]
    }

    /// A request's lease: its own, or its session's.
    pub fn ttl_of(&self, request: Req) -> Tick {
        let spec = self.spec(request);
        spec.session
            .map_or(spec.ttl, |session| self.session(session).ttl)
    }

    /// Whether gateway `gw`'s waiters may take a grant outright (as far as
    /// the fleet goes: the protocol must have the one-write hand-off too).
    pub fn takes_outright(&self, gw: Gw) -> bool {
        self.two_step & (1 << gw.0) == 0
    }

    /// Whether the traces name the lock (more than one).
    pub fn names_keys(&self) -> bool {
        self.locks > 1
    }

    /// What `protocol` (with `mutant`) is expected to break here, if it is
    /// checked here at all.
    pub fn expected(&self, protocol: Protocol, mutant: Option<Mutant>) -> Option<&Expect> {
        self.expect.iter().find(|expect| {
            expect.protocol == protocol && expect.mutant == mutant && expect.variant.is_none()
        })
    }
}
