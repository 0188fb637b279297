//! Extractors whose rejections are the API's own problem documents, never axum's plain text.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{ConnectInfo, FromRef, FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::{Json, RequestPartsExt};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde_json::Number;

use super::auth::{AdminToken, ApiKeys, Caller, Permissions};
use super::error::ApiError;
use crate::acl::Permission;
use crate::locks::IdempotencyKey;
use crate::locks::{InvalidKey, InvalidToken, LockKey, Token};
use crate::seckill::Sku;

/// The header that carries an owner's token.
pub const LOCK_TOKEN: &str = "lock-token";
/// The header that names one purchase attempt.
const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// A JSON object body; anything but an object (serde would take an array
/// for a struct, and name the struct when it refuses a string), bad JSON, a
/// wrong content type or an oversized body become 400 / 415 / 413 problems.
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        if !json_content_type(request.headers()) {
            return Err(ApiError::UnsupportedMediaType);
        }
        let bytes =
            Bytes::from_request(request, state)
                .await
                .map_err(|rejection| match rejection.status() {
                    StatusCode::PAYLOAD_TOO_LARGE => ApiError::BodyTooLarge,
                    _ => ApiError::MalformedBody(rejection.body_text()),
                })?;
        let first = bytes.iter().find(|byte| !byte.is_ascii_whitespace());
        if first != Some(&b'{') {
            return Err(ApiError::MalformedBody(
                "the body must be a JSON object".into(),
            ));
        }
        let Json(value) = Json::<T>::from_bytes(&bytes)?;
        Ok(Self(value))
    }
}

/// Whether the request says its body is JSON (`application/json`, or a
/// `+json` type), as axum's own `Json` requires.
fn json_content_type(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
    else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or_default().trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case("json") || subtype.to_ascii_lowercase().ends_with("+json"))
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
        // `POST /locks/batch` takes the path of a lock named `batch`, whose
        // other routes it shares.
        if parts.uri.path() == "/locks/batch" {
            return Ok(Self(LockKey::parse("batch")?));
        }
        // The only way this path extraction fails is a segment that does not
        // percent-decode to UTF-8, which no valid key does.
        let Path(text) = parts
            .extract::<Path<String>>()
            .await
            .map_err(|_| InvalidKey::NotText)?;
        Ok(Self(LockKey::parse(&text)?))
    }
}

/// A change a lock's holder asks for by its token (`PUT /locks/{key}/ttl`,
/// `/value`, `/mode`): the lock, which the caller may lock; the holder's
/// token, from the body or the `Lock-Token` header ([`holder_token`]); and
/// the body. Refusals come in the order a handler's own extractors gave
/// them: the caller (401), the key (422), the body (400, 413, 415), the
/// permission (403), the token (400, 422).
pub struct HolderChange<B> {
    pub key: LockKey,
    pub token: Token,
    pub body: B,
}

/// A body that may name its holder's token.
pub trait NamesToken {
    fn token(&self) -> Option<&str>;
}

impl<S, B> FromRequest<S> for HolderChange<B>
where
    S: Send + Sync,
    AdminToken: FromRef<S>,
    ApiKeys: FromRef<S>,
    Permissions: FromRef<S>,
    B: DeserializeOwned + NamesToken,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let (mut parts, body) = request.into_parts();
        let caller = Caller::from_request_parts(&mut parts, state).await?;
        let KeyPath(key) = KeyPath::from_request_parts(&mut parts, state).await?;
        let headers = parts.headers.clone();
        let JsonBody(body) =
            JsonBody::<B>::from_request(Request::from_parts(parts, body), state).await?;
        caller.may(Permission::Lock, key.as_str())?;
        let token = holder_token(body.token(), &headers)?;
        Ok(Self { key, token, body })
    }
}

/// The holder's token, named in the body (or the query) and the `Lock-Token`
/// header, or in one of them. Two different ones are refused rather than
/// one of them silently used.
pub fn holder_token(named: Option<&str>, headers: &HeaderMap) -> Result<Token, ApiError> {
    let named = named.map(Token::parse).transpose()?;
    match (named, token_header(headers)?) {
        (Some(named), Some(header)) if named != header => Err(ApiError::ConflictingTokens),
        (Some(token), _) | (None, Some(token)) => Ok(token),
        (None, None) => Err(ApiError::MissingToken),
    }
}

/// The `Lock-Token` header, parsed, when the request has one.
fn token_header(headers: &HeaderMap) -> Result<Option<Token>, ApiError> {
    let Some(value) = one_header(headers, LOCK_TOKEN, "Lock-Token")? else {
        return Ok(None);
    };
    let text = value.to_str().map_err(|_| InvalidToken)?;
    Ok(Some(Token::parse(text)?))
}

/// The header `name` (shown as `shown`), sent at most once: the same
/// header twice with different values is refused rather than one of them
/// used in silence (the same value twice, as proxies may repeat it, is one).
pub fn one_header<'h>(
    headers: &'h HeaderMap,
    name: &str,
    shown: &'static str,
) -> Result<Option<&'h HeaderValue>, ApiError> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.any(|other| other != first) {
        return Err(ApiError::invalid_field(
            shown,
            "was sent more than once, with different values: send it once",
        ));
    }
    Ok(Some(first))
}

/// An optional count field, or `default` when it is absent.
pub fn whole_number_or(
    name: &'static str,
    field: Option<&Number>,
    default: u64,
) -> Result<u64, ApiError> {
    field.map_or(Ok(default), |number| whole_number(name, number))
}

/// A count field: any JSON number parses (so a negative or fractional one
/// is a 422 naming the field, not a 400), but only a whole one is used. As
/// in JSON Schema, `2130.0` is the integer 2130.
pub fn whole_number(name: &'static str, number: &Number) -> Result<u64, ApiError> {
    let integral_float = || {
        number
            .as_f64()
            .filter(|value| value.fract() == 0.0 && (0.0..=u64::MAX as f64).contains(value))
            .map(|value| value as u64)
    };
    number
        .as_u64()
        .or_else(integral_float)
        .ok_or_else(|| ApiError::invalid_field(name, "must be a whole, non-negative number"))
}

/// The `{sku}` segment of a sale path, parsed into a [`Sku`].
pub struct SkuPath(pub Sku);

impl<S: Send + Sync> FromRequestParts<S> for SkuPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let Path(text) = parts
            .extract::<Path<String>>()
            .await
            .map_err(|_| ApiError::invalid_field("sku", "must percent-decode to text"))?;
        Ok(Self(Sku::parse(&text)?))
    }
}

/// The `Idempotency-Key` header (of a purchase, or an acquisition), parsed,
/// when the request has one.
pub struct IdempotencyKeyHeader(pub Option<IdempotencyKey>);

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKeyHeader {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let Some(value) = one_header(&parts.headers, IDEMPOTENCY_KEY, "Idempotency-Key")? else {
            return Ok(Self(None));
        };
        // A value that is not visible ASCII fails the key's own check.
        let text = value.to_str().unwrap_or_default();
        let key = IdempotencyKey::parse(text)
            .map_err(|err| ApiError::invalid_field("Idempotency-Key", err.to_string()))?;
        Ok(Self(Some(key)))
    }
}

/// The proxies (nginx) whose `X-Forwarded-For` names the real client.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(pub Arc<[IpAddr]>);

/// The client's address: the peer's, or, when the peer is a trusted proxy,
/// the address it put in `X-Forwarded-For`. `None` only without a socket
/// (requests built in-process).
pub struct ClientIp(pub Option<IpAddr>);

impl<S> FromRequestParts<S> for ClientIp
where
    S: Send + Sync,
    TrustedProxies: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip());
        let trusted = TrustedProxies::from_ref(state);
        Ok(Self(match peer {
            Some(ip) if trusted.0.contains(&ip) => forwarded_for(&parts.headers).or(peer),
            _ => peer,
        }))
    }
}

/// The last address in `X-Forwarded-For`: the one our trusted proxy wrote
/// (nginx sets the header to the address it saw, replacing any the client
/// sent).
fn forwarded_for(headers: &HeaderMap) -> Option<IpAddr> {
    let value = headers.get("x-forwarded-for")?.to_str().ok()?;
    value.rsplit(',').next()?.trim().parse().ok()
}
