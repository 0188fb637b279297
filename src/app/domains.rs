//! The domains of one gateway instance, built in one place from the settings: the locks clients take, the streamed locks it renews, the watchers it serves, the sales, and the waiting room they share.

use std::sync::Arc;

use crate::config::Config;
use crate::fleet::Fleet;
use crate::handoff::store::OrderStore;
use crate::http;
use crate::locks::{Locks, Sessions, StreamedLocks, Waiting, Watches};
use crate::metrics::Metrics;
use crate::redis::Redis;
use crate::redis::pubsub::Subscriber;
use crate::seckill::Sales;

/// The domains of one instance, built in one place: the locks clients
/// take, the streamed locks it renews, the watchers it serves, the sales,
/// and the waiting room they share.
pub(super) struct Domains {
    pub(super) locks: Locks,
    pub(super) streamed: StreamedLocks,
    pub(super) watches: Watches,
    pub(super) sales: Sales,
    pub(super) waiting: Waiting,
    pub(super) sessions: Sessions,
}

impl Domains {
    /// `stored`: the database the hand-off stores orders in, when it runs
    /// here (the sale's listing reads it too).
    pub(super) fn build(
        config: &Config,
        instance_id: &str,
        (redis, subscriber): (&Redis, &Subscriber),
        metrics: &Arc<Metrics>,
        stored: Option<OrderStore>,
    ) -> Self {
        let waiting = Waiting::new(subscriber.clone(), instance_id, config.max_waiters);
        metrics.waiters_limit(config.max_waiters);
        waiting.start_tending(redis.clone());
        let sessions = Sessions::new(redis.clone(), &config.redis.key_prefix, metrics.clone());
        sessions.start_sweeping();
        let locks = Locks::new(
            redis.clone(),
            &config.redis.key_prefix,
            (waiting.clone(), sessions.clone()),
            metrics.clone(),
            config.lock_limits(),
        );
        let watches = Watches::new(
            redis.clone(),
            &config.redis.key_prefix,
            (waiting.clone(), sessions.clone()),
            subscriber.clone(),
            metrics.clone(),
        );
        let streamed = StreamedLocks::new(locks.clone(), subscriber.clone(), metrics.clone());
        // The sale's own locks live in a namespace of their own, which no
        // client can name through /locks (and so cannot hold).
        let internal = format!("{}internal:", config.redis.key_prefix);
        let sale_locks = Locks::new(
            redis.clone(),
            &internal,
            (
                waiting.clone(),
                Sessions::new(redis.clone(), &internal, metrics.clone()),
            ),
            metrics.clone(),
            config.lock_limits(),
        );
        let mut sales = Sales::new(
            redis.clone(),
            sale_locks,
            &config.redis.key_prefix,
            subscriber,
            config.sale_settings(),
            metrics.clone(),
        );
        if let Some(stored) = stored {
            sales = sales.with_stored_orders(Arc::new(stored));
        }
        Self {
            locks,
            streamed,
            watches,
            sales,
            waiting,
            sessions,
        }
    }

    /// What the routes are given of the domains.
    pub(super) fn handed_to_routes(
        &self,
        (redis, fleet): (&Redis, &Fleet),
        metrics: Arc<Metrics>,
    ) -> http::RouteDomains {
        http::RouteDomains {
            locks: self.locks.clone(),
            streamed: self.streamed.clone(),
            watches: self.watches.clone(),
            sessions: self.sessions.clone(),
            sales: self.sales.clone(),
            redis: redis.clone(),
            fleet: fleet.clone(),
            metrics,
        }
    }
}
