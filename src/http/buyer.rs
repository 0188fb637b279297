//! Who a sale request is made for: the buyer a JWT names, when the gateway has a key for buyer tokens.
//!
//! With `LOCKGATE_BUYER_JWT_SECRET` (HS256) or
//! `LOCKGATE_BUYER_JWT_PUBLIC_KEY` (RS256 or ES256, PEM) a purchase needs
//! `Authorization: Bearer <JWT>`, and the buyer is the token's `sub`: a body
//! `user_id` that names another is refused, and a buyer lists only its own
//! orders (the admin token lists all). Without either, the body's `user_id`
//! is the buyer, as the gateway warns at start.

use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use super::auth::{AdminToken, bearer, same_secret};
use super::error::ApiError;
use crate::seckill::UserId;

/// The key buyer tokens are checked with; `None` when the sale trusts the
/// body's `user_id`.
#[derive(Clone, Default)]
pub struct BuyerTokens(pub Option<Arc<BuyerKey>>);

/// A key and the checks a buyer token must pass: its signature, its
/// algorithm, an `exp` not past, and a `sub`.
pub struct BuyerKey {
    key: DecodingKey,
    validation: Validation,
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
}

impl BuyerKey {
    /// Tokens signed with a shared secret (HS256).
    pub fn secret(secret: &str) -> Self {
        Self::new(
            DecodingKey::from_secret(secret.as_bytes()),
            Algorithm::HS256,
        )
    }

    /// Tokens signed with the private half of `pem`: an RSA key (RS256) or a
    /// P-256 key (ES256). `pem` is the key itself or the path of a file
    /// holding it.
    pub fn public_key(pem: &str) -> Result<Self, String> {
        let text = if pem.trim_start().starts_with("-----BEGIN") {
            pem.to_owned()
        } else {
            std::fs::read_to_string(pem)
                .map_err(|err| format!("cannot read the buyer token key {pem}: {err}"))?
        };
        if let Ok(key) = DecodingKey::from_rsa_pem(text.as_bytes()) {
            return Ok(Self::new(key, Algorithm::RS256));
        }
        DecodingKey::from_ec_pem(text.as_bytes())
            .map(|key| Self::new(key, Algorithm::ES256))
            .map_err(|_| {
                "the buyer token key is neither an RSA nor a P-256 public key in PEM".into()
            })
    }

    fn new(key: DecodingKey, algorithm: Algorithm) -> Self {
        let mut validation = Validation::new(algorithm);
        validation.set_required_spec_claims(&["exp", "sub"]);
        Self { key, validation }
    }

    /// The buyer `token` names; 401 unless it passes every check, 403 if
    /// its `sub` is no user id.
    fn buyer(&self, token: &str) -> Result<UserId, ApiError> {
        let claims = jsonwebtoken::decode::<Claims>(token, &self.key, &self.validation)
            .map_err(|_| ApiError::Unauthorized)?
            .claims;
        UserId::parse(&claims.sub).map_err(|_| ApiError::WrongBuyer)
    }
}

/// Who a purchase is made for.
pub enum Buyer {
    /// Buyer tokens are checked, and the request's names this buyer.
    Verified(UserId),
    /// Buyer tokens are not configured: the body says who buys.
    Unverified,
}

impl<S> FromRequestParts<S> for Buyer
where
    S: Send + Sync,
    BuyerTokens: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Ok(match buyer_token(parts, BuyerTokens::from_ref(state))? {
            None => Self::Unverified,
            Some((key, token)) => Self::Verified(key.buyer(token)?),
        })
    }
}

/// The buyer token key and the request's bearer token, when the gateway
/// checks buyer tokens (401 without a token); `None` when it does not.
fn buyer_token(
    parts: &Parts,
    tokens: BuyerTokens,
) -> Result<Option<(Arc<BuyerKey>, &str)>, ApiError> {
    let Some(key) = tokens.0 else {
        return Ok(None);
    };
    let token = bearer(&parts.headers).ok_or(ApiError::Unauthorized)?;
    Ok(Some((key, token)))
}

/// Who lists a sale's orders.
pub enum OrdersReader {
    /// Buyer tokens are not configured: the list is open.
    Anyone,
    /// The admin token: every order.
    Admin,
    /// A buyer's token: that buyer's orders only.
    Buyer(UserId),
}

impl<S> FromRequestParts<S> for OrdersReader
where
    S: Send + Sync,
    BuyerTokens: FromRef<S>,
    AdminToken: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Some((key, token)) = buyer_token(parts, BuyerTokens::from_ref(state))? else {
            return Ok(Self::Anyone);
        };
        let AdminToken(admin) = AdminToken::from_ref(state);
        if admin.is_some_and(|admin| same_secret(token.as_bytes(), admin.as_bytes())) {
            return Ok(Self::Admin);
        }
        key.buyer(token).map(Self::Buyer)
    }
}
