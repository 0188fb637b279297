//! The lock routes that change a lock: `POST /locks`, `DELETE /locks/{key}` (a release, or with `force=true` a revocation), `PUT /locks/{key}/ttl`, `PUT /locks/{key}/value`.

use axum::Json;
use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Number;
use utoipa::ToSchema;

use super::audit;
use super::auth::{AdminToken, Caller, permitted};
use super::error::ApiError;
use super::extract::{
    HolderChange, IdempotencyKeyHeader, JsonBody, KeyPath, NamesToken, holder_token, whole_number,
    whole_number_or,
};
use super::grant::{LockGrant, granted};
use super::responses::problem_responses;
use super::schema::{IdempotencyKeyText, LockKeyText, LockModeText, LockStreamEvent, TokenText};
use super::streamed::{self, StreamKeepAlive, WantsStream};
use crate::acl::Permission;
use crate::locks::{
    AcquireRequest, EXAMPLE_TOKEN, IdempotencyKey, InvalidKind, LockError, LockKey, LockKind,
    LockLimits, LockValue, Locks, OutOfRange, Released, SessionId, StreamedLocks, Token, Ttl,
    WaitTime, lock_kind,
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
    /// How long to wait while there is no place, in milliseconds, up to
    /// the configured maximum (default 60 000); 0 tries once. Waiters are
    /// served in arrival order, on whichever instance they wait.
    #[schema(value_type = Option<u64>, default = 0, example = 0)]
    wait_ms: Option<Number>,
    /// The holder's token, to re-enter a lock it holds.
    #[schema(value_type = Option<TokenText>)]
    token: Option<String>,
    /// `exclusive`: one holder alone (or one of `limit`). `shared`: with any
    /// number of other shared holders, while no exclusive request waits
    /// ahead of it.
    #[schema(value_type = Option<LockModeText>, default = "exclusive")]
    mode: Option<String>,
    /// How many exclusive holders the lock admits at once: 1 is a plain
    /// lock, more a counting lock (a semaphore). Every request on a held
    /// key must name the limit it was taken with. Not with `shared`.
    #[schema(value_type = Option<u64>, default = 1, example = 1)]
    limit: Option<Number>,
    /// How many of a counting lock's places this holder takes, 1 to
    /// `limit`. Waiters are served in arrival order: a request for many at
    /// the head of the queue holds back smaller ones behind it.
    #[schema(value_type = Option<u64>, default = 1, example = 1)]
    permits: Option<Number>,
    /// The holder's public value, at most 1024 bytes: shown to everyone who
    /// reads or watches the lock (an address, a host name), never a secret.
    #[schema(example = "10.0.0.7:9000")]
    value: Option<String>,
    /// A session's id: the lock lives as long as the session (its `ttl_ms`
    /// is ignored) unless released first.
    #[schema(value_type = Option<TokenText>)]
    session: Option<String>,
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

impl NamesToken for ExtendBody {
    fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }
}

/// `PUT /locks/{key}/value`: the holder's token and its new public value.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ValueBody {
    /// The holder's token. (The gateway also takes it from the `Lock-Token`
    /// header when the body has none.)
    #[schema(value_type = TokenText, required = true)]
    token: Option<String>,
    /// The new value, at most 1024 bytes; null removes it.
    #[schema(example = "10.0.0.8:9000")]
    value: Option<String>,
}

impl NamesToken for ValueBody {
    fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }
}

/// A holder's lease as it now stands.
#[derive(Debug, Serialize, ToSchema)]
pub struct LeaseRenewal {
    #[schema(example = "orders:42")]
    key: String,
    /// The lease's length from now (the new one, after a renewal).
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
        IdempotencyKeyReused, BackendUnavailable, FormatUnsupported, TooManyWaiters, ShuttingDown, NotReplicated,
        RequestTimeout, SessionNotFound, Deadlock,
);

problem_responses!(
    /// What `DELETE /locks/{key}` can refuse with.
    ReleaseProblems:
        MissingToken, Unauthorized, Forbidden, AdministrationDisabled, LockNotFound, NotOwner,
        InvalidKey, InvalidToken, InvalidField, IdempotencyKeyReused, BackendUnavailable, FormatUnsupported,
);

problem_responses!(
    /// What `PUT /locks/{key}/ttl` can refuse with.
    ExtendProblems:
        MissingToken, MalformedBody, Unauthorized, Forbidden, LockNotFound, NotOwner,
        BodyTooLarge, UnsupportedMediaType, InvalidKey, InvalidToken, InvalidField,
        BackendUnavailable, FormatUnsupported, NotReplicated, SessionNotFound,
);

problem_responses!(
    /// What `PUT /locks/{key}/value` can refuse with.
    ValueProblems:
        MissingToken, MalformedBody, Unauthorized, Forbidden, LockNotFound, NotOwner,
        BodyTooLarge, UnsupportedMediaType, InvalidKey, InvalidToken, InvalidField,
        BackendUnavailable, FormatUnsupported, SessionNotFound,
);

/// Take a lock, wait for it, or re-enter it; or hold it as a stream.
///
/// With `wait_ms` > 0 the request waits on the server while there is no
/// place for it, in the lock's queue: waiters are served in arrival order
/// across every instance, the release hands the place to the head of the
/// queue and tells that waiter alone (no polling), a lease that runs out
/// does the same at its end, and a waiter whose client disconnects loses
/// its place at once (within a second if its gateway died).
///
/// `mode` and `limit` make it a shared (read-write) or counting lock: any
/// number of `shared` holders at once, an exclusive one alone; or up to
/// `limit` exclusive holders. Each holder has its own token, lease, holds,
/// fencing token and public `value`. A held key must be asked for with the
/// limit it was taken with (`409 limit-mismatch`), and re-entered in the
/// mode it was taken in (`409 mode-conflict`).
///
/// With an `Idempotency-Key`, a retry of the same request while the grant
/// it made lives answers that grant again (`201`, `Idempotent-Replayed:
/// true`), on any instance; the same key with another request is `422
/// idempotency-key-reused`. Not for streamed locks nor re-entry.
///
/// With `Accept: text/event-stream` the lock is held for as long as the
/// response stays open: the gateway renews it every `ttl_ms / 3` and
/// releases it (every hold) the moment the client closes the connection.
/// The answer is `200` with Server-Sent Events: `queued` (`QueuedEvent`:
/// its place in the queue, while it waits), `acquired` (the grant, as a
/// `201` body), `renewed` (`RenewedEvent`) after each renewal, and last
/// `released` (`ReleasedEvent`: someone released it with `DELETE` and the
/// token), `lost` (`LostEvent`, with its reason) or, when the wait ran out
/// after the stream began, `refused` (the problem document a plain request
/// would have been answered with). An idle stream gets an SSE comment at
/// least every 15 s. Refusals before any wait are the ordinary answers.
#[utoipa::path(
    post,
    path = "/locks",
    tag = "locks",
    security((), ("api_key" = [])),
    params(
        ("Accept" = Option<String>, Header, description = "`text/event-stream` for a streamed lock"),
        ("Idempotency-Key" = Option<IdempotencyKeyText>, Header, description = "A fresh client-chosen key (a UUID) per acquisition, so that a retry after a lost answer gets the same grant"),
    ),
    request_body = AcquireBody,
    responses(
        (status = 201, description = "Acquired by a new owner (or, with `Idempotent-Replayed: true`, the grant this Idempotency-Key made)", body = LockGrant,
            headers(
                ("Location" = String, description = "/locks/{key}"),
                ("Idempotent-Replayed" = Option<String>, description = "`true` when the grant is answered again"),
            )),
        (status = 200, description = "Re-entered with the holder's token (`application/json`); or, with \
            `Accept: text/event-stream`, the event stream of a streamed lock",
            content(
                (LockGrant = "application/json"),
                (LockStreamEvent = "text/event-stream", example = json!(
                    "event: queued\ndata: {\"position\":1}\n\n\
                    event: acquired\ndata: {\"key\":\"orders:42\",\"token\":\"5c0f4e1e-3c4e-4d8b-9a51-0e6c1f2d7a90\",\
                    \"fencing_token\":1795331974189167,\"ttl_ms\":3000,\"expires_at_ms\":1795331977189,\"holds\":1,\
                    \"waited_ms\":120}\n\nevent: renewed\ndata: {\"expires_at_ms\":1795331978190}\n\n\
                    event: released\ndata: {\"key\":\"orders:42\"}\n\n"
                )),
            )),
        AcquireProblems,
    )
)]
pub fn acquire(
    caller: Caller,
    State(locks): State<Locks>,
    State(streamed_locks): State<StreamedLocks>,
    State(limits): State<LockLimits>,
    State(keep_alive): State<StreamKeepAlive>,
    headers: AcquireHeaders,
    JsonBody(body): JsonBody<AcquireBody>,
) -> impl Future<Output = Result<Response, ApiError>> + Send {
    // Read before the future starts, not in an async fn: an async fn's
    // future keeps room for every argument (the body, the headers) for as
    // long as it lives, and a waiting request's future lives for the wait.
    let request = acquire_request(&caller, headers, body, limits);
    async move {
        match request {
            Err(refused) => Err(refused),
            // Boxed: a streamed lock's state would otherwise enlarge every
            // plain request waiting for a lock.
            Ok((request, true)) => {
                Box::pin(streamed::respond(streamed_locks, request, keep_alive)).await
            }
            Ok((request, false)) => granted(locks.acquire(request).await?),
        }
    }
}

/// The request `POST /locks` makes of its body and headers, and whether it
/// asks for a streamed lock.
fn acquire_request(
    caller: &Caller,
    headers: AcquireHeaders,
    body: AcquireBody,
    limits: LockLimits,
) -> Result<(AcquireRequest, bool), ApiError> {
    let AcquireHeaders {
        streamed,
        idempotency_key,
    } = headers;
    let key = LockKey::parse(&body.key)?;
    caller.may(Permission::Lock, key.as_str())?;
    let mut request = AcquireRequest::new(
        key,
        kind(body.mode.as_deref(), body.limit.as_ref())?,
        ttl(body.ttl_ms.as_ref(), limits)?,
        wait(body.wait_ms.as_ref(), limits)?,
    );
    request.permits = permits(body.permits.as_ref(), request.kind)?;
    request.token = body.token.as_deref().map(reentry_token).transpose()?;
    request.value = body.value.as_deref().map(value).transpose()?;
    request.session = body
        .session
        .as_deref()
        .map(SessionId::parse)
        .transpose()
        .map_err(|err| ApiError::invalid_field("session", err))?;
    if let Some(session) = &request.session {
        caller.may_use_session(|owner| session.belongs_to(owner))?;
    }
    if idempotency_key.is_some() && (streamed || request.token.is_some()) {
        return Err(ApiError::invalid_field(
            "Idempotency-Key",
            "is for new grants only: a streamed lock is its own grant, and a re-entry repeats \
             nothing",
        ));
    }
    request.idempotency_key = idempotency_key.map(|key| key.scoped(&caller.idempotency_scope()));
    Ok((request, streamed))
}

/// What `POST /locks` reads from its headers: whether it asks for a
/// streamed lock, and its Idempotency-Key.
pub struct AcquireHeaders {
    streamed: bool,
    idempotency_key: Option<IdempotencyKey>,
}

impl<S: Send + Sync> FromRequestParts<S> for AcquireHeaders {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Ok(WantsStream(streamed)) = WantsStream::from_request_parts(parts, state).await;
        let IdempotencyKeyHeader(idempotency_key) =
            IdempotencyKeyHeader::from_request_parts(parts, state).await?;
        Ok(Self {
            streamed,
            idempotency_key,
        })
    }
}

/// Release one hold; the last one frees the lock, and the head of its
/// queue is granted it. With `force=true` and the admin token: revoke it.
///
/// The token travels in the `Lock-Token` header, or (for clients that
/// cannot set headers) as `?token=`; both, with different tokens, is a
/// `422`. With `fencing_token`, a release happens only if the token's hold
/// has that fencing token (`409 not-owner` otherwise).
///
/// A release answered `503` may have taken effect. With an
/// `Idempotency-Key`, a retry with the same key and token, within a
/// minute, answers what the first release did (`Idempotent-Replayed:
/// true`), however the lock stands now; without one, a retry of a release
/// that took effect answers `404` or `409`: the token holds nothing.
///
/// A revocation ends every hold of the lock at once (`204`; `404` when it
/// is not held), or with `fencing_token` only the hold with that fencing
/// token (`404` when that hold is gone: never another holder's): each
/// streamed holder's stream ends with `lost` (`revoked`), `lockgate run`
/// stops its command, watchers get `revoked`, the queue is served, and the
/// next grant's fencing token is larger than any before, so a resource
/// that checks fencing tokens refuses the old holder's writes.
#[utoipa::path(
    delete,
    path = "/locks/{key}",
    tag = "locks",
    security((), ("api_key" = []), ("admin" = [])),
    params(
        ("key" = LockKeyText, Path, description = "The lock"),
        ("Lock-Token" = TokenText, Header, description = "The holder's token (a revocation ignores it)"),
        ("force" = Option<bool>, Query, description = "`true` revokes the lock (every hold; needs the admin token)"),
        ("fencing_token" = Option<u64>, Query, description = "With `force=true`: revoke only the hold with this fencing token. Without: release only if the token's hold has this fencing token"),
        ("Idempotency-Key" = Option<IdempotencyKeyText>, Header, description = "A fresh client-chosen key per release, so that a retry after a lost answer or a 503 is answered what the first release did"),
    ),
    responses(
        (status = 204, description = "Released (or revoked); the next waiter is served",
            headers(("Idempotent-Replayed" = Option<String>, description = "`true` when a release under this Idempotency-Key is answered again"))),
        (status = 200, description = "One re-entrant hold released; still held", body = HoldReleased,
            headers(("Idempotent-Replayed" = Option<String>, description = "`true` when a release under this Idempotency-Key is answered again"))),
        ReleaseProblems,
    )
)]
pub async fn release(
    caller: Caller,
    State(locks): State<Locks>,
    State(admin): State<AdminToken>,
    KeyPath(key): KeyPath,
    IdempotencyKeyHeader(idempotency_key): IdempotencyKeyHeader,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, ApiError> {
    let Query(query) = Query::<ReleaseQuery>::try_from_uri(&uri)
        .map_err(|_| ApiError::invalid_field("query", "takes each parameter at most once"))?;
    match query.force.as_deref() {
        None | Some("false") => {}
        Some("true") => {
            if caller.session_owner().is_some() {
                caller.may(Permission::Revoke, key.as_str())?;
            } else if let Err(err) = permitted(&admin, &headers) {
                audit::refused(caller.name(), "revoke", key.as_str(), "forbidden");
                return Err(err);
            }
            let only = revoked_hold(query.fencing_token.as_deref())?;
            let revoked = locks.revoke(&key, only).await;
            let outcome = match &revoked {
                Ok(_) => "revoked",
                Err(LockError::NotFound { .. }) => "not-held",
                Err(_) => "failed",
            };
            audit::record(caller.name(), "revoke", key.as_str(), outcome);
            revoked?;
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
        Some(_) => return Err(ApiError::invalid_field("force", "must be true or false")),
    }
    caller.may(Permission::Lock, key.as_str())?;
    let token = holder_token(query.token.as_deref(), &headers)?;
    let only = revoked_hold(query.fencing_token.as_deref())?;
    let (released, replayed) = match idempotency_key {
        Some(idempotency_key) => {
            let idempotency_key = idempotency_key.scoped(&caller.idempotency_scope());
            locks
                .release_keyed(&key, &token, only, &idempotency_key)
                .await?
        }
        None => (locks.release_if(&key, &token, only).await?, false),
    };
    let mut response = match released {
        Released::Free => StatusCode::NO_CONTENT.into_response(),
        Released::HoldsLeft(holds) => Json(HoldReleased {
            key: key.to_string(),
            holds,
        })
        .into_response(),
    };
    if replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// The query of `DELETE /locks/{key}`.
#[derive(Deserialize)]
struct ReleaseQuery {
    token: Option<String>,
    force: Option<String>,
    fencing_token: Option<String>,
}

/// The one hold a revocation (or a release) is for, by its fencing token.
fn revoked_hold(fencing_token: Option<&str>) -> Result<Option<u64>, ApiError> {
    fencing_token
        .map(|text| {
            text.parse::<u64>()
                .ok()
                .filter(|token| *token > 0)
                .ok_or_else(|| {
                    ApiError::invalid_field(
                        "fencing_token",
                        "must be a fencing token: a whole number from 1",
                    )
                })
        })
        .transpose()
}

/// Renew a lease: it ends `ttl_ms` from now.
#[utoipa::path(
    put,
    path = "/locks/{key}/ttl",
    tag = "locks",
    security((), ("api_key" = [])),
    params(
        ("key" = LockKeyText, Path, description = "The lock"),
    ),
    request_body = ExtendBody,
    responses(
        (status = 200, description = "Renewed", body = LeaseRenewal),
        ExtendProblems,
    )
)]
pub async fn extend(
    State(locks): State<Locks>,
    State(limits): State<LockLimits>,
    HolderChange { key, token, body }: HolderChange<ExtendBody>,
) -> Result<Json<LeaseRenewal>, ApiError> {
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

/// Replace the holder's public value (an election's "proclaim"): everyone
/// who reads the lock sees it, watchers get a `value` event. The lease is
/// not renewed.
#[utoipa::path(
    put,
    path = "/locks/{key}/value",
    tag = "locks",
    security((), ("api_key" = [])),
    params(
        ("key" = LockKeyText, Path, description = "The lock"),
    ),
    request_body = ValueBody,
    responses(
        (status = 200, description = "Set; the holder's lease as it stands", body = LeaseRenewal),
        ValueProblems,
    )
)]
pub async fn set_value(
    State(locks): State<Locks>,
    HolderChange { key, token, body }: HolderChange<ValueBody>,
) -> Result<Json<LeaseRenewal>, ApiError> {
    let value = body.value.as_deref().map(value).transpose()?;
    let state = locks.set_value(&key, &token, value.as_ref()).await?;
    Ok(Json(LeaseRenewal {
        key: key.to_string(),
        ttl_ms: state.ttl_ms,
        expires_at_ms: state.expires_at_ms,
        fencing_token: state.fencing_token,
        holds: state.holds,
    }))
}

fn reentry_token(text: &str) -> Result<Token, ApiError> {
    Token::parse(text).map_err(|_| {
        ApiError::invalid_field(
            "token",
            format!("must be the token of a grant: a UUID such as {EXAMPLE_TOKEN}"),
        )
    })
}

pub(super) fn value(text: &str) -> Result<LockValue, ApiError> {
    LockValue::parse(text).map_err(|err| ApiError::invalid_field("value", err))
}

pub(super) fn ttl(field: Option<&Number>, limits: LockLimits) -> Result<Ttl, ApiError> {
    let ms = whole_number_or("ttl_ms", field, Ttl::DEFAULT_MS)?;
    Ttl::new(ms, limits).map_err(|range| ApiError::OutOfRange {
        field: "ttl_ms",
        range,
    })
}

pub(super) fn kind(mode: Option<&str>, limit: Option<&Number>) -> Result<LockKind, ApiError> {
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

/// The places a holder of `kind` takes: 1 to a counting lock's limit, 1
/// for any other kind.
pub(super) fn permits(field: Option<&Number>, kind: LockKind) -> Result<u32, ApiError> {
    let Some(number) = field else {
        return Ok(1);
    };
    let permits = whole_number("permits", number)?;
    let Some(limit) = kind.limit() else {
        return Err(ApiError::invalid_field(
            "permits",
            "is for counting locks: a shared lock has no places to count",
        ));
    };
    match u32::try_from(permits) {
        Ok(permits) if (1..=limit).contains(&permits) => Ok(permits),
        _ => Err(ApiError::OutOfRange {
            field: "permits",
            range: OutOfRange {
                min: 1,
                max: u64::from(limit),
            },
        }),
    }
}

pub(super) fn wait(field: Option<&Number>, limits: LockLimits) -> Result<WaitTime, ApiError> {
    let ms = whole_number_or("wait_ms", field, 0)?;
    WaitTime::new(ms, limits).map_err(|range| ApiError::OutOfRange {
        field: "wait_ms",
        range,
    })
}

#[cfg(test)]
mod tests {
    /// What a request waiting for a lock keeps in memory is mostly its
    /// handler's future (axum boxes one per request): every state of it is
    /// as large as its largest, so a Redis round trip awaited inline in the
    /// acquire path (some 11 KB of redis-rs state) made each of 10 000
    /// waiters cost that much more. Round trips there are boxed; this bound
    /// (a debug build's future is larger than a release build's) catches
    /// one that is not.
    #[test]
    fn a_waiting_acquires_future_stays_small() {
        fn future_size<A, B, C, D, E, G, H, F>(_: fn(A, B, C, D, E, G, H) -> F) -> usize {
            std::mem::size_of::<F>()
        }
        let size = future_size(super::acquire as fn(_, _, _, _, _, _, _) -> _);
        assert!(
            size <= 6 * 1024,
            "the acquire handler's future is {size} bytes"
        );
    }
}
