//! What must hold in every state the model reaches (and one thing that must be reachable, so that no check passes by accident).

use stateright::Property;

use crate::scenario::{DEADLOCK_ANSWERED_WITHIN, SERVED_WITHIN, SESSION_ANSWERED_WITHIN};
use crate::state::{Phase, State};
use crate::system::LockModel;

/// Each property's name and what it says, in the order they are checked.
pub const ABOUT: [(&str, &str); 20] = [
    (
        EXCLUSION,
        "at most `limit` places of a lock are held at once (one for a plain lock)",
    ),
    (
        FENCING,
        "each grant's fencing token is larger than every earlier one of its lock",
    ),
    (
        SERVED,
        "a waiter whose gateway and Redis keep running is not left waiting while its lock is free for more than 2 ticks",
    ),
    (
        ORDER,
        "no place goes to a request while an earlier one for the lock whose gateway and Redis keep running waits (unless it let an offer lapse)",
    ),
    (
        ONE_GRANT_PER_KEY,
        "requests under one Idempotency-Key that overlap (a retry sent while the first waits) yield at most one grant",
    ),
    (
        REFUSED_HOLDS_NOTHING,
        "a request answered that nothing was granted holds nothing (but a grant it shares with a twin still waiting)",
    ),
    (LEFT_MEANS_LEFT, "no place goes to a request that has ended"),
    (
        GRANT_STANDS,
        "a place a client was answered 201 for is not given back by another request's leave",
    ),
    (
        ANSWERED_IN_LEASE,
        "a client answered 201 on a grant message alone (made outright) is answered before the lease it was granted ends",
    ),
    (
        NO_OFFER_TO_DEAD,
        "no place is offered to a waiter whose gateway died more than a presence (1 s) earlier",
    ),
    (
        NO_OUTRIGHT_TO_DEAD,
        "a place is granted outright only to a waiter whose gateway was alive FRESH (1 tick, 500 ms) before the grant, never to one dead longer",
    ),
    (
        SESSION_EXPIRY,
        "a lock its client holds in a session is freed (by the session's end) only after the session expired",
    ),
    (
        LOCK_DELAY,
        "no place of a lock is granted before the lock-delay owed (a session's expiry, or a revocation of its lock, plus its lock_delay)",
    ),
    (
        SESSION_END_ANSWERS,
        "a waiter whose session ended, its gateway and Redis running, is answered within 3 ticks (and, answered, holds nothing)",
    ),
    (
        DEADLOCK_ONLY_CYCLES,
        "a wait is refused `deadlock` only when a cycle of real waits runs through it, when it is decided",
    ),
    (
        DEADLOCK_ANSWERED,
        "a cycle of waits on running gateways does not stand more than 3 ticks (one of them is refused)",
    ),
    (
        BATCH_WHOLE,
        "a batch's token holds all of its locks or none of them, in every state (no observer sees part of a batch held)",
    ),
    (
        BATCH_GRANTED,
        "a waiting batch whose gateway and Redis keep running is not left waiting more than 2 ticks while each of its locks is free or held only by waiting batches (no circle of batches)",
    ),
    (
        WAITER_GRANTED,
        "(reachable) a request that waited in the queue is granted",
    ),
    (
        OUTRIGHT_GRANTED,
        "(reachable, with the one-write hand-off) a request that waited is granted outright and answered without a write",
    ),
];

pub const EXCLUSION: &str = "exclusion";
pub const FENCING: &str = "fencing-order";
pub const SERVED: &str = "served-while-free";
pub const ORDER: &str = "arrival-order";
pub const ONE_GRANT_PER_KEY: &str = "one-grant-per-key";
pub const REFUSED_HOLDS_NOTHING: &str = "refused-holds-nothing";
pub const LEFT_MEANS_LEFT: &str = "no-grant-after-end";
pub const GRANT_STANDS: &str = "grant-stands";
pub const ANSWERED_IN_LEASE: &str = "answered-in-lease";
pub const NO_OFFER_TO_DEAD: &str = "no-offer-to-dead";
pub const NO_OUTRIGHT_TO_DEAD: &str = "no-outright-to-dead";
pub const SESSION_EXPIRY: &str = "freed-after-expiry";
pub const LOCK_DELAY: &str = "lock-delay";
pub const SESSION_END_ANSWERS: &str = "session-end-answers";
pub const DEADLOCK_ONLY_CYCLES: &str = "deadlock-only-cycles";
pub const DEADLOCK_ANSWERED: &str = "deadlock-answered";
pub const BATCH_WHOLE: &str = "batch-whole";
pub const BATCH_GRANTED: &str = "batch-granted";
pub const WAITER_GRANTED: &str = "waiter-granted";
pub const OUTRIGHT_GRANTED: &str = "outright-granted";

/// Whether `name` is a `sometimes` property (an example is wanted, not a
/// counterexample).
pub fn is_reachability(name: &str) -> bool {
    name == WAITER_GRANTED || name == OUTRIGHT_GRANTED
}

pub fn all() -> Vec<Property<LockModel>> {
    vec![
        Property::always(EXCLUSION, exclusion),
        Property::always(FENCING, |_, s: &State| !s.broken.fencing),
        Property::always(SERVED, |model: &LockModel, s: &State| {
            s.ids()
                .filter(|&id| !model.scenario.spec(id).is_batch())
                .all(|id| s.request(id).idle <= SERVED_WITHIN)
        }),
        Property::always(ORDER, |_, s: &State| !s.broken.arrival_order),
        Property::always(ONE_GRANT_PER_KEY, one_grant_per_key),
        Property::always(REFUSED_HOLDS_NOTHING, refused_holds_nothing),
        Property::always(LEFT_MEANS_LEFT, |_, s: &State| !s.broken.granted_after_end),
        Property::always(GRANT_STANDS, |_, s: &State| !s.broken.grant_taken),
        Property::always(ANSWERED_IN_LEASE, |_, s: &State| {
            !s.broken.answered_after_lease
        }),
        Property::always(NO_OFFER_TO_DEAD, |_, s: &State| !s.broken.offered_to_dead),
        Property::always(NO_OUTRIGHT_TO_DEAD, |_, s: &State| {
            !s.broken.outright_to_dead
        }),
        Property::always(SESSION_EXPIRY, |_, s: &State| !s.broken.freed_before_expiry),
        Property::always(LOCK_DELAY, |_, s: &State| !s.broken.lock_delay),
        Property::always(SESSION_END_ANSWERS, |_, s: &State| {
            s.requests
                .iter()
                .all(|r| r.orphaned <= SESSION_ANSWERED_WITHIN)
        }),
        Property::always(DEADLOCK_ONLY_CYCLES, |_, s: &State| {
            !s.broken.false_deadlock
        }),
        Property::always(DEADLOCK_ANSWERED, |_, s: &State| {
            s.cycle_for <= DEADLOCK_ANSWERED_WITHIN
        }),
        Property::always(BATCH_WHOLE, batch_whole),
        Property::always(BATCH_GRANTED, |model: &LockModel, s: &State| {
            s.ids()
                .filter(|&id| model.scenario.spec(id).is_batch())
                .all(|id| s.request(id).idle <= SERVED_WITHIN)
        }),
        Property::sometimes(WAITER_GRANTED, |_, s: &State| {
            s.requests.iter().any(|r| r.waited && r.granted)
        }),
        Property::sometimes(OUTRIGHT_GRANTED, |model: &LockModel, s: &State| {
            !model.fixes.one_write_handoff || s.requests.iter().any(|r| r.waited && r.outright)
        }),
    ]
}

/// A batch's token holds each of its locks, or none.
fn batch_whole(model: &LockModel, s: &State) -> bool {
    s.ids().all(|id| {
        let spec = model.scenario.spec(id);
        if !spec.is_batch() {
            return true;
        }
        let held = spec
            .keys()
            .filter(|&key| s.redis.lock(key).place(id).is_some())
            .count();
        held == 0 || held == spec.keys().count()
    })
}

fn exclusion(model: &LockModel, s: &State) -> bool {
    s.redis
        .locks
        .iter()
        .all(|lock| lock.places.len() <= usize::from(model.scenario.limit))
}

/// Requests under one Idempotency-Key that overlap (one sent while
/// another waits: a retry of a request whose answer is late) are one
/// request: they are answered one grant (one fencing token) between them.
/// (Requests under a key sent one after the other's grant ended may each
/// be granted: the key is forgotten with its grant.)
fn one_grant_per_key(model: &LockModel, s: &State) -> bool {
    let keys = model
        .scenario
        .requests
        .iter()
        .filter_map(|spec| spec.idempotency_key);
    keys.into_iter().all(|key| {
        let under_key: Vec<_> = s
            .ids()
            .filter(|&id| model.scenario.spec(id).idempotency_key == Some(key))
            .map(|id| s.request(id))
            .collect();
        let overlapping = under_key.iter().any(|request| request.overlapped);
        let mut fences = under_key
            .iter()
            .map(|request| request.granted_fence)
            .filter(|&fence| fence > 0);
        let first = fences.next();
        !overlapping || fences.all(|fence| Some(fence) == first)
    })
}

/// A request answered that nothing was granted holds nothing under its
/// token, unless a request sharing that token (a twin under its
/// Idempotency-Key) still waits for it or holds it.
fn refused_holds_nothing(_: &LockModel, s: &State) -> bool {
    s.ids().all(|id| {
        let request = s.request(id);
        let token = request.token;
        let shared = s.ids().any(|other| {
            let other = s.request(other);
            (other.token == token && !other.ended() && other.phase != Phase::Dead)
                || matches!(other.phase, Phase::Holding { token: t, .. } if t == token)
        });
        !request.refused() || shared || !s.redis.holds(token)
    })
}
