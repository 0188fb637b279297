//! Why a sale operation did not happen: the sale's own refusals, or the lock (or Redis behind it).

use super::inputs::{Sku, UserId};
use super::rate::RateDecision;
use crate::locks::LockError;
use crate::redis::BackendError;

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
