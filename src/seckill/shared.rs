//! `Sales`, what every sale operation of one instance uses: its Redis, the lock domain, the sold-out flags, the layouts, the rate limits and settings; and the sale's own short locks (a reset's, a buyer's), taken and given back through the lock domain.

use std::sync::Arc;
use std::time::Duration;

use super::inputs::Sku;
use super::layout::Layouts;
use super::orders::StoredOrders;
use super::rate::{RateLimits, RatePolicy};
use super::sold_out::SoldOutFlags;
use super::tally::RefusalTally;
use crate::locks::{AcquireRequest, Lease, LockError, LockKey, LockKind, Locks, Ttl, WaitTime};
use crate::metrics::Metrics;
use crate::redis::Redis;
use crate::redis::pubsub::Subscriber;
use crate::redis::seckill::SaleKeys;

/// How long the per-user and per-sale locks are leased. They are released as
/// soon as the script has run; the lease only matters if a gateway dies
/// holding one.
const SALE_LOCK_TTL: Duration = Duration::from_secs(5);
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

/// The flash-sale operations of one gateway instance.
#[derive(Clone)]
pub struct Sales {
    pub(super) redis: Redis,
    pub(super) locks: Locks,
    pub(super) prefix: Arc<str>,
    pub(super) flags: Arc<SoldOutFlags>,
    /// The segments of each sale this instance served.
    pub(super) layouts: Arc<Layouts>,
    pub(super) rates: RateLimits,
    pub(super) settings: SaleSettings,
    pub(super) metrics: Arc<Metrics>,
    pub(super) refusals: Arc<RefusalTally>,
    /// Where the hand-off stores the orders, when it runs here: listings
    /// read them there too.
    pub(super) stored: Option<Arc<dyn StoredOrders>>,
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
        let rates = RateLimits::new(
            redis.clone(),
            prefix,
            (settings.per_user, settings.per_client),
            metrics.clone(),
        );
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

    pub(super) fn keys(&self, sku: &Sku) -> SaleKeys {
        SaleKeys::new(&self.prefix, sku.as_str())
    }

    /// Takes one of the sale's own locks (a reset's, or a purchase's
    /// per-user lock) through the lock domain, like any client's. If the
    /// caller is dropped before [`Sales::give_back`], the lease's guard
    /// releases it.
    pub(super) async fn sale_lock(&self, key: LockKey, wait: WaitTime) -> Result<Lease, LockError> {
        self.locks.acquire(sale_lock_request(key, wait)).await
    }

    /// Releases a sale lock in the background: the answer does not wait
    /// for it.
    pub(super) fn give_back_later(&self, lease: Option<Lease>) {
        if let Some(lease) = lease {
            let sales = self.clone();
            tokio::spawn(async move { sales.give_back(lease).await });
        }
    }

    /// Releases a sale lock; if that fails, its short lease ends it.
    pub(super) async fn give_back(&self, mut lease: Lease) {
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

/// The request for one of the sale's own short locks.
fn sale_lock_request(key: LockKey, wait: WaitTime) -> AcquireRequest {
    let mut request =
        AcquireRequest::new(key, LockKind::Exclusive, Ttl::fixed(SALE_LOCK_TTL), wait);
    // The purchase such a lock guards is confirmed itself.
    request.confirmed = false;
    request
}
