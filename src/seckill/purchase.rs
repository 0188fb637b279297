//! What a purchase comes to: the order, the answer with its rate-limit decision, and the outcome the metrics count.

use std::ops::ControlFlow;

use super::error::{Refusal, SaleError};
use super::inputs::{OrderRequest, Sku, UserId};
use super::rate::RateDecision;
use crate::locks::LockError;
use crate::redis::BackendError;
use crate::redis::seckill::RecordedOrder;

/// A recorded order, as a purchase answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    pub order_id: String,
    pub sku: Sku,
    pub user: UserId,
    pub quantity: u64,
    pub stock_left: u64,
}

impl Order {
    /// The order `request` made, as a purchase answers it, from what the
    /// script recorded.
    pub(super) fn of(request: &OrderRequest, recorded: RecordedOrder) -> Self {
        Self {
            order_id: recorded.order_id,
            sku: request.sku.clone(),
            user: request.user.clone(),
            quantity: recorded.quantity,
            stock_left: recorded.stock_left,
        }
    }
}

/// A purchase that went through, now or earlier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Purchase {
    Created(Order),
    /// The same Idempotency-Key and body again: the original order.
    Replayed(Order),
}

/// A purchase's outcome, and the rate-limit answer to send with it.
#[derive(Debug)]
pub struct PurchaseAnswer {
    pub result: Result<Purchase, SaleError>,
    pub rate: Option<RateDecision>,
}

impl PurchaseAnswer {
    pub(super) fn refused(err: SaleError, rate: Option<RateDecision>) -> Self {
        Self {
            result: Err(err),
            rate,
        }
    }

    /// The rate check's outcome: go on with the decision to report with
    /// the purchase, or stop with the answer when it refuses (or cannot be
    /// made).
    pub(super) fn admitted(
        admitted: Result<Option<RateDecision>, BackendError>,
    ) -> ControlFlow<Self, Option<RateDecision>> {
        match admitted {
            Err(err) => ControlFlow::Break(Self::refused(err.into(), None)),
            Ok(Some(decision)) if !decision.allowed => ControlFlow::Break(Self::refused(
                Refusal::RateLimited(decision).into(),
                Some(decision),
            )),
            Ok(rate) => ControlFlow::Continue(rate),
        }
    }
}

/// A purchase's outcome as `lockgate_seckill_outcomes_total` labels it.
pub(super) fn outcome(result: &Result<Purchase, SaleError>) -> &'static str {
    match result {
        Ok(Purchase::Created(_)) => "created",
        Ok(Purchase::Replayed(_)) => "replayed",
        Err(SaleError::Refused(Refusal::SoldOut { .. })) => "sold_out",
        Err(SaleError::Refused(Refusal::LimitExceeded { .. })) => "limit_exceeded",
        Err(SaleError::Refused(Refusal::KeyReused)) => "idempotency_key_reused",
        Err(SaleError::Refused(Refusal::RateLimited(_))) => "rate_limited",
        Err(SaleError::Refused(Refusal::NotFound { .. })) => "sale_not_found",
        Err(SaleError::Refused(Refusal::NotReplicated { .. })) => "not_replicated",
        Err(SaleError::Lock(LockError::Held { .. })) => "lock_held",
        Err(SaleError::Lock(_) | SaleError::Refused(Refusal::StoredOrdersUnavailable { .. })) => {
            "error"
        }
    }
}
