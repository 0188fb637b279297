//! The model finds each known defect of the protocol as it was, none of them in the fixed one, and each deliberately broken variant of the fixed one, on the smallest scenarios (the whole catalogue runs with `lockgate-model test`).

use lockgate_model::check::{self, Bound};
use lockgate_model::properties::{
    ANSWERED_IN_LEASE, BATCH_WHOLE, GRANT_STANDS, LEFT_MEANS_LEFT, NO_OUTRIGHT_TO_DEAD,
    ONE_GRANT_PER_KEY, REFUSED_HOLDS_NOTHING, SERVED, SESSION_EXPIRY,
};
use lockgate_model::scenario::{Mutant, Protocol};
use lockgate_model::scenarios;

const BOUND: Bound = Bound {
    depth: None,
    extra_ticks: 0,
    threads: 1,
    max_states: 20_000_000,
};

#[test]
fn a_grant_claimed_at_shutdown_is_held_by_nobody_as_it_was_and_given_back_when_fixed() {
    let scenario = scenarios::shutdown_with_streamed_lock();
    let as_it_was = check::run(scenario.clone(), Protocol::AsItWas.fixes(), BOUND);
    assert_eq!(as_it_was.broken(), vec![REFUSED_HOLDS_NOTHING]);
    let fixed = check::run(scenario.clone(), Protocol::Fixed.fixes(), BOUND);
    assert!(fixed.broken().is_empty(), "{:?}", fixed.broken());
    let trace = check::shortest(
        scenario,
        Protocol::AsItWas.fixes(),
        REFUSED_HOLDS_NOTHING,
        BOUND,
    )
    .expect("a counterexample");
    assert!(trace.shortest);
    assert!(
        trace
            .events
            .iter()
            .any(|line| line.contains("503 shutting-down"))
    );
}

#[test]
fn a_waiter_dropped_while_its_gateway_was_frozen_waits_on_a_free_lock_as_it_was() {
    let scenario = scenarios::frozen_gateway();
    let as_it_was = check::run(scenario.clone(), Protocol::AsItWas.fixes(), BOUND);
    assert!(as_it_was.broken().contains(&SERVED));
    let fixed = check::run(scenario, Protocol::Fixed.fixes(), BOUND);
    assert!(fixed.broken().is_empty(), "{:?}", fixed.broken());
    assert!(fixed.unreached().is_empty());
}

#[test]
fn putting_back_every_local_waiter_revives_one_that_left() {
    let scenario = scenarios::shutdown_with_streamed_lock();
    let proposed = check::run(scenario, Protocol::Proposed.fixes(), BOUND);
    assert!(proposed.broken().contains(&LEFT_MEANS_LEFT));
}

#[test]
fn two_waiting_requests_with_one_idempotency_key_get_two_grants_unless_they_wait_as_twins() {
    let scenario = scenarios::idempotent_retry();
    let as_it_was = check::run(scenario.clone(), Protocol::AsItWas.fixes(), BOUND);
    assert_eq!(as_it_was.broken(), vec![ONE_GRANT_PER_KEY]);
    let fixed = check::run(scenario, Protocol::Fixed.fixes(), BOUND);
    assert!(fixed.broken().is_empty(), "{:?}", fixed.broken());
}

#[test]
fn a_batch_taken_one_lock_at_a_time_is_seen_partly_held_and_all_at_once_never() {
    let scenario = scenarios::batches_circle();
    let fixed = check::run(scenario.clone(), Protocol::Fixed.fixes(), BOUND);
    assert!(fixed.broken().is_empty(), "{:?}", fixed.broken());
    assert!(fixed.unreached().is_empty());
    let mut key_by_key = Protocol::Fixed.fixes();
    key_by_key.mutant = Some(Mutant::BatchKeyByKey);
    let mutant = check::run(scenario, key_by_key, BOUND);
    assert!(
        mutant.broken().contains(&BATCH_WHOLE),
        "{:?}",
        mutant.broken()
    );
}

#[test]
fn a_twin_answered_503_at_shutdown_gives_back_the_grant_its_twin_claimed() {
    let scenario = scenarios::shutdown_twin();
    let mut keyed = Protocol::Fixed.fixes();
    keyed.shutdown_gives_back_keyed = true;
    let given_back = check::run(scenario.clone(), keyed, BOUND);
    assert!(
        given_back.broken().contains(&GRANT_STANDS),
        "{:?}",
        given_back.broken()
    );
    let mut alone = keyed;
    alone.give_back_alone = true;
    let checked = check::run(scenario, alone, BOUND);
    assert!(checked.broken().is_empty(), "{:?}", checked.broken());
}

#[test]
fn a_session_swept_at_its_expiry_instant_frees_its_lock_too_early() {
    let scenario = scenarios::session_expiry();
    let fixed = check::run(scenario.clone(), Protocol::Fixed.fixes(), BOUND);
    assert!(fixed.broken().is_empty(), "{:?}", fixed.broken());
    let mut early = Protocol::Fixed.fixes();
    early.mutant = Some(Mutant::SweepEarly);
    let swept_early = check::run(scenario, early, BOUND);
    assert_eq!(swept_early.broken(), vec![SESSION_EXPIRY]);
}

#[test]
fn a_place_granted_outright_whatever_the_presence_goes_to_a_waiter_whose_gateway_died() {
    let scenario = scenarios::crash_and_restart();
    let fixed = check::run(scenario.clone(), Protocol::Fixed.fixes(), BOUND);
    assert!(fixed.broken().is_empty(), "{:?}", fixed.broken());
    assert!(fixed.unreached().is_empty(), "{:?}", fixed.unreached());
    let mut stale = Protocol::Fixed.fixes();
    stale.mutant = Some(Mutant::OutrightStale);
    let mutant = check::run(scenario.clone(), stale, BOUND);
    assert_eq!(mutant.broken(), vec![NO_OUTRIGHT_TO_DEAD]);
    let trace =
        check::shortest(scenario, stale, NO_OUTRIGHT_TO_DEAD, BOUND).expect("a counterexample");
    assert!(
        trace.events.iter().any(|line| line.contains("crashes"))
            && trace.events.iter().any(|line| line.contains("outright")),
        "{:#?}",
        trace.events
    );
}

#[test]
fn a_short_lease_granted_outright_is_answered_after_it_ended_unless_half_of_it_is_late() {
    let scenario = scenarios::frozen_short_lease();
    let fixed = check::run(scenario.clone(), Protocol::Fixed.fixes(), BOUND);
    assert!(fixed.broken().is_empty(), "{:?}", fixed.broken());
    assert!(fixed.unreached().is_empty(), "{:?}", fixed.unreached());
    let mut heard_late = Protocol::Fixed.fixes();
    heard_late.short_lease_heard_late = false;
    let before = check::run(scenario, heard_late, BOUND);
    assert_eq!(before.broken(), vec![ANSWERED_IN_LEASE]);
}
