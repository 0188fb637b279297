//! The order hand-off: workers that store each order of every sale's Redis Stream in a database exactly once (`lockgate orders`, or inside `lockgate serve`).
//!
//! Every worker reads every sale's stream in one consumer group, under a
//! stable consumer name. A batch is stored in one transaction (`ON
//! CONFLICT (order_id) DO NOTHING`) and acknowledged only after the commit:
//! a worker that dies before the commit leaves its entries pending (it, or
//! another after `claim_idle`, stores them later); one that dies after the
//! commit and before the acknowledgement has them stored again as nothing
//! new. While new entries come in full batches, a batch's acknowledgement
//! is sent while the next batch is inserted (and the one after is read), so
//! only the insert is on the worker's path; what is stored and not yet
//! acknowledged is acknowledged before the worker reads its own pending
//! entries, drops a stream, or stops, and at once when no full batch
//! follows. On start a worker first reads its own pending entries. Entries
//! whose stream entry is gone are counted and logged as lost; an entry that
//! cannot be stored after `max_deliveries` deliveries goes to the sale's
//! dead-letter stream. StreamedLocks are trimmed once stored, never below the
//! lowest pending entry; a reset keeps the old epoch's stream until it is
//! drained ([`reconcile`] checks the result).

mod entry;
mod listing;
mod pace;
pub mod reconcile;
pub mod store;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::redis::handoff::{self as streams, Delivery, ReadFrom};
use crate::redis::seckill::SaleKeys;
use crate::redis::segments;
use crate::redis::{BackendError, Redis};
use entry::{entry_ms, order_row};
use pace::{Backoff, due, no_group, now_ms};
use store::{OrderRow, OrderStore, StoreError};

/// How often the sales and their streams are looked up again.
const DISCOVERY_EVERY: Duration = Duration::from_secs(1);
/// How often streams are trimmed and the gauges read.
const TIDY_EVERY: Duration = Duration::from_secs(1);

/// How a worker works.
#[derive(Debug, Clone)]
pub struct HandoffSettings {
    /// This worker's name in the consumer group: stable across restarts, so
    /// a restarted worker finds its own pending entries.
    pub consumer: String,
    /// Entries read (and stored in one transaction) at a time.
    pub batch: usize,
    /// How long another worker's entry stays pending before this one takes
    /// it over.
    pub claim_idle: Duration,
    /// Deliveries after which an entry that cannot be stored is dead-lettered.
    pub max_deliveries: u64,
    /// How long to wait when a round found nothing to do.
    pub idle_wait: Duration,
}

/// An entry read and made a row: its id, its fields (for a dead letter),
/// and the row.
type ReadOrder = (String, Vec<(String, String)>, OrderRow);

/// One stream the worker reads.
struct StreamState {
    sku: String,
    keys: SaleKeys,
    /// The sale's current stream (not an old epoch's being drained).
    current: bool,
    /// The epoch its entries belong to when they do not say (entries
    /// written before they carried it).
    epoch: u64,
    /// Whether to read this worker's own pending entries (at start, and
    /// after an entry could not be stored) before new ones.
    own_pending: bool,
    /// New entries read while the last batch was stored, handled next.
    read_ahead: Option<Result<Vec<Delivery>, BackendError>>,
    /// Entries stored (committed) and not yet acknowledged: acknowledged
    /// while the next batch is inserted, or at once when none follows.
    unacknowledged: Vec<String>,
}

/// A worker, run until it is told to stop.
pub struct Handoff {
    redis: Redis,
    store: OrderStore,
    prefix: String,
    settings: HandoffSettings,
    metrics: Arc<Metrics>,
    streams: BTreeMap<String, StreamState>,
    /// Whether the database was last found away (said once in the log).
    database_away: bool,
    /// Whether Redis was last found away (said once in the log).
    redis_away: bool,
}

impl Handoff {
    pub fn new(
        redis: Redis,
        store: OrderStore,
        prefix: &str,
        settings: HandoffSettings,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            redis,
            store,
            prefix: prefix.to_owned(),
            settings,
            metrics,
            streams: BTreeMap::new(),
            database_away: false,
            redis_away: false,
        }
    }

    /// Runs until `stop` is cancelled: an entry being stored when it is
    /// stays pending, and is stored again (as nothing new) at the next start.
    pub async fn run(mut self, stop: CancellationToken) {
        tracing::info!(consumer = %self.settings.consumer, "order hand-off starting");
        let mut backoff = Backoff::default();
        while let Err(err) = self.store.migrate().await {
            self.database_trouble(&err);
            if !backoff.wait(&stop).await {
                return;
            }
        }
        self.database_fine();
        let mut registered = false;
        let (mut discovered, mut claimed, mut tidied) = (None, None, None);
        let mut redis_backoff = Backoff::default();
        while !stop.is_cancelled() {
            let round = async {
                if !registered {
                    let mut conn = self.redis.connection().await?;
                    // From now on resets keep what is not yet stored.
                    streams::mark_in_use(&mut conn, &self.prefix).await?;
                    streams::register_existing(&mut conn, &self.prefix).await?;
                    registered = true;
                }
                if due(&mut discovered, DISCOVERY_EVERY) {
                    self.discover().await?;
                }
                let mut worked = self.read_all(&stop).await?;
                if due(&mut claimed, self.settings.claim_idle / 2) {
                    worked += self.claim_all(&stop).await?;
                }
                if due(&mut tidied, TIDY_EVERY) {
                    self.tidy_all().await?;
                }
                Ok::<_, BackendError>(worked)
            }
            .await;
            match round {
                Ok(worked) => {
                    self.redis_fine();
                    redis_backoff = Backoff::default();
                    if worked == 0 {
                        tokio::select! {
                            () = tokio::time::sleep(self.settings.idle_wait) => {}
                            () = stop.cancelled() => {}
                        }
                    }
                }
                Err(err) => {
                    self.redis_trouble(&err);
                    discovered = None;
                    if !redis_backoff.wait(&stop).await {
                        break;
                    }
                }
            }
        }
        // What was stored and not acknowledged yet is acknowledged now, not
        // left to be stored again (as nothing new) at the next start.
        let names: Vec<String> = self.streams.keys().cloned().collect();
        for stream in names {
            if let Err(err) = self.acknowledge_stored(&stream).await {
                tracing::warn!(%stream, error = %err, "could not acknowledge stored orders while stopping; the next start stores them again, as nothing new");
            }
        }
        tracing::info!(consumer = %self.settings.consumer, "order hand-off stopped");
    }

    /// Finds every sale's current stream (joining its group) and its old
    /// epochs' streams still draining.
    async fn discover(&mut self) -> Result<(), BackendError> {
        let mut conn = self.redis.connection().await?;
        let mut found = BTreeMap::new();
        for sku in streams::registered(&mut conn, &self.prefix).await? {
            let Some(counts) =
                streams::counts(&mut conn, &SaleKeys::new(&self.prefix, &sku)).await?
            else {
                continue;
            };
            // Every segment of the sale has a stream of its own (and its
            // old epochs'), each counting its own stored orders.
            let (current, retired) = segments::every_segment(&mut conn, &self.prefix, &sku).await?;
            let every = current.iter().map(|keys| (keys, true));
            for (keys, is_current) in every.chain(retired.iter().map(|keys| (keys, false))) {
                for stream in streams::draining(&mut conn, keys).await? {
                    let epoch = stream
                        .rsplit(':')
                        .next()
                        .and_then(|epoch| epoch.parse().ok())
                        .unwrap_or(0);
                    found.insert(stream, (sku.clone(), keys.clone(), false, epoch));
                }
                if !is_current {
                    continue;
                }
                // A stream already read has its group; asking again would
                // only earn a BUSYGROUP error a second.
                let joined = self.streams.contains_key(&keys.orders)
                    || streams::join(&mut conn, keys).await?;
                if joined {
                    let stream = keys.orders.clone();
                    found.insert(stream, (sku.clone(), keys.clone(), true, counts.epoch));
                }
            }
        }
        // A stream still known keeps its state (whether its own pending
        // entries are still to be read again); a new one starts with them.
        // One no longer found (renamed by a reset, drained and deleted) has
        // what it stored acknowledged first, where it can still be.
        let dropped: Vec<String> = self
            .streams
            .keys()
            .filter(|stream| !found.contains_key(*stream))
            .cloned()
            .collect();
        for stream in &dropped {
            if let Err(err) = self.acknowledge_stored(stream).await {
                // Left pending: stored again, as nothing new, once claimed.
                tracing::debug!(%stream, error = %err, "could not acknowledge the stored orders of a stream no longer read");
            }
        }
        self.streams.retain(|stream, _| found.contains_key(stream));
        for (stream, (sku, keys, current, epoch)) in found {
            let state = self.streams.entry(stream).or_insert(StreamState {
                sku,
                keys,
                current,
                epoch,
                own_pending: true,
                read_ahead: None,
                unacknowledged: Vec::new(),
            });
            state.epoch = epoch;
        }
        Ok(())
    }

    /// One read of every stream (its own pending entries first, where
    /// wanted), each stored; returns how many entries were handled.
    async fn read_all(&mut self, stop: &CancellationToken) -> Result<usize, BackendError> {
        let mut worked = 0;
        let names: Vec<String> = self.streams.keys().cloned().collect();
        for stream in names {
            let Some(state) = self.streams.get_mut(&stream) else {
                continue;
            };
            let (read_ahead, own_pending) = (state.read_ahead.take(), state.own_pending);
            let (read, from) = match read_ahead {
                Some(read) => (read, ReadFrom::New),
                None if own_pending => {
                    // What was stored is acknowledged first: the read
                    // would give it again.
                    self.acknowledge_stored(&stream).await?;
                    let from = ReadFrom::OwnPending;
                    (self.read(&stream, from).await, from)
                }
                None => (self.read(&stream, ReadFrom::New).await, ReadFrom::New),
            };
            let deliveries = match read {
                Err(err) if no_group(&err) => {
                    // Deleted with its group (the sale's keys were lost):
                    // the next discovery finds what is there now.
                    self.streams.remove(&stream);
                    continue;
                }
                read => read?,
            };
            // A full batch of new entries: more are likely waiting, so the
            // next batch is read, and the last one acknowledged, while this
            // one is stored.
            let pipelined = from == ReadFrom::New && deliveries.len() >= self.settings.batch;
            if !pipelined {
                // No batch follows at once to go with.
                self.acknowledge_stored(&stream).await?;
            }
            if deliveries.is_empty() {
                // Only a read of its own pending entries that finds none
                // says they are all stored.
                if from == ReadFrom::OwnPending
                    && let Some(state) = self.streams.get_mut(&stream)
                {
                    state.own_pending = false;
                }
                continue;
            }
            worked += deliveries.len();
            if pipelined {
                // Read, the next batch is this worker's pending entries
                // until stored, like any. The last batch was committed
                // before this one is inserted: acknowledging it meanwhile
                // changes nothing a crash could see but the timing (its
                // entries are pending until then, and stored again as
                // nothing new after a crash).
                let next = self.read(&stream, ReadFrom::New);
                let last = self
                    .streams
                    .get_mut(&stream)
                    .map_or_else(Vec::new, |state| std::mem::take(&mut state.unacknowledged));
                let acknowledge = self.acknowledge(&stream, last);
                let (stored, next, acknowledged) =
                    tokio::join!(self.store(&stream, deliveries, stop), next, acknowledge);
                // Kept even when storing failed: what was read is handled
                // at the next round, not left to a claim.
                if let Some(state) = self.streams.get_mut(&stream) {
                    state.read_ahead = Some(next);
                }
                self.acknowledged(&stream, acknowledged)?;
                stored?;
            } else {
                self.handle(&stream, deliveries, stop).await?;
            }
        }
        Ok(worked)
    }

    /// One read of `stream`'s entries, up to a batch.
    fn read(
        &self,
        stream: &str,
        from: ReadFrom,
    ) -> impl Future<Output = Result<Vec<Delivery>, BackendError>> + use<> {
        let (redis, stream) = (self.redis.clone(), stream.to_owned());
        let (consumer, batch) = (self.settings.consumer.clone(), self.settings.batch);
        async move {
            let mut conn = redis.connection().await?;
            streams::read(&mut conn, &stream, &consumer, from, batch).await
        }
    }

    /// Takes over the entries of workers that stopped (idle past
    /// `claim_idle`), following `XAUTOCLAIM`'s cursor to the end.
    async fn claim_all(&mut self, stop: &CancellationToken) -> Result<usize, BackendError> {
        let mut worked = 0;
        let names: Vec<String> = self.streams.keys().cloned().collect();
        let min_idle = u64::try_from(self.settings.claim_idle.as_millis()).unwrap_or(u64::MAX);
        for stream in names {
            let mut cursor = "0-0".to_owned();
            loop {
                let mut conn = self.redis.connection().await?;
                let claimed = streams::claim(
                    &mut conn,
                    &stream,
                    &self.settings.consumer,
                    min_idle,
                    &cursor,
                    self.settings.batch,
                )
                .await;
                drop(conn);
                let claimed = match claimed {
                    Err(err) if no_group(&err) => {
                        self.streams.remove(&stream);
                        break;
                    }
                    claimed => claimed?,
                };
                if !claimed.gone.is_empty() {
                    self.lost(&stream, &claimed.gone);
                }
                if !claimed.entries.is_empty() {
                    tracing::info!(
                        %stream,
                        entries = claimed.entries.len(),
                        "took over orders another worker left pending"
                    );
                    worked += claimed.entries.len();
                    self.handle(&stream, claimed.entries, stop).await?;
                }
                match claimed.next {
                    Some(next) if !stop.is_cancelled() => cursor = next,
                    _ => break,
                }
            }
        }
        Ok(worked)
    }

    /// Stores what was read, acknowledges what was stored, and deals with
    /// entries that are gone or cannot be stored.
    async fn handle(
        &mut self,
        stream: &str,
        deliveries: Vec<Delivery>,
        stop: &CancellationToken,
    ) -> Result<(), BackendError> {
        self.store(stream, deliveries, stop).await?;
        self.acknowledge_stored(stream).await
    }

    /// Stores what was read (the ids stored then wait in the stream's
    /// `unacknowledged`), and deals with entries that are gone or cannot be
    /// stored.
    async fn store(
        &mut self,
        stream: &str,
        deliveries: Vec<Delivery>,
        stop: &CancellationToken,
    ) -> Result<(), BackendError> {
        let Some(state) = self.streams.get(stream) else {
            return Ok(());
        };
        let (sku, keys, epoch) = (state.sku.clone(), state.keys.clone(), state.epoch);
        let mut rows = Vec::with_capacity(deliveries.len());
        let mut gone = Vec::new();
        let mut failed = Vec::new();
        for (id, fields) in deliveries {
            match fields {
                None => gone.push(id),
                Some(fields) => match order_row(&sku, epoch, &id, &fields) {
                    Ok(row) => rows.push((id, fields, row)),
                    Err(reason) => failed.push((id, fields, reason.to_owned())),
                },
            }
        }
        if !gone.is_empty() {
            self.lost(stream, &gone);
            let mut conn = self.redis.connection().await?;
            streams::acknowledge(&mut conn, stream, &keys, false, &gone).await?;
        }
        let stored = match self.store_rows(&rows, stop).await {
            Some(stored) => stored,
            // Stopped while the database was away: nothing acknowledged,
            // everything stays pending for the next start.
            None => return Ok(()),
        };
        let mut stored_ids = Vec::with_capacity(rows.len());
        for ((id, fields, _), outcome) in rows.into_iter().zip(stored) {
            match outcome {
                Ok(()) => stored_ids.push(id),
                Err(reason) => failed.push((id, fields, reason)),
            }
        }
        if let Some(state) = self.streams.get_mut(stream) {
            state.unacknowledged.extend(stored_ids);
        }
        if failed.is_empty() {
            return Ok(());
        }
        let mut conn = self.redis.connection().await?;
        for (id, fields, reason) in failed {
            let delivered = streams::deliveries(&mut conn, stream, &id).await?;
            if delivered >= self.settings.max_deliveries {
                if streams::dead_letter(&mut conn, stream, &keys, &id, &reason, &fields).await? {
                    self.metrics.orders_dead_lettered(&sku);
                    tracing::warn!(%stream, %id, %reason, delivered, "an order could not be stored; moved to the dead letters");
                }
            } else {
                tracing::debug!(%stream, %id, %reason, delivered, "an order could not be stored; it will be delivered again");
                if let Some(state) = self.streams.get_mut(stream) {
                    state.own_pending = true;
                }
            }
        }
        Ok(())
    }

    /// Acknowledges what `stream` stored and has not acknowledged yet.
    async fn acknowledge_stored(&mut self, stream: &str) -> Result<(), BackendError> {
        let ids = match self.streams.get_mut(stream) {
            Some(state) if !state.unacknowledged.is_empty() => {
                std::mem::take(&mut state.unacknowledged)
            }
            _ => return Ok(()),
        };
        let acknowledged = self.acknowledge(stream, ids).await;
        self.acknowledged(stream, acknowledged)
    }

    /// Acknowledges `ids` of `stream`, stored (counted as the sale's stored
    /// orders where it is the sale's current stream), and gives them back
    /// with the outcome, so that a failed acknowledgement is tried again.
    fn acknowledge(
        &self,
        stream: &str,
        ids: Vec<String>,
    ) -> impl Future<Output = (Vec<String>, Result<u64, BackendError>)> + use<> {
        let redis = self.redis.clone();
        let target = self
            .streams
            .get(stream)
            .filter(|_| !ids.is_empty())
            .map(|state| (stream.to_owned(), state.keys.clone(), state.current));
        async move {
            let Some((stream, keys, current)) = target else {
                return (ids, Ok(0));
            };
            let acked = async {
                let mut conn = redis.connection().await?;
                streams::acknowledge(&mut conn, &stream, &keys, current, &ids).await
            }
            .await;
            (ids, acked)
        }
    }

    /// Counts what an acknowledgement acknowledged; the ids of one that
    /// failed wait to be acknowledged with the next.
    fn acknowledged(
        &mut self,
        stream: &str,
        (ids, acked): (Vec<String>, Result<u64, BackendError>),
    ) -> Result<(), BackendError> {
        let Some(state) = self.streams.get_mut(stream) else {
            return acked.map(drop);
        };
        match acked {
            Ok(acked) => {
                self.metrics.orders_stored(&state.sku, acked);
                Ok(())
            }
            Err(err) => {
                state.unacknowledged.extend(ids);
                Err(err)
            }
        }
    }

    /// Stores the rows in one transaction, waiting out a database that is
    /// away; when the database refuses the batch, row by row, so one bad
    /// row holds back only itself. `None` when stopped while waiting.
    async fn store_rows(
        &mut self,
        rows: &[ReadOrder],
        stop: &CancellationToken,
    ) -> Option<Vec<Result<(), String>>> {
        let batch: Vec<OrderRow> = rows.iter().map(|(_, _, row)| row.clone()).collect();
        let mut backoff = Backoff::default();
        loop {
            match self.store.insert(&batch).await {
                Ok(_) => {
                    self.database_fine();
                    return Some(vec![Ok(()); rows.len()]);
                }
                Err(StoreError::Refused(_)) if batch.len() > 1 => break,
                Err(StoreError::Refused(err)) => {
                    self.database_fine();
                    return Some(vec![Err(err.to_string())]);
                }
                Err(err) => {
                    self.database_trouble(&err);
                    if !backoff.wait(stop).await {
                        return None;
                    }
                }
            }
        }
        let mut outcomes = Vec::with_capacity(batch.len());
        for row in batch {
            let mut backoff = Backoff::default();
            loop {
                match self.store.insert(std::slice::from_ref(&row)).await {
                    Ok(_) => outcomes.push(Ok(())),
                    Err(StoreError::Refused(err)) => outcomes.push(Err(err.to_string())),
                    Err(err) => {
                        self.database_trouble(&err);
                        if !backoff.wait(stop).await {
                            return None;
                        }
                        continue;
                    }
                }
                break;
            }
        }
        self.database_fine();
        Some(outcomes)
    }

    /// Trims every stream, removes consumers that left, and reads the
    /// pending and lag gauges.
    async fn tidy_all(&mut self) -> Result<(), BackendError> {
        let idle_limit = u64::try_from((self.settings.claim_idle * 4).as_millis())
            .unwrap_or(u64::MAX)
            .max(60_000);
        let now_ms = now_ms();
        let mut per_sale: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        let mut conn = self.redis.connection().await?;
        for (stream, state) in &self.streams {
            let tidied = streams::tidy(
                &mut conn,
                stream,
                &state.keys,
                state.current,
                idle_limit,
                &self.settings.consumer,
            )
            .await?;
            let Some(tidied) = tidied else { continue };
            if tidied.removed > 0 {
                tracing::info!(%stream, consumers = tidied.removed, "removed workers that left from the consumer group");
            }
            let lag = tidied
                .first
                .as_deref()
                .and_then(entry_ms)
                .map_or(0, |ms| now_ms.saturating_sub(ms));
            let sale = per_sale.entry(state.sku.clone()).or_default();
            sale.0 += tidied.length;
            sale.1 = sale.1.max(lag);
        }
        for (sku, (pending, lag_ms)) in per_sale {
            self.metrics.handoff_gauges(&sku, pending, lag_ms);
        }
        Ok(())
    }

    fn lost(&self, stream: &str, ids: &[String]) {
        let sku = self
            .streams
            .get(stream)
            .map_or("", |state| state.sku.as_str());
        self.metrics.orders_lost(sku, ids.len() as u64);
        tracing::error!(
            %stream,
            lost = ids.len(),
            ids = %ids.join(","),
            "orders were pending but their stream entries are gone (trimmed or deleted): they cannot be stored"
        );
    }

    fn database_trouble(&mut self, err: &StoreError) {
        if !self.database_away {
            tracing::warn!(error = %err, "orders database unavailable; retrying with back-off, nothing is acknowledged meanwhile");
            self.database_away = true;
        }
    }

    fn database_fine(&mut self) {
        if self.database_away {
            tracing::info!("orders database reachable again");
            self.database_away = false;
        }
    }

    fn redis_trouble(&mut self, err: &BackendError) {
        if !self.redis_away {
            tracing::warn!(error = %err, "order hand-off cannot reach Redis; retrying with back-off");
            self.redis_away = true;
        }
    }

    fn redis_fine(&mut self) {
        if self.redis_away {
            tracing::info!("order hand-off reaches Redis again");
            self.redis_away = false;
        }
    }
}
