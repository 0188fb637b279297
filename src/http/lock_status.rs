//! Reading locks without holding them: `GET /locks/{key}` (state, holders, waiters) and `GET /locks` (the held locks by prefix, a page at a time).

use axum::Json;
use axum::extract::{Query, State};
use axum::http::Uri;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Caller;
use super::error::ApiError;
use super::extract::KeyPath;
use super::responses::problem_responses;
use super::schema::{LockKeyText, LockModeText, held_false, held_true};
use crate::acl::Permission;
use crate::locks::MAX_LIST;
use crate::locks::{
    LeaseView, ListCursor, LockError, LockKey, LockSight, LockView, Locks, WaiterView,
};

/// A lock's state, its holders and its waiters. No token is ever shown.
#[derive(Debug, Serialize, ToSchema)]
pub struct LockStatus {
    #[schema(example = "orders:42")]
    key: String,
    #[schema(schema_with = held_true)]
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
    /// Each holder's lease, oldest grant first (an election's leader is
    /// the first).
    leases: Vec<LeaseEntry>,
    /// The requests waiting now, on every instance, in the order they will
    /// be served.
    waiters: Vec<WaiterEntry>,
}

/// One holder's lease, as anyone may see it: never its token.
#[derive(Debug, Serialize, ToSchema)]
pub struct LeaseEntry {
    fencing_token: u64,
    /// The holder's public value.
    #[schema(example = "10.0.0.7:9000")]
    value: Option<String>,
    holds: u64,
    /// When it was granted, in Unix ms by the Redis clock.
    acquired_at_ms: u64,
    /// When its lease ends; a session's holder's is its session's.
    expires_at_ms: u64,
    /// The public handle of the session it hangs on (never the session's
    /// id), when it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "5f0c8e2a9d4b6c1e7a3f2b8d9c0e1f2a")]
    session: Option<String>,
    /// The places it takes of a counting lock (absent for other kinds).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = 1, minimum = 1)]
    permits: Option<u64>,
}

/// `snapshot` of a lock nobody holds.
#[derive(Debug, Serialize, ToSchema)]
pub struct FreeLock {
    #[schema(example = "orders:42")]
    key: String,
    #[schema(schema_with = held_false)]
    held: bool,
    /// The requests waiting, about to be served.
    waiters: Vec<WaiterEntry>,
    /// Until when no place is granted (a lock-delay: a session that held
    /// it expired or was revoked); absent when none is in force.
    #[serde(skip_serializing_if = "Option::is_none")]
    delayed_until_ms: Option<u64>,
}

impl FreeLock {
    pub fn new(key: &LockKey, waiters: Vec<WaiterView>, delayed_until_ms: Option<u64>) -> Self {
        Self {
            key: key.to_string(),
            held: false,
            waiters: waiters.into_iter().map(WaiterEntry::from).collect(),
            delayed_until_ms,
        }
    }
}

/// One waiting request.
#[derive(Debug, Serialize, ToSchema)]
pub struct WaiterEntry {
    /// 1 is served next.
    #[schema(example = 1)]
    position: u64,
    #[schema(value_type = String, example = "exclusive")]
    mode: String,
    /// Since when it waits, in Unix ms by the Redis clock.
    waiting_since_ms: u64,
}

impl LockStatus {
    pub fn new(key: &LockKey, lock: LockView) -> Self {
        Self {
            key: key.to_string(),
            held: true,
            ttl_ms: lock.ttl_ms,
            expires_at_ms: lock.expires_at_ms,
            fencing_token: lock.fencing_token,
            holds: lock.holds,
            mode: if lock.kind.is_shared() {
                "shared"
            } else {
                "exclusive"
            },
            limit: lock.kind.limit(),
            holders: lock.holders,
            leases: lock.leases.into_iter().map(LeaseEntry::from).collect(),
            waiters: lock.waiters.into_iter().map(WaiterEntry::from).collect(),
        }
    }
}

impl From<LeaseView> for LeaseEntry {
    fn from(lease: LeaseView) -> Self {
        Self {
            fencing_token: lease.fencing_token,
            value: lease.value,
            holds: lease.holds,
            acquired_at_ms: lease.acquired_at_ms,
            expires_at_ms: lease.expires_at_ms,
            session: lease.session,
            permits: lease.permits,
        }
    }
}

impl From<WaiterView> for WaiterEntry {
    fn from(waiter: WaiterView) -> Self {
        Self {
            position: waiter.position,
            mode: waiter.mode,
            waiting_since_ms: waiter.waiting_since_ms,
        }
    }
}

/// A page of held locks.
#[derive(Debug, Serialize, ToSchema)]
pub struct LockList {
    locks: Vec<LockStatus>,
    /// Where the next page begins (its `cursor`); null on the last page.
    next_cursor: Option<String>,
}

/// Which held locks `GET /locks` lists.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Only the locks whose key starts with this (none: every lock).
    #[param(value_type = Option<String>, example = "orders:")]
    prefix: Option<String>,
    /// About this many locks per page, 1 to 1000.
    #[param(value_type = Option<u64>, default = 100)]
    limit: Option<String>,
    /// The `next_cursor` of the page before, as it was given.
    #[param(value_type = Option<String>)]
    cursor: Option<String>,
}

const DEFAULT_LIST: usize = 100;

problem_responses!(
    /// What `GET /locks/{key}` can refuse with.
    InspectProblems:
        Unauthorized, Forbidden, LockNotFound, InvalidKey, BackendUnavailable, FormatUnsupported,
);

problem_responses!(
    /// What `GET /locks` can refuse with.
    ListProblems:
        Unauthorized, Forbidden, InvalidField, BackendUnavailable, FormatUnsupported,
);

/// Inspect a lock: whether it is held, until when, its fencing token, its
/// mode and limit, its holders' leases (with their public values, never a
/// token) and the requests waiting for it, in the order they will be
/// served, on every instance.
#[utoipa::path(
    get,
    path = "/locks/{key}",
    tag = "locks",
    security((), ("api_key" = [])),
    params(("key" = LockKeyText, Path, description = "The lock")),
    responses(
        (status = 200, description = "Held, or (`held: false`) free but kept unavailable until \
            `delayed_until_ms` by the lock-delay of a session that held it", body = LockAnswer),
        InspectProblems,
    )
)]
pub async fn inspect(
    caller: Caller,
    State(locks): State<Locks>,
    KeyPath(key): KeyPath,
) -> Result<Json<LockAnswer>, ApiError> {
    caller.may(Permission::Read, key.as_str())?;
    match locks.inspect(&key).await? {
        LockSight::Held(view) => Ok(Json(LockAnswer::Held(LockStatus::new(&key, view)))),
        LockSight::Free {
            waiters,
            delayed_until_ms: Some(delayed_until_ms),
        } => Ok(Json(LockAnswer::Delayed(FreeLock::new(
            &key,
            waiters,
            Some(delayed_until_ms),
        )))),
        LockSight::Free { .. } => Err(LockError::NotFound { key }.into()),
    }
}

/// `GET /locks/{key}`: a held lock, or a free one under a lock-delay.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum LockAnswer {
    Held(LockStatus),
    Delayed(FreeLock),
}

/// The held locks whose key starts with `prefix`, a page at a time (about
/// `limit` each), on every master of a Redis Cluster; each as `GET
/// /locks/{key}` shows it.
#[utoipa::path(
    get,
    path = "/locks",
    tag = "locks",
    security((), ("api_key" = [])),
    params(ListParams),
    responses(
        (status = 200, description = "A page of held locks", body = LockList),
        ListProblems,
    )
)]
pub async fn list(
    caller: Caller,
    State(locks): State<Locks>,
    uri: Uri,
) -> Result<Json<LockList>, ApiError> {
    let Query(params) = Query::<ListParams>::try_from_uri(&uri)
        .map_err(|_| ApiError::invalid_field("query", "takes each parameter at most once"))?;
    let prefix = params.prefix.unwrap_or_default();
    LockKey::check_prefix(&prefix).map_err(|err| ApiError::invalid_field("prefix", err))?;
    let limit = match params.limit.as_deref() {
        None => DEFAULT_LIST,
        Some(text) => text
            .parse()
            .ok()
            .filter(|limit| (1..=MAX_LIST).contains(limit))
            .ok_or_else(|| {
                ApiError::invalid_field("limit", format!("must be an integer from 1 to {MAX_LIST}"))
            })?,
    };
    let cursor = params
        .cursor
        .as_deref()
        .map(|text| {
            ListCursor::parse(text).ok_or_else(|| {
                ApiError::invalid_field("cursor", "must be the next_cursor of an earlier page")
            })
        })
        .transpose()?;
    let page = locks.list(&prefix, cursor, limit).await?;
    Ok(Json(LockList {
        locks: page
            .locks
            .into_iter()
            // Only what the caller may read; the page may come out short.
            .filter(|(key, _)| caller.may_read(key.as_str()))
            .map(|(key, view)| LockStatus::new(&key, view))
            .collect(),
        next_cursor: page.next.map(|next| next.to_text()),
    }))
}
