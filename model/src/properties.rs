//! What must hold in every state the model reaches (and one thing that must be reachable, so that no check passes by accident).

use stateright::Property;

use crate::scenario::SERVED_WITHIN;
use crate::state::State;
use crate::system::LockModel;

/// Each property's name and what it says, in the order they are checked.
pub const ABOUT: [(&str, &str); 8] = [
    (
        EXCLUSION,
        "at most `limit` places are held at once (one for a plain lock)",
    ),
    (
        FENCING,
        "each grant's fencing token is larger than every earlier one",
    ),
    (
        SERVED,
        "a waiter whose gateway and Redis keep running is not left waiting while the lock is free for more than 2 ticks",
    ),
    (
        ORDER,
        "no place goes to a request while an earlier one whose gateway and Redis keep running waits (unless it let an offer lapse)",
    ),
    (
        ONE_GRANT_PER_KEY,
        "requests under one Idempotency-Key that overlap (a retry sent while the first waits) yield at most one grant",
    ),
    (
        REFUSED_HOLDS_NOTHING,
        "a request answered that nothing was granted holds nothing",
    ),
    (LEFT_MEANS_LEFT, "no place goes to a request that has ended"),
    (
        WAITER_GRANTED,
        "(reachable) a request that waited in the queue is granted",
    ),
];

pub const EXCLUSION: &str = "exclusion";
pub const FENCING: &str = "fencing-order";
pub const SERVED: &str = "served-while-free";
pub const ORDER: &str = "arrival-order";
pub const ONE_GRANT_PER_KEY: &str = "one-grant-per-key";
pub const REFUSED_HOLDS_NOTHING: &str = "refused-holds-nothing";
pub const LEFT_MEANS_LEFT: &str = "no-grant-after-end";
pub const WAITER_GRANTED: &str = "waiter-granted";

/// Whether `name` is a `sometimes` property (an example is wanted, not a
/// counterexample).
pub fn is_reachability(name: &str) -> bool {
    name == WAITER_GRANTED
}

pub fn all() -> Vec<Property<LockModel>> {
    vec![
        Property::always(EXCLUSION, exclusion),
        Property::always(FENCING, |_, s: &State| !s.broken.fencing),
        Property::always(SERVED, |_, s: &State| {
            s.requests.iter().all(|r| r.idle <= SERVED_WITHIN)
        }),
        Property::always(ORDER, |_, s: &State| !s.broken.arrival_order),
        Property::always(ONE_GRANT_PER_KEY, one_grant_per_key),
        Property::always(REFUSED_HOLDS_NOTHING, refused_holds_nothing),
        Property::always(LEFT_MEANS_LEFT, |_, s: &State| !s.broken.granted_after_end),
        Property::sometimes(WAITER_GRANTED, |_, s: &State| {
            s.requests.iter().any(|r| r.waited && r.granted)
        }),
    ]
}

fn exclusion(model: &LockModel, s: &State) -> bool {
    s.redis.places.len() <= usize::from(model.scenario.limit)
}

/// Requests under one Idempotency-Key that overlap (one sent while
/// another waits: a retry of a request whose answer is late) are one
/// request: at most one of them is granted a place of its own, the others
/// answer it again. (Requests under a key sent one after the other's grant
/// ended may each be granted: the key is forgotten with its grant.)
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
        !overlapping || under_key.iter().filter(|request| request.granted).count() <= 1
    })
}

fn refused_holds_nothing(_: &LockModel, s: &State) -> bool {
    s.ids()
        .all(|id| !s.request(id).refused() || s.redis.place(id).is_none())
}
