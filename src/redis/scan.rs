//! Walking the keys that match a pattern, a page at a time, on one Redis or on every master of a cluster.

use super::{BackendError, Connection};

/// Where a walk of the keys stands: which primary (in the order
/// `Connection::primaries` gives), `SCAN`'s cursor on it, and how many of
/// the keys that cursor's batch gives were already listed (a page ends
/// inside a batch when the batch has more keys than the page has room for).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScanCursor {
    pub primary: usize,
    pub cursor: u64,
    pub skip: usize,
}

impl ScanCursor {
    /// The cursor as a client passes it back: `<primary>.<cursor>.<skip>`.
    pub fn to_text(self) -> String {
        format!("{}.{}.{}", self.primary, self.cursor, self.skip)
    }

    /// A cursor as [`ScanCursor::to_text`] wrote it.
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('.');
        let cursor = Self {
            primary: parts.next()?.parse().ok()?,
            cursor: parts.next()?.parse().ok()?,
            skip: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(cursor)
    }
}

/// The keys `SCAN` looks at per call, whatever the page's size: a prefix
/// few keys match would otherwise take a round trip per handful of keys.
const SCAN_BATCH: usize = 1000;

/// At most `wanted` keys matching `pattern`, from `from` on, and where the
/// next page begins (`None` at the end). A page that ends inside a `SCAN`
/// batch resumes by running that batch again and skipping what it listed:
/// `SCAN` gives the same batch for the same cursor while the keyspace is
/// not resized (and, as always with `SCAN`, a key added or removed during
/// the walk may be listed or not).
pub async fn keys(
    conn: &mut Connection,
    pattern: &str,
    from: ScanCursor,
    wanted: usize,
) -> Result<(Vec<String>, Option<ScanCursor>), BackendError> {
    let primaries = conn.primaries().await?;
    let mut found = Vec::new();
    let mut at = from;
    while let Some(primary) = primaries.get(at.primary) {
        let mut scan = redis::cmd("SCAN");
        scan.arg(at.cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_BATCH);
        let (next, batch): (u64, Vec<String>) = conn.query_on(primary, &scan).await?;
        let fresh: Vec<String> = batch.into_iter().skip(at.skip).collect();
        let room = wanted - found.len();
        if fresh.len() > room {
            found.extend(fresh.into_iter().take(room));
            let skip = at.skip + room;
            return Ok((found, Some(ScanCursor { skip, ..at })));
        }
        found.extend(fresh);
        at = if next == 0 {
            ScanCursor {
                primary: at.primary + 1,
                ..ScanCursor::default()
            }
        } else {
            ScanCursor {
                primary: at.primary,
                cursor: next,
                skip: 0,
            }
        };
        if found.len() == wanted {
            break;
        }
    }
    let more = at.primary < primaries.len();
    Ok((found, more.then_some(at)))
}

/// `text` with the glob characters of a `SCAN MATCH` pattern escaped.
pub fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_globs_are_escaped() {
        let cursor = ScanCursor {
            primary: 2,
            cursor: 1234,
            skip: 7,
        };
        assert_eq!(ScanCursor::parse(&cursor.to_text()), Some(cursor));
        for bad in ["nope", "1.2", "1.2.3.4", "-1.2.3", "1..3"] {
            assert_eq!(ScanCursor::parse(bad), None, "{bad}");
        }
        assert_eq!(escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
