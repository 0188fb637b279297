//! The lock domain: acquire (or wait for), release, extend and inspect named locks held in Redis.
//!
//! A lock is a Redis hash (`owner`, `holds`, `fence`) whose TTL is the lease,
//! so a crashed holder's lock frees itself. Every read-check-write is one Lua
//! script (see `lua/`), and times come from the Redis clock.

mod handover;
mod inputs;
mod streams;
pub mod waiting;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use handover::Handover;
pub use inputs::{
    InvalidKey, InvalidToken, LockKey, LockLimits, MAX_KEY_LEN, MIN_TTL_MS, OutOfRange, Token, Ttl,
    WaitTime,
};
pub use streams::{LostReason, StreamEnd, StreamEvent, StreamedLock, Streams};
pub use waiting::{WaitRefused, Waiting};

use crate::metrics::{LockOutcome, Metrics};
pub use crate::redis::locks::LockState;
use crate::redis::locks::{
    self as scripts, AcquireReply, ExtendReply, Holds, InspectReply, LockKeys, ReenterReply,
    ReleaseReply,
};
use crate::redis::{BackendError, Redis};

/// A request to take (or re-enter) a lock.
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    pub key: LockKey,
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

    /// Takes the lock for a new owner, waiting up to `request.wait` while
    /// another owner holds it, or re-enters it with the holder's token.
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
        let handover = Handover::new(self.clone(), request.key.clone(), token);
        let deadline = started + request.wait.as_duration();
        match self
            .acquire_by(&keys, &token, ttl_ms, deadline, request.confirmed)
            .await
        {
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

    /// Tries the acquire script; while the lock is held and `deadline` is
    /// ahead, waits in the lock's queue and tries again when a release
    /// message picks this waiter, when the holder's lease (as last reported)
    /// runs out, and once at the deadline. Never on a polling interval.
    /// Returns the grant and how long it was waited for.
    async fn acquire_by(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl_ms: u64,
        deadline: Instant,
        confirmed: bool,
    ) -> Result<(LockState, Duration), NoGrant> {
        let token = token.expose();
        let mut ticket = None;
        let mut refused_at = None;
        loop {
            // Boxed: the round trip's state is large, and only lives while it
            // runs; a request waiting for a lock keeps only the small rest.
            let attempt = Box::pin(self.try_acquire(keys, &token, ttl_ms, confirmed));
            let remaining_ms = match attempt.await? {
                AcquireReply::Granted(state) => {
                    let waited = refused_at.map_or(Duration::ZERO, |at: Instant| at.elapsed());
                    return Ok((state, waited));
                }
                AcquireReply::Held { remaining_ms } => remaining_ms,
            };
            let now = Instant::now();
            refused_at.get_or_insert(now);
            if now >= deadline {
                return Err(NoGrant::Held { remaining_ms });
            }
            let Some(ticket) = ticket.as_mut() else {
                // First refusal: join the queue, and try once more as soon as
                // the subscription stands, so a release between the refusal
                // and the subscription is not missed.
                let mut joined = self.0.waiting.enter(&keys.channel)?;
                let _ = tokio::time::timeout_at(deadline.into(), joined.subscribed()).await;
                ticket = Some(joined);
                continue;
            };
            // One millisecond past the lease, so that the key has expired.
            let lease_ends = now + Duration::from_millis(remaining_ms.saturating_add(1));
            tokio::select! {
                () = ticket.woken() => {}
                () = tokio::time::sleep_until(lease_ends.min(deadline).into()) => {}
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
        match scripts::reenter(&mut conn, &keys, &token.expose(), ttl_ms).await? {
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
        }
    }

    /// Runs the acquire script once (and, when `confirmed`, waits for the
    /// replicas to confirm a grant).
    async fn try_acquire(
        &self,
        keys: &LockKeys,
        token: &str,
        ttl_ms: u64,
        confirmed: bool,
    ) -> Result<AcquireReply, NoGrant> {
        let mut conn = if confirmed {
            self.0.redis.confirming_connection().await?
        } else {
            self.0.redis.connection().await?
        };
        let reply = scripts::acquire(&mut conn, keys, token, ttl_ms).await?;
        if matches!(reply, AcquireReply::Granted(_))
            && confirmed
            && !self.0.redis.replicated(&mut conn, &keys.lock).await?
        {
            return Err(NoGrant::NotReplicated);
        }
        Ok(reply)
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

    /// Reads the lock's state; never its token.
    pub async fn inspect(&self, key: &LockKey) -> Result<LockState, LockError> {
        let mut conn = self.0.redis.connection().await?;
        match scripts::inspect(&mut conn, &self.keys(key)).await? {
            InspectReply::Held(state) => Ok(state),
            InspectReply::NotFound => Err(LockError::NotFound { key: key.clone() }),
        }
    }
}

/// Why [`Locks::acquire_by`] ended without a grant.
enum NoGrant {
    Held {
        remaining_ms: u64,
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
