//! `lockgate orders reconcile`: every sale's orders in Redis beside its rows in the database, a line per sale and epoch, and whether they match.

use std::collections::BTreeSet;

use super::store::{EpochRows, OrderStore, StoreError};
use crate::redis::handoff::{self as streams, SaleCounts};
use crate::redis::seckill::SaleKeys;
use crate::redis::segments;
use crate::redis::{BackendError, Connection, Redis};

/// Why the reconciliation could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Redis(#[from] BackendError),
    #[error(transparent)]
    Database(#[from] StoreError),
}

/// One sale's epoch, as Redis and the database count it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochLine {
    pub sku: String,
    pub epoch: u64,
    /// Units sold and orders recorded, known for the sale's current epoch only.
    pub sold: Option<u64>,
    pub orders: Option<u64>,
    pub rows: u64,
    pub units: u64,
    /// Orders recorded in Redis and not yet stored.
    pub pending: u64,
    /// Orders of the sale in its dead-letter stream (on its first line).
    pub dead: u64,
}

impl EpochLine {
    /// Whether the line can be checked (nothing pending, and Redis knows the
    /// epoch's counts), and if so whether it matches.
    pub fn matches(&self) -> Option<bool> {
        if self.dead > 0 {
            return Some(false);
        }
        match (self.sold, self.orders) {
            (Some(sold), Some(orders)) if self.pending == 0 => {
                Some(self.rows == orders && self.units == sold)
            }
            _ => None,
        }
    }

    pub fn render(&self) -> String {
        let known = |value: Option<u64>| value.map_or_else(|| "-".to_owned(), |n| n.to_string());
        let verdict = match self.matches() {
            _ if self.dead > 0 => "DEAD-LETTERS",
            Some(true) => "ok",
            Some(false) => "MISMATCH",
            None if self.pending > 0 => "pending",
            None => "stored",
        };
        format!(
            "{} epoch={} sold={} orders={} rows={} units={} pending={} dead={} {verdict}",
            self.sku,
            self.epoch,
            known(self.sold),
            known(self.orders),
            self.rows,
            self.units,
            self.pending,
            self.dead,
        )
    }
}

/// The counts of a sale, every segment's summed (the epoch is the sale's
/// own hash's); `None` when there is no such sale.
async fn sale_counts(
    conn: &mut Connection,
    keys: &SaleKeys,
    segments: &[SaleKeys],
) -> Result<Option<SaleCounts>, BackendError> {
    let Some(mut total) = streams::counts(conn, keys).await? else {
        return Ok(None);
    };
    for segment in &segments[1..] {
        if let Some(counts) = streams::counts(conn, segment).await?
            && counts.epoch == total.epoch
        {
            total.sold += counts.sold;
            total.orders += counts.orders;
            total.stored = match (total.stored, counts.stored) {
                (Some(a), b) => Some(a + b.unwrap_or(0)),
                (None, b) => b,
            };
        }
    }
    Ok(Some(total))
}

/// The lines for one sale (`sku`) or for every sale Redis or the database knows.
pub async fn reconcile(
    redis: &Redis,
    store: &OrderStore,
    prefix: &str,
    sku: Option<&str>,
) -> Result<Vec<EpochLine>, ReconcileError> {
    let mut conn = redis.connection().await?;
    let skus: BTreeSet<String> = match sku {
        Some(sku) => BTreeSet::from([sku.to_owned()]),
        None => streams::registered(&mut conn, prefix)
            .await?
            .into_iter()
            .chain(store.skus().await?)
            .collect(),
    };
    let mut lines = Vec::new();
    for sku in skus {
        let keys = SaleKeys::new(prefix, &sku);
        // The sale as a whole: every segment's counts summed, every
        // segment's old streams and dead letters.
        let (current, retired) = segments::every_segment(&mut conn, prefix, &sku).await?;
        let counts = sale_counts(&mut conn, &keys, &current).await?;
        let mut rows = store.epochs(&sku).await?;
        // The current epoch gets a line even with no row yet.
        if let Some(counts) = counts
            && !rows.iter().any(|row| row.sale_epoch == counts.epoch)
        {
            rows.push(EpochRows {
                sale_epoch: counts.epoch,
                rows: 0,
                units: 0,
            });
        }
        let every: Vec<&SaleKeys> = current.iter().chain(&retired).collect();
        let mut draining = Vec::new();
        let mut dead = 0;
        for segment in &every {
            draining.extend(streams::draining(&mut conn, segment).await?);
            dead += streams::length(&mut conn, &segment.dead_letters).await?;
        }
        // An old epoch still draining gets a line even with no row yet.
        for stream in &draining {
            let epoch = stream
                .rsplit(':')
                .next()
                .and_then(|epoch| epoch.parse().ok());
            if let Some(epoch) = epoch
                && !rows.iter().any(|row| row.sale_epoch == epoch)
            {
                rows.push(EpochRows {
                    sale_epoch: epoch,
                    rows: 0,
                    units: 0,
                });
            }
        }
        rows.sort_by_key(|row| row.sale_epoch);
        for row in rows {
            let current = counts.filter(|counts| counts.epoch == row.sale_epoch);
            let pending = match current {
                Some(counts) => counts.orders.saturating_sub(counts.stored.unwrap_or(0)),
                None => {
                    let mut pending = 0;
                    for segment in &every {
                        let stream = format!("{}:{}", segment.orders, row.sale_epoch);
                        if draining.contains(&stream) {
                            pending += streams::unstored(&mut conn, &stream).await?;
                        }
                    }
                    pending
                }
            };
            lines.push(EpochLine {
                sku: sku.clone(),
                epoch: row.sale_epoch,
                sold: current.map(|counts| counts.sold),
                orders: current.map(|counts| counts.orders),
                rows: row.rows,
                units: row.units,
                pending,
                dead: std::mem::take(&mut dead),
            });
        }
    }
    Ok(lines)
}
