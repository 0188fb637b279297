//! A sale's recorded orders, read a page at a time: everyone's from the order stream, or one user's from that user's own record.

use super::{Cursor, OrderEntry, OrdersQuery};
use crate::redis::seckill::{self as scripts, SaleKeys};
use crate::redis::{BackendError, Connection};

/// A page of recorded orders, and where the next begins, if one does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderPage {
    pub orders: Vec<OrderEntry>,
    pub next: Option<String>,
}

/// The page `query` asks for, oldest first: everyone's orders (read from
/// the order stream, from the cursor on) or one user's (from that user's
/// own record, reading nobody else's). `None` when there is no such sale.
pub(super) async fn page(
    conn: &mut Connection,
    keys: &SaleKeys,
    query: &OrdersQuery,
) -> Result<Option<OrderPage>, BackendError> {
    let limit = query.limit.get();
    let Some(user) = &query.user else {
        let after = match &query.cursor {
            Some(Cursor::After(id)) => Some(id.as_str()),
            _ => None,
        };
        // One more than the page, to know whether another follows.
        let Some(mut entries) = scripts::orders(conn, keys, after, limit + 1).await? else {
            return Ok(None);
        };
        let more = entries.len() > limit;
        entries.truncate(limit);
        let next = more
            .then(|| entries.last().map(|(id, _)| id.clone()))
            .flatten();
        let orders = entries.into_iter().map(|(_, order)| order).collect();
        return Ok(Some(OrderPage { orders, next }));
    };
    let Some(all) = scripts::user_orders(conn, keys, user.as_str()).await? else {
        return Ok(None);
    };
    let skip = match query.cursor {
        Some(Cursor::Skip(skip)) => skip,
        _ => 0,
    };
    let more = all.len() > skip + limit;
    let orders = all.into_iter().skip(skip).take(limit).collect();
    let next = more.then(|| (skip + limit).to_string());
    Ok(Some(OrderPage { orders, next }))
}
