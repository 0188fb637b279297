//! Access control: who the caller is (an API key, the admin token, a client certificate, or a principal of the permissions file) and what it may do with a lock key; the admin token for sale administration (buyers: see `buyer`).

use std::marker::PhantomData;
use std::sync::{Arc, RwLock};

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};

use super::audit;
use super::error::ApiError;
use crate::acl::{Acl, Permission, Principal};

/// The configured admin token; `None` refuses sale administration.
#[derive(Clone, Default)]
pub struct AdminToken(pub Option<Arc<str>>);

/// The configured API keys; none leaves the lock routes open.
#[derive(Clone, Default)]
pub struct ApiKeys(pub Arc<[Box<str>]>);

/// The permissions file in force, if one is configured; replaced whole on
/// reload (`SIGHUP`), so a request sees one file or the other, never a mix.
#[derive(Clone, Default)]
pub struct Permissions(Option<Arc<RwLock<Arc<Acl>>>>);

impl Permissions {
    /// Permissions from `acl`; `None` keeps the API keys' meaning.
    pub fn new(acl: Option<Acl>) -> Self {
        Self(acl.map(|acl| Arc::new(RwLock::new(Arc::new(acl)))))
    }

    /// Puts `acl` in force for the requests that start from now on.
    pub fn replace(&self, acl: Acl) {
        if let Some(current) = &self.0 {
            *current
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(acl);
        }
    }

    pub fn is_configured(&self) -> bool {
        self.0.is_some()
    }

    fn current(&self) -> Option<Arc<Acl>> {
        self.0.as_ref().map(|acl| {
            acl.read()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .clone()
        })
    }
}

/// The names of the client certificate a TLS connection presented (its
/// subject CN and DNS SANs), put on each of its requests by the transport.
#[derive(Clone, Debug)]
pub struct ClientCertificate(pub Arc<[String]>);

/// Who sent a request, as far as the lock routes care.
pub enum Caller {
    /// No API key is configured: the lock routes are open (read and lock).
    Open,
    /// One of the API keys, without a permissions file: read and lock.
    ApiKey,
    /// The admin token: everything.
    Admin,
    /// A principal of the permissions file, with the file it comes from.
    Principal { acl: Arc<Acl>, index: usize },
}

impl Caller {
    /// The principal's name, for answers and the audit trail.
    pub fn name(&self) -> &str {
        match self {
            Self::Open => "anonymous",
            Self::ApiKey => "api-key",
            Self::Admin => "admin",
            Self::Principal { acl, index } => &acl.principal(*index).name,
        }
    }

    /// Whose Idempotency-Keys the caller's are: its principal's, the admin
    /// token's, or (without a permissions file, where every API key may do
    /// the same) one scope for every caller.
    pub fn idempotency_scope(&self) -> String {
        match self {
            Self::Open | Self::ApiKey => String::new(),
            Self::Admin => "admin".to_owned(),
            Self::Principal { .. } => format!("principal:{}", self.name()),
        }
    }

    fn principal(&self) -> Option<&Principal> {
        match self {
            Self::Principal { acl, index } => Some(acl.principal(*index)),
            _ => None,
        }
    }

    /// Whether the caller may do `permission` with `key`; a refusal is 403
    /// `forbidden` naming the principal, the permission and the key, and
    /// goes to the audit trail. Without a permissions file, an API key (or
    /// open routes) may read and lock; revoking needs the admin token.
    pub fn may(&self, permission: Permission, key: &str) -> Result<(), ApiError> {
        let allowed = match self {
            Self::Admin => true,
            Self::Open | Self::ApiKey => permission != Permission::Revoke,
            Self::Principal { .. } => self.principal().is_some_and(|p| p.may(permission, key)),
        };
        if allowed {
            return Ok(());
        }
        audit::refused(self.name(), permission.as_str(), key, "forbidden");
        Err(ApiError::NotPermitted {
            principal: self.name().to_owned(),
            permission,
            key: key.to_owned(),
        })
    }

    /// Whether the caller may read `key`, for a listing that leaves out
    /// what it may not (no audit line: nothing was refused).
    pub fn may_read(&self, key: &str) -> bool {
        match self {
            Self::Open | Self::ApiKey | Self::Admin => true,
            Self::Principal { .. } => self
                .principal()
                .is_some_and(|p| p.may(Permission::Read, key)),
        }
    }

    /// The name a session opened by this caller belongs to: its principal's,
    /// or none without a permissions file (or for the admin token).
    pub fn session_owner(&self) -> Option<&str> {
        self.principal().map(|p| &*p.name)
    }

    /// Whether the caller may use a session owned as `owns` says: its own,
    /// or any for the admin token and without a permissions file.
    pub fn may_use_session(&self, owns: impl FnOnce(&str) -> bool) -> Result<(), ApiError> {
        match self.session_owner() {
            None => Ok(()),
            Some(name) if owns(name) => Ok(()),
            Some(name) => {
                audit::refused(name, "session", "-", "forbidden");
                Err(ApiError::ForeignSession(name.to_owned()))
            }
        }
    }
}

impl<S> FromRequestParts<S> for Caller
where
    S: Send + Sync,
    AdminToken: FromRef<S>,
    ApiKeys: FromRef<S>,
    Permissions: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let given = bearer(&parts.headers);
        let AdminToken(admin) = AdminToken::from_ref(state);
        if let (Some(given), Some(admin)) = (given, admin.as_deref())
            && same_secret(given.as_bytes(), admin.as_bytes())
        {
            return Ok(Self::Admin);
        }
        let Some(acl) = Permissions::from_ref(state).current() else {
            let keys = ApiKeys::from_ref(state);
            return match permitted(&keys, &parts.headers) {
                Ok(()) if keys.0.is_empty() => Ok(Self::Open),
                Ok(()) => Ok(Self::ApiKey),
                Err(err) => {
                    audit::refused("unknown", "authenticate", "-", refusal_slug(&err));
                    Err(err)
                }
            };
        };
        let principal = match given {
            Some(key) => acl.find_by_api_key(key),
            None => parts
                .extensions
                .get::<ClientCertificate>()
                .and_then(|cert| acl.find_by_cert_names(cert.0.iter().map(String::as_str))),
        };
        match principal {
            Some(index) => Ok(Self::Principal { acl, index }),
            None => {
                audit::refused("unknown", "authenticate", "-", "unauthorized");
                Err(ApiError::Unauthorized)
            }
        }
    }
}

fn refusal_slug(err: &ApiError) -> &'static str {
    err.problem_type().info().slug
}

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

impl<S, C> FromRequestParts<S> for Access<C>
where
    S: Send + Sync,
    C: Credentials + FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        permitted(&C::from_ref(state), &parts.headers)
            .map(|()| Self(PhantomData))
            .inspect_err(|err| {
                audit::refused("unknown", parts.uri.path(), "-", refusal_slug(err));
            })
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
