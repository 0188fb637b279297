//! Sessions (`src/locks/sessions/`, `lua/session_*.lua`): the keeper that renews a streamed session, and the sweep by which any gateway ends an expired session and each of its locks.

use crate::scenario::{Fixes, Gw, Mutant, Req, Sess, Tick};
use crate::state::{Ending, State, Sweep};
use crate::step::Step;

/// What `session_end.lua` answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionEnd {
    /// `ending` (now, or since an earlier call): the end of the lock-delay
    /// its locks keep, and the tokens of its locks (a set).
    Ending { delayed_until: Tick, locks: u8 },
    /// `alive`: it has not expired.
    Alive,
}

impl Step<'_> {
    /// `session_join.lua` (with fencing token 0, before the grant): lock
    /// `token` joins its session; false (`not-found`) when the session has
    /// ended or expired.
    pub fn session_join(&mut self, session: Sess, token: Req) -> bool {
        let record = self.s.redis.session_mut(session);
        if !record.alive(self.s.now) {
            return false;
        }
        record.locks |= token.bit();
        true
    }

    /// `session_keep.lua`: the session's lease starts again; its new
    /// expiry, or `None` (`not-found`) when it has ended or expired.
    pub fn session_keep(&mut self, session: Sess) -> Option<Tick> {
        let now = self.s.now;
        let ttl = self.scenario.session(session).ttl;
        let record = self.s.redis.session_mut(session);
        if !record.alive(now) {
            return None;
        }
        record.expires = now.saturating_add(ttl);
        Some(record.expires)
    }

    /// `session_end.lua` for an expiry: a session that has expired is
    /// marked ended (once: asked again, it answers the same), its
    /// lock-delay from its expiry; one that has not answers `alive`. (The
    /// mutant's sweep, which comes at the expiry instant, has a script that
    /// takes that instant for expired too.)
    pub fn session_end(&mut self, session: Sess) -> SessionEnd {
        let now = self.s.now;
        let delay = self.scenario.session(session).lock_delay;
        let early = self.fixes.is(Mutant::SweepEarly);
        let record = self.s.redis.session_mut(session);
        if record.ended.is_none() {
            let alive = if early {
                now < record.expires
            } else {
                now <= record.expires
            };
            if alive {
                return SessionEnd::Alive;
            }
            record.ended = Some((Ending::Expired, now));
            record.delayed_until = record.expires.saturating_add(delay);
        }
        SessionEnd::Ending {
            delayed_until: record.delayed_until,
            locks: record.locks,
        }
    }

    /// `session_keep.lua`, by the gateway that keeps a streamed session
    /// (`Keeper::next`, every third of its lease): the lease starts again;
    /// a session that ended or expired ends its keeper.
    pub fn keep_session(&mut self, session: Sess) {
        let gw = self.scenario.session(session).keeper.expect("a keeper");
        if let Some(until) = self.session_keep(session) {
            self.say(|| format!("gateway {gw}: session_keep({session}) -> kept until t={until}"));
        } else {
            self.s.kept &= !session.bit();
            self.say(|| {
                format!("gateway {gw}: session_keep({session}) -> not-found: its keeper ends")
            });
        }
    }

    /// The sweep (`Sessions::end_if_expired`): `session_end.lua` marks the
    /// session ended (once: asked again, it answers the same) with its
    /// lock-delay from its expiry, and lists its locks, which this gateway
    /// then ends one by one.
    pub fn end_session(&mut self, gw: Gw, session: Sess) {
        // The sweep runs only on a session due, which has expired.
        let SessionEnd::Ending {
            delayed_until,
            locks: pending,
        } = self.session_end(session)
        else {
            return;
        };
        let expires = self.s.redis.session(session).expires;
        self.say(|| {
            format!(
                "gateway {gw}: sweep: session_end({session}) -> ending (expired after t={expires}, delayed until t={delayed_until})"
            )
        });
        self.s.gateway_mut(gw).sweeping = Some(Sweep {
            session,
            pending,
            delayed_until,
        });
        if pending == 0 {
            self.finish_sweep(gw);
        }
    }

    /// `Sessions::finish`: the next lock of the session ends
    /// (`session_release.lua` on that lock's keys); after the last, the
    /// session's keys and index entry go (`drop_ended`).
    pub fn release_session_lock(&mut self, gw: Gw) {
        let Some(sweep) = self.s.gateway(gw).sweeping.clone() else {
            return;
        };
        let token = Req(sweep.pending.trailing_zeros() as u8);
        let (name, key) = (self.name(token), self.key_of(token));
        let on = self.on_key(key);
        self.running(|| format!("session_release({name}){on}"));
        let ended = self.session_release(key, token, sweep.delayed_until);
        let what = if ended { "ended" } else { "gone" };
        self.say(|| format!("gateway {gw}: session_release({name}){on} -> {what}"));
        let pending = sweep.pending & !token.bit();
        if let Some(sweeping) = &mut self.s.gateway_mut(gw).sweeping {
            sweeping.pending = pending;
        }
        if pending == 0 {
            self.finish_sweep(gw);
        }
    }

    fn finish_sweep(&mut self, gw: Gw) {
        if let Some(sweep) = self.s.gateway_mut(gw).sweeping.take() {
            self.s.redis.session_mut(sweep.session).dropped = true;
            let session = sweep.session;
            self.say(|| format!("gateway {gw}: drops session {session}"));
        }
    }
}

/// Whether the deadline index says `session` is due for the sweep: its
/// expiry has passed (the mutant: has come), and it is not dropped yet
/// (a sweep that stopped half way is finished by the next).
pub fn sweep_due(fixes: &Fixes, s: &State, session: Sess) -> bool {
    let record = s.redis.session(session);
    !record.dropped
        && if fixes.is(Mutant::SweepEarly) {
            record.expires <= s.now
        } else {
            record.expires < s.now
        }
}
