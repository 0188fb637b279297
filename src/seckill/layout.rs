//! A sale's layout over its segments (Redis slots, on distinct Cluster masters where there are enough): where they are placed, which segment a buyer buys in, the share of the stock each starts with, and the layouts this instance knows, dropped when a reset is heard.
//!
//! Segment 0 is the sale's own hash (`sale:{<sku>}`), which also names the
//! others' tags; segment `i > 0` is hash-tagged `{<sku>#<tag>}`. A buyer's
//! purchases, cap, idempotency records and orders all live in the segment
//! [`Layout::buyer_segment`] picks from the user id, so one script still
//! decides each purchase.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::redis::pubsub::Listener;
use crate::redis::seckill::SaleKeys;
use crate::redis::segments::{self as redis_segments, LayoutFields};
use crate::redis::{BackendError, Connection, Redis};
use crate::sync::lock;

/// How many candidate tags placement tries for one segment before it
/// takes whichever master the plain tag lands on.
const PLACEMENT_TRIES: u32 = 4096;

/// The segments of one epoch of a sale.
#[derive(Debug)]
pub struct Layout {
    pub epoch: u64,
    pub initial_stock: u64,
    /// Each segment's keys; the first is the sale's own.
    pub segments: Vec<SaleKeys>,
}

impl Layout {
    pub(super) fn new(prefix: &str, sku: &str, fields: LayoutFields) -> Self {
        let mut segments = vec![SaleKeys::new(prefix, sku)];
        segments.extend(
            fields
                .tags
                .iter()
                .map(|tag| SaleKeys::segment(prefix, sku, tag)),
        );
        Self {
            epoch: fields.epoch,
            initial_stock: fields.initial_stock,
            segments,
        }
    }

    pub fn count(&self) -> usize {
        self.segments.len()
    }

    /// The segment of `user`: a stable hash of the id (FNV-1a), the same on
    /// every instance and across restarts.
    pub fn buyer_segment(&self, user: &str) -> usize {
        buyer_segment(user, self.count())
    }
}

fn buyer_segment(user: &str, count: usize) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in user.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % count as u64) as usize
}

/// `stock` split over `count` segments as evenly as it goes.
pub fn shares(stock: u64, count: u64) -> Vec<u64> {
    (0..count)
        .map(|i| stock / count + u64::from(i < stock % count))
        .collect()
}

/// The tags of segments 1 to `count - 1` of `sku`, chosen so that the
/// segments land on distinct masters of a Cluster where there are enough
/// (and spread evenly where there are not): for each segment in turn, the
/// master with the fewest segments so far, and the first candidate tag
/// (`<i>`, `<i>.1`, `<i>.2`, ...) whose slot that master serves. With one
/// Redis, the plain tags. After a slot migration the tags stay (segments
/// may then share a master) until the next reset places them again.
pub async fn place(
    redis: &Redis,
    conn: &mut Connection,
    prefix: &str,
    sku: &str,
    count: u64,
) -> Result<Vec<String>, BackendError> {
    let plain: Vec<String> = (1..count).map(|i| i.to_string()).collect();
    if !redis.is_cluster() || count < 2 {
        return Ok(plain);
    }
    let owners = redis_segments::slot_owners(conn).await?;
    let masters = owners.masters();
    let mut load: HashMap<&str, u64> = masters.iter().map(|master| (*master, 0)).collect();
    let slot_of = |keys: SaleKeys| redis_segments::keyslot(&keys.sale);
    if let Some(first) = owners.owner(slot_of(SaleKeys::new(prefix, sku))) {
        *load.entry(first).or_default() += 1;
    }
    let mut tags = Vec::with_capacity(plain.len());
    for (i, plain_tag) in (1..count).zip(plain) {
        let target = masters
            .iter()
            .min_by_key(|master| load.get(*master).copied().unwrap_or(0))
            .copied();
        let candidates = std::iter::once(plain_tag.clone())
            .chain((1..PLACEMENT_TRIES).map(|j| format!("{i}.{j}")));
        let mut chosen = None;
        for tag in candidates {
            let owner = owners.owner(slot_of(SaleKeys::segment(prefix, sku, &tag)));
            if owner.is_some() && owner == target {
                chosen = Some(tag);
                break;
            }
        }
        let tag = chosen.unwrap_or(plain_tag);
        if let Some(owner) = owners.owner(slot_of(SaleKeys::segment(prefix, sku, &tag))) {
            *load.entry(owner).or_default() += 1;
        }
        tags.push(tag);
    }
    Ok(tags)
}

/// The layouts this instance knows, by sku; a reset heard on any instance
/// drops the sale's (its segments may have changed), and a purchase that
/// finds its segment in another epoch reads the layout again, so a missed
/// message costs one read, never a purchase in the wrong segment.
pub struct Layouts {
    channel: String,
    known: Mutex<HashMap<String, Arc<Layout>>>,
}

impl Layouts {
    pub fn new(channel: String) -> Self {
        Self {
            channel,
            known: Mutex::new(HashMap::new()),
        }
    }

    pub(super) fn get(&self, sku: &str) -> Option<Arc<Layout>> {
        lock(&self.known).get(sku).cloned()
    }

    pub(super) fn put(&self, sku: &str, layout: Arc<Layout>) {
        lock(&self.known).insert(sku.to_owned(), layout);
    }

    pub fn forget(&self, sku: &str) {
        lock(&self.known).remove(sku);
    }

    /// The segmented sales known here, for the sweep.
    pub(super) fn segmented(&self) -> Vec<(String, Arc<Layout>)> {
        lock(&self.known)
            .iter()
            .filter(|(_, layout)| layout.count() > 1)
            .map(|(sku, layout)| (sku.clone(), layout.clone()))
            .collect()
    }
}

impl Listener for Layouts {
    fn message(&self, channel: &str, payload: &[u8]) {
        if channel != self.channel {
            return;
        }
        let text = String::from_utf8_lossy(payload);
        if let Some((sku, _epoch)) = text.split_once(' ') {
            self.forget(sku);
        }
    }

    fn reconnected(&self) {
        lock(&self.known).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_split_the_stock_exactly() {
        assert_eq!(shares(10, 3), vec![4, 3, 3]);
        assert_eq!(shares(2, 4), vec![1, 1, 0, 0]);
        assert_eq!(shares(0, 2), vec![0, 0]);
        assert_eq!(shares(7, 1), vec![7]);
    }

    #[test]
    fn a_buyer_always_lands_in_the_same_segment_and_buyers_spread() {
        assert_eq!(buyer_segment("u-17", 3), buyer_segment("u-17", 3));
        let mut per_segment = [0u32; 3];
        for user in 0..3000 {
            per_segment[buyer_segment(&format!("u-{user}"), 3)] += 1;
        }
        assert!(
            per_segment.iter().all(|count| (900..=1100).contains(count)),
            "{per_segment:?}"
        );
        assert_eq!(buyer_segment("anyone", 1), 0);
    }
}
