//! Acquisition: a new grant (tried once, or waited for in the lock's fair queue), re-entry by the holder's token, an Idempotency-Key's grant answered again, and the guard that undoes a new grant whose client went away.
//!
//! The parts: [`attempts`] (one request's attempts and its wait in the
//! queue) and [`guard`] (a grant whose client went away is undone).

mod attempts;
pub(super) mod deadlock;
mod guard;

use std::time::{Duration, Instant};

use futures_util::future::Either;

use attempts::{AcquireTerms, Acquisition, Granted, NoGrant};
pub use guard::GrantGuard;

use super::error::LockError;
use super::inputs::{IdempotencyKey, LockKey, LockValue, Token, Ttl, WaitTime};
use super::sessions::{SessionError, SessionHandle, SessionId, SessionLease};
use super::shared::Locks;
use crate::metrics::LockOutcome;
use crate::redis::locks::grant::{self as scripts, ExtendReply, SessionTry};
use crate::redis::locks::{LockKeys, LockKind, LockState};
use crate::redis::sessions::Hold;

/// A request to take (or re-enter) a lock.
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    pub key: LockKey,
    /// Exclusive (alone, or one of a counting lock's places) or shared.
    pub kind: LockKind,
    /// How many of a counting lock's places the holder takes (1 for any
    /// other kind).
    pub permits: u32,
    pub ttl: Ttl,
    pub wait: WaitTime,
    /// Present when the client re-enters a lock it holds.
    pub token: Option<Token>,
    /// Whether the configured replicas must confirm the grant. Clients'
    /// requests do; the sale's own short locks need not, since the purchase
    /// they guard is confirmed itself.
    pub confirmed: bool,
    /// Whether it is a streamed lock's grant, whose release Redis notes so
    /// that a renewal on its way learns of it (the streams set it).
    pub streamed: bool,
    /// The holder's public value.
    pub value: Option<LockValue>,
    /// The client's Idempotency-Key: a retry of the same request while the
    /// grant lives gets that grant again.
    pub idempotency_key: Option<IdempotencyKey>,
    /// Told the request's place in the queue while it waits (a streamed
    /// lock's `queued` events).
    pub positions: Option<tokio::sync::watch::Sender<u64>>,
    /// The session the lock is taken in: it lives as long as the session
    /// (its `ttl` is ignored), and a wait ends when the session does.
    pub session: Option<SessionId>,
}

impl AcquireRequest {
    /// A request of `kind` for `key`, with nothing optional.
    pub fn new(key: LockKey, kind: LockKind, ttl: Ttl, wait: WaitTime) -> Self {
        Self {
            key,
            kind,
            permits: 1,
            ttl,
            wait,
            token: None,
            confirmed: true,
            streamed: false,
            value: None,
            idempotency_key: None,
            positions: None,
            session: None,
        }
    }

    /// What makes two requests under one Idempotency-Key the same request:
    /// a stable hash (FNV-1a, the same on every instance and build) of the
    /// lock, its kind, lease, wait and value.
    fn request_hash(&self) -> String {
        let described = format!(
            "{}\u{1f}{}\u{1f}{:?}\u{1f}{}\u{1f}{}\u{1f}{}\u{1f}{}\u{1f}{}",
            self.key,
            self.kind.mode(),
            self.kind.limit(),
            self.permits,
            self.ttl.as_millis(),
            self.wait.as_millis(),
            self.value.as_ref().map_or("\u{0}", LockValue::as_str),
            self.session
                .as_ref()
                .map_or_else(String::new, |id| id.handle().to_string()),
        );
        let hash = described
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
                (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
            });
        format!("{hash:016x}")
    }
}

/// A lock that joined its session before it is taken.
pub(super) struct JoinedSession {
    pub(super) handle: SessionHandle,
    /// What the lock records of its session: `<handle> <lock-delay ms>`.
    pub(super) record: String,
    pub(super) lease: SessionLease,
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
    pub guard: Option<GrantGuard>,
    /// The grant an Idempotency-Key made earlier, answered again.
    pub replayed: bool,
}

impl Locks {
    /// Takes the lock for a new holder, waiting in its queue up to
    /// `request.wait` while there is no place, or re-enters it with the
    /// holder's token.
    ///
    /// A new grant is guarded by its [`GrantGuard`] from before the first
    /// attempt: if this future is dropped (the client disconnected while
    /// waiting) or the lease is dropped before the guard completes, the
    /// grant is released, so a client that went away holds nothing (unless
    /// it sent an Idempotency-Key: its retry gets the grant).
    ///
    /// Not an async fn: one would keep a copy of `request` beside the
    /// future it hands it to, for as long as the request waits.
    pub fn acquire(
        &self,
        request: AcquireRequest,
    ) -> impl Future<Output = Result<Lease, LockError>> + Send + '_ {
        match request.token {
            // Boxed, like every round trip here: see `Acquisition::run`.
            Some(token) => Either::Left(Box::pin(self.reenter(request, token))),
            None => Either::Right(self.acquire_as(request, Token::generate())),
        }
    }

    /// Takes the lock for a new holder with `token` (a batch's locks share
    /// one), as [`Locks::acquire`].
    ///
    /// Not an async fn, for the same reason as [`Locks::acquire`]: the
    /// block below works on `request` and `token` where they were moved.
    // An async fn would keep its own copy of both (clippy suggests one).
    #[allow(clippy::manual_async_fn)]
    pub(super) fn acquire_as(
        &self,
        mut request: AcquireRequest,
        token: Token,
    ) -> impl Future<Output = Result<Lease, LockError>> + Send + '_ {
        async move {
            let started = Instant::now();
            let keys = self.keys(&request.key);
            if let Some(id) = &request.session
                && self.tries_in_one_step(&request)
            {
                let tried = Box::pin(self.try_in_session(&keys, &request, id, &token)).await?;
                match tried {
                    SessionTry::Granted(state) => {
                        let guard =
                            GrantGuard::new(self.clone(), request.key.clone(), token, false);
                        let granted = Granted {
                            state,
                            sent: started,
                            waited: Duration::ZERO,
                            replayed_token: None,
                        };
                        return Ok(self.lease(request.key, token, granted, guard));
                    }
                    SessionTry::SessionNotFound => return Err(LockError::SessionNotFound),
                    SessionTry::Held { free_in_ms } if request.wait.is_zero() => {
                        let guard =
                            GrantGuard::new(self.clone(), request.key.clone(), token, false);
                        let held = NoGrant::Held {
                            free_in_ms,
                            delayed_until_ms: None,
                        };
                        return Err(self
                            .not_granted(held, (request.key, token, guard), None)
                            .await);
                    }
                    // Busy, or held with a wait: joined first, then taken
                    // or waited for, and attached.
                    SessionTry::Held { .. } | SessionTry::Busy => {}
                }
            }
            // A session's lock joins it before any grant; its lease is the
            // session's length until it is attached.
            let session = match &request.session {
                Some(id) => Some(Box::pin(self.join_session(&request, id, &token)).await?),
                None => None,
            };
            if let Some(joined) = &session {
                request.ttl = Ttl::fixed(Duration::from_millis(joined.lease.ttl_ms));
            }
            let keep_if_left = request.idempotency_key.is_some();
            let mut guard = GrantGuard::new(self.clone(), request.key.clone(), token, keep_if_left);
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
                guard.queued_as(Some((&id, started + request.wait.as_duration())));
                id
            };
            let watch = session
                .as_ref()
                .map(|joined| self.sessions().watch(&joined.handle));
            let terms = AcquireTerms {
                keys: &keys,
                request: &request,
                request_hash: &request_hash,
                waiter_id: &waiter_id,
                deadline: started + request.wait.as_duration(),
                session: session.as_ref().map(|joined| joined.record.as_str()),
                session_handle: session.as_ref().map(|joined| &joined.handle),
                session_ended: watch.as_ref().map(|watch| watch.ended()),
            };
            let acquisition = Acquisition::new(self, terms, &token);
            let acquired = acquisition.run_noting_waits().await;
            match acquired {
                Ok(mut granted) => {
                    if let (Some(id), None) = (&request.session, &granted.replayed_token) {
                        granted.state = Box::pin(self.attach(&request, id, &token, granted.state))
                            .await
                            .inspect_err(|_| guard.queued_as(None))?;
                    }
                    Ok(self.lease(request.key, token, granted, guard))
                }
                Err(refused) => {
                    let waited = (!request.wait.is_zero()).then(|| started.elapsed());
                    let grant = (request.key, token, guard);
                    Err(self.not_granted(refused, grant, waited).await)
                }
            }
        }
    }

    /// Whether a lock in a session may be tried in one step (joined and
    /// attached as it is granted): on one Redis, where a script reaches
    /// both the lock's keys and the session's, for what the plain try
    /// takes (an exclusive lock, no value, Idempotency-Key or stream), and
    /// when no replica must confirm the grant (the long way confirms it,
    /// and gives back what is not).
    fn tries_in_one_step(&self, request: &AcquireRequest) -> bool {
        let confirmed = request.confirmed && self.redis().confirms_writes();
        !(self.redis().is_cluster() || confirmed)
            && request.kind == LockKind::Exclusive
            && request.permits == 1
            && request.value.is_none()
            && request.idempotency_key.is_none()
            && !request.streamed
    }

    /// A plain try in the session `id`, in one step (see
    /// `lua/acquire_plain.lua`).
    async fn try_in_session(
        &self,
        keys: &LockKeys,
        request: &AcquireRequest,
        id: &SessionId,
        token: &Token,
    ) -> Result<SessionTry, LockError> {
        let handle = id.handle();
        let session = self.sessions().keys(&handle);
        let mut conn = self.redis().connection().await?;
        let tried = scripts::acquire_in_session(
            &mut conn,
            keys,
            (&session.session, &session.locks),
            &token.expose(),
            (handle.as_str(), request.key.as_str()),
        )
        .await?;
        Ok(tried)
    }

    /// The lock joins its session before it is taken (a session that has
    /// ended is `SessionNotFound`).
    pub(super) async fn join_session(
        &self,
        request: &AcquireRequest,
        id: &SessionId,
        token: &Token,
    ) -> Result<JoinedSession, LockError> {
        let text = token.expose();
        let hold = Hold {
            token: &text,
            key: request.key.as_str(),
            mode: request.kind.mode(),
            fencing_token: 0,
        };
        let lease = self
            .sessions()
            .join(id, hold)
            .await
            .map_err(|err| match err {
                SessionError::NotFound => LockError::SessionNotFound,
                SessionError::Backend(err) => err.into(),
            })?;
        let handle = id.handle();
        let record = format!("{handle} {}", lease.lock_delay_ms);
        Ok(JoinedSession {
            handle,
            record,
            lease,
        })
    }

    /// A grant in a session, attached to it: the session confirms it holds
    /// the lock (else the grant is given back: the session ended
    /// meanwhile), then the lock's lease becomes the session's. Its state
    /// shows the session's expiry.
    pub(super) async fn attach(
        &self,
        request: &AcquireRequest,
        id: &SessionId,
        token: &Token,
        state: LockState,
    ) -> Result<LockState, LockError> {
        let text = token.expose();
        let hold = Hold {
            token: &text,
            key: request.key.as_str(),
            mode: request.kind.mode(),
            fencing_token: state.fencing_token,
        };
        let lease = match self.sessions().join(id, hold).await {
            Ok(lease) => lease,
            Err(err) => {
                let _ = self.release_all(&request.key, token).await;
                return Err(match err {
                    SessionError::NotFound => LockError::SessionNotFound,
                    SessionError::Backend(err) => err.into(),
                });
            }
        };
        let keys = self.keys(&request.key);
        let mut conn = self.redis().connection().await?;
        match scripts::attach(&mut conn, &keys, self.publish(), &text).await? {
            ExtendReply::Extended(state) => Ok(LockState {
                ttl_ms: lease.ttl_ms,
                expires_at_ms: lease.expires_at_ms,
                ..state
            }),
            // Ended with its session between the two steps.
            ExtendReply::Lost(_) => Err(LockError::SessionNotFound),
        }
    }

    /// The lease a grant gives, counted in the metrics; its guard stays
    /// armed until the client has it (a grant answered again is the
    /// earlier request's, and needs none).
    fn lease(&self, key: LockKey, token: Token, granted: Granted, guard: GrantGuard) -> Lease {
        let waited = granted.waited;
        let replayed = granted.replayed_token.is_some();
        if !replayed {
            self.metrics().lock(LockOutcome::Acquired);
            if !waited.is_zero() {
                self.metrics().lock(LockOutcome::Waited);
                self.metrics().lock_wait(waited);
            }
        }
        let guard = if replayed {
            guard.complete();
            None
        } else {
            Some(guard)
        };
        Lease {
            key,
            token: granted.replayed_token.unwrap_or(token),
            state: granted.state,
            lease_from: granted.sent,
            waited,
            guard,
            replayed,
        }
    }

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
        let mut conn = self.redis().connection().await?;
        let named = scripts::claim_idempotency_key(
            &mut conn,
            self.prefix(),
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

    /// The error for an acquisition that ended without a grant, once what
    /// it left behind is undone: a grant too few replicas confirmed.
    async fn not_granted(
        &self,
        refused: NoGrant,
        (key, token, guard): (LockKey, Token, GrantGuard),
        waited: Option<Duration>,
    ) -> LockError {
        match refused {
            NoGrant::Held {
                free_in_ms,
                delayed_until_ms,
            } => {
                guard.complete();
                self.metrics().lock(LockOutcome::Conflict);
                if let Some(waited) = waited {
                    self.metrics().lock_wait(waited);
                }
                match delayed_until_ms {
                    Some(until_ms) => LockError::Delayed {
                        key,
                        until_ms,
                        retry_after_ms: free_in_ms,
                    },
                    None => LockError::Held {
                        key,
                        retry_after_ms: free_in_ms,
                    },
                }
            }
            NoGrant::LimitMismatch { limit } => {
                guard.complete();
                LockError::LimitMismatch { key, limit }
            }
            NoGrant::KeyReused => {
                guard.complete();
                LockError::KeyReused { key }
            }
            NoGrant::CannotWait(err) => {
                guard.complete();
                err.into()
            }
            NoGrant::SessionEnded => {
                guard.complete();
                LockError::SessionNotFound
            }
            NoGrant::Deadlock(cycle) => {
                guard.complete();
                LockError::Deadlock { key, cycle }
            }
            NoGrant::NotReplicated => {
                // Undo the grant now, so the answer is true when it is read;
                // if that fails, the guard keeps trying in the background.
                if Box::pin(self.release(&key, &token)).await.is_ok() {
                    guard.complete();
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
            permits: request.permits,
            ttl_ms: request.ttl.as_millis(),
            reenter: true,
            wait_left_ms: 0,
            waiter: None,
            streamed: false,
            value: None,
            idempotency: None,
            session: None,
        };
        let publish = self.publish();
        let sent = Instant::now();
        let (reply, confirmed) = self
            .redis()
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
                let state = self.with_session_expiry(state).await?;
                self.metrics().lock(LockOutcome::Reentered);
                Ok(Lease {
                    key,
                    token,
                    state,
                    lease_from: sent,
                    waited: Duration::ZERO,
                    guard: None,
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
}
