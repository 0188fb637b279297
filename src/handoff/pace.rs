//! The hand-off's pace: when a periodic task is due, and the back-off while the database or Redis is away.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use crate::redis::BackendError;

/// The longest back-off while the database or Redis is away.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Whether Redis says the stream or its group is not there (any more).
pub(super) fn no_group(err: &BackendError) -> bool {
    matches!(err, BackendError::Command(err) if err.code() == Some("NOGROUP"))
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// Whether `last` is more than `every` ago (or never), and if so, marks now.
pub(super) fn due(last: &mut Option<Instant>, every: Duration) -> bool {
    let now = Instant::now();
    if last.is_some_and(|at| now.duration_since(at) < every) {
        return false;
    }
    *last = Some(now);
    true
}

/// Exponential back-off from 100 ms to [`MAX_BACKOFF`].
pub(super) struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Self(Duration::from_millis(100))
    }
}

impl Backoff {
    /// Waits the next delay; `false` when stopped meanwhile.
    pub(super) async fn wait(&mut self, stop: &CancellationToken) -> bool {
        let delay = self.0;
        self.0 = (self.0 * 2).min(MAX_BACKOFF);
        tokio::select! {
            () = tokio::time::sleep(delay) => true,
            () = stop.cancelled() => false,
        }
    }
}
