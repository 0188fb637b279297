//! A sale's life outside its purchases: a reset under the sale's lock, reading one sale or every one, and its orders a page at a time.

use std::time::Duration;

use super::error::{Refusal, SaleError};
use super::inputs::{OrdersQuery, SaleTerms, Sku};
use super::orders::{self, OrderPage, PageError};
use super::shared::{MAX_LISTED_SALES, Sales};
use crate::locks::WaitTime;
use crate::redis::handoff;
use crate::redis::seckill::{self as scripts, Refused, SaleKeys, SaleState};

/// How long a reset waits for another reset of the same sale.
const RESET_LOCK_WAIT: Duration = Duration::from_secs(5);

impl Sales {
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
}
