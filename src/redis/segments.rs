//! The Redis side of a sale spread over segments: the Cluster's slots and their masters, each segment's counts, and the three scripts of a transfer of stock between segments.
//!
//! A transfer is three scripts on two slots: `segment_give.lua` on the
//! donor (the units leave its stock for its `moving` count, under a
//! transfer record), `segment_take.lua` on the receiver (the units join its
//! stock once per transfer id) and `segment_settle.lua` on the donor (the
//! record and the `moving` units go). Each is idempotent, so whoever finds
//! a record left by a gateway that died may finish it.

use redis::Value;

use super::scripts::{SEGMENT_GIVE, SEGMENT_SETTLE, SEGMENT_TAKE};
use super::seckill::SaleKeys;
use super::{BackendError, Connection};

/// The number of hash slots of a Redis Cluster.
const SLOTS: u16 = 16384;

/// The Cluster slot of `key`, as `CLUSTER KEYSLOT` computes it: CRC16
/// (XMODEM) of its hash tag, or of the whole key without one.
pub fn keyslot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|b| *b == b'{').and_then(|open| {
        let close = bytes[open + 1..].iter().position(|b| *b == b'}')?;
        (close > 0).then(|| &bytes[open + 1..open + 1 + close])
    });
    crc16(tagged.unwrap_or(bytes)) % SLOTS
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for byte in bytes {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Which master serves each slot: ranges of slots and the master's
/// address, from `CLUSTER SLOTS`.
#[derive(Debug, Clone, Default)]
pub struct SlotOwners(Vec<(u16, u16, String)>);

impl SlotOwners {
    /// The master serving `slot`, if any does.
    pub fn owner(&self, slot: u16) -> Option<&str> {
        self.0
            .iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .map(|(_, _, master)| master.as_str())
    }

    /// Every master, by address.
    pub fn masters(&self) -> Vec<&str> {
        let mut masters: Vec<&str> = self
            .0
            .iter()
            .map(|(_, _, master)| master.as_str())
            .collect();
        masters.sort_unstable();
        masters.dedup();
        masters
    }
}

/// The Cluster's slot table (`CLUSTER SLOTS`).
pub async fn slot_owners(conn: &mut Connection) -> Result<SlotOwners, BackendError> {
    let ranges: Vec<Vec<Value>> = redis::cmd("CLUSTER").arg("SLOTS").query_async(conn).await?;
    let owners = ranges
        .iter()
        .filter_map(|range| {
            let start: u16 = redis::from_redis_value_ref(range.first()?).ok()?;
            let end: u16 = redis::from_redis_value_ref(range.get(1)?).ok()?;
            let Value::Array(node) = range.get(2)? else {
                return None;
            };
            let host: String = redis::from_redis_value_ref(node.first()?).ok()?;
            let port: u16 = redis::from_redis_value_ref(node.get(1)?).ok()?;
            Some((start, end, format!("{host}:{port}")))
        })
        .collect();
    Ok(SlotOwners(owners))
}

/// What a segmented sale's first hash says of its segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutFields {
    pub epoch: u64,
    pub initial_stock: u64,
    pub per_user_limit: u64,
    /// The other segments' tags, in order (none for a one-segment sale).
    pub tags: Vec<String>,
}

/// Reads the layout of a sale from its first hash; `None` when there is
/// no such sale.
pub async fn layout(
    conn: &mut Connection,
    keys: &SaleKeys,
) -> Result<Option<LayoutFields>, BackendError> {
    let mut get = redis::cmd("HMGET");
    get.arg(&keys.sale)
        .arg(&["epoch", "initial_stock", "per_user_limit", "segment_tags"]);
    let (epoch, initial_stock, per_user_limit, tags): (
        Option<u64>,
        Option<u64>,
        Option<u64>,
        Option<String>,
    ) = conn.query_at_key(&get, &keys.sale).await?;
    let (Some(epoch), Some(initial_stock), Some(per_user_limit)) =
        (epoch, initial_stock, per_user_limit)
    else {
        return Ok(None);
    };
    let tags = tags
        .iter()
        .flat_map(|tags| tags.split(','))
        .filter(|tag| !tag.is_empty())
        .map(str::to_owned)
        .collect();
    Ok(Some(LayoutFields {
        epoch,
        initial_stock,
        per_user_limit,
        tags,
    }))
}

/// The set of every tag a sale's segments ever had (beside its first
/// hash): the hand-off finds the streams of retired segments there.
fn known_tags_key(keys: &SaleKeys) -> String {
    format!("{}:segment-tags", keys.sale)
}

/// Adds `tags` to the sale's known segment tags.
pub async fn remember_tags(
    conn: &mut Connection,
    keys: &SaleKeys,
    tags: &[String],
) -> Result<(), BackendError> {
    if tags.is_empty() {
        return Ok(());
    }
    let key = known_tags_key(keys);
    let _: () = conn
        .query_at_key(redis::cmd("SADD").arg(&key).arg(tags), &key)
        .await?;
    Ok(())
}

/// Every tag the sale's segments ever had, sorted.
pub async fn known_tags(
    conn: &mut Connection,
    keys: &SaleKeys,
) -> Result<Vec<String>, BackendError> {
    let key = known_tags_key(keys);
    let mut tags: Vec<String> = conn
        .query_at_key(redis::cmd("SMEMBERS").arg(&key), &key)
        .await?;
    tags.sort();
    Ok(tags)
}

/// The keys of every segment a sale has (the first is the sale's own),
/// and of those it had before a reset and no longer has, whose old
/// orders the hand-off may still be storing.
pub async fn every_segment(
    conn: &mut Connection,
    prefix: &str,
    sku: &str,
) -> Result<(Vec<SaleKeys>, Vec<SaleKeys>), BackendError> {
    let head = SaleKeys::new(prefix, sku);
    let current = layout(conn, &head)
        .await?
        .map(|fields| fields.tags)
        .unwrap_or_default();
    let known = known_tags(conn, &head).await?;
    let retired = known
        .iter()
        .filter(|tag| !current.contains(tag))
        .map(|tag| SaleKeys::segment(prefix, sku, tag))
        .collect();
    let mut segments = vec![head];
    segments.extend(
        current
            .iter()
            .map(|tag| SaleKeys::segment(prefix, sku, tag)),
    );
    Ok((segments, retired))
}

/// One segment's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SegmentCounts {
    pub epoch: u64,
    pub stock: u64,
    pub sold: u64,
    pub orders: u64,
    /// Units sent to another segment and not yet settled.
    pub moving: u64,
    pub stored: Option<u64>,
}

/// Reads a segment's counts; `None` when the segment does not exist.
pub async fn counts(
    conn: &mut Connection,
    keys: &SaleKeys,
) -> Result<Option<SegmentCounts>, BackendError> {
    let mut get = redis::cmd("HMGET");
    get.arg(&keys.sale)
        .arg(&["epoch", "stock", "sold", "orders", "moving", "stored"]);
    let fields: Vec<Option<u64>> = conn.query_at_key(&get, &keys.sale).await?;
    Ok(match fields.as_slice() {
        [
            Some(epoch),
            Some(stock),
            Some(sold),
            Some(orders),
            moving,
            stored,
        ] => Some(SegmentCounts {
            epoch: *epoch,
            stock: *stock,
            sold: *sold,
            orders: *orders,
            moving: moving.unwrap_or(0),
            stored: *stored,
        }),
        _ => None,
    })
}

/// A transfer a donor sent and has not settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    pub id: String,
    pub units: u64,
    /// The receiving segment's index.
    pub receiver: usize,
}

/// The transfers `keys`' segment sent and has not settled.
pub async fn unsettled(
    conn: &mut Connection,
    keys: &SaleKeys,
) -> Result<Vec<Transfer>, BackendError> {
    let records: Vec<(String, String)> = conn
        .query_at_key(
            redis::cmd("HGETALL").arg(&keys.moving_out),
            &keys.moving_out,
        )
        .await?;
    Ok(records
        .into_iter()
        .filter_map(|(id, record)| {
            let mut parts = record.split('|');
            let units = parts.next()?.parse().ok()?;
            let receiver = parts.next()?.parse().ok()?;
            Some(Transfer {
                id,
                units,
                receiver,
            })
        })
        .collect())
}

/// Runs `segment_give.lua`: the units sent (`None` when the donor's epoch
/// is not `epoch`).
pub async fn give(
    conn: &mut Connection,
    donor: &SaleKeys,
    transfer: &Transfer,
    epoch: u64,
) -> Result<Option<u64>, BackendError> {
    let reply = SEGMENT_GIVE
        .run(
            SEGMENT_GIVE
                .call_with_keys(&[&donor.sale, &donor.moving_out])
                .arg(&transfer.id)
                .arg(transfer.units)
                .arg(transfer.receiver)
                .arg(epoch),
            conn,
        )
        .await?;
    SEGMENT_GIVE.read(&reply, |reply| match reply.code() {
        "sent" => Some(Some(reply.number("units")?)),
        "stale" => Some(None),
        _ => None,
    })
}

/// Runs `segment_take.lua`: whether the receiver has the units (`false`
/// when its epoch is not `epoch`).
pub async fn take(
    conn: &mut Connection,
    receiver: &SaleKeys,
    transfer: &Transfer,
    epoch: u64,
) -> Result<bool, BackendError> {
    let reply = SEGMENT_TAKE
        .run(
            SEGMENT_TAKE
                .call_with_keys(&[&receiver.sale, &receiver.moved_in])
                .arg(&transfer.id)
                .arg(transfer.units)
                .arg(epoch),
            conn,
        )
        .await?;
    SEGMENT_TAKE.read(&reply, |reply| match reply.code() {
        "taken" => Some(true),
        "stale" => Some(false),
        _ => None,
    })
}

/// Runs `segment_settle.lua`: the units the donor stopped counting as moving.
pub async fn settle(
    conn: &mut Connection,
    donor: &SaleKeys,
    id: &str,
) -> Result<u64, BackendError> {
    let reply = SEGMENT_SETTLE
        .run(
            SEGMENT_SETTLE
                .call_with_keys(&[&donor.sale, &donor.moving_out])
                .arg(id),
            conn,
        )
        .await?;
    SEGMENT_SETTLE.read(&reply, |reply| match reply.code() {
        "settled" => reply.number("units"),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyslot_agrees_with_redis() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(keyslot("foo"), 12182);
        assert_eq!(keyslot("123456789"), 12739);
        assert_eq!(keyslot("{user1000}.following"), keyslot("user1000"));
        assert_eq!(keyslot("foo{}{bar}"), keyslot("foo{}{bar}"));
        assert_eq!(keyslot("a{}"), crc16(b"a{}") % SLOTS);
    }
}
