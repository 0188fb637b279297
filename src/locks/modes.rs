//! Changing a hold's mode without letting go: a shared holder becomes the exclusive one (an upgrade, at once when it holds the lock alone, else waiting at the head of the queue), an exclusive holder a shared one (a downgrade).

use std::time::{Duration, Instant};

use super::error::LockError;
use super::inputs::{LockKey, Token, WaitTime};
use super::sessions::SessionHandle;
use super::shared::Locks;
use super::waiting::{Standing, WaitRefused};
use crate::duration::millis;
use crate::redis::locks::batch::{self as scripts, ModeChange, ModeReply};
use crate::redis::locks::grant::{IfGranted, LeaveReply, Waiter};
use crate::redis::locks::{LockKeys, LockState};
use crate::redis::sessions::Hold;

/// The mode a holder asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldMode {
    Exclusive,
    Shared,
}

impl HoldMode {
    /// As the scripts and the API name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exclusive => "exclusive",
            Self::Shared => "shared",
        }
    }
}

/// A hold in its new mode.
#[derive(Debug, Clone)]
pub struct ModeChanged {
    pub state: LockState,
    pub mode: HoldMode,
}

impl Locks {
    /// Changes the mode `token` holds `key` in. An upgrade that cannot be
    /// made at once waits up to `wait`, ahead of every later request; two
    /// holders upgrading at once would wait for each other, so the second
    /// is refused (`UpgradeDeadlock`), keeping its shared place.
    pub async fn change_mode(
        &self,
        key: &LockKey,
        token: &Token,
        mode: HoldMode,
        wait: WaitTime,
    ) -> Result<ModeChanged, LockError> {
        let keys = self.keys(key);
        let deadline = Instant::now() + wait.as_duration();
        // Round trips are boxed (see `Acquisition::run`): inline, their
        // state would be part of every waiting upgrade's.
        let free_in_ms =
            match Box::pin(self.mode_attempt(&keys, key, token, mode, None, deadline)).await? {
                ModeOutcome::Changed(changed) => return Ok(changed),
                ModeOutcome::Waiting { free_in_ms } => free_in_ms,
            };
        if wait.is_zero() || Instant::now() >= deadline {
            return Err(LockError::Held {
                key: key.clone(),
                retry_after_ms: free_in_ms,
            });
        }
        let id = uuid::Uuid::new_v4().to_string();
        let mut ticket = self.waiting().enter(&keys, &id, false)?;
        let _ = tokio::time::timeout_at(deadline.into(), ticket.subscribed()).await;
        let closing = ticket.closing();
        loop {
            match Box::pin(self.mode_attempt(&keys, key, token, mode, Some(&id), deadline)).await? {
                ModeOutcome::Changed(changed) => return Ok(changed),
                ModeOutcome::Waiting { free_in_ms } => {
                    self.waiting().due(&keys, Duration::from_millis(free_in_ms));
                }
            }
            // Waits for the upgrade (granted in the step that frees the last
            // other place), or for a sign that it was passed over.
            loop {
                let standing = tokio::select! {
                    standing = ticket.changed() => standing,
                    () = tokio::time::sleep_until(deadline.into()) => {
                        return Box::pin(self.stop_upgrading(&keys, key, token, &id)).await;
                    }
                    () = closing.cancelled() => {
                        let _ = Box::pin(self.leave_queue(key, &id, token, IfGranted::Keep)).await;
                        return Err(WaitRefused::ShuttingDown.into());
                    }
                };
                if !matches!(standing, Standing::Queued { .. } | Standing::Ready(_)) {
                    break;
                }
            }
        }
    }

    /// Its wait ran out: it leaves the queue, still holding its shared
    /// place, unless it was upgraded meanwhile.
    async fn stop_upgrading(
        &self,
        keys: &LockKeys,
        key: &LockKey,
        token: &Token,
        id: &str,
    ) -> Result<ModeChanged, LockError> {
        match self.leave_queue(key, id, token, IfGranted::Keep).await? {
            LeaveReply::Left { free_in_ms, .. } | LeaveReply::Gone { free_in_ms, .. } => {
                Err(LockError::Held {
                    key: key.clone(),
                    retry_after_ms: free_in_ms.max(1),
                })
            }
            // Upgraded just before it left: it is exclusive now.
            LeaveReply::Granted { .. } | LeaveReply::GivenBack => {
                let far = Instant::now() + Duration::from_secs(1);
                match self
                    .mode_attempt(keys, key, token, HoldMode::Exclusive, None, far)
                    .await?
                {
                    ModeOutcome::Changed(changed) => Ok(changed),
                    ModeOutcome::Waiting { free_in_ms } => Err(LockError::Held {
                        key: key.clone(),
                        retry_after_ms: free_in_ms,
                    }),
                }
            }
        }
    }

    /// Runs the mode script once, as waiter `id` (joining the head of the
    /// queue if it cannot upgrade now) or trying once (`None`).
    async fn mode_attempt(
        &self,
        keys: &LockKeys,
        key: &LockKey,
        token: &Token,
        mode: HoldMode,
        id: Option<&str>,
        deadline: Instant,
    ) -> Result<ModeOutcome, LockError> {
        let text = token.expose();
        let change = ModeChange {
            token: &text,
            mode: mode.as_str(),
            wait_left_ms: millis(deadline.saturating_duration_since(Instant::now())),
            waiter: id.map(|id| Waiter {
                id,
                instance: self.waiting().instance(),
                // A holder's change of mode is claimed, in two steps.
                outright: false,
            }),
        };
        let (reply, confirmed) = self
            .redis()
            .write(
                &keys.lock(),
                true,
                async |conn| scripts::change_mode(conn, keys, self.publish(), change).await,
                |reply| matches!(reply, ModeReply::Changed { .. }),
            )
            .await?;
        match reply {
            ModeReply::Changed { .. } if !confirmed => Err(LockError::NotReplicated {
                key: key.clone(),
                undone: false,
            }),
            ModeReply::Changed { state, .. } => {
                let state = self.with_session_expiry(state).await?;
                if let Some(handle) = &state.session {
                    // The session's record of the hold: its mode and
                    // fencing token now.
                    let hold = Hold {
                        token: &text,
                        key: key.as_str(),
                        mode: mode.as_str(),
                        fencing_token: state.fencing_token,
                    };
                    let handle = SessionHandle::from_stored(handle);
                    self.sessions().note_hold(&handle, hold).await;
                }
                Ok(ModeOutcome::Changed(ModeChanged { state, mode }))
            }
            ModeReply::Queued { free_in_ms } | ModeReply::Held { free_in_ms } => {
                Ok(ModeOutcome::Waiting { free_in_ms })
            }
            ModeReply::Deadlock => Err(LockError::UpgradeDeadlock { key: key.clone() }),
            ModeReply::ModeConflict => Err(LockError::NoOtherMode { key: key.clone() }),
            ModeReply::Lost(why) => Err(LockError::lost(key, why)),
        }
    }
}

/// Where one try left a change of mode.
enum ModeOutcome {
    Changed(ModeChanged),
    /// Not yet (others hold it shared): a place may free in `free_in_ms`.
    Waiting {
        free_in_ms: u64,
    },
}
