//! The API's errors, answered as RFC 9457 problem documents with stable slugs.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::duration::millis;
use crate::locks::{InvalidKey, InvalidToken, LockError, OutOfRange, WaitRefused};
use crate::redis::BackendError;
use crate::seckill::{InvalidInput, Refusal, SaleError};

pub use super::problems::ProblemType;

/// The media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

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
    /// The keys of a cycle of session waits, in order (`deadlock`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cycle: Option<Vec<String>>,
    /// Until when a lock-delay keeps a lock nobody holds, in Unix ms
    /// (`lock-held`, when that is why).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delayed_until_ms: Option<u64>,
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
    /// 422 `invalid-token`: the request names two different tokens.
    #[error(
        "the request names two different tokens (the Lock-Token header, and the query or the \
         body): send one"
    )]
    ConflictingTokens,
    /// 409 `lock-held`, 409 `not-owner`, 404 `lock-not-found`, 409
    /// `limit-mismatch`, 409 `mode-conflict`, 422 `idempotency-key-reused`,
    /// 503 `too-many-waiters`, 503 `shutting-down`, 503
    /// `backend-unavailable`.
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
    /// 403 `forbidden`: the permissions file does not grant the principal
    /// this permission on the key. Says nothing of the lock itself.
    #[error("principal {principal} has no {permission} permission on {key}")]
    NotPermitted {
        principal: String,
        permission: crate::acl::Permission,
        key: String,
    },
    /// 403 `forbidden`: the session was opened by another principal.
    #[error("principal {0} may not use a session that another principal opened")]
    ForeignSession(String),
    /// 403 `forbidden`: the buyer token names another buyer than the
    /// request (or no user id at all).
    #[error("the buyer token does not name this buyer")]
    WrongBuyer,
    /// 403 `administration-disabled`: no admin token is configured.
    #[error(
        "administration (sale resets, revoking locks) is off: no admin token is configured \
         (LOCKGATE_ADMIN_TOKEN or --admin-token)"
    )]
    AdministrationDisabled,
    /// 431 `headers-too-large`.
    #[error("the request's headers are larger than {0} bytes")]
    HeadersTooLarge(usize),
    /// 431 `headers-too-large`: more header lines than the gateway takes.
    #[error("the request has more than {0} header lines")]
    TooManyHeaders(usize),
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
            Self::InvalidToken(_) | Self::ConflictingTokens => ProblemType::InvalidToken,
            Self::Lock(LockError::Held { .. } | LockError::Delayed { .. }) => ProblemType::LockHeld,
            Self::Lock(LockError::NotOwner { .. }) => ProblemType::NotOwner,
            Self::Lock(LockError::NotFound { .. }) => ProblemType::LockNotFound,
            Self::Lock(LockError::LimitMismatch { .. }) => ProblemType::LimitMismatch,
            Self::Lock(LockError::ModeConflict { .. } | LockError::NoOtherMode { .. }) => {
                ProblemType::ModeConflict
            }
            Self::Lock(LockError::KeyReused { .. }) => ProblemType::IdempotencyKeyReused,
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
            Self::Lock(LockError::Backend(BackendError::Unwritable(_))) => {
                ProblemType::FormatUnsupported
            }
            Self::Lock(LockError::NotReplicated { .. }) => ProblemType::NotReplicated,
            Self::Lock(LockError::SessionNotFound) => ProblemType::SessionNotFound,
            Self::Lock(LockError::Deadlock { .. } | LockError::UpgradeDeadlock { .. }) => {
                ProblemType::Deadlock
            }
            Self::Lock(LockError::Backend(_)) => ProblemType::BackendUnavailable,
            Self::Sale(Refusal::NotFound { .. }) => ProblemType::SaleNotFound,
            Self::Sale(Refusal::SoldOut { .. }) => ProblemType::SoldOut,
            Self::Sale(Refusal::LimitExceeded { .. }) => ProblemType::LimitExceeded,
            Self::Sale(Refusal::KeyReused) => ProblemType::IdempotencyKeyReused,
            Self::Sale(Refusal::RateLimited(_)) => ProblemType::RateLimited,
            Self::Sale(Refusal::NotReplicated { .. }) => ProblemType::NotReplicated,
            Self::Sale(Refusal::StoredOrdersUnavailable { .. }) => ProblemType::BackendUnavailable,
            Self::HeadersTooLarge(_) | Self::TooManyHeaders(_) => ProblemType::HeadersTooLarge,
            Self::RequestTimeout => ProblemType::RequestTimeout,
            Self::Unauthorized => ProblemType::Unauthorized,
            Self::Forbidden
            | Self::WrongBuyer
            | Self::NotPermitted { .. }
            | Self::ForeignSession(_) => ProblemType::Forbidden,
            Self::AdministrationDisabled => ProblemType::AdministrationDisabled,
            Self::RouteNotFound(_) => ProblemType::NotFound,
            Self::MethodNotAllowed(_) => ProblemType::MethodNotAllowed,
            Self::Internal => ProblemType::Internal,
        }
    }

    /// Whether the client is told only the problem type's general text,
    /// and the cause goes to the log: a bug, or Redis failing.
    fn is_unexplained(&self) -> bool {
        self.problem_type().info().status == StatusCode::INTERNAL_SERVER_ERROR
            || matches!(
                self,
                Self::Lock(LockError::Backend(err)) if !matches!(err, BackendError::Unwritable(_))
            )
    }

    fn problem(&self) -> Problem {
        let info = self.problem_type().info();
        let detail = if self.is_unexplained() {
            info.about.to_owned()
        } else {
            self.to_string()
        };
        let (minimum, maximum) = match self {
            Self::OutOfRange { range, .. } => (Some(range.min), Some(range.max)),
            _ => (None, None),
        };
        Problem {
            problem_type: format!("/problems/{}", info.slug),
            title: info.title,
            status: info.status.as_u16(),
            detail,
            key: self.key(),
            field: match self {
                Self::InvalidField { field, .. } | Self::OutOfRange { field, .. } => {
                    Some((*field).to_owned())
                }
                _ => None,
            },
            retry_after_ms: self.retry_after_ms(),
            minimum,
            maximum,
            limit: match self {
                Self::Lock(LockError::LimitMismatch { limit, .. }) => Some(*limit),
                _ => None,
            },
            cycle: match self {
                Self::Lock(LockError::Deadlock { cycle, .. }) => Some(cycle.clone()),
                Self::Lock(LockError::UpgradeDeadlock { key }) => Some(vec![key.to_string()]),
                _ => None,
            },
            delayed_until_ms: match self {
                Self::Lock(LockError::Delayed { until_ms, .. }) => Some(*until_ms),
                _ => None,
            },
        }
    }

    /// The lock key concerned, for the `key` member.
    fn key(&self) -> Option<String> {
        match self {
            Self::Lock(
                LockError::Held { key, .. }
                | LockError::Delayed { key, .. }
                | LockError::NotOwner { key }
                | LockError::NotFound { key }
                | LockError::LimitMismatch { key, .. }
                | LockError::ModeConflict { key }
                | LockError::KeyReused { key }
                | LockError::NotReplicated { key, .. }
                | LockError::Deadlock { key, .. }
                | LockError::UpgradeDeadlock { key }
                | LockError::NoOtherMode { key },
            ) => Some(key.to_string()),
            Self::NotPermitted { key, .. } => Some(key.clone()),
            _ => None,
        }
    }

    /// When trying again may succeed: the holder's remaining lease, the
    /// rate limit's wait, or a second for every 503.
    fn retry_after_ms(&self) -> Option<u64> {
        match self {
            Self::Lock(
                LockError::Held { retry_after_ms, .. } | LockError::Delayed { retry_after_ms, .. },
            ) => Some(*retry_after_ms),
            Self::Sale(Refusal::RateLimited(decision)) => Some(millis(decision.retry_after)),
            _ if self.problem_type().info().status == StatusCode::SERVICE_UNAVAILABLE => Some(1000),
            _ => None,
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
        if self.is_unexplained() {
            // For the log (the observing layer writes it, in the request's
            // span), not for the client.
            response
                .extensions_mut()
                .insert(FailureCause(self.to_string().into()));
        }
        response
    }
}

/// Why a request failed in a way its answer does not explain (a bug, Redis
/// failing): carried on the response to the observing layer, which logs it.
#[derive(Debug, Clone)]
pub struct FailureCause(pub std::sync::Arc<str>);

/// `Retry-After` in whole seconds, rounded up so a client that obeys it does
/// not come back before the lease has ended.
pub fn retry_after_seconds(ms: u64) -> HeaderValue {
    HeaderValue::from(ms.div_ceil(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_seconds(0), "0");
        assert_eq!(retry_after_seconds(1), "1");
        assert_eq!(retry_after_seconds(1000), "1");
        assert_eq!(retry_after_seconds(1834), "2");
    }
}
