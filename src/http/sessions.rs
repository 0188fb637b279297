//! Sessions over HTTP: `POST /sessions` (plain, or streamed: kept alive while the response stays open), `PUT`, `GET` and `DELETE /sessions/{id}`.

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde::{Deserialize, Serialize};
use serde_json::Number;
use utoipa::ToSchema;

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{JsonBody, whole_number, whole_number_or};
use super::locks::value;
use super::responses::problem_responses;
use super::schema::SessionIdText;
use super::streamed::{StreamKeepAlive, WantsStream};
use crate::locks::sessions::{DEFAULT_SESSION_TTL_MS, session_ttl};
use crate::locks::{LockLimits, SessionError, SessionId, SessionLease, SessionTerms, Sessions};
use crate::redis::sessions::Ending;

/// `POST /sessions`: the session's lease, its lock-delay, its public value.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionBody {
    /// The session's lease: it ends this long after the last keepalive
    /// unless kept alive again (1000 up to the configured maximum).
    #[schema(value_type = Option<u64>, default = 10000, example = 10000)]
    ttl_ms: Option<Number>,
    /// When the session expires (not when it is deleted), each of its
    /// locks stays unavailable this long more (0 to 60000).
    #[schema(value_type = Option<u64>, default = 0, example = 0)]
    lock_delay_ms: Option<Number>,
    /// A public value (at most 1024 bytes), shown by `GET /sessions/{id}`.
    #[schema(example = "worker-7")]
    value: Option<String>,
}

/// `PUT /sessions/{id}`: a new lease length, or none to keep the session's.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeepBody {
    #[schema(value_type = Option<u64>, example = 10000)]
    ttl_ms: Option<Number>,
}

/// A new session: its id (a secret, like an owner token) and its lease.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionGrant {
    #[schema(example = "7c1f0b2e-6a4d-4e8b-9f3a-2d5c6b7a8e90")]
    id: String,
    ttl_ms: u64,
    lock_delay_ms: u64,
    /// When it ends unless kept alive, in Unix ms by the Redis clock.
    expires_at_ms: u64,
}

/// A keepalive's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionKept {
    id: String,
    ttl_ms: u64,
    expires_at_ms: u64,
    /// How many locks hang on it.
    locks: u64,
}

/// A session as its holder sees it.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionStatus {
    id: String,
    ttl_ms: u64,
    expires_at_ms: u64,
    lock_delay_ms: u64,
    value: Option<String>,
    locks: Vec<SessionLock>,
}

/// One lock hanging on a session.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionLock {
    #[schema(example = "orders:42")]
    key: String,
    #[schema(example = "exclusive")]
    mode: String,
    fencing_token: u64,
}

/// A streamed session's `renewed`: kept alive until this instant.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionRenewedEvent {
    expires_at_ms: u64,
}

/// A streamed session's last event.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionEndedEvent {
    /// `expired`, `deleted` or `shutting-down`.
    #[schema(example = "expired")]
    reason: &'static str,
}

problem_responses!(
    /// What `POST /sessions` can refuse with.
    OpenProblems:
        MalformedBody, UnsupportedMediaType, BodyTooLarge, InvalidField, Unauthorized, Forbidden,
        BackendUnavailable, FormatUnsupported,
);

problem_responses!(
    /// What the routes of one session can refuse with.
    SessionProblems:
        MalformedBody, InvalidField, Unauthorized, Forbidden, SessionNotFound, BackendUnavailable, FormatUnsupported,
);

/// The session of the path, parsed.
pub struct SessionPath(pub SessionId);

impl<S: Send + Sync> FromRequestParts<S> for SessionPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::invalid_field("id", "must be a session id"))?;
        SessionId::parse(&id)
            .map(Self)
            .map_err(|err| ApiError::invalid_field("id", err))
    }
}

impl From<SessionError> for ApiError {
    fn from(err: SessionError) -> Self {
        match err {
            SessionError::NotFound => crate::locks::LockError::SessionNotFound.into(),
            SessionError::Backend(err) => crate::locks::LockError::Backend(err).into(),
        }
    }
}

/// Open a session: one liveness lease for any number of locks (`"session":
/// "<id>"` on `POST /locks`), kept alive with `PUT /sessions/{id}` through
/// any instance. When nobody keeps it alive, it expires and its locks are
/// freed (no earlier than `expires_at_ms`, no later than a second after),
/// each kept unavailable `lock_delay_ms` more. With `Accept:
/// text/event-stream` the gateway keeps it alive while the response stays
/// open: `opened`, `renewed` after each keepalive, `ended` at the end;
/// closing the connection ends it as `DELETE` does.
#[utoipa::path(
    post,
    path = "/sessions",
    tag = "sessions",
    security((), ("api_key" = [])),
    request_body = SessionBody,
    responses(
        (status = 201, description = "Opened", body = SessionGrant),
        (status = 200, description = "A streamed session: Server-Sent Events `opened` (the 201 body), \
            `renewed` (`SessionRenewedEvent`), `ended` (`SessionEndedEvent`)", content_type = "text/event-stream"),
        OpenProblems,
    )
)]
pub async fn open(
    caller: Caller,
    State(sessions): State<Sessions>,
    State(limits): State<LockLimits>,
    State(keep_alive): State<StreamKeepAlive>,
    WantsStream(streamed): WantsStream,
    JsonBody(body): JsonBody<SessionBody>,
) -> Result<Response, ApiError> {
    let terms = terms(&body, limits)?;
    let (id, lease) = sessions
        .open(&terms, caller.session_owner().unwrap_or(""))
        .await?;
    if streamed {
        return Ok(stream(sessions, id, lease, keep_alive));
    }
    Ok((StatusCode::CREATED, Json(grant(&id, &lease))).into_response())
}

fn terms(body: &SessionBody, limits: LockLimits) -> Result<SessionTerms, ApiError> {
    let ttl_ms = whole_number_or("ttl_ms", body.ttl_ms.as_ref(), DEFAULT_SESSION_TTL_MS)?;
    let lock_delay_ms = whole_number_or("lock_delay_ms", body.lock_delay_ms.as_ref(), 0)?;
    let value = body.value.as_deref().map(value).transpose()?;
    SessionTerms::new(ttl_ms, lock_delay_ms, value, limits.max_ttl_ms)
        .map_err(|(field, range)| ApiError::OutOfRange { field, range })
}

fn grant(id: &SessionId, lease: &SessionLease) -> SessionGrant {
    SessionGrant {
        id: id.expose(),
        ttl_ms: lease.ttl_ms,
        lock_delay_ms: lease.lock_delay_ms,
        expires_at_ms: lease.expires_at_ms,
    }
}

/// Keep a session alive: its lease starts again (with `ttl_ms`, a new
/// length). The same few Redis commands whether 1 or 10 000 locks hang on it.
#[utoipa::path(
    put,
    path = "/sessions/{id}",
    tag = "sessions",
    security((), ("api_key" = [])),
    params(("id" = SessionIdText, Path, description = "The session's id")),
    request_body(content = Option<KeepBody>, description = "Empty, or a new `ttl_ms`"),
    responses(
        (status = 200, description = "Kept alive", body = SessionKept),
        SessionProblems,
    )
)]
pub async fn keep(
    caller: Caller,
    State(sessions): State<Sessions>,
    State(limits): State<LockLimits>,
    SessionPath(id): SessionPath,
    body: Bytes,
) -> Result<Json<SessionKept>, ApiError> {
    caller.may_use_session(|owner| id.belongs_to(owner))?;
    // An empty body, or JSON `null`, keeps the session's lease length.
    let body: KeepBody = if body.iter().all(u8::is_ascii_whitespace) {
        KeepBody::default()
    } else {
        serde_json::from_slice::<Option<KeepBody>>(&body)
            .map_err(|err| ApiError::MalformedBody(err.to_string()))?
            .unwrap_or_default()
    };
    let ttl_ms = body
        .ttl_ms
        .as_ref()
        .map(|ttl| {
            let ttl = whole_number("ttl_ms", ttl)?;
            session_ttl(ttl, limits.max_ttl_ms).map_err(|range| ApiError::OutOfRange {
                field: "ttl_ms",
                range,
            })
        })
        .transpose()?;
    let lease = sessions.keep(&id, ttl_ms).await?;
    Ok(Json(SessionKept {
        id: id.expose(),
        ttl_ms: lease.ttl_ms,
        expires_at_ms: lease.expires_at_ms,
        locks: lease.locks,
    }))
}

/// A session: its lease, lock-delay, value and the locks hanging on it.
#[utoipa::path(
    get,
    path = "/sessions/{id}",
    tag = "sessions",
    security((), ("api_key" = [])),
    params(("id" = SessionIdText, Path, description = "The session's id")),
    responses(
        (status = 200, description = "The session", body = SessionStatus),
        SessionProblems,
    )
)]
pub async fn inspect(
    caller: Caller,
    State(sessions): State<Sessions>,
    SessionPath(id): SessionPath,
) -> Result<Json<SessionStatus>, ApiError> {
    caller.may_use_session(|owner| id.belongs_to(owner))?;
    let (view, _principal) = sessions.inspect(&id).await?;
    Ok(Json(SessionStatus {
        id: id.expose(),
        ttl_ms: view.lease.ttl_ms,
        expires_at_ms: view.lease.expires_at_ms,
        lock_delay_ms: view.lease.lock_delay_ms,
        value: view.value,
        locks: view
            .locks
            .into_iter()
            .map(|(key, mode, fencing_token)| SessionLock {
                key,
                mode,
                fencing_token,
            })
            .collect(),
    }))
}

/// End a session at once: every lock hanging on it is released (a clean
/// end: no lock-delay), and their waiters are served.
#[utoipa::path(
    delete,
    path = "/sessions/{id}",
    tag = "sessions",
    security((), ("api_key" = [])),
    params(("id" = SessionIdText, Path, description = "The session's id")),
    responses(
        (status = 204, description = "Ended; its locks released"),
        SessionProblems,
    )
)]
pub async fn delete(
    caller: Caller,
    State(sessions): State<Sessions>,
    SessionPath(id): SessionPath,
) -> Result<StatusCode, ApiError> {
    caller.may_use_session(|owner| id.belongs_to(owner))?;
    sessions.end(&id, Ending::Deleted).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A streamed session: kept alive every third of its lease while the
/// response stays open, ended when it closes.
fn stream(
    sessions: Sessions,
    id: SessionId,
    lease: SessionLease,
    keep_alive: StreamKeepAlive,
) -> Response {
    let opened = json_event("opened", &grant(&id, &lease));
    let keeper = Keeper {
        ended: sessions.watch(&id.handle()),
        sessions,
        id,
        period: Duration::from_millis(lease.ttl_ms / 3),
        ttl_ms: lease.ttl_ms,
        over: false,
    };
    let events = stream::unfold(Some(keeper), |keeper| async move {
        let mut keeper = keeper?;
        let (event, going_on) = keeper.next().await;
        Some((Ok::<_, Infallible>(event), going_on.then_some(keeper)))
    });
    let events =
        futures_util::StreamExt::chain(stream::iter([Ok::<_, Infallible>(opened)]), events);
    let sse = Sse::new(events).keep_alive(KeepAlive::new().interval(keep_alive.0));
    ([("x-accel-buffering", "no")], sse).into_response()
}

/// What keeps a streamed session alive; dropped before the session ended
/// (its client left), it ends it.
struct Keeper {
    sessions: Sessions,
    id: SessionId,
    ended: crate::locks::sessions::SessionWatch,
    period: Duration,
    ttl_ms: u64,
    /// The session has ended: nothing to end when dropped.
    over: bool,
}

impl Keeper {
    /// The next event, and whether the stream goes on after it.
    async fn next(&mut self) -> (Event, bool) {
        loop {
            tokio::select! {
                () = self.ended.ended().cancelled() => return self.end(self.ended.why().word()),
                () = self.sessions.closing().cancelled() => {
                    let _ = self.sessions.end(&self.id, Ending::ShuttingDown).await;
                    return self.end("shutting-down");
                }
                () = tokio::time::sleep(self.period) => {}
            }
            match self.sessions.keep(&self.id, Some(self.ttl_ms)).await {
                Ok(lease) => {
                    let renewed = SessionRenewedEvent {
                        expires_at_ms: lease.expires_at_ms,
                    };
                    return (json_event("renewed", &renewed), true);
                }
                Err(SessionError::NotFound) => return self.end("expired"),
                // Redis away: tried again at the next period; the sweep
                // ends the session if it stays away past the lease.
                Err(SessionError::Backend(_)) => continue,
            }
        }
    }

    fn end(&mut self, reason: &'static str) -> (Event, bool) {
        self.over = true;
        (json_event("ended", &SessionEndedEvent { reason }), false)
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        if self.over {
            return;
        }
        let (sessions, id) = (self.sessions.clone(), self.id.clone());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = sessions.end(&id, Ending::Deleted).await;
            });
        }
    }
}

fn json_event(name: &str, data: &impl Serialize) -> Event {
    Event::default()
        .event(name)
        .data(serde_json::to_string(data).unwrap_or_default())
}
