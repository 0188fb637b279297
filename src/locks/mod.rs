//! The lock domain: acquire (or wait for), release, extend and inspect named locks held in Redis.
//!
//! A plain lock is a Redis hash (`owner`, `holds`, `fence`) whose TTL is the
//! lease, so a crashed holder's lock frees itself. A shared or counting lock
//! keeps each holder's lease in a sorted set, and every script drops the
//! holders whose lease ended (`lua/lib/holders.lua`). Every read-check-write
//! is one Lua script (see `lua/`), and times come from the Redis clock.

mod acquire;
mod handover;
mod inputs;
mod streams;
pub mod waiting;

use std::sync::Arc;
use std::time::{Duration, Instant};

use acquire::{AcquireTerms, Acquisition, NoGrant};
pub use handover::Handover;
pub use inputs::{
    DEFAULT_MAX_TTL_MS, DEFAULT_MAX_WAIT_MS, EXAMPLE_TOKEN, InvalidKey, InvalidKind, InvalidToken,
    LockKey, LockLimits, MAX_KEY_LEN, MAX_LIMIT, MIN_TTL_MS, OutOfRange, Token, Ttl, WaitTime,
    key_pattern, lock_kind,
};
pub use streams::{LostReason, StreamEnd, StreamEvent, StreamedLock, Streams};
pub use waiting::{WaitRefused, Waiting};

use crate::metrics::{LockOutcome, Metrics};
use crate::redis::locks::{
    self as scripts, ExtendReply, Holds, InspectReply, LockKeys, ReenterReply, ReleaseReply,
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
    /// Whether it is a streamed lock's grant, whose release Redis notes so
    /// that a renewal on its way learns of it ([`Streams`] sets it).
    pub streamed: bool,
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
pub struct Locks(Arc<LocksState>);

struct LocksState {
    redis: Redis,
    prefix: Box<str>,
    waiting: Waiting,
    metrics: Arc<Metrics>,
}

impl Locks {
    pub fn new(redis: Redis, prefix: &str, waiting: Waiting, metrics: Arc<Metrics>) -> Self {
        Self(Arc::new(LocksState {
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
        if let Some(token) = request.token {
            // Boxed, like every round trip here: see `Acquisition::run`.
            return Box::pin(self.reenter(request, token)).await;
        }
        let started = Instant::now();
        let keys = self.keys(&request.key);
        let token = Token::generate();
        let mut handover = Handover::new(self.clone(), request.key.clone(), token);
        let terms = AcquireTerms {
            keys: &keys,
            kind: request.kind,
            ttl_ms: request.ttl.as_millis(),
            deadline: started + request.wait.as_duration(),
            confirmed: request.confirmed,
            streamed: request.streamed,
        };
        match Acquisition::new(self, terms, &token, &mut handover)
            .run()
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
            Err(refused) => {
                let waited = (!request.wait.is_zero()).then(|| started.elapsed());
                let grant = (request.key, token, handover);
                Err(self.not_granted(refused, grant, waited).await)
            }
        }
    }

    /// The error for an acquisition that ended without a grant, once what
    /// it left behind is undone: a waiting writer's mark, or a grant too few
    /// replicas confirmed.
    async fn not_granted(
        &self,
        refused: NoGrant,
        (key, token, handover): (LockKey, Token, Handover),
        waited: Option<Duration>,
    ) -> LockError {
        match refused {
            NoGrant::Held { remaining_ms } => {
                handover.cancel();
                self.0.metrics.lock(LockOutcome::Conflict);
                if let Some(waited) = waited {
                    self.0.metrics.lock_wait(waited);
                }
                LockError::Held {
                    key,
                    retry_after_ms: remaining_ms,
                }
            }
            NoGrant::LimitMismatch { limit } => {
                handover.cancel();
                LockError::LimitMismatch { key, limit }
            }
            NoGrant::CannotWait(err) => {
                handover.cancel();
                err.into()
            }
            NoGrant::NotReplicated => {
                // Undo the grant now, so the answer is true when it is read;
                // if that fails, the handover keeps trying in the background.
                if Box::pin(self.release(&key, &token)).await.is_ok() {
                    handover.cancel();
                }
                LockError::NotReplicated { key, undone: true }
            }
            // Not cancelled: the script may have run before the failure.
            NoGrant::Backend(err) => err.into(),
        }
    }

    /// Re-enters a lock its holder's `token` holds: one hold more, the lease
    /// renewed. A re-entry too few replicas confirm is given back.
    async fn reenter(&self, request: AcquireRequest, token: Token) -> Result<Lease, LockError> {
        let keys = self.keys(&request.key);
        let (ttl_ms, text) = (request.ttl.as_millis(), token.expose());
        let (reply, confirmed) = self
            .0
            .redis
            .write(
                &keys.lock,
                request.confirmed,
                async |conn| scripts::reenter(conn, &keys, request.kind, &text, ttl_ms).await,
                |reply| matches!(reply, ReenterReply::Reentered(_)),
            )
            .await?;
        match reply {
            ReenterReply::Reentered(_) if !confirmed => {
                // Give the hold just taken back.
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
        let keys = self.keys(key);
        let text = token.expose();
        let (reply, confirmed) = self
            .0
            .redis
            .write(
                &keys.lock,
                true,
                async |conn| scripts::extend(conn, &keys, &text, ttl.as_millis()).await,
                |reply| matches!(reply, ExtendReply::Extended(_)),
            )
            .await?;
        match reply {
            ExtendReply::Extended(_) if !confirmed => Err(LockError::NotReplicated {
                key: key.clone(),
                undone: false,
            }),
            ExtendReply::Extended(state) => Ok(state),
            ExtendReply::NotFound | ExtendReply::Released => {
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

/// The detail of [`LockError::NotReplicated`].
fn not_replicated(key: &LockKey, undone: bool) -> String {
    if undone {
        format!("too few replicas confirmed the grant of {key} in time; it was undone")
    } else {
        format!("too few replicas confirmed the new lease of {key} in time; the primary has it")
    }
}
