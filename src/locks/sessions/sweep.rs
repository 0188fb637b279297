//! The sweep: every instance ends the sessions whose lease ran out (at their expiry, by the deadline index, and every quarter second), and tells the requests waiting here with a session that has ended.
//!
//! Any instance may end any session, so a session's locks are freed
//! whichever instance kept it alive, and even when that one is gone. Two
//! instances ending one session at once do the same work twice: each lock
//! ends once (the second finds its token holds nothing).

use std::time::Duration;

use super::{SessionHandle, Sessions};
use crate::redis::BackendError;
use crate::redis::sessions::{self as scripts, EndReply, Ending, Liveness};
use crate::sync::lock;

/// The longest pause between two sweeps.
pub const ROUND: Duration = Duration::from_millis(250);
/// The most sessions one sweep ends.
const BATCH: usize = 100;

impl Sessions {
    /// Starts sweeping, until the instance shuts down.
    pub fn start_sweeping(&self) {
        tokio::spawn(sweep_until_closed(self.clone()));
    }

    /// Ends the sessions due; returns how long until the next is.
    async fn sweep(&self) -> Result<Duration, BackendError> {
        let mut conn = self.0.redis.connection().await?;
        let now = scripts::redis_now_ms(&mut conn).await?;
        let (due, next) = scripts::due(&mut conn, &self.0.prefix, now, BATCH).await?;
        drop(conn);
        for handle in &due {
            self.end_if_expired(&SessionHandle::from_stored(handle))
                .await?;
        }
        self.tell_waiters().await?;
        if due.len() == BATCH {
            return Ok(Duration::ZERO);
        }
        // A millisecond past the expiry: the session has then expired.
        Ok(next.map_or(ROUND, |next| {
            Duration::from_millis(next.saturating_sub(now) + 1)
        }))
    }

    /// Ends a session the index says is due, if it has expired.
    async fn end_if_expired(&self, handle: &SessionHandle) -> Result<(), BackendError> {
        let keys = self.keys(handle);
        let mut conn = self.0.redis.connection().await?;
        match scripts::end(&mut conn, &keys, Ending::Expired, false).await? {
            EndReply::Ending {
                why,
                delayed_until_ms,
                locks,
                ended_now,
            } => {
                drop(conn);
                self.finish(handle, (why, ended_now), delayed_until_ms, &locks)
                    .await
            }
            // Kept alive since: its place in the index was stale.
            EndReply::Alive { expires_at_ms } => {
                scripts::indexed(&mut conn, &keys, handle.as_str(), expires_at_ms).await
            }
            EndReply::NotFound => {
                scripts::drop_ended(&mut conn, &keys, handle.as_str(), None).await
            }
        }
    }

    /// Tells the requests waiting here with a session that has ended.
    async fn tell_waiters(&self) -> Result<(), BackendError> {
        let handles: Vec<SessionHandle> = lock(&self.0.watched).keys().cloned().collect();
        if handles.is_empty() {
            return Ok(());
        }
        let (states, _) = self.states(&handles).await?;
        let watched = lock(&self.0.watched);
        for (handle, state) in handles.iter().zip(states) {
            let Liveness::Ended(why) = state else {
                continue;
            };
            if let Some(watched) = watched.get(handle) {
                // Ended elsewhere (or here, a moment ago): why, as Redis
                // keeps it.
                let mut known = lock(&watched.why);
                if known.is_none() {
                    *known = why;
                }
                drop(known);
                watched.ended.cancel();
            }
        }
        Ok(())
    }
}

async fn sweep_until_closed(sessions: Sessions) {
    loop {
        let pause = match sessions.sweep().await {
            Ok(next) => next.min(ROUND),
            Err(err) => {
                tracing::debug!(error = %err, "could not sweep the sessions; trying again");
                ROUND
            }
        };
        tokio::select! {
            () = sessions.0.closing.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
    }
}
