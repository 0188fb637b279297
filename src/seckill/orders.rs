//! A sale's orders, read a page at a time: everyone's wherever they are (the order stream, and the database the hand-off stores them in), or one user's from that user's own record.

use std::collections::BTreeMap;

use futures_util::future::BoxFuture;

use super::inputs::{Cursor, OrdersQuery};
use crate::redis::seckill::OrderEntry;
use crate::redis::seckill::{self as scripts, SaleKeys};
use crate::redis::{BackendError, Connection};

/// A page of orders, and where the next begins, if one does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderPage {
    pub orders: Vec<OrderEntry>,
    pub next: Option<String>,
    /// When this instance cannot read the orders the hand-off stored (it
    /// has no orders database) and there are some: how many are stored.
    /// Those that left the stream are missing from the page.
    pub stored_unread: Option<u64>,
}

/// Orders the hand-off has stored already: once stored (and acknowledged),
/// an order leaves the sale's stream, so a listing of everyone's orders
/// reads them here too.
pub trait StoredOrders: Send + Sync {
    /// Up to `limit` orders of `sku`'s epoch `epoch` after the position
    /// `after` (purchase time in ms, then order id), in that order, each
    /// with its purchase time.
    fn after<'a>(
        &'a self,
        sku: &'a str,
        epoch: u64,
        after: Option<(u64, &'a str)>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(u64, OrderEntry)>, String>>;
}

/// Why a page could not be read.
pub(super) enum PageError {
    Backend(BackendError),
    /// The database of stored orders (its error, for the log).
    Stored(String),
}

impl From<BackendError> for PageError {
    fn from(err: BackendError) -> Self {
        Self::Backend(err)
    }
}

/// The page `query` asks for, oldest first: one user's orders (from that
/// user's own record, reading nobody else's), or everyone's, in the order
/// of purchase (time, then order id) from the cursor on: the sale's stream
/// and, when the hand-off stores them, its stored orders, merged, each
/// order once (one moving from the stream to the database meanwhile is in
/// one or both, and its place in that order is the same). `None` when
/// there is no such sale. `segments` are the keys of the sale's segments
/// to read (the first is the sale's own), or the one segment of the user
/// asked for.
pub(super) async fn page(
    conn: &mut Connection,
    (sku, segments): (&str, &[SaleKeys]),
    query: &OrdersQuery,
    stored: Option<&dyn StoredOrders>,
) -> Result<Option<OrderPage>, PageError> {
    let Some(keys) = segments.first() else {
        return Ok(None);
    };
    if let Some(user) = &query.user {
        return Ok(user_page(conn, keys, user.as_str(), query).await?);
    }
    let limit = query.limit.get();
    let after = match &query.cursor {
        Some(Cursor::After { ms, order_id }) => Some((*ms, order_id.as_str())),
        _ => None,
    };
    // One more than the page, to know whether another follows.
    let Some(mut streamed) =
        scripts::orders(conn, keys, after.map(|(ms, _)| ms), limit + 1).await?
    else {
        return Ok(None);
    };
    // Every other segment's stream, from the same place: the page is cut
    // from them all in the order of purchase.
    for keys in &segments[1..] {
        if let Some(more) = scripts::orders(conn, keys, after.map(|(ms, _)| ms), limit + 1).await? {
            streamed.orders.extend(more.orders);
            streamed.stored += more.stored;
        }
    }
    let stored_unread = (stored.is_none() && streamed.stored > 0).then_some(streamed.stored);
    let mut merged: BTreeMap<(u64, String), OrderEntry> = BTreeMap::new();
    let stored = match stored {
        Some(stored) => stored
            .after(sku, streamed.epoch, after, limit + 1)
            .await
            .map_err(PageError::Stored)?,
        None => Vec::new(),
    };
    for (ms, order) in streamed.orders.into_iter().chain(stored) {
        let place = (ms, order.order_id.clone());
        if after.is_none_or(|(after_ms, after_id)| (ms, place.1.as_str()) > (after_ms, after_id)) {
            merged.insert(place, order);
        }
    }
    let more = merged.len() > limit;
    let page: Vec<((u64, String), OrderEntry)> = merged.into_iter().take(limit).collect();
    let next = more.then(|| {
        page.last().map(|((ms, order_id), _)| {
            Cursor::After {
                ms: *ms,
                order_id: order_id.clone(),
            }
            .to_text()
        })
    });
    Ok(Some(OrderPage {
        orders: page.into_iter().map(|(_, order)| order).collect(),
        next: next.flatten(),
        stored_unread,
    }))
}

/// One user's orders, from that user's own record.
async fn user_page(
    conn: &mut Connection,
    keys: &SaleKeys,
    user: &str,
    query: &OrdersQuery,
) -> Result<Option<OrderPage>, BackendError> {
    let limit = query.limit.get();
    let Some(all) = scripts::user_orders(conn, keys, user).await? else {
        return Ok(None);
    };
    let skip = match query.cursor {
        Some(Cursor::Skip(skip)) => skip,
        _ => 0,
    };
    let more = all.len() > skip + limit;
    let orders = all.into_iter().skip(skip).take(limit).collect();
    let next = more.then(|| (skip + limit).to_string());
    Ok(Some(OrderPage {
        orders,
        next,
        stored_unread: None,
    }))
}
