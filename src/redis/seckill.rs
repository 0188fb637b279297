//! Typed wrappers for the flash-sale scripts and reads, and the Redis names of one sale's state.

use super::locks::PlainRelease;
use super::scripts::{PURCHASE, RATE_LIMIT, RESET_SALE, Reply};
use super::{BackendError, Connection};

/// The Redis names of one sale's state, all hash-tagged `{<sku>}` so the
/// purchase script's keys share one Redis Cluster slot.
#[derive(Debug, Clone)]
pub struct SaleKeys {
    /// Hash: stock, initial_stock, sold, per_user_limit, epoch, orders.
    pub sale: String,
    /// Hash: user id -> units bought.
    pub users: String,
    /// Hash: Idempotency-Key -> `order_id|user_id|quantity|stock_left`.
    pub idempotency: String,
    /// Stream of orders: order_id, user_id, quantity, idempotency_key.
    pub orders: String,
    /// Hash: user id -> `order_id:quantity,...`, that user's orders.
    pub by_user: String,
    /// Set: the old epochs' order streams the hand-off is still draining.
    pub draining: String,
    /// Stream: the orders the hand-off could not store.
    pub dead_letters: String,
    /// Hash: transfers of stock this segment sent and has not settled.
    pub moving_out: String,
    /// Hash: transfers of stock this segment took (kept for the epoch).
    pub moved_in: String,
}

impl SaleKeys {
    /// The keys of a sale, which are also those of its first segment.
    pub fn new(prefix: &str, sku: &str) -> Self {
        Self::named(format!("{prefix}sale:{{{sku}}}"))
    }

    /// The keys of one of a segmented sale's other segments, hash-tagged
    /// `{<sku>#<tag>}`: a slot of its own. (`#` is in no sku, so no sale's
    /// keys are ever another's segment's.)
    pub fn segment(prefix: &str, sku: &str, tag: &str) -> Self {
        Self::named(format!("{prefix}sale-segment:{{{sku}#{tag}}}"))
    }

    fn named(sale: String) -> Self {
        Self {
            moving_out: format!("{sale}:moving-out"),
            moved_in: format!("{sale}:moved-in"),
            users: format!("{sale}:users"),
            idempotency: format!("{sale}:idem"),
            orders: format!("{sale}:orders"),
            by_user: format!("{sale}:by-user"),
            draining: format!("{sale}:draining"),
            dead_letters: format!("{sale}:orders:dead"),
            sale,
        }
    }

    /// Adds the five keys in the order `purchase.lua` and `reset_sale.lua`
    /// both declare them first (`KEYS[1]` to `KEYS[5]`).
    /// The five keys the sale's scripts start with, in their order.
    fn names(&self) -> [&str; 5] {
        [
            &self.sale,
            &self.users,
            &self.idempotency,
            &self.orders,
            &self.by_user,
        ]
    }
}

/// What `purchase.lua` may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PurchaseMode {
    /// Buy, or replay an order recorded under the key.
    Buy,
    /// Only replay: nothing new is bought.
    ReplayOnly,
}

/// The buyer's lock, for `purchase.lua` to release once its answer is
/// final, as `release_plain.lua` would (`lua/lib/plain.lua`).
#[derive(Debug, Clone, Copy)]
pub struct BuyerLock<'a> {
    pub release: &'a PlainRelease,
    /// Whether `sold-out` is a final answer (a sale of one segment).
    pub sold_out_is_final: bool,
}

/// What `purchase.lua` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PurchaseReply {
    Ordered(RecordedOrder),
    Replayed(RecordedOrder),
    /// Only a replay was asked for, and nothing is recorded under the key.
    NotRecorded,
    /// The segment's epoch is not the one the gateway placed the buyer by:
    /// the sale was reset, and its segments may have changed.
    StaleLayout,
    SoldOut {
        stock: u64,
        epoch: u64,
    },
    LimitExceeded,
    NoSale,
    KeyReused,
}

/// An order as the script reports it; `epoch` is the sale's at that moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedOrder {
    pub order_id: String,
    pub quantity: u64,
    pub stock_left: u64,
    pub epoch: u64,
}

/// A sale's state, read from its hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaleState {
    pub stock: u64,
    pub initial_stock: u64,
    pub sold: u64,
    pub per_user_limit: u64,
    pub orders: u64,
    /// Orders the hand-off stored; `None` when no hand-off reads the sale.
    pub stored: Option<u64>,
    /// Purchases refused, as the instances counted them.
    pub refused: Refused,
    /// The slots (segments) the sale's stock and records are spread over.
    pub segments: u64,
}

/// Purchases of a sale refused, by why (counted by each instance and
/// added to the sale's hash a few times a second).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Refused {
    pub sold_out: u64,
    pub limit_exceeded: u64,
    pub rate_limited: u64,
}

impl Refused {
    /// The sale hash's field of each count, in the order of [`Refused::counts`].
    pub const FIELDS: [&'static str; 3] = [
        "refused_sold_out",
        "refused_limit_exceeded",
        "refused_rate_limited",
    ];

    pub fn counts(&self) -> [u64; 3] {
        [self.sold_out, self.limit_exceeded, self.rate_limited]
    }

    pub fn is_empty(&self) -> bool {
        self.counts() == [0; 3]
    }
}

/// What a reset must know of the order hand-off: its consumer group, and
/// whether a hand-off works on this Redis (so orders are kept for it).
#[derive(Debug, Clone, Copy)]
pub struct HandoffTerms<'a> {
    pub group: &'a str,
    pub in_use: bool,
}

/// What a reset did: the new epoch, and whether a hand-off reads the sale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResetReply {
    pub epoch: u64,
    pub handoff: bool,
}

/// One entry of a sale's order stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderEntry {
    pub order_id: String,
    pub user_id: String,
    pub quantity: u64,
}

/// The answer of `rate_limit.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateReply {
    pub allowed: bool,
    pub remaining: u64,
    pub retry_after_ms: u64,
    pub reset_ms: u64,
}

/// Runs `purchase.lua` in `mode`, in the segment `keys` names, placed by
/// the sale's `epoch` (`None`: whatever the segment's), releasing the
/// buyer's lock with a final answer where given one. Returns the reply,
/// and whether the lock's hold was given up (when not, the caller
/// releases it as it would have).
pub async fn purchase(
    conn: &mut Connection,
    keys: &SaleKeys,
    user_id: &str,
    quantity: u64,
    idempotency_key: Option<&str>,
    order_id: &str,
    (mode, epoch, lock): (PurchaseMode, Option<u64>, Option<BuyerLock<'_>>),
) -> Result<(PurchaseReply, bool), BackendError> {
    let mut names: Vec<&str> = keys.names().to_vec();
    if let Some(lock) = &lock {
        names.extend(lock.release.keys.iter().map(String::as_str));
    }
    let mut invocation = PURCHASE.call_with_keys(&names);
    invocation
        .arg(user_id)
        .arg(quantity)
        .arg(idempotency_key.unwrap_or(""))
        .arg(order_id)
        .arg(match mode {
            PurchaseMode::Buy => "buy",
            PurchaseMode::ReplayOnly => "replay",
        })
        .arg(epoch.map(|epoch| epoch.to_string()).unwrap_or_default());
    if let Some(lock) = lock {
        invocation
            .arg(lock.release.publish)
            .arg(&lock.release.channel)
            .arg(&lock.release.token)
            .arg(if lock.sold_out_is_final { "1" } else { "0" });
    }
    let reply = PURCHASE.run(&invocation, conn).await?;
    // released or holds-left: the hold is given up; not-owner, busy, or
    // none (not a final answer): nothing was done to the lock.
    let released = matches!(reply.text("lock"), Some("released" | "holds-left"));
    let order = |reply: &Reply| {
        Some(RecordedOrder {
            order_id: reply.text("order_id")?.to_owned(),
            quantity: reply.number("quantity")?,
            stock_left: reply.number("stock_left")?,
            epoch: reply.number("epoch")?,
        })
    };
    let reply = PURCHASE.read(&reply, |reply| match reply.code() {
        "ordered" => order(reply).map(PurchaseReply::Ordered),
        "replayed" => order(reply).map(PurchaseReply::Replayed),
        "not-recorded" => Some(PurchaseReply::NotRecorded),
        "stale-layout" => Some(PurchaseReply::StaleLayout),
        "sold-out" => Some(PurchaseReply::SoldOut {
            stock: reply.number("stock")?,
            epoch: reply.number("epoch")?,
        }),
        "limit-exceeded" => Some(PurchaseReply::LimitExceeded),
        "no-sale" => Some(PurchaseReply::NoSale),
        "key-reused" => Some(PurchaseReply::KeyReused),
        _ => None,
    })?;
    Ok((reply, released))
}

/// What `reset_sale.lua` sets one segment of a sale to (the whole sale,
/// when it has one segment).
#[derive(Debug, Clone)]
pub struct SegmentReset<'a> {
    /// This segment's share of the stock.
    pub stock: u64,
    /// The sale's stock, every segment's.
    pub initial_stock: u64,
    pub per_user_limit: u64,
    /// The channel told of the reset (the sale's first segment's, so that
    /// it is told once the whole sale is reset), and the sku to tell it.
    pub announce: Option<(&'a str, &'a str)>,
    pub handoff: HandoffTerms<'a>,
    /// The epoch every segment of the sale takes, or `None` for the script
    /// to choose one.
    pub epoch: Option<u64>,
    /// `"<count> <tag>,..."`: the sale's segments, which its first
    /// segment's hash names, or `None` (one segment, or another segment).
    pub layout: Option<String>,
}

/// Runs `reset_sale.lua` on one segment (or the whole one-segment sale).
pub async fn reset(
    conn: &mut Connection,
    keys: &SaleKeys,
    terms: &SegmentReset<'_>,
) -> Result<ResetReply, BackendError> {
    let (channel, sku) = terms.announce.unwrap_or(("", ""));
    let reply = RESET_SALE
        .run(
            RESET_SALE
                .call_with_keys(
                    &[
                        keys.names().as_slice(),
                        &[&keys.draining, &keys.moving_out, &keys.moved_in],
                    ]
                    .concat(),
                )
                .arg(terms.stock)
                .arg(terms.per_user_limit)
                .arg(channel)
                .arg(sku)
                .arg(terms.handoff.group)
                .arg(if terms.handoff.in_use { "1" } else { "0" })
                .arg(
                    terms
                        .epoch
                        .map(|epoch| epoch.to_string())
                        .unwrap_or_default(),
                )
                .arg(terms.layout.as_deref().unwrap_or(""))
                .arg(terms.initial_stock),
            conn,
        )
        .await?;
    RESET_SALE.read(&reply, |reply| match reply.code() {
        "reset" => Some(ResetReply {
            epoch: reply.number("epoch")?,
            handoff: reply.flag("handoff")?,
        }),
        _ => None,
    })
}

/// Reads a sale's hash; `None` when there is no such sale.
pub async fn state(
    conn: &mut Connection,
    keys: &SaleKeys,
) -> Result<Option<SaleState>, BackendError> {
    let fields: Vec<Option<u64>> = redis::cmd("HMGET")
        .arg(&keys.sale)
        .arg(&[
            "stock",
            "initial_stock",
            "sold",
            "per_user_limit",
            "orders",
            "stored",
            "segments",
        ])
        .arg(&Refused::FIELDS)
        .query_async(conn)
        .await?;
    Ok(match fields.as_slice() {
        [
            Some(stock),
            Some(initial_stock),
            Some(sold),
            Some(per_user_limit),
            Some(orders),
            stored,
            segments,
            sold_out,
            limit_exceeded,
            rate_limited,
        ] => Some(SaleState {
            segments: segments.unwrap_or(1),
            stock: *stock,
            initial_stock: *initial_stock,
            sold: *sold,
            per_user_limit: *per_user_limit,
            orders: *orders,
            stored: *stored,
            refused: Refused {
                sold_out: sold_out.unwrap_or(0),
                limit_exceeded: limit_exceeded.unwrap_or(0),
                rate_limited: rate_limited.unwrap_or(0),
            },
        }),
        _ => None,
    })
}

/// Adds an instance's refusal counts to a sale's hash. (Should the sale
/// be gone, the hash holds only these counts, which no read takes for a
/// sale: it has no stock.)
pub async fn add_refusals(
    conn: &mut Connection,
    keys: &SaleKeys,
    refused: Refused,
) -> Result<(), BackendError> {
    let mut pipe = redis::pipe();
    for (field, count) in Refused::FIELDS.iter().zip(refused.counts()) {
        if count > 0 {
            pipe.cmd("HINCRBY")
                .arg(&keys.sale)
                .arg(*field)
                .arg(count)
                .ignore();
        }
    }
    let _: () = pipe.query_async(conn).await?;
    Ok(())
}

/// An `XRANGE` entry: its id and its field-value pairs.
type StreamEntry = (String, Vec<(String, String)>);

/// A page of a sale's order stream, oldest first, and the sale's epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamOrders {
    pub epoch: u64,
    /// How many of its orders the hand-off has stored (they leave the
    /// stream once stored and acknowledged).
    pub stored: u64,
    /// Each order with the time of its purchase (the Redis clock, ms: its
    /// stream entry's id).
    pub orders: Vec<(u64, OrderEntry)>,
}

/// The orders of the sale's stream from the purchase time `after_ms` on
/// (every one of that millisecond), and at least `limit` after it, or all
/// there are: the entries of the last millisecond read are read whole, so
/// that the caller can cut a page in the order of `(time, order id)`.
/// `None` when there is no such sale.
pub async fn orders(
    conn: &mut Connection,
    keys: &SaleKeys,
    after_ms: Option<u64>,
    limit: usize,
) -> Result<Option<StreamOrders>, BackendError> {
    const LAST_SEQ: u64 = u64::MAX;
    let mut read = redis::pipe();
    read.cmd("HMGET").arg(&keys.sale).arg("epoch").arg("stored");
    match after_ms {
        Some(ms) => {
            read.cmd("XRANGE")
                .arg(&keys.orders)
                .arg(format!("{ms}-0"))
                .arg(format!("{ms}-{LAST_SEQ}"));
            read.cmd("XRANGE")
                .arg(&keys.orders)
                .arg(format!("({ms}-{LAST_SEQ}"))
                .arg("+")
                .arg("COUNT")
                .arg(limit);
        }
        None => {
            read.cmd("XRANGE")
                .arg(&keys.orders)
                .arg("-")
                .arg("+")
                .arg("COUNT")
                .arg(limit);
        }
    }
    type Counts = (Option<u64>, Option<u64>);
    let (counts, mut entries, later): (Counts, Vec<StreamEntry>, Vec<StreamEntry>) =
        if after_ms.is_some() {
            read.query_async(conn).await?
        } else {
            let (counts, later): (Counts, Vec<StreamEntry>) = read.query_async(conn).await?;
            (counts, Vec::new(), later)
        };
    let (Some(epoch), stored) = counts else {
        return Ok(None);
    };
    let stored = stored.unwrap_or(0);
    let full = later.len() >= limit;
    entries.extend(later);
    if full && let Some((last, _)) = entries.last() {
        // The rest of the last millisecond, which the count cut.
        let ms = entry_ms(last);
        let rest: Vec<StreamEntry> = redis::cmd("XRANGE")
            .arg(&keys.orders)
            .arg(format!("({last}"))
            .arg(format!("{ms}-{LAST_SEQ}"))
            .query_async(conn)
            .await?;
        entries.extend(rest);
    }
    let orders = entries
        .into_iter()
        .filter_map(|(id, fields)| {
            let field = |name: &str| {
                fields
                    .iter()
                    .find(|(key, _)| key == name)
                    .map(|(_, value)| value.clone())
            };
            let order = OrderEntry {
                order_id: field("order_id")?,
                user_id: field("user_id")?,
                quantity: field("quantity")?.parse().ok()?,
            };
            Some((entry_ms(&id), order))
        })
        .collect();
    Ok(Some(StreamOrders {
        epoch,
        stored,
        orders,
    }))
}

/// The milliseconds part of a stream entry's id (`<ms>-<seq>`).
fn entry_ms(id: &str) -> u64 {
    id.split('-')
        .next()
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(0)
}

/// Every order of one user in a sale, oldest first, from the sale's
/// per-user record (nobody else's orders are read); `None` when there is no
/// such sale.
pub async fn user_orders(
    conn: &mut Connection,
    keys: &SaleKeys,
    user_id: &str,
) -> Result<Option<Vec<OrderEntry>>, BackendError> {
    let (exists, record): (bool, Option<String>) = redis::pipe()
        .cmd("EXISTS")
        .arg(&keys.sale)
        .cmd("HGET")
        .arg(&keys.by_user)
        .arg(user_id)
        .query_async(conn)
        .await?;
    if !exists {
        return Ok(None);
    }
    let orders = record
        .iter()
        .flat_map(|record| record.split(','))
        .filter_map(|entry| {
            let (order_id, quantity) = entry.split_once(':')?;
            Some(OrderEntry {
                order_id: order_id.to_owned(),
                user_id: user_id.to_owned(),
                quantity: quantity.parse().ok()?,
            })
        })
        .collect();
    Ok(Some(orders))
}

/// Runs `rate_limit.lua` on one bucket.
pub async fn rate_limit(
    conn: &mut Connection,
    bucket: &str,
    interval_us: u64,
    burst: u64,
) -> Result<RateReply, BackendError> {
    let reply = RATE_LIMIT
        .run(
            RATE_LIMIT
                .call_with_keys(&[bucket])
                .arg(interval_us)
                .arg(burst),
            conn,
        )
        .await?;
    RATE_LIMIT.read(&reply, |reply| {
        let reset_ms = reply.number("reset_ms")?;
        match reply.code() {
            "allowed" => Some(RateReply {
                allowed: true,
                remaining: reply.number("remaining")?,
                retry_after_ms: 0,
                reset_ms,
            }),
            "refused" => Some(RateReply {
                allowed: false,
                remaining: 0,
                retry_after_ms: reply.number("retry_after_ms")?,
                reset_ms,
            }),
            _ => None,
        }
    })
}
