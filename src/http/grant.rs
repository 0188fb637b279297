//! A granted lock as the API answers it: the body `POST /locks` answers (and a streamed lock's `acquired` event carries), a granted batch's (`POST /locks/batch`, a streamed batch's `acquired`), and the response that hands a new grant over.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::ApiError;
use super::schema::LockModeText;
use crate::duration::millis;
use crate::locks::{BatchLease, GrantGuard, Lease};

/// A granted batch: one token for every lock.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchGrant {
    /// The owner's secret for every lock of the batch: release, renew or
    /// inspect each with the routes of one lock.
    #[schema(format = Uuid)]
    token: String,
    #[schema(example = 30000)]
    ttl_ms: u64,
    /// When the leases end (the earliest), in Unix ms by the Redis clock.
    expires_at_ms: u64,
    /// How long the batch waited.
    #[schema(example = 0)]
    waited_ms: u64,
    /// Each lock, in the order asked.
    locks: Vec<BatchGrantLock>,
}

/// One lock of a granted batch.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchGrantLock {
    #[schema(example = "acct:1")]
    key: String,
    #[schema(value_type = LockModeText)]
    mode: &'static str,
    fencing_token: u64,
    expires_at_ms: u64,
}

impl From<&BatchLease> for BatchGrant {
    fn from(lease: &BatchLease) -> Self {
        Self {
            token: lease.token.expose(),
            ttl_ms: lease.ttl_ms,
            expires_at_ms: lease.expires_at_ms,
            waited_ms: millis(lease.waited),
            locks: lease
                .locks
                .iter()
                .map(|hold| BatchGrantLock {
                    key: hold.key.to_string(),
                    mode: if hold.kind.is_shared() {
                        "shared"
                    } else {
                        "exclusive"
                    },
                    fencing_token: hold.fencing_token,
                    expires_at_ms: hold.expires_at_ms,
                })
                .collect(),
        }
    }
}

/// The header that marks a grant answered again for its Idempotency-Key.
static IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// A granted (or re-entered) lock. The token is shown only here.
#[derive(Debug, Serialize, ToSchema)]
pub struct LockGrant {
    #[schema(example = "orders:42")]
    key: String,
    /// The owner's secret, needed to release, renew or re-enter.
    #[schema(format = Uuid)]
    token: String,
    /// Strictly increases with every new acquisition of this key; unchanged
    /// by re-entry. Hand it to the resource you guard.
    #[schema(example = 1_763_800_000_000_000_u64)]
    fencing_token: u64,
    #[schema(example = 30000)]
    ttl_ms: u64,
    /// When the lease ends, in Unix ms by the Redis clock.
    expires_at_ms: u64,
    /// Re-entrant holds, 1 for a new acquisition.
    #[schema(example = 1)]
    holds: u64,
    /// How long the request waited for the lock.
    #[schema(example = 0)]
    waited_ms: u64,
}

impl From<&Lease> for LockGrant {
    fn from(lease: &Lease) -> Self {
        Self {
            key: lease.key.to_string(),
            token: lease.token.expose(),
            fencing_token: lease.state.fencing_token,
            ttl_ms: lease.state.ttl_ms,
            expires_at_ms: lease.state.expires_at_ms,
            holds: lease.state.holds,
            waited_ms: millis(lease.waited),
        }
    }
}

/// The answer to `POST /locks` that made (or re-entered, or replayed) a
/// grant: `201` with `Location` for a new grant (its guard completed
/// when the body is written), `201` with `Idempotent-Replayed: true` for a
/// replay, `200` for a re-entry.
pub fn granted(mut lease: Lease) -> Result<Response, ApiError> {
    let json = serde_json::to_vec(&LockGrant::from(&lease)).map_err(|_| ApiError::Internal)?;
    let json_type = (
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if lease.replayed {
        let replayed = (
            IDEMPOTENT_REPLAYED.clone(),
            HeaderValue::from_static("true"),
        );
        return Ok((StatusCode::CREATED, [json_type, replayed], json).into_response());
    }
    let Some(guard) = lease.guard.take() else {
        return Ok(([json_type], json).into_response());
    };
    let location =
        HeaderValue::try_from(format!("/locks/{}", lease.key)).map_err(|_| ApiError::Internal)?;
    Ok((
        StatusCode::CREATED,
        [json_type, (header::LOCATION, location)],
        guarded_body(json, vec![guard]),
    )
        .into_response())
}

/// The body of a new grant (or batch of grants) guarded by `guards`: see
/// [`GrantBody`].
pub fn guarded_body(json: Vec<u8>, guards: Vec<GrantGuard>) -> Body {
    Body::new(GrantBody {
        json: Some(Bytes::from(json)),
        guards,
    })
}

/// The body of a new grant. Hyper polls a body only to write it to a live
/// connection, so the first poll completes the guard; a body dropped
/// unpolled (the client left while the grant was being made) releases the
/// grant instead of leaving it held by nobody.
struct GrantBody {
    json: Option<Bytes>,
    guards: Vec<GrantGuard>,
}

impl http_body::Body for GrantBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let body = self.get_mut();
        for guard in body.guards.drain(..) {
            guard.complete();
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
