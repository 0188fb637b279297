//! The Redis side of the order hand-off: the registry of sales, their order streams, the consumer group's reads, acknowledgements, claims, dead letters and trimming.
//!
//! Every command names its stream (or the sale's keys, which share its
//! `{<sku>}` hash tag), so in a Redis Cluster each goes to the master of
//! that sale's slot.

use redis::Value;

use super::scan::{self, ScanCursor};
use super::scripts::{ORDERS_ACK, ORDERS_DEAD_LETTER, ORDERS_TIDY};
use super::seckill::SaleKeys;
use super::{BackendError, Connection};

/// The consumer group every hand-off worker reads the order streams in.
pub const GROUP: &str = "lockgate-orders";

/// The set of every sale's sku, written before a sale is created, so a
/// worker finds sales created while it runs.
fn registry(prefix: &str) -> String {
    format!("{prefix}sales")
}

/// The key a hand-off worker sets when it starts: from then on, a sale's
/// reset keeps orders not yet stored, even of a sale no worker has joined.
fn in_use(prefix: &str) -> String {
    format!("{prefix}orders-handoff")
}

/// Marks the order hand-off as working on this Redis.
pub async fn mark_in_use(conn: &mut Connection, prefix: &str) -> Result<(), BackendError> {
    let key = in_use(prefix);
    let _: () = conn
        .query_at_key(redis::cmd("SET").arg(&key).arg(1), &key)
        .await?;
    Ok(())
}

/// Whether an order hand-off has worked on this Redis.
pub async fn is_in_use(conn: &mut Connection, prefix: &str) -> Result<bool, BackendError> {
    let key = in_use(prefix);
    Ok(conn
        .query_at_key(redis::cmd("EXISTS").arg(&key), &key)
        .await?)
}

/// Registers a sale (before it is created or reset).
pub async fn register(conn: &mut Connection, prefix: &str, sku: &str) -> Result<(), BackendError> {
    let key = registry(prefix);
    let _: () = conn
        .query_at_key(redis::cmd("SADD").arg(&key).arg(sku), &key)
        .await?;
    Ok(())
}

/// Every registered sale.
pub async fn registered(conn: &mut Connection, prefix: &str) -> Result<Vec<String>, BackendError> {
    let key = registry(prefix);
    let mut skus: Vec<String> = conn
        .query_at_key(redis::cmd("SMEMBERS").arg(&key), &key)
        .await?;
    skus.sort();
    Ok(skus)
}

/// Registers the sales made before the registry was (by their hashes, on
/// every primary); returns how many there are.
pub async fn register_existing(conn: &mut Connection, prefix: &str) -> Result<usize, BackendError> {
    let pattern = format!("{prefix}sale:{{*}}");
    let start = format!("{prefix}sale:{{");
    let mut from = ScanCursor::default();
    let mut found = 0;
    loop {
        let (keys, next) = scan::keys(conn, &pattern, from, 1000, prefix).await?;
        for key in keys {
            // The sale's hash, not its other keys (`...}:orders` and the rest).
            if let Some(sku) = key
                .strip_prefix(&start)
                .and_then(|rest| rest.strip_suffix('}'))
            {
                register(conn, prefix, sku).await?;
                found += 1;
            }
        }
        match next {
            Some(cursor) => from = cursor,
            None => return Ok(found),
        }
    }
}

/// The old epochs' streams of a sale still being drained.
pub async fn draining(conn: &mut Connection, keys: &SaleKeys) -> Result<Vec<String>, BackendError> {
    let mut streams: Vec<String> = conn
        .query_at_key(redis::cmd("SMEMBERS").arg(&keys.draining), &keys.draining)
        .await?;
    streams.sort();
    Ok(streams)
}

/// Creates the consumer group on a sale's stream (and the stream, for a
/// sale that exists but has no order yet), from its first entry, and the
/// sale's `stored` count. Returns whether the group is there now: not for a
/// sale that does not exist.
pub async fn join(conn: &mut Connection, keys: &SaleKeys) -> Result<bool, BackendError> {
    let exists: bool = conn
        .query_at_key(redis::cmd("EXISTS").arg(&keys.sale), &keys.sale)
        .await?;
    if !exists {
        return Ok(false);
    }
    let mut create = redis::cmd("XGROUP");
    create
        .arg("CREATE")
        .arg(&keys.orders)
        .arg(GROUP)
        .arg("0")
        .arg("MKSTREAM");
    match conn.query_at_key::<()>(&create, &keys.orders).await {
        Ok(()) => {}
        Err(err) if err.code() == Some("BUSYGROUP") => return Ok(true),
        Err(err) => return Err(err.into()),
    }
    let _: () = conn
        .query_at_key(
            redis::cmd("HSETNX").arg(&keys.sale).arg("stored").arg(0),
            &keys.sale,
        )
        .await?;
    Ok(true)
}

/// One entry of an order stream as read: its id, and its fields, or
/// `None` when the entry is gone from the stream while still pending
/// (trimmed or deleted: Redis gives its id with no fields).
pub type Delivery = (String, Option<Vec<(String, String)>>);

/// Where to read a stream from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFrom {
    /// Entries never delivered to anyone (`>`).
    New,
    /// This consumer's own pending entries, delivered again (`0`).
    OwnPending,
}

/// Up to `count` entries of `stream` for `consumer`.
pub async fn read(
    conn: &mut Connection,
    stream: &str,
    consumer: &str,
    from: ReadFrom,
    count: usize,
) -> Result<Vec<Delivery>, BackendError> {
    let mut read = redis::cmd("XREADGROUP");
    read.arg("GROUP")
        .arg(GROUP)
        .arg(consumer)
        .arg("COUNT")
        .arg(count)
        .arg("STREAMS")
        .arg(stream)
        .arg(match from {
            ReadFrom::New => ">",
            ReadFrom::OwnPending => "0",
        });
    let reply: Value = conn.query_at_key(&read, stream).await?;
    // [[stream, [[id, fields | nil], ...]]], or nil when nothing is there.
    let streams = match reply {
        Value::Nil => return Ok(Vec::new()),
        Value::Array(streams) => streams,
        Value::Map(pairs) => pairs
            .into_iter()
            .map(|(name, entries)| Value::Array(vec![name, entries]))
            .collect(),
        other => return Err(unexpected("XREADGROUP", &other)),
    };
    let mut deliveries = Vec::new();
    for one in streams {
        let Value::Array(mut parts) = one else {
            return Err(unexpected("XREADGROUP", &one));
        };
        if let Some(Value::Array(entries)) = parts.pop() {
            deliveries.extend(entries.into_iter().filter_map(delivery));
        }
    }
    Ok(deliveries)
}

/// What `XAUTOCLAIM` took over: the entries, the ids whose entries were
/// gone (Redis 7 drops them from the pending list and names them), and the
/// cursor to go on from (`None` at the end).
pub struct Claimed {
    pub entries: Vec<Delivery>,
    pub gone: Vec<String>,
    pub next: Option<String>,
}

/// Takes over up to `count` entries of `stream` idle for at least
/// `min_idle_ms` in anyone's hands, from `cursor` on.
pub async fn claim(
    conn: &mut Connection,
    stream: &str,
    consumer: &str,
    min_idle_ms: u64,
    cursor: &str,
    count: usize,
) -> Result<Claimed, BackendError> {
    let mut claim = redis::cmd("XAUTOCLAIM");
    claim
        .arg(stream)
        .arg(GROUP)
        .arg(consumer)
        .arg(min_idle_ms)
        .arg(cursor)
        .arg("COUNT")
        .arg(count);
    let reply: Value = conn.query_at_key(&claim, stream).await?;
    let Value::Array(mut parts) = reply else {
        return Err(unexpected("XAUTOCLAIM", &reply));
    };
    // Redis 7: [next cursor, entries, ids of entries gone]; 6.2: no third.
    let gone = match parts.len() {
        3 => parts.pop(),
        _ => None,
    };
    let (Some(entries), Some(next)) = (parts.pop(), parts.pop()) else {
        return Err(unexpected("XAUTOCLAIM", &Value::Array(parts)));
    };
    let next: String =
        redis::from_redis_value(next).map_err(|_| unexpected("XAUTOCLAIM", &Value::Nil))?;
    let entries = match entries {
        Value::Array(entries) => entries.into_iter().filter_map(delivery).collect(),
        _ => Vec::new(),
    };
    let gone = match gone {
        Some(value) => {
            redis::from_redis_value(value).map_err(|_| unexpected("XAUTOCLAIM", &Value::Nil))?
        }
        None => Vec::new(),
    };
    Ok(Claimed {
        entries,
        gone,
        next: (next != "0-0").then_some(next),
    })
}

fn delivery(entry: Value) -> Option<Delivery> {
    let Value::Array(mut parts) = entry else {
        return None;
    };
    let fields = parts.pop()?;
    let id: String = redis::from_redis_value(parts.pop()?).ok()?;
    let fields = match fields {
        Value::Nil => None,
        other => Some(redis::from_redis_value(other).ok()?),
    };
    Some((id, fields))
}

fn unexpected(command: &'static str, reply: &Value) -> BackendError {
    BackendError::UnexpectedReply {
        script: command,
        reply: format!("{reply:?}"),
    }
}

/// How many times `id` was delivered (0 when it is not pending).
pub async fn deliveries(
    conn: &mut Connection,
    stream: &str,
    id: &str,
) -> Result<u64, BackendError> {
    let mut pending = redis::cmd("XPENDING");
    pending.arg(stream).arg(GROUP).arg(id).arg(id).arg(1);
    let entries: Vec<(String, String, u64, u64)> = conn.query_at_key(&pending, stream).await?;
    Ok(entries.first().map_or(0, |(_, _, _, times)| *times))
}

/// Acknowledges stored entries; with `current`, counts them in the sale's
/// `stored`. Returns how many were acknowledged now.
pub async fn acknowledge(
    conn: &mut Connection,
    stream: &str,
    keys: &SaleKeys,
    current: bool,
    ids: &[String],
) -> Result<u64, BackendError> {
    if ids.is_empty() {
        return Ok(0);
    }
    let reply = ORDERS_ACK
        .run(
            ORDERS_ACK
                .call_with_keys(&[stream, &keys.sale])
                .arg(GROUP)
                .arg(if current { "1" } else { "0" })
                .arg(ids),
            conn,
        )
        .await?;
    ORDERS_ACK.read(&reply, |reply| match reply.code() {
        "acked" => reply.number("count"),
        _ => None,
    })
}

/// Moves an entry that could not be stored to the sale's dead letters, and
/// acknowledges it, in one step. Returns whether it was still pending.
pub async fn dead_letter(
    conn: &mut Connection,
    stream: &str,
    keys: &SaleKeys,
    id: &str,
    reason: &str,
    fields: &[(String, String)],
) -> Result<bool, BackendError> {
    let mut invocation = ORDERS_DEAD_LETTER.call_with_keys(&[stream, &keys.dead_letters]);
    invocation.arg(GROUP).arg(id).arg(reason);
    for (name, value) in fields {
        invocation.arg(name).arg(value);
    }
    let reply = ORDERS_DEAD_LETTER.run(&invocation, conn).await?;
    ORDERS_DEAD_LETTER.read(&reply, |reply| match reply.code() {
        "dead-lettered" => reply.flag("moved"),
        _ => None,
    })
}

/// What tidying a stream found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tidied {
    /// Entries left: pending or not yet delivered.
    pub length: u64,
    /// The oldest entry left.
    pub first: Option<String>,
    /// Consumers removed (gone, with nothing pending).
    pub removed: u64,
}

/// Trims what is stored and acknowledged, removes consumers idle past
/// `idle_limit_ms` with nothing pending, and deletes an old epoch's stream
/// once it is empty (see `orders_tidy.lua`). `None` when the stream has no
/// consumer group.
pub async fn tidy(
    conn: &mut Connection,
    stream: &str,
    keys: &SaleKeys,
    current: bool,
    idle_limit_ms: u64,
    consumer: &str,
) -> Result<Option<Tidied>, BackendError> {
    let reply = ORDERS_TIDY
        .run(
            ORDERS_TIDY
                .call_with_keys(&[stream, &keys.draining])
                .arg(GROUP)
                .arg(if current { "current" } else { "drain" })
                .arg(idle_limit_ms)
                .arg(consumer),
            conn,
        )
        .await?;
    ORDERS_TIDY.read(&reply, |reply| match reply.code() {
        "no-group" => Some(None),
        "tidied" => Some(Some(Tidied {
            length: reply.number("length")?,
            first: Some(reply.text("first")?.to_owned()).filter(|id| !id.is_empty()),
            removed: reply.number("removed")?,
        })),
        _ => None,
    })
}

/// A sale's counts as the hand-off and the reconciliation read them: the
/// epoch, sold, orders, and stored (`None` when no hand-off has joined).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaleCounts {
    pub epoch: u64,
    pub sold: u64,
    pub orders: u64,
    pub stored: Option<u64>,
}

/// A sale's counts; `None` when there is no such sale.
pub async fn counts(
    conn: &mut Connection,
    keys: &SaleKeys,
) -> Result<Option<SaleCounts>, BackendError> {
    let mut get = redis::cmd("HMGET");
    get.arg(&keys.sale)
        .arg(&["epoch", "sold", "orders", "stored"]);
    let fields: Vec<Option<u64>> = conn.query_at_key(&get, &keys.sale).await?;
    Ok(match fields.as_slice() {
        [Some(epoch), Some(sold), Some(orders), stored] => Some(SaleCounts {
            epoch: *epoch,
            sold: *sold,
            orders: *orders,
            stored: *stored,
        }),
        _ => None,
    })
}

/// The entries of a stream not yet stored: pending in a worker's hands,
/// or never delivered (0 when the stream or its group is gone). Entries
/// stored but not yet trimmed do not count.
pub async fn unstored(conn: &mut Connection, stream: &str) -> Result<u64, BackendError> {
    let mut info = redis::cmd("XINFO");
    info.arg("GROUPS").arg(stream);
    let groups: Vec<std::collections::HashMap<String, Value>> =
        match conn.query_at_key(&info, stream).await {
            Ok(groups) => groups,
            Err(err)
                if err.kind()
                    == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError) =>
            {
                return Ok(0);
            }
            Err(err) => return Err(err.into()),
        };
    let Some(group) = groups
        .iter()
        .find(|group| matches!(group.get("name"), Some(Value::BulkString(name)) if name == GROUP.as_bytes()))
    else {
        return Ok(0);
    };
    let number = |field: &str| match group.get(field) {
        Some(Value::Int(n)) => u64::try_from(*n).ok(),
        _ => None,
    };
    let pending = number("pending").unwrap_or(0);
    match number("lag") {
        Some(lag) => Ok(pending + lag),
        // Redis cannot tell the lag (entries were deleted): every entry
        // left counts.
        None => Ok(conn
            .query_at_key(redis::cmd("XLEN").arg(stream), stream)
            .await?),
    }
}

/// The length of a stream (0 when it does not exist).
pub async fn length(conn: &mut Connection, stream: &str) -> Result<u64, BackendError> {
    Ok(conn
        .query_at_key(redis::cmd("XLEN").arg(stream), stream)
        .await?)
}
