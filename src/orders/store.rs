//! The orders database: PostgreSQL or SQLite behind sqlx's `Any` driver, its embedded migrations, the batch insert, and the reconciliation's counts.
//!
//! Queries are built at run time (no database is needed to build the
//! crate); the one difference between the two databases that they meet,
//! the bind placeholder, is [`Dialect`]'s.

use std::fmt::Write;
use std::str::FromStr;
use std::sync::Once;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::migrate::Migrator;
use sqlx::{AnyPool, Row};

static POSTGRES: Migrator = sqlx::migrate!("migrations/postgres");
static SQLITE: Migrator = sqlx::migrate!("migrations/sqlite");

/// An order as the database stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderRow {
    pub order_id: String,
    pub sku: String,
    pub sale_epoch: i64,
    pub user_id: String,
    pub quantity: i64,
    /// When Redis recorded the purchase (the stream entry's time).
    pub ordered_at_ms: i64,
}

/// Why the database did not store a batch.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Unreachable, shutting down, busy: retried until it is back.
    #[error("the orders database is unavailable: {0}")]
    Unavailable(sqlx::Error),
    /// The database refused the rows themselves.
    #[error("the orders database refused the rows: {0}")]
    Refused(sqlx::Error),
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        if unavailable(&err) {
            Self::Unavailable(err)
        } else {
            Self::Refused(err)
        }
    }
}

/// Whether an error says the database is away or busy, not that it refused
/// what was sent: connection failures, PostgreSQL's connection (08),
/// operator-intervention (57) and resource (53) classes, SQLite's busy and
/// locked codes.
fn unavailable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08")
                || code.starts_with("57")
                || code.starts_with("53")
                || code == "5"
                || code == "6"
        }),
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        _ => false,
    }
}

/// Which database a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Postgres,
    Sqlite,
}

impl Dialect {
    fn of(url: &str) -> Option<Self> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(Self::Postgres)
        } else if url.starts_with("sqlite:") {
            Some(Self::Sqlite)
        } else {
            None
        }
    }

    /// The `n`th (from 1) bind placeholder.
    fn placeholder(self, out: &mut String, n: usize) {
        let _ = match self {
            Self::Postgres => write!(out, "${n}"),
            Self::Sqlite => write!(out, "?{n}"),
        };
    }
}

/// A sale's rows of one epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochRows {
    pub sale_epoch: u64,
    pub rows: u64,
    pub units: u64,
}

/// The orders database.
#[derive(Clone)]
pub struct OrderStore {
    pool: AnyPool,
    dialect: Dialect,
}

impl OrderStore {
    /// Checks the URL; nothing connects yet.
    pub fn new(url: &str) -> Result<Self, String> {
        static DRIVERS: Once = Once::new();
        DRIVERS.call_once(sqlx::any::install_default_drivers);
        let dialect = Dialect::of(url)
            .ok_or_else(|| format!("{url:?} is neither postgres://... nor sqlite://PATH"))?;
        let url = match dialect {
            // Made when missing, as `make run`'s `sqlite://.run/orders.db` is.
            Dialect::Sqlite if !url.contains("mode=") => {
                let separator = if url.contains('?') { '&' } else { '?' };
                format!("{url}{separator}mode=rwc")
            }
            _ => url.to_owned(),
        };
        let options = AnyConnectOptions::from_str(&url).map_err(|err| err.to_string())?;
        let pool = AnyPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(2))
            .connect_lazy_with(options);
        Ok(Self { pool, dialect })
    }

    /// Creates or updates the table (the embedded migrations; each runs
    /// once, whichever worker gets there first). SQLite is put in WAL mode,
    /// so readers (reconcile, `sqlite3`) do not block the hand-off.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let migrator = match self.dialect {
            Dialect::Postgres => &POSTGRES,
            Dialect::Sqlite => {
                sqlx::query("PRAGMA journal_mode=WAL")
                    .execute(&self.pool)
                    .await?;
                &SQLITE
            }
        };
        migrator.run(&self.pool).await.map_err(|err| match err {
            sqlx::migrate::MigrateError::Execute(err) => StoreError::from(err),
            other => StoreError::Refused(sqlx::Error::Migrate(Box::new(other))),
        })
    }

    /// Stores `rows` in one transaction; an order already stored is left as
    /// it is (`ON CONFLICT (order_id) DO NOTHING`, which both databases
    /// have). Returns how many rows are new.
    pub async fn insert(&self, rows: &[OrderRow]) -> Result<u64, StoreError> {
        if rows.is_empty() {
            return Ok(0);
        }
        let mut sql = String::from(
            "INSERT INTO orders (order_id, sku, sale_epoch, user_id, quantity, ordered_at_ms) VALUES ",
        );
        const COLUMNS: usize = 6;
        for row in 0..rows.len() {
            sql.push_str(if row == 0 { "(" } else { ", (" });
            for column in 0..COLUMNS {
                if column > 0 {
                    sql.push_str(", ");
                }
                self.dialect
                    .placeholder(&mut sql, row * COLUMNS + column + 1);
            }
            sql.push(')');
        }
        sql.push_str(" ON CONFLICT (order_id) DO NOTHING");
        let mut query = sqlx::query(&sql);
        for row in rows {
            query = query
                .bind(row.order_id.as_str())
                .bind(row.sku.as_str())
                .bind(row.sale_epoch)
                .bind(row.user_id.as_str())
                .bind(row.quantity)
                .bind(row.ordered_at_ms);
        }
        let mut transaction = self.pool.begin().await?;
        let inserted = query.execute(&mut *transaction).await?.rows_affected();
        transaction.commit().await?;
        Ok(inserted)
    }

    /// Every sku with rows.
    pub async fn skus(&self) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query("SELECT DISTINCT sku FROM orders ORDER BY sku")
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .filter_map(|row| row.try_get::<String, _>(0).ok())
            .collect())
    }

    /// A sale's rows and units, per epoch.
    pub async fn epochs(&self, sku: &str) -> Result<Vec<EpochRows>, StoreError> {
        let mut sql = String::from(
            "SELECT sale_epoch, COUNT(*), CAST(COALESCE(SUM(quantity), 0) AS BIGINT) \
             FROM orders WHERE sku = ",
        );
        self.dialect.placeholder(&mut sql, 1);
        sql.push_str(" GROUP BY sale_epoch ORDER BY sale_epoch");
        let rows = sqlx::query(&sql).bind(sku).fetch_all(&self.pool).await?;
        let number = |row: &sqlx::any::AnyRow, column: usize| {
            row.try_get::<i64, _>(column)
                .ok()
                .and_then(|value| u64::try_from(value).ok())
                .unwrap_or(0)
        };
        Ok(rows
            .iter()
            .map(|row| EpochRows {
                sale_epoch: number(row, 0),
                rows: number(row, 1),
                units: number(row, 2),
            })
            .collect())
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}
