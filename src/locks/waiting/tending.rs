//! Tending the locks this instance has waiters or watchers on: every round (300 ms), and when a lease it knows of ends.
//!
//! One `tend.lua` per lock, all in one pipeline per round: the instance's
//! presence in the lock's queue is renewed (its waiters keep their places
//! for a second more; an instance that died loses them within a second),
//! its watch is kept, the expiries owed to watchers are recorded, a place
//! that a lease freed (no release announces that) is handed to the head
//! of the queue, and the positions of the waiters that report them come
//! back. It is not polling for the lock: grants come by message.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Room, Standing, Waiting};
use crate::redis::Redis;
use crate::redis::locks::LockKeys;
use crate::redis::locks::view::{self, Tended, Tending};

/// How often every lock with waiters or watchers here is tended. Its
/// presence in the queue stands a second (`lua/lib/queue.lua`): three
/// rounds may fail before this instance's waiters are passed over.
pub const ROUND: Duration = Duration::from_millis(300);

/// One lock to tend this time.
struct Plan {
    channel: String,
    keys: LockKeys,
    waiting: bool,
    watching: bool,
    /// The waiters whose positions are asked for.
    ids: Vec<Arc<str>>,
}

impl Waiting {
    /// Starts tending, until the instance shuts down.
    pub fn start_tending(&self, redis: Redis) {
        tokio::spawn(tend_until_closed(self.0.clone(), redis));
    }
}

async fn tend_until_closed(room: Arc<Room>, redis: Redis) {
    let mut next_round = Instant::now() + ROUND;
    loop {
        let due = room.earliest_due();
        let wake = due.map_or(next_round, |due| due.min(next_round));
        tokio::select! {
            () = room.closing.cancelled() => return,
            () = room.tend_soon.notified() => continue,
            () = tokio::time::sleep_until(wake) => {}
        }
        let now = Instant::now();
        let round = now >= next_round;
        if round {
            next_round = now + ROUND;
        }
        let plans = room.plans(round, now);
        if !plans.is_empty() {
            tend(&room, &redis, plans).await;
        }
    }
}

impl Room {
    fn earliest_due(&self) -> Option<Instant> {
        self.lock()
            .values()
            .filter_map(|interest| interest.due)
            .min()
    }

    /// The locks to tend: all of them in a round, else those due.
    fn plans(&self, round: bool, now: Instant) -> Vec<Plan> {
        let mut locks = self.lock();
        let mut plans = Vec::new();
        for (channel, interest) in locks.iter_mut() {
            let due = interest.due.is_some_and(|due| due <= now);
            if !round && !due && !interest.check_all {
                continue;
            }
            if due {
                interest.due = None;
            }
            let check_all = std::mem::take(&mut interest.check_all);
            let ids = interest
                .waiters
                .iter()
                .filter(|(_, slot)| check_all || slot.reports_position)
                .map(|(id, _)| id.clone())
                .collect();
            plans.push(Plan {
                channel: channel.clone(),
                keys: interest.keys.clone(),
                waiting: !interest.waiters.is_empty(),
                watching: interest.watchers > 0,
                ids,
            });
        }
        plans
    }

    /// What tending a lock found, applied: when to tend it next, the
    /// waiters' positions, a lapsed watch.
    fn tended(&self, plan: &Plan, tended: &Tended) {
        let mut locks = self.lock();
        let Some(interest) = locks.get_mut(&plan.channel) else {
            return;
        };
        if tended.free_in_ms > 0 && !interest.is_idle() {
            // One millisecond past the lease, so that the key has expired:
            // a waiter gets the place, a watcher the expiry, at once.
            let at = Instant::now() + Duration::from_millis(tended.free_in_ms + 1);
            interest.due = Some(interest.due.map_or(at, |due| due.min(at)));
        }
        for (id, position) in plan.ids.iter().zip(&tended.positions) {
            let Some(slot) = interest.waiters.get(id) else {
                continue;
            };
            slot.standing
                .send_if_modified(|standing| match (*standing, *position) {
                    (Standing::Queued { position: was }, 0) if was > 0 => {
                        *standing = Standing::Unaccounted;
                        true
                    }
                    (Standing::Ready(_), 0) => {
                        *standing = Standing::Unaccounted;
                        true
                    }
                    (Standing::Queued { position: was }, is) if was > 0 && is > 0 && is != was => {
                        *standing = Standing::Queued { position: is };
                        true
                    }
                    _ => false,
                });
        }
        interest.queued = tended.queued;
        if tended.lapsed && plan.ids.len() < interest.waiters.len() {
            // This instance was away (paused, or Redis stalled) long enough
            // for its waiters to be taken for gone: ask where each stands,
            // at once. One no longer queued nor granted leaves and queues
            // again (`Standing::Unaccounted`).
            interest.check_all = true;
            self.tend_soon.notify_one();
        }
        if tended.restarted {
            interest.restarts.send_modify(|count| *count += 1);
        }
    }
}

async fn tend(room: &Room, redis: &Redis, plans: Vec<Plan>) {
    let tendings: Vec<Tending<'_>> = plans
        .iter()
        .map(|plan| Tending {
            keys: &plan.keys,
            waiting: plan.waiting,
            watching: plan.watching,
            positions_of: plan.ids.iter().map(|id| &**id).collect(),
        })
        .collect();
    let tended = async {
        let mut conn = redis.connection().await?;
        view::tend_many(
            &mut conn,
            &tendings,
            &room.instance,
            redis.publish_command(),
        )
        .await
    };
    match tended.await {
        Ok(results) => {
            for (plan, result) in plans.iter().zip(results) {
                match result {
                    Ok(tended) => room.tended(plan, &tended),
                    Err(err) => {
                        tracing::debug!(key = plan.keys.key(), error = %err, "could not tend a lock")
                    }
                }
            }
        }
        // Redis is away: the next round tries again; the waiters' places
        // stand a second, and requests answer 503 meanwhile anyway.
        Err(err) => tracing::debug!(error = %err, locks = plans.len(), "could not tend the locks"),
    }
}
