//! Sessions (`src/locks/sessions/`, `lua/session_*.lua`): the keeper that renews a streamed session, and the sweep by which any gateway ends an expired session and each of its locks.

use crate::scenario::{Fixes, Gw, Mutant, Req, Sess};
use crate::state::{Ending, State, Sweep};
use crate::step::Step;

impl Step<'_> {
    /// `session_keep.lua`, by the gateway that keeps a streamed session
    /// (`Keeper::next`, every third of its lease): the lease starts again;
    /// a session that ended or expired ends its keeper.
    pub fn keep_session(&mut self, session: Sess) {
        let now = self.s.now;
        let ttl = self.scenario.session(session).ttl;
        let gw = self.scenario.session(session).keeper.expect("a keeper");
        let record = self.s.redis.session_mut(session);
        if record.alive(now) {
            record.expires = now.saturating_add(ttl);
            let until = record.expires;
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
        let now = self.s.now;
        let delay = self.scenario.session(session).lock_delay;
        let record = self.s.redis.session_mut(session);
        if record.ended.is_none() {
            record.ended = Some((Ending::Expired, now));
            record.delayed_until = record.expires.saturating_add(delay);
        }
        let (expires, delayed_until, pending) =
            (record.expires, record.delayed_until, record.locks);
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
