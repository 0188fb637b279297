//! Per-instance sold-out flags, tied to each sale's epoch, raised on every instance by a sold-out message and cleared by a reset message, and kept only briefly.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::redis::pubsub::Listener;
use crate::sync::lock;

/// How long a sold-out flag answers from memory before a purchase asks
/// Redis again. Nothing tells an instance that a sale's keys were lost (a
/// `FLUSHALL`, an operator's `DEL`), so a flag must not outlive that by
/// much; asking once every few seconds per instance costs nothing.
const REMEMBERED_FOR: Duration = Duration::from_secs(3);

/// What this instance knows of each sale: the newest epoch it has seen, and
/// whether that epoch sold out (and since when). A flag from an older epoch
/// never survives a newer reset, even if the two arrive out of order; epochs
/// never go back (`reset_sale.lua`).
pub struct SoldOutFlags {
    channel: String,
    /// Where the instance that sold a sale's last unit says so
    /// (`<sku> <epoch>`), so that every instance answers `sold-out` from
    /// memory at once.
    sold_out_channel: String,
    sales: Mutex<HashMap<String, Known>>,
}

#[derive(Clone, Copy, Default)]
struct Known {
    epoch: u64,
    /// When this instance learned that the epoch sold out.
    sold_out: Option<Instant>,
}

impl SoldOutFlags {
    /// Flags fed by resets published on `channel` and sales sold out
    /// published on `sold_out_channel` (both `<sku> <epoch>`).
    pub fn new(channel: String, sold_out_channel: String) -> Self {
        Self {
            channel,
            sold_out_channel,
            sales: Mutex::new(HashMap::new()),
        }
    }

    pub fn channel(&self) -> &str {
        &self.channel
    }

    pub fn sold_out_channel(&self) -> &str {
        &self.sold_out_channel
    }

    /// Whether the sale sold out, as learned in the last few seconds.
    pub fn is_sold_out(&self, sku: &str) -> bool {
        self.lock().get(sku).is_some_and(|known| {
            known
                .sold_out
                .is_some_and(|since| since.elapsed() < REMEMBERED_FOR)
        })
    }

    /// The sale's stock ran out in `epoch`.
    pub fn mark_sold_out(&self, sku: &str, epoch: u64) {
        let mut sales = self.lock();
        let known = sales.entry(sku.to_owned()).or_default();
        if epoch >= known.epoch {
            *known = Known {
                epoch,
                sold_out: Some(Instant::now()),
            };
        }
    }

    /// The sale was reset to `epoch`: whatever sold out before no longer has.
    pub fn reset(&self, sku: &str, epoch: u64) {
        let mut sales = self.lock();
        let known = sales.entry(sku.to_owned()).or_default();
        if epoch >= known.epoch {
            *known = Known {
                epoch,
                sold_out: None,
            };
        }
    }

    /// A reset may have been missed (the subscription was down): forget
    /// every flag, so the next purchase of each sale asks Redis again.
    fn forget(&self) {
        for known in self.lock().values_mut() {
            known.sold_out = None;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Known>> {
        lock(&self.sales)
    }
}

impl Listener for SoldOutFlags {
    fn message(&self, channel: &str, payload: &[u8]) {
        let reset = channel == self.channel;
        if !reset && channel != self.sold_out_channel {
            return;
        }
        let text = String::from_utf8_lossy(payload);
        if let Some((sku, epoch)) = text.split_once(' ')
            && let Ok(epoch) = epoch.parse()
        {
            if reset {
                self.reset(sku, epoch);
            } else {
                self.mark_sold_out(sku, epoch);
            }
        }
    }

    fn reconnected(&self) {
        self.forget();
    }

    fn resubscribed(&self, channel: &str) {
        // In a cluster, the resets' subscription renewed alone: a reset may
        // have been missed all the same.
        if channel == self.channel {
            self.forget();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_clears_the_flag_of_its_epoch_and_older() {
        let flags = SoldOutFlags::new("resets".into(), "sold-out".into());
        flags.mark_sold_out("tv", 1);
        assert!(flags.is_sold_out("tv"));
        flags.message("resets", b"tv 2");
        assert!(!flags.is_sold_out("tv"));
    }

    #[test]
    fn a_sold_out_answer_from_before_a_reset_does_not_flag_the_new_sale() {
        let flags = SoldOutFlags::new("resets".into(), "sold-out".into());
        flags.reset("tv", 3);
        flags.mark_sold_out("tv", 2);
        assert!(!flags.is_sold_out("tv"));
        flags.mark_sold_out("tv", 3);
        assert!(flags.is_sold_out("tv"));
    }

    #[test]
    fn a_sold_out_message_raises_the_flag_of_its_epoch_only() {
        let flags = SoldOutFlags::new("resets".into(), "sold-out".into());
        flags.reset("tv", 5);
        flags.message("sold-out", b"tv 4");
        assert!(!flags.is_sold_out("tv"));
        flags.message("sold-out", b"tv 5");
        assert!(flags.is_sold_out("tv"));
    }

    #[test]
    fn a_reconnect_forgets_every_flag_and_other_channels_are_ignored() {
        let flags = SoldOutFlags::new("resets".into(), "sold-out".into());
        flags.mark_sold_out("tv", 1);
        flags.message("lockgate:released:{tv}", b"tv 9");
        assert!(flags.is_sold_out("tv"));
        flags.reconnected();
        assert!(!flags.is_sold_out("tv"));
    }

    #[test]
    fn a_renewed_resets_subscription_forgets_every_flag_too() {
        let flags = SoldOutFlags::new("resets".into(), "sold-out".into());
        flags.mark_sold_out("tv", 1);
        flags.resubscribed("lockgate:released:{tv}");
        assert!(flags.is_sold_out("tv"));
        flags.resubscribed("resets");
        assert!(!flags.is_sold_out("tv"));
    }
}
