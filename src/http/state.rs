//! What every handler can reach: the domains, the settings the routes enforce, and the metrics.

use std::sync::Arc;

use axum::extract::FromRef;

use super::auth::{AdminToken, ApiKeys, Permissions};
use super::buyer::BuyerTokens;
use super::extract::TrustedProxies;
use super::streamed::StreamKeepAlive;
use crate::fleet::Fleet;
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

/// What the state holds: the domains and the settings, as they were given.
pub struct Parts {
    pub domains: RouteDomains,
    pub settings: RouteSettings,
}

impl AppState {
    pub fn new(domains: RouteDomains, settings: RouteSettings) -> Self {
        Self(Arc::new(Parts { domains, settings }))
    }
}

impl std::ops::Deref for AppState {
    type Target = Parts;

    fn deref(&self) -> &Parts {
        &self.0
    }
}

/// A part of the state (`RouteDomains`, `RouteSettings`), each of whose
/// fields a handler takes as `State<T>`: every field named once, here.
macro_rules! state_part {
    (
        $(#[$meta:meta])*
        pub struct $name:ident in $part:ident {
            $($(#[$field_meta:meta])* pub $field:ident: $ty:ty,)*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $($(#[$field_meta])* pub $field: $ty,)*
        }

        $(
            impl FromRef<AppState> for $ty {
                fn from_ref(state: &AppState) -> Self {
                    state.0.$part.$field.clone()
                }
            }
        )*
    };
}

state_part! {
    /// The domains (and the Redis handle `/readyz` pings, and the instance's
    /// fleet) that serve the routes.
    pub struct RouteDomains in domains {
        pub locks: Locks,
        pub streamed: StreamedLocks,
        pub watches: Watches,
        pub sessions: Sessions,
        pub sales: Sales,
        pub redis: Redis,
        pub fleet: Fleet,
        pub metrics: Arc<Metrics>,
    }
}

state_part! {
    /// The settings the routes enforce: bounds on leases and waits, and who
    /// may use which route.
    #[derive(Clone)]
    pub struct RouteSettings in settings {
        pub limits: LockLimits,
        pub stream_keep_alive: StreamKeepAlive,
        pub admin_token: AdminToken,
        pub api_keys: ApiKeys,
        /// The permissions file in force (shared with whoever reloads it).
        pub permissions: Permissions,
        pub buyer_tokens: BuyerTokens,
        pub trusted_proxies: TrustedProxies,
    }
}
