//! This build's version and the data formats it reads and writes, and how often an instance beats and when its record goes stale: what every part of the fleet, and `lockgate --version`, names.

use std::time::Duration;

/// This build's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The data formats this build reads.
pub const READS: &[u32] = &[1, 2];

/// The lowest and the highest data format this build writes. Format 1 is
/// the layout 0.1.0 wrote; format 2 adds the one-write hand-off (a waiter's
/// entry may say its instance takes a grant from the queue outright), which
/// the fleet moves to once every live instance writes it.
pub const WRITES: [u32; 2] = [1, 2];

/// How often an instance renews its record.
pub const BEAT: Duration = Duration::from_secs(2);

/// How long a record stands without a beat: five beats, so a few missed
/// ones (a slow Redis, a busy instance) do not drop a live instance.
pub const STALE: Duration = Duration::from_secs(10);
