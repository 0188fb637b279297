//! Access control: API keys for the lock routes, the admin token for sale administration.

use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::header;
use axum::http::request::Parts;

use crate::error::ApiError;

/// The configured admin token; `None` leaves the admin routes open.
#[derive(Clone, Default)]
pub struct AdminToken(pub Option<Arc<str>>);

/// The configured API keys; none leaves the lock routes open.
#[derive(Clone, Default)]
pub struct ApiKeys(pub Arc<[Box<str>]>);

/// Proof that the request may use an admin route: `Authorization: Bearer
/// <admin token>` when a token is configured.
pub struct AdminAccess;

impl<S> FromRequestParts<S> for AdminAccess
where
    S: Send + Sync,
    AdminToken: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let AdminToken(token) = AdminToken::from_ref(state);
        authorize(parts, token.as_slice()).map(|()| Self)
    }
}

/// Proof that the request may use the lock routes: `Authorization: Bearer
/// <one of the API keys>` when keys are configured.
pub struct ApiKeyAccess;

impl<S> FromRequestParts<S> for ApiKeyAccess
where
    S: Send + Sync,
    ApiKeys: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let ApiKeys(keys) = ApiKeys::from_ref(state);
        authorize(parts, &keys).map(|()| Self)
    }
}

/// Admits the request if nothing is `accepted` or its bearer token is one of
/// them. Missing or malformed credentials are 401; a wrong token is 403.
/// Every accepted secret is compared, in constant time, whatever matches.
fn authorize(parts: &Parts, accepted: &[impl AsRef<str>]) -> Result<(), ApiError> {
    if accepted.is_empty() {
        return Ok(());
    }
    let given = bearer(parts).ok_or(ApiError::Unauthorized)?;
    let matched = accepted.iter().fold(false, |matched, secret| {
        matched | same_secret(given.as_bytes(), secret.as_ref().as_bytes())
    });
    if matched {
        Ok(())
    } else {
        Err(ApiError::Forbidden)
    }
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Compares two secrets in time that depends only on their lengths, so a
/// caller cannot learn a token byte by byte from response times.
fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    let mut difference = given.len() ^ expected.len();
    for (index, byte) in expected.iter().enumerate() {
        let other = given.get(index).copied().unwrap_or(!byte);
        difference |= usize::from(byte ^ other);
    }
    difference == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_secret_matches() {
        assert!(same_secret(b"s3cret", b"s3cret"));
        for other in [&b"s3creT"[..], b"s3cre", b"s3cret!", b""] {
            assert!(!same_secret(other, b"s3cret"), "{other:?}");
        }
    }
}
