//! Handing a new grant to its client: a grant whose client went away is released, not left held.

use std::fmt;

use super::{LockKey, Locks, Token};

/// Guards a new grant until its client has it. Dropped while armed (the
/// client disconnected while the request waited, or before its response
/// could be written), it releases the grant in the background. Releasing by
/// the fresh token is harmless when nothing was granted: the script answers
/// "not found" or "not owner" and changes nothing.
///
/// It also remembers whether the request is marked in Redis as a waiting
/// writer (an exclusive request waiting for shared holders, which holds new
/// shared requests back): a request that ends without the lock withdraws
/// that mark, so readers need not wait out its whole wait.
pub struct Handover {
    armed: Option<(Locks, LockKey, Token)>,
    marked: bool,
}

impl Handover {
    pub(super) fn new(locks: Locks, key: LockKey, token: Token) -> Self {
        Self {
            armed: Some((locks, key, token)),
            marked: false,
        }
    }

    /// The client has the grant: keep it.
    pub fn complete(mut self) {
        self.armed = None;
    }

    /// Whether the request is marked as a waiting writer.
    pub(super) fn marked(&self) -> bool {
        self.marked
    }

    /// The request is now marked as a waiting writer (`true`), or its grant
    /// removed the mark (`false`).
    pub(super) fn set_marked(&mut self, marked: bool) {
        self.marked = marked;
    }

    /// Nothing was granted: there is nothing to undo but the mark, if any.
    pub(super) fn cancel(mut self) {
        if let Some((locks, key, token)) = self.armed.take()
            && self.marked
        {
            let label = key.clone();
            spawn(async move { locks.withdraw(&key, &token).await }, label);
        }
    }
}

impl Drop for Handover {
    fn drop(&mut self) {
        let Some((locks, key, token)) = self.armed.take() else {
            return;
        };
        tracing::debug!(%key, "the client left before receiving its grant; releasing it");
        let marked = self.marked;
        let label = key.clone();
        spawn(
            async move {
                if marked {
                    locks.withdraw(&key, &token).await?;
                }
                locks.release(&key, &token).await.map(drop)
            },
            label,
        );
    }
}

/// Runs `undo` in the background, if there is a runtime to run it.
fn spawn(undo: impl Future<Output = Result<(), super::LockError>> + Send + 'static, key: LockKey) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        if let Err(err) = undo.await {
            // Usually Redis is down, and every failing request would say so
            // again here: the lease (or the wait's end) cleans up anyway.
            tracing::debug!(%key, error = %err, "could not undo an abandoned request; its lease or wait will end it");
        }
    });
}

impl fmt::Debug for Handover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handover")
            .field("armed", &self.armed.is_some())
            .field("marked", &self.marked)
            .finish()
    }
}
