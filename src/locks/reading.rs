//! Reading locks without holding them: one lock's holders and waiters, and the held locks whose key starts with a prefix, a page at a time, across every master of a Redis Cluster.

use super::error::LockError;
use super::inputs::LockKey;
use super::shared::Locks;
use crate::redis::locks::view::{self, LockSight, LockView};
use crate::redis::scan::{self, ScanCursor};

/// The most locks one page of `GET /locks` asks for.
pub const MAX_LIST: usize = 1000;
/// Where a listing's next page begins (the `next_cursor` a page gave).
pub type ListCursor = ScanCursor;

/// A page of held locks, and where the next page begins (`None`: the last).
#[derive(Debug, Clone)]
pub struct LockPage {
    pub locks: Vec<(LockKey, LockView)>,
    pub next: Option<ListCursor>,
}

impl Locks {
    /// Reads the lock's state, holders and waiters; never a token. A
    /// session's holder's lease is its session's.
    pub async fn inspect(&self, key: &LockKey) -> Result<LockSight, LockError> {
        let mut conn = self.redis().connection().await?;
        let sight = view::inspect(&mut conn, &self.keys(key), self.publish()).await?;
        drop(conn);
        match sight {
            LockSight::Held(view) => Ok(LockSight::Held(self.with_session_leases(view).await?)),
            free => Ok(free),
        }
    }

    /// The leases of sessions' holders as their sessions'.
    async fn with_session_leases(&self, view: LockView) -> Result<LockView, LockError> {
        Ok(self.sessions().with_session_leases(view).await?)
    }

    /// About `limit` held locks whose key starts with `prefix` (any text of
    /// the key alphabet, empty for all), from `cursor` on.
    pub async fn list(
        &self,
        prefix: &str,
        cursor: Option<ListCursor>,
        limit: usize,
    ) -> Result<LockPage, LockError> {
        let stem = format!("{}lock:{{", self.prefix());
        let pattern = format!("{}{}*}}", scan::escape(&stem), scan::escape(prefix));
        let mut conn = self.redis().connection().await?;
        let (names, next) = scan::keys(
            &mut conn,
            &pattern,
            cursor.unwrap_or_default(),
            limit,
            self.prefix(),
        )
        .await?;
        drop(conn);
        let publish = self.publish();
        let sights = names.iter().filter_map(|name| {
            let key = name.strip_prefix(&stem)?.strip_suffix('}')?;
            let key = LockKey::parse(key).ok()?;
            Some(async move {
                let mut conn = self.redis().connection().await?;
                let sight = view::inspect(&mut conn, &self.keys(&key), publish).await?;
                Ok::<_, LockError>((key, sight))
            })
        });
        let mut locks = Vec::new();
        for inspected in futures_util::future::join_all(sights).await {
            // A lock that ended since the walk found it is not listed.
            if let (key, LockSight::Held(view)) = inspected? {
                locks.push((key, self.with_session_leases(view).await?));
            }
        }
        locks.sort_by(|(a, _), (b, _)| a.as_str().cmp(b.as_str()));
        Ok(LockPage { locks, next })
    }
}
