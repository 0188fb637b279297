//! Watching a lock: a snapshot, then its events as they are written, resumed after a dropped connection (through any instance) with nothing missed or repeated.
//!
//! The events are written to the lock's Redis Stream by the very script
//! that makes each change, while a watch stands (`lua/lib/events.lua`); an
//! instance with watchers on a lock keeps its watch (by tending the lock),
//! hears each event on the lock's events channel, and hands it to its
//! watchers through one [`Hub`] per lock. A watcher resuming after an id
//! reads what it missed from the stream first; ids only grow, so an event
//! both read and heard is given once. When the history no longer has what
//! a watcher missed (trimmed, expired, or never written because nobody
//! watched), it is told `gap` and given a fresh snapshot.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use super::error::LockError;
use super::inputs::LockKey;
use super::sessions::{SessionHandle, Sessions};
use super::waiting::{WaitRefused, Waiting};
use crate::metrics::Metrics;
use crate::redis::Redis;
use crate::redis::locks::LockKeys;
use crate::redis::locks::view::{self, History, LockSight};
use crate::redis::pubsub::{Listener, Subscriber};
use crate::sync::lock;

/// What a watcher is told.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent {
    /// The lock as it is, as of the event `id`.
    Snapshot { id: String, sight: LockSight },
    /// An event: `acquired`, `value`, `released`, `expired`, `revoked`.
    Event {
        id: String,
        kind: String,
        /// Its data: JSON text, as the script wrote it.
        data: String,
    },
    /// The events after the last one seen are no longer kept; a snapshot
    /// follows.
    Gap,
}

/// The entry that marks where the history begins again after nobody
/// watched the lock (never given to a watcher).
const START: &str = "start";

/// How many events a hub holds for a watcher that reads slowly before that
/// watcher reads them from the stream instead.
const HUB_BUFFER: usize = 256;
/// How many events one read of the history returns.
const HISTORY_PAGE: usize = 200;

/// The watchers of one instance, by lock.
#[derive(Clone)]
pub struct Watches(Arc<WatchesState>);

struct WatchesState {
    redis: Redis,
    /// Whose expiry a session's holder's lease shows.
    sessions: Sessions,
    prefix: Arc<str>,
    waiting: Waiting,
    subscriber: Subscriber,
    metrics: Arc<Metrics>,
    /// The hubs with watchers, by the lock's events channel.
    hubs: Mutex<HashMap<String, Weak<Hub>>>,
    open: AtomicUsize,
    /// Cancelled at shutdown: every watcher's stream ends.
    closing: CancellationToken,
}

/// One lock's watchers on this instance.
struct Hub {
    keys: LockKeys,
    /// The lock's events channel, which the hub subscribes.
    channel: String,
    heard: broadcast::Sender<Heard>,
    watches: Weak<WatchesState>,
}

/// What a hub hears and hands on.
#[derive(Debug, Clone)]
enum Heard {
    Event {
        id: String,
        kind: String,
        data: String,
    },
    /// Events may have been missed (the subscription dropped): read the
    /// history.
    CatchUp,
}

impl Watches {
    pub fn new(
        redis: Redis,
        prefix: &str,
        (waiting, sessions): (Waiting, Sessions),
        subscriber: Subscriber,
        metrics: Arc<Metrics>,
    ) -> Self {
        let state = Arc::new(WatchesState {
            redis,
            sessions,
            prefix: prefix.into(),
            waiting,
            subscriber: subscriber.clone(),
            metrics,
            hubs: Mutex::new(HashMap::new()),
            open: AtomicUsize::new(0),
            closing: CancellationToken::new(),
        });
        subscriber.listen(state.clone());
        Self(state)
    }

    /// At shutdown: ends every watcher's stream (its client reconnects,
    /// with `Last-Event-ID`, to another instance).
    pub fn close(&self) {
        self.0.closing.cancel();
    }

    /// Watchers open on this instance now.
    pub fn open(&self) -> usize {
        self.0.open.load(Ordering::Acquire)
    }

    /// Starts watching `key`: from the event after `last_seen` when the
    /// client resumes, else from a snapshot.
    pub async fn watch(
        &self,
        key: &LockKey,
        last_seen: Option<String>,
    ) -> Result<Watcher, LockError> {
        if self.0.closing.is_cancelled() {
            return Err(WaitRefused::ShuttingDown.into());
        }
        let hub = self.hub(key).await;
        let heard = hub.heard.subscribe();
        let restarts = self.0.waiting.watch(&hub.keys);
        let mut watcher = Watcher {
            hub,
            heard,
            restarts,
            last_given: None,
            read_to: None,
            backlog: VecDeque::new(),
            watches: self.clone(),
        };
        self.0.open.fetch_add(1, Ordering::AcqRel);
        watcher.start(last_seen).await?;
        Ok(watcher)
    }

    /// The hub of `key`, made (and its channel subscribed) if none lives.
    async fn hub(&self, key: &LockKey) -> Arc<Hub> {
        let keys = LockKeys::new(&self.0.prefix, key.as_str());
        let channel = keys.events_channel();
        let subscribed = {
            let mut hubs = lock(&self.0.hubs);
            if let Some(hub) = hubs.get(&channel).and_then(Weak::upgrade) {
                return hub;
            }
            let hub = Arc::new(Hub {
                heard: broadcast::channel(HUB_BUFFER).0,
                watches: Arc::downgrade(&self.0),
                keys,
                channel,
            });
            hubs.insert(hub.channel.clone(), Arc::downgrade(&hub));
            (hub.clone(), self.0.subscriber.subscribe(&hub.channel))
        };
        let (hub, confirmation) = subscribed;
        // Events written before the subscription stands are read from the
        // history: the watcher starts from an id read after this.
        let _ = tokio::time::timeout(self.0.redis.timeout(), confirmation).await;
        hub
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        let Some(watches) = self.watches.upgrade() else {
            return;
        };
        let mut hubs = lock(&watches.hubs);
        if hubs
            .get(&self.channel)
            .is_some_and(|hub| hub.strong_count() == 0)
        {
            hubs.remove(&self.channel);
        }
        watches.subscriber.unsubscribe(&self.channel);
    }
}

impl Listener for WatchesState {
    /// An event: `<id> <type> <data>`.
    fn message(&self, channel: &str, payload: &[u8]) {
        let Some(hub) = lock(&self.hubs).get(channel).and_then(Weak::upgrade) else {
            return;
        };
        let text = String::from_utf8_lossy(payload);
        let mut parts = text.splitn(3, ' ');
        let (Some(id), Some(kind), Some(data)) = (parts.next(), parts.next(), parts.next()) else {
            return;
        };
        if serde_json::from_str::<&serde_json::value::RawValue>(data).is_err() {
            return;
        }
        if kind != START {
            self.metrics.lock_event(kind);
        }
        let _ = hub.heard.send(Heard::Event {
            id: id.to_owned(),
            kind: kind.to_owned(),
            data: data.to_owned(),
        });
    }

    fn reconnected(&self) {
        for hub in lock(&self.hubs).values().filter_map(Weak::upgrade) {
            let _ = hub.heard.send(Heard::CatchUp);
        }
    }

    fn resubscribed(&self, channel: &str) {
        if let Some(hub) = lock(&self.hubs).get(channel).and_then(Weak::upgrade) {
            let _ = hub.heard.send(Heard::CatchUp);
        }
    }
}

/// One watcher: its events in order, each once.
pub struct Watcher {
    hub: Arc<Hub>,
    heard: broadcast::Receiver<Heard>,
    /// Counts the times the lock's watch lapsed and began again.
    restarts: watch::Receiver<u64>,
    /// The id of the last event given (`None` before any).
    last_given: Option<String>,
    /// The id of the last event read from the history into the backlog.
    read_to: Option<String>,
    /// Events to give before anything heard since.
    backlog: VecDeque<WatchEvent>,
    watches: Watches,
}

impl Watcher {
    /// Reads where the watcher begins: a snapshot, or what it missed.
    async fn start(&mut self, last_seen: Option<String>) -> Result<(), LockError> {
        let (sight, newest) = self.snapshot().await?;
        let Some(seen) = last_seen else {
            self.backlog
                .push_back(WatchEvent::Snapshot { id: newest, sight });
            return Ok(());
        };
        self.last_given = Some(seen);
        if !self.catch_up().await? {
            self.backlog.push_back(WatchEvent::Gap);
            self.backlog
                .push_back(WatchEvent::Snapshot { id: newest, sight });
        }
        Ok(())
    }

    async fn snapshot(&self) -> Result<(LockSight, String), LockError> {
        let redis = &self.watches.0.redis;
        let mut conn = redis.connection().await?;
        let (sight, id) = view::watch(&mut conn, &self.hub.keys, redis.publish_command()).await?;
        drop(conn);
        // A session's holder's lease is its session's.
        let sight = match sight {
            LockSight::Held(view) => {
                LockSight::Held(self.watches.0.sessions.with_session_leases(view).await?)
            }
            free => free,
        };
        Ok((sight, id))
    }

    /// Reads the history after the last id into the backlog; false when it
    /// has a gap there.
    async fn catch_up(&mut self) -> Result<bool, LockError> {
        let redis = &self.watches.0.redis;
        loop {
            let after = [&self.read_to, &self.last_given]
                .into_iter()
                .flatten()
                .max_by_key(|id| stream_id(id))
                .cloned()
                .unwrap_or_else(|| "0-0".into());
            let mut conn = redis.connection().await?;
            let history = view::history(
                &mut conn,
                &self.hub.keys,
                redis.publish_command(),
                &after,
                HISTORY_PAGE,
            )
            .await?;
            let History::Events { entries, more } = history else {
                return Ok(false);
            };
            for entry in entries {
                self.read_to = Some(entry.id.clone());
                self.backlog.push_back(WatchEvent::Event {
                    id: entry.id,
                    kind: entry.kind,
                    data: entry.data,
                });
            }
            if !more {
                return Ok(true);
            }
        }
    }

    /// A gap: the snapshot as of now follows it.
    async fn restart(&mut self) -> Result<(), LockError> {
        let (sight, id) = self.snapshot().await?;
        self.backlog.push_back(WatchEvent::Gap);
        self.backlog.push_back(WatchEvent::Snapshot { id, sight });
        Ok(())
    }

    /// The next event; `None` when the instance can no longer serve it.
    pub async fn next(&mut self) -> Option<WatchEvent> {
        loop {
            while let Some(event) = self.backlog.pop_front() {
                match &event {
                    WatchEvent::Event { id, .. } if !self.given_after(id) => continue,
                    WatchEvent::Event { kind, .. } if kind == START => {
                        // The history began again after this watcher's
                        // last event: what came between was not written.
                        self.backlog.clear();
                        self.restart().await.ok()?;
                        continue;
                    }
                    WatchEvent::Event { id, .. } => self.last_given = Some(id.clone()),
                    WatchEvent::Snapshot { id, .. } => self.last_given = Some(id.clone()),
                    WatchEvent::Gap => {}
                }
                return Some(self.with_session_lease(event).await);
            }
            tokio::select! {
                () = self.watches.0.closing.cancelled() => return None,
                heard = self.heard.recv() => match heard {
                    Ok(Heard::Event { id, kind, data }) => {
                        self.backlog.push_back(WatchEvent::Event { id, kind, data });
                    }
                    Ok(Heard::CatchUp) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        if !self.catch_up().await.ok()? {
                            self.restart().await.ok()?;
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                changed = self.restarts.changed() => {
                    changed.ok()?;
                    // The watch lapsed: what happened meanwhile was not written.
                    self.restart().await.ok()?;
                }
            }
        }
    }

    /// An `acquired` event of a session's holder, with its session's lease
    /// as it stands, as `GET` shows it: the script wrote the grant's first
    /// lease and names the session, whose keys are in another slot.
    async fn with_session_lease(&self, event: WatchEvent) -> WatchEvent {
        let WatchEvent::Event { id, kind, data } = event else {
            return event;
        };
        if kind != "acquired" || !data.contains("\"session\":\"") {
            return WatchEvent::Event { id, kind, data };
        }
        let mut fields: serde_json::Map<String, serde_json::Value> =
            match serde_json::from_str(&data) {
                Ok(fields) => fields,
                Err(_) => return WatchEvent::Event { id, kind, data },
            };
        let Some(handle) = fields.get("session").and_then(|handle| handle.as_str()) else {
            return WatchEvent::Event { id, kind, data };
        };
        let handle = SessionHandle::from_stored(handle);
        let data = match self
            .watches
            .0
            .sessions
            .expiries(std::slice::from_ref(&handle))
            .await
        {
            Ok((expiries, now)) => {
                // A session that ended is ending its locks: as it stands.
                let ends = expiries.get(&handle).copied().unwrap_or(now);
                fields.insert("expires_at_ms".into(), ends.into());
                serde_json::to_string(&fields).unwrap_or(data)
            }
            Err(err) => {
                tracing::debug!(error = %err, "could not read a session's lease for its lock's event");
                data
            }
        };
        WatchEvent::Event { id, kind, data }
    }

    /// Whether `id` comes after the last one given.
    fn given_after(&self, id: &str) -> bool {
        self.last_given
            .as_deref()
            .is_none_or(|last| stream_id(id) > stream_id(last))
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.watches.0.waiting.unwatch(&self.hub.keys);
        self.watches.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A stream id (`<ms>-<seq>`) as two numbers, for ordering.
fn stream_id(id: &str) -> (u64, u64) {
    let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
    (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ids_order_by_time_then_sequence() {
        assert!(stream_id("1700000000001-0") > stream_id("1700000000000-5"));
        assert!(stream_id("1700000000000-10") > stream_id("1700000000000-9"));
    }
}
