//! A counterexample as a readable sequence of events, one line each, stamped with the tick it happened at.

use stateright::Path;

use crate::scenario::TICK_MS;
use crate::state::{Phase, Refusal, Standing, State};
use crate::step::Notes;
use crate::system::{Action, LockModel};

/// The events of `path`, one per line (`t=3 gateway B paused (SIGSTOP)`).
pub fn events(model: &LockModel, path: &Path<State, Action>) -> Vec<String> {
    let mut lines = Vec::new();
    for (state, action) in path.clone().into_vec() {
        let Some(action) = action else { continue };
        let mut notes = Notes::recording();
        let next = model.apply(&state, action, &mut notes);
        for line in notes.lines {
            lines.push(format!("t={:<2} {line}", next.now));
        }
    }
    lines
}

/// What the last state says about the requests, for the end of a trace.
pub fn outcome(model: &LockModel, state: &State) -> Vec<String> {
    let mut lines = vec![format!(
        "t={:<2} ({} ms) lock: {}; queue: {}",
        state.now,
        u32::from(state.now) * TICK_MS,
        describe_places(model, state),
        describe_queue(model, state),
    )];
    for id in state.ids() {
        let request = state.request(id);
        let name = model.scenario.name_of(id);
        let mut line = format!("      {name}: {}", describe_phase(model, request.phase));
        if let (Phase::Waiting { .. }, 1..) = (request.phase, request.idle) {
            line += &format!(
                "; left waiting {} ticks while the lock is free",
                request.idle
            );
        }
        lines.push(line);
    }
    lines
}

fn describe_phase(model: &LockModel, phase: Phase) -> String {
    match phase {
        Phase::Unsent => "not sent".into(),
        Phase::Waiting {
            standing, deadline, ..
        } => {
            let heard = match standing {
                Standing::Queued => "queued, as its gateway knows",
                Standing::Granted => "granted, as its gateway heard",
                Standing::Unaccounted => "unaccounted for",
            };
            format!("waiting ({heard}) until t={deadline}")
        }
        Phase::Holding { token, until } => {
            format!("holds {} until t={until}", model.scenario.name_of(token))
        }
        Phase::Refused(Refusal::Held) => "answered 409 (nothing granted)".into(),
        Phase::Refused(Refusal::ShuttingDown) => "answered 503 (nothing granted)".into(),
        Phase::Disconnected(_) => "left; its handover is cleaning up".into(),
        Phase::Finished => "done".into(),
        Phase::Dead => "died with its gateway".into(),
    }
}

fn describe_places(model: &LockModel, state: &State) -> String {
    if state.redis.places.is_empty() {
        return "free".into();
    }
    let places: Vec<String> = state
        .redis
        .places
        .iter()
        .map(|place| {
            format!(
                "{} (fence {}, until t={}{})",
                model.scenario.name_of(place.token),
                place.fence,
                place.ends,
                if place.offered { ", offered" } else { "" }
            )
        })
        .collect();
    format!("held by {}", places.join(", "))
}

fn describe_queue(model: &LockModel, state: &State) -> String {
    if state.redis.queue.is_empty() {
        return "empty".into();
    }
    let entries: Vec<String> = state
        .redis
        .queue
        .iter()
        .map(|entry| format!("{}#{}", model.scenario.name_of(entry.id), entry.ticket))
        .collect();
    entries.join(" ")
}
