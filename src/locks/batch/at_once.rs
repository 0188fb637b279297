//! A batch on one Redis: all its locks in one script, or none; without a place in each, a wait in every lock's queue at once, tried again each time one of its locks tells it it has a place.
//!
//! The batch is never offered a place from a queue (a place offered in one
//! lock while another is taken would show part of the batch held): each
//! lock at whose head it stands with a place for it tells its instance so
//! (`<waiter id> ready` on the lock's grant channel) and lets nobody behind
//! it go first; the batch then runs its script again, which takes every
//! lock at once when each has a place.
//!
//! A batch that waits in a session waits for each of its locks as that
//! session, as a single request does: each wait is noted on the session
//! (an edge another session's search may close a cycle with) and searched
//! for a cycle it closes, at once and every round; a cycle whose youngest
//! wait is one of the batch's refuses the batch `409 deadlock`.

use std::time::Instant;

use futures_util::future::select_all;
use tracing::Instrument;

use super::{BatchHold, BatchTerms};
use crate::locks::acquire::GrantGuard;
use crate::locks::acquire::deadlock;
use crate::locks::error::LockError;
use crate::locks::inputs::LockKey;
use crate::locks::shared::Locks;
use crate::locks::waiting::{Ticket, WaitRefused};
use crate::redis::locks::LockKeys;
use crate::redis::locks::batch::{self as scripts, BatchAttempt, BatchLock, BatchReply};
use crate::redis::locks::grant::{IfGranted, Waiter};

impl Locks {
    /// One Redis's way: see the module's text.
    pub(super) async fn batch_at_once(
        &self,
        terms: &BatchTerms<'_>,
    ) -> Result<(Vec<BatchHold>, Vec<GrantGuard>), LockError> {
        let request = terms.request;
        let keys: Vec<LockKeys> = request
            .locks
            .iter()
            .map(|lock| self.keys(&lock.key))
            .collect();
        let mut guards: Vec<GrantGuard> = request
            .locks
            .iter()
            .map(|lock| GrantGuard::new(self.clone(), lock.key.clone(), terms.token, false))
            .collect();
        let (reply, sent) = Box::pin(self.batch_attempt(terms, &keys, None)).await?;
        match reply {
            BatchReply::Granted {
                fencing_tokens,
                expires_at_ms,
            } => {
                let holds = self.holds(terms, &fencing_tokens, expires_at_ms, sent);
                return Ok((holds, guards));
            }
            BatchReply::LimitMismatch { key, limit } => {
                complete(guards);
                return Err(LockError::LimitMismatch {
                    key: self.lock_key(terms, &key),
                    limit,
                });
            }
            BatchReply::Held {
                key,
                free_in_ms,
                delayed_until_ms,
            } if request.wait.is_zero() || Instant::now() >= terms.deadline => {
                complete(guards);
                return Err(self.batch_held(terms, &key, free_in_ms, delayed_until_ms));
            }
            // Not queued without a waiter's id: waits as the rest.
            BatchReply::Held { .. } | BatchReply::Queued { .. } => {}
        }
        let id = uuid::Uuid::new_v4().to_string();
        for guard in &mut guards {
            guard.queued_as(Some((&id, terms.deadline)));
        }
        let session = terms.session.as_ref().map(|joined| &joined.handle);
        let span = wait_span(&keys);
        let waited = Box::pin(self.batch_wait(terms, &keys, &id).instrument(span.clone())).await;
        span.record(
            "lock.outcome",
            match &waited {
                Ok(_) => "granted",
                Err(LockError::Held { .. } | LockError::Delayed { .. }) => "timed-out",
                Err(_) => "refused",
            },
        );
        if let Some(session) = session {
            for lock in &keys {
                Box::pin(deadlock::note_wait(self, session, lock.key(), None)).await;
            }
        }
        match waited {
            Ok(holds) => Ok((holds, guards)),
            Err(err) => {
                // What it joined, it leaves: nothing was granted (a batch
                // is never offered a place), nothing is held.
                for lock in &request.locks {
                    let left = self
                        .leave_queue(&lock.key, &id, &terms.token, IfGranted::Keep)
                        .await;
                    if let Err(err) = left {
                        tracing::debug!(key = %lock.key, error = %err, "a batch could not leave a queue; its wait's end drops it");
                    }
                }
                complete(guards);
                Err(err)
            }
        }
    }

    /// Waits in every lock's queue, trying again each time one of them
    /// changes, until the batch is granted, its wait runs out, its session
    /// ends or the instance shuts down.
    async fn batch_wait(
        &self,
        terms: &BatchTerms<'_>,
        keys: &[LockKeys],
        id: &str,
    ) -> Result<Vec<BatchHold>, LockError> {
        let waiting = self.waiting();
        let mut tickets: Vec<Ticket> = keys
            .iter()
            .map(|keys| waiting.enter(keys, id, false))
            .collect::<Result<_, WaitRefused>>()?;
        for ticket in &mut tickets {
            let _ = tokio::time::timeout_at(terms.deadline.into(), ticket.subscribed()).await;
        }
        let closing = tickets[0].closing();
        let handle = terms.session.as_ref().map(|joined| &joined.handle);
        let session = handle.map(|handle| self.sessions().watch(handle));
        let never = tokio_util::sync::CancellationToken::new();
        let session_ended = session.as_ref().map_or(&never, |watch| watch.ended());
        if let Some(handle) = handle {
            for lock in keys {
                Box::pin(deadlock::note_wait(self, handle, lock.key(), Some(id))).await;
            }
        }
        let mut cycles = tokio::time::interval(deadlock::CHECK_EVERY);
        // The first lock without a place for it, as last heard, and when a
        // place there may free.
        let mut missing: (String, u64, Option<u64>);
        loop {
            let (reply, sent) = Box::pin(self.batch_attempt(terms, keys, Some(id))).await?;
            match reply {
                BatchReply::Granted {
                    fencing_tokens,
                    expires_at_ms,
                } => return Ok(self.holds(terms, &fencing_tokens, expires_at_ms, sent)),
                BatchReply::LimitMismatch { key, limit } => {
                    return Err(LockError::LimitMismatch {
                        key: self.lock_key(terms, &key),
                        limit,
                    });
                }
                BatchReply::Held {
                    key,
                    free_in_ms,
                    delayed_until_ms,
                } => return Err(self.batch_held(terms, &key, free_in_ms, delayed_until_ms)),
                BatchReply::Queued {
                    key,
                    free_in_ms,
                    delayed_until_ms,
                } => {
                    for (keys, free_in) in keys.iter().zip(&free_in_ms) {
                        if *free_in > 0 {
                            waiting.due(keys, std::time::Duration::from_millis(*free_in));
                        }
                    }
                    let index = keys.iter().position(|lock| lock.key() == key);
                    let free_in = index.and_then(|index| free_in_ms.get(index)).copied();
                    missing = (key, free_in.unwrap_or(1), delayed_until_ms);
                }
            }
            loop {
                let changes =
                    select_all(tickets.iter_mut().map(|ticket| Box::pin(ticket.changed())));
                tokio::select! {
                    _ = changes => break,
                    _ = cycles.tick(), if handle.is_some() => {
                        if let Some(err) = Box::pin(self.batch_cycle(terms, keys, id)).await {
                            return Err(err);
                        }
                    }
                    () = tokio::time::sleep_until(terms.deadline.into()) => {
                        let (key, free_in_ms, delayed_until_ms) = missing;
                        return Err(self.batch_held(terms, &key, free_in_ms, delayed_until_ms));
                    }
                    () = closing.cancelled() => return Err(WaitRefused::ShuttingDown.into()),
                    () = session_ended.cancelled() => return Err(LockError::SessionNotFound),
                }
            }
        }
    }

    /// The deadlock a waiting batch's wait for one of its locks closes, as
    /// the youngest wait of the cycle: its refusal (see the module's text).
    async fn batch_cycle(
        &self,
        terms: &BatchTerms<'_>,
        keys: &[LockKeys],
        id: &str,
    ) -> Option<LockError> {
        let session = &terms.session.as_ref()?.handle;
        for lock in keys {
            if let Some(cycle) = deadlock::cycle_through(self, lock, session, id).await {
                self.metrics().deadlock();
                return Some(LockError::Deadlock {
                    key: self.lock_key(terms, lock.key()),
                    cycle,
                });
            }
        }
        None
    }

    /// Runs the batch's script once, as waiter `id` (joining every queue if
    /// not every lock has a place) or trying once (`None`); with the reply,
    /// when the script was sent (a grant's leases run from then at least).
    async fn batch_attempt(
        &self,
        terms: &BatchTerms<'_>,
        keys: &[LockKeys],
        id: Option<&str>,
    ) -> Result<(BatchReply, Instant), LockError> {
        let request = terms.request;
        let locks: Vec<BatchLock<'_>> = request
            .locks
            .iter()
            .zip(keys)
            .map(|(lock, keys)| BatchLock {
                keys,
                kind: lock.kind,
                permits: lock.permits,
            })
            .collect();
        let token = terms.token.expose();
        let attempt = BatchAttempt {
            token: &token,
            ttl_ms: request.ttl.as_millis(),
            wait_left_ms: crate::duration::millis(
                terms.deadline.saturating_duration_since(Instant::now()),
            ),
            waiter: id.map(|id| Waiter {
                id,
                instance: self.waiting().instance(),
                // A batch takes its locks itself: it is never granted one.
                outright: false,
            }),
            value: request.value.as_ref().map(|value| value.as_str()),
            session: terms.session.as_ref().map(|joined| joined.record.as_str()),
        };
        let publish = self.publish();
        let sent = Instant::now();
        let (reply, confirmed) = self
            .redis()
            .write(
                &keys[0].lock(),
                true,
                async |conn| scripts::batch(conn, &locks, publish, attempt).await,
                |reply| matches!(reply, BatchReply::Granted { .. }),
            )
            .await?;
        if !confirmed {
            let taken = request.locks.iter().map(|lock| &lock.key);
            self.give_back(terms.token, taken).await;
            return Err(LockError::NotReplicated {
                key: request.locks[0].key.clone(),
                undone: true,
            });
        }
        Ok((reply, sent))
    }

    /// The holds of a granted batch, in its order.
    fn holds(
        &self,
        terms: &BatchTerms<'_>,
        fencing_tokens: &[u64],
        expires_at_ms: u64,
        sent: Instant,
    ) -> Vec<BatchHold> {
        terms
            .request
            .locks
            .iter()
            .zip(fencing_tokens)
            .map(|(lock, fencing_token)| BatchHold {
                key: lock.key.clone(),
                kind: lock.kind,
                fencing_token: *fencing_token,
                expires_at_ms,
                lease_from: sent,
            })
            .collect()
    }

    /// The refusal of a batch for want of a place in `key` (a lock-delay
    /// alone keeping it until `delayed_until_ms`, when that is why).
    fn batch_held(
        &self,
        terms: &BatchTerms<'_>,
        key: &str,
        free_in_ms: u64,
        delayed_until_ms: Option<u64>,
    ) -> LockError {
        let key = self.lock_key(terms, key);
        let retry_after_ms = free_in_ms.max(1);
        match delayed_until_ms {
            Some(until_ms) => LockError::Delayed {
                key,
                until_ms,
                retry_after_ms,
            },
            None => LockError::Held {
                key,
                retry_after_ms,
            },
        }
    }

    /// The batch's lock a script named.
    fn lock_key(&self, terms: &BatchTerms<'_>, key: &str) -> LockKey {
        terms
            .request
            .locks
            .iter()
            .find(|lock| lock.key.as_str() == key)
            .map_or_else(
                || terms.request.locks[0].key.clone(),
                |lock| lock.key.clone(),
            )
    }
}

/// Nothing to undo: the guards stand down.
/// A batch's wait's span, for traces (debug level: disabled unless traces
/// are on): its locks and how it ended. It has no link: a batch is told
/// that a place is free, and takes all its locks itself.
fn wait_span(keys: &[LockKeys]) -> tracing::Span {
    tracing::debug_span!(
        "lock wait",
        otel.name = "lock wait",
        lock.keys = %keys.iter().map(LockKeys::key).collect::<Vec<_>>().join(" "),
        lock.outcome = tracing::field::Empty,
    )
}

fn complete(guards: Vec<GrantGuard>) {
    for guard in guards {
        guard.complete();
    }
}
