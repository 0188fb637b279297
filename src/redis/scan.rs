//! Walking the keys that match a pattern, a page at a time, on one Redis or on every master of a cluster.

use super::{BackendError, Connection};

/// Where a walk of the keys stands: which primary (in the order
/// `Connection::primaries` gives) and `SCAN`'s cursor on it, and, when a
/// page ended inside a batch (`SCAN` gave more keys than the page had room
/// for), the name of the Redis list that keeps the batch's other keys for
/// the next page.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScanCursor {
    pub primary: usize,
    pub cursor: u64,
    pub rest: Option<String>,
}

impl ScanCursor {
    /// What [`ScanCursor::to_text`] writes, as a regular expression.
    pub const PATTERN: &str = r"^[0-9]{1,20}\.[0-9]{1,20}(\.[0-9a-fA-F]{32})?$";

    /// The cursor as a client passes it back: `<primary>.<cursor>`, and
    /// `.<id of the kept keys>` when a page ended inside a batch.
    pub fn to_text(&self) -> String {
        match &self.rest {
            None => format!("{}.{}", self.primary, self.cursor),
            Some(rest) => format!("{}.{}.{rest}", self.primary, self.cursor),
        }
    }

    /// A cursor as [`ScanCursor::to_text`] wrote it.
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('.');
        let primary = parts.next()?.parse().ok()?;
        let cursor = parts.next()?.parse().ok()?;
        let rest = match parts.next() {
            None => None,
            Some(id) if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) => {
                Some(id.to_ascii_lowercase())
            }
            Some(_) => return None,
        };
        parts.next().is_none().then_some(Self {
            primary,
            cursor,
            rest,
        })
    }
}

/// The keys `SCAN` looks at per call, whatever the page's size: a prefix
/// few keys match would otherwise take a round trip per handful of keys.
const SCAN_BATCH: usize = 1000;

/// How long the keys left of a batch wait for the page that lists them.
const REST_KEPT_MS: u64 = 600_000;

/// At most `wanted` keys matching `pattern`, from `from` on, and where the
/// next page begins (`None` at the end).
///
/// The pages walk the keys exactly as one `SCAN` iteration does, so they
/// keep its promise: a key that matches from the first page to the last
/// is listed (once, unless Redis shrinks its key table meanwhile; a key
/// added or removed during the walk may be listed or not). A page never
/// runs a batch again: when `SCAN` gives more keys than the page has room
/// for, the others wait for the next page in a Redis list named
/// `<scratch>listing:<id>` (kept ten minutes), and the walk goes on from
/// the cursor after the batch.
pub async fn keys(
    conn: &mut Connection,
    pattern: &str,
    from: ScanCursor,
    wanted: usize,
    scratch: &str,
) -> Result<(Vec<String>, Option<ScanCursor>), BackendError> {
    let primaries = conn.primaries().await?;
    let mut found = Vec::new();
    let mut at = from;
    if let Some(rest) = at.rest.take() {
        let name = format!("{scratch}listing:{rest}");
        let mut pop = redis::cmd("LPOP");
        pop.arg(&name).arg(wanted);
        let kept: Option<Vec<String>> = pop.query_async(conn).await?;
        found.extend(kept.unwrap_or_default());
        let left: u64 = redis::cmd("LLEN").arg(&name).query_async(conn).await?;
        if left > 0 {
            return Ok((
                found,
                Some(ScanCursor {
                    rest: Some(rest),
                    ..at
                }),
            ));
        }
    }
    while found.len() < wanted
        && let Some(primary) = primaries.get(at.primary)
    {
        let mut scan = redis::cmd("SCAN");
        scan.arg(at.cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_BATCH);
        let (next, mut batch): (u64, Vec<String>) = conn.query_on(primary, &scan).await?;
        at = if next == 0 {
            ScanCursor {
                primary: at.primary + 1,
                ..ScanCursor::default()
            }
        } else {
            ScanCursor {
                primary: at.primary,
                cursor: next,
                rest: None,
            }
        };
        let room = wanted - found.len();
        if batch.len() > room {
            let others = batch.split_off(room);
            found.extend(batch);
            let rest = uuid::Uuid::new_v4().simple().to_string();
            keep_rest(conn, &format!("{scratch}listing:{rest}"), &others).await?;
            return Ok((
                found,
                Some(ScanCursor {
                    rest: Some(rest),
                    ..at
                }),
            ));
        }
        found.extend(batch);
    }
    let more = at.primary < primaries.len();
    Ok((found, more.then_some(at)))
}

/// Keeps a batch's keys that did not fit on the page, for the next one.
async fn keep_rest(conn: &mut Connection, name: &str, keys: &[String]) -> Result<(), BackendError> {
    let mut keep = redis::pipe();
    keep.cmd("RPUSH")
        .arg(name)
        .arg(keys)
        .ignore()
        .cmd("PEXPIRE")
        .arg(name)
        .arg(REST_KEPT_MS)
        .ignore();
    keep.query_async::<()>(conn).await?;
    Ok(())
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
        for rest in [None, Some("0f3a6e1c9b2d4e5f8a7b6c5d4e3f2a1b".to_owned())] {
            let cursor = ScanCursor {
                primary: 2,
                cursor: 1234,
                rest,
            };
            assert_eq!(ScanCursor::parse(&cursor.to_text()), Some(cursor));
        }
        for bad in [
            "nope",
            "1",
            "1.2.3",
            "1.2.0f3a6e1c9b2d4e5f8a7b6c5d4e3f2a1g",
            "-1.2",
            "1..3",
        ] {
            assert_eq!(ScanCursor::parse(bad), None, "{bad}");
        }
        assert_eq!(escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
