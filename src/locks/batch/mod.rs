//! Several locks at once for one token, all or none: on one Redis in one step (waiting, when it must, in every lock's queue at once); on a Redis Cluster, whose scripts see one slot, one lock after another in one fixed order, given back on refusal.
//!
//! The parts: this file (the request, the answer, the Cluster's way) and
//! [`at_once`] (the one-step way, and its wait).

mod at_once;

use std::time::{Duration, Instant};

use super::acquire::{AcquireRequest, GrantGuard, JoinedSession};
use super::error::LockError;
use super::inputs::{LockKey, LockValue, Token, Ttl, WaitTime};
use super::sessions::SessionId;
use super::shared::Locks;
use crate::metrics::LockOutcome;
use crate::redis::locks::LockKind;

/// The most locks one batch may take.
pub const MAX_BATCH: usize = 64;

/// One lock of a batch.
#[derive(Debug, Clone)]
pub struct BatchLock {
    pub key: LockKey,
    pub kind: LockKind,
    /// The places a counting lock's holder takes (1 for other kinds).
    pub permits: u32,
}

/// Several locks to take at once, for one token.
#[derive(Debug, Clone)]
pub struct BatchRequest {
    /// 1 to [`MAX_BATCH`] locks, no key twice (the caller checks).
    pub locks: Vec<BatchLock>,
    pub ttl: Ttl,
    /// The whole batch's wait, not each lock's.
    pub wait: WaitTime,
    pub value: Option<LockValue>,
    pub session: Option<SessionId>,
}

/// One lock a batch holds.
#[derive(Debug, Clone)]
pub struct BatchHold {
    pub key: LockKey,
    pub kind: LockKind,
    pub fencing_token: u64,
    pub expires_at_ms: u64,
    /// When the script that set its lease was sent: the lease lasts at
    /// least its length from then, by this instance's clock.
    pub lease_from: Instant,
}

/// A granted batch: one token for every lock, each an ordinary hold of it.
#[derive(Debug)]
pub struct BatchLease {
    pub token: Token,
    pub locks: Vec<BatchHold>,
    pub ttl_ms: u64,
    pub expires_at_ms: u64,
    pub waited: Duration,
    /// Release every lock if dropped before the client has the answer.
    pub guards: Vec<GrantGuard>,
}

/// What a batch needs on its way, whichever way it goes.
pub(super) struct BatchTerms<'a> {
    pub(super) request: &'a BatchRequest,
    pub(super) token: Token,
    pub(super) deadline: Instant,
    /// The session the locks joined before they are taken (one Redis: a
    /// Cluster's locks each join as they are taken).
    pub(super) session: Option<JoinedSession>,
}

impl Locks {
    /// Takes every lock of the batch for one new token, or none.
    pub async fn acquire_batch(&self, mut request: BatchRequest) -> Result<BatchLease, LockError> {
        let started = Instant::now();
        let token = Token::generate();
        let in_order = self.redis().is_cluster();
        // On one Redis every lock joins the session before the one step
        // that takes them all (a session that ends meanwhile ends them).
        let mut session = None;
        if let (Some(id), false) = (request.session.clone(), in_order) {
            for lock in &request.locks {
                let single = self.single(&request, lock, WaitTime::NONE);
                session = Some(Box::pin(self.join_session(&single, &id, &token)).await?);
            }
            if let Some(joined) = &session {
                request.ttl = Ttl::fixed(Duration::from_millis(joined.lease.ttl_ms));
            }
        }
        let terms = BatchTerms {
            request: &request,
            token,
            deadline: started + request.wait.as_duration(),
            session,
        };
        let taken = if in_order {
            Box::pin(self.batch_in_order(&terms)).await
        } else {
            Box::pin(self.batch_at_once(&terms)).await
        };
        let (mut holds, guards) = match taken {
            Ok(taken) => taken,
            Err(err) => {
                if matches!(err, LockError::Held { .. } | LockError::Delayed { .. }) {
                    self.metrics().lock(LockOutcome::Conflict);
                }
                return Err(err);
            }
        };
        if let (Some(id), false) = (&request.session, in_order) {
            holds = Box::pin(self.attach_batch(&request, id, token, holds)).await?;
        }
        let waited = started.elapsed();
        self.metrics().lock(LockOutcome::Acquired);
        let expires_at_ms = holds
            .iter()
            .map(|hold| hold.expires_at_ms)
            .min()
            .unwrap_or(0);
        Ok(BatchLease {
            token,
            ttl_ms: request.ttl.as_millis(),
            expires_at_ms,
            waited,
            locks: holds,
            guards,
        })
    }

    /// One lock of a batch as a request of its own.
    fn single(&self, batch: &BatchRequest, lock: &BatchLock, wait: WaitTime) -> AcquireRequest {
        let mut single = AcquireRequest::new(lock.key.clone(), lock.kind, batch.ttl, wait);
        single.permits = lock.permits;
        single.value.clone_from(&batch.value);
        single
    }

    /// A Cluster's way: the locks one after another in the order of their
    /// keys (so batches sharing keys never wait for each other in a
    /// circle), each waiting with what is left of the batch's wait; on a
    /// refusal, those taken are given back before the answer.
    async fn batch_in_order(
        &self,
        terms: &BatchTerms<'_>,
    ) -> Result<(Vec<BatchHold>, Vec<GrantGuard>), LockError> {
        let request = terms.request;
        let mut order: Vec<usize> = (0..request.locks.len()).collect();
        order.sort_by(|a, b| {
            request.locks[*a]
                .key
                .as_str()
                .cmp(request.locks[*b].key.as_str())
        });
        let mut taken: Vec<(usize, super::acquire::Lease)> = Vec::with_capacity(order.len());
        for index in order {
            let lock = &request.locks[index];
            let left = terms.deadline.saturating_duration_since(Instant::now());
            let wait = if request.wait.is_zero() {
                WaitTime::NONE
            } else {
                WaitTime::fixed(left)
            };
            let mut single = self.single(request, lock, wait);
            single.session.clone_from(&request.session);
            match Box::pin(self.acquire_as(single, terms.token)).await {
                Ok(lease) => taken.push((index, lease)),
                Err(err) => {
                    self.give_back(terms.token, taken.iter().map(|(_, lease)| &lease.key))
                        .await;
                    for (_, mut lease) in taken {
                        if let Some(guard) = lease.guard.take() {
                            guard.complete();
                        }
                    }
                    return Err(err);
                }
            }
        }
        taken.sort_by_key(|(index, _)| *index);
        let mut holds = Vec::with_capacity(taken.len());
        let mut guards = Vec::with_capacity(taken.len());
        for (index, mut lease) in taken {
            holds.push(BatchHold {
                key: lease.key.clone(),
                kind: request.locks[index].kind,
                fencing_token: lease.state.fencing_token,
                expires_at_ms: lease.state.expires_at_ms,
                lease_from: lease.lease_from,
            });
            guards.extend(lease.guard.take());
        }
        Ok((holds, guards))
    }

    /// Releases what a refused batch took, before its answer (a failure
    /// here leaves the lease to end it).
    async fn give_back<'k>(&self, token: Token, keys: impl Iterator<Item = &'k LockKey>) {
        for key in keys {
            if let Err(err) = self.release_all(key, &token).await {
                tracing::debug!(%key, error = %err, "could not give back a refused batch's lock; its lease ends it");
            }
        }
    }

    /// A batch in a session: each lock attached to it (its lease the
    /// session's), or, the session having ended meanwhile, all given back.
    async fn attach_batch(
        &self,
        request: &BatchRequest,
        id: &SessionId,
        token: Token,
        holds: Vec<BatchHold>,
    ) -> Result<Vec<BatchHold>, LockError> {
        let mut attached = Vec::with_capacity(holds.len());
        for (lock, hold) in request.locks.iter().zip(&holds) {
            let single = self.single(request, lock, WaitTime::NONE);
            let state = crate::redis::locks::LockState {
                fencing_token: hold.fencing_token,
                holds: 1,
                ttl_ms: request.ttl.as_millis(),
                expires_at_ms: hold.expires_at_ms,
                session: None,
            };
            match Box::pin(self.attach(&single, id, &token, state)).await {
                Ok(state) => attached.push(BatchHold {
                    expires_at_ms: state.expires_at_ms,
                    ..hold.clone()
                }),
                Err(err) => {
                    self.give_back(token, holds.iter().map(|hold| &hold.key))
                        .await;
                    return Err(err);
                }
            }
        }
        Ok(attached)
    }
}
