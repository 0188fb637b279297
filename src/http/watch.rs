//! Following a lock without holding it: `GET /locks/{key}/events`, a snapshot and then every change as Server-Sent Events, resumable with `Last-Event-ID`.

use std::convert::Infallible;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{StreamExt, stream};
use serde::Serialize;
use utoipa::ToSchema;

use super::auth::Caller;
use super::error::ApiError;
use super::extract::KeyPath;
use super::lock_status::{FreeLock, LockStatus};
use super::responses::problem_responses;
use super::schema::{LockKeyText, LockWatchEvent};
use super::streamed::StreamKeepAlive;
use crate::acl::Permission;
use crate::locks::{LockKey, LockSight, WatchEvent, Watches};

/// The header an `EventSource` resends on reconnecting.
const LAST_EVENT_ID: &str = "last-event-id";

/// `acquired`: a holder was granted the lock.
#[derive(Debug, Serialize, ToSchema)]
pub struct AcquiredEvent {
    #[schema(example = "orders:42")]
    key: String,
    fencing_token: u64,
    /// The holder's public value.
    #[schema(example = "10.0.0.7:9000")]
    value: Option<String>,
    /// `exclusive`, `shared` or `counted`.
    #[schema(example = "exclusive")]
    mode: String,
    /// When the lease ends (Unix ms): for a session's holder, its
    /// session's, as the event is sent.
    expires_at_ms: u64,
    /// The public handle of the session the holder's lock hangs on (as
    /// `GET /locks/{key}` names it), or null.
    #[schema(example = "5f0c8e2a9d4b6c1e7a3f2b8d9c0e1f2a")]
    session: Option<String>,
}

/// `value`: a holder replaced its public value.
#[derive(Debug, Serialize, ToSchema)]
pub struct ValueEvent {
    #[schema(example = "orders:42")]
    key: String,
    fencing_token: u64,
    value: Option<String>,
}

/// `mode`: a holder changed its mode without letting go (an upgrade, with
/// a new fencing token, or a downgrade).
#[derive(Debug, Serialize, ToSchema)]
pub struct ModeEvent {
    #[schema(example = "orders:42")]
    key: String,
    /// The hold's fencing token now.
    fencing_token: u64,
    /// Its fencing token before (the same after a downgrade).
    previous_fencing_token: u64,
    /// `exclusive` or `shared`.
    #[schema(example = "exclusive")]
    mode: String,
    expires_at_ms: u64,
}

/// `delayed`: nobody may take the lock until `delayed_until_ms` (the
/// lock-delay of a session that held it and expired, or of a revoked hold).
#[derive(Debug, Serialize, ToSchema)]
pub struct DelayedEvent {
    #[schema(example = "orders:42")]
    key: String,
    delayed_until_ms: u64,
}

/// `released`, `expired` or `revoked`: a holder's place ended.
#[derive(Debug, Serialize, ToSchema)]
pub struct EndedEvent {
    #[schema(example = "orders:42")]
    key: String,
    /// The fencing token of the holder whose place ended.
    fencing_token: u64,
}

problem_responses!(
    /// What `GET /locks/{key}/events` can refuse with.
    WatchProblems:
        Unauthorized, Forbidden, InvalidKey, InvalidField, BackendUnavailable, FormatUnsupported, ShuttingDown,
);

/// Watch a lock: who holds it, and every change, as they happen.
///
/// Server-Sent Events, each with an `id`: first `snapshot` (the `GET
/// /locks/{key}` body, or `FreeLock`), then `acquired` (`AcquiredEvent`),
/// `value` (`ValueEvent`), `mode` (`ModeEvent`), `released`, `expired` (at
/// most a second after the lease ended) and `revoked` (each an
/// `EndedEvent`), and `delayed` (`DelayedEvent`), in the order the changes
/// were made. Reconnect with `Last-Event-ID`, through any instance,
/// to get every event after that one, none twice; `gap` (`{}`) says the
/// events after it are no longer kept, and a `snapshot` follows. An idle
/// stream gets an SSE comment at least every 15 s.
#[utoipa::path(
    get,
    path = "/locks/{key}/events",
    tag = "locks",
    security((), ("api_key" = [])),
    params(
        ("key" = LockKeyText, Path, description = "The lock"),
        ("Last-Event-ID" = Option<String>, Header, description = "The id of the last event seen, to resume after it"),
    ),
    responses(
        (status = 200, description = "The lock's events", content(
            (LockWatchEvent = "text/event-stream", example = json!(
                "id: 1795331974189-0\nevent: snapshot\ndata: {\"key\":\"orders:42\",\"held\":false,\"waiters\":[]}\n\n\
                id: 1795331974200-0\nevent: acquired\ndata: {\"key\":\"orders:42\",\"fencing_token\":1795331974200311,\
                \"value\":\"10.0.0.7:9000\",\"mode\":\"exclusive\",\"expires_at_ms\":1795332004200}\n\n\
                id: 1795331975012-0\nevent: released\ndata: {\"key\":\"orders:42\",\"fencing_token\":1795331974200311}\n\n"
            )),
        )),
        WatchProblems,
    )
)]
pub async fn events(
    caller: Caller,
    State(watches): State<Watches>,
    State(keep_alive): State<StreamKeepAlive>,
    KeyPath(key): KeyPath,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    caller.may(Permission::Read, key.as_str())?;
    let last_seen = last_event_id(&headers)?;
    let watcher = watches.watch(&key, last_seen).await?;
    let events = stream::unfold((watcher, key), |(mut watcher, key)| async move {
        let next = watcher.next().await?;
        let event = sse_event(&key, next);
        Some((Ok::<_, Infallible>(event), (watcher, key)))
    });
    // hyper sends the head with the body's first bytes: a watcher resuming
    // at the newest event would otherwise hear nothing, not even the status,
    // until the lock next changes.
    let opened = Event::default().comment("watching");
    let events = stream::iter([Ok::<_, Infallible>(opened)]).chain(events);
    let sse = Sse::new(events).keep_alive(KeepAlive::new().interval(keep_alive.0));
    // nginx would otherwise buffer the stream and hold the events back.
    Ok(([("x-accel-buffering", "no")], sse).into_response())
}

/// The `Last-Event-ID` header: a stream id (`<ms>-<seq>`), or none.
fn last_event_id(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(LAST_EVENT_ID) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or_default().trim();
    if text.is_empty() {
        return Ok(None);
    }
    // Each part a whole number Redis can hold (at most 2^64 - 1).
    let number =
        |part: &str| part.bytes().all(|byte| byte.is_ascii_digit()) && part.parse::<u64>().is_ok();
    let well_formed = text
        .split_once('-')
        .is_some_and(|(ms, seq)| number(ms) && number(seq));
    if !well_formed {
        return Err(ApiError::invalid_field(
            "Last-Event-ID",
            "must be the id of an event this stream sent: <ms>-<seq>, each a whole number \
             of at most 18446744073709551615",
        ));
    }
    Ok(Some(text.to_owned()))
}

fn sse_event(key: &LockKey, event: WatchEvent) -> Event {
    match event {
        WatchEvent::Snapshot { id, sight } => {
            let data = match sight {
                LockSight::Held(view) => serde_json::to_string(&LockStatus::new(key, view)),
                LockSight::Free {
                    waiters,
                    delayed_until_ms,
                } => serde_json::to_string(&FreeLock::new(key, waiters, delayed_until_ms)),
            };
            Event::default()
                .id(id)
                .event("snapshot")
                .data(data.unwrap_or_default())
        }
        WatchEvent::Event { id, kind, data } => Event::default().id(id).event(kind).data(data),
        WatchEvent::Gap => Event::default().event("gap").data("{}"),
    }
}
