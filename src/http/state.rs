//! What every handler can reach: the domains, the settings the routes enforce, and the metrics.

use std::sync::Arc;

use axum::extract::FromRef;

use super::auth::{AdminToken, ApiKeys};
use super::extract::TrustedProxies;
use crate::locks::{LockLimits, Locks};
use crate::metrics::Metrics;
use crate::redis::Redis;
use crate::seckill::Sales;

/// The router's state. Handlers take the parts they need (`State<Locks>`,
/// `State<Sales>`, ...), each cloned out of it by the derived `FromRef`.
#[derive(Clone, FromRef)]
pub struct AppState {
    pub locks: Locks,
    pub sales: Sales,
    pub redis: Redis,
    pub limits: LockLimits,
    pub metrics: Arc<Metrics>,
    pub admin_token: AdminToken,
    pub api_keys: ApiKeys,
    pub trusted_proxies: TrustedProxies,
}
