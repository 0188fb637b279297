//! Why a lock operation did not happen: one error for the lock domain, which the HTTP layer maps to problem documents.

use super::inputs::LockKey;
use super::waiting::WaitRefused;
use crate::redis::BackendError;
use crate::redis::locks::grant::NoPlace;

/// Why a lock operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{key} is held by another owner")]
    Held { key: LockKey, retry_after_ms: u64 },
    /// Nobody holds it, but the lock-delay of a session that held it when
    /// it expired (or was revoked) keeps it until `until_ms`.
    #[error("nobody holds {key}, but it is kept by a lock-delay until {until_ms} (Unix ms)")]
    Delayed {
        key: LockKey,
        until_ms: u64,
        retry_after_ms: u64,
    },
    #[error("the token given does not hold {key}")]
    NotOwner { key: LockKey },
    #[error("there is no lock {key}: never taken, released, or expired")]
    NotFound { key: LockKey },
    #[error("{key} is held with a limit of {limit}; ask with that limit, or wait until it is free")]
    LimitMismatch { key: LockKey, limit: u64 },
    #[error("the token holds {key} in the other mode; re-enter in the mode it was taken in")]
    ModeConflict { key: LockKey },
    #[error("this Idempotency-Key's grant of {key} was made for a different request")]
    KeyReused { key: LockKey },
    #[error(transparent)]
    CannotWait(#[from] WaitRefused),
    #[error("{}", not_replicated(key, *undone))]
    NotReplicated { key: LockKey, undone: bool },
    #[error("there is no session with this id: never opened, ended, or expired")]
    SessionNotFound,
    #[error("waiting for {key} would close a cycle of session waits: {}", cycle.join(" -> "))]
    Deadlock { key: LockKey, cycle: Vec<String> },
    #[error(
        "another holder of {key} waits to upgrade already: each would wait for the other; the \
         token keeps its shared place"
    )]
    UpgradeDeadlock { key: LockKey },
    #[error("the token holds a place of the counting lock {key}, which has no other mode")]
    NoOtherMode { key: LockKey },
    #[error(transparent)]
    Backend(#[from] BackendError),
}

impl LockError {
    /// The error for a token that holds its place of `key` no more.
    pub(super) fn lost(key: &LockKey, why: NoPlace) -> Self {
        let key = key.clone();
        match why {
            NoPlace::NotOwner => Self::NotOwner { key },
            NoPlace::NotFound | NoPlace::Released | NoPlace::Revoked | NoPlace::SessionEnded => {
                Self::NotFound { key }
            }
        }
    }
}

/// The detail of [`LockError::NotReplicated`].
fn not_replicated(key: &LockKey, undone: bool) -> String {
    if undone {
        format!("too few replicas confirmed the grant of {key} in time; it was undone")
    } else {
        format!("too few replicas confirmed the new lease of {key} in time; the primary has it")
    }
}
