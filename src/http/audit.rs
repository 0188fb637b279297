//! The audit trail: one structured log line (target `lockgate::audit`) per revocation, sale administration, permissions reload and refused request; refusals at most one line a second per principal, with a count of those not written.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Instant;

use crate::sync::lock;

/// An action done (or refused) for `principal` on `key`, with its outcome.
pub fn record(principal: &str, action: &str, key: &str, outcome: &str) {
    tracing::info!(target: "lockgate::audit", principal, action, key, outcome);
}

/// Refusals per principal: when the last line was written, and how many
/// have been refused since without one.
static REFUSALS: LazyLock<Mutex<HashMap<String, (Instant, u64)>>> = LazyLock::new(Mutex::default);

/// A refused request (401, 403). A flood of them writes about one line a
/// second per principal, each with how many were left out before it. The
/// principals are those of the permissions file and a few fixed names, so
/// the table stays small whatever callers send.
pub fn refused(principal: &str, action: &str, key: &str, outcome: &str) {
    let now = Instant::now();
    let suppressed = {
        let mut refusals = lock(&REFUSALS);
        match refusals.get_mut(principal) {
            Some((last, count)) if now.duration_since(*last).as_secs() < 1 => {
                *count += 1;
                return;
            }
            Some((last, count)) => {
                *last = now;
                std::mem::take(count)
            }
            None => {
                refusals.insert(principal.to_owned(), (now, 0));
                0
            }
        }
    };
    tracing::warn!(
        target: "lockgate::audit",
        principal,
        action,
        key,
        outcome,
        refused_since_last_line = suppressed,
    );
}
