//! Access control: API keys for the lock routes, the admin token for sale administration (buyers: see `buyer`).

use std::marker::PhantomData;
use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};

use super::error::ApiError;

/// The configured admin token; `None` refuses sale administration.
#[derive(Clone, Default)]
pub struct AdminToken(pub Option<Arc<str>>);

/// The configured API keys; none leaves the lock routes open.
#[derive(Clone, Default)]
pub struct ApiKeys(pub Arc<[Box<str>]>);

/// Secrets of which a route needs one, as `Authorization: Bearer <secret>`.
pub trait Credentials {
    /// The secrets accepted.
    fn accepted(&self) -> &[impl AsRef<str>];

    /// The answer when none is configured; `None` leaves the route open.
    fn unconfigured() -> Option<ApiError>;
}

impl Credentials for AdminToken {
    fn accepted(&self) -> &[impl AsRef<str>] {
        self.0.as_slice()
    }

    /// Resetting a live sale is not for anyone who asks.
    fn unconfigured() -> Option<ApiError> {
        Some(ApiError::AdministrationDisabled)
    }
}

impl Credentials for ApiKeys {
    fn accepted(&self) -> &[impl AsRef<str>] {
        &self.0
    }

    fn unconfigured() -> Option<ApiError> {
        None
    }
}

/// Proof that the request may use a route guarded by the credentials `C`.
pub struct Access<C>(PhantomData<C>);

/// An admin route: `Authorization: Bearer <admin token>`; refused when no
/// admin token is configured.
pub type AdminAccess = Access<AdminToken>;

/// A lock route: `Authorization: Bearer <one of the API keys>` when keys are configured.
pub type ApiKeyAccess = Access<ApiKeys>;

impl<S, C> FromRequestParts<S> for Access<C>
where
    S: Send + Sync,
    C: Credentials + FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        permitted(&C::from_ref(state), &parts.headers).map(|()| Self(PhantomData))
    }
}

/// Whether `headers` carry credentials that `credentials` grant (as the
/// [`Access`] extractor checks), for a route whose guard depends on the
/// request itself.
pub fn permitted<C: Credentials>(credentials: &C, headers: &HeaderMap) -> Result<(), ApiError> {
    let accepted = credentials.accepted();
    if accepted.is_empty() {
        return C::unconfigured().map_or(Ok(()), Err);
    }
    authorize(headers, accepted)
}

/// Admits the request if its bearer token is one of the `accepted`.
/// Missing or malformed credentials are 401; a wrong token is 403. Every
/// accepted secret is compared, in constant time, whatever matches.
fn authorize(headers: &HeaderMap, accepted: &[impl AsRef<str>]) -> Result<(), ApiError> {
    let given = bearer(headers).ok_or(ApiError::Unauthorized)?;
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
pub(super) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Compares two secrets in time that depends only on their lengths, so a
/// caller cannot learn a token byte by byte from response times.
pub(super) fn same_secret(given: &[u8], expected: &[u8]) -> bool {
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
