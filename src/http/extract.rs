//! Extractors whose rejections are the API's own problem documents, never axum's plain text.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::{Json, RequestPartsExt};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::locks::{InvalidKey, InvalidToken, LockKey, Token};

/// The header that carries an owner's token.
pub const LOCK_TOKEN: &str = "lock-token";

/// A JSON body; bad JSON, a wrong content type or an oversized body become
/// 400 / 415 / 413 problems.
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let Json(value) = Json::<T>::from_request(request, state).await?;
        Ok(Self(value))
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::MissingJsonContentType(_) => Self::UnsupportedMediaType,
            rejection if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => Self::BodyTooLarge,
            rejection => Self::MalformedBody(rejection.body_text()),
        }
    }
}

/// The `{key}` segment of a lock path, parsed into a [`LockKey`].
pub struct KeyPath(pub LockKey);

impl<S: Send + Sync> FromRequestParts<S> for KeyPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        // The only way this path extraction fails is a segment that does not
        // percent-decode to UTF-8, which no valid key does.
        let Path(text) = parts
            .extract::<Path<String>>()
            .await
            .map_err(|_| InvalidKey::NotText)?;
        Ok(Self(LockKey::parse(&text)?))
    }
}

/// The owner's token of a `DELETE`: the `Lock-Token` header, or `?token=` for
/// clients that cannot set headers.
pub struct OwnerToken(pub Token);

#[derive(Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for OwnerToken {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        if let Some(token) = token_header(&parts.headers)? {
            return Ok(Self(token));
        }
        // A query that does not decode (a repeated `token`, say) is no token.
        let query = Query::<TokenQuery>::try_from_uri(&parts.uri).map_err(|_| InvalidToken)?;
        let text = query.0.token.ok_or(ApiError::MissingToken)?;
        Ok(Self(Token::parse(&text)?))
    }
}

/// The `Lock-Token` header, parsed, when the request has one.
pub fn token_header(headers: &HeaderMap) -> Result<Option<Token>, ApiError> {
    let Some(value) = headers.get(LOCK_TOKEN) else {
        return Ok(None);
    };
    let text = value.to_str().map_err(|_| InvalidToken)?;
    Ok(Some(Token::parse(text)?))
}
