//! OpenAPI schemas of the API's text parameters, and the bounds of every input, taken from the parsers that enforce them.
//!
//! The text types only describe (the `#[utoipa::path]` attributes name
//! them); the values are parsed by `LockKey`, `Token`, `Sku` and the rest.
//! No pattern, minimum or maximum is written in an annotation: [`Bounds`]
//! sets each from the parser's own constants when the document is built,
//! so the document cannot say one thing while the parser does another.
#![allow(dead_code)]

use utoipa::openapi::path::Operation;
use utoipa::openapi::schema::{Object, Schema};
use utoipa::openapi::{OpenApi, RefOr};
use utoipa::{Modify, Number, ToSchema};

use crate::locks::{
    DEFAULT_MAX_TTL_MS, DEFAULT_MAX_WAIT_MS, MAX_LIMIT, MAX_LIST, MIN_TTL_MS, Token,
    idempotency_key_pattern, key_pattern,
};
use crate::seckill::{MAX_PAGE, MAX_QUANTITY, MAX_STOCK, name_pattern};

/// A lock key: 1 to 200 characters of `A-Z a-z 0-9 . _ : -`, not only dots.
#[derive(ToSchema)]
#[schema(value_type = String, example = "orders:42")]
pub struct LockKeyText(String);

/// An owner token: the UUID handed out with the grant.
#[derive(ToSchema)]
#[schema(value_type = String, format = Uuid)]
pub struct TokenText(String);

/// A sku or a user id: 1 to 64 characters of `A-Z a-z 0-9 . _ -`, not only dots.
#[derive(ToSchema)]
#[schema(value_type = String, example = "phone-2026")]
pub struct NameText(String);

/// An Idempotency-Key: 1 to 200 visible ASCII characters (a UUID is typical).
#[derive(ToSchema)]
#[schema(value_type = String)]
pub struct IdempotencyKeyText(String);

/// How a lock is held: `exclusive` (alone, or as one of a counting lock's
/// `limit` places) or `shared` (with any number of other shared holders).
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum LockModeText {
    Exclusive,
    Shared,
}

/// One Server-Sent Event of a streamed lock (`POST /locks` with `Accept:
/// text/event-stream`), as a client's event parser sees it: the event's
/// name and its `data`, a JSON document (see each event's shape in the
/// operation's description).
#[derive(ToSchema)]
pub struct LockStreamEvent {
    event: LockStreamEventName,
    /// The event's JSON document, as text.
    #[schema(content_media_type = "application/json")]
    data: String,
}

/// The events of a streamed lock.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum LockStreamEventName {
    Queued,
    Refused,
    Acquired,
    Renewed,
    Released,
    Lost,
}

/// One Server-Sent Event of `GET /locks/{key}/events`: its id (the one to
/// send back as `Last-Event-ID`; `gap` has none), its name and its `data`, a
/// JSON document.
#[derive(ToSchema)]
pub struct LockWatchEvent {
    id: Option<String>,
    event: LockWatchEventName,
    /// The event's JSON document, as text.
    #[schema(content_media_type = "application/json")]
    data: String,
}

/// The events of a watched lock.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum LockWatchEventName {
    Snapshot,
    Acquired,
    Value,
    Released,
    Expired,
    Revoked,
    Gap,
}

/// Sets every pattern and numeric bound of the document from the parsers'
/// constants (the lease and wait maximums are the defaults a deployment
/// may change).
pub struct Bounds;

impl Modify for Bounds {
    fn modify(&self, openapi: &mut OpenApi) {
        let ttl = (MIN_TTL_MS, DEFAULT_MAX_TTL_MS);
        for (schema, field, bound) in [
            ("LockKeyText", None, Bound::Pattern(key_pattern())),
            ("TokenText", None, Bound::Pattern(Token::PATTERN.into())),
            ("NameText", None, Bound::Pattern(name_pattern())),
            (
                "IdempotencyKeyText",
                None,
                Bound::Pattern(idempotency_key_pattern()),
            ),
            ("AcquireBody", Some("key"), Bound::Pattern(key_pattern())),
            ("AcquireBody", Some("ttl_ms"), Bound::Range(ttl.0, ttl.1)),
            (
                "AcquireBody",
                Some("wait_ms"),
                Bound::Range(0, DEFAULT_MAX_WAIT_MS),
            ),
            ("AcquireBody", Some("limit"), Bound::Range(1, MAX_LIMIT)),
            ("ExtendBody", Some("ttl_ms"), Bound::Range(ttl.0, ttl.1)),
            ("SaleBody", Some("stock"), Bound::Range(0, MAX_STOCK)),
            (
                "SaleBody",
                Some("per_user_limit"),
                Bound::Range(1, MAX_STOCK),
            ),
            ("OrderBody", Some("user_id"), Bound::Pattern(name_pattern())),
            ("OrderBody", Some("quantity"), Bound::Range(1, MAX_QUANTITY)),
        ] {
            let target = component(openapi, schema, field)
                .unwrap_or_else(|| panic!("the document has no {schema} {field:?} to bound"));
            bound.apply(target);
        }
        let page = query_parameter(openapi, "/seckill/{sku}/orders", "limit")
            .expect("the document has the orders' page limit");
        Bound::Range(1, MAX_PAGE as u64).apply(page);
        let locks = query_parameter(openapi, "/locks", "limit")
            .expect("the document has the lock listing's page limit");
        Bound::Range(1, MAX_LIST as u64).apply(locks);
    }
}

/// A bound set on a schema.
enum Bound {
    Pattern(String),
    Range(u64, u64),
}

impl Bound {
    fn apply(self, schema: &mut Object) {
        match self {
            Self::Pattern(pattern) => schema.pattern = Some(pattern),
            Self::Range(minimum, maximum) => {
                schema.minimum = Some(number(minimum));
                schema.maximum = Some(number(maximum));
            }
        }
    }
}

fn number(value: u64) -> Number {
    Number::UInt(usize::try_from(value).unwrap_or(usize::MAX))
}

/// The schema `name` of the components, or its property `field`.
fn component<'a>(
    openapi: &'a mut OpenApi,
    name: &str,
    field: Option<&str>,
) -> Option<&'a mut Object> {
    let schema = object(openapi.components.as_mut()?.schemas.get_mut(name)?)?;
    match field {
        None => Some(schema),
        Some(field) => schema.properties.get_mut(field).and_then(object),
    }
}

/// The schema of the query parameter `name` of `GET path`.
fn query_parameter<'a>(openapi: &'a mut OpenApi, path: &str, name: &str) -> Option<&'a mut Object> {
    let operation: &mut Operation = openapi.paths.paths.get_mut(path)?.get.as_mut()?;
    let parameter =
        operation
            .parameters
            .as_mut()?
            .iter_mut()
            .find_map(|parameter| match parameter {
                RefOr::T(parameter) if parameter.name == name => Some(parameter),
                _ => None,
            })?;
    parameter.schema.as_mut().and_then(object)
}

fn object(schema: &mut RefOr<Schema>) -> Option<&mut Object> {
    match schema {
        RefOr::T(Schema::Object(object)) => Some(object),
        _ => None,
    }
}
