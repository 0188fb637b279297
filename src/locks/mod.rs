//! The lock domain: acquire, release, extend and inspect named locks held in Redis.
//!
//! A lock is a Redis hash (`owner`, `holds`, `fence`) whose TTL is the lease,
//! so a crashed holder's lock frees itself. Every read-check-write is one Lua
//! script (see `lua/`), and times come from the Redis clock.

mod inputs;

use std::sync::Arc;
use std::time::Instant;

pub use inputs::{
    InvalidKey, InvalidToken, LockKey, LockLimits, MAX_KEY_LEN, MIN_TTL_MS, OutOfRange, Token, Ttl,
    WaitTime,
};

use crate::redis::locks::{
    self as scripts, AcquireReply, ExtendReply, Grant, InspectReply, LockKeys, ReleaseReply,
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
}

/// A held lease, as acquisition reports it.
#[derive(Debug, Clone)]
pub struct Lease {
    pub key: LockKey,
    pub token: Token,
    pub fencing_token: u64,
    pub ttl_ms: u64,
    pub expires_at_ms: u64,
    pub holds: u64,
    pub waited_ms: u64,
    /// True when an existing hold was re-entered rather than newly granted.
    pub reentered: bool,
}

/// What releasing one hold left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// The lock is free; waiters were told.
    Free,
    /// Re-entrant holds remain.
    HoldsLeft(u64),
}

/// A lock's state as seen from outside (or after a renewal), without its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockState {
    pub fencing_token: u64,
    pub holds: u64,
    pub ttl_ms: u64,
    pub expires_at_ms: u64,
}

impl From<Grant> for LockState {
    fn from(grant: Grant) -> Self {
        Self {
            fencing_token: grant.fencing_token,
            holds: grant.holds,
            ttl_ms: grant.ttl_ms,
            expires_at_ms: grant.now_ms + grant.ttl_ms,
        }
    }
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
    Backend(#[from] BackendError),
}

/// The lock operations, shared by every request of one gateway instance.
#[derive(Clone)]
pub struct Locks {
    redis: Redis,
    prefix: Arc<str>,
}

impl Locks {
    pub fn new(redis: Redis, prefix: &str) -> Self {
        Self {
            redis,
            prefix: prefix.into(),
        }
    }

    fn keys(&self, key: &LockKey) -> LockKeys {
        LockKeys::new(&self.prefix, key)
    }

    /// Takes the lock for a new owner, or re-enters it with the holder's token.
    pub async fn acquire(&self, request: AcquireRequest) -> Result<Lease, LockError> {
        let started = Instant::now();
        let keys = self.keys(&request.key);
        let token = request.token.unwrap_or_else(Token::generate);
        let reenter = request.token.is_some();
        let mut conn = self.redis.connection().await?;
        let reply =
            scripts::acquire(&mut conn, &keys, &token, request.ttl.as_millis(), reenter).await?;
        let (grant, reentered) = match reply {
            AcquireReply::Granted(grant) => (grant, false),
            AcquireReply::Reentered(grant) => (grant, true),
            AcquireReply::Held { remaining_ms } => {
                return Err(LockError::Held {
                    key: request.key,
                    retry_after_ms: remaining_ms,
                });
            }
            AcquireReply::NotOwner => return Err(LockError::NotOwner { key: request.key }),
        };
        let state = LockState::from(grant);
        Ok(Lease {
            key: request.key,
            token,
            fencing_token: state.fencing_token,
            ttl_ms: state.ttl_ms,
            expires_at_ms: state.expires_at_ms,
            holds: state.holds,
            waited_ms: elapsed_ms(started),
            reentered,
        })
    }

    /// Gives up one hold; the last one frees the lock and wakes its waiters.
    pub async fn release(&self, key: &LockKey, token: &Token) -> Result<Released, LockError> {
        let mut conn = self.redis.connection().await?;
        match scripts::release(&mut conn, &self.keys(key), token).await? {
            ReleaseReply::Released => Ok(Released::Free),
            ReleaseReply::HoldsLeft(holds) => Ok(Released::HoldsLeft(holds)),
            ReleaseReply::NotFound => Err(LockError::NotFound { key: key.clone() }),
            ReleaseReply::NotOwner => Err(LockError::NotOwner { key: key.clone() }),
        }
    }

    /// Renews the lease so it ends `ttl` from now.
    pub async fn extend(
        &self,
        key: &LockKey,
        token: &Token,
        ttl: Ttl,
    ) -> Result<LockState, LockError> {
        let mut conn = self.redis.connection().await?;
        match scripts::extend(&mut conn, &self.keys(key), token, ttl.as_millis()).await? {
            ExtendReply::Extended(grant) => Ok(grant.into()),
            ExtendReply::NotFound => Err(LockError::NotFound { key: key.clone() }),
            ExtendReply::NotOwner => Err(LockError::NotOwner { key: key.clone() }),
        }
    }

    /// Reads the lock's state; never its token.
    pub async fn inspect(&self, key: &LockKey) -> Result<LockState, LockError> {
        let mut conn = self.redis.connection().await?;
        match scripts::inspect(&mut conn, &self.keys(key)).await? {
            InspectReply::Held(grant) => Ok(grant.into()),
            InspectReply::NotFound => Err(LockError::NotFound { key: key.clone() }),
        }
    }
}

fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}
