//! Changing a hold its holder's token names: release (one hold, or all), extend the lease, replace the public value; and revocation, which ends holds by the operator's word.

use super::acquire::Lease;
use super::error::LockError;
use std::time::Duration;

use super::inputs::{IdempotencyKey, LockKey, LockValue, Token, Ttl};
use super::sessions::SessionHandle;
use super::shared::Locks;
use crate::duration::millis;
use crate::metrics::LockOutcome;
use crate::redis::locks::grant::{
    self as scripts, ExtendReply, Holds, IfGranted, LeaveReply, NoPlace, ReleaseReply,
    SetValueReply,
};
use crate::redis::locks::{LockState, PlainRelease};

/// How long a release under an Idempotency-Key is remembered: a retry
/// after a lost answer or a `503` comes within seconds; a minute covers a
/// client's back-off and a Redis failover.
pub const RELEASE_KEY_KEPT: Duration = Duration::from_secs(60);

/// What releasing one hold left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// The lock is free (or granted to the next waiter).
    Free,
    /// Re-entrant holds remain.
    HoldsLeft(u64),
}

impl Locks {
    /// Gives up one hold; the last one frees the place, which goes to the
    /// head of the queue.
    pub async fn release(&self, key: &LockKey, token: &Token) -> Result<Released, LockError> {
        self.release_holds(key, token, Holds::One, None).await
    }

    /// As [`Locks::release`], only if the token's hold has the fencing
    /// token `fence` (when given): `NotOwner` otherwise.
    pub async fn release_if(
        &self,
        key: &LockKey,
        token: &Token,
        fence: Option<u64>,
    ) -> Result<Released, LockError> {
        self.release_holds(key, token, Holds::One, fence).await
    }

    /// Gives up every hold of `token` at once, freeing its place.
    pub async fn release_all(&self, key: &LockKey, token: &Token) -> Result<Released, LockError> {
        self.release_holds(key, token, Holds::All, None).await
    }

    /// What a script of another domain needs to give up `lease`'s hold in
    /// its own call, as `release_plain.lua` would: on one Redis (or
    /// Sentinel's primary), whose scripts may touch keys of any slot; `None`
    /// on a Redis Cluster, where the lock's keys have a slot of their own.
    /// A script that did ([`Locks::released_within`]) saves the release's
    /// call; one that could not leaves the lease to [`Locks::release`].
    pub fn plain_release_of(&self, lease: &Lease) -> Option<PlainRelease> {
        if self.redis().is_cluster() {
            return None;
        }
        let keys = self.keys(&lease.key);
        Some(PlainRelease {
            keys: keys.plain_release(),
            publish: self.publish(),
            channel: keys.released(),
            token: lease.token.expose(),
        })
    }

    /// `lease`'s hold was given up by a script ([`Locks::plain_release_of`]):
    /// its grant is done with, and it counts as released.
    pub fn released_within(&self, mut lease: Lease) {
        if let Some(guard) = lease.guard.take() {
            guard.complete();
        }
        self.metrics().lock(LockOutcome::Released);
    }

    /// As [`Locks::release_if`], under an Idempotency-Key: a retry with the
    /// same key and token answers what the first release did, whether its
    /// answer arrived or not (kept [`RELEASE_KEY_KEPT`]); with it, whether
    /// this is such an answer again.
    pub async fn release_keyed(
        &self,
        key: &LockKey,
        token: &Token,
        fence: Option<u64>,
        idempotency_key: &IdempotencyKey,
    ) -> Result<(Released, bool), LockError> {
        let mut conn = self.redis().connection().await?;
        let keys = self.keys(key);
        let holder = (&*token.expose(), fence);
        let kept = (idempotency_key.as_str(), millis(RELEASE_KEY_KEPT));
        let (reply, replayed) =
            scripts::release_keyed(&mut conn, &keys, self.publish(), holder, kept).await?;
        drop(conn);
        Ok((self.released(key, token, reply).await?, replayed))
    }

    async fn release_holds(
        &self,
        key: &LockKey,
        token: &Token,
        holds: Holds,
        fence: Option<u64>,
    ) -> Result<Released, LockError> {
        let mut conn = self.redis().connection().await?;
        let keys = self.keys(key);
        let holder = (&*token.expose(), fence);
        // A lock this instance has waiters on is waited for: the plain
        // release would only answer that it is busy.
        let reply = if self.waiting().has_waiters_on(&keys) {
            scripts::release_full(&mut conn, &keys, self.publish(), holder, holds).await?
        } else {
            scripts::release(&mut conn, &keys, self.publish(), holder, holds).await?
        };
        drop(conn);
        self.released(key, token, reply).await
    }

    /// What a release script's `reply` comes to: a freed place's session
    /// forgets it, and the release is counted.
    async fn released(
        &self,
        key: &LockKey,
        token: &Token,
        reply: ReleaseReply,
    ) -> Result<Released, LockError> {
        let released = match reply {
            ReleaseReply::Released { session } => {
                if let Some(handle) = session {
                    let handle = SessionHandle::from_stored(&handle);
                    self.sessions()
                        .forget(&handle, &token.expose(), key.as_str())
                        .await;
                }
                Released::Free
            }
            ReleaseReply::HoldsLeft(holds) => Released::HoldsLeft(holds),
            ReleaseReply::NotFound => return Err(LockError::NotFound { key: key.clone() }),
            ReleaseReply::NotOwner => return Err(LockError::NotOwner { key: key.clone() }),
            ReleaseReply::KeyReused => return Err(LockError::KeyReused { key: key.clone() }),
        };
        self.metrics().lock(LockOutcome::Released);
        Ok(released)
    }

    /// Takes waiter `id` (with `token`) out of the lock's queue; a grant it
    /// was made meanwhile stands, or goes on to the next waiter.
    pub(super) async fn leave_queue(
        &self,
        key: &LockKey,
        id: &str,
        token: &Token,
        if_granted: IfGranted,
    ) -> Result<LeaveReply, LockError> {
        let mut conn = self.redis().connection().await?;
        let keys = self.keys(key);
        let waiter = (id, &*token.expose());
        Ok(scripts::leave(&mut conn, &keys, self.publish(), waiter, if_granted).await?)
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
            .redis()
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
            ExtendReply::Extended(state) => Ok(self.with_session_expiry(state).await?),
            ExtendReply::Lost(why) => {
                if why == NoPlace::NotFound {
                    self.metrics().lock(LockOutcome::ExpiredOnExtend);
                }
                Err(LockError::lost(key, why))
            }
        }
    }

    /// A session's holder's state shows its session's expiry (its lease).
    pub(super) async fn with_session_expiry(
        &self,
        mut state: LockState,
    ) -> Result<LockState, LockError> {
        let Some(handle) = &state.session else {
            return Ok(state);
        };
        let handle = SessionHandle::from_stored(handle);
        let (expiries, now) = self
            .sessions()
            .expiries(std::slice::from_ref(&handle))
            .await?;
        // Ended meanwhile: its lock is being ended too.
        let expires_at_ms = expiries
            .get(&handle)
            .copied()
            .ok_or(LockError::SessionNotFound)?;
        state.expires_at_ms = expires_at_ms;
        state.ttl_ms = expires_at_ms.saturating_sub(now);
        Ok(state)
    }

    /// Replaces the holder's public value (none removes it); the holder's
    /// lease as it stands.
    pub async fn set_value(
        &self,
        key: &LockKey,
        token: &Token,
        value: Option<&LockValue>,
    ) -> Result<LockState, LockError> {
        let mut conn = self.redis().connection().await?;
        let keys = self.keys(key);
        let value = value.map(LockValue::as_str);
        let reply =
            scripts::set_value(&mut conn, &keys, self.publish(), &token.expose(), value).await?;
        match reply {
            SetValueReply::Set(state) => self.with_session_expiry(state).await,
            SetValueReply::Lost(why) => Err(LockError::lost(key, why)),
        }
    }

    /// Ends every hold of the lock at once, or (`only`) the one hold with
    /// that fencing token; the waiters are served, the streamed holders
    /// told `revoked`. Returns how many places ended; `NotFound` when the
    /// lock (or that hold) is not held.
    pub async fn revoke(&self, key: &LockKey, only: Option<u64>) -> Result<u64, LockError> {
        let mut conn = self.redis().connection().await?;
        let keys = self.keys(key);
        let revoked = scripts::revoke(&mut conn, &keys, self.publish(), self.max_ttl_ms(), only)
            .await?
            .ok_or_else(|| LockError::NotFound { key: key.clone() })?;
        drop(conn);
        self.metrics().lock(LockOutcome::Revoked);
        tracing::info!(%key, holders = revoked.holders, fencing_token = ?only, "a lock was revoked");
        // Their sessions no longer hold it (their keys are in another slot).
        for (handle, token) in &revoked.sessions {
            let handle = SessionHandle::from_stored(handle);
            self.sessions().forget(&handle, token, key.as_str()).await;
        }
        Ok(revoked.holders)
    }
}
