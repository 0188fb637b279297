//! The orders database: PostgreSQL or SQLite through sqlx, its embedded migrations, the batch insert, and the reconciliation's counts.
//!
//! Queries are checked at run time (no database is needed to build the
//! crate). A batch goes to PostgreSQL as one array per column (`UNNEST`),
//! to SQLite as one multi-row `INSERT`.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::pool::PoolOptions;
use sqlx::postgres::{PgConnectOptions, PgPool};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

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
        if refuses_the_rows(&err) {
            Self::Refused(err)
        } else {
            Self::Unavailable(err)
        }
    }
}

/// Whether an error is about the rows sent, so that another row could go
/// in where these do not: PostgreSQL's data (22) and integrity (23)
/// classes, SQLite's too-big, constraint, mismatch and range codes, a value
/// that cannot be encoded. Anything else (a database away, read-only, full,
/// without its table) holds for every row: the batch waits, and no order
/// is dead-lettered for it.
fn refuses_the_rows(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            // PostgreSQL's SQLSTATE is five characters; SQLite's extended
            // codes are numbers below 10 000, the primary code in the low byte.
            if code.len() == 5 {
                return code.starts_with("22") || code.starts_with("23");
            }
            code.parse::<u32>()
                .is_ok_and(|code| matches!(code & 0xff, 18 | 19 | 20 | 25))
        }),
        sqlx::Error::Encode(_) | sqlx::Error::TypeNotFound { .. } => true,
        _ => false,
    }
}

/// Whether the SQLite file is still where it was opened: a deleted file is
/// a database gone (until a worker restarts on a new one), never a place to
/// store orders in.
fn still_there(file: &Path) -> Result<(), StoreError> {
    if file.exists() {
        return Ok(());
    }
    Err(StoreError::Unavailable(sqlx::Error::Io(
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "the SQLite file {} is gone; restart the worker once it is back",
                file.display()
            ),
        ),
    )))
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
pub enum OrderStore {
    Postgres(PgPool),
    /// The pool, and the file: a file deleted under the worker would
    /// otherwise take the rows written to it (the connections keep it open).
    Sqlite(SqlitePool, Arc<Path>),
}

/// The query of a sale's rows and units per epoch.
const EPOCHS: &str = "SELECT sale_epoch, COUNT(*), CAST(COALESCE(SUM(quantity), 0) AS BIGINT) \
                      FROM orders WHERE sku = $1 GROUP BY sale_epoch ORDER BY sale_epoch";
const SKUS: &str = "SELECT DISTINCT sku FROM orders ORDER BY sku";

impl OrderStore {
    /// Checks the URL; nothing connects yet. A SQLite file is made when
    /// missing, with its directory.
    pub fn new(url: &str) -> Result<Self, String> {
        Self::open(url, true)
    }

    /// As [`OrderStore::new`], but a SQLite file must exist (a reader's
    /// typo makes no file).
    pub fn existing(url: &str) -> Result<Self, String> {
        Self::open(url, false)
    }

    fn open(url: &str, create: bool) -> Result<Self, String> {
        let options = PoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(2));
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let connect = PgConnectOptions::from_str(url).map_err(|err| err.to_string())?;
            Ok(Self::Postgres(options.connect_lazy_with(connect)))
        } else if url.starts_with("sqlite:") {
            let connect = SqliteConnectOptions::from_str(url)
                .map_err(|err| err.to_string())?
                // Made when missing, as `make run`'s `sqlite://.run/orders.db` is;
                // WAL, so readers (reconcile, `sqlite3`) do not block the hand-off.
                .create_if_missing(create)
                .journal_mode(SqliteJournalMode::Wal);
            // And its directory, which SQLite would not make.
            if let Some(directory) = connect.get_filename().parent()
                && create
                && !directory.as_os_str().is_empty()
            {
                std::fs::create_dir_all(directory)
                    .map_err(|err| format!("cannot make {}: {err}", directory.display()))?;
            }
            let options = SqlitePoolOptions::new()
                .max_connections(4)
                .acquire_timeout(Duration::from_secs(2));
            let file: Arc<Path> = connect.get_filename().into();
            Ok(Self::Sqlite(options.connect_lazy_with(connect), file))
        } else {
            Err(format!(
                "{url:?} is neither postgres://... nor sqlite://PATH"
            ))
        }
    }

    /// Creates or updates the table (the embedded migrations; each runs
    /// once, whichever worker gets there first).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let migrated = match self {
            Self::Postgres(pool) => POSTGRES.run(pool).await,
            Self::Sqlite(pool, _) => SQLITE.run(pool).await,
        };
        migrated.map_err(|err| match err {
            sqlx::migrate::MigrateError::Execute(err) => StoreError::from(err),
            other => StoreError::Refused(sqlx::Error::Migrate(Box::new(other))),
        })
    }

    /// Stores `rows` in one transaction (one statement); an order already
    /// stored is left as it is (`ON CONFLICT (order_id) DO NOTHING`, which
    /// both databases have). Returns how many rows are new. One statement is
    /// one transaction (autocommit): all rows or none, without the round
    /// trips of BEGIN and COMMIT.
    pub async fn insert(&self, rows: &[OrderRow]) -> Result<u64, StoreError> {
        if rows.is_empty() {
            return Ok(0);
        }
        let inserted = match self {
            // Six arrays, one per column, whatever the batch's size: one
            // prepared statement, and six values to bind instead of six a row.
            Self::Postgres(pool) => sqlx::query(
                "INSERT INTO orders (order_id, sku, sale_epoch, user_id, quantity, ordered_at_ms) \
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::text[], $5::bigint[], $6::bigint[]) \
                 ON CONFLICT (order_id) DO NOTHING",
            )
            .bind(rows.iter().map(|row| row.order_id.as_str()).collect::<Vec<_>>())
            .bind(rows.iter().map(|row| row.sku.as_str()).collect::<Vec<_>>())
            .bind(rows.iter().map(|row| row.sale_epoch).collect::<Vec<_>>())
            .bind(rows.iter().map(|row| row.user_id.as_str()).collect::<Vec<_>>())
            .bind(rows.iter().map(|row| row.quantity).collect::<Vec<_>>())
            .bind(rows.iter().map(|row| row.ordered_at_ms).collect::<Vec<_>>())
            .execute(pool)
            .await?
            .rows_affected(),
            Self::Sqlite(pool, file) => {
                still_there(file)?;
                let mut sql = String::from(
                    "INSERT INTO orders (order_id, sku, sale_epoch, user_id, quantity, ordered_at_ms) VALUES ",
                );
                for row in 0..rows.len() {
                    sql.push_str(if row == 0 { "(" } else { ", (" });
                    sql.push_str("?, ?, ?, ?, ?, ?)");
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
                let inserted = query.execute(pool).await?.rows_affected();
                // Deleted meanwhile: the rows went with it; not stored.
                still_there(file)?;
                inserted
            }
        };
        Ok(inserted)
    }

    /// Every sku with rows.
    pub async fn skus(&self) -> Result<Vec<String>, StoreError> {
        Ok(match self {
            Self::Postgres(pool) => sqlx::query_scalar(SKUS).fetch_all(pool).await?,
            Self::Sqlite(pool, _) => sqlx::query_scalar(SKUS).fetch_all(pool).await?,
        })
    }

    /// A sale's rows and units, per epoch.
    pub async fn epochs(&self, sku: &str) -> Result<Vec<EpochRows>, StoreError> {
        let rows: Vec<(i64, i64, i64)> = match self {
            Self::Postgres(pool) => sqlx::query_as(EPOCHS).bind(sku).fetch_all(pool).await?,
            Self::Sqlite(pool, _) => sqlx::query_as(EPOCHS).bind(sku).fetch_all(pool).await?,
        };
        let number = |value: i64| u64::try_from(value).unwrap_or(0);
        Ok(rows
            .into_iter()
            .map(|(epoch, rows, units)| EpochRows {
                sale_epoch: number(epoch),
                rows: number(rows),
                units: number(units),
            })
            .collect())
    }

    pub async fn close(&self) {
        match self {
            Self::Postgres(pool) => pool.close().await,
            Self::Sqlite(pool, _) => pool.close().await,
        }
    }
}
