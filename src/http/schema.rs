//! OpenAPI schemas of the API's text parameters, and the bounds of every input, taken from the parsers that enforce them.
//!
//! The text types only describe (the `#[utoipa::path]` attributes name
//! them); the values are parsed by `LockKey`, `Token`, `Sku` and the rest.
//! No pattern, minimum or maximum is written in an annotation: [`Bounds`]
//! sets each from the parser's own constants when the document is built,
//! so the document cannot say one thing while the parser does another.
#![allow(dead_code)]

use serde_json::{Value, json};
use utoipa::openapi::path::Operation;
use utoipa::openapi::schema::{Object, Schema};
use utoipa::openapi::{OpenApi, RefOr};
use utoipa::{Modify, Number, ToSchema};

use crate::locks::ListCursor;
use crate::locks::sessions::{MAX_LOCK_DELAY_MS, MIN_SESSION_TTL_MS};
use crate::locks::{
    LockLimits, MAX_LIMIT, MAX_LIST, MAX_VALUE_BYTES, MIN_TTL_MS, Token, idempotency_key_pattern,
    key_pattern,
};
use crate::seckill::{Cursor, MAX_PAGE, MAX_QUANTITY, MAX_STOCK, name_pattern};

/// What a `Last-Event-ID` may look like: a stream id (each part is also
/// checked to fit in 64 bits).
pub(super) const LAST_EVENT_ID_PATTERN: &str = r"^[0-9]{1,20}-[0-9]{1,20}$";

/// A lock key: 1 to 200 characters of `A-Z a-z 0-9 . _ : -`, not only dots.
#[derive(ToSchema)]
#[schema(value_type = String, example = "orders:42")]
pub struct LockKeyText(String);

/// An owner token: the UUID handed out with the grant.
#[derive(ToSchema)]
#[schema(value_type = String, format = Uuid)]
pub struct TokenText(String);

/// A session's id: the UUID `POST /sessions` handed out.
#[derive(ToSchema)]
#[schema(value_type = String, format = Uuid)]
pub struct SessionIdText(String);

/// A sku or a user id: 1 to 64 characters of `A-Z a-z 0-9 . _ -`, not only dots.
#[derive(ToSchema)]
#[schema(value_type = String, example = "phone-2026")]
pub struct NameText(String);

/// An Idempotency-Key: 1 to 200 visible ASCII characters (a UUID is typical).
#[derive(ToSchema)]
#[schema(value_type = String)]
pub struct IdempotencyKeyText(String);

/// `held` of a held lock's status: always `true`, so a status can never
/// also read as a free lock's (`oneOf` needs exactly one match).
pub fn held_true() -> Object {
    held_const(true, "Always true: a lock that is not held answers 404.")
}

/// `held` of a free lock's status: always `false`.
pub fn held_false() -> Object {
    held_const(false, "Always false.")
}

fn held_const(value: bool, description: &str) -> Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::Boolean)
        .enum_values(Some([value]))
        .description(Some(description))
        .build()
}

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

/// Why a streamed lock was lost.
#[derive(ToSchema)]
#[schema(rename_all = "kebab-case")]
pub enum LostReasonText {
    LockGone,
    HeldByAnother,
    BackendUnavailable,
    Revoked,
    SessionEnded,
    ShuttingDown,
}

/// The events of a watched lock.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum LockWatchEventName {
    Snapshot,
    Acquired,
    Value,
    Mode,
    Released,
    Expired,
    Revoked,
    Delayed,
    Gap,
}

/// Sets every pattern and numeric bound of the document from the parsers'
/// constants, and the lease and wait maximums from a deployment's limits.
pub struct Bounds(pub LockLimits);

impl Modify for Bounds {
    fn modify(&self, openapi: &mut OpenApi) {
        let ttl = (MIN_TTL_MS, self.0.max_ttl_ms);
        for (schema, field, bound) in [
            ("LockKeyText", None, Bound::Pattern(key_pattern())),
            ("TokenText", None, Bound::Pattern(Token::PATTERN.into())),
            // `SessionId::parse` takes the same text as a token.
            ("SessionIdText", None, Bound::Pattern(Token::PATTERN.into())),
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
                Bound::Range(0, self.0.max_wait_ms),
            ),
            ("AcquireBody", Some("limit"), Bound::Range(1, MAX_LIMIT)),
            ("AcquireBody", Some("permits"), Bound::Range(1, MAX_LIMIT)),
            ("BatchBody", Some("ttl_ms"), Bound::Range(ttl.0, ttl.1)),
            (
                "BatchBody",
                Some("wait_ms"),
                Bound::Range(0, self.0.max_wait_ms),
            ),
            ("BatchLockBody", Some("key"), Bound::Pattern(key_pattern())),
            ("BatchLockBody", Some("limit"), Bound::Range(1, MAX_LIMIT)),
            ("BatchLockBody", Some("permits"), Bound::Range(1, MAX_LIMIT)),
            (
                "ModeBody",
                Some("wait_ms"),
                Bound::Range(0, self.0.max_wait_ms),
            ),
            ("ExtendBody", Some("ttl_ms"), Bound::Range(ttl.0, ttl.1)),
            (
                "SessionBody",
                Some("ttl_ms"),
                Bound::Range(MIN_SESSION_TTL_MS, self.0.max_ttl_ms),
            ),
            (
                "SessionBody",
                Some("lock_delay_ms"),
                Bound::Range(0, MAX_LOCK_DELAY_MS),
            ),
            (
                "KeepBody",
                Some("ttl_ms"),
                Bound::Range(MIN_SESSION_TTL_MS, self.0.max_ttl_ms),
            ),
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
        for (path, name, bound) in [
            (
                "/seckill/{sku}/orders",
                "limit",
                Bound::Range(1, MAX_PAGE as u64),
            ),
            ("/locks", "limit", Bound::Range(1, MAX_LIST as u64)),
            ("/locks/{key}", "fencing_token", Bound::Minimum(1)),
            (
                "/locks",
                "cursor",
                Bound::Pattern(ListCursor::PATTERN.into()),
            ),
            (
                "/seckill/{sku}/orders",
                "cursor",
                Bound::Pattern(Cursor::PATTERN.into()),
            ),
            (
                "/locks/{key}/events",
                "Last-Event-ID",
                Bound::Pattern(LAST_EVENT_ID_PATTERN.into()),
            ),
        ] {
            let parameter = query_parameter(openapi, path, name)
                .unwrap_or_else(|| panic!("the document has no {name} on {path}"));
            bound.apply(parameter);
        }
    }
}

/// The document as JSON, with what the annotations cannot say: an optional
/// header or query parameter is absent, never null; a shared lock names
/// no limit; a purchase names its buyer (a gateway that checks buyer
/// tokens also takes the token's instead); a value's length.
pub fn refined(openapi: &OpenApi) -> String {
    let mut document = serde_json::to_value(openapi).expect("the OpenAPI document serialises");
    if let Some(paths) = document["paths"].as_object_mut() {
        for operation in paths
            .values_mut()
            .flat_map(|path| path.as_object_mut())
            .flat_map(|path| path.values_mut())
        {
            let parameters = operation
                .get_mut("parameters")
                .and_then(Value::as_array_mut);
            for parameter in parameters.into_iter().flatten() {
                not_null(&mut parameter["schema"]);
            }
        }
    }
    let schemas = &mut document["components"]["schemas"];
    for body in ["AcquireBody", "BatchLockBody"] {
        schemas[body]["not"] = json!({
            "description": "A shared lock has no limit, and no places to count; a holder \
                takes no more places than its lock has (one, without a limit).",
            "anyOf": [
                {
                    "required": ["mode", "limit"],
                    "properties": {"mode": {"const": "shared"}, "limit": {"type": "integer"}},
                },
                {
                    "required": ["mode", "permits"],
                    "properties": {"mode": {"const": "shared"}, "permits": {"type": "integer"}},
                },
                {
                    "required": ["permits"],
                    "properties": {"permits": {"minimum": 2}, "limit": {"maximum": 1}},
                },
            ],
        });
    }
    schemas["OrderBody"]["required"] = json!(["user_id"]);
    schemas["OrderBody"]["properties"]["user_id"]["type"] = json!("string");
    for body in ["AcquireBody", "ValueBody", "BatchBody"] {
        schemas[body]["properties"]["value"]["maxLength"] = json!(MAX_VALUE_BYTES);
    }
    serde_json::to_string_pretty(&document).expect("the OpenAPI document serialises")
}

/// `{"oneOf": [schema, {"type": "null"}]}` made `schema`, and
/// `{"type": [type, "null"]}` made `{"type": type}`.
fn not_null(schema: &mut Value) {
    if let Some(types) = schema["type"].as_array()
        && types.len() == 2
        && let Some(other) = types.iter().find(|kind| *kind != "null")
    {
        schema["type"] = other.clone();
        return;
    }
    let Some(choices) = schema["oneOf"].as_array() else {
        return;
    };
    let kept: Vec<&Value> = choices
        .iter()
        .filter(|choice| choice["type"] != "null")
        .collect();
    if kept.len() == 1 && choices.len() == 2 {
        *schema = kept[0].clone();
    }
}

/// A bound set on a schema.
enum Bound {
    Pattern(String),
    Range(u64, u64),
    Minimum(u64),
}

impl Bound {
    fn apply(self, schema: &mut Object) {
        match self {
            Self::Pattern(pattern) => schema.pattern = Some(pattern),
            Self::Range(minimum, maximum) => {
                schema.minimum = Some(number(minimum));
                schema.maximum = Some(number(maximum));
            }
            Self::Minimum(minimum) => schema.minimum = Some(number(minimum)),
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

/// The schema of the parameter `name` (query or header) of `path` (its
/// `GET`, else its `DELETE`).
fn query_parameter<'a>(openapi: &'a mut OpenApi, path: &str, name: &str) -> Option<&'a mut Object> {
    let item = openapi.paths.paths.get_mut(path)?;
    let has =
        |operation: &Option<Operation>| {
            operation.as_ref().is_some_and(|operation| {
                operation.parameters.iter().flatten().any(
                    |parameter| matches!(parameter, RefOr::T(parameter) if parameter.name == name),
                )
            })
        };
    let operation: &mut Operation = if has(&item.get) {
        item.get.as_mut()?
    } else {
        item.delete.as_mut()?
    };
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
