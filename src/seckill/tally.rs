//! The purchases each instance refused, by sale and by why, added to the sale's hash a few times a second so that every instance's refusals show in `GET /seckill`.
//!
//! A refusal is counted in memory (a purchase refused from the sold-out
//! flag never reaches Redis) and sent with the next flush: counting it in
//! Redis as it happens would add a write to every refused request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::redis::Redis;
use crate::redis::seckill::{self as scripts, Refused, SaleKeys};
use crate::sync::lock;

/// How often the counts go to Redis.
const FLUSH_EVERY: Duration = Duration::from_millis(250);

/// Why a purchase was refused, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    SoldOut,
    LimitExceeded,
    RateLimited,
}

/// The counts not yet sent, by sku.
#[derive(Default)]
pub struct RefusalTally(Mutex<HashMap<String, Refused>>);

impl RefusalTally {
    pub fn count(&self, sku: &str, kind: RefusalKind) {
        let mut counts = lock(&self.0);
        let refused = match counts.get_mut(sku) {
            Some(refused) => refused,
            None => counts.entry(sku.to_owned()).or_default(),
        };
        match kind {
            RefusalKind::SoldOut => refused.sold_out += 1,
            RefusalKind::LimitExceeded => refused.limit_exceeded += 1,
            RefusalKind::RateLimited => refused.rate_limited += 1,
        }
    }

    /// Sends the counts every [`FLUSH_EVERY`] for as long as the instance
    /// runs; counts Redis did not take are kept for the next flush.
    pub fn start_flushing(self: &Arc<Self>, redis: Redis, prefix: Arc<str>) {
        let tally = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(FLUSH_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(tally) = tally.upgrade() else { return };
                let counts = std::mem::take(&mut *lock(&tally.0));
                for (sku, refused) in counts {
                    let keys = SaleKeys::new(&prefix, &sku);
                    let sent = async {
                        let mut conn = redis.connection().await?;
                        scripts::add_refusals(&mut conn, &keys, refused).await
                    }
                    .await;
                    if let Err(err) = sent {
                        tracing::debug!(%sku, error = %err, "refusal counts kept for the next flush");
                        tally.add_back(sku, refused);
                    }
                }
            }
        });
    }

    fn add_back(&self, sku: String, unsent: Refused) {
        let mut counts = lock(&self.0);
        let refused = counts.entry(sku).or_default();
        refused.sold_out += unsent.sold_out;
        refused.limit_exceeded += unsent.limit_exceeded;
        refused.rate_limited += unsent.rate_limited;
    }
}
