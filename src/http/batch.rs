//! `POST /locks/batch` (several locks at once, all or none, for one token) and `PUT /locks/{key}/mode` (a holder's upgrade or downgrade).

use std::collections::HashSet;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Number;
use utoipa::ToSchema;

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{HolderChange, JsonBody, NamesToken, whole_number_or};
use super::grant::{BatchGrant, guarded_body};
use super::locks::{kind, permits, ttl, value, wait};
use super::responses::problem_responses;
use super::schema::{LockKeyText, LockModeText, LockStreamEvent, TokenText};
use super::streamed::{self, StreamKeepAlive, WantsStream};
use crate::acl::Permission;
use crate::locks::{
    BatchLease, BatchLock, BatchRequest, HoldMode, LockKey, LockLimits, Locks, MAX_BATCH,
    SessionId, StreamedLocks, WaitTime,
};

/// `POST /locks/batch`: the locks, and what they share.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchBody {
    /// 1 to 64 locks, no key twice; each as `POST /locks` names one.
    #[schema(min_items = 1, max_items = 64)]
    locks: Vec<BatchLockBody>,
    /// Every lock's lease, in milliseconds (as `POST /locks`).
    #[schema(value_type = Option<u64>, default = 30000, example = 30000)]
    ttl_ms: Option<Number>,
    /// How long the whole batch may wait, in milliseconds (as `POST
    /// /locks`): the batch's budget, not each lock's.
    #[schema(value_type = Option<u64>, default = 0, example = 0)]
    wait_ms: Option<Number>,
    /// A session's id: every lock lives as long as the session.
    #[schema(value_type = Option<TokenText>)]
    session: Option<String>,
    /// The holder's public value, on every lock.
    #[schema(example = "transfer-7")]
    value: Option<String>,
}

/// One lock of a batch.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchLockBody {
    #[schema(example = "acct:1")]
    key: String,
    #[schema(value_type = Option<LockModeText>, default = "exclusive")]
    mode: Option<String>,
    #[schema(value_type = Option<u64>, default = 1, example = 1)]
    limit: Option<Number>,
    #[schema(value_type = Option<u64>, default = 1, example = 1)]
    permits: Option<Number>,
}

problem_responses!(
    /// What `POST /locks/batch` can refuse with.
    BatchProblems:
        MalformedBody, Unauthorized, Forbidden, LockHeld, LimitMismatch, BodyTooLarge,
        UnsupportedMediaType, InvalidKey, InvalidField, BackendUnavailable, FormatUnsupported, TooManyWaiters,
        ShuttingDown, NotReplicated, RequestTimeout, SessionNotFound, Deadlock,
);

/// Take several locks at once, all or none, for one owner token: a
/// transfer between two accounts, a seat and a payment. On one Redis the
/// batch is granted in one step (no observer sees part of it held); on a
/// Redis Cluster the locks are taken in the order of their keys and given
/// back on refusal. `wait_ms` bounds the whole batch; batches that name
/// the same keys in any order never wait for each other in a circle. Each
/// lock then is an ordinary hold of the token.
///
/// With `Accept: text/event-stream` the batch is held for as long as the
/// response stays open, as a streamed lock is: the gateway renews every
/// lock of it each `ttl_ms / 3` and releases them all the moment the
/// client closes the connection. The answer is `200` with Server-Sent
/// Events: `acquired` (the grant, as a `201` body), `renewed`
/// (`RenewedEvent`: the earliest lease end, once every lock is renewed),
/// and last `released` (`ReleasedEvent`: one lock was released with
/// `DELETE` and the token) or `lost` (`LostEvent`, naming the lock), after
/// which the gateway releases the others. In a session the locks hang on
/// its lease (no `renewed`), and the stream ends with the session.
/// Refusals are the ordinary answers.
#[utoipa::path(
    post,
    path = "/locks/batch",
    tag = "locks",
    security((), ("api_key" = [])),
    params(
        ("Accept" = Option<String>, Header, description = "`text/event-stream` for a streamed batch"),
    ),
    request_body = BatchBody,
    responses(
        (status = 201, description = "Every lock taken", body = BatchGrant),
        (status = 200, description = "With `Accept: text/event-stream`, the event stream of a streamed batch",
            content(
                (LockStreamEvent = "text/event-stream", example = json!(
                    "event: acquired\ndata: {\"token\":\"5c0f4e1e-3c4e-4d8b-9a51-0e6c1f2d7a90\",\"ttl_ms\":3000,\
                    \"expires_at_ms\":1795331977189,\"waited_ms\":0,\"locks\":[{\"key\":\"acct:1\",\
                    \"mode\":\"exclusive\",\"fencing_token\":1795331974189167,\"expires_at_ms\":1795331977189}]}\n\n\
                    event: renewed\ndata: {\"expires_at_ms\":1795331978190}\n\n\
                    event: lost\ndata: {\"reason\":\"revoked\",\"key\":\"acct:1\"}\n\n"
                )),
            )),
        BatchProblems,
    )
)]
pub fn acquire_batch(
    caller: Caller,
    State(locks): State<Locks>,
    State(streamed_locks): State<StreamedLocks>,
    State(limits): State<LockLimits>,
    State(keep_alive): State<StreamKeepAlive>,
    WantsStream(streamed): WantsStream,
    JsonBody(body): JsonBody<BatchBody>,
) -> impl Future<Output = Result<Response, ApiError>> + Send {
    // Read before the future starts (see `POST /locks`): a waiting batch's
    // future keeps nothing of the body.
    let request = permitted_batch(&caller, body, limits);
    async move {
        let request = request?;
        if streamed {
            // Boxed: a stream's state would otherwise enlarge every waiting batch.
            return Box::pin(streamed::respond_batch(streamed_locks, request, keep_alive)).await;
        }
        batch_granted(locks.acquire_batch(request).await?)
    }
}

/// The batch a caller asks for, once it may take every lock of it.
fn permitted_batch(
    caller: &Caller,
    body: BatchBody,
    limits: LockLimits,
) -> Result<BatchRequest, ApiError> {
    let request = batch_request(body, limits)?;
    for lock in &request.locks {
        caller.may(Permission::Lock, lock.key.as_str())?;
    }
    if let Some(session) = &request.session {
        caller.may_use_session(|owner| session.belongs_to(owner))?;
    }
    Ok(request)
}

fn batch_request(body: BatchBody, limits: LockLimits) -> Result<BatchRequest, ApiError> {
    if body.locks.is_empty() || body.locks.len() > MAX_BATCH {
        return Err(ApiError::invalid_field(
            "locks",
            format!("must name 1 to {MAX_BATCH} locks"),
        ));
    }
    let mut seen = HashSet::new();
    let mut batch = Vec::with_capacity(body.locks.len());
    for lock in &body.locks {
        let key = LockKey::parse(&lock.key)?;
        if !seen.insert(key.as_str().to_owned()) {
            return Err(ApiError::invalid_field(
                "locks",
                format!("names {key} twice: one hold per lock"),
            ));
        }
        let kind = kind(lock.mode.as_deref(), lock.limit.as_ref())?;
        let permits = permits(lock.permits.as_ref(), kind)?;
        batch.push(BatchLock { key, kind, permits });
    }
    Ok(BatchRequest {
        locks: batch,
        ttl: ttl(body.ttl_ms.as_ref(), limits)?,
        wait: wait(body.wait_ms.as_ref(), limits)?,
        value: body.value.as_deref().map(value).transpose()?,
        session: body
            .session
            .as_deref()
            .map(SessionId::parse)
            .transpose()
            .map_err(|err| ApiError::invalid_field("session", err))?,
    })
}

/// `201` with the batch; its guards complete when the body is written (a
/// client gone before then holds nothing).
fn batch_granted(lease: BatchLease) -> Result<Response, ApiError> {
    let json = serde_json::to_vec(&BatchGrant::from(&lease)).map_err(|_| ApiError::Internal)?;
    let body: Body = guarded_body(json, lease.guards);
    Ok((
        StatusCode::CREATED,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response())
}

/// `PUT /locks/{key}/mode`: the holder's token, the mode it asks for, and
/// how long an upgrade may wait.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModeBody {
    /// The holder's token. (The gateway also takes it from the `Lock-Token`
    /// header when the body has none.)
    #[schema(value_type = TokenText, required = true)]
    token: Option<String>,
    /// `exclusive` (an upgrade of a shared hold) or `shared` (a downgrade of
    /// an exclusive one).
    #[schema(value_type = LockModeText)]
    mode: String,
    /// How long an upgrade may wait for the other shared holders to leave,
    /// in milliseconds; 0 tries once.
    #[schema(value_type = Option<u64>, default = 0, example = 0)]
    wait_ms: Option<Number>,
}

impl NamesToken for ModeBody {
    fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }
}

/// A hold in its new mode.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModeChange {
    #[schema(example = "orders:42")]
    key: String,
    #[schema(value_type = LockModeText)]
    mode: &'static str,
    /// What is left of the lease (unchanged by the change of mode).
    ttl_ms: u64,
    expires_at_ms: u64,
    /// A new, larger one after an upgrade; unchanged by a downgrade.
    fencing_token: u64,
    holds: u64,
}

problem_responses!(
    /// What `PUT /locks/{key}/mode` can refuse with.
    ModeProblems:
        MissingToken, MalformedBody, Unauthorized, Forbidden, LockHeld, LockNotFound, NotOwner,
        ModeConflict, Deadlock, BodyTooLarge, UnsupportedMediaType, InvalidKey, InvalidToken,
        InvalidField, BackendUnavailable, FormatUnsupported, TooManyWaiters, ShuttingDown, NotReplicated,
        RequestTimeout,
);

/// Change a hold's mode without letting go. A shared holder becomes the
/// exclusive holder (upgrade): at once when it is the only holder, else
/// waiting up to `wait_ms` for the other shared holders to leave, ahead of
/// every request that arrived after it; the upgraded hold gets a new,
/// larger fencing token. Two holders upgrading at once would wait for each
/// other: the second is answered `409 deadlock` at once, keeping its
/// shared place. An exclusive holder becomes a shared one (downgrade),
/// keeping its fencing token, and the shared waiters behind it come in. A
/// counting lock's holder has no other mode (`409 mode-conflict`).
#[utoipa::path(
    put,
    path = "/locks/{key}/mode",
    tag = "locks",
    security((), ("api_key" = [])),
    params(
        ("key" = LockKeyText, Path, description = "The lock"),
    ),
    request_body = ModeBody,
    responses(
        (status = 200, description = "Held in that mode now", body = ModeChange),
        ModeProblems,
    )
)]
pub async fn change_mode(
    State(locks): State<Locks>,
    State(limits): State<LockLimits>,
    HolderChange { key, token, body }: HolderChange<ModeBody>,
) -> Result<Json<ModeChange>, ApiError> {
    let mode = match body.mode.as_str() {
        "exclusive" => HoldMode::Exclusive,
        "shared" => HoldMode::Shared,
        _ => {
            return Err(ApiError::invalid_field(
                "mode",
                "must be exclusive or shared",
            ));
        }
    };
    let wait_ms = whole_number_or("wait_ms", body.wait_ms.as_ref(), 0)?;
    let wait = WaitTime::new(wait_ms, limits).map_err(|range| ApiError::OutOfRange {
        field: "wait_ms",
        range,
    })?;
    let changed = locks.change_mode(&key, &token, mode, wait).await?;
    Ok(Json(ModeChange {
        key: key.to_string(),
        mode: changed.mode.as_str(),
        ttl_ms: changed.state.ttl_ms,
        expires_at_ms: changed.state.expires_at_ms,
        fencing_token: changed.state.fencing_token,
        holds: changed.state.holds,
    }))
}

#[cfg(test)]
mod tests {
    /// A batch or an upgrade that waits keeps its handler's future for the
    /// whole wait: its Redis round trips are boxed so that their state is
    /// not part of it (see the same bound for `POST /locks`).
    #[test]
    fn waiting_batches_and_upgrades_keep_small_futures() {
        fn three<A, B, C, F>(_: fn(A, B, C) -> F) -> usize {
            std::mem::size_of::<F>()
        }
        fn seven<A, B, C, D, E, G, H, F>(_: fn(A, B, C, D, E, G, H) -> F) -> usize {
            std::mem::size_of::<F>()
        }
        let batch = seven(super::acquire_batch as fn(_, _, _, _, _, _, _) -> _);
        let upgrade = three(super::change_mode as fn(_, _, _) -> _);
        assert!(
            batch <= 6 * 1024,
            "the batch handler's future is {batch} bytes"
        );
        assert!(
            upgrade <= 6 * 1024,
            "the mode handler's future is {upgrade} bytes"
        );
    }
}
