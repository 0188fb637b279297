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
//! The parts, from the ground up: `inputs` (typed inputs made by
//! parsing), `error` (refusals), `shared` (`Sales`, what every operation
//! uses, and the sale's own locks), `rate` (admission by the rate limits),
//! `sold_out` (the per-instance flags), `tally` (refusals counted across
//! instances), `layout` (a sale's segments and where a buyer buys), `orders` (the recorded
//! orders, a page at a time); then `segments` (a sale over many slots: resets,
//! totals, stock moved), `sale` (resets and reading), `buying`
//! (the purchase path) and `purchase` (what a purchase comes to).

mod buying;
mod error;
mod inputs;
mod layout;
mod orders;
mod purchase;
mod rate;
mod sale;
mod segments;
mod shared;
mod sold_out;
mod tally;

pub use error::{Refusal, SaleError};
pub use inputs::{
    Cursor, DEFAULT_PAGE, InvalidInput, MAX_NAME_LEN, MAX_PAGE, MAX_QUANTITY, MAX_SEGMENTS,
    MAX_STOCK, OrderRequest, OrdersQuery, PageLimit, Quantity, SaleTerms, Sku, UserId,
    name_pattern,
};
pub use orders::{OrderPage, StoredOrders};
pub use purchase::{Order, Purchase, PurchaseAnswer};
pub use rate::{RateDecision, RatePolicy};
pub use shared::{MAX_LISTED_SALES, SaleSettings, Sales};

// Read from Redis as they are and handed on unchanged: one type each.
pub use crate::redis::seckill::{OrderEntry, SaleState};
