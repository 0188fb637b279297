//! The configurations checked: each a few requests on a few gateways with the faults that matter to it, and the properties each protocol (or mutant of the fixed one) is expected to break there.

use crate::properties::{
    ANSWERED_IN_LEASE, BATCH_GRANTED, BATCH_WHOLE, DEADLOCK_ANSWERED, DEADLOCK_ONLY_CYCLES,
    GRANT_STANDS, LEFT_MEANS_LEFT, LOCK_DELAY, NO_OFFER_TO_DEAD, NO_OUTRIGHT_TO_DEAD,
    ONE_GRANT_PER_KEY, ORDER, REFUSED_HOLDS_NOTHING, SERVED, SESSION_END_ANSWERS, SESSION_EXPIRY,
};
use crate::scenario::{
    Expect, Fault, Faults, Fixes, Gw, Mutant, Protocol, RequestSpec, Scenario, SessionSpec,
};

/// Every scenario, each marked whether it is checked only when asked for
/// a deep check (`make model`).
pub fn catalogue() -> Vec<(bool, Scenario)> {
    vec![
        (false, frozen_gateway()),
        (false, redis_stall()),
        (false, shutdown_with_streamed_lock()),
        (false, shutdown_idempotent()),
        (false, shutdown_twin()),
        (false, idempotent_retry()),
        (false, idempotent_mixed()),
        (false, frozen_streamed_waiter()),
        (false, frozen_short_lease()),
        (false, ticket_reused()),
        (false, counting_lock()),
        (false, crash_and_restart()),
        (false, clients_leave()),
        (false, away_past_ten_seconds()),
        (false, session_expiry()),
        (false, session_waiter()),
        (false, deadlock()),
        (false, deadlock_phantom()),
        (false, deadlock_crashed_waiter()),
        (false, batches()),
        (false, batches_circle()),
        (true, frozen_gateway_long()),
        (true, many_faults()),
        (true, sessions_and_faults()),
        (true, frozen_twice()),
        (true, batches_and_faults()),
    ]
}

/// What the proposed fixes break wherever a waiter can leave or be
/// granted between a tend's plan and its run: the tend puts back a waiter
/// that has already ended.
fn proposed_revives() -> Expect {
    Expect::new(
        Protocol::Proposed,
        &[REFUSED_HOLDS_NOTHING, LEFT_MEANS_LEFT],
    )
}

fn fixed_keeps_all() -> Expect {
    Expect::new(Protocol::Fixed, &[])
}

/// The three protocols, with what as-it-was breaks.
fn three(as_it_was: &[&'static str]) -> Vec<Expect> {
    vec![
        Expect::new(Protocol::AsItWas, as_it_was),
        proposed_revives(),
        fixed_keeps_all(),
    ]
}

/// As `three`, the proposed protocol only with `--deep` (what it breaks
/// is shown on the smaller scenarios).
fn three_proposed_deep(as_it_was: &[&'static str]) -> Vec<Expect> {
    vec![
        Expect::new(Protocol::AsItWas, as_it_was),
        proposed_revives().deep_only(),
        fixed_keeps_all(),
    ]
}

/// (a) A holder on A, W1 waiting on B, then W2 on C; B may be frozen for
/// 1.5 to 3 s.
pub fn frozen_gateway() -> Scenario {
    Scenario {
        name: "frozen-gateway",
        about: "holder on A, W1 waits on B, W2 on C; gateway B frozen 1.5-3 s (SIGSTOP)",
        gateways: 3,
        two_step: 0,
        locks: 1,
        limit: 1,
        sessions: Vec::new(),
        requests: vec![
            RequestSpec::plain("H", 0, 0, 8),
            RequestSpec::plain("W1", 1, 14, 4),
            RequestSpec::plain("W2", 2, 14, 4),
        ],
        faults: Faults {
            pause: Fault::on(&[1], 1).lasting(5, 10),
            ..Faults::default()
        },
        horizon: 16,
        in_order: true,
        expect: three(&[SERVED, ORDER]),
    }
}

/// (b) The same requests; Redis may be frozen for 2.1 to 2.4 s.
pub fn redis_stall() -> Scenario {
    Scenario {
        name: "redis-stall",
        about: "holder on A, W1 waits on B, W2 on C; Redis frozen 2.1-2.4 s",
        faults: Faults {
            redis_stall: Fault::on(&[], 1).lasting(7, 8),
            ..Faults::default()
        },
        ..frozen_gateway()
    }
}

/// (c) A streamed lock on A with a local waiter for it; A may get SIGTERM.
pub fn shutdown_with_streamed_lock() -> Scenario {
    Scenario {
        name: "shutdown-streamed",
        about: "streamed holder S on A, W waits on A, V on B; gateway A gets SIGTERM",
        gateways: 2,
        two_step: 0,
        locks: 1,
        limit: 1,
        sessions: Vec::new(),
        requests: vec![
            RequestSpec::streamed("S", 0, 0, 6),
            RequestSpec::plain("W", 0, 8, 6),
            RequestSpec::plain("V", 1, 8, 4),
        ],
        faults: Faults {
            shutdown: Fault::on(&[0], 1),
            ..Faults::default()
        },
        horizon: 10,
        in_order: true,
        expect: three(&[REFUSED_HOLDS_NOTHING]),
    }
}

/// As `shutdown-streamed`, W under an Idempotency-Key: at SIGTERM its wait
/// gives up keeping what it was offered (for a twin or a retry), and is
/// answered 503.
pub fn shutdown_idempotent() -> Scenario {
    let mut scenario = shutdown_with_streamed_lock();
    scenario.name = "shutdown-idempotent";
    scenario.about = "as shutdown-streamed, W under an Idempotency-Key";
    scenario.requests[1] = RequestSpec::plain("W", 0, 8, 6).with_key(1);
    // Before: the place offered to W stands, unclaimed, up to a second
    // after its 503, while V waits.
    scenario.expect = vec![
        Expect::new(Protocol::BeforeModel, &[REFUSED_HOLDS_NOTHING]),
        Expect::new(Protocol::Fixed, &[REFUSED_HOLDS_NOTHING]),
        Expect::variant(
            Protocol::Fixed,
            "--shutdown-gives-back-keyed on",
            |fixes| Fixes {
                shutdown_gives_back_keyed: true,
                ..fixes
            },
            &[],
        ),
    ];
    scenario
}

/// As `shutdown-idempotent`, with W's client's retry W2 waiting on B as
/// W's twin (its ticket and token), and V waiting on B after it: at
/// SIGTERM, W gives back the place offered to both.
pub fn shutdown_twin() -> Scenario {
    Scenario {
        name: "shutdown-twin",
        about: "streamed S on A, W waits on A under key K, its retry W2 on B under K, V on B; A gets SIGTERM",
        gateways: 2,
        two_step: 0,
        locks: 1,
        limit: 1,
        sessions: Vec::new(),
        requests: vec![
            RequestSpec::streamed("S", 0, 0, 6),
            // W's client, its answer late, retries as W2 and forgets W.
            RequestSpec::plain("W", 0, 8, 6).with_key(1).keeping(),
            RequestSpec::plain("W2", 1, 8, 6).with_key(1),
            RequestSpec::plain("V", 1, 8, 4),
        ],
        faults: Faults {
            shutdown: Fault::on(&[0], 1),
            ..Faults::default()
        },
        horizon: 10,
        in_order: true,
        // Before: W's 503 leaves the offer standing (as in
        // shutdown-idempotent). Fixed, W gives back what W2 was offered
        // too, or has claimed already; given back only when no twin was
        // told of the offer, it keeps every property.
        expect: vec![
            Expect::new(Protocol::Fixed, &[REFUSED_HOLDS_NOTHING]).deep_only(),
            Expect::variant(
                Protocol::Fixed,
                "--shutdown-gives-back-keyed on",
                |fixes| Fixes {
                    shutdown_gives_back_keyed: true,
                    ..fixes
                },
                &[GRANT_STANDS, ORDER],
            ),
            Expect::variant(
                Protocol::Fixed,
                "--shutdown-gives-back-keyed on --give-back-alone on",
                |fixes| Fixes {
                    shutdown_gives_back_keyed: true,
                    give_back_alone: true,
                    ..fixes
                },
                &[],
            ),
        ],
    }
}

/// Two waiting requests with one Idempotency-Key and body, on two
/// instances (a client whose first answer was lost retries elsewhere).
pub fn idempotent_retry() -> Scenario {
    Scenario {
        name: "idempotent-retry",
        about: "holder H on C; R1 waits on A under key K, its client retries as R2 on B under K",
        gateways: 3,
        two_step: 0,
        locks: 1,
        limit: 1,
        sessions: Vec::new(),
        requests: vec![
            RequestSpec::plain("H", 2, 0, 3),
            RequestSpec::plain("R1", 0, 10, 3).with_key(1).keeping(),
            RequestSpec::plain("R2", 1, 10, 3).with_key(1),
        ],
        faults: Faults::default(),
        horizon: 12,
        in_order: true,
        expect: vec![
            Expect::new(Protocol::AsItWas, &[ONE_GRANT_PER_KEY]),
            Expect::new(Protocol::Proposed, &[ONE_GRANT_PER_KEY]),
            fixed_keeps_all(),
        ],
    }
}

/// As `idempotent-retry` with a lease longer than an offer, the retry's
/// gateway B one that takes no grant outright (format 1 in use there, or
/// a 0.1.0 instance): the grant R1 takes outright, R2 hears as an offer,
/// and claims.
pub fn idempotent_mixed() -> Scenario {
    Scenario {
        name: "idempotent-mixed",
        about: "as idempotent-retry, leases of 1.5 s, gateway B (R2's) taking no grant outright",
        two_step: 1 << 1,
        requests: vec![
            RequestSpec::plain("H", 2, 0, 3),
            RequestSpec::plain("R1", 0, 10, 5).with_key(1).keeping(),
            RequestSpec::plain("R2", 1, 10, 5).with_key(1),
        ],
        expect: vec![fixed_keeps_all()],
        ..idempotent_retry()
    }
}

/// A streamed waiter's gateway is frozen: its gateway asks its position
/// at every tending, learns it is gone, and queues again, at the end.
pub fn frozen_streamed_waiter() -> Scenario {
    Scenario {
        name: "frozen-streamed-waiter",
        about: "holder on A, streamed W1 waits on B, W2 on C; gateway B frozen 1.5-3 s",
        requests: vec![
            RequestSpec::plain("H", 0, 0, 8),
            RequestSpec::streamed("W1", 1, 14, 4),
            RequestSpec::plain("W2", 2, 14, 4),
        ],
        expect: three_proposed_deep(&[ORDER]),
        ..frozen_gateway()
    }
}

/// W1, with a lease of one tick (300 ms: no longer than `HEARD_LATE`),
/// waits on B, W2 on C; B may be frozen 0.9-1.5 s just as W1 is granted
/// its place outright. Its gateway, back, claims the grant it heard late
/// (more than half the lease gone), and finds it gone; taking only
/// `HEARD_LATE` for late, it answered W1 on the message alone, though its
/// lease ended while it was frozen and W2 may hold the lock.
pub fn frozen_short_lease() -> Scenario {
    Scenario {
        name: "frozen-short-lease",
        about: "holder on A, W1 (lease 300 ms) waits on B, W2 on C; gateway B frozen 0.9-1.5 s",
        requests: vec![
            RequestSpec::plain("H", 0, 0, 3),
            RequestSpec::plain("W1", 1, 10, 1),
            RequestSpec::plain("W2", 2, 10, 3),
        ],
        faults: Faults {
            pause: Fault::on(&[1], 1).lasting(3, 5),
            ..Faults::default()
        },
        horizon: 10,
        expect: vec![
            fixed_keeps_all(),
            Expect::variant(
                Protocol::Fixed,
                "--short-lease-heard-late off",
                |fixes| Fixes {
                    short_lease_heard_late: false,
                    ..fixes
                },
                &[ANSWERED_IN_LEASE],
            ),
        ],
        ..frozen_gateway()
    }
}

/// W1 is dropped while its gateway is frozen and the queue empties, so
/// the ticket counter starts again: N, sent later, draws W1's ticket.
/// (N is listed first: a sorted set orders equal scores by member.)
pub fn ticket_reused() -> Scenario {
    Scenario {
        name: "ticket-reused",
        about: "holder on A, W1 waits on B (frozen 1.5-1.8 s), a GET empties the queue, N waits on C after",
        gateways: 3,
        two_step: 0,
        locks: 1,
        limit: 1,
        sessions: Vec::new(),
        requests: vec![
            RequestSpec::plain("N", 2, 10, 3),
            RequestSpec::plain("H", 0, 0, 6),
            RequestSpec::plain("W1", 1, 12, 3),
        ],
        faults: Faults {
            pause: Fault::on(&[1], 1).lasting(5, 6),
            inspects: 1,
            ..Faults::default()
        },
        horizon: 12,
        in_order: false,
        expect: vec![
            Expect::new(Protocol::AsItWas, &[SERVED, ORDER]),
            Expect::new(
                Protocol::Proposed,
                &[ORDER, REFUSED_HOLDS_NOTHING, LEFT_MEANS_LEFT],
            ),
            fixed_keeps_all(),
        ],
    }
}

/// A counting lock of two places, three waiters, one gateway frozen.
pub fn counting_lock() -> Scenario {
    Scenario {
        name: "counting-lock",
        about: "a lock of 2 places: H1, H2 hold on A, W1 waits on B, W2 on C; B frozen 1.5-1.8 s",
        gateways: 3,
        two_step: 0,
        locks: 1,
        limit: 2,
        sessions: Vec::new(),
        requests: vec![
            RequestSpec::plain("H1", 0, 0, 6),
            RequestSpec::plain("H2", 0, 0, 6),
            RequestSpec::plain("W1", 1, 12, 3),
            RequestSpec::plain("W2", 2, 12, 3),
        ],
        faults: Faults {
            pause: Fault::on(&[1], 1).lasting(5, 6),
            ..Faults::default()
        },
        horizon: 13,
        in_order: true,
        expect: three_proposed_deep(&[SERVED, ORDER]),
    }
}

/// A gateway dies with waiters and starts again under the same id.
pub fn crash_and_restart() -> Scenario {
    Scenario {
        name: "crash-restart",
        about: "holder on A, W1 waits on B, W2 on C, W3 on B; B may crash and start again",
        gateways: 3,
        two_step: 0,
        locks: 1,
        limit: 1,
        sessions: Vec::new(),
        requests: vec![
            RequestSpec::plain("H", 0, 0, 5),
            RequestSpec::plain("W1", 1, 10, 3),
            RequestSpec::plain("W2", 2, 10, 3),
            RequestSpec::plain("W3", 1, 10, 3),
        ],
        faults: Faults {
            crash: Fault::on(&[1], 1),
            ..Faults::default()
        },
        horizon: 12,
        in_order: true,
        // W3, sent after B started again, renews B's presence, which W1's
        // entry (dead with B's first life) shares: W1 is offered the lock.
        expect: vec![
            Expect::new(Protocol::AsItWas, &[NO_OFFER_TO_DEAD]).deep_only(),
            Expect::new(
                Protocol::Proposed,
                &[REFUSED_HOLDS_NOTHING, LEFT_MEANS_LEFT, NO_OFFER_TO_DEAD],
            )
            .deep_only(),
            Expect::new(Protocol::BeforeModel, &[NO_OFFER_TO_DEAD]),
            fixed_keeps_all(),
            Expect::mutant(Mutant::OutrightStale, &[NO_OUTRIGHT_TO_DEAD]),
        ],
    }
}

/// Clients that leave while they wait or hold a streamed lock, a reader
/// of the lock and an operator's revocation, with a short pause.
pub fn clients_leave() -> Scenario {
    Scenario {
        name: "clients-leave",
        about: "streamed S on A, W1 waits on B and may leave, W2 on A; a GET, a revoke; A frozen 0.3-0.9 s",
        gateways: 2,
        two_step: 0,
        locks: 1,
        limit: 1,
        sessions: Vec::new(),
        requests: vec![
            RequestSpec::streamed("S", 0, 0, 6).disconnecting(),
            RequestSpec::plain("W1", 1, 8, 3).disconnecting(),
            RequestSpec::plain("W2", 0, 8, 3),
        ],
        faults: Faults {
            pause: Fault::on(&[0], 1).lasting(1, 3),
            revokes: 1,
            inspects: 1,
            ..Faults::default()
        },
        horizon: 10,
        in_order: true,
        // Even a pause under a second drops a waiter when it begins just
        // before a tend, and a GET runs before the first tend after it.
        // (The older protocols here only with --deep: it is the slowest.)
        expect: vec![
            Expect::new(Protocol::AsItWas, &[SERVED]).deep_only(),
            proposed_revives().deep_only(),
            fixed_keeps_all(),
        ],
    }
}

/// A gateway frozen past `AWAY_MS` (11.1-11.4 s): its waiter loses its
/// place; once back, the gateway's tend answers `lapsed`, it asks where
/// each of its waiters stands, and the one gone queues again.
pub fn away_past_ten_seconds() -> Scenario {
    Scenario {
        name: "away-past-10s",
        about: "holder on A, W1 waits on B, W2 on C; gateway B frozen 11.1-11.4 s, past AWAY_MS",
        gateways: 3,
        two_step: 0,
        locks: 1,
        limit: 1,
        sessions: Vec::new(),
        requests: vec![
            RequestSpec::plain("H", 0, 0, 6),
            RequestSpec::plain("W1", 1, 48, 3),
            RequestSpec::plain("W2", 2, 48, 3),
        ],
        faults: Faults {
            pause: Fault::on(&[1], 1).lasting(37, 38),
            ..Faults::default()
        },
        horizon: 46,
        in_order: true,
        expect: vec![
            Expect::new(Protocol::AsItWas, &[SERVED, ORDER]).deep_only(),
            fixed_keeps_all(),
        ],
    }
}

/// A session kept by gateway A holds lock x; A may crash, and the session
/// expires; W waits on B; an operator may revoke x.
pub fn session_expiry() -> Scenario {
    Scenario {
        name: "session-expiry",
        about: "session S1 (1.2 s, lock-delay 0.9 s) kept by A holds x (L); W waits on B; A may crash; a revoke",
        gateways: 2,
        two_step: 0,
        locks: 1,
        limit: 1,
        sessions: vec![SessionSpec {
            ttl: 4,
            lock_delay: 3,
            keeper: Some(Gw(0)),
        }],
        requests: vec![
            RequestSpec::plain("L", 0, 0, 4).in_session(0),
            RequestSpec::plain("W", 1, 14, 3),
        ],
        faults: Faults {
            crash: Fault::on(&[0], 1),
            revokes: 1,
            ..Faults::default()
        },
        horizon: 14,
        in_order: true,
        expect: vec![
            fixed_keeps_all(),
            Expect::mutant(Mutant::SweepEarly, &[SESSION_EXPIRY]),
            Expect::mutant(Mutant::NoLockDelay, &[LOCK_DELAY]),
        ],
    }
}

/// A request waits with session S1 (kept by A) for lock x, held by H; A
/// may crash, so the session expires while its request waits.
pub fn session_waiter() -> Scenario {
    Scenario {
        name: "session-waiter",
        about: "H holds x on A; Q waits on B in session S1 (1.2 s) kept by A; A may crash",
        gateways: 2,
        two_step: 0,
        locks: 1,
        limit: 1,
        sessions: vec![SessionSpec {
            ttl: 4,
            lock_delay: 0,
            keeper: Some(Gw(0)),
        }],
        requests: vec![
            RequestSpec::plain("H", 0, 0, 12),
            RequestSpec::plain("Q", 1, 12, 3).in_session(0),
        ],
        faults: Faults {
            crash: Fault::on(&[0], 1),
            ..Faults::default()
        },
        horizon: 13,
        in_order: true,
        expect: vec![
            fixed_keeps_all(),
            Expect::mutant(Mutant::IgnoreSessionEnd, &[SESSION_END_ANSWERS]),
        ],
    }
}

/// Two sessions that each hold one lock and wait for the other's: S1
/// holds x (a1) and waits for y (a2) on A; S2 holds y (b1) and waits for
/// x (b2) on B. The holders may release.
pub fn deadlock() -> Scenario {
    let session = SessionSpec {
        ttl: 60,
        lock_delay: 0,
        keeper: None,
    };
    Scenario {
        name: "deadlock",
        about: "S1 holds x (a1) and waits for y (a2) on A; S2 holds y (b1) and waits for x (b2) on B",
        gateways: 2,
        two_step: 0,
        locks: 2,
        limit: 1,
        sessions: vec![session.clone(), session],
        requests: vec![
            RequestSpec::plain("a1", 0, 0, 4).in_session(0),
            RequestSpec::plain("b1", 1, 0, 4).on(1).in_session(1),
            RequestSpec::plain("b2", 1, 8, 4).in_session(1),
            RequestSpec::plain("a2", 0, 8, 4).on(1).in_session(0),
        ],
        faults: Faults::default(),
        horizon: 10,
        in_order: true,
        // The repository's search reads the start's lock first and never
        // again: a waiter offered its lock meanwhile is answered deadlock
        // and gives the place back (`--deadlock-claims-grant on` fixes it).
        expect: vec![
            Expect::new(Protocol::BeforeModel, &[DEADLOCK_ONLY_CYCLES]),
            fixed_keeps_all(),
            Expect::mutant(Mutant::NoDeadlockSearch, &[DEADLOCK_ANSWERED]),
        ],
    }
}

/// A cycle that never was, seen by one search: b1 (S2) holds y while a2
/// (S1) begins its search; b1 then releases y, which goes to W (waiting
/// ahead of a2, without a session), and only then does b2 (S2) wait for
/// x, which a1 (S1) holds. The second search sees W on y.
pub fn deadlock_phantom() -> Scenario {
    Scenario {
        name: "deadlock-phantom",
        about: "as deadlock, with W (no session) waiting for y ahead of a2, and b2 free to wait after a2",
        requests: vec![
            RequestSpec::plain("a1", 0, 0, 4).in_session(0).keeping(),
            RequestSpec::plain("b1", 1, 0, 4)
                .on(1)
                .in_session(1)
                .after(0),
            RequestSpec::plain("W", 1, 14, 14).on(1).after(1).keeping(),
            RequestSpec::plain("b2", 1, 8, 4).in_session(1).after(4),
            RequestSpec::plain("a2", 0, 8, 4)
                .on(1)
                .in_session(0)
                .after(2),
        ],
        in_order: false,
        expect: vec![
            fixed_keeps_all(),
            Expect::mutant(Mutant::DeadlockUnconfirmed, &[DEADLOCK_ONLY_CYCLES]),
        ],
        ..deadlock()
    }
}

/// As `deadlock` with b1 keeping y, and gateway B may crash: its waiter
/// b2's entry stays in x's queue, its instance away, for `AWAY_MS`, and
/// the search still counts it (`--deadlock-waits-here on` fixes it).
pub fn deadlock_crashed_waiter() -> Scenario {
    Scenario {
        name: "deadlock-crashed-waiter",
        about: "as deadlock, b1 keeps y, and gateway B (b2's) may crash before a2 waits",
        requests: vec![
            RequestSpec::plain("a1", 0, 0, 4).in_session(0),
            RequestSpec::plain("b1", 1, 0, 4)
                .on(1)
                .in_session(1)
                .keeping(),
            RequestSpec::plain("b2", 1, 8, 4).in_session(1),
            RequestSpec::plain("a2", 0, 8, 4).on(1).in_session(0),
        ],
        faults: Faults {
            crash: Fault::on(&[1], 1),
            ..Faults::default()
        },
        expect: vec![
            Expect::new(Protocol::BeforeModel, &[DEADLOCK_ONLY_CYCLES]),
            fixed_keeps_all(),
        ],
        ..deadlock()
    }
}

/// Two batches over both locks in opposite orders, and a single lock's
/// waiter: G holds x; B1 (x then y) waits on A, B2 (y then x) on B, W
/// (x) on B.
pub fn batches() -> Scenario {
    Scenario {
        name: "batches",
        about: "G holds x on A; batch B1 (x, y) waits on A, batch B2 (y, x) on B, W (x) on B; A frozen 1.2-1.5 s",
        gateways: 2,
        two_step: 0,
        locks: 2,
        limit: 1,
        sessions: Vec::new(),
        requests: vec![
            RequestSpec::plain("G", 0, 0, 4),
            RequestSpec::batch("B1", 0, 0, 1, 10, 3),
            RequestSpec::batch("B2", 1, 1, 0, 10, 3),
            RequestSpec::plain("W", 1, 10, 3),
        ],
        faults: Faults {
            pause: Fault::on(&[0], 1).lasting(4, 5),
            ..Faults::default()
        },
        horizon: 12,
        in_order: true,
        expect: vec![fixed_keeps_all()],
    }
}

/// As `batches`, no pause: the mutant that takes a batch's locks one at a
/// time in its own order.
pub fn batches_circle() -> Scenario {
    Scenario {
        name: "batches-circle",
        about: "as batches, no pause",
        faults: Faults::default(),
        // Taken one at a time, B1 holds x and waits for y, which B2 took
        // before it waited for x: each waits for the other (and B2 takes
        // y while B1, before it, waits for x alone).
        // (The fixed protocol is checked on `batches`, of which this is a part.)
        expect: vec![Expect::mutant(
            Mutant::BatchKeyByKey,
            &[BATCH_WHOLE, BATCH_GRANTED, ORDER],
        )],
        ..batches()
    }
}

/// As `batches`, with either gateway frozen, SIGTERM to B, and a `GET`.
pub fn batches_and_faults() -> Scenario {
    Scenario {
        name: "batches-and-faults",
        about: "as batches; A or B frozen 1.2-1.8 s, SIGTERM to B, a GET",
        faults: Faults {
            pause: Fault::on(&[0, 1], 1).lasting(4, 6),
            shutdown: Fault::on(&[1], 1),
            inspects: 1,
            ..Faults::default()
        },
        expect: vec![fixed_keeps_all()],
        ..batches()
    }
}

/// (a) with more time and a second pause.
pub fn frozen_gateway_long() -> Scenario {
    Scenario {
        name: "frozen-gateway-long",
        about: "as frozen-gateway for 8 s, W2 streamed; B and C may each be frozen once, 1.2-3 s",
        faults: Faults {
            pause: Fault::on(&[1, 2], 2).lasting(4, 10),
            ..Faults::default()
        },
        horizon: 26,
        requests: vec![
            RequestSpec::plain("H", 0, 0, 8),
            RequestSpec::plain("W1", 1, 20, 4),
            RequestSpec::streamed("W2", 2, 20, 4),
        ],
        ..frozen_gateway()
    }
}

/// Most faults at once, on few requests.
pub fn many_faults() -> Scenario {
    Scenario {
        name: "many-faults",
        about: "streamed S on A, W1 waits on B and may leave, W2 on C; B or C frozen 1.2-2.4 s, SIGTERM to A, Redis frozen 1.2-2.1 s, a GET",
        gateways: 3,
        two_step: 0,
        locks: 1,
        limit: 1,
        sessions: Vec::new(),
        requests: vec![
            RequestSpec::streamed("S", 0, 0, 6),
            RequestSpec::plain("W1", 1, 10, 3).disconnecting(),
            RequestSpec::plain("W2", 2, 10, 3),
        ],
        faults: Faults {
            pause: Fault::on(&[1, 2], 1).lasting(4, 8),
            shutdown: Fault::on(&[0], 1),
            redis_stall: Fault::on(&[], 1).lasting(4, 7),
            inspects: 1,
            ..Faults::default()
        },
        horizon: 12,
        in_order: true,
        // No waiter on A: SIGTERM finds no local waiter to strand.
        expect: three(&[SERVED, ORDER]),
    }
}

/// A session's lock, its waiters, and the faults: the keeper's gateway
/// frozen or crashed, Redis frozen, a revocation.
pub fn sessions_and_faults() -> Scenario {
    Scenario {
        name: "sessions-and-faults",
        about: "S1 (1.2 s, lock-delay 0.6 s) kept by A holds x (L); W waits on B, Q in S1 on B; A frozen 1.2-2.1 s or crashed, Redis frozen 1.2-1.5 s, a revoke",
        gateways: 2,
        two_step: 0,
        locks: 1,
        limit: 1,
        sessions: vec![SessionSpec {
            ttl: 4,
            lock_delay: 2,
            keeper: Some(Gw(0)),
        }],
        requests: vec![
            RequestSpec::plain("L", 0, 0, 4).in_session(0),
            RequestSpec::plain("W", 1, 12, 3),
            RequestSpec::plain("Q", 1, 12, 3).in_session(0),
        ],
        faults: Faults {
            pause: Fault::on(&[0], 1).lasting(4, 7),
            crash: Fault::on(&[0], 1),
            redis_stall: Fault::on(&[], 1).lasting(4, 5),
            revokes: 1,
            ..Faults::default()
        },
        horizon: 14,
        in_order: false,
        expect: vec![fixed_keeps_all()],
    }
}

/// W1's gateway is frozen while W1 is offered the lock, long enough for
/// the offer to lapse (1.2 s); W2 takes the lock, and W1, back, queues
/// again at the end. Frozen a second time past `AWAY_MS` (11.1 s), W1
/// loses its place when W2 releases; its gateway, back, asks where it
/// stands.
pub fn frozen_twice() -> Scenario {
    Scenario {
        name: "frozen-twice",
        about: "H's lease ends, W1 waits on B, W2 on C; B frozen 1.2 s (W1's offer lapses), then 11.1 s",
        gateways: 3,
        two_step: 0,
        locks: 1,
        limit: 1,
        sessions: Vec::new(),
        requests: vec![
            RequestSpec::plain("H", 0, 0, 1).keeping(),
            RequestSpec::plain("W1", 1, 60, 3),
            RequestSpec::plain("W2", 2, 60, 45),
        ],
        faults: Faults {
            pause: Fault::on(&[1], 2).lasting(4, 4).then_lasting(37, 37),
            ..Faults::default()
        },
        horizon: 50,
        in_order: true,
        // The repository: W1's ticket still says granted (a requeue does
        // not reset it), so the tend that finds it gone changes nothing.
        expect: vec![
            Expect::new(Protocol::BeforeModel, &[SERVED]),
            fixed_keeps_all(),
        ],
    }
}
