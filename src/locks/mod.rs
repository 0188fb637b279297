//! The lock domain: acquire (or wait in the fair queue for), release, extend, inspect, watch and revoke named locks held in Redis.
//!
//! A plain lock is a Redis hash whose TTL is the lease, so a crashed
//! holder's lock frees itself; a shared or counting lock keeps each
//! holder's lease in a sorted set, and every script drops the holders whose
//! lease ended. Waiters queue in Redis in arrival order across every
//! instance ([`waiting`]); a change writes its event in the same script
//! while someone watches ([`watch`]). Every read-check-write is one Lua
//! script (see `lua/`), and times come from the Redis clock.

mod acquire;
mod handover;
mod inputs;
mod listing;
mod streams;
pub mod waiting;
pub mod watch;

use std::sync::Arc;
use std::time::{Duration, Instant};

use acquire::{AcquireTerms, Acquisition, NoGrant};
pub use handover::Handover;
pub use inputs::{
    DEFAULT_MAX_TTL_MS, DEFAULT_MAX_WAIT_MS, EXAMPLE_TOKEN, IdempotencyKey, InvalidIdempotencyKey,
    InvalidKey, InvalidKind, InvalidToken, LockKey, LockLimits, LockValue, MAX_IDEMPOTENCY_KEY_LEN,
    MAX_KEY_LEN, MAX_LIMIT, MAX_VALUE_BYTES, MIN_TTL_MS, OutOfRange, Token, Ttl, ValueTooLong,
    WaitTime, idempotency_key_pattern, key_pattern, lock_kind,
};
pub use listing::{ListCursor, LockPage, MAX_LIST};
pub use streams::{LostReason, StreamEnd, StreamEvent, StreamedLock, Streams};
pub use waiting::{WaitRefused, Waiting};
pub use watch::{WatchEvent, Watcher, Watches};

use crate::metrics::{LockOutcome, Metrics};
use crate::redis::locks::grant::{
    self as scripts, ExtendReply, Holds, LeaveReply, NoPlace, ReleaseReply, SetValueReply,
};
use crate::redis::locks::{LockKeys, view};
// Read from Redis as they are and handed on unchanged: one type each.
pub use crate::redis::locks::view::{LockSight, LockView};
pub use crate::redis::locks::{LeaseView, LockKind, LockState, WaiterView};
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
    /// The holder's public value.
    pub value: Option<LockValue>,
    /// The client's Idempotency-Key: a retry of the same request while the
    /// grant lives gets that grant again.
    pub idempotency_key: Option<IdempotencyKey>,
    /// Told the request's place in the queue while it waits (a streamed
    /// lock's `queued` events).
    pub positions: Option<tokio::sync::watch::Sender<u64>>,
}

impl AcquireRequest {
    /// A request of `kind` for `key`, with nothing optional.
    pub fn new(key: LockKey, kind: LockKind, ttl: Ttl, wait: WaitTime) -> Self {
        Self {
            key,
            kind,
            ttl,
            wait,
            token: None,
            confirmed: true,
            streamed: false,
            value: None,
            idempotency_key: None,
            positions: None,
        }
    }

    /// What makes two requests under one Idempotency-Key the same request:
    /// a stable hash (FNV-1a, the same on every instance and build) of the
    /// lock, its kind, lease, wait and value.
    fn request_hash(&self) -> String {
        let described = format!(
            "{}\u{1f}{}\u{1f}{:?}\u{1f}{}\u{1f}{}\u{1f}{}",
            self.key,
            self.kind.mode(),
            self.kind.limit(),
            self.ttl.as_millis(),
            self.wait.as_millis(),
            self.value.as_ref().map_or("\u{0}", LockValue::as_str),
        );
        let hash = described
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
                (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
            });
        format!("{hash:016x}")
    }
}

/// A held lease, as acquisition reports it.
#[derive(Debug)]
pub struct Lease {
    pub key: LockKey,
    pub token: Token,
    pub state: LockState,
    /// When the script that set the lease's end was sent: the lease lasts
    /// at least its length from then, by this instance's clock.
    pub lease_from: Instant,
    /// How long the request waited for the lock.
    pub waited: Duration,
    /// Present for a new grant (absent for re-entry): complete it once the
    /// client has the lease, or the grant is released when it is dropped.
    pub handover: Option<Handover>,
    /// The grant an Idempotency-Key made earlier, answered again.
    pub replayed: bool,
}

/// What releasing one hold left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// The lock is free (or granted to the next waiter).
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
    #[error("this Idempotency-Key's grant of {key} was made for a different request")]
    KeyReused { key: LockKey },
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
    prefix: Arc<str>,
    waiting: Waiting,
    metrics: Arc<Metrics>,
    /// The longest lease a client may ask for: how long a revoked lock's
    /// fence counter must outlive it.
    max_ttl_ms: u64,
}

impl Locks {
    pub fn new(
        redis: Redis,
        prefix: &str,
        waiting: Waiting,
        metrics: Arc<Metrics>,
        limits: LockLimits,
    ) -> Self {
        Self(Arc::new(LocksState {
            redis,
            prefix: prefix.into(),
            waiting,
            metrics,
            max_ttl_ms: limits.max_ttl_ms,
        }))
    }

    fn keys(&self, key: &LockKey) -> LockKeys {
        LockKeys::new(&self.0.prefix, key.as_str())
    }

    fn publish(&self) -> &'static str {
        self.0.redis.publish_command()
    }

    /// Requests waiting for a lock on this instance now.
    pub fn waiters(&self) -> usize {
        self.0.waiting.count()
    }

    /// Requests waiting, on every instance, for the locks with waiters here.
    pub fn queued(&self) -> u64 {
        self.0.waiting.queued()
    }

    /// Takes the lock for a new holder, waiting in its queue up to
    /// `request.wait` while there is no place, or re-enters it with the
    /// holder's token.
    ///
    /// A new grant is guarded by its [`Handover`] from before the first
    /// attempt: if this future is dropped (the client disconnected while
    /// waiting) or the lease is dropped before the handover completes, the
    /// grant is released, so a client that went away holds nothing (unless
    /// it sent an Idempotency-Key: its retry gets the grant).
    /// Ties an Idempotency-Key to the lock it first named, for as long as
    /// that request's grant could live (its wait and lease), on every
    /// instance: the same key naming another lock is `KeyReused`. (Within
    /// one lock, the acquire script tells a retry from a different request.)
    async fn claim_idempotency_key(
        &self,
        request: &AcquireRequest,
        idempotency_key: &IdempotencyKey,
    ) -> Result<(), LockError> {
        let lives_ms = request.ttl.as_millis() + request.wait.as_millis();
        let mut conn = self.0.redis.connection().await?;
        let named = scripts::claim_idempotency_key(
            &mut conn,
            &self.0.prefix,
            idempotency_key.as_str(),
            request.key.as_str(),
            lives_ms.max(1),
        )
        .await?;
        match named {
            Some(lock) if lock != request.key.as_str() => Err(LockError::KeyReused {
                key: request.key.clone(),
            }),
            _ => Ok(()),
        }
    }

    pub async fn acquire(&self, request: AcquireRequest) -> Result<Lease, LockError> {
        if let Some(token) = request.token {
            // Boxed, like every round trip here: see `Acquisition::run`.
            return Box::pin(self.reenter(request, token)).await;
        }
        let started = Instant::now();
        let keys = self.keys(&request.key);
        let token = Token::generate();
        let keep_if_left = request.idempotency_key.is_some();
        let mut handover = Handover::new(self.clone(), request.key.clone(), token, keep_if_left);
        let request_hash = match &request.idempotency_key {
            Some(idempotency_key) => {
                // Boxed, like every round trip here: see `Acquisition::run`.
                Box::pin(self.claim_idempotency_key(&request, idempotency_key)).await?;
                request.request_hash()
            }
            None => String::new(),
        };
        // Named up front, so that a request dropped while it waits (its
        // client left) leaves the queue by it.
        let waiter_id = if request.wait.is_zero() {
            String::new()
        } else {
            let id = uuid::Uuid::new_v4().to_string();
            handover.queued_as(Some(&id));
            id
        };
        let terms = AcquireTerms {
            keys: &keys,
            request: &request,
            request_hash: &request_hash,
            waiter_id: &waiter_id,
            deadline: started + request.wait.as_duration(),
        };
        match Acquisition::new(self, terms, &token).run().await {
            Ok(granted) => {
                let waited = granted.waited;
                if granted.replayed_token.is_none() {
                    self.0.metrics.lock(LockOutcome::Acquired);
                    if !waited.is_zero() {
                        self.0.metrics.lock(LockOutcome::Waited);
                        self.0.metrics.lock_wait(waited);
                    }
                }
                let replayed = granted.replayed_token.is_some();
                let handover = if replayed {
                    // The grant is the earlier request's, and stays.
                    handover.complete();
                    None
                } else {
                    handover.claimed();
                    Some(handover)
                };
                Ok(Lease {
                    key: request.key,
                    token: granted.replayed_token.unwrap_or(token),
                    state: granted.state,
                    lease_from: granted.sent,
                    waited,
                    handover,
                    replayed,
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
    /// it left behind is undone: a grant too few replicas confirmed.
    async fn not_granted(
        &self,
        refused: NoGrant,
        (key, token, handover): (LockKey, Token, Handover),
        waited: Option<Duration>,
    ) -> LockError {
        match refused {
            NoGrant::Held { free_in_ms } => {
                handover.complete();
                self.0.metrics.lock(LockOutcome::Conflict);
                if let Some(waited) = waited {
                    self.0.metrics.lock_wait(waited);
                }
                LockError::Held {
                    key,
                    retry_after_ms: free_in_ms,
                }
            }
            NoGrant::LimitMismatch { limit } => {
                handover.complete();
                LockError::LimitMismatch { key, limit }
            }
            NoGrant::KeyReused => {
                handover.complete();
                LockError::KeyReused { key }
            }
            NoGrant::CannotWait(err) => {
                handover.complete();
                err.into()
            }
            NoGrant::NotReplicated => {
                // Undo the grant now, so the answer is true when it is read;
                // if that fails, the handover keeps trying in the background.
                if Box::pin(self.release(&key, &token)).await.is_ok() {
                    handover.complete();
                }
                LockError::NotReplicated { key, undone: true }
            }
            // Not completed: the script may have run before the failure.
            NoGrant::Backend(err) => err.into(),
        }
    }

    /// Re-enters a lock its holder's `token` holds: one hold more, the lease
    /// renewed. A re-entry too few replicas confirm is given back.
    async fn reenter(&self, request: AcquireRequest, token: Token) -> Result<Lease, LockError> {
        let keys = self.keys(&request.key);
        let text = token.expose();
        let attempt = scripts::Attempt {
            token: &text,
            kind: request.kind,
            ttl_ms: request.ttl.as_millis(),
            reenter: true,
            wait_left_ms: 0,
            waiter: None,
            streamed: false,
            value: None,
            idempotency: None,
        };
        let publish = self.publish();
        let sent = Instant::now();
        let (reply, confirmed) = self
            .0
            .redis
            .write(
                &keys.lock(),
                request.confirmed,
                async |conn| scripts::acquire(conn, &keys, publish, attempt).await,
                |reply| matches!(reply, scripts::AcquireReply::Reentered(_)),
            )
            .await?;
        let key = request.key;
        match reply {
            scripts::AcquireReply::Reentered(_) if !confirmed => {
                // Give the hold just taken back.
                self.release(&key, &token).await?;
                Err(LockError::NotReplicated { key, undone: true })
            }
            scripts::AcquireReply::Reentered(state) => {
                self.0.metrics.lock(LockOutcome::Reentered);
                Ok(Lease {
                    key,
                    token,
                    state,
                    lease_from: sent,
                    waited: Duration::ZERO,
                    handover: None,
                    replayed: false,
                })
            }
            scripts::AcquireReply::LimitMismatch { limit } => {
                Err(LockError::LimitMismatch { key, limit })
            }
            scripts::AcquireReply::ModeConflict => Err(LockError::ModeConflict { key }),
            _ => Err(LockError::NotOwner { key }),
        }
    }

    /// Takes waiter `id` (with `token`) out of the lock's queue; a grant it
    /// was made meanwhile stands.
    async fn leave_queue(
        &self,
        key: &LockKey,
        id: &str,
        token: &Token,
    ) -> Result<LeaveReply, LockError> {
        let mut conn = self.0.redis.connection().await?;
        let keys = self.keys(key);
        Ok(scripts::leave(&mut conn, &keys, self.publish(), id, &token.expose()).await?)
    }

    /// Gives up one hold; the last one frees the place, which goes to the
    /// head of the queue.
    pub async fn release(&self, key: &LockKey, token: &Token) -> Result<Released, LockError> {
        self.release_holds(key, token, Holds::One).await
    }

    /// Gives up every hold of `token` at once, freeing its place.
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
        let keys = self.keys(key);
        let reply =
            scripts::release(&mut conn, &keys, self.publish(), &token.expose(), holds).await?;
        let released = match reply {
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
        let (text, publish) = (token.expose(), self.publish());
        let (reply, confirmed) = self
            .0
            .redis
            .write(
                &keys.lock(),
                true,
                async |conn| scripts::extend(conn, &keys, publish, &text, ttl.as_millis()).await,
                |reply| matches!(reply, ExtendReply::Extended(_)),
            )
            .await?;
        match reply {
            ExtendReply::Extended(_) if !confirmed => Err(LockError::NotReplicated {
                key: key.clone(),
                undone: false,
            }),
            ExtendReply::Extended(state) => Ok(state),
            ExtendReply::Lost(why) => {
                if why == NoPlace::NotFound {
                    self.0.metrics.lock(LockOutcome::ExpiredOnExtend);
                }
                Err(lost(key, why))
            }
        }
    }

    /// Replaces the holder's public value (none removes it); the holder's
    /// lease as it stands.
    pub async fn set_value(
        &self,
        key: &LockKey,
        token: &Token,
        value: Option<&LockValue>,
    ) -> Result<LockState, LockError> {
        let mut conn = self.0.redis.connection().await?;
        let keys = self.keys(key);
        let value = value.map(LockValue::as_str);
        let reply =
            scripts::set_value(&mut conn, &keys, self.publish(), &token.expose(), value).await?;
        match reply {
            SetValueReply::Set {
                fencing_token,
                holds,
                expires_at_ms,
                ttl_ms,
            } => Ok(LockState {
                fencing_token,
                holds,
                ttl_ms,
                expires_at_ms,
            }),
            SetValueReply::Lost(why) => Err(lost(key, why)),
        }
    }

    /// Reads the lock's state, holders and waiters; never a token.
    pub async fn inspect(&self, key: &LockKey) -> Result<LockSight, LockError> {
        let mut conn = self.0.redis.connection().await?;
        Ok(view::inspect(&mut conn, &self.keys(key), self.publish()).await?)
    }

    /// Ends every hold of the lock at once; the waiters are served, the
    /// streamed holders told `revoked`. Returns how many places ended.
    pub async fn revoke(&self, key: &LockKey) -> Result<u64, LockError> {
        let mut conn = self.0.redis.connection().await?;
        let keys = self.keys(key);
        let revoked = scripts::revoke(&mut conn, &keys, self.publish(), self.0.max_ttl_ms)
            .await?
            .ok_or_else(|| LockError::NotFound { key: key.clone() })?;
        self.0.metrics.lock(LockOutcome::Revoked);
        tracing::info!(%key, holders = revoked, "a lock was revoked");
        Ok(revoked)
    }
}

/// The error for a token that holds its place no more.
fn lost(key: &LockKey, why: NoPlace) -> LockError {
    let key = key.clone();
    match why {
        NoPlace::NotOwner => LockError::NotOwner { key },
        NoPlace::NotFound | NoPlace::Released | NoPlace::Revoked => LockError::NotFound { key },
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
