//! Durations as the API and Redis count them: whole milliseconds.

use std::time::Duration;

/// Whole milliseconds, saturating: a `Duration` holds more than a `u64` of them.
pub fn millis(length: Duration) -> u64 {
    u64::try_from(length.as_millis()).unwrap_or(u64::MAX)
}
