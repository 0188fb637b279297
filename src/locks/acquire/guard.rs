//! The guard of a new grant until its client has it: a grant whose client went away is released (and its place in the queue left), not left held.

use std::fmt;
use std::time::{Duration, Instant};

use crate::locks::inputs::{LockKey, Token};
use crate::locks::shared::Locks;
use crate::redis::locks::grant::{IfGranted, LeaveReply};

/// Guards a new grant until its client has it. Dropped while armed (the
/// client disconnected while the request waited, or before its response
/// could be written), it leaves the lock's queue if the request waited in
/// it, and releases the grant, in the background. Releasing by the fresh
/// token is harmless when nothing was granted: the script answers "not
/// found" or "not owner" and changes nothing.
///
/// A request sent with an Idempotency-Key keeps what it was granted
/// before its client left: the client's retry gets it (and its lease ends
/// it if no retry comes). A place only offered from the queue is then
/// left to its offer's end (a second at most) rather than given back: a
/// retry waiting under the same key shares that grant and may claim it.
pub struct GrantGuard {
    armed: Option<(Locks, LockKey, Token)>,
    keep_if_left: bool,
    /// The request's id in the lock's queue, and the end of its wait,
    /// while it waits there.
    queued_as: Option<(String, Instant)>,
}

impl GrantGuard {
    pub(in crate::locks) fn new(
        locks: Locks,
        key: LockKey,
        token: Token,
        keep_if_left: bool,
    ) -> Self {
        Self {
            armed: Some((locks, key, token)),
            keep_if_left,
            queued_as: None,
        }
    }

    /// The client has the grant, or the request ended without one and left
    /// nothing behind: nothing to undo.
    pub fn complete(mut self) {
        self.armed = None;
    }

    /// The request waits in the lock's queue as `id` until `deadline` (or
    /// no longer: `None`).
    pub(in crate::locks) fn queued_as(&mut self, waiting: Option<(&str, Instant)>) {
        self.queued_as = waiting.map(|(id, deadline)| (id.to_owned(), deadline));
    }
}

impl Drop for GrantGuard {
    fn drop(&mut self) {
        let Some((locks, key, token)) = self.armed.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let queued_as = self.queued_as.take();
        let keep = self.keep_if_left;
        if keep {
            tracing::debug!(%key, "the client left before receiving its grant; kept for its retry");
        } else {
            tracing::debug!(%key, "the client left before receiving its grant; undoing it");
        }
        runtime.spawn(async move {
            if let Some((id, deadline)) = queued_as {
                let if_granted = if keep { IfGranted::Keep } else { IfGranted::GiveBack };
                let mut pause = Duration::from_millis(100);
                loop {
                    match locks.leave_queue(&key, &id, &token, if_granted).await {
                        // Left holding nothing, or gave back what it was granted.
                        Ok(LeaveReply::Left { .. } | LeaveReply::Gone { .. } | LeaveReply::GivenBack) => return,
                        Ok(LeaveReply::Granted { .. }) => break,
                        // Redis unreachable (down, restarting): the place
                        // would stand until the wait's end, and each time
                        // it reached the head it would hold the live
                        // waiters behind it for an offer's length. Tried
                        // again until it is left or its wait is over.
                        Err(err) if Instant::now() + pause < deadline => {
                            tracing::debug!(%key, error = %err, "could not leave a lock's queue yet; trying again");
                            tokio::time::sleep(pause).await;
                            pause = (pause * 2).min(Duration::from_secs(1));
                        }
                        Err(err) => {
                            tracing::debug!(%key, error = %err, "could not leave a lock's queue; the waiter's wait ends it");
                            break;
                        }
                    }
                }
            }
            if !keep && let Err(err) = locks.release_all(&key, &token).await {
                // Usually nothing was granted, or Redis is down: the
                // lease ends it anyway.
                tracing::debug!(%key, error = %err, "could not release an abandoned grant; its lease will end it");
            }
        });
    }
}

impl fmt::Debug for GrantGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrantGuard")
            .field("armed", &self.armed.is_some())
            .field("queued_as", &self.queued_as)
            .finish()
    }
}
