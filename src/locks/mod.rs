//! The lock domain: acquire (or wait for), release, extend and inspect named locks held in Redis.
//!
//! A plain lock is a Redis hash (`owner`, `holds`, `fence`) whose TTL is the
//! lease, so a crashed holder's lock frees itself. A shared or counting lock
//! keeps each holder's lease in a sorted set, and every script drops the
//! holders whose lease ended (`lua/lib/holders.lua`). Every read-check-write
//! is one Lua script (see `lua/`), and times come from the Redis clock.

mod handover;
mod inputs;
mod streams;
pub mod waiting;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use handover::Handover;
use inputs::millis;
pub use inputs::{
    InvalidKey, InvalidKind, InvalidToken, LockKey, LockLimits, MAX_KEY_LEN, MAX_LIMIT, MIN_TTL_MS,
    OutOfRange, Token, Ttl, WaitTime, lock_kind,
};
pub use streams::{LostReason, StreamEnd, StreamEvent, StreamedLock, Streams};
use waiting::Ticket;
pub use waiting::{WaitRefused, Waiting};

use crate::metrics::{LockOutcome, Metrics};
use crate::redis::locks::{
    self as scripts, AcquireReply, Attempt, ExtendReply, Holds, InspectReply, LockKeys,
    ReenterReply, ReleaseReply,
};
pub use crate::redis::locks::{Inspection, LockKind, LockState};
use crate::redis::{BackendError, Redis};

/// A request to take (or re-enter) a lock.
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    pub key: LockKey,
    /// Exclusive (alone, or one of a counting lock's places) or shared.
    pub kind: LockKind,
    pub ttl: Ttl,
    pub wait: WaitTime,
    /// Present when the client re-enters a lock it holds.
    pub token: Option<Token>,
    /// Whether the configured replicas must confirm the grant. Clients'
    /// requests do; the sale's own short locks need not, since the purchase
    /// they guard is confirmed itself.
    pub confirmed: bool,
}

/// A held lease, as acquisition reports it.
#[derive(Debug)]
pub struct Lease {
    pub key: LockKey,
    pub token: Token,
    pub state: LockState,
    /// How long the request waited for the lock.
    pub waited: Duration,
    /// Present for a new grant (absent for re-entry): complete it once the
    /// client has the lease, or the grant is released when it is dropped.
    pub handover: Option<Handover>,
}

/// What releasing one hold left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// The lock is free; waiters were told.
    Free,
    /// Re-entrant holds remain.
    HoldsLeft(u64),
}

/// Why a lock operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{key} is held by another owner")]
    Held { key: LockKey, retry_after_ms: u64 },
    #[error("the token given does not hold {key}")]
    NotOwner { key: LockKey },
    #[error("there is no lock {key}: never taken, released, or expired")]
    NotFound { key: LockKey },
    #[error("{key} is held with a limit of {limit}; ask with that limit, or wait until it is free")]
    LimitMismatch { key: LockKey, limit: u64 },
    #[error("the token holds {key} in the other mode; re-enter in the mode it was taken in")]
    ModeConflict { key: LockKey },
    #[error(transparent)]
    CannotWait(#[from] WaitRefused),
    #[error("{}", not_replicated(key, *undone))]
    NotReplicated { key: LockKey, undone: bool },
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// The lock operations, shared by every request of one gateway instance
/// (and cloned for each, so they are one shared allocation).
#[derive(Clone)]
pub struct Locks(Arc<Shared>);

struct Shared {
    redis: Redis,
    prefix: Box<str>,
    waiting: Waiting,
    metrics: Arc<Metrics>,
}

impl Locks {
    pub fn new(redis: Redis, prefix: &str, waiting: Waiting, metrics: Arc<Metrics>) -> Self {
        Self(Arc::new(Shared {
            redis,
            prefix: prefix.into(),
            waiting,
            metrics,
        }))
    }

    fn keys(&self, key: &LockKey) -> LockKeys {
        LockKeys::new(&self.0.prefix, key.as_str())
    }

    /// Requests waiting for a lock on this instance now.
    pub fn waiters(&self) -> usize {
        self.0.waiting.count()
    }

    /// Takes the lock for a new holder, waiting up to `request.wait` while
    /// there is no place for it, or re-enters it with the holder's token.
    ///
    /// A new grant is guarded by its [`Handover`] from before the first
    /// attempt: if this future is dropped (the client disconnected while
    /// waiting) or the lease is dropped before the handover completes, the
    /// grant is released, so a client that went away holds nothing.
    pub async fn acquire(&self, request: AcquireRequest) -> Result<Lease, LockError> {
        let started = Instant::now();
        let keys = self.keys(&request.key);
        let ttl_ms = request.ttl.as_millis();
        if let Some(token) = request.token {
            // Boxed, like every round trip here: see `acquire_by`.
            return Box::pin(self.reenter(request, token)).await;
        }

        let token = Token::generate();
        let mut handover = Handover::new(self.clone(), request.key.clone(), token);
        let deadline = started + request.wait.as_duration();
        let wanted = Wanted {
            keys: &keys,
            kind: request.kind,
            ttl_ms,
            deadline,
            confirmed: request.confirmed,
        };
        match self.acquire_by(wanted, &token, &mut handover).await {
            Ok((state, waited)) => {
                self.0.metrics.lock(LockOutcome::Acquired);
                if !waited.is_zero() {
                    self.0.metrics.lock(LockOutcome::Waited);
                    self.0.metrics.lock_wait(waited);
                }
                Ok(Lease {
                    key: request.key,
                    token,
                    state,
                    waited,
                    handover: Some(handover),
                })
            }
            Err(NoGrant::Held { remaining_ms }) => {
                handover.cancel();
                self.0.metrics.lock(LockOutcome::Conflict);
                if !request.wait.is_zero() {
                    self.0.metrics.lock_wait(started.elapsed());
                }
                Err(LockError::Held {
                    key: request.key,
                    retry_after_ms: remaining_ms,
                })
            }
            Err(NoGrant::LimitMismatch { limit }) => {
                handover.cancel();
                Err(LockError::LimitMismatch {
                    key: request.key,
                    limit,
                })
            }
            Err(NoGrant::CannotWait(err)) => {
                handover.cancel();
                Err(err.into())
            }
            Err(NoGrant::NotReplicated) => {
                // Undo the grant now, so the answer is true when it is read;
                // if that fails, the handover keeps trying in the background.
                if Box::pin(self.release(&request.key, &token)).await.is_ok() {
                    handover.cancel();
                }
                Err(LockError::NotReplicated {
                    key: request.key,
                    undone: true,
                })
            }
            // Not cancelled: the script may have run before the failure.
            Err(NoGrant::Backend(err)) => Err(err.into()),
        }
    }

    /// Tries the acquire script; while there is no place and the deadline
    /// is ahead, waits in the lock's queue and tries again when a release
    /// message picks this waiter, when a holder's lease (as last reported)
    /// runs out, and once at the deadline. Never on a polling interval.
    /// A grant that leaves room for more wakes the next local waiter.
    /// Returns the grant and how long it was waited for.
    async fn acquire_by(
        &self,
        wanted: Wanted<'_>,
        token: &Token,
        handover: &mut Handover,
    ) -> Result<(LockState, Duration), NoGrant> {
        let token = token.expose();
        let mut ticket: Option<Ticket> = None;
        let mut refused_at = None;
        loop {
            let attempt = Attempt {
                token: &token,
                ttl_ms: wanted.ttl_ms,
                wait_left_ms: millis(wanted.deadline.saturating_duration_since(Instant::now())),
                marked: handover.marked(),
            };
            // Boxed: the round trip's state is large, and only lives while it
            // runs; a request waiting for a lock keeps only the small rest.
            let tried = Box::pin(self.try_acquire(wanted, attempt));
            let remaining_ms = match tried.await? {
                AcquireReply::Granted { state, room } => {
                    handover.set_marked(false);
                    if let (true, Some(ticket)) = (room, ticket.as_ref()) {
                        ticket.wake_next();
                    }
                    let waited = refused_at.map_or(Duration::ZERO, |at: Instant| at.elapsed());
                    return Ok((state, waited));
                }
                AcquireReply::Held {
                    remaining_ms,
                    marked,
                    behind_writer,
                } => {
                    if marked {
                        handover.set_marked(true);
                    }
                    // The key is free but for a waiting writer. The release
                    // that freed it may have woken this reader instead of
                    // that writer: pass the wake-up on to a local writer, or
                    // it would sleep until its wait ends.
                    if let (true, Some(ticket)) = (behind_writer, ticket.as_ref()) {
                        ticket.wake_writer();
                    }
                    remaining_ms
                }
                AcquireReply::LimitMismatch { limit } => {
                    return Err(NoGrant::LimitMismatch { limit });
                }
            };
            let now = Instant::now();
            refused_at.get_or_insert(now);
            if now >= wanted.deadline {
                return Err(NoGrant::Held { remaining_ms });
            }
            let Some(ticket) = ticket.as_mut() else {
                // First refusal: join the queue, and try once more as soon as
                // the subscription stands, so a release between the refusal
                // and the subscription is not missed.
                let writer = !wanted.kind.is_shared();
                let mut joined = self.0.waiting.enter(&wanted.keys.channel, writer)?;
                let _ = tokio::time::timeout_at(wanted.deadline.into(), joined.subscribed()).await;
                ticket = Some(joined);
                continue;
            };
            // One millisecond past the lease, so that the key has expired.
            let lease_ends = now + Duration::from_millis(remaining_ms.saturating_add(1));
            tokio::select! {
                () = ticket.woken() => {}
                () = tokio::time::sleep_until(lease_ends.min(wanted.deadline).into()) => {}
                () = ticket.closing() => return Err(WaitRefused::ShuttingDown.into()),
            }
        }
    }

    /// Re-enters a lock its holder's `token` holds: one hold more, the lease
    /// renewed. A re-entry too few replicas confirm is given back.
    async fn reenter(&self, request: AcquireRequest, token: Token) -> Result<Lease, LockError> {
        let keys = self.keys(&request.key);
        let mut conn = self.0.redis.confirming_connection().await?;
        let ttl_ms = request.ttl.as_millis();
        let reply =
            scripts::reenter(&mut conn, &keys, request.kind, &token.expose(), ttl_ms).await?;
        match reply {
            ReenterReply::Reentered(_)
                if request.confirmed && !self.0.redis.replicated(&mut conn, &keys.lock).await? =>
            {
                // Give the hold just taken back.
                drop(conn);
                self.release(&request.key, &token).await?;
                Err(LockError::NotReplicated {
                    key: request.key,
                    undone: true,
                })
            }
            ReenterReply::Reentered(state) => {
                self.0.metrics.lock(LockOutcome::Reentered);
                Ok(Lease {
                    key: request.key,
                    token,
                    state,
                    waited: Duration::ZERO,
                    handover: None,
                })
            }
            ReenterReply::NotOwner => Err(LockError::NotOwner { key: request.key }),
            ReenterReply::LimitMismatch { limit } => Err(LockError::LimitMismatch {
                key: request.key,
                limit,
            }),
            ReenterReply::ModeConflict => Err(LockError::ModeConflict { key: request.key }),
        }
    }

    /// Runs the acquire script once (and, when `confirmed`, waits for the
    /// replicas to confirm a grant).
    async fn try_acquire(
        &self,
        wanted: Wanted<'_>,
        attempt: Attempt<'_>,
    ) -> Result<AcquireReply, NoGrant> {
        let mut conn = if wanted.confirmed {
            self.0.redis.confirming_connection().await?
        } else {
            self.0.redis.connection().await?
        };
        let reply = scripts::acquire(&mut conn, wanted.keys, wanted.kind, attempt).await?;
        if matches!(reply, AcquireReply::Granted { .. })
            && wanted.confirmed
            && !self
                .0
                .redis
                .replicated(&mut conn, &wanted.keys.lock)
                .await?
        {
            return Err(NoGrant::NotReplicated);
        }
        Ok(reply)
    }

    /// Withdraws `token`'s mark as a waiting writer: the request stopped
    /// waiting without the lock. Shared waiters are told.
    pub(crate) async fn withdraw(&self, key: &LockKey, token: &Token) -> Result<(), LockError> {
        let mut conn = self.0.redis.connection().await?;
        let publish = self.0.redis.publish_command();
        scripts::withdraw(&mut conn, &self.keys(key), &token.expose(), publish).await?;
        Ok(())
    }

    /// Gives up one hold; the last one frees the lock and wakes its waiters.
    pub async fn release(&self, key: &LockKey, token: &Token) -> Result<Released, LockError> {
        self.release_holds(key, token, Holds::One).await
    }

    /// Gives up every hold of `token` at once, freeing the lock.
    pub async fn release_all(&self, key: &LockKey, token: &Token) -> Result<Released, LockError> {
        self.release_holds(key, token, Holds::All).await
    }

    async fn release_holds(
        &self,
        key: &LockKey,
        token: &Token,
        holds: Holds,
    ) -> Result<Released, LockError> {
        let mut conn = self.0.redis.connection().await?;
        let publish = self.0.redis.publish_command();
        let keys = self.keys(key);
        let token = token.expose();
        let released = match scripts::release(&mut conn, &keys, &token, publish, holds).await? {
            ReleaseReply::Released => Released::Free,
            ReleaseReply::HoldsLeft(holds) => Released::HoldsLeft(holds),
            ReleaseReply::NotFound => return Err(LockError::NotFound { key: key.clone() }),
            ReleaseReply::NotOwner => return Err(LockError::NotOwner { key: key.clone() }),
        };
        self.0.metrics.lock(LockOutcome::Released);
        Ok(released)
    }

    /// Renews the lease so it ends `ttl` from now.
    pub async fn extend(
        &self,
        key: &LockKey,
        token: &Token,
        ttl: Ttl,
    ) -> Result<LockState, LockError> {
        let mut conn = self.0.redis.confirming_connection().await?;
        let keys = self.keys(key);
        match scripts::extend(&mut conn, &keys, &token.expose(), ttl.as_millis()).await? {
            ExtendReply::Extended(_) if !self.0.redis.replicated(&mut conn, &keys.lock).await? => {
                Err(LockError::NotReplicated {
                    key: key.clone(),
                    undone: false,
                })
            }
            ExtendReply::Extended(state) => Ok(state),
            ExtendReply::NotFound => {
                self.0.metrics.lock(LockOutcome::ExpiredOnExtend);
                Err(LockError::NotFound { key: key.clone() })
            }
            ExtendReply::NotOwner => Err(LockError::NotOwner { key: key.clone() }),
        }
    }

    /// Reads the lock's state; never a token.
    pub async fn inspect(&self, key: &LockKey) -> Result<Inspection, LockError> {
        let mut conn = self.0.redis.connection().await?;
        match scripts::inspect(&mut conn, &self.keys(key)).await? {
            InspectReply::Held(state) => Ok(state),
            InspectReply::NotFound => Err(LockError::NotFound { key: key.clone() }),
        }
    }
}

/// What one acquisition wants, for every attempt it makes.
#[derive(Clone, Copy)]
struct Wanted<'a> {
    keys: &'a LockKeys,
    kind: LockKind,
    ttl_ms: u64,
    deadline: Instant,
    confirmed: bool,
}

/// Why [`Locks::acquire_by`] ended without a grant.
enum NoGrant {
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

/// The detail of [`LockError::NotReplicated`].
fn not_replicated(key: &LockKey, undone: bool) -> String {
    if undone {
        format!("too few replicas confirmed the grant of {key} in time; it was undone")
    } else {
        format!("too few replicas confirmed the new lease of {key} in time; the primary has it")
    }
}
