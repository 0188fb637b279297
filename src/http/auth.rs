//! Access control: the admin bearer token of the sale administration routes.

use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::header;
use axum::http::request::Parts;

use crate::error::ApiError;

/// The configured admin token; `None` leaves the admin routes open.
#[derive(Clone, Default)]
pub struct AdminToken(pub Option<Arc<str>>);

/// Proof that the request may use an admin route: `Authorization: Bearer
/// <admin token>` when a token is configured. Missing or malformed
/// credentials are 401; a wrong token is 403.
pub struct AdminAccess;

impl<S> FromRequestParts<S> for AdminAccess
where
    S: Send + Sync,
    AdminToken: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let AdminToken(expected) = AdminToken::from_ref(state);
        let Some(expected) = expected else {
            return Ok(Self);
        };
        let given = bearer(parts).ok_or(ApiError::Unauthorized)?;
        if same_secret(given.as_bytes(), expected.as_bytes()) {
            Ok(Self)
        } else {
            Err(ApiError::Forbidden)
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Compares two secrets in time that depends only on their lengths, so a
/// caller cannot learn a token byte by byte from response times.
pub fn same_secret(given: &[u8], expected: &[u8]) -> bool {
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
