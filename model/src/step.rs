//! One atomic step being taken: the state it changes, the scenario and protocol it follows, and the notes it leaves for a trace.

use crate::scenario::{Fixes, Gw, Inst, Key, Req, Scenario};
use crate::state::{Lock, State};

/// What happened in a step, in words, kept only when a trace is printed.
#[derive(Default)]
pub struct Notes {
    pub enabled: bool,
    pub lines: Vec<String>,
}

impl Notes {
    pub fn recording() -> Self {
        Self {
            enabled: true,
            lines: Vec::new(),
        }
    }

    /// Notes `line` (made only when recording).
    pub fn say(&mut self, line: impl FnOnce() -> String) {
        if self.enabled {
            self.lines.push(line());
        }
    }
}

/// What a message on an instance's grant channel says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Message {
    /// `<id> <fence> <ends>`: a place offered, to claim.
    Offered,
    /// `<id> <fence> <ends> outright`: the whole lease, nothing to claim.
    Outright,
    /// `<id> ready`: a batch's lock has a place for it.
    Ready,
}

/// A message on instance `inst`'s grant channel of lock `key`
/// (`<prefix>granted:{key}:<instance>`) for waiter `waiter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Told {
    pub key: Key,
    pub inst: Inst,
    pub waiter: Req,
    pub message: Message,
}

/// A step in progress.
pub struct Step<'a> {
    pub s: &'a mut State,
    pub scenario: &'a Scenario,
    pub fixes: Fixes,
    pub notes: &'a mut Notes,
    /// The script running now, as the notes name it (`tend(C)`, `release(H) x`).
    pub script: String,
    /// The batch whose own script runs (`ctx.batch`): not told it is ready.
    pub batch: Option<Req>,
    /// The waiter whose `leave.lua` runs: out of the queue before the
    /// script serves it, it waits no longer for the grants that follow.
    pub leaving: Option<Req>,
    /// The grant channels' messages sent, in order, when someone reads
    /// them (the differential test); `None` in the checker.
    pub told: Option<Vec<Told>>,
}

impl<'a> Step<'a> {
    pub fn new(
        s: &'a mut State,
        scenario: &'a Scenario,
        fixes: Fixes,
        notes: &'a mut Notes,
    ) -> Self {
        Self {
            s,
            scenario,
            fixes,
            notes,
            script: String::new(),
            batch: None,
            leaving: None,
            told: None,
        }
    }

    /// The request's name in the scenario (`W1`).
    pub fn name(&self, req: Req) -> &'static str {
        self.scenario.name_of(req)
    }

    pub fn gateway_of(&self, req: Req) -> Gw {
        self.scenario.spec(req).gateway
    }

    /// The request's lock (a batch's first).
    pub fn key_of(&self, req: Req) -> Key {
        self.scenario.spec(req).key
    }

    /// Whether the request takes lock `key` (one of a batch's).
    pub fn covers(&self, req: Req, key: Key) -> bool {
        self.scenario.spec(req).covers(key)
    }

    pub fn is_batch(&self, req: Req) -> bool {
        self.scenario.spec(req).is_batch()
    }

    pub fn lock(&self, key: Key) -> &Lock {
        self.s.redis.lock(key)
    }

    pub fn lock_mut(&mut self, key: Key) -> &mut Lock {
        self.s.redis.lock_mut(key)
    }

    /// ` x` when the scenario has more than one lock, for the notes.
    pub fn on_key(&self, key: Key) -> String {
        if self.scenario.names_keys() {
            format!(" {key}")
        } else {
            String::new()
        }
    }

    /// Names the script about to run, for the notes.
    pub fn running(&mut self, script: impl FnOnce() -> String) {
        if self.notes.enabled {
            self.script = script();
        }
    }

    pub fn say(&mut self, line: impl FnOnce() -> String) {
        self.notes.say(line);
    }

    /// Notes a message sent on a grant channel, for whoever reads them.
    pub fn tell(&mut self, key: Key, inst: Inst, waiter: Req, message: Message) {
        if let Some(told) = self.told.as_mut() {
            told.push(Told {
                key,
                inst,
                waiter,
                message,
            });
        }
    }
}
