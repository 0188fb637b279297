//! The body of a granted lock: what `POST /locks` answers, and what a streamed lock's `acquired` event carries.

use serde::Serialize;
use utoipa::ToSchema;

use crate::duration::millis;
use crate::locks::Lease;

/// A granted (or re-entered) lock. The token is shown only here.
#[derive(Debug, Serialize, ToSchema)]
pub struct LockGrant {
    #[schema(example = "orders:42")]
    key: String,
    /// The owner's secret, needed to release, renew or re-enter.
    #[schema(format = Uuid)]
    token: String,
    /// Strictly increases with every new acquisition of this key; unchanged
    /// by re-entry. Hand it to the resource you guard.
    #[schema(example = 1_763_800_000_000_000_u64)]
    fencing_token: u64,
    #[schema(example = 30000)]
    ttl_ms: u64,
    /// When the lease ends, in Unix ms by the Redis clock.
    expires_at_ms: u64,
    /// Re-entrant holds, 1 for a new acquisition.
    #[schema(example = 1)]
    holds: u64,
    /// How long the request waited for the lock.
    #[schema(example = 0)]
    waited_ms: u64,
}

impl From<&Lease> for LockGrant {
    fn from(lease: &Lease) -> Self {
        Self {
            key: lease.key.to_string(),
            token: lease.token.expose(),
            fencing_token: lease.state.fencing_token,
            ttl_ms: lease.state.ttl_ms,
            expires_at_ms: lease.state.expires_at_ms,
            holds: lease.state.holds,
            waited_ms: millis(lease.waited),
        }
    }
}
