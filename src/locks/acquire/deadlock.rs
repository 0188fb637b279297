//! Deadlock detection: a session's wait that closes a cycle (each session holding a lock the next one waits for) is found by a search from that wait, across instances, and only the youngest wait of a cycle is refused.
//!
//! The edges are read where they live: who holds a lock from the lock
//! (its holders' sessions), what a session waits for from the session's
//! waits (each checked against the queue it names, so a wait that ended
//! is no edge). A cycle is confirmed by a second search a moment later: a
//! deadlock stays (nobody in it can move), a cycle seen across changing
//! state does not. That moment is longer than a tending round, and every
//! wait of the cycle must have had its instance's presence renewed in
//! between: a wait whose gateway was killed (or paused) a moment ago still
//! has a presence that stands, but nothing renews it, so it closes no
//! cycle. Each instance searches from its own session waits (at
//! once when one joins a queue, then every few hundred milliseconds), so
//! the wait that closes a cycle finds it at once, and waits without a
//! session cost nothing.

use std::collections::HashSet;
use std::time::Duration;

use crate::locks::sessions::SessionHandle;
use crate::locks::shared::Locks;
use crate::locks::waiting::tending::ROUND;
use crate::redis::BackendError;
use crate::redis::locks::LockKeys;
use crate::redis::locks::view::{self, LockSight};
use crate::redis::sessions::{self as session_keys, SessionKeys};

/// How often a session's wait is searched for a cycle after it joined.
pub(in crate::locks) const CHECK_EVERY: Duration = Duration::from_millis(300);
/// How long after a first sighting a cycle is searched for again: a
/// tending round and some, so that every live instance of the cycle has
/// renewed its presence in between.
const CONFIRM_AFTER: Duration = Duration::from_millis(ROUND.as_millis() as u64 + 200);
/// The longest cycle followed.
const MAX_DEPTH: usize = 16;

/// One wait of a session: the lock it waits for, since when.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Wait {
    session: SessionHandle,
    key: String,
    since: u64,
    waiter_id: String,
    /// Until when its instance's presence stood when it was read.
    present_until: u64,
}

/// The keys of the cycle that waiter `id`'s wait for lock `keys` (with
/// session `session`) closes, when it is the wait of the cycle to refuse;
/// none when it is in no cycle or no longer queued, or the search failed.
pub(in crate::locks) async fn cycle_through(
    locks: &Locks,
    keys: &LockKeys,
    session: &SessionHandle,
    id: &str,
) -> Option<Vec<String>> {
    let found = async {
        let mut conn = locks.redis().connection().await?;
        let Some(queued) = view::queued_wait(&mut conn, keys, id).await? else {
            return Ok(None);
        };
        drop(conn);
        let start = Wait {
            session: session.clone(),
            key: keys.key().to_owned(),
            since: queued.since,
            waiter_id: id.to_owned(),
            present_until: queued.present_until,
        };
        refused(locks, &start).await
    };
    match found.await {
        Ok(cycle) => cycle,
        Err(err) => {
            tracing::debug!(error = %err, "could not search for a cycle of waits");
            None
        }
    }
}

/// Notes on `session` that it waits for lock `key` as waiter `id` (an edge
/// others may close a cycle with), or with `None` that it no longer does.
pub(in crate::locks) async fn note_wait(
    locks: &Locks,
    session: &SessionHandle,
    key: &str,
    id: Option<&str>,
) {
    let keys = SessionKeys::new(locks.prefix(), session.as_str());
    let noted = async {
        let mut conn = locks.redis().connection().await?;
        session_keys::note_wait(&mut conn, &keys, key, id).await
    };
    if let Err(err) = noted.await {
        tracing::debug!(error = %err, "a session's wait could not be noted");
    }
}

/// The keys of the cycle `start` closes, when it is its youngest wait (the
/// one refused): confirmed by a second search.
async fn refused(locks: &Locks, start: &Wait) -> Result<Option<Vec<String>>, BackendError> {
    let Some(first) = cycle(locks, start).await? else {
        return Ok(None);
    };
    if !youngest(start, &first) {
        return Ok(None);
    }
    tokio::time::sleep(CONFIRM_AFTER).await;
    let Some(again) = cycle(locks, start).await? else {
        return Ok(None);
    };
    let keys = |waits: &[Wait]| {
        waits
            .iter()
            .map(|wait| wait.key.clone())
            .collect::<Vec<_>>()
    };
    let confirmed =
        keys(&first) == keys(&again) && youngest(start, &again) && renewed_between(&first, &again);
    Ok(confirmed.then(|| keys(&again)))
}

/// Whether every wait of `again` was seen in `first` with a presence its
/// instance has renewed since: each instance of the cycle is alive. (The
/// first wait of both is the start, this instance's own.)
fn renewed_between(first: &[Wait], again: &[Wait]) -> bool {
    again.iter().skip(1).all(|wait| {
        first
            .iter()
            .any(|seen| seen.waiter_id == wait.waiter_id && wait.present_until > seen.present_until)
    })
}

/// Whether `start` is the youngest wait of `cycle`: the latest to begin
/// (ties: the larger waiter id), so that one wait of each cycle is refused
/// whichever instance searches.
fn youngest(start: &Wait, cycle: &[Wait]) -> bool {
    cycle
        .iter()
        .all(|wait| (wait.since, &wait.waiter_id) <= (start.since, &start.waiter_id))
}

/// A cycle of waits through `start`, in order from it, if there is one.
async fn cycle(locks: &Locks, start: &Wait) -> Result<Option<Vec<Wait>>, BackendError> {
    let mut path = vec![start.clone()];
    let mut seen = HashSet::from([start.session.clone()]);
    Ok(search(locks, start, &mut path, &mut seen)
        .await?
        .then_some(path))
}

/// Depth first from the wait at the end of `path`: the sessions holding its
/// lock, and what each waits for. True when it comes back to `start`.
async fn search(
    locks: &Locks,
    start: &Wait,
    path: &mut Vec<Wait>,
    seen: &mut HashSet<SessionHandle>,
) -> Result<bool, BackendError> {
    if path.len() > MAX_DEPTH {
        return Ok(false);
    }
    let Some(last) = path.last() else {
        return Ok(false);
    };
    let holders = holding_sessions(locks, &last.key).await?;
    if holders.contains(&start.session) && path.len() > 1 {
        return Ok(true);
    }
    for holder in holders {
        if !seen.insert(holder.clone()) {
            continue;
        }
        for wait in waits_of(locks, &holder).await? {
            path.push(wait);
            if Box::pin(search(locks, start, path, seen)).await? {
                return Ok(true);
            }
            path.pop();
        }
    }
    Ok(false)
}

/// The sessions holding lock `key` now.
async fn holding_sessions(locks: &Locks, key: &str) -> Result<Vec<SessionHandle>, BackendError> {
    let keys = locks.keys_of(key);
    let mut conn = locks.redis().connection().await?;
    let sight = view::inspect(&mut conn, &keys, locks.publish()).await?;
    Ok(match sight {
        LockSight::Held(view) => view
            .leases
            .into_iter()
            .filter_map(|lease| lease.session.as_deref().map(SessionHandle::from_stored))
            .collect(),
        LockSight::Free { .. } => Vec::new(),
    })
}

/// The waits of session `session` that its locks' queues confirm.
async fn waits_of(locks: &Locks, session: &SessionHandle) -> Result<Vec<Wait>, BackendError> {
    let keys = SessionKeys::new(locks.prefix(), session.as_str());
    let mut conn = locks.redis().connection().await?;
    let mut waits = Vec::new();
    for (key, waiter_id) in session_keys::waits(&mut conn, &keys).await? {
        let lock = locks.keys_of(&key);
        let Some(queued) = view::queued_wait(&mut conn, &lock, &waiter_id).await? else {
            continue;
        };
        // A wait whose instance is away (paused, or dead and not yet
        // dropped) closes no cycle: it is passed over, and if its
        // instance is dead it will never be served.
        if queued.present && queued.session.as_deref() == Some(session.as_str()) {
            waits.push(Wait {
                session: session.clone(),
                key,
                since: queued.since,
                waiter_id,
                present_until: queued.present_until,
            });
        }
    }
    Ok(waits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(session: &str, key: &str, since: u64) -> Wait {
        Wait {
            session: SessionHandle::from_stored(session),
            key: key.into(),
            since,
            waiter_id: format!("{session}-{key}"),
            present_until: since + 1000,
        }
    }

    #[test]
    fn a_cycle_is_confirmed_only_when_every_presence_was_renewed_between() {
        let first = [wait("a", "x", 10), wait("b", "y", 20), wait("c", "z", 30)];
        let mut again = first.clone();
        assert!(!renewed_between(&first, &again), "nothing renewed");
        again[1].present_until += 300;
        assert!(!renewed_between(&first, &again), "one instance renewed");
        again[2].present_until += 300;
        assert!(
            renewed_between(&first, &again),
            "the start is this instance's"
        );
        assert!(
            CONFIRM_AFTER > ROUND,
            "a round must fit between the searches"
        );
    }

    #[test]
    fn only_the_youngest_wait_of_a_cycle_is_refused() {
        let cycle = [wait("a", "x", 10), wait("b", "y", 20), wait("c", "z", 15)];
        assert!(youngest(&cycle[1], &cycle));
        assert!(!youngest(&cycle[0], &cycle));
        assert!(!youngest(&cycle[2], &cycle));
        // A tie is broken the same way wherever it is searched from.
        let tied = [wait("a", "x", 10), wait("b", "y", 10)];
        assert_eq!(youngest(&tied[0], &tied), !youngest(&tied[1], &tied));
    }
}
