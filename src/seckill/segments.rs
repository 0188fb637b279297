//! A sale spread over segments, as `Sales` runs it (the layout: `layout`): resetting every segment, the sale's totals, the stock moved to a segment that ran dry, and the sale-wide sold-out.
//!
//! Stock moves between segments in three idempotent scripts (see
//! [`crate::redis::segments`]); a transfer a gateway left half done is
//! finished by the next refill that sees it, or by the sweep every
//! instance runs over the segmented sales it serves.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use super::inputs::{SaleTerms, Sku};
use super::shared::Sales;
use crate::redis::handoff;
use crate::redis::seckill::SaleState;
use crate::redis::seckill::{self as scripts, HandoffTerms, ResetReply, SaleKeys, SegmentReset};
use crate::redis::segments::{self as redis_segments, SegmentCounts, Transfer};
use crate::redis::{BackendError, Connection};

use super::layout::{Layout, place, shares};

/// How often each instance finishes the transfers a dead gateway left.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// What a refill did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Refilled {
    /// Units moved into the segment by this refill.
    pub moved: u64,
    /// Transfers left half done (by a gateway that died) that it finished.
    pub finished: u64,
}

impl Sales {
    /// Resets every segment of the sale (and retires those the new sale
    /// no longer has, keeping their unstored orders for the hand-off): the
    /// other segments first, all to one epoch, and the sale's own hash
    /// last, which tells every instance. A purchase placed by the new
    /// layout meanwhile finds its segment still in the old epoch and waits
    /// for it (`stale-layout`).
    pub(super) async fn reset_segments(
        &self,
        sku: &Sku,
        terms: SaleTerms,
    ) -> Result<ResetReply, BackendError> {
        let head = self.keys(sku);
        let mut conn = self.redis.connection().await?;
        // Listed before it exists, so the order hand-off finds every sale.
        handoff::register(&mut conn, &self.prefix, sku.as_str()).await?;
        let in_use = handoff::is_in_use(&mut conn, &self.prefix).await?;
        let old_tags = redis_segments::layout(&mut conn, &head)
            .await?
            .map(|fields| fields.tags)
            .unwrap_or_default();
        let count = terms.segments();
        let tags = place(&self.redis, &mut conn, &self.prefix, sku.as_str(), count).await?;
        let shares = shares(terms.stock(), count);
        let segmented = count > 1 || !old_tags.is_empty();
        let epoch = match segmented {
            true => Some(next_epoch(&mut conn, &head).await?),
            false => None,
        };
        let base = SegmentReset {
            stock: 0,
            initial_stock: terms.stock(),
            per_user_limit: terms.per_user_limit(),
            announce: None,
            handoff: HandoffTerms {
                group: handoff::GROUP,
                in_use,
            },
            epoch,
            layout: None,
        };
        redis_segments::remember_tags(&mut conn, &head, &tags).await?;
        for (tag, share) in tags.iter().zip(&shares[1..]) {
            let keys = SaleKeys::segment(&self.prefix, sku.as_str(), tag);
            let terms = SegmentReset {
                stock: *share,
                ..base.clone()
            };
            scripts::reset(&mut conn, &keys, &terms).await?;
        }
        for tag in old_tags.iter().filter(|tag| !tags.contains(tag)) {
            let keys = SaleKeys::segment(&self.prefix, sku.as_str(), tag);
            scripts::reset(&mut conn, &keys, &base).await?;
        }
        let terms = SegmentReset {
            stock: shares[0],
            announce: Some((self.flags.channel(), sku.as_str())),
            layout: (count > 1).then(|| format!("{count} {}", tags.join(","))),
            ..base
        };
        scripts::reset(&mut conn, &head, &terms).await
    }

    /// The sale's layout: known here, or read from its first hash. `None`
    /// when there is no such sale.
    pub(super) async fn layout(&self, sku: &Sku) -> Result<Option<Arc<Layout>>, BackendError> {
        if let Some(layout) = self.layouts.get(sku.as_str()) {
            return Ok(Some(layout));
        }
        let mut conn = self.redis.connection().await?;
        let Some(fields) = redis_segments::layout(&mut conn, &self.keys(sku)).await? else {
            return Ok(None);
        };
        let layout = Arc::new(Layout::new(&self.prefix, sku.as_str(), fields));
        self.layouts.put(sku.as_str(), layout.clone());
        Ok(Some(layout))
    }

    /// Every segment's counts, read side by side (`None` for one that is
    /// missing).
    async fn segment_counts(
        &self,
        layout: &Layout,
    ) -> Result<Vec<Option<SegmentCounts>>, BackendError> {
        join_all(layout.segments.iter().map(|keys| async move {
            let mut conn = self.redis.connection().await?;
            redis_segments::counts(&mut conn, keys).await
        }))
        .await
        .into_iter()
        .collect()
    }

    /// The units sold in every segment of the layout's epoch. Each
    /// segment's `sold` only grows, so the sum read is at most the sale's
    /// sold at the end of the read and never more: a sum equal to the
    /// initial stock proves the sale sold out, and `initial - sum` bounds
    /// what is left from above.
    pub(super) async fn sold_everywhere(&self, layout: &Layout) -> Result<u64, BackendError> {
        let counts = self.segment_counts(layout).await?;
        Ok(counts
            .iter()
            .flatten()
            .filter(|counts| counts.epoch == layout.epoch)
            .map(|counts| counts.sold)
            .sum())
    }

    /// A segmented sale's totals over its segments, from its first hash's
    /// state: sold, orders and stored summed; `stock` is what is left for
    /// sale (`initial - sold`), counting units moving between segments.
    pub(super) async fn totals(
        &self,
        sku: &Sku,
        head: SaleState,
    ) -> Result<SaleState, BackendError> {
        let Some(layout) = self.layout(sku).await? else {
            return Ok(head);
        };
        if layout.count() < 2 {
            return Ok(head);
        }
        let counts = self.segment_counts(&layout).await?;
        let counts: Vec<SegmentCounts> = counts.into_iter().flatten().collect();
        let sold: u64 = counts.iter().map(|counts| counts.sold).sum();
        Ok(SaleState {
            stock: head.initial_stock.saturating_sub(sold),
            sold,
            orders: counts.iter().map(|counts| counts.orders).sum(),
            stored: head
                .stored
                .map(|_| counts.iter().filter_map(|counts| counts.stored).sum()),
            ..head
        })
    }

    /// Moves stock into segment `receiver`, which lacks `need` units: first
    /// finishes every transfer left half done (its units are then where
    /// they were going), then takes from the segments with the most stock,
    /// half of each one's (at least what is needed, at most what it has),
    /// so that a run of buyers in one segment moves stock in a few large
    /// steps instead of one per purchase.
    pub(super) async fn refill(
        &self,
        sku: &Sku,
        layout: &Layout,
        receiver: usize,
        need: u64,
    ) -> Result<Refilled, BackendError> {
        let counts = self.segment_counts(layout).await?;
        let mut finished = 0;
        for (donor, counts) in counts.iter().enumerate() {
            if counts.is_some_and(|counts| counts.moving > 0) {
                finished += self.finish_transfers(sku, layout, donor).await?;
            }
        }
        let mut donors: Vec<(usize, u64)> = counts
            .iter()
            .enumerate()
            .filter(|(index, _)| *index != receiver)
            .filter_map(|(index, counts)| Some((index, counts.as_ref()?.stock)))
            .filter(|(_, stock)| *stock > 0)
            .collect();
        donors.sort_by_key(|(_, stock)| std::cmp::Reverse(*stock));
        let mut moved = 0;
        for (donor, stock) in donors {
            if moved >= need {
                break;
            }
            let want = (need - moved).max(stock.div_ceil(2)).min(stock);
            moved += self.transfer(sku, layout, donor, receiver, want).await?;
        }
        Ok(Refilled { moved, finished })
    }

    /// One transfer of up to `units` from `donor` to `receiver`, all three
    /// steps; returns the units that arrived.
    async fn transfer(
        &self,
        sku: &Sku,
        layout: &Layout,
        donor: usize,
        receiver: usize,
        units: u64,
    ) -> Result<u64, BackendError> {
        let transfer = Transfer {
            id: uuid::Uuid::new_v4().to_string(),
            units,
            receiver,
        };
        let mut conn = self.redis.connection().await?;
        let Some(sent) =
            redis_segments::give(&mut conn, &layout.segments[donor], &transfer, layout.epoch)
                .await?
        else {
            return Ok(0);
        };
        if sent == 0 {
            return Ok(0);
        }
        let sent = Transfer {
            units: sent,
            ..transfer
        };
        let arrived = self.complete(&mut conn, layout, donor, &sent).await?;
        self.metrics.segment_transfer(sku.as_str(), arrived);
        Ok(arrived)
    }

    /// The receiver's and the settling halves of a sent transfer; either
    /// may have run before (a gateway that died), neither runs twice.
    async fn complete(
        &self,
        conn: &mut Connection,
        layout: &Layout,
        donor: usize,
        transfer: &Transfer,
    ) -> Result<u64, BackendError> {
        let Some(receiver) = layout.segments.get(transfer.receiver) else {
            return Ok(0);
        };
        let taken = redis_segments::take(conn, receiver, transfer, layout.epoch).await?;
        redis_segments::settle(conn, &layout.segments[donor], &transfer.id).await?;
        Ok(if taken { transfer.units } else { 0 })
    }

    /// Finishes every transfer `donor` sent and has not settled; returns
    /// how many there were.
    async fn finish_transfers(
        &self,
        sku: &Sku,
        layout: &Layout,
        donor: usize,
    ) -> Result<u64, BackendError> {
        let mut conn = self.redis.connection().await?;
        let unsettled = redis_segments::unsettled(&mut conn, &layout.segments[donor]).await?;
        for transfer in &unsettled {
            let arrived = self.complete(&mut conn, layout, donor, transfer).await?;
            self.metrics.segment_transfer(sku.as_str(), arrived);
        }
        if !unsettled.is_empty() {
            tracing::info!(%sku, donor, count = unsettled.len(), "finished transfers of stock left half done");
        }
        Ok(unsettled.len() as u64)
    }

    /// Finishes, every [`SWEEP_EVERY`], the transfers left half done in the
    /// segmented sales this instance serves, so that units a dead gateway
    /// left moving are for sale again even when no segment runs dry.
    pub(super) fn start_sweeping(&self) {
        let sales = self.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(SWEEP_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                for (sku, layout) in sales.layouts.segmented() {
                    let Ok(sku) = Sku::parse(&sku) else { continue };
                    if let Err(err) = sales.sweep(&sku, &layout).await {
                        tracing::debug!(%sku, error = %err, "cannot sweep the sale's transfers now");
                    }
                }
                if Arc::strong_count(&sales.refusals) == 1 {
                    // Every other handle on the sales is gone: the
                    // instance stopped.
                    return;
                }
            }
        });
    }

    async fn sweep(&self, sku: &Sku, layout: &Layout) -> Result<(), BackendError> {
        let counts = self.segment_counts(layout).await?;
        for (donor, counts) in counts.iter().enumerate() {
            if counts.is_some_and(|counts| counts.moving > 0 && counts.epoch == layout.epoch) {
                self.finish_transfers(sku, layout, donor).await?;
            }
        }
        Ok(())
    }

    /// After a segment sold its last unit: tells every instance if the
    /// whole sale sold out.
    pub(super) async fn check_sold_out(&self, sku: &Sku, layout: &Layout) {
        match self.sold_everywhere(layout).await {
            Ok(sold) if sold >= layout.initial_stock => {
                self.announce_sold_out(sku, layout.epoch).await;
            }
            Ok(_) => {}
            Err(err) => {
                tracing::debug!(%sku, error = %err, "cannot check whether the sale sold out")
            }
        }
    }
}

/// The epoch a segmented sale's reset gives every segment: after the old
/// one, and the Redis clock's ms (as `reset_sale.lua` chooses it alone).
async fn next_epoch(conn: &mut Connection, head: &SaleKeys) -> Result<u64, BackendError> {
    let old: Option<u64> = conn
        .query_at_key(redis::cmd("HGET").arg(&head.sale).arg("epoch"), &head.sale)
        .await?;
    let (secs, micros): (u64, u64) = conn.query_at_key(&redis::cmd("TIME"), &head.sale).await?;
    Ok((old.unwrap_or(0) + 1).max(secs * 1000 + micros / 1000))
}
