//! The purchase path: the sold-out flag, the rate check beside the buyer's lock, the purchase script in the buyer's segment (stock moved there first when it ran dry), and what its reply means for the order.

use std::net::IpAddr;
use std::ops::ControlFlow;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{Either, select};

use super::error::{Refusal, SaleError};
use super::inputs::{OrderRequest, Sku};
use super::layout::Layout;
use super::purchase::{Order, Purchase, PurchaseAnswer, outcome};
use super::shared::Sales;
use super::tally::RefusalKind;
use crate::locks::{IdempotencyKey, LockError, WaitTime};
use crate::redis::BackendError;
use crate::redis::locks::PlainRelease;
use crate::redis::seckill::{self as scripts, BuyerLock, PurchaseMode, PurchaseReply, SaleKeys};

/// How many times a purchase in a segmented sale tries its segment again
/// after moving stock there (or reading the sale's segments again) before
/// it asks the buyer to retry.
const PURCHASE_ROUNDS: u32 = 16;

impl Sales {
    /// Buys, or replays an earlier purchase with the same Idempotency-Key:
    /// answered from the sold-out flag when it is up, else by the purchase
    /// script, under the user's lock; the outcome is counted.
    pub async fn buy(&self, order: OrderRequest, client: Option<IpAddr>) -> PurchaseAnswer {
        let answer = if self.flags.is_sold_out(order.sku.as_str()) {
            PurchaseAnswer {
                result: self.answer_sold_out(&order).await,
                rate: None,
            }
        } else if self.settings.user_lock {
            self.under_user_lock(&order, client).await
        } else {
            self.without_user_lock(&order, client).await
        };
        self.metrics.sale(outcome(&answer.result));
        let refused = match &answer.result {
            Err(SaleError::Refused(Refusal::SoldOut { .. })) => Some(RefusalKind::SoldOut),
            Err(SaleError::Refused(Refusal::LimitExceeded { .. })) => {
                Some(RefusalKind::LimitExceeded)
            }
            Err(SaleError::Refused(Refusal::RateLimited(_))) => Some(RefusalKind::RateLimited),
            _ => None,
        };
        if let Some(kind) = refused {
            self.refusals.count(order.sku.as_str(), kind);
        }
        answer
    }

    /// A purchase with its rate check and no lock: what a benchmark sets
    /// beside the locked path to measure the lock's cost.
    async fn without_user_lock(
        &self,
        order: &OrderRequest,
        client: Option<IpAddr>,
    ) -> PurchaseAnswer {
        let rate = match PurchaseAnswer::admitted(self.rates.admit(&order.user, client).await) {
            ControlFlow::Continue(rate) => rate,
            ControlFlow::Break(refused) => return refused,
        };
        let (result, _) = self
            .run_purchase_script(order, PurchaseMode::Buy, None)
            .await;
        PurchaseAnswer { result, rate }
    }

    /// A purchase under its user's lock, in two Redis round trips where it
    /// took four: the rate check and the lock's first attempt are sent
    /// together (one write on a shared connection), the purchase script
    /// runs once both allow it, and the lock is released after the answer
    /// is ready instead of before. A request the rate limit refuses never
    /// waits for the lock: its attempt is dropped, and a grant it got is
    /// released (the guard's guarantee). Nothing reads the sale between
    /// the purchase and the release, so answering first changes no outcome;
    /// the user's next request waits for that release like any waiter. On
    /// one Redis the purchase script releases the lock itself when nobody
    /// waits for or watches it (`lua/lib/plain.lua`, the lock's own
    /// plain release), in the same atomic step as the purchase: a third
    /// call saved, and nothing can come between the two either way.
    async fn under_user_lock(
        &self,
        order: &OrderRequest,
        client: Option<IpAddr>,
    ) -> PurchaseAnswer {
        let admit = pin!(self.rates.admit(&order.user, client));
        let acquire =
            pin!(self.sale_lock(order.lock_key(), WaitTime::fixed(self.settings.lock_wait)));
        let (rate, lease) = match select(admit, acquire).await {
            Either::Left((admitted, acquire)) => match PurchaseAnswer::admitted(admitted) {
                // Dropping the attempt releases a grant it got (its guard).
                ControlFlow::Break(refused) => return refused,
                ControlFlow::Continue(rate) => (rate, acquire.await),
            },
            Either::Right((lease, admit)) => match PurchaseAnswer::admitted(admit.await) {
                ControlFlow::Break(refused) => {
                    self.give_back_later(lease.ok());
                    return refused;
                }
                ControlFlow::Continue(rate) => (rate, lease),
            },
        };
        let lease = match lease {
            Ok(lease) => lease,
            Err(err) => return PurchaseAnswer::refused(err.into(), rate),
        };
        let release = self.locks.plain_release_of(&lease);
        let (result, released) = self
            .run_purchase_script(order, PurchaseMode::Buy, release.as_ref())
            .await;
        if released {
            self.locks.released_within(lease);
        } else {
            self.give_back_later(Some(lease));
        }
        PurchaseAnswer { result, rate }
    }

    /// Runs `purchase.lua` in the buyer's segment and maps its reply to
    /// the purchase or the refusal. A segment without the stock asked for
    /// first has stock moved over from the others; the buyer is refused
    /// `sold-out` only when the whole sale lacks it. With the buyer's lock
    /// (`lock`), the script releases it with its final answer where it can;
    /// the flag says whether it did.
    async fn run_purchase_script(
        &self,
        order: &OrderRequest,
        mode: PurchaseMode,
        lock: Option<&PlainRelease>,
    ) -> (Result<Purchase, SaleError>, bool) {
        let mut released = false;
        let result = async {
            let order_id = uuid::Uuid::new_v4().to_string();
            let sku = &order.sku;
            let quantity = order.quantity.get();
            for round in 0..PURCHASE_ROUNDS {
                let Some(layout) = self.layout(sku).await? else {
                    return Err(Refusal::NotFound { sku: sku.clone() }.into());
                };
                let segment = layout.buyer_segment(order.user.as_str());
                let keys = &layout.segments[segment];
                // Released only with an answer this loop returns: sold-out is
                // one where no other segment can move stock over.
                let lock = lock.filter(|_| !released).map(|release| BuyerLock {
                    release,
                    sold_out_is_final: layout.count() == 1,
                });
                let (reply, lock_released) = self
                    .purchase_in(order, mode, &order_id, keys, (layout.epoch, lock))
                    .await;
                released |= lock_released;
                let reply = reply?;
                match reply {
                    PurchaseReply::StaleLayout | PurchaseReply::NoSale if round == 0 => {
                        // Reset since this instance read the segments (or the
                        // sale's keys are gone): read them again.
                        self.layouts.forget(sku.as_str());
                    }
                    PurchaseReply::StaleLayout => {
                        // A reset is under way: its segments are not all reset.
                        self.layouts.forget(sku.as_str());
                        tokio::time::sleep(retry_pause()).await;
                    }
                    PurchaseReply::SoldOut { stock, epoch } if layout.count() > 1 => {
                        let sold = self.sold_everywhere(&layout).await?;
                        let left = layout.initial_stock.saturating_sub(sold);
                        if left < quantity {
                            if left == 0 {
                                self.announce_sold_out(sku, epoch).await;
                            }
                            return Err(Refusal::SoldOut { sku: sku.clone() }.into());
                        }
                        let refilled = self
                            .refill(sku, &layout, segment, quantity.saturating_sub(stock))
                            .await?;
                        if refilled.moved == 0 && refilled.finished == 0 {
                            // Another buyer took what was found: look again soon.
                            tokio::time::sleep(retry_pause()).await;
                        }
                    }
                    reply => return self.read_purchase_reply(order, reply, &layout),
                }
            }
            tracing::warn!(
                %sku,
                "stock kept moving away from a buyer's segment; the buyer is told to retry"
            );
            Err(SaleError::Lock(LockError::Held {
                key: order.lock_key(),
                retry_after_ms: 100,
            }))
        }
        .await;
        (result, released)
    }

    /// Runs `purchase.lua` in one segment, confirmed by replicas when they
    /// must confirm; and whether it released the buyer's lock.
    async fn purchase_in(
        &self,
        order: &OrderRequest,
        mode: PurchaseMode,
        order_id: &str,
        keys: &SaleKeys,
        (epoch, lock): (u64, Option<BuyerLock<'_>>),
    ) -> (Result<PurchaseReply, SaleError>, bool) {
        let idempotency_key = order.idempotency_key.as_ref().map(IdempotencyKey::as_str);
        // A replay is confirmed too: the script wrote its record again,
        // after the order, so the replicas that have that write have the
        // order (a client retrying after `not-replicated` must not be told
        // 200 for an order only the primary holds).
        let written = self
            .redis
            .write(
                &keys.sale,
                true,
                async |conn| {
                    scripts::purchase(
                        conn,
                        keys,
                        order.user.as_str(),
                        order.quantity.get(),
                        idempotency_key,
                        order_id,
                        (mode, Some(epoch), lock),
                    )
                    .await
                },
                |(reply, _)| {
                    matches!(
                        reply,
                        PurchaseReply::Ordered(_) | PurchaseReply::Replayed(_)
                    )
                },
            )
            .await;
        let ((reply, released), confirmed) = match written {
            Ok(written) => written,
            Err(err) => return (Err(err.into()), false),
        };
        if !confirmed {
            let refused = Refusal::NotReplicated {
                sku: order.sku.clone(),
            };
            // A release made by the script is as unconfirmed as the
            // purchase, and a failover could lose it with the order: the
            // caller gives the lock back again (by its token, so a repeat
            // of a release that did stand changes nothing).
            return (Err(refused.into()), false);
        }
        (Ok(reply), released)
    }

    /// What a purchase script's reply means for the order, noting a sale
    /// that has sold out.
    fn read_purchase_reply(
        &self,
        order: &OrderRequest,
        reply: PurchaseReply,
        layout: &Arc<Layout>,
    ) -> Result<Purchase, SaleError> {
        let sku = order.sku.clone();
        let refusal = match reply {
            PurchaseReply::Ordered(recorded) => {
                if recorded.stock_left == 0 {
                    self.segment_sold_out(&sku, layout, recorded.epoch);
                }
                return Ok(Purchase::Created(Order::of(order, recorded)));
            }
            PurchaseReply::Replayed(recorded) => {
                return Ok(Purchase::Replayed(Order::of(order, recorded)));
            }
            PurchaseReply::SoldOut { stock, epoch } => {
                if stock == 0 {
                    self.segment_sold_out(&sku, layout, epoch);
                }
                Refusal::SoldOut { sku }
            }
            PurchaseReply::NotRecorded => Refusal::SoldOut { sku },
            PurchaseReply::LimitExceeded => Refusal::LimitExceeded {
                sku,
                user: order.user.clone(),
            },
            PurchaseReply::NoSale | PurchaseReply::StaleLayout => Refusal::NotFound { sku },
            PurchaseReply::KeyReused => Refusal::KeyReused,
        };
        Err(refusal.into())
    }

    /// A segment's stock is gone: with one segment the sale sold out, and
    /// this instance knows at once while every other is told; with more,
    /// whether the whole sale did is checked beside the answer.
    pub(super) fn segment_sold_out(&self, sku: &Sku, layout: &Arc<Layout>, epoch: u64) {
        let sales = self.clone();
        let (sku, layout) = (sku.clone(), layout.clone());
        if layout.count() == 1 {
            self.flags.mark_sold_out(sku.as_str(), epoch);
            tokio::spawn(async move { sales.announce_sold_out(&sku, epoch).await });
        } else {
            tokio::spawn(async move { sales.check_sold_out(&sku, &layout).await });
        }
    }

    /// The sale sold out in `epoch`: this instance knows at once, and tells
    /// every other (pub/sub), so that each answers `sold-out` from memory.
    pub(super) async fn announce_sold_out(&self, sku: &Sku, epoch: u64) {
        self.flags.mark_sold_out(sku.as_str(), epoch);
        let published = async {
            let mut conn = self.redis.connection().await?;
            let mut publish = redis::cmd("PUBLISH");
            publish
                .arg(self.flags.sold_out_channel())
                .arg(format!("{sku} {epoch}"));
            publish.query_async::<()>(&mut conn).await?;
            Ok::<_, BackendError>(())
        }
        .await;
        if let Err(err) = published {
            tracing::warn!(%sku, error = %err, "cannot tell the other instances the sale sold out");
        }
    }

    /// The answer once this instance knows the sale is sold out: without an
    /// Idempotency-Key, straight from memory; with one, the purchase script
    /// in its replay-only mode (which buys nothing, so a stale flag can never
    /// buy without the user's lock), so that a replay of an earlier purchase
    /// gets its order, confirmed like any.
    pub(super) async fn answer_sold_out(
        &self,
        order: &OrderRequest,
    ) -> Result<Purchase, SaleError> {
        if order.idempotency_key.is_none() {
            return Err(Refusal::SoldOut {
                sku: order.sku.clone(),
            }
            .into());
        }
        self.run_purchase_script(order, PurchaseMode::ReplayOnly, None)
            .await
            .0
    }
}

/// A short pause, a little different each time, before a purchase looks
/// at a segmented sale again: buyers racing for the last units of two
/// segments do not keep meeting.
fn retry_pause() -> Duration {
    Duration::from_micros(500 + u64::from(uuid::Uuid::new_v4().as_bytes()[0]) * 20)
}
