//! The configurations checked: each a few requests on a few gateways with the faults that matter to it, and the properties each protocol is expected to break there.

use crate::properties::{LEFT_MEANS_LEFT, ONE_GRANT_PER_KEY, ORDER, REFUSED_HOLDS_NOTHING, SERVED};
use crate::scenario::{Fault, Faults, Protocol, RequestSpec, Scenario};

/// Every scenario, each marked whether it is checked only when asked for
/// a deep check (`make model`).
pub fn catalogue() -> Vec<(bool, Scenario)> {
    vec![
        (false, frozen_gateway()),
        (false, redis_stall()),
        (false, shutdown_with_streamed_lock()),
        (false, idempotent_retry()),
        (false, frozen_streamed_waiter()),
        (false, ticket_reused()),
        (false, counting_lock()),
        (false, crash_and_restart()),
        (false, clients_leave()),
        (true, frozen_gateway_long()),
        (true, many_faults()),
    ]
}

/// What the proposed fixes break wherever a waiter can leave or be
/// granted between a tend's plan and its run: the tend puts back a waiter
/// that has already ended.
fn proposed_revives() -> (Protocol, Vec<&'static str>) {
    (
        Protocol::Proposed,
        vec![REFUSED_HOLDS_NOTHING, LEFT_MEANS_LEFT],
    )
}

/// (a) A holder on A, W1 waiting on B, then W2 on C; B may be frozen for
/// 1.5 to 3 s.
pub fn frozen_gateway() -> Scenario {
    Scenario {
        name: "frozen-gateway",
        about: "holder on A, W1 waits on B, W2 on C; gateway B frozen 1.5-3 s (SIGSTOP)",
        gateways: 3,
        limit: 1,
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
        breaks: vec![(Protocol::AsItWas, vec![SERVED, ORDER]), proposed_revives()],
    }
}

/// (b) The same requests; Redis may be frozen for 2 to 2.5 s.
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
        limit: 1,
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
        breaks: vec![
            (Protocol::AsItWas, vec![REFUSED_HOLDS_NOTHING]),
            proposed_revives(),
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
        limit: 1,
        requests: vec![
            RequestSpec::plain("H", 2, 0, 3),
            RequestSpec::plain("R1", 0, 10, 3).with_key(1).keeping(),
            RequestSpec::plain("R2", 1, 10, 3).with_key(1),
        ],
        faults: Faults::default(),
        horizon: 12,
        in_order: true,
        breaks: Protocol::ALL
            .into_iter()
            .map(|protocol| (protocol, vec![ONE_GRANT_PER_KEY]))
            .collect(),
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
        breaks: vec![(Protocol::AsItWas, vec![ORDER]), proposed_revives()],
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
        limit: 1,
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
        breaks: vec![
            (Protocol::AsItWas, vec![SERVED, ORDER]),
            (
                Protocol::Proposed,
                vec![ORDER, REFUSED_HOLDS_NOTHING, LEFT_MEANS_LEFT],
            ),
        ],
    }
}

/// A counting lock of two places, three waiters, one gateway frozen.
pub fn counting_lock() -> Scenario {
    Scenario {
        name: "counting-lock",
        about: "a lock of 2 places: H1, H2 hold on A, W1 waits on B, W2 on C; B frozen 1.5-1.8 s",
        gateways: 3,
        limit: 2,
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
        breaks: vec![(Protocol::AsItWas, vec![SERVED, ORDER]), proposed_revives()],
    }
}

/// A gateway dies with a waiter and starts again under the same id.
pub fn crash_and_restart() -> Scenario {
    Scenario {
        name: "crash-restart",
        about: "holder on A, W1 waits on B, W2 on C, W3 on B; B may crash and start again",
        gateways: 3,
        limit: 1,
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
        breaks: vec![proposed_revives()],
    }
}

/// Clients that leave while they wait or hold a streamed lock, a reader
/// of the lock and an operator's revocation, with a short pause.
pub fn clients_leave() -> Scenario {
    Scenario {
        name: "clients-leave",
        about: "streamed S on A, W1 waits on B and may leave, W2 on A; a GET, a revoke; A frozen 0.3-0.9 s",
        gateways: 2,
        limit: 1,
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
        breaks: vec![(Protocol::AsItWas, vec![SERVED]), proposed_revives()],
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
        limit: 1,
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
        breaks: vec![(Protocol::AsItWas, vec![SERVED, ORDER]), proposed_revives()],
    }
}
