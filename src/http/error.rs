//! The API's errors, answered as RFC 9457 problem documents with stable slugs.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::locks::{InvalidKey, InvalidToken, LockError, OutOfRange, WaitRefused};
use crate::redis::BackendError;
use crate::seckill::{InvalidInput, Refusal, SaleError};

/// The media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Every kind of problem the gateway answers with. The slug is part of the
/// contract: clients branch on it, so a slug never changes meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemType {
    MalformedBody,
    UnsupportedMediaType,
    BodyTooLarge,
    InvalidKey,
    InvalidField,
    MissingToken,
    InvalidToken,
    LockHeld,
    NotOwner,
    LockNotFound,
    LimitMismatch,
    ModeConflict,
    SaleNotFound,
    SoldOut,
    LimitExceeded,
    IdempotencyKeyReused,
    RateLimited,
    Unauthorized,
    Forbidden,
    AdministrationDisabled,
    NotFound,
    MethodNotAllowed,
    HeadersTooLarge,
    TooManyWaiters,
    ShuttingDown,
    NotReplicated,
    RequestTimeout,
    BackendUnavailable,
    Internal,
}

/// What a problem type means, for its documents and its page.
pub struct ProblemInfo {
    pub slug: &'static str,
    pub title: &'static str,
    pub status: StatusCode,
    pub about: &'static str,
}

impl ProblemType {
    pub const ALL: [Self; 29] = [
        Self::MalformedBody,
        Self::UnsupportedMediaType,
        Self::BodyTooLarge,
        Self::InvalidKey,
        Self::InvalidField,
        Self::MissingToken,
        Self::InvalidToken,
        Self::LockHeld,
        Self::NotOwner,
        Self::LockNotFound,
        Self::LimitMismatch,
        Self::ModeConflict,
        Self::SaleNotFound,
        Self::SoldOut,
        Self::LimitExceeded,
        Self::IdempotencyKeyReused,
        Self::RateLimited,
        Self::Unauthorized,
        Self::Forbidden,
        Self::AdministrationDisabled,
        Self::NotFound,
        Self::MethodNotAllowed,
        Self::HeadersTooLarge,
        Self::TooManyWaiters,
        Self::ShuttingDown,
        Self::NotReplicated,
        Self::RequestTimeout,
        Self::BackendUnavailable,
        Self::Internal,
    ];

    pub fn info(self) -> ProblemInfo {
        let (slug, title, status, about) = match self {
            Self::MalformedBody => (
                "malformed-body",
                "Malformed request body",
                StatusCode::BAD_REQUEST,
                "The body is not JSON, or a field has the wrong JSON type, or a required field is missing or an unknown one present.",
            ),
            Self::UnsupportedMediaType => (
                "unsupported-media-type",
                "Unsupported media type",
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "The body must be sent with Content-Type: application/json.",
            ),
            Self::BodyTooLarge => (
                "body-too-large",
                "Request body too large",
                StatusCode::PAYLOAD_TOO_LARGE,
                "The body is larger than the gateway's configured limit.",
            ),
            Self::InvalidKey => (
                "invalid-key",
                "Invalid lock key",
                StatusCode::UNPROCESSABLE_ENTITY,
                "A lock key is 1 to 200 characters of A-Z a-z 0-9 . _ : -, and not only dots.",
            ),
            Self::InvalidField => (
                "invalid-field",
                "Invalid field",
                StatusCode::UNPROCESSABLE_ENTITY,
                "A field has the right type but a value outside its range; the `field` member names it.",
            ),
            Self::MissingToken => (
                "missing-token",
                "Missing lock token",
                StatusCode::BAD_REQUEST,
                "Releasing or renewing needs the owner's token: the Lock-Token header or ?token= for DELETE, the `token` field for PUT.",
            ),
            Self::InvalidToken => (
                "invalid-token",
                "Invalid lock token",
                StatusCode::UNPROCESSABLE_ENTITY,
                "A lock token is the UUID text returned when the lock was taken.",
            ),
            Self::LockHeld => (
                "lock-held",
                "Lock is held",
                StatusCode::CONFLICT,
                "There was no place for this request and the wait (if any) ran out: another owner holds the lock (or every \
                 place of a counting lock, or it is held in the other mode, or a writer waits and holds new readers back). \
                 `retry_after_ms` is when a place may free: the earliest holder's remaining lease.",
            ),
            Self::NotOwner => (
                "not-owner",
                "Not the lock's owner",
                StatusCode::CONFLICT,
                "The token given does not hold this lock. The holder is not revealed.",
            ),
            Self::LockNotFound => (
                "lock-not-found",
                "Lock not found",
                StatusCode::NOT_FOUND,
                "No such lock: never taken, released, or its lease expired. A holder that sees this has lost its lease.",
            ),
            Self::LimitMismatch => (
                "limit-mismatch",
                "Limit mismatch",
                StatusCode::CONFLICT,
                "The lock is held with another limit than the request names (a plain lock has limit 1). The `limit` \
                 member is the one it is held with: ask with that, or wait until the lock is free to take it with another.",
            ),
            Self::ModeConflict => (
                "mode-conflict",
                "Mode conflict",
                StatusCode::CONFLICT,
                "The token holds this lock in the other mode (shared or exclusive); a re-entry keeps the mode the lock was taken in.",
            ),
            Self::SaleNotFound => (
                "sale-not-found",
                "Sale not found",
                StatusCode::NOT_FOUND,
                "No sale with this sku: create it with PUT /seckill/{sku}.",
            ),
            Self::SoldOut => (
                "sold-out",
                "Sold out",
                StatusCode::CONFLICT,
                "The sale has less stock left than the quantity asked for. Nothing was bought.",
            ),
            Self::LimitExceeded => (
                "limit-exceeded",
                "Per-user limit exceeded",
                StatusCode::CONFLICT,
                "The purchase would take the user past the sale's per_user_limit. Nothing was bought.",
            ),
            Self::IdempotencyKeyReused => (
                "idempotency-key-reused",
                "Idempotency key reused",
                StatusCode::UNPROCESSABLE_ENTITY,
                "The Idempotency-Key was already used with a different body. Send a new key for a new purchase.",
            ),
            Self::RateLimited => (
                "rate-limited",
                "Too many requests",
                StatusCode::TOO_MANY_REQUESTS,
                "The purchase quota (per user, and per client address when configured) is spent. Retry after Retry-After; RateLimit and RateLimit-Policy describe the quota.",
            ),
            Self::Unauthorized => (
                "unauthorized",
                "Unauthorized",
                StatusCode::UNAUTHORIZED,
                "This route needs credentials: Authorization: Bearer <token>.",
            ),
            Self::Forbidden => (
                "forbidden",
                "Forbidden",
                StatusCode::FORBIDDEN,
                "The credentials given do not grant this route.",
            ),
            Self::AdministrationDisabled => (
                "administration-disabled",
                "Sale administration is off",
                StatusCode::FORBIDDEN,
                "No admin token is configured, so sale administration is refused. Start the gateway with \
                 LOCKGATE_ADMIN_TOKEN (or --admin-token) and send it as Authorization: Bearer <token>; \
                 `make run` makes one at first start and keeps it in .run/admin-token.",
            ),
            Self::NotFound => (
                "not-found",
                "Not found",
                StatusCode::NOT_FOUND,
                "No route matches this path. See /docs for the API.",
            ),
            Self::MethodNotAllowed => (
                "method-not-allowed",
                "Method not allowed",
                StatusCode::METHOD_NOT_ALLOWED,
                "The path exists but not with this method; the Allow header lists the methods it takes.",
            ),
            Self::HeadersTooLarge => (
                "headers-too-large",
                "Request headers too large",
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "The request's headers together are larger than the gateway accepts.",
            ),
            Self::ShuttingDown => (
                "shutting-down",
                "Shutting down",
                StatusCode::SERVICE_UNAVAILABLE,
                "This instance is stopping; the wait ended and nothing was granted. Retry (another instance will answer).",
            ),
            Self::NotReplicated => (
                "not-replicated",
                "Not confirmed by replicas",
                StatusCode::SERVICE_UNAVAILABLE,
                "Too few replicas confirmed the write in time (replica-confirmed grants are on). A grant was undone; an \
                 extension or a purchase stands on the primary (retry a purchase with the same Idempotency-Key).",
            ),
            Self::RequestTimeout => (
                "request-timeout",
                "Request timed out",
                StatusCode::SERVICE_UNAVAILABLE,
                "The gateway could not answer within its request timeout. Anything granted meanwhile was released.",
            ),
            Self::TooManyWaiters => (
                "too-many-waiters",
                "Too many waiters",
                StatusCode::SERVICE_UNAVAILABLE,
                "This instance already has its maximum of waiting requests. Retry after Retry-After, or try once with wait_ms 0.",
            ),
            Self::BackendUnavailable => (
                "backend-unavailable",
                "Backend unavailable",
                StatusCode::SERVICE_UNAVAILABLE,
                "Redis could not be reached, or did not answer within the gateway's Redis timeout; retry after Retry-After. \
                 When Redis could not be reached, nothing changed. When it was only slow, the request may still take effect once \
                 it answers: a lock granted so is released by the gateway or lapses with its lease, a purchase is found again \
                 by retrying with the same Idempotency-Key.",
            ),
            Self::Internal => (
                "internal",
                "Internal error",
                StatusCode::INTERNAL_SERVER_ERROR,
                "The gateway failed in a way it did not expect. The details are in its log.",
            ),
        };
        ProblemInfo {
            slug,
            title,
            status,
            about,
        }
    }

    pub fn from_slug(slug: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.info().slug == slug)
    }
}

/// An RFC 9457 problem document, as every error response carries it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "type": "/problems/lock-held", "title": "Lock is held", "status": 409,
    "detail": "orders:42 is held by another owner", "key": "orders:42", "retry_after_ms": 1834
}))]
pub struct Problem {
    /// `/problems/<slug>`; the slug is stable.
    #[serde(rename = "type")]
    pub problem_type: String,
    /// Fixed per slug.
    pub title: &'static str,
    /// The HTTP status, repeated.
    pub status: u16,
    /// What went wrong with this request.
    pub detail: String,
    /// The lock key concerned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The request field that was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// When trying again may succeed, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// The smallest value the refused field takes, when it is a number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub minimum: Option<u64>,
    /// The largest value the refused field takes (such as this gateway's
    /// longest `wait_ms`), when it is a number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maximum: Option<u64>,
    /// The limit the lock is held with (`limit-mismatch`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// Everything a request can fail with. Each variant's doc names its status
/// and slug.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400 `malformed-body`.
    #[error("{0}")]
    MalformedBody(String),
    /// 415 `unsupported-media-type`.
    #[error("send the body as JSON with Content-Type: application/json")]
    UnsupportedMediaType,
    /// 413 `body-too-large`.
    #[error("the body is larger than the gateway accepts")]
    BodyTooLarge,
    /// 422 `invalid-key`.
    #[error("{0}")]
    InvalidKey(#[from] InvalidKey),
    /// 422 `invalid-field`.
    #[error("{field} {reason}")]
    InvalidField { field: &'static str, reason: String },
    /// 422 `invalid-field`: a number outside its range, which the problem
    /// names (`minimum`, `maximum`).
    #[error("{field} {range}")]
    OutOfRange {
        field: &'static str,
        range: OutOfRange,
    },
    /// 400 `missing-token`.
    #[error("the lock token is missing")]
    MissingToken,
    /// 422 `invalid-token`.
    #[error("{0}")]
    InvalidToken(#[from] InvalidToken),
    /// 409 `lock-held`, 409 `not-owner`, 404 `lock-not-found`, 409
    /// `limit-mismatch`, 409 `mode-conflict`, 503 `too-many-waiters`, 503
    /// `shutting-down`, 503 `backend-unavailable`.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// 404 `sale-not-found`, 409 `sold-out`, 409 `limit-exceeded`, 422
    /// `idempotency-key-reused`, 429 `rate-limited`.
    #[error(transparent)]
    Sale(Refusal),
    /// 401 `unauthorized`: no usable credentials.
    #[error("this route needs Authorization: Bearer <token>")]
    Unauthorized,
    /// 403 `forbidden`: credentials that do not grant the route.
    #[error("the token given does not grant this route")]
    Forbidden,
    /// 403 `forbidden`: the buyer token names another buyer than the
    /// request (or no user id at all).
    #[error("the buyer token does not name this buyer")]
    WrongBuyer,
    /// 403 `administration-disabled`: no admin token is configured.
    #[error(
        "sale administration is off: no admin token is configured (LOCKGATE_ADMIN_TOKEN or --admin-token)"
    )]
    AdministrationDisabled,
    /// 431 `headers-too-large`.
    #[error("the request's headers are larger than {0} bytes")]
    HeadersTooLarge(usize),
    /// 503 `request-timeout`.
    #[error("the request took longer than the gateway's request timeout")]
    RequestTimeout,
    /// 404 `not-found`: no route.
    #[error("no route for {0}")]
    RouteNotFound(String),
    /// 405 `method-not-allowed`.
    #[error("{0} does not take this method")]
    MethodNotAllowed(String),
    /// 500 `internal`: a bug; the detail stays in the log.
    #[error("internal error")]
    Internal,
}

impl ApiError {
    pub fn invalid_field(field: &'static str, reason: impl ToString) -> Self {
        Self::InvalidField {
            field,
            reason: reason.to_string(),
        }
    }

    pub fn problem_type(&self) -> ProblemType {
        match self {
            Self::MalformedBody(_) => ProblemType::MalformedBody,
            Self::UnsupportedMediaType => ProblemType::UnsupportedMediaType,
            Self::BodyTooLarge => ProblemType::BodyTooLarge,
            Self::InvalidKey(_) => ProblemType::InvalidKey,
            Self::InvalidField { .. } | Self::OutOfRange { .. } => ProblemType::InvalidField,
            Self::MissingToken => ProblemType::MissingToken,
            Self::InvalidToken(_) => ProblemType::InvalidToken,
            Self::Lock(LockError::Held { .. }) => ProblemType::LockHeld,
            Self::Lock(LockError::NotOwner { .. }) => ProblemType::NotOwner,
            Self::Lock(LockError::NotFound { .. }) => ProblemType::LockNotFound,
            Self::Lock(LockError::LimitMismatch { .. }) => ProblemType::LimitMismatch,
            Self::Lock(LockError::ModeConflict { .. }) => ProblemType::ModeConflict,
            Self::Lock(LockError::CannotWait(WaitRefused::TooManyWaiters(_))) => {
                ProblemType::TooManyWaiters
            }
            Self::Lock(LockError::CannotWait(WaitRefused::ShuttingDown)) => {
                ProblemType::ShuttingDown
            }
            // A reply no script may give is a bug, not an outage.
            Self::Lock(LockError::Backend(BackendError::UnexpectedReply { .. })) => {
                ProblemType::Internal
            }
            Self::Lock(LockError::NotReplicated { .. }) => ProblemType::NotReplicated,
            Self::Lock(LockError::Backend(_)) => ProblemType::BackendUnavailable,
            Self::Sale(Refusal::NotFound { .. }) => ProblemType::SaleNotFound,
            Self::Sale(Refusal::SoldOut { .. }) => ProblemType::SoldOut,
            Self::Sale(Refusal::LimitExceeded { .. }) => ProblemType::LimitExceeded,
            Self::Sale(Refusal::KeyReused) => ProblemType::IdempotencyKeyReused,
            Self::Sale(Refusal::RateLimited(_)) => ProblemType::RateLimited,
            Self::Sale(Refusal::NotReplicated { .. }) => ProblemType::NotReplicated,
            Self::HeadersTooLarge(_) => ProblemType::HeadersTooLarge,
            Self::RequestTimeout => ProblemType::RequestTimeout,
            Self::Unauthorized => ProblemType::Unauthorized,
            Self::Forbidden | Self::WrongBuyer => ProblemType::Forbidden,
            Self::AdministrationDisabled => ProblemType::AdministrationDisabled,
            Self::RouteNotFound(_) => ProblemType::NotFound,
            Self::MethodNotAllowed(_) => ProblemType::MethodNotAllowed,
            Self::Internal => ProblemType::Internal,
        }
    }

    fn problem(&self) -> Problem {
        let info = self.problem_type().info();
        let detail = if info.status == StatusCode::INTERNAL_SERVER_ERROR
            || matches!(self, Self::Lock(LockError::Backend(_)))
        {
            // The cause (a Redis error, say) goes to the log, not to the client.
            tracing::error!(error = %self, status = info.status.as_u16(), "request failed");
            info.about.to_owned()
        } else {
            self.to_string()
        };
        let (key, retry_after_ms) = match self {
            Self::Lock(LockError::Held {
                key,
                retry_after_ms,
            }) => (Some(key.to_string()), Some(*retry_after_ms)),
            Self::Lock(
                LockError::NotOwner { key }
                | LockError::NotFound { key }
                | LockError::LimitMismatch { key, .. }
                | LockError::ModeConflict { key }
                | LockError::NotReplicated { key, .. },
            ) => (Some(key.to_string()), None),
            Self::Sale(Refusal::RateLimited(decision)) => {
                let ms = u64::try_from(decision.retry_after.as_millis()).unwrap_or(u64::MAX);
                (None, Some(ms))
            }
            _ if info.status == StatusCode::SERVICE_UNAVAILABLE => (None, Some(1000)),
            _ => (None, None),
        };
        let field = match self {
            Self::InvalidField { field, .. } | Self::OutOfRange { field, .. } => {
                Some((*field).to_owned())
            }
            _ => None,
        };
        let (minimum, maximum) = match self {
            Self::OutOfRange { range, .. } => (Some(range.min), Some(range.max)),
            _ => (None, None),
        };
        let limit = match self {
            Self::Lock(LockError::LimitMismatch { limit, .. }) => Some(*limit),
            _ => None,
        };
        Problem {
            problem_type: format!("/problems/{}", info.slug),
            title: info.title,
            status: info.status.as_u16(),
            detail,
            key,
            field,
            retry_after_ms,
            minimum,
            maximum,
            limit,
        }
    }
}

impl From<SaleError> for ApiError {
    fn from(err: SaleError) -> Self {
        match err {
            SaleError::Refused(refusal) => Self::Sale(refusal),
            SaleError::Lock(err) => Self::Lock(err),
        }
    }
}

impl From<InvalidInput> for ApiError {
    fn from(err: InvalidInput) -> Self {
        Self::InvalidField {
            field: err.field,
            reason: err.reason,
        }
    }
}

impl From<BackendError> for ApiError {
    fn from(err: BackendError) -> Self {
        Self::Lock(LockError::Backend(err))
    }
}

impl ApiError {
    /// The problem document, serialised.
    pub fn problem_json(&self) -> Vec<u8> {
        serde_json::to_vec(&self.problem()).unwrap_or_default()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let problem = self.problem();
        let status = self.problem_type().info().status;
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(ms) = problem.retry_after_ms {
            headers.insert(header::RETRY_AFTER, retry_after_seconds(ms));
        }
        if matches!(self, Self::Unauthorized) {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// `Retry-After` in whole seconds, rounded up so a client that obeys it does
/// not come back before the lease has ended.
pub fn retry_after_seconds(ms: u64) -> HeaderValue {
    HeaderValue::from(ms.div_ceil(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_type_has_a_distinct_slug_that_finds_it_again() {
        for kind in ProblemType::ALL {
            assert_eq!(ProblemType::from_slug(kind.info().slug), Some(kind));
        }
        assert_eq!(ProblemType::from_slug("no-such-slug"), None);
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_seconds(0), "0");
        assert_eq!(retry_after_seconds(1), "1");
        assert_eq!(retry_after_seconds(1000), "1");
        assert_eq!(retry_after_seconds(1834), "2");
    }
}
