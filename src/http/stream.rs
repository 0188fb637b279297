//! Streamed locks over HTTP: `POST /locks` with `Accept: text/event-stream` answers Server-Sent Events, and the lock is held while the response stays open.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use futures_util::stream;
use serde::Serialize;
use utoipa::ToSchema;

use super::error::ApiError;
use super::grant::LockGrant;
use crate::locks::{AcquireRequest, StreamEnd, StreamEvent, StreamedLock, Streams};

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
    /// would end) or `shutting-down` (the instance released it as it stopped).
    #[schema(example = "lock-gone")]
    reason: &'static str,
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

/// Takes the lock and answers its event stream: `acquired` with the grant,
/// `renewed` after each renewal, and at last `released` or `lost`.
pub async fn respond(
    streams: &Streams,
    request: AcquireRequest,
    keep_alive: StreamKeepAlive,
) -> Result<Response, ApiError> {
    if request.token.is_some() {
        return Err(ApiError::invalid_field(
            "token",
            "cannot be given for a streamed lock, which is always a new grant (re-enter with a plain POST /locks)",
        ));
    }
    let lock = streams.hold(request).await?;
    let acquired = Event::default()
        .event("acquired")
        .json_data(LockGrant::from(lock.lease()))
        .map_err(|_| ApiError::Internal)?;
    let rest = stream::unfold(lock, |mut lock| async move {
        let next = lock.next().await?;
        let event = event(&lock, next)?;
        Some((Ok::<_, Infallible>(event), lock))
    });
    let events = stream::once(async move { Ok(acquired) }).chain(rest);
    let sse = Sse::new(events).keep_alive(KeepAlive::new().interval(keep_alive.0));
    // nginx would otherwise buffer the stream and hold the events back.
    Ok(([("x-accel-buffering", "no")], sse).into_response())
}

/// The SSE event for `event`; none for the end nobody hears (the client left).
fn event(lock: &StreamedLock, event: StreamEvent) -> Option<Event> {
    let (name, data) = match event {
        StreamEvent::Renewed { expires_at_ms } => (
            "renewed",
            serde_json::to_string(&RenewedEvent { expires_at_ms }),
        ),
        StreamEvent::Ended(StreamEnd::Released) => (
            "released",
            serde_json::to_string(&ReleasedEvent {
                key: lock.lease().key.to_string(),
            }),
        ),
        StreamEvent::Ended(StreamEnd::Lost(reason)) => (
            "lost",
            serde_json::to_string(&LostEvent {
                reason: reason.as_str(),
            }),
        ),
        StreamEvent::Ended(StreamEnd::Left) => return None,
    };
    Some(Event::default().event(name).data(data.ok()?))
}
