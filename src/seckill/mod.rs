//! The flash sale: purchases admitted by one Lua script under the per-(sku, user) lock, rate-limited per user across instances.
//!
//! A purchase goes: sold-out flag (answered from memory once the sale's
//! stock is gone) → rate limit (GCRA in Redis, per user and optionally per
//! client address) → the per-(sku, user) lock, taken like `POST /locks` →
//! `purchase.lua`, which checks the idempotency key, stock and cap,
//! decrements and records the order in one atomic step → release (by the
//! same script where one Redis holds the lock and the sale). The
//! script alone makes overselling impossible; the lock keeps one user's
//! concurrent requests from racing each other for the rate limit and cap.
//!
//! A sale may be spread over segments (Redis slots on distinct Cluster
//! masters): the buyer's segment runs the script, and a segment that runs
//! dry first moves stock over from the others ([`segments`]).
//!
//! The parts beside the sale and its purchase path here: [`purchase`] (a
//! purchase's outcome and answer), [`rate`]
//! (admission by the rate limits), [`orders`] (the recorded orders, a page
//! at a time), [`sold_out`] (the per-instance flags), [`segments`] (a sale
//! over many slots), [`inputs`] (typed inputs).

mod inputs;
mod orders;
mod purchase;
mod rate;
mod segments;
mod sold_out;
mod tally;

use std::net::IpAddr;
use std::ops::ControlFlow;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{Either, select};

pub use inputs::{
    Cursor, DEFAULT_PAGE, InvalidInput, MAX_NAME_LEN, MAX_PAGE, MAX_QUANTITY, MAX_STOCK,
    OrderRequest, OrdersQuery, PageLimit, Quantity, SaleTerms, Sku, UserId, name_pattern,
};
use orders::PageError;
pub use orders::{OrderPage, StoredOrders};
use purchase::outcome;
pub use purchase::{Order, Purchase, PurchaseAnswer};
use rate::RateLimits;
pub use rate::{RateDecision, RatePolicy};
pub use segments::MAX_SEGMENTS;
use segments::{Layout, Layouts};
use sold_out::SoldOutFlags;
use tally::{RefusalKind, RefusalTally};

use crate::locks::{
    AcquireRequest, IdempotencyKey, Lease, LockError, LockKey, LockKind, Locks, Ttl, WaitTime,
};
use crate::metrics::Metrics;
use crate::redis::handoff;
use crate::redis::locks::PlainRelease;
use crate::redis::pubsub::Subscriber;
use crate::redis::seckill::{
    self as scripts, BuyerLock, PurchaseMode, PurchaseReply, Refused, SaleKeys,
};
use crate::redis::{BackendError, Redis};
// Read from Redis as they are and handed on unchanged: one type each, not a
// domain copy joined to the Redis one field by field.
pub use crate::redis::seckill::{OrderEntry, SaleState};

/// How long the per-user and per-sale locks are leased. They are released as
/// soon as the script has run; the lease only matters if a gateway dies
/// holding one.
const SALE_LOCK_TTL: Duration = Duration::from_secs(5);
/// How long a reset waits for another reset of the same sale.
const RESET_LOCK_WAIT: Duration = Duration::from_secs(5);
/// How many times a purchase in a segmented sale tries its segment again
/// after moving stock there (or reading the sale's segments again) before
/// it asks the buyer to retry.
const PURCHASE_ROUNDS: u32 = 16;

/// The deployment's flash-sale settings.
#[derive(Debug, Clone, Copy)]
pub struct SaleSettings {
    pub per_user: Option<RatePolicy>,
    pub per_client: Option<RatePolicy>,
    /// Whether purchases run under the per-(sku, user) lock: always, but
    /// where a benchmark measures what the lock costs (only a build with the
    /// `bench` feature has the setting that turns it off).
    pub user_lock: bool,
    /// How long a purchase waits for its user's lock.
    pub lock_wait: Duration,
}

/// The sale's own answers when a purchase (or a read) cannot go through.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("there is no sale {sku}")]
    NotFound { sku: Sku },
    #[error("{sku} has not enough stock left")]
    SoldOut { sku: Sku },
    #[error("{user} would exceed the limit of {sku} per user")]
    LimitExceeded { sku: Sku, user: UserId },
    #[error("this Idempotency-Key was used for a different purchase")]
    KeyReused,
    #[error("too many purchase requests; retry later")]
    RateLimited(RateDecision),
    #[error(
        "the order was recorded on the primary but too few replicas confirmed it in time; \
         retry with the same Idempotency-Key"
    )]
    NotReplicated { sku: Sku },
    /// The database the hand-off stores orders in could not be read.
    #[error("the stored orders of {sku} cannot be read now; retry")]
    StoredOrdersUnavailable { sku: Sku },
}

/// Why a sale operation did not happen: the sale refused, or the lock (or
/// Redis behind it) did.
#[derive(Debug, thiserror::Error)]
pub enum SaleError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Lock(#[from] LockError),
}

impl From<BackendError> for SaleError {
    fn from(err: BackendError) -> Self {
        Self::Lock(err.into())
    }
}

/// The flash-sale operations of one gateway instance.
#[derive(Clone)]
pub struct Sales {
    redis: Redis,
    locks: Locks,
    prefix: Arc<str>,
    flags: Arc<SoldOutFlags>,
    /// The segments of each sale this instance served.
    layouts: Arc<Layouts>,
    rates: RateLimits,
    settings: SaleSettings,
    metrics: Arc<Metrics>,
    refusals: Arc<RefusalTally>,
    /// Where the hand-off stores the orders, when it runs here: listings
    /// read them there too.
    stored: Option<Arc<dyn StoredOrders>>,
}

/// The most sales `GET /seckill` lists.
pub const MAX_LISTED_SALES: usize = 1000;

impl Sales {
    /// Sets up the sales, listening for resets made on any instance.
    pub fn new(
        redis: Redis,
        locks: Locks,
        prefix: &str,
        subscriber: &Subscriber,
        settings: SaleSettings,
        metrics: Arc<Metrics>,
    ) -> Self {
        let flags = Arc::new(SoldOutFlags::new(
            format!("{prefix}sale-resets"),
            format!("{prefix}sale-sold-out"),
        ));
        subscriber.listen(flags.clone());
        let layouts = Arc::new(Layouts::new(flags.channel().to_owned()));
        subscriber.listen(layouts.clone());
        // The confirmation is not awaited: until it comes, a reset elsewhere
        // could go unheard, but no purchase has marked anything sold out yet
        // (and a layout from before a reset is caught by its epoch).
        drop(subscriber.subscribe(flags.channel()));
        drop(subscriber.subscribe(flags.sold_out_channel()));
        let rates = RateLimits::new(redis.clone(), prefix, &settings, metrics.clone());
        let prefix: Arc<str> = prefix.into();
        let refusals = Arc::new(RefusalTally::default());
        refusals.start_flushing(redis.clone(), prefix.clone());
        let sales = Self {
            redis,
            locks,
            prefix,
            flags,
            layouts,
            rates,
            settings,
            metrics,
            refusals,
            stored: None,
        };
        sales.start_sweeping();
        sales
    }

    /// Lists read the orders the hand-off stored from `stored` as well.
    pub fn with_stored_orders(mut self, stored: Arc<dyn StoredOrders>) -> Self {
        self.stored = Some(stored);
        self
    }

    fn keys(&self, sku: &Sku) -> SaleKeys {
        SaleKeys::new(&self.prefix, sku.as_str())
    }

    /// Creates or resets a sale under its own lock, so two resets never
    /// overlap; the old sale's orders, counts and idempotency records go
    /// (from every segment it had).
    pub async fn reset(&self, sku: &Sku, terms: SaleTerms) -> Result<SaleState, SaleError> {
        let lease = self
            .sale_lock(sku.lock_key(), WaitTime::fixed(RESET_LOCK_WAIT))
            .await?;
        let reset = self.reset_segments(sku, terms).await;
        self.give_back(lease).await;
        let reset = reset?;
        // Not left to the message alone: this instance knows at once.
        self.layouts.forget(sku.as_str());
        self.flags.reset(sku.as_str(), reset.epoch);
        // What the scripts just wrote; reading it back would cost a round
        // trip and could show a purchase made since.
        Ok(SaleState {
            stock: terms.stock(),
            initial_stock: terms.stock(),
            sold: 0,
            per_user_limit: terms.per_user_limit(),
            orders: 0,
            stored: reset.handoff.then_some(0),
            refused: Refused::default(),
            segments: terms.segments(),
        })
    }

    /// Every sale (up to [`MAX_LISTED_SALES`]), by sku.
    pub async fn list(&self) -> Result<Vec<(String, SaleState)>, SaleError> {
        let mut conn = self.redis.connection().await?;
        let mut sales = Vec::new();
        for sku in handoff::registered(&mut conn, &self.prefix).await? {
            if sales.len() == MAX_LISTED_SALES {
                break;
            }
            let keys = SaleKeys::new(&self.prefix, &sku);
            if let Some(state) = scripts::state(&mut conn, &keys).await?
                && let Ok(parsed) = Sku::parse(&sku)
            {
                let state = self.totals(&parsed, state).await?;
                sales.push((sku, state));
            }
        }
        Ok(sales)
    }

    pub async fn sale(&self, sku: &Sku) -> Result<SaleState, SaleError> {
        let mut conn = self.redis.connection().await?;
        let state = scripts::state(&mut conn, &self.keys(sku)).await?;
        let state = state.ok_or_else(|| Refusal::NotFound { sku: sku.clone() })?;
        Ok(self.totals(sku, state).await?)
    }

    /// A page of the sale's recorded orders, oldest first: everyone's or
    /// one user's (see [`orders`]).
    pub async fn orders(&self, sku: &Sku, query: OrdersQuery) -> Result<OrderPage, SaleError> {
        let Some(layout) = self.layout(sku).await? else {
            return Err(Refusal::NotFound { sku: sku.clone() }.into());
        };
        // One user's orders are all in that user's segment.
        let segments = match &query.user {
            Some(user) => {
                std::slice::from_ref(&layout.segments[layout.buyer_segment(user.as_str())])
            }
            None => layout.segments.as_slice(),
        };
        let mut conn = self.redis.connection().await?;
        let sale = (sku.as_str(), segments);
        match orders::page(&mut conn, sale, &query, self.stored.as_deref()).await {
            Ok(Some(page)) => Ok(page),
            Ok(None) => Err(Refusal::NotFound { sku: sku.clone() }.into()),
            Err(PageError::Backend(err)) => Err(err.into()),
            Err(PageError::Stored(err)) => {
                tracing::warn!(%sku, error = %err, "cannot read the stored orders");
                Err(Refusal::StoredOrdersUnavailable { sku: sku.clone() }.into())
            }
        }
    }

    /// Buys, or replays an earlier purchase with the same Idempotency-Key.
    pub async fn buy(&self, order: OrderRequest, client: Option<IpAddr>) -> PurchaseAnswer {
        let answer = self.answer(&order, client).await;
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

    /// The answer to an order: from the sold-out flag when it is up, else
    /// from the purchase script, under the user's lock.
    async fn answer(&self, order: &OrderRequest, client: Option<IpAddr>) -> PurchaseAnswer {
        if self.flags.is_sold_out(order.sku.as_str()) {
            return PurchaseAnswer {
                result: self.answer_sold_out(order).await,
                rate: None,
            };
        }
        if self.settings.user_lock {
            self.under_user_lock(order, client).await
        } else {
            self.without_user_lock(order, client).await
        }
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
        let result = self.purchase_rounds(order, mode, lock, &mut released).await;
        (result, released)
    }

    /// [`Sales::run_purchase_script`]'s rounds; `released` is set once the
    /// script gave up the buyer's lock.
    async fn purchase_rounds(
        &self,
        order: &OrderRequest,
        mode: PurchaseMode,
        lock: Option<&PlainRelease>,
        released: &mut bool,
    ) -> Result<Purchase, SaleError> {
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
            let lock = lock.filter(|_| !*released).map(|release| BuyerLock {
                release,
                sold_out_is_final: layout.count() == 1,
            });
            let (reply, lock_released) = self
                .purchase_in(order, mode, &order_id, keys, (layout.epoch, lock))
                .await;
            *released |= lock_released;
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
        tracing::warn!(%sku, "stock kept moving away from a buyer's segment; the buyer is told to retry");
        Err(SaleError::Lock(LockError::Held {
            key: order.lock_key(),
            retry_after_ms: 100,
        }))
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
                return Ok(Purchase::Created(order.recorded(recorded)));
            }
            PurchaseReply::Replayed(recorded) => {
                return Ok(Purchase::Replayed(order.recorded(recorded)));
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
    fn segment_sold_out(&self, sku: &Sku, layout: &Arc<Layout>, epoch: u64) {
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
    async fn announce_sold_out(&self, sku: &Sku, epoch: u64) {
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
    async fn answer_sold_out(&self, order: &OrderRequest) -> Result<Purchase, SaleError> {
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

    /// Takes one of the sale's own locks (a reset's, or a purchase's
    /// per-user lock) through the lock domain, like any client's. If the
    /// caller is dropped before [`Sales::give_back`], the lease's guard
    /// releases it.
    async fn sale_lock(&self, key: LockKey, wait: WaitTime) -> Result<Lease, LockError> {
        self.locks.acquire(sale_lock_request(key, wait)).await
    }

    /// Releases a sale lock in the background: the answer does not wait
    /// for it.
    fn give_back_later(&self, lease: Option<Lease>) {
        if let Some(lease) = lease {
            let sales = self.clone();
            tokio::spawn(async move { sales.give_back(lease).await });
        }
    }

    /// Releases a sale lock; if that fails, its short lease ends it.
    async fn give_back(&self, mut lease: Lease) {
        let guard = lease.guard.take();
        match self.locks.release(&lease.key, &lease.token).await {
            Ok(_) => {}
            // Already gone: its lease ended, or the purchase script
            // released it in a write that was not confirmed.
            Err(LockError::NotFound { .. }) => {}
            Err(err) => {
                let key = &lease.key;
                tracing::warn!(%key, error = %err, "could not release a sale lock; its lease will expire");
            }
        }
        if let Some(guard) = guard {
            guard.complete();
        }
    }
}

/// A short pause, a little different each time, before a purchase looks
/// at a segmented sale again: buyers racing for the last units of two
/// segments do not keep meeting.
fn retry_pause() -> Duration {
    Duration::from_micros(500 + u64::from(uuid::Uuid::new_v4().as_bytes()[0]) * 20)
}

/// The request for one of the sale's own short locks.
fn sale_lock_request(key: LockKey, wait: WaitTime) -> AcquireRequest {
    let mut request =
        AcquireRequest::new(key, LockKind::Exclusive, Ttl::fixed(SALE_LOCK_TTL), wait);
    // The purchase such a lock guards is confirmed itself.
    request.confirmed = false;
    request
}
