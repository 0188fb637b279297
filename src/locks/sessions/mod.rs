//! Sessions: one liveness lease that any number of locks hang on; kept alive through any instance, and when it ends, its locks end with it.
//!
//! A session is state in Redis (`redis::sessions`), not in a gateway: a
//! hash with its lease and a hash of its locks, and a deadline index that
//! every gateway sweeps ([`sweep`]), so any instance frees an expired
//! session's locks, and a keepalive touches only the session's own keys.
//! A lock taken in a session joins it before it is granted (so that a
//! session ending meanwhile ends it too) with a finite lease, and is
//! attached once granted: its lease becomes its session's. A gateway that
//! dies between the two leaves a lock that ends with its finite lease.
//!
//! The parts: [`inputs`] (ids, handles, terms) and [`sweep`] (expiry,
//! and the sessions the waiters here wait with).

pub mod inputs;
mod sweep;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

pub use inputs::{
    DEFAULT_SESSION_TTL_MS, InvalidSessionId, MAX_LOCK_DELAY_MS, MIN_SESSION_TTL_MS, SessionHandle,
    SessionId, SessionTerms, session_ttl,
};

use crate::metrics::{Metrics, SessionOutcome};
use crate::redis::locks::LockKeys;
use crate::redis::locks::grant;
use crate::redis::locks::view::LockView;
use crate::redis::sessions::{
    self as scripts, EndReply, Ending, Hold, Liveness, Opening, SessionKeys,
};
use crate::redis::{BackendError, Redis};
use crate::sync::lock;

/// A session's lease as its holder sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionLease {
    pub ttl_ms: u64,
    pub lock_delay_ms: u64,
    pub expires_at_ms: u64,
    /// How many locks hang on it (a keepalive's answer).
    pub locks: u64,
}

/// A session and its locks, as its holder sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionView {
    pub lease: SessionLease,
    pub value: Option<String>,
    /// Its locks: key, mode, fencing token.
    pub locks: Vec<(String, String, u64)>,
}

/// Why a session operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("there is no session with this id: never opened, ended, or expired")]
    NotFound,
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// The sessions of one gateway instance.
#[derive(Clone)]
pub struct Sessions(Arc<Parts>);

struct Parts {
    redis: Redis,
    prefix: Arc<str>,
    metrics: Arc<Metrics>,
    /// The sessions the waiters here wait with, each told when it ends.
    watched: Mutex<HashMap<SessionHandle, Watched>>,
    closing: CancellationToken,
}

/// A session some requests here follow (waiters, streamed sessions).
struct Watched {
    ended: CancellationToken,
    /// Why it ended, when this instance ended it.
    why: Arc<Mutex<Option<Ending>>>,
    waiters: usize,
}

impl Sessions {
    pub fn new(redis: Redis, prefix: &str, metrics: Arc<Metrics>) -> Self {
        Self(Arc::new(Parts {
            redis,
            prefix: prefix.into(),
            metrics,
            watched: Mutex::default(),
            closing: CancellationToken::new(),
        }))
    }

    pub(crate) fn keys(&self, handle: &SessionHandle) -> SessionKeys {
        SessionKeys::new(&self.0.prefix, handle.as_str())
    }

    /// Opens a session for `principal` ('' without permissions).
    pub async fn open(
        &self,
        terms: &SessionTerms,
        principal: &str,
    ) -> Result<(SessionId, SessionLease), SessionError> {
        let mut conn = self.0.redis.connection().await?;
        loop {
            let id = SessionId::generate_for(principal);
            let handle = id.handle();
            let opening = Opening {
                ttl_ms: terms.ttl_ms,
                lock_delay_ms: terms.lock_delay_ms,
                value: terms.value.as_ref().map(|value| value.as_str()),
                principal,
            };
            let keys = self.keys(&handle);
            let Some(expires_at_ms) =
                scripts::open(&mut conn, &keys, handle.as_str(), opening).await?
            else {
                continue;
            };
            self.0.metrics.session(SessionOutcome::Opened);
            let lease = SessionLease {
                ttl_ms: terms.ttl_ms,
                lock_delay_ms: terms.lock_delay_ms,
                expires_at_ms,
                locks: 0,
            };
            return Ok((id, lease));
        }
    }

    /// A keepalive: the lease starts again (`ttl_ms`: a new length).
    pub async fn keep(
        &self,
        id: &SessionId,
        ttl_ms: Option<u64>,
    ) -> Result<SessionLease, SessionError> {
        let handle = id.handle();
        let mut conn = self.0.redis.connection().await?;
        let lease = scripts::keep(&mut conn, &self.keys(&handle), handle.as_str(), ttl_ms)
            .await?
            .ok_or(SessionError::NotFound)?;
        Ok(SessionLease {
            ttl_ms: lease.ttl_ms,
            lock_delay_ms: 0,
            expires_at_ms: lease.expires_at_ms,
            locks: lease.locks,
        })
    }

    /// The session, its lease and its locks; and its principal.
    pub async fn inspect(&self, id: &SessionId) -> Result<(SessionView, String), SessionError> {
        let mut conn = self.0.redis.connection().await?;
        let view = scripts::view(&mut conn, &self.keys(&id.handle()))
            .await?
            .ok_or(SessionError::NotFound)?;
        let locks = view
            .locks
            .into_iter()
            // A lock still being taken is not the session's yet.
            .filter(|(_, fence, _)| *fence > 0)
            .map(|(mode, fence, key)| (key, mode, fence))
            .collect::<Vec<_>>();
        let lease = SessionLease {
            ttl_ms: view.ttl_ms,
            lock_delay_ms: view.lock_delay_ms,
            expires_at_ms: view.expires_at_ms,
            locks: locks.len() as u64,
        };
        let session = SessionView {
            lease,
            value: view.value,
            locks,
        };
        Ok((session, view.principal))
    }

    /// Ends the session now (deleted, or its stream's gateway shutting
    /// down): its locks are released at once, with no lock-delay.
    pub async fn end(&self, id: &SessionId, why: Ending) -> Result<(), SessionError> {
        let handle = id.handle();
        let mut conn = self.0.redis.connection().await?;
        match scripts::end(&mut conn, &self.keys(&handle), why, true).await? {
            EndReply::NotFound | EndReply::Alive { .. } => Err(SessionError::NotFound),
            EndReply::Ending {
                why,
                delayed_until_ms,
                locks,
                ended_now,
            } => {
                drop(conn);
                self.finish(&handle, (why, ended_now), delayed_until_ms, &locks)
                    .await?;
                Ok(())
            }
        }
    }

    /// Ends each of an ended session's locks on its own keys, then drops
    /// the session; counts its end when this call's `session_end` was the
    /// one that ended it (`ended_now`: every instance sweeps, and two may
    /// finish one session at once).
    async fn finish(
        &self,
        handle: &SessionHandle,
        (why, ended_now): (Ending, bool),
        delayed_until_ms: u64,
        locks: &[(String, String)],
    ) -> Result<(), BackendError> {
        // Counted when decided: a sweep that dies half way is finished by
        // another, which does not count it again.
        if ended_now {
            self.0.metrics.session(match why {
                Ending::Expired => SessionOutcome::Expired,
                Ending::Deleted | Ending::ShuttingDown => SessionOutcome::Deleted,
            });
        }
        let publish = self.0.redis.publish_command();
        let word = if why == Ending::Expired {
            "expired"
        } else {
            "deleted"
        };
        let mut conn = self.0.redis.connection().await?;
        for (token, key) in locks {
            let keys = LockKeys::new(&self.0.prefix, key);
            grant::session_release(&mut conn, &keys, publish, token, (word, delayed_until_ms))
                .await?;
        }
        scripts::drop_ended(&mut conn, &self.keys(handle), handle.as_str(), Some(why)).await?;
        if let Some(watched) = lock(&self.0.watched).get(handle) {
            *lock(&watched.why) = Some(why);
            watched.ended.cancel();
        }
        Ok(())
    }

    /// A lock being taken in the session (before it is granted): the
    /// session's lease (its ttl is the lock's lease until attached), or
    /// `NotFound` when the session has ended.
    pub(crate) async fn join(
        &self,
        id: &SessionId,
        hold: Hold<'_>,
    ) -> Result<SessionLease, SessionError> {
        let mut conn = self.0.redis.connection().await?;
        let lease = scripts::join(&mut conn, &self.keys(&id.handle()), hold)
            .await?
            .ok_or(SessionError::NotFound)?;
        Ok(SessionLease {
            ttl_ms: lease.ttl_ms,
            lock_delay_ms: lease.lock_delay_ms,
            expires_at_ms: lease.expires_at_ms,
            locks: 0,
        })
    }

    /// A hold of the session changed (its mode, and with an upgrade its
    /// fencing token): the session's record of it follows. (An ended
    /// session ends the hold anyway.)
    pub(crate) async fn note_hold(&self, handle: &SessionHandle, hold: Hold<'_>) {
        let noted = async {
            let mut conn = self.0.redis.connection().await?;
            scripts::join(&mut conn, &self.keys(handle), hold).await
        };
        if let Err(err) = noted.await {
            tracing::debug!(error = %err, "a session could not note a hold's new mode");
        }
    }

    /// A lock released by its holder: the session forgets it (if that
    /// fails, its end releases a token that holds nothing: harmless).
    pub(crate) async fn forget(&self, handle: &SessionHandle, token: &str, key: &str) {
        let forgotten = async {
            let mut conn = self.0.redis.connection().await?;
            scripts::forget(&mut conn, &self.keys(handle), token, key).await
        };
        if let Err(err) = forgotten.await {
            tracing::debug!(error = %err, "a session could not forget a released lock");
        }
    }

    /// The current expiry of each session named, by handle (a session's
    /// holds show their session's), the ended left out; and the Redis
    /// clock as they were read.
    pub async fn expiries(
        &self,
        handles: &[SessionHandle],
    ) -> Result<(HashMap<SessionHandle, u64>, u64), BackendError> {
        let (states, now) = self.states(handles).await?;
        let expiries = handles
            .iter()
            .zip(states)
            .filter_map(|(handle, state)| match state {
                Liveness::Alive(expires) => Some((handle.clone(), expires)),
                Liveness::Ended(_) => None,
            })
            .collect();
        Ok((expiries, now))
    }

    /// The leases of sessions' holders as their sessions' (a time in the
    /// far future otherwise); the lock's latest end with them.
    pub(crate) async fn with_session_leases(
        &self,
        mut view: LockView,
    ) -> Result<LockView, BackendError> {
        let handles: Vec<SessionHandle> = view
            .leases
            .iter()
            .filter_map(|lease| lease.session.as_deref().map(SessionHandle::from_stored))
            .collect();
        if handles.is_empty() {
            return Ok(view);
        }
        let (expiries, now) = self.expiries(&handles).await?;
        for lease in &mut view.leases {
            if let Some(handle) = &lease.session {
                // A session that ended is ending its locks: as it stands.
                let handle = SessionHandle::from_stored(handle);
                lease.expires_at_ms = expiries.get(&handle).copied().unwrap_or(now);
            }
        }
        view.expires_at_ms = view
            .leases
            .iter()
            .map(|lease| lease.expires_at_ms)
            .max()
            .unwrap_or(now);
        view.ttl_ms = view.expires_at_ms.saturating_sub(now);
        Ok(view)
    }

    /// How each session named stands, in order; and the Redis clock as
    /// they were read.
    pub(super) async fn states(
        &self,
        handles: &[SessionHandle],
    ) -> Result<(Vec<Liveness>, u64), BackendError> {
        let keys: Vec<SessionKeys> = handles.iter().map(|handle| self.keys(handle)).collect();
        let mut conn = self.0.redis.connection().await?;
        scripts::alive_many(&mut conn, &keys).await
    }

    /// Told when the session ends (checked with the sweep, a few times a
    /// second), for a request that waits with it; drop the guard when the
    /// wait is over.
    pub fn watch(&self, handle: &SessionHandle) -> SessionWatch {
        let mut watched = lock(&self.0.watched);
        let entry = watched.entry(handle.clone()).or_insert_with(|| Watched {
            ended: CancellationToken::new(),
            why: Arc::default(),
            waiters: 0,
        });
        entry.waiters += 1;
        SessionWatch {
            sessions: self.clone(),
            handle: handle.clone(),
            ended: entry.ended.clone(),
            why: entry.why.clone(),
        }
    }

    /// Stops the sweep (the instance is shutting down).
    pub fn close(&self) {
        self.0.closing.cancel();
    }

    /// Cancelled when the instance shuts down.
    pub fn closing(&self) -> &CancellationToken {
        &self.0.closing
    }
}

/// A request's watch on the session it waits with.
pub struct SessionWatch {
    sessions: Sessions,
    handle: SessionHandle,
    ended: CancellationToken,
    why: Arc<Mutex<Option<Ending>>>,
}

impl SessionWatch {
    /// Cancelled once the session has ended.
    pub fn ended(&self) -> &CancellationToken {
        &self.ended
    }

    /// Why it ended: as this instance ended it, else (found gone by the
    /// sweep) it expired or was ended elsewhere: `Expired`.
    pub fn why(&self) -> Ending {
        lock(&self.why).unwrap_or(Ending::Expired)
    }
}

impl Drop for SessionWatch {
    fn drop(&mut self) {
        let mut watched = lock(&self.sessions.0.watched);
        if let Some(entry) = watched.get_mut(&self.handle) {
            entry.waiters -= 1;
            if entry.waiters == 0 {
                watched.remove(&self.handle);
            }
        }
    }
}
