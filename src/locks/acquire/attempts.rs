//! One request's way to a new grant: a first attempt, then, while there is no place, its wait in the lock's queue until its grant is heard and claimed.
//!
//! The first attempt joins no queue, so a request that is granted at once
//! (the common case) costs one script and no subscription. A request that
//! must wait subscribes its instance to the lock's grant channel first and
//! then joins the queue in its second attempt, so that no grant can be
//! published before anyone listens; on a lock this instance has waiters on
//! already (contended, and subscribed), the request joins in its first.
//!
//! Granted from the queue in one write (data format 2), the grant is for
//! its whole lease, and the request is answered at once, unless it was
//! heard late (the instance stalled) or replicas must confirm it: then it
//! is claimed, as an offer is. Offered a place (the two-step hand-off), it
//! holds it for a second at most until it claims it for its whole lease
//! (an extension): a waiter whose instance died meanwhile holds nothing
//! long.

use std::sync::{Mutex, OnceLock};

use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::AcquireRequest;
use super::deadlock;
use crate::duration::millis;
use crate::locks::inputs::Token;
use crate::locks::sessions::SessionHandle;
use crate::locks::shared::Locks;
use crate::locks::waiting::{Standing, Ticket, WaitRefused};
use crate::metrics::LockOutcome;
use crate::redis::BackendError;
use crate::redis::locks::grant::{
    self as scripts, AcquireReply, Attempt, ExtendReply, IfGranted, LeaveReply,
};
use crate::redis::locks::{LockKeys, LockState};
use crate::telemetry::trace_context;

/// A lock wait's span, for traces (debug level: disabled unless traces
/// are on): its lock, its place when it queued, how it ended, and a link
/// to the release that granted it.
fn wait_span(key: &str) -> tracing::Span {
    tracing::debug_span!(
        "lock wait",
        otel.name = "lock wait",
        lock.key = key,
        lock.queued_position = tracing::field::Empty,
        lock.outcome = tracing::field::Empty,
    )
}

/// What one acquisition wants, for every attempt it makes.
#[derive(Clone, Copy)]
pub(super) struct AcquireTerms<'a> {
    pub(super) keys: &'a LockKeys,
    pub(super) request: &'a AcquireRequest,
    pub(super) request_hash: &'a str,
    /// The request's id in the lock's queue, should it wait there.
    pub(super) waiter_id: &'a str,
    pub(super) deadline: Instant,
    /// The session it is taken in, as the lock records it.
    pub(super) session: Option<&'a str>,
    /// That session's handle.
    pub(super) session_handle: Option<&'a SessionHandle>,
    /// Cancelled when that session ends: the wait ends with it.
    pub(super) session_ended: Option<&'a CancellationToken>,
}

/// A grant, however it came.
pub(super) struct Granted {
    pub(super) state: LockState,
    /// When the script that set the lease's end was sent.
    pub(super) sent: Instant,
    pub(super) waited: Duration,
    /// The token of the grant an Idempotency-Key made earlier, when this
    /// is that grant answered again.
    pub(super) replayed_token: Option<Token>,
}

/// Why an acquisition ended without a grant.
pub(super) enum NoGrant {
    /// No place: one may free in `free_in_ms`; a lock nobody holds is kept
    /// by a lock-delay until `delayed_until_ms`.
    Held {
        free_in_ms: u64,
        delayed_until_ms: Option<u64>,
    },
    LimitMismatch {
        limit: u64,
    },
    KeyReused,
    CannotWait(WaitRefused),
    /// Granted, but too few replicas confirmed it.
    NotReplicated,
    /// The session it waited with ended.
    SessionEnded,
    /// Its wait closed a cycle of session waits, as its youngest: the keys.
    Deadlock(Vec<String>),
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

/// A new holder's attempts at one lock.
pub(super) struct Acquisition<'a> {
    locks: &'a Locks,
    terms: AcquireTerms<'a>,
    token: String,
    /// The token of the request it waits with, when it waits as a retry
    /// under the same Idempotency-Key: their one grant is that token's.
    shared_token: OnceLock<String>,
    /// When the first attempt found no place: the wait is counted from there.
    refused_at: OnceLock<Instant>,
    /// Redis's clock as the last joining attempt read it (Unix ms), and
    /// when that attempt was sent: what tells a grant heard at once from
    /// one heard late.
    redis_clock: Mutex<Option<(u64, Instant)>>,
}

/// How much of its lease a grant made outright may have lost by the time
/// its message is read, for its request to be answered without a write
/// (and never more than half a short lease): beyond that (the instance
/// stalled, or the message waited), the place is claimed anew, as an
/// offer is, which finds it gone if the lease ended.
const HEARD_LATE: Duration = Duration::from_millis(500);

/// Where an attempt left the request.
enum Outcome {
    Granted(Granted),
    /// In the queue at this position.
    Queued {
        position: u64,
        free_in_ms: u64,
    },
    /// No place, and not queued.
    Held {
        free_in_ms: u64,
        delayed_until_ms: Option<u64>,
    },
    Refused(NoGrant),
}

impl<'a> Acquisition<'a> {
    pub(super) fn new(locks: &'a Locks, terms: AcquireTerms<'a>, token: &Token) -> Self {
        Self {
            locks,
            terms,
            token: token.expose(),
            shared_token: OnceLock::new(),
            refused_at: OnceLock::new(),
            redis_clock: Mutex::new(None),
        }
    }

    /// As [`Acquisition::run`]; a session's wait noted while it waited is
    /// forgotten once it is over, however it ended.
    pub(super) async fn run_noting_waits(self) -> Result<Granted, NoGrant> {
        let Some(session) = self.terms.session_handle else {
            return self.run().await;
        };
        let (locks, keys) = (self.locks, self.terms.keys);
        let waited = !self.terms.request.wait.is_zero();
        let acquired = self.run().await;
        if waited {
            // Boxed, like every round trip here: inline, the round trip's
            // state would be part of every waiting request's.
            Box::pin(deadlock::note_wait(locks, session, keys.key(), None)).await;
        }
        acquired
    }

    /// Tries once; without a place and with a wait, queues and waits for
    /// the grant, the deadline, or the instance's shutdown.
    pub(super) async fn run(self) -> Result<Granted, NoGrant> {
        let waiting = &self.locks.waiting();
        let may_wait = !self.terms.request.wait.is_zero();
        // Contended here already: the try would find no place.
        if !(may_wait && waiting.has_waiters_on(self.terms.keys)) {
            // Boxed: the round trip's state is large, and only lives while
            // it runs; a request waiting for a lock keeps only the small rest.
            let free_in_ms = match Box::pin(self.attempt(None)).await? {
                Outcome::Granted(granted) => return Ok(granted),
                Outcome::Refused(refused) => return Err(refused),
                Outcome::Held {
                    free_in_ms,
                    delayed_until_ms,
                } => (free_in_ms, delayed_until_ms),
                Outcome::Queued { free_in_ms, .. } => (free_in_ms, None),
            };
            if !may_wait || Instant::now() >= self.terms.deadline {
                let (free_in_ms, delayed_until_ms) = free_in_ms;
                return Err(NoGrant::Held {
                    free_in_ms,
                    delayed_until_ms,
                });
            }
            let _ = self.refused_at.set(Instant::now());
        }
        let reports_position = self.terms.request.positions.is_some();
        let mut ticket = waiting.enter(self.terms.keys, self.terms.waiter_id, reports_position)?;
        let span = wait_span(self.terms.keys.key());
        async {
            let _ = tokio::time::timeout_at(self.terms.deadline.into(), ticket.subscribed()).await;
            let waited = self.wait(&mut ticket).await;
            let outcome = match &waited {
                Ok(_) => "granted",
                Err(NoGrant::Held { .. }) => "timed-out",
                Err(_) => "refused",
            };
            tracing::Span::current().record("lock.outcome", outcome);
            waited
        }
        .instrument(span)
        .await
    }

    /// Joins the queue and waits in it.
    async fn wait(&self, ticket: &mut Ticket) -> Result<Granted, NoGrant> {
        match Box::pin(self.attempt(Some(ticket.id()))).await? {
            Outcome::Granted(granted) => return Ok(granted),
            Outcome::Refused(refused) => return Err(refused),
            Outcome::Held {
                free_in_ms,
                delayed_until_ms,
            } => {
                return Err(NoGrant::Held {
                    free_in_ms,
                    delayed_until_ms,
                });
            }
            Outcome::Queued {
                position,
                free_in_ms,
            } => self.joined(ticket, position, free_in_ms),
        }
        let closing = ticket.closing();
        let never = CancellationToken::new();
        let session_ended = self.terms.session_ended.unwrap_or(&never);
        // A session's wait is an edge others may close a cycle with: it is
        // noted on the session, and searched for cycles (at once, then
        // every few hundred milliseconds).
        if let Some(session) = self.terms.session_handle {
            Box::pin(self.note_wait(session, Some(ticket.id()))).await;
        }
        let mut cycles = tokio::time::interval(deadlock::CHECK_EVERY);
        loop {
            let standing = tokio::select! {
                () = session_ended.cancelled() => {
                    // Its session's end ends its wait, and what it was
                    // offered goes on.
                    let _ = Box::pin(self.give_up(ticket)).await;
                    return Err(NoGrant::SessionEnded);
                }
                _ = cycles.tick(), if self.terms.session_handle.is_some() => {
                    if let Some(cycle) = Box::pin(self.closes_a_cycle(ticket)).await {
                        // A place granted while the cycle was being
                        // confirmed broke the cycle: it is taken, not
                        // given back with a refusal.
                        if let Ok(granted) = Box::pin(self.leave(ticket)).await? {
                            return Ok(granted);
                        }
                        self.locks.metrics().deadlock();
                        return Err(NoGrant::Deadlock(cycle));
                    }
                    continue;
                }
                standing = ticket.changed() => standing,
                () = tokio::time::sleep_until(self.terms.deadline.into()) => {
                    // As the lock stands now: renewed since the wait began,
                    // it frees later than first heard.
                    return Box::pin(self.leave(ticket)).await?;
                }
                () = closing.cancelled() => {
                    // Answered that nothing was granted, it holds nothing:
                    // a place offered meanwhile goes on to the next waiter
                    // in the same step as it leaves. Under an
                    // Idempotency-Key the grant stays (a retry waiting
                    // under the same key elsewhere shares it, and may have
                    // claimed it already, and a retry after the 503 is
                    // answered it); an offer unclaimed lapses within a
                    // second, a grant made outright at the end of its lease.
                    let _ = Box::pin(self.give_up(ticket)).await;
                    return Err(WaitRefused::ShuttingDown.into());
                }
            };
            match standing {
                Standing::Queued { position } => self.report(position),
                // Only a batch's waiter is told so.
                Standing::Ready(_) => continue,
                Standing::Granted {
                    fencing_token,
                    expires_at_ms,
                    outright,
                    released_by,
                } => {
                    if let Some(release) = released_by {
                        trace_context::link(&tracing::Span::current(), release);
                    }
                    if outright && let Some(granted) = self.taken(fencing_token, expires_at_ms) {
                        return Ok(granted);
                    }
                    if let Some(granted) = Box::pin(self.claim()).await? {
                        return Ok(granted);
                    }
                }
                Standing::Unaccounted => {
                    if let Ok(granted) = Box::pin(self.leave(ticket)).await? {
                        return Ok(granted);
                    }
                }
            }
            // Passed over (its place offered too long ago, or its instance
            // was away): it queues again, at the end.
            if !matches!(standing, Standing::Queued { .. }) {
                ticket.requeue();
                match Box::pin(self.attempt(Some(ticket.id()))).await? {
                    Outcome::Granted(granted) => return Ok(granted),
                    Outcome::Refused(refused) => return Err(refused),
                    Outcome::Held {
                        free_in_ms,
                        delayed_until_ms,
                    } => {
                        return Err(NoGrant::Held {
                            free_in_ms,
                            delayed_until_ms,
                        });
                    }
                    Outcome::Queued {
                        position,
                        free_in_ms,
                    } => self.joined(ticket, position, free_in_ms),
                }
            }
        }
    }

    /// Notes (or, `None`, forgets) the session's wait for this lock, as
    /// waiter `id`: what a search for cycles follows.
    pub(super) async fn note_wait(&self, session: &SessionHandle, id: Option<&str>) {
        deadlock::note_wait(self.locks, session, self.terms.keys.key(), id).await;
    }

    /// The keys of the cycle this wait closes, when it is the wait of the
    /// cycle to refuse (see `deadlock`).
    async fn closes_a_cycle(&self, ticket: &Ticket) -> Option<Vec<String>> {
        let session = self.terms.session_handle?;
        deadlock::cycle_through(self.locks, self.terms.keys, session, ticket.id()).await
    }

    /// Notes a place in the queue: the ticket hears it, the client (of a
    /// streamed lock) is told, and the lock is tended when its lease ends.
    fn joined(&self, ticket: &Ticket, position: u64, free_in_ms: u64) {
        ticket.joined(position);
        // As i64: OpenTelemetry has no unsigned integers.
        tracing::Span::current().record(
            "lock.queued_position",
            i64::try_from(position).unwrap_or(i64::MAX),
        );
        self.locks.metrics().lock(LockOutcome::Queued);
        self.report(position);
        if free_in_ms > 0 {
            self.locks
                .waiting()
                .due(self.terms.keys, Duration::from_millis(free_in_ms));
        }
    }

    fn report(&self, position: u64) {
        if let Some(positions) = &self.terms.request.positions {
            positions.send_if_modified(|was| std::mem::replace(was, position) != position);
        }
    }

    /// Leaves the queue: the place it was granted meanwhile, or why there
    /// is none as the lock stands now (`NoGrant::Held`).
    async fn leave(&self, ticket: &Ticket) -> Result<Result<Granted, NoGrant>, NoGrant> {
        let held = |free_in_ms: u64, delayed_until_ms| NoGrant::Held {
            free_in_ms: free_in_ms.max(1),
            delayed_until_ms,
        };
        match self.leave_queue(ticket, IfGranted::Keep).await? {
            // A place that stood too long unclaimed is gone: soon free again.
            LeaveReply::Granted { .. } => Ok(self.claim().await?.ok_or(held(1, None))),
            LeaveReply::Left {
                free_in_ms,
                delayed_until_ms,
            }
            | LeaveReply::Gone {
                free_in_ms,
                delayed_until_ms,
            } => Ok(Err(held(free_in_ms, delayed_until_ms))),
            LeaveReply::GivenBack => Ok(Err(held(1, None))),
        }
    }

    /// Leaves the queue holding nothing: a place offered meanwhile goes on
    /// to the next waiter. A retry under an Idempotency-Key keeps it (the
    /// requests waiting with it share it; an offer unclaimed lapses).
    async fn give_up(&self, ticket: &Ticket) -> Result<(), NoGrant> {
        let if_granted = if self.terms.request.idempotency_key.is_some()
            && self
                .terms
                .session_ended
                .is_none_or(|ended| !ended.is_cancelled())
        {
            IfGranted::Keep
        } else {
            IfGranted::GiveBack
        };
        self.leave_queue(ticket, if_granted).await.map(drop)
    }

    async fn leave_queue(
        &self,
        ticket: &Ticket,
        if_granted: IfGranted,
    ) -> Result<LeaveReply, NoGrant> {
        let mut conn = self.locks.redis().connection().await?;
        let waiter = (ticket.id(), self.token());
        let publish = self.locks.publish();
        Ok(scripts::leave(&mut conn, self.terms.keys, publish, waiter, if_granted).await?)
    }

    /// The token its grant is made under: its own, or the one it shares
    /// with the request it waits with.
    fn token(&self) -> &str {
        self.shared_token.get().unwrap_or(&self.token)
    }

    /// A place granted outright from the queue, answered without a write:
    /// `None` when it must be claimed all the same (replicas must confirm
    /// it, or it was heard late: more than [`HEARD_LATE`], or half its
    /// lease, gone by Redis's clock as this request last read it).
    fn taken(&self, fencing_token: u64, expires_at_ms: u64) -> Option<Granted> {
        let request = self.terms.request;
        if request.confirmed && self.locks.redis().confirms_writes() {
            return None;
        }
        let (redis_ms, read_at) = (*crate::sync::lock(&self.redis_clock))?;
        // Read when the attempt was sent, Redis's clock was at most
        // `redis_ms`: counted from then, the lease left is never overstated.
        let redis_now = redis_ms.saturating_add(millis(read_at.elapsed()));
        let left = Duration::from_millis(expires_at_ms.saturating_sub(redis_now));
        let ttl = request.ttl.as_duration();
        if left + HEARD_LATE.min(ttl / 2) < ttl {
            return None;
        }
        let state = LockState {
            fencing_token,
            holds: 1,
            ttl_ms: request.ttl.as_millis(),
            expires_at_ms,
            session: None,
        };
        // The lease began when the grant was made: `ttl - left` ago.
        let began = Instant::now()
            .checked_sub(ttl.saturating_sub(left))
            .unwrap_or_else(Instant::now);
        self.locks.metrics().queue_grant(true);
        Some(self.granted(state, began, None))
    }

    /// Claims a place granted from the queue for the whole lease (the
    /// grant stood for a second at most), confirmed by the replicas when
    /// they must confirm it. `None` when the place is gone: it stood too
    /// long unclaimed, and the request queues again.
    async fn claim(&self) -> Result<Option<Granted>, NoGrant> {
        let request = self.terms.request;
        let keys = self.terms.keys;
        let (publish, ttl_ms) = (self.locks.publish(), request.ttl.as_millis());
        let sent = Instant::now();
        let (reply, confirmed) = self
            .locks
            .redis()
            .write(
                &keys.lock(),
                request.confirmed,
                async |conn| scripts::extend(conn, keys, publish, self.token(), ttl_ms).await,
                |reply| matches!(reply, ExtendReply::Extended(_)),
            )
            .await?;
        match reply {
            ExtendReply::Extended(_) if !confirmed => Err(NoGrant::NotReplicated),
            ExtendReply::Extended(state) => {
                self.locks.metrics().queue_grant(false);
                Ok(Some(self.granted(state, sent, None)))
            }
            ExtendReply::Lost(_) => Ok(None),
        }
    }

    fn granted(&self, state: LockState, sent: Instant, replayed_token: Option<Token>) -> Granted {
        // A grant shared with the request it waited with is that
        // request's, answered again.
        let shared = self
            .shared_token
            .get()
            .and_then(|token| Token::parse(token).ok());
        // Waited until the lease began (`sent`: the script that set its end
        // was sent, or, granted outright, the grant was made), not until
        // the answer: a client that counts its lease from its request's
        // start and `waited_ms` must never place its end past Redis's.
        Granted {
            state,
            sent,
            waited: self
                .refused_at
                .get()
                .map_or(Duration::ZERO, |at| sent.saturating_duration_since(*at)),
            replayed_token: replayed_token.or(shared),
        }
    }

    /// Runs the acquire script once: as a waiter `waiter_id` that joins the
    /// queue if there is no place, or (`None`) trying once. A grant is
    /// confirmed by the replicas when they must confirm it.
    async fn attempt(&self, waiter_id: Option<&str>) -> Result<Outcome, NoGrant> {
        let terms = self.terms;
        let request = terms.request;
        let instance = self.locks.waiting().instance();
        let idempotency = request.idempotency_key.as_ref();
        let attempt = Attempt {
            token: self.token(),
            kind: request.kind,
            permits: request.permits,
            ttl_ms: request.ttl.as_millis(),
            reenter: false,
            wait_left_ms: millis(terms.deadline.saturating_duration_since(Instant::now())),
            waiter: waiter_id.map(|id| scripts::Waiter {
                id,
                instance,
                outright: self.locks.redis().grants_outright(),
            }),
            streamed: request.streamed,
            value: request
                .value
                .as_ref()
                .map(crate::locks::inputs::LockValue::as_str),
            idempotency: idempotency.map(|key| (key.as_str(), terms.request_hash)),
            session: terms.session,
        };
        let publish = self.locks.publish();
        let sent = Instant::now();
        let (reply, confirmed) = self
            .locks
            .redis()
            .write(
                &terms.keys.lock(),
                request.confirmed,
                async |conn| scripts::acquire(conn, terms.keys, publish, attempt).await,
                |reply| matches!(reply, AcquireReply::Granted(_)),
            )
            .await?;
        Ok(match reply {
            AcquireReply::Granted(_) if !confirmed => Outcome::Refused(NoGrant::NotReplicated),
            AcquireReply::Granted(state) => Outcome::Granted(self.granted(state, sent, None)),
            AcquireReply::Replayed { token, state } => match Token::parse(&token) {
                Ok(token) => Outcome::Granted(self.granted(state, sent, Some(token))),
                Err(_) => Outcome::Refused(NoGrant::KeyReused),
            },
            AcquireReply::KeyReused => Outcome::Refused(NoGrant::KeyReused),
            AcquireReply::Queued {
                position,
                free_in_ms,
                token,
                now_ms,
            } => {
                if let Some(token) = token {
                    let _ = self.shared_token.set(token);
                }
                // A request that joined at its first attempt waits from it.
                let _ = self.refused_at.set(sent);
                if let Some(now_ms) = now_ms {
                    *crate::sync::lock(&self.redis_clock) = Some((now_ms, sent));
                }
                Outcome::Queued {
                    position,
                    free_in_ms,
                }
            }
            AcquireReply::Held {
                free_in_ms,
                delayed_until_ms,
            } => Outcome::Held {
                free_in_ms,
                delayed_until_ms,
            },
            AcquireReply::LimitMismatch { limit } => {
                Outcome::Refused(NoGrant::LimitMismatch { limit })
            }
            // A fresh token holds nothing to re-enter or conflict with.
            AcquireReply::Reentered(_) | AcquireReply::NotOwner | AcquireReply::ModeConflict => {
                Outcome::Refused(NoGrant::Held {
                    free_in_ms: 0,
                    delayed_until_ms: None,
                })
            }
        })
    }
}
