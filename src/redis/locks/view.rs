//! The scripts that read a lock as anyone may see it (inspect, watch, its history), and the one each instance runs for the locks it has waiters or watchers on (tend).

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use super::{FENCE_RETENTION_MS, LeaseView, LockKeys, LockKind, WaiterView};
use crate::redis::scripts::{Function, FunctionCall, HISTORY, INSPECT, Reply, TEND, WATCH};
use crate::redis::{BackendError, Connection};

/// A held lock as anyone may see it: never a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockView {
    pub kind: LockKind,
    /// How many hold it.
    pub holders: u64,
    /// Re-entrant holds of every holder together.
    pub holds: u64,
    /// The newest grant's fencing token.
    pub fencing_token: u64,
    /// Until the latest lease ends.
    pub ttl_ms: u64,
    pub expires_at_ms: u64,
    /// Each holder's lease, oldest grant first.
    pub leases: Vec<LeaseView>,
    /// The waiters, in the order they will be served.
    pub waiters: Vec<WaiterView>,
}

/// A lock's state: held, or free (perhaps with waiters about to be served).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockSight {
    Held(LockView),
    /// Nobody holds it; `delayed_until_ms`: the end of a lock-delay in
    /// force (no place is granted until then).
    Free {
        waiters: Vec<WaiterView>,
        delayed_until_ms: Option<u64>,
    },
}

/// Runs `inspect.lua`.
pub async fn inspect(
    conn: &mut Connection,
    keys: &LockKeys,
    publish: &str,
) -> Result<LockSight, BackendError> {
    let invocation = INSPECT.call(keys, publish);
    let reply = INSPECT.run(&invocation, conn).await?;
    INSPECT.read(&reply, sight)
}

/// Reads a `held` or `not-found` reply of `inspect.lua` or `watch.lua`.
fn sight(reply: &Reply) -> Option<LockSight> {
    let waiters = json_field(reply, "waiters")?;
    match reply.code() {
        "held" => Some(LockSight::Held(LockView {
            kind: LockKind::of(reply.text("mode")?, reply.number("limit")?)?,
            holders: reply.number("holders")?,
            holds: reply.number("holds")?,
            fencing_token: reply.number("fence")?,
            ttl_ms: reply.number("ttl_ms")?,
            expires_at_ms: reply.number("expires_at_ms")?,
            leases: json_field(reply, "leases")?,
            waiters,
        })),
        "not-found" => Some(LockSight::Free {
            waiters,
            delayed_until_ms: reply.number("delayed_until_ms").filter(|until| *until > 0),
        }),
        _ => None,
    }
}

fn json_field<T: DeserializeOwned>(reply: &Reply, name: &str) -> Option<T> {
    serde_json::from_str(reply.text(name)?).ok()
}

/// A request waiting in a lock's queue, as the queue holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedWait {
    /// The public handle of the session it waits with, if any.
    pub session: Option<String>,
    /// Since when it waits (Unix ms, Redis clock).
    pub since: u64,
    /// Whether its instance's presence is current: a waiter whose
    /// instance paused or died is passed over, and waits for nothing now.
    pub present: bool,
    /// Until when its instance's presence stands (Unix ms, Redis clock; 0
    /// for none): a live instance moves it on every tending round.
    pub present_until: u64,
}

/// Waiter `id` of the lock's queue, if it is there.
pub async fn queued_wait(
    conn: &mut Connection,
    keys: &LockKeys,
    id: &str,
) -> Result<Option<QueuedWait>, BackendError> {
    #[derive(Deserialize)]
    struct Entry {
        since: u64,
        #[serde(default)]
        inst: String,
        #[serde(default)]
        session: serde_json::Value,
    }
    let (queue, waiters) = keys.queue();
    let (ticket, entry): (Option<f64>, Option<String>) = redis::pipe()
        .cmd("ZSCORE")
        .arg(queue)
        .arg(id)
        .cmd("HGET")
        .arg(&waiters)
        .arg(id)
        .query_async(conn)
        .await?;
    let (Some(_), Some(entry)) = (ticket, entry) else {
        return Ok(None);
    };
    let Ok(entry) = serde_json::from_str::<Entry>(&entry) else {
        return Ok(None);
    };
    let session = entry
        .session
        .as_str()
        .and_then(|record| record.split(' ').next())
        .map(str::to_owned);
    let presence: Option<u64> = redis::cmd("HGET")
        .arg(&waiters)
        .arg(format!("@{}", entry.inst))
        .query_async(conn)
        .await?;
    // Asked apart: on a Cluster, a pipeline's keyless command could go to
    // another node than the key's.
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await?;
    let now_ms = seconds * 1000 + micros / 1000;
    Ok(Some(QueuedWait {
        session,
        since: entry.since,
        present: presence.is_some_and(|deadline| deadline >= now_ms),
        present_until: presence.unwrap_or(0),
    }))
}

/// Runs `watch.lua`: starts (or keeps) the lock's watch; the lock now, and
/// the id of the last event before now.
pub async fn watch(
    conn: &mut Connection,
    keys: &LockKeys,
    publish: &str,
) -> Result<(LockSight, String), BackendError> {
    let invocation = WATCH.call(keys, publish);
    let reply = WATCH.run(&invocation, conn).await?;
    WATCH.read(&reply, |reply| {
        Some((sight(reply)?, reply.text("last_id")?.to_owned()))
    })
}

/// One event of a lock's history: its id, type and data (JSON text, as
/// the script wrote it, its members in their order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    pub id: String,
    pub kind: String,
    pub data: String,
}

/// What `history.lua` found after an id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum History {
    /// The events after it, oldest first; `more` when more follow.
    Events {
        entries: Vec<HistoryEntry>,
        more: bool,
    },
    /// Some events after it are gone.
    Gap,
}

/// Runs `history.lua`: at most `count` events after `after`.
pub async fn history(
    conn: &mut Connection,
    keys: &LockKeys,
    publish: &str,
    after: &str,
    count: usize,
) -> Result<History, BackendError> {
    let mut invocation = HISTORY.call(keys, publish);
    invocation.arg(after).arg(count);
    let reply = HISTORY.run(&invocation, conn).await?;
    HISTORY.read(&reply, |reply| match reply.code() {
        "gap" => Some(History::Gap),
        "events" => {
            let rows: Vec<(String, String, &RawValue)> =
                serde_json::from_str(reply.text("entries")?).ok()?;
            let entries = rows
                .into_iter()
                .map(|(id, kind, data)| HistoryEntry {
                    id,
                    kind,
                    data: data.get().to_owned(),
                })
                .collect();
            Some(History::Events {
                entries,
                more: reply.flag("more")?,
            })
        }
        _ => None,
    })
}

/// What an instance asks when it tends a lock.
#[derive(Debug, Clone)]
pub struct Tending<'a> {
    pub keys: &'a LockKeys,
    /// It has waiters on the lock (their places are kept).
    pub waiting: bool,
    /// It has watchers on the lock (the watch is kept).
    pub watching: bool,
    /// The waiters whose positions it reports.
    pub positions_of: Vec<&'a str>,
}

/// What tending a lock found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tended {
    /// Until the earliest lease ends (0: free).
    pub free_in_ms: u64,
    /// The positions asked for, in order; 0 for one not in the queue.
    pub positions: Vec<u64>,
    /// How many wait in the lock's queue, on every instance.
    pub queued: u64,
    /// The watch had lapsed and began again: the history has a gap.
    pub restarted: bool,
    /// The instance's waiters may have lost their places (its presence
    /// had lapsed too long, or the queue was gone): where each stands
    /// should be asked.
    pub lapsed: bool,
}

/// Runs `tend.lua` for many locks at once (one pipeline on one Redis; each
/// by itself in a cluster). The outer error fails them all.
pub async fn tend_many(
    conn: &mut Connection,
    locks: &[Tending<'_>],
    instance: &str,
    publish: &str,
) -> Result<Vec<Result<Tended, BackendError>>, BackendError> {
    let invocations: Vec<FunctionCall> = locks
        .iter()
        .map(|tending| {
            let mut invocation = TEND.call(tending.keys, publish);
            let flag = |on: bool| if on { "1" } else { "0" };
            invocation
                .arg(instance)
                .arg(flag(tending.waiting))
                .arg(flag(tending.watching))
                .arg(FENCE_RETENTION_MS);
            for id in &tending.positions_of {
                invocation.arg(*id);
            }
            invocation
        })
        .collect();
    let replies = TEND.run_all(&invocations, conn).await?;
    Ok(replies
        .into_iter()
        .map(|reply| read_tended(&TEND, &reply?))
        .collect())
}

fn read_tended(script: &Function, reply: &Reply) -> Result<Tended, BackendError> {
    script.read(reply, |reply| {
        if reply.code() != "tended" {
            return None;
        }
        let positions = reply.text("positions")?;
        let positions = positions
            .split(',')
            .filter(|part| !part.is_empty())
            .map(|part| part.parse().ok())
            .collect::<Option<Vec<u64>>>()?;
        Some(Tended {
            free_in_ms: reply.number("free_in_ms")?,
            positions,
            queued: reply.number("queued")?,
            restarted: reply.flag("restarted")?,
            lapsed: reply.flag("lapsed")?,
        })
    })
}
