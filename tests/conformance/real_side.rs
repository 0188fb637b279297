//! A step on the real side: the gateway's own wrapper of each script (`lockgate::redis::locks`, `lockgate::redis::sessions`), called as the gateway calls it, on the test's redis-server; its reply read into the shared [`Outcome`] (fencing tokens still the real ones).

use lockgate::redis::locks::LockState;
use lockgate::redis::locks::batch::{self, BatchAttempt, BatchLock, BatchReply};
use lockgate::redis::locks::grant::{
    self, AcquireReply, Attempt, ExtendReply, Holds, IfGranted, LeaveReply, ReleaseReply, Waiter,
};
use lockgate::redis::locks::view::{self, LockSight, Tending};
use lockgate::redis::sessions::{self, EndReply, Ending, Hold, Opening};
use lockgate::redis::{BackendError, Connection};
use lockgate_model::scenario::{Key, Req, Sess, Tick};

use crate::clock::{At, Ticks};
use crate::steps::{Action, LeftAs, Outcome};
use crate::world::{self, Names, World};

/// The command the scripts send their messages with: `RPUSH` keeps each
/// channel's messages in a list of the channel's name, for the read after
/// the step (`observe`), where nobody would hear a `PUBLISH`.
const PUBLISH: &str = "RPUSH";

/// The longest lease `revoke.lua` is told of (its fence counter's life).
const LONGEST_LEASE_MS: u64 = 60_000;

/// The real side of one sequence.
pub struct Real {
    pub conn: Connection,
    pub names: Names,
    pub ticks: Ticks,
}

impl Real {
    /// Opens the world's sessions (`session_open.lua`), at tick 0.
    pub async fn new(
        conn: Connection,
        names: Names,
        ticks: Ticks,
        world: &World,
    ) -> Result<Self, BackendError> {
        let mut real = Self { conn, names, ticks };
        for (index, spec) in world.scenario.sessions.iter().enumerate() {
            let session = Sess(index as u8);
            let opening = Opening {
                ttl_ms: real.ticks.until_ms(spec.ttl),
                lock_delay_ms: real.ticks.delay_after_expiry_ms(spec.lock_delay),
                value: None,
                principal: "",
            };
            let keys = real.names.session(session).clone();
            sessions::open(&mut real.conn, &keys, &world::handle(session), opening).await?;
        }
        Ok(real)
    }

    /// Runs `action`; `tokens`: the token each request acts with; `now`:
    /// the tick it runs in.
    pub async fn apply(
        &mut self,
        world: &World,
        action: &Action,
        tokens: &[Req],
        now: Tick,
    ) -> Outcome {
        match self.run(world, action, tokens, now).await {
            Ok(outcome) => outcome,
            Err(err) => Outcome::Unexpected(err.to_string()),
        }
    }

    async fn run(
        &mut self,
        world: &World,
        action: &Action,
        tokens: &[Req],
        now: Tick,
    ) -> Result<Outcome, BackendError> {
        let token_of = |req: Req| world::token(tokens[usize::from(req.0)]);
        let keys_of = |req: Req| world.spec(req).keys().collect::<Vec<Key>>();
        Ok(match *action {
            Action::Acquire { req, join } => self.acquire(world, req, &token_of(req), join).await?,
            Action::Release { req } => {
                let mut released = Vec::new();
                for key in keys_of(req) {
                    released.push(self.release(key, &token_of(req)).await?);
                }
                Outcome::Released(released)
            }
            Action::Extend { req, ttl } => {
                let mut ends = Vec::new();
                for key in keys_of(req) {
                    let ttl_ms = self.ticks.lease_ms(ttl);
                    let keys = self.names.lock(key);
                    let reply =
                        grant::extend(&mut self.conn, keys, PUBLISH, &token_of(req), ttl_ms)
                            .await?;
                    ends.push(self.extended(reply));
                }
                Outcome::Extended(ends)
            }
            Action::Attach { req } => {
                let mut ends = Vec::new();
                for key in keys_of(req) {
                    let keys = self.names.lock(key);
                    let reply =
                        grant::attach(&mut self.conn, keys, PUBLISH, &token_of(req)).await?;
                    ends.push(self.extended(reply));
                }
                Outcome::Extended(ends)
            }
            Action::Leave { req, give_back } => {
                let mut left = Vec::new();
                for key in keys_of(req) {
                    left.push(self.leave(key, req, &token_of(req), give_back).await?);
                }
                Outcome::Left(left)
            }
            Action::Tend {
                gw,
                key,
                waiting,
                ref asked,
            } => {
                let ids: Vec<String> = asked.iter().map(|&id| world::waiter(id)).collect();
                let tending = Tending {
                    keys: self.names.lock(key),
                    waiting,
                    watching: false,
                    positions_of: ids.iter().map(String::as_str).collect(),
                };
                let tended =
                    view::tend_many(&mut self.conn, &[tending], &world::instance(gw), PUBLISH)
                        .await?
                        .remove(0)?;
                Outcome::Tended {
                    lapsed: tended.lapsed,
                    positions: tended.positions.iter().map(|&p| p as u8).collect(),
                    queued: tended.queued as u8,
                }
            }
            Action::Revoke { key } => {
                let keys = self.names.lock(key);
                let revoked =
                    grant::revoke(&mut self.conn, keys, PUBLISH, LONGEST_LEASE_MS, None).await?;
                Outcome::Revoked(revoked.map_or(0, |revoked| revoked.holders) as u8)
            }
            Action::Inspect { key } => {
                let keys = self.names.lock(key);
                let waiters = match view::inspect(&mut self.conn, keys, PUBLISH).await? {
                    LockSight::Held(view) => view.waiters.len(),
                    LockSight::Free { waiters, .. } => waiters.len(),
                };
                Outcome::Inspected(waiters as u8)
            }
            Action::Sweep { session } => self.sweep(world, session, now).await?,
            Action::KeepSession { session } => {
                let keys = self.names.session(session).clone();
                let handle = world::handle(session);
                let lease = sessions::keep(&mut self.conn, &keys, &handle, None).await?;
                Outcome::SessionKept(lease.map(|lease| self.ticks.until_tick(lease.expires_at_ms)))
            }
            Action::Wait { ticks } => {
                self.ticks.reach(now + ticks).await;
                Outcome::Waited
            }
        })
    }

    async fn acquire(
        &mut self,
        world: &World,
        req: Req,
        token: &str,
        join: bool,
    ) -> Result<Outcome, BackendError> {
        let spec = world.spec(req);
        let ttl_ms = self.ticks.lease_ms(world.scenario.ttl_of(req));
        let wait_left_ms = self.ticks.wait_ms(spec.wait);
        let (id, inst) = (world::waiter(req), world::instance(spec.gateway));
        let waiter = join.then_some(Waiter {
            id: &id,
            instance: &inst,
            outright: world.scenario.takes_outright(spec.gateway),
        });
        if spec.is_batch() {
            return self
                .batch(world, req, token, ttl_ms, wait_left_ms, waiter)
                .await;
        }
        let keys = self.names.lock(spec.key).clone();
        if let Some(session) = spec.session {
            let hold = Hold {
                token,
                key: keys.key(),
                mode: world.kind.mode(),
                fencing_token: 0,
            };
            let session_keys = self.names.session(session).clone();
            if sessions::join(&mut self.conn, &session_keys, hold)
                .await?
                .is_none()
            {
                return Ok(Outcome::NoSession);
            }
        }
        let idempotency = spec.idempotency_key.map(world::idempotency);
        let record = spec
            .session
            .map(|session| world::session_record(world, &self.ticks, session));
        let attempt = Attempt {
            token,
            kind: world.kind,
            permits: 1,
            ttl_ms,
            reenter: false,
            wait_left_ms,
            waiter,
            streamed: spec.streamed,
            value: None,
            idempotency: idempotency.as_ref().map(|(k, b)| (k.as_str(), b.as_str())),
            session: record.as_deref(),
        };
        let reply = grant::acquire(&mut self.conn, &keys, PUBLISH, attempt).await?;
        let own = Req(world::number(token, 't').expect("one of our tokens"));
        Ok(match reply {
            AcquireReply::Granted(state) => Outcome::Granted {
                fence: state.fencing_token,
                ends: self.ticks.end_tick(state.expires_at_ms),
            },
            AcquireReply::Replayed { token, state } => match parse_token(&token) {
                Some(token) => Outcome::Replayed {
                    token,
                    fence: state.fencing_token,
                    ends: self.ticks.end_tick(state.expires_at_ms),
                },
                None => Outcome::Unexpected(format!("replayed {token}")),
            },
            AcquireReply::Queued { token: None, .. } => Outcome::Queued { token: own },
            AcquireReply::Queued {
                token: Some(token), ..
            } => match parse_token(&token) {
                Some(token) => Outcome::Queued { token },
                None => Outcome::Unexpected(format!("queued with {token}")),
            },
            AcquireReply::Held { .. } => Outcome::Held,
            other => Outcome::Unexpected(format!("{other:?}")),
        })
    }

    async fn batch(
        &mut self,
        world: &World,
        req: Req,
        token: &str,
        ttl_ms: u64,
        wait_left_ms: u64,
        waiter: Option<Waiter<'_>>,
    ) -> Result<Outcome, BackendError> {
        let locks: Vec<BatchLock> = world
            .spec(req)
            .keys()
            .map(|key| BatchLock {
                keys: self.names.lock(key),
                kind: world.kind,
                permits: 1,
            })
            .collect();
        let attempt = BatchAttempt {
            token,
            ttl_ms,
            wait_left_ms,
            waiter,
            value: None,
            session: None,
        };
        Ok(
            match batch::batch(&mut self.conn, &locks, PUBLISH, attempt).await? {
                BatchReply::Granted {
                    fencing_tokens,
                    expires_at_ms,
                } => Outcome::BatchGranted {
                    fences: fencing_tokens,
                    ends: self.ticks.end_tick(expires_at_ms),
                },
                BatchReply::Queued { .. } => Outcome::BatchQueued,
                BatchReply::Held { .. } => Outcome::Held,
                other => Outcome::Unexpected(format!("{other:?}")),
            },
        )
    }

    /// `release.lua` of one lock, as `DELETE /locks/{key}` runs it: a
    /// session's lock is then forgotten by its session.
    async fn release(&mut self, key: Key, token: &str) -> Result<bool, BackendError> {
        let keys = self.names.lock(key).clone();
        let reply =
            grant::release(&mut self.conn, &keys, PUBLISH, (token, None), Holds::One).await?;
        Ok(match reply {
            ReleaseReply::Released { session } => {
                if let Some(handle) = session {
                    let session = Sess(world::number(&handle, 's').expect("one of our sessions"));
                    let session_keys = self.names.session(session).clone();
                    sessions::forget(&mut self.conn, &session_keys, token, keys.key()).await?;
                }
                true
            }
            ReleaseReply::NotFound | ReleaseReply::NotOwner => false,
            ReleaseReply::HoldsLeft(_) => return Err(unexpected("holds-left")),
            ReleaseReply::KeyReused => return Err(unexpected("key-reused")),
        })
    }

    async fn leave(
        &mut self,
        key: Key,
        req: Req,
        token: &str,
        give_back: bool,
    ) -> Result<LeftAs, BackendError> {
        let if_granted = if give_back {
            IfGranted::GiveBack
        } else {
            IfGranted::Keep
        };
        let id = world::waiter(req);
        let keys = self.names.lock(key);
        Ok(
            match grant::leave(&mut self.conn, keys, PUBLISH, (&id, token), if_granted).await? {
                LeaveReply::Left { .. } => LeftAs::Left,
                LeaveReply::Gone { .. } => LeftAs::Gone,
                LeaveReply::GivenBack => LeftAs::GivenBack,
                LeaveReply::Granted {
                    fencing_token,
                    expires_at_ms,
                } => LeftAs::Granted {
                    fence: fencing_token,
                    ends: self.ticks.end_tick(expires_at_ms),
                },
            },
        )
    }

    /// The sweep: `session_end.lua`, then `session_release.lua` of each
    /// lock it lists (`Sessions::finish`).
    async fn sweep(
        &mut self,
        world: &World,
        session: Sess,
        now: Tick,
    ) -> Result<Outcome, BackendError> {
        let keys = self.names.session(session).clone();
        let (delayed_until_ms, mut locks) =
            match sessions::end(&mut self.conn, &keys, Ending::Expired, false).await? {
                EndReply::Alive { .. } => return Ok(Outcome::SessionAlive),
                EndReply::NotFound => return Err(unexpected("session not-found")),
                EndReply::Ending {
                    delayed_until_ms,
                    locks,
                    ..
                } => (delayed_until_ms, locks),
            };
        locks.sort();
        let mut tokens = Vec::new();
        let mut released = Vec::new();
        for (token, key) in &locks {
            let (Some(req), Some(key)) = (
                parse_token(token),
                world.keys().find(|k| k.to_string() == *key),
            ) else {
                return Err(unexpected(&format!("session lock {token} {key}")));
            };
            let lock = self.names.lock(key);
            let why = ("expired", delayed_until_ms);
            tokens.push(req);
            released.push(grant::session_release(&mut self.conn, lock, PUBLISH, token, why).await?);
        }
        let until = self.ticks.end_tick(delayed_until_ms);
        Ok(Outcome::Swept {
            delayed_until: (until > At::from(now)).then_some(until),
            locks: tokens,
            released,
        })
    }

    fn extended(&self, reply: ExtendReply) -> Option<At> {
        match reply {
            ExtendReply::Extended(LockState { expires_at_ms, .. }) => {
                Some(self.ticks.end_tick(expires_at_ms))
            }
            ExtendReply::Lost(_) => None,
        }
    }
}

fn parse_token(token: &str) -> Option<Req> {
    world::number(token, 't').map(Req)
}

fn unexpected(what: &str) -> BackendError {
    BackendError::UnexpectedReply {
        script: "conformance",
        reply: what.to_owned(),
    }
}
