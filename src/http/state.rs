//! What every handler can reach: the domains, the settings the routes enforce, and the metrics.

use std::sync::Arc;

use axum::extract::FromRef;

use super::auth::{AdminToken, ApiKeys, Permissions};
use super::buyer::BuyerTokens;
use super::extract::TrustedProxies;
use super::streamed::StreamKeepAlive;
use crate::locks::{LockLimits, Locks, Sessions, StreamedLocks, Watches};
use crate::metrics::Metrics;
use crate::redis::Redis;
use crate::seckill::Sales;

/// The router's state. Handlers take the parts they need (`State<Locks>`,
/// `State<Sales>`, ...), each cloned out of it by `FromRef`. axum clones
/// the state itself for every request, so it is one shared allocation:
/// one count to raise, not one per part.
#[derive(Clone)]
pub struct AppState(Arc<Parts>);

/// What the state holds.
pub struct Parts {
    pub locks: Locks,
    pub streamed: StreamedLocks,
    pub watches: Watches,
    pub sessions: Sessions,
    pub sales: Sales,
    pub redis: Redis,
    pub metrics: Arc<Metrics>,
    pub limits: LockLimits,
    pub stream_keep_alive: StreamKeepAlive,
    pub admin_token: AdminToken,
    pub api_keys: ApiKeys,
    pub permissions: Permissions,
    pub buyer_tokens: BuyerTokens,
    pub trusted_proxies: TrustedProxies,
}

impl std::ops::Deref for AppState {
    type Target = Parts;

    fn deref(&self) -> &Parts {
        &self.0
    }
}

/// `State<T>` for each part, by field.
macro_rules! parts_from_ref {
    ($($field:ident: $part:ty),* $(,)?) => {$(
        impl FromRef<AppState> for $part {
            fn from_ref(state: &AppState) -> Self {
                state.0.$field.clone()
            }
        }
    )*};
}

parts_from_ref! {
    locks: Locks,
    streamed: StreamedLocks,
    sessions: Sessions,
    watches: Watches,
    sales: Sales,
    redis: Redis,
    metrics: Arc<Metrics>,
    limits: LockLimits,
    stream_keep_alive: StreamKeepAlive,
    admin_token: AdminToken,
    api_keys: ApiKeys,
    permissions: Permissions,
    buyer_tokens: BuyerTokens,
    trusted_proxies: TrustedProxies,
}

/// The settings the routes enforce: bounds on leases and waits, and who
/// may use which route.
#[derive(Clone)]
pub struct RouteSettings {
    pub limits: LockLimits,
    pub stream_keep_alive: StreamKeepAlive,
    pub admin_token: AdminToken,
    pub api_keys: ApiKeys,
    /// The permissions file in force (shared with whoever reloads it).
    pub permissions: Permissions,
    pub buyer_tokens: BuyerTokens,
    pub trusted_proxies: TrustedProxies,
}

/// The domains (and the Redis handle `/readyz` pings) that serve the routes.
pub struct RouteDomains {
    pub locks: Locks,
    pub streamed: StreamedLocks,
    pub watches: Watches,
    pub sessions: Sessions,
    pub sales: Sales,
    pub redis: Redis,
    pub metrics: Arc<Metrics>,
}

impl AppState {
    pub fn new(domains: RouteDomains, settings: RouteSettings) -> Self {
        let RouteDomains {
            locks,
            streamed,
            watches,
            sessions,
            sales,
            redis,
            metrics,
        } = domains;
        let RouteSettings {
            limits,
            stream_keep_alive,
            admin_token,
            api_keys,
            permissions,
            buyer_tokens,
            trusted_proxies,
        } = settings;
        Self(Arc::new(Parts {
            locks,
            streamed,
            watches,
            sessions,
            sales,
            redis,
            metrics,
            limits,
            stream_keep_alive,
            admin_token,
            api_keys,
            permissions,
            buyer_tokens,
            trusted_proxies,
        }))
    }
}
