//! Handing a new grant to its client: a grant whose client went away is released, not left held.

use std::fmt;

use super::{LockKey, Locks, Token};

/// Guards a new grant until its client has it. Dropped while armed (the
/// client disconnected while the request waited, or before its response
/// could be written), it releases the grant in the background. Releasing by
/// the fresh token is harmless when nothing was granted: the script answers
/// "not found" or "not owner" and changes nothing.
pub struct Handover {
    armed: Option<(Locks, LockKey, Token)>,
}

impl Handover {
    pub(super) fn new(locks: Locks, key: LockKey, token: Token) -> Self {
        Self {
            armed: Some((locks, key, token)),
        }
    }

    /// The client has the grant: keep it.
    pub fn complete(mut self) {
        self.armed = None;
    }

    /// Nothing was granted: there is nothing to undo.
    pub(super) fn cancel(self) {
        self.complete();
    }
}

impl Drop for Handover {
    fn drop(&mut self) {
        let Some((locks, key, token)) = self.armed.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        tracing::debug!(%key, "the client left before receiving its grant; releasing it");
        runtime.spawn(async move {
            if let Err(err) = locks.release(&key, &token).await {
                // Usually Redis is down, and every failing request would
                // say so again here: the lease expiry cleans up anyway.
                tracing::debug!(%key, error = %err, "could not release an abandoned grant; its lease will expire");
            }
        });
    }
}

impl fmt::Debug for Handover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handover")
            .field("armed", &self.armed.is_some())
            .finish()
    }
}
