//! Streamed locks over HTTP: `POST /locks` (and `POST /locks/batch`) with `Accept: text/event-stream` answers Server-Sent Events, and the lock (every lock of the batch) is held while the response stays open.

use std::convert::Infallible;
use std::pin::Pin;
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde::Serialize;
use tokio::sync::watch;
use utoipa::ToSchema;

use super::error::ApiError;
use super::grant::{BatchGrant, LockGrant};
use super::schema::LostReasonText;
use crate::locks::{
    AcquireRequest, BatchRequest, LockError, LockKey, LostReason, StreamEnd, StreamEvent,
    StreamedLock, StreamedLocks,
};

/// How often an idle event stream gets a comment, so that proxies keep it
/// open (renewals count: a stream renewed more often gets none).
#[derive(Debug, Clone, Copy)]
pub struct StreamKeepAlive(pub Duration);

/// `renewed`: the lease was renewed.
#[derive(Debug, Serialize, ToSchema)]
pub struct RenewedEvent {
    /// When the lease now ends, in Unix ms by the Redis clock.
    expires_at_ms: u64,
}

/// `released`: the holder released the lock with `DELETE` and its token.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReleasedEvent {
    #[schema(example = "orders:42")]
    key: String,
}

/// `lost`: the lock is no longer held for this stream.
#[derive(Debug, Serialize, ToSchema)]
pub struct LostEvent {
    /// `lock-gone` (its lease ran out or it was deleted), `held-by-another`,
    /// `backend-unavailable` (no renewal reached Redis before the lease
    /// would end), `revoked` (an operator revoked it), `session-ended` (the
    /// session it hung on expired or was deleted) or `shutting-down` (the
    /// instance released it as it stopped).
    #[schema(example = "lock-gone", value_type = LostReasonText)]
    reason: &'static str,
    /// The lock that was lost (of a batch, the first one); absent for
    /// `shutting-down`, which ends every lock alike.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "orders:42")]
    key: Option<String>,
}

/// Whether the client asks for a streamed lock (`Accept: text/event-stream`).
/// Read into a flag, so a waiting request keeps none of its headers (their
/// bytes share the connection's read buffer).
pub struct WantsStream(pub bool);

impl<S: Send + Sync> FromRequestParts<S> for WantsStream {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Infallible> {
        Ok(Self(
            parts
                .headers
                .get_all(header::ACCEPT)
                .iter()
                .filter_map(|value| value.to_str().ok())
                .any(|value| value.contains("text/event-stream")),
        ))
    }
}

/// `queued`: the request waits in the lock's queue.
#[derive(Debug, Serialize, ToSchema)]
pub struct QueuedEvent {
    /// Its place: 1 is next.
    #[schema(example = 1)]
    position: u64,
}

/// The acquisition of a streamed lock, until its grant.
type Holding = Pin<Box<dyn Future<Output = Result<StreamedLock, LockError>> + Send>>;

/// Where a streamed lock's event stream is.
enum Phase {
    /// Waiting in the queue.
    Queued {
        holding: Holding,
        positions: watch::Receiver<u64>,
        /// The position told last (0: none yet).
        told: u64,
    },
    /// Granted: the `acquired` event is next.
    Granted(StreamedLock),
    /// Holding, after `acquired`.
    Holding(StreamedLock),
    Done,
}

/// Takes the lock and answers its event stream: `queued` while it waits
/// (once the wait has begun, the answer is the stream), `acquired` with the
/// grant, `renewed` after each renewal, and at last `released` or `lost`;
/// or `refused` when the wait ends without a grant.
///
/// A request granted or refused before it joins the queue gets the
/// ordinary answer: a refusal is then a plain problem response.
pub async fn respond(
    streamed: StreamedLocks,
    mut request: AcquireRequest,
    keep_alive: StreamKeepAlive,
) -> Result<Response, ApiError> {
    if request.token.is_some() {
        return Err(ApiError::invalid_field(
            "token",
            "cannot be given for a streamed lock, which is always a new grant (re-enter with a plain POST /locks)",
        ));
    }
    let (told, mut positions) = watch::channel(0);
    request.positions = Some(told);
    let mut holding: Holding = Box::pin(async move { streamed.hold(request).await });
    let phase = tokio::select! {
        biased;
        held = &mut holding => Phase::Granted(held?),
        queued = positions.changed() => match queued {
            Ok(()) => Phase::Queued { holding, positions, told: 0 },
            // The request dropped its sender: it ended; its answer is ready.
            Err(_) => Phase::Granted(holding.await?),
        },
    };
    let events = stream::unfold(phase, |phase| async move {
        let (event, next) = advance(phase).await?;
        Some((Ok::<_, Infallible>(event), next))
    });
    Ok(event_stream(events, keep_alive))
}

/// Takes every lock of the batch and answers its event stream: `acquired`
/// with the grant, `renewed` after each renewal of all its locks, and at
/// last `released` or `lost`, naming the lock that ended it. The batch
/// waits (as a plain one does) before its answer begins: a refusal is a
/// plain problem response.
pub async fn respond_batch(
    streamed: StreamedLocks,
    request: BatchRequest,
    keep_alive: StreamKeepAlive,
) -> Result<Response, ApiError> {
    let batch = streamed.hold_batch(request).await?;
    let acquired = json_event("acquired", &BatchGrant::from(batch.lease()));
    let events = stream::unfold((batch, Some(acquired)), |(mut batch, first)| async move {
        if let Some(acquired) = first {
            return Some((Ok::<_, Infallible>(acquired), (batch, None)));
        }
        let next = batch.next().await?;
        let key = batch
            .ended_by()
            .or_else(|| batch.lease().locks.first().map(|hold| &hold.key));
        let event = event(key?, next)?;
        Some((Ok(event), (batch, None)))
    });
    Ok(event_stream(events, keep_alive))
}

/// The response of an event stream, kept alive by comments.
fn event_stream(
    events: impl futures_util::Stream<Item = Result<Event, Infallible>> + Send + 'static,
    keep_alive: StreamKeepAlive,
) -> Response {
    let sse = Sse::new(events).keep_alive(KeepAlive::new().interval(keep_alive.0));
    // nginx would otherwise buffer the stream and hold the events back.
    ([("x-accel-buffering", "no")], sse).into_response()
}

/// The next event of a streamed lock's stream, and where that leaves it.
async fn advance(phase: Phase) -> Option<(Event, Phase)> {
    match phase {
        Phase::Queued {
            mut holding,
            mut positions,
            told,
        } => {
            loop {
                let position = *positions.borrow_and_update();
                if position > 0 && position != told {
                    let queued = json_event("queued", &QueuedEvent { position });
                    let next = Phase::Queued {
                        holding,
                        positions,
                        told: position,
                    };
                    return Some((queued, next));
                }
                // Nothing new to tell: the grant, the refusal or a new position.
                tokio::select! {
                    held = &mut holding => return Some(ended(held)),
                    changed = positions.changed() => if changed.is_err() {
                        // The acquisition ended; its answer is ready.
                        return Some(ended(holding.await));
                    },
                }
            }
        }
        Phase::Granted(lock) => Some((acquired(&lock), Phase::Holding(lock))),
        Phase::Holding(mut lock) => {
            let next = lock.next().await?;
            let event = event(&lock.lease().key, next)?;
            Some((event, Phase::Holding(lock)))
        }
        Phase::Done => None,
    }
}

/// The event a wait in the queue ended with, and what is left.
fn ended(held: Result<StreamedLock, LockError>) -> (Event, Phase) {
    match held {
        Ok(lock) => (acquired(&lock), Phase::Holding(lock)),
        Err(err) => (refused(err), Phase::Done),
    }
}

fn acquired(lock: &StreamedLock) -> Event {
    json_event("acquired", &LockGrant::from(lock.lease()))
}

/// `refused`: the problem document a plain request would have been
/// answered with.
fn refused(err: LockError) -> Event {
    let problem = ApiError::from(err).problem_json();
    Event::default()
        .event("refused")
        .data(String::from_utf8_lossy(&problem))
}

fn json_event(name: &str, data: &impl Serialize) -> Event {
    Event::default()
        .event(name)
        .data(serde_json::to_string(data).unwrap_or_default())
}

/// The SSE event for `event` of the stream of lock `key` (of a batch, the
/// lock that ended it); none for the end nobody hears (the client left).
fn event(key: &LockKey, event: StreamEvent) -> Option<Event> {
    let (name, data) = match event {
        StreamEvent::Renewed { expires_at_ms } => (
            "renewed",
            serde_json::to_string(&RenewedEvent { expires_at_ms }),
        ),
        StreamEvent::Ended(StreamEnd::Released) => (
            "released",
            serde_json::to_string(&ReleasedEvent {
                key: key.to_string(),
            }),
        ),
        StreamEvent::Ended(StreamEnd::Lost(reason)) => (
            "lost",
            serde_json::to_string(&LostEvent {
                reason: reason.as_str(),
                key: (reason != LostReason::ShuttingDown).then(|| key.to_string()),
            }),
        ),
        StreamEvent::Ended(StreamEnd::Left) => return None,
    };
    Some(Event::default().event(name).data(data.ok()?))
}
