//! One request's way to a new grant: its attempts, its place among this instance's waiters, and the handover that guards what it is granted.

use std::time::{Duration, Instant};

use super::handover::Handover;
use super::waiting::{Ticket, WaitRefused};
use super::{LockKind, LockState, Locks, Token};
use crate::duration::millis;
use crate::redis::BackendError;
use crate::redis::locks::{self as scripts, AcquireReply, Attempt, LockKeys};

/// How often a waiting writer renews its mark (which stands a second).
const MARK_RENEWAL: Duration = Duration::from_millis(300);

/// What one acquisition wants, for every attempt it makes.
#[derive(Clone, Copy)]
pub(super) struct AcquireTerms<'a> {
    pub(super) keys: &'a LockKeys,
    pub(super) kind: LockKind,
    pub(super) ttl_ms: u64,
    pub(super) deadline: Instant,
    pub(super) confirmed: bool,
    pub(super) streamed: bool,
}

/// Why an acquisition ended without a grant.
pub(super) enum NoGrant {
    Held {
        remaining_ms: u64,
    },
    LimitMismatch {
        limit: u64,
    },
    CannotWait(WaitRefused),
    /// Granted, but too few replicas confirmed it.
    NotReplicated,
    Backend(BackendError),
}

impl From<WaitRefused> for NoGrant {
    fn from(err: WaitRefused) -> Self {
        Self::CannotWait(err)
    }
}

impl From<BackendError> for NoGrant {
    fn from(err: BackendError) -> Self {
        Self::Backend(err)
    }
}

/// A new holder's attempts at one lock, until it is granted, refused, or
/// its wait runs out.
pub(super) struct Acquisition<'a> {
    locks: &'a Locks,
    terms: AcquireTerms<'a>,
    token: String,
    handover: &'a mut Handover,
    /// Its place among this instance's waiters, once it has to wait.
    ticket: Option<Ticket>,
    /// When it was first refused: the wait is counted from there.
    refused_at: Option<Instant>,
}

impl<'a> Acquisition<'a> {
    pub(super) fn new(
        locks: &'a Locks,
        terms: AcquireTerms<'a>,
        token: &Token,
        handover: &'a mut Handover,
    ) -> Self {
        Self {
            locks,
            terms,
            token: token.expose(),
            handover,
            ticket: None,
            refused_at: None,
        }
    }

    /// Tries the acquire script; while there is no place and the deadline
    /// is ahead, waits in the lock's queue and tries again when a release
    /// message picks this waiter, when a holder's lease (as last reported)
    /// runs out, and once at the deadline. Never on a polling interval.
    /// Returns the grant and how long it was waited for.
    pub(super) async fn run(mut self) -> Result<(LockState, Duration), NoGrant> {
        loop {
            // Boxed: the round trip's state is large, and only lives while
            // it runs; a request waiting for a lock keeps only the small rest.
            let reply = Box::pin(self.attempt()).await?;
            let remaining_ms = match self.refused(reply) {
                Ok(granted) => return Ok(granted),
                Err(Refused::Held { remaining_ms }) => remaining_ms,
                Err(Refused::LimitMismatch { limit }) => {
                    return Err(NoGrant::LimitMismatch { limit });
                }
            };
            let now = Instant::now();
            self.refused_at.get_or_insert(now);
            if now >= self.terms.deadline {
                return Err(NoGrant::Held { remaining_ms });
            }
            self.wait(now, remaining_ms).await?;
        }
    }

    /// What one attempt's reply means: the grant (passing a wake-up on when
    /// there is room for more), or why there was no place.
    fn refused(&mut self, reply: AcquireReply) -> Result<(LockState, Duration), Refused> {
        match reply {
            AcquireReply::Granted { state, room } => {
                self.handover.set_marked(false);
                if let (true, Some(ticket)) = (room, self.ticket.as_ref()) {
                    ticket.wake_next();
                }
                let waited = self
                    .refused_at
                    .map_or(Duration::ZERO, |at: Instant| at.elapsed());
                Ok((state, waited))
            }
            AcquireReply::Held {
                remaining_ms,
                marked,
                behind_writer,
            } => {
                if marked {
                    self.handover.set_marked(true);
                }
                // The key is free but for a waiting writer. The release
                // that freed it may have woken this reader instead of that
                // writer: pass the wake-up on to a local writer, or it would
                // sleep until its wait ends.
                if let (true, Some(ticket)) = (behind_writer, self.ticket.as_ref()) {
                    ticket.wake_writer();
                }
                Err(Refused::Held { remaining_ms })
            }
            AcquireReply::LimitMismatch { limit } => Err(Refused::LimitMismatch { limit }),
        }
    }

    /// Waits for the next reason to try again: a release message that picks
    /// this waiter, the end of the holder's lease, or the deadline.
    async fn wait(&mut self, now: Instant, remaining_ms: u64) -> Result<(), NoGrant> {
        let deadline = self.terms.deadline;
        let Some(ticket) = self.ticket.as_mut() else {
            // First refusal: join the queue, and try once more as soon as
            // the subscription stands, so a release between the refusal and
            // the subscription is not missed.
            let writer = !self.terms.kind.is_shared();
            let mut joined = self
                .locks
                .0
                .waiting
                .enter(&self.terms.keys.channel, writer)?;
            let _ = tokio::time::timeout_at(deadline.into(), joined.subscribed()).await;
            self.ticket = Some(joined);
            return Ok(());
        };
        // One millisecond past the lease, so that the key has expired.
        let lease_ends = now + Duration::from_millis(remaining_ms.saturating_add(1));
        let retry_at = lease_ends.min(deadline);
        loop {
            let mark_due = Instant::now() + MARK_RENEWAL;
            tokio::select! {
                () = ticket.woken() => return Ok(()),
                () = tokio::time::sleep_until(retry_at.into()) => return Ok(()),
                () = ticket.closing() => return Err(WaitRefused::ShuttingDown.into()),
                () = tokio::time::sleep_until(mark_due.into()), if self.handover.marked() => {
                    let marked = renew_mark(self.locks, self.terms, &self.token).await;
                    self.handover.set_marked(marked);
                }
            }
        }
    }

    /// Runs the acquire script once (and, when the grant must be confirmed,
    /// waits for the replicas to confirm it).
    async fn attempt(&self) -> Result<AcquireReply, NoGrant> {
        let terms = self.terms;
        let attempt = Attempt {
            token: &self.token,
            ttl_ms: terms.ttl_ms,
            wait_left_ms: millis(terms.deadline.saturating_duration_since(Instant::now())),
            marked: self.handover.marked(),
            streamed: terms.streamed,
        };
        let (reply, confirmed) = self
            .locks
            .0
            .redis
            .write(
                &terms.keys.lock,
                terms.confirmed,
                async |conn| scripts::acquire(conn, terms.keys, terms.kind, attempt).await,
                |reply| matches!(reply, AcquireReply::Granted { .. }),
            )
            .await?;
        if !confirmed {
            return Err(NoGrant::NotReplicated);
        }
        Ok(reply)
    }
}

/// Renews a waiting writer's mark, which lapses a second after its last
/// renewal: a writer whose gateway died holds readers back no longer.
/// Returns whether the request is still marked; a mark found gone is made
/// again by its next attempt.
async fn renew_mark(locks: &Locks, terms: AcquireTerms<'_>, token: &str) -> bool {
    let wait_left = millis(terms.deadline.saturating_duration_since(Instant::now()));
    let renewed = async {
        let mut conn = locks.0.redis.connection().await?;
        scripts::renew_mark(&mut conn, terms.keys, token, wait_left).await
    };
    match renewed.await {
        Ok(marked) => marked,
        // Redis is away: the mark is left to lapse or stand, as the next
        // attempt finds it.
        Err(err) => {
            tracing::debug!(error = %err, "could not renew a waiting writer's mark");
            true
        }
    }
}

/// Why one attempt found no place.
enum Refused {
    Held { remaining_ms: u64 },
    LimitMismatch { limit: u64 },
}
