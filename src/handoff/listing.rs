//! The stored orders as a sale's order listing reads them: once the hand-off has stored an order (and acknowledged it), it is in the database, not the sale's stream.

use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use super::store::OrderStore;
use crate::redis::seckill::OrderEntry;
use crate::seckill::StoredOrders;

/// A sale's stored orders after a position, in the order of purchase time
/// and then order id (the index `orders_by_sale` serves the first part).
const AFTER: &str = "SELECT ordered_at_ms, order_id, user_id, quantity FROM orders \
                     WHERE sku = $1 AND sale_epoch = $2 \
                     AND (ordered_at_ms > $3 OR (ordered_at_ms = $3 AND order_id > $4)) \
                     ORDER BY ordered_at_ms, order_id LIMIT $5";

type Row = (i64, String, String, i64);

impl StoredOrders for OrderStore {
    fn after<'a>(
        &'a self,
        sku: &'a str,
        epoch: u64,
        after: Option<(u64, &'a str)>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(u64, OrderEntry)>, String>> {
        async move {
            let (ms, order_id) = after.unwrap_or((0, ""));
            // Before any: every order, whose time is at least 0 and whose
            // id is more than the empty text.
            let ms = if after.is_some() { ms as i64 } else { -1 };
            let epoch = i64::try_from(epoch).unwrap_or(i64::MAX);
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let rows: Result<Vec<Row>, sqlx::Error> = match self {
                Self::Postgres(pool) => {
                    sqlx::query_as(AFTER)
                        .bind(sku)
                        .bind(epoch)
                        .bind(ms)
                        .bind(order_id)
                        .bind(limit)
                        .fetch_all(pool)
                        .await
                }
                Self::Sqlite(pool, _) => {
                    sqlx::query_as(AFTER)
                        .bind(sku)
                        .bind(epoch)
                        .bind(ms)
                        .bind(order_id)
                        .bind(limit)
                        .fetch_all(pool)
                        .await
                }
            };
            match rows {
                Ok(rows) => Ok(rows.into_iter().map(entry).collect()),
                // No table yet: the hand-off has not made it, so nothing is stored.
                Err(err) if no_table(&err) => Ok(Vec::new()),
                Err(err) => Err(err.to_string()),
            }
        }
        .boxed()
    }
}

fn entry((ms, order_id, user_id, quantity): Row) -> (u64, OrderEntry) {
    let order = OrderEntry {
        order_id,
        user_id,
        quantity: u64::try_from(quantity).unwrap_or(0),
    };
    (u64::try_from(ms).unwrap_or(0), order)
}

/// PostgreSQL's `undefined_table`, SQLite's "no such table".
fn no_table(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => {
            db.code().as_deref() == Some("42P01") || db.message().contains("no such table")
        }
        _ => false,
    }
}
