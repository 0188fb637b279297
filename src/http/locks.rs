//! The lock routes: `POST /locks`, `DELETE`/`GET /locks/{key}`, `PUT /locks/{key}/ttl`.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use serde::{Deserialize, Serialize};
use serde_json::Number;
use utoipa::ToSchema;

use super::auth::ApiKeyAccess;
use super::error::ApiError;
use super::extract::{
    JsonBody, KeyPath, OwnerToken, one_token, token_header, whole_number, whole_number_or,
};
use super::grant::LockGrant;
use super::responses::problem_responses;
use super::schema::{LockKeyText, LockModeText, TokenText};
use super::stream::{self, StreamKeepAlive, WantsStream};
use crate::locks::{
    AcquireRequest, EXAMPLE_TOKEN, Handover, Inspection, InvalidKind, LockKey, LockKind,
    LockLimits, Locks, Released, Streams, Token, Ttl, WaitTime, lock_kind,
};

/// `POST /locks`: what to take, for how long, and how long to wait.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireBody {
    /// The lock: 1 to 200 characters of `A-Z a-z 0-9 . _ : -`.
    #[schema(example = "orders:42")]
    key: String,
    /// Lease length in milliseconds, from 10 to the configured maximum
    /// (default 3 600 000).
    #[schema(value_type = Option<u64>, default = 30000, example = 30000)]
    ttl_ms: Option<Number>,
    /// How long to wait while another owner holds the lock, in milliseconds,
    /// up to the configured maximum (default 60 000); 0 tries once.
    #[schema(value_type = Option<u64>, default = 0, example = 0)]
    wait_ms: Option<Number>,
    /// The holder's token, to re-enter a lock it holds.
    #[schema(value_type = Option<TokenText>)]
    token: Option<String>,
    /// `exclusive`: one holder alone (or one of `limit`). `shared`: with any
    /// number of other shared holders, while no exclusive request waits.
    #[schema(value_type = Option<LockModeText>, default = "exclusive")]
    mode: Option<String>,
    /// How many exclusive holders the lock admits at once: 1 is a plain
    /// lock, more a counting lock (a semaphore). Every request on a held
    /// key must name the limit it was taken with. Not with `shared`.
    #[schema(value_type = Option<u64>, default = 1, example = 1)]
    limit: Option<Number>,
}

/// `PUT /locks/{key}/ttl`: the owner's token and the new lease length.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtendBody {
    /// The holder's token. (The gateway also takes it from the `Lock-Token`
    /// header when the body has none.)
    #[schema(value_type = TokenText, required = true)]
    token: Option<String>,
    /// The lease becomes this long from now, in milliseconds, up to the
    /// configured maximum (default 3 600 000).
    #[schema(value_type = Option<u64>, default = 30000, example = 30000)]
    ttl_ms: Option<Number>,
}

/// A lock's state. No token is ever shown.
#[derive(Debug, Serialize, ToSchema)]
pub struct LockStatus {
    #[schema(example = "orders:42")]
    key: String,
    /// Always true: a lock that is not held answers 404.
    held: bool,
    /// Until the latest lease ends, in milliseconds.
    ttl_ms: u64,
    /// When the latest lease ends, in Unix ms by the Redis clock.
    expires_at_ms: u64,
    /// The newest grant's fencing token.
    fencing_token: u64,
    /// Re-entrant holds, of every holder together.
    holds: u64,
    #[schema(value_type = LockModeText)]
    mode: &'static str,
    /// Places of an exclusive lock (1 for a plain lock); absent for a
    /// shared one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = 1)]
    limit: Option<u32>,
    /// How many hold it.
    #[schema(example = 1)]
    holders: u64,
}

impl LockStatus {
    fn new(key: &LockKey, lock: Inspection) -> Self {
        Self {
            key: key.to_string(),
            held: true,
            ttl_ms: lock.state.ttl_ms,
            expires_at_ms: lock.state.expires_at_ms,
            fencing_token: lock.state.fencing_token,
            holds: lock.state.holds,
            mode: if lock.kind.is_shared() {
                "shared"
            } else {
                "exclusive"
            },
            limit: lock.kind.limit(),
            holders: lock.holders,
        }
    }
}

/// A renewed lease.
#[derive(Debug, Serialize, ToSchema)]
pub struct LeaseRenewal {
    #[schema(example = "orders:42")]
    key: String,
    ttl_ms: u64,
    expires_at_ms: u64,
    fencing_token: u64,
    holds: u64,
}

/// One re-entrant hold given up; the lock is still held.
#[derive(Debug, Serialize, ToSchema)]
pub struct HoldReleased {
    #[schema(example = "orders:42")]
    key: String,
    /// Holds left.
    #[schema(example = 1)]
    holds: u64,
}

problem_responses!(
    /// What `POST /locks` can refuse with.
    AcquireProblems:
        MalformedBody, Unauthorized, Forbidden, LockHeld, NotOwner, LimitMismatch,
        ModeConflict, BodyTooLarge, UnsupportedMediaType, InvalidKey, InvalidField,
        BackendUnavailable, TooManyWaiters, ShuttingDown, NotReplicated, RequestTimeout,
);

problem_responses!(
    /// What `DELETE /locks/{key}` can refuse with.
    ReleaseProblems:
        MissingToken, Unauthorized, Forbidden, LockNotFound, NotOwner, InvalidKey,
        InvalidToken, BackendUnavailable,
);

problem_responses!(
    /// What `PUT /locks/{key}/ttl` can refuse with.
    ExtendProblems:
        MissingToken, MalformedBody, Unauthorized, Forbidden, LockNotFound, NotOwner,
        BodyTooLarge, UnsupportedMediaType, InvalidKey, InvalidToken, InvalidField,
        BackendUnavailable, NotReplicated,
);

problem_responses!(
    /// What `GET /locks/{key}` can refuse with.
    InspectProblems:
        Unauthorized, Forbidden, LockNotFound, InvalidKey, BackendUnavailable,
);

/// Take a lock, wait for it, or re-enter it; or hold it as a stream.
///
/// With `wait_ms` > 0 the request waits on the server while there is no
/// place for it: a release wakes it at once (Redis pub/sub, no polling), an
/// expiry no later than the earliest holder's remaining lease. A client that
/// disconnects while waiting stops waiting and is granted nothing.
///
/// `mode` and `limit` make it a shared (read-write) or counting lock: any
/// number of `shared` holders at once, an exclusive one alone, and while
/// an exclusive request waits, new shared ones wait behind it; or up to
/// `limit` exclusive holders. Each holder has its own token, lease, holds
/// and fencing token. A held key must be asked for with the limit it was
/// taken with (`409 limit-mismatch`), and re-entered in the mode it was
/// taken in (`409 mode-conflict`).
///
/// With `Accept: text/event-stream` the lock is held for as long as the
/// response stays open: the gateway renews it every `ttl_ms / 3` and
/// releases it (every hold) the moment the client closes the connection.
/// The answer is `200` with Server-Sent Events: `acquired` (the grant, as a
/// `201` body), `renewed` (`RenewedEvent`) after each renewal, and last
/// `released` (`ReleasedEvent`: someone released it with `DELETE` and the
/// token) or `lost` (`LostEvent`, with its reason). An idle stream gets an
/// SSE comment at least every 15 s. Refusals are the ordinary answers; a
/// re-entry `token` is refused with `422`.
#[utoipa::path(
    post,
    path = "/locks",
    tag = "locks",
    security((), ("api_key" = [])),
    params(
        ("Accept" = Option<String>, Header, description = "`text/event-stream` for a streamed lock"),
    ),
    request_body = AcquireBody,
    responses(
        (status = 201, description = "Acquired by a new owner", body = LockGrant,
            headers(("Location" = String, description = "/locks/{key}"))),
        (status = 200, description = "Re-entered with the holder's token (`application/json`); or, with \
            `Accept: text/event-stream`, the event stream of a streamed lock",
            content(
                (LockGrant = "application/json"),
                (String = "text/event-stream", example = json!(
                    "event: acquired\ndata: {\"key\":\"orders:42\",\"token\":\"5c0f4e1e-3c4e-4d8b-9a51-0e6c1f2d7a90\",\
                    \"fencing_token\":1795331974189167,\"ttl_ms\":3000,\"expires_at_ms\":1795331977189,\"holds\":1,\
                    \"waited_ms\":0}\n\nevent: renewed\ndata: {\"expires_at_ms\":1795331978190}\n\n\
                    event: released\ndata: {\"key\":\"orders:42\"}\n\n"
                )),
            )),
        AcquireProblems,
    )
)]
pub async fn acquire(
    _access: ApiKeyAccess,
    State(locks): State<Locks>,
    State(streams): State<Streams>,
    State(limits): State<LockLimits>,
    State(keep_alive): State<StreamKeepAlive>,
    WantsStream(streamed): WantsStream,
    JsonBody(body): JsonBody<AcquireBody>,
) -> Result<Response, ApiError> {
    let request = AcquireRequest {
        key: LockKey::parse(&body.key)?,
        kind: kind(body.mode.as_deref(), body.limit.as_ref())?,
        ttl: ttl(body.ttl_ms.as_ref(), limits)?,
        wait: wait(body.wait_ms.as_ref(), limits)?,
        token: body
            .token
            .map(|text| {
                Token::parse(&text).map_err(|_| {
                    ApiError::invalid_field(
                        "token",
                        format!("must be the token of a grant: a UUID such as {EXAMPLE_TOKEN}"),
                    )
                })
            })
            .transpose()?,
        confirmed: true,
        streamed,
    };
    if streamed {
        // Boxed: a streamed lock's state would otherwise enlarge every
        // plain request waiting for a lock.
        return Box::pin(stream::respond(&streams, request, keep_alive)).await;
    }
    let mut lease = locks.acquire(request).await?;
    let json = serde_json::to_vec(&LockGrant::from(&lease)).map_err(|_| ApiError::Internal)?;
    let Some(handover) = lease.handover.take() else {
        return Ok(([(header::CONTENT_TYPE, "application/json")], json).into_response());
    };
    let location =
        HeaderValue::try_from(format!("/locks/{}", lease.key)).map_err(|_| ApiError::Internal)?;
    let body = GrantBody {
        json: Some(Bytes::from(json)),
        handover: Some(handover),
    };
    Ok((
        StatusCode::CREATED,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::LOCATION, location),
        ],
        Body::new(body),
    )
        .into_response())
}

/// The body of a new grant. Hyper polls a body only to write it to a live
/// connection, so the first poll completes the handover; a body dropped
/// unpolled (the client left while the grant was being made) releases the
/// grant instead of leaving it held by nobody.
struct GrantBody {
    json: Option<Bytes>,
    handover: Option<Handover>,
}

impl http_body::Body for GrantBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let body = self.get_mut();
        if let Some(handover) = body.handover.take() {
            handover.complete();
        }
        Poll::Ready(body.json.take().map(|json| Ok(Frame::data(json))))
    }

    fn is_end_stream(&self) -> bool {
        self.json.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.json.as_ref().map_or(0, |json| json.len() as u64))
    }
}

/// Release one hold; the last one frees the lock and wakes waiters.
#[utoipa::path(
    delete,
    path = "/locks/{key}",
    tag = "locks",
    security((), ("api_key" = [])),
    params(
        ("key" = LockKeyText, Path, description = "The lock"),
        ("Lock-Token" = TokenText, Header, description = "The holder's token (or `?token=` instead)"),
        ("token" = Option<TokenText>, Query, description = "The holder's token, for clients that cannot set headers"),
    ),
    responses(
        (status = 204, description = "Released; waiters are woken"),
        (status = 200, description = "One re-entrant hold released; still held", body = HoldReleased),
        ReleaseProblems,
    )
)]
pub async fn release(
    _access: ApiKeyAccess,
    State(locks): State<Locks>,
    KeyPath(key): KeyPath,
    OwnerToken(token): OwnerToken,
) -> Result<Response, ApiError> {
    Ok(match locks.release(&key, &token).await? {
        Released::Free => StatusCode::NO_CONTENT.into_response(),
        Released::HoldsLeft(holds) => Json(HoldReleased {
            key: key.to_string(),
            holds,
        })
        .into_response(),
    })
}

/// Renew a lease: it ends `ttl_ms` from now.
#[utoipa::path(
    put,
    path = "/locks/{key}/ttl",
    tag = "locks",
    security((), ("api_key" = [])),
    params(
        ("key" = LockKeyText, Path, description = "The lock"),
        ("Lock-Token" = Option<TokenText>, Header, description = "The holder's token, when the body has none"),
    ),
    request_body = ExtendBody,
    responses(
        (status = 200, description = "Renewed", body = LeaseRenewal),
        ExtendProblems,
    )
)]
pub async fn extend(
    _access: ApiKeyAccess,
    State(locks): State<Locks>,
    State(limits): State<LockLimits>,
    KeyPath(key): KeyPath,
    headers: HeaderMap,
    JsonBody(body): JsonBody<ExtendBody>,
) -> Result<Json<LeaseRenewal>, ApiError> {
    let from_body = body.token.as_deref().map(Token::parse).transpose()?;
    let token = one_token(from_body, token_header(&headers)?)?;
    let ttl = ttl(body.ttl_ms.as_ref(), limits)?;
    let state = locks.extend(&key, &token, ttl).await?;
    Ok(Json(LeaseRenewal {
        key: key.to_string(),
        ttl_ms: state.ttl_ms,
        expires_at_ms: state.expires_at_ms,
        fencing_token: state.fencing_token,
        holds: state.holds,
    }))
}

/// Inspect a lock: whether it is held, until when, its fencing token, its
/// mode and limit, and how many hold it.
#[utoipa::path(
    get,
    path = "/locks/{key}",
    tag = "locks",
    security((), ("api_key" = [])),
    params(("key" = LockKeyText, Path, description = "The lock")),
    responses(
        (status = 200, description = "Held", body = LockStatus),
        InspectProblems,
    )
)]
pub async fn inspect(
    _access: ApiKeyAccess,
    State(locks): State<Locks>,
    KeyPath(key): KeyPath,
) -> Result<Json<LockStatus>, ApiError> {
    let state = locks.inspect(&key).await?;
    Ok(Json(LockStatus::new(&key, state)))
}

fn ttl(field: Option<&Number>, limits: LockLimits) -> Result<Ttl, ApiError> {
    let ms = whole_number_or("ttl_ms", field, Ttl::DEFAULT_MS)?;
    Ttl::new(ms, limits).map_err(|range| ApiError::OutOfRange {
        field: "ttl_ms",
        range,
    })
}

fn kind(mode: Option<&str>, limit: Option<&Number>) -> Result<LockKind, ApiError> {
    let shared = match mode {
        None | Some("exclusive") => false,
        Some("shared") => true,
        Some(_) => {
            return Err(ApiError::invalid_field(
                "mode",
                "must be exclusive or shared",
            ));
        }
    };
    let limit = limit
        .map(|number| whole_number("limit", number))
        .transpose()?;
    lock_kind(shared, limit).map_err(|err| match err {
        InvalidKind::LimitWithShared => ApiError::invalid_field("limit", err),
        InvalidKind::Limit(range) => ApiError::OutOfRange {
            field: "limit",
            range,
        },
    })
}

fn wait(field: Option<&Number>, limits: LockLimits) -> Result<WaitTime, ApiError> {
    let ms = whole_number_or("wait_ms", field, 0)?;
    WaitTime::new(ms, limits).map_err(|range| ApiError::OutOfRange {
        field: "wait_ms",
        range,
    })
}
