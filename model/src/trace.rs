//! A counterexample as a readable sequence of events, one line each, stamped with the tick it happened at.

use stateright::Path;

use crate::scenario::{FOREVER, Key, Sess, TICK_MS};
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

/// What the last state says about the locks and requests, for the end of a trace.
pub fn outcome(model: &LockModel, state: &State) -> Vec<String> {
    let locks: Vec<String> = (0..model.scenario.locks)
        .map(|index| {
            let key = Key(index);
            let name = if model.scenario.names_keys() {
                format!("lock {key}")
            } else {
                "lock".into()
            };
            format!(
                "{name}: {}; queue: {}",
                describe_places(model, state, key),
                describe_queue(model, state, key),
            )
        })
        .collect();
    let mut lines = vec![format!(
        "t={:<2} ({} ms) {}",
        state.now,
        u32::from(state.now) * TICK_MS,
        locks.join("; "),
    )];
    for (index, session) in state.redis.sessions.iter().enumerate() {
        let name = Sess(index as u8);
        let status = match (session.dropped, session.ended) {
            (true, _) => "ended and dropped".to_string(),
            (false, Some(_)) => "ended".to_string(),
            (false, None) => format!("alive until t={}", session.expires),
        };
        lines.push(format!("      session {name}: {status}"));
    }
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
        if let (Phase::Waiting { .. }, 1..) = (request.phase, request.orphaned) {
            line += &format!(
                "; still waiting {} ticks after its session ended",
                request.orphaned
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
                Standing::Outright { .. } => "granted outright, as its gateway heard",
                Standing::Unaccounted => "unaccounted for",
            };
            format!("waiting ({heard}) until t={deadline}")
        }
        Phase::Attaching => "granted, being attached to its session".into(),
        Phase::Holding { token, until } if until == FOREVER => {
            format!("holds {} for its session", model.scenario.name_of(token))
        }
        Phase::Holding { token, until } => {
            format!("holds {} until t={until}", model.scenario.name_of(token))
        }
        Phase::Refused(Refusal::Held) => "answered 409 (nothing granted)".into(),
        Phase::Refused(Refusal::ShuttingDown) => "answered 503 (nothing granted)".into(),
        Phase::Refused(Refusal::SessionEnded) => "answered 404 session-not-found".into(),
        Phase::Refused(Refusal::Deadlock) => "answered 409 deadlock".into(),
        Phase::Disconnected(_) => "left; its guard is cleaning up".into(),
        Phase::Finished => "done".into(),
        Phase::Dead => "died with its gateway".into(),
    }
}

fn describe_places(model: &LockModel, state: &State, key: Key) -> String {
    let lock = state.redis.lock(key);
    if lock.places.is_empty() {
        if lock.delayed(state.now) {
            return format!("delayed until t={}", lock.delayed_until);
        }
        return "free".into();
    }
    let places: Vec<String> = lock
        .places
        .iter()
        .map(|place| {
            let until = if place.ends == FOREVER {
                "for its session".to_string()
            } else {
                format!("until t={}", place.ends)
            };
            format!(
                "{} (fence {}, {until}{})",
                model.scenario.name_of(place.token),
                place.fence,
                if place.offered { ", offered" } else { "" }
            )
        })
        .collect();
    format!("held by {}", places.join(", "))
}

fn describe_queue(model: &LockModel, state: &State, key: Key) -> String {
    let lock = state.redis.lock(key);
    if lock.queue.is_empty() {
        return "empty".into();
    }
    let entries: Vec<String> = lock
        .queue
        .iter()
        .map(|entry| format!("{}#{}", model.scenario.name_of(entry.id), entry.ticket))
        .collect();
    entries.join(" ")
}
