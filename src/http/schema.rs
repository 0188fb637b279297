//! OpenAPI schemas of the API's text parameters, with the patterns their parsers enforce.
//!
//! These types only describe (the `#[utoipa::path]` attributes name them);
//! the values are parsed by `LockKey`, `Token`, `Sku` and the rest, which the
//! patterns here must match.
#![allow(dead_code)]

use utoipa::ToSchema;

/// A lock key: 1 to 200 characters of `A-Z a-z 0-9 . _ : -`, not only dots.
#[derive(ToSchema)]
#[schema(value_type = String, pattern = r"^(?!\.+$)[A-Za-z0-9._:-]{1,200}$", example = "orders:42")]
pub struct LockKeyText(String);

/// An owner token: the UUID handed out with the grant.
#[derive(ToSchema)]
#[schema(
    value_type = String,
    format = Uuid,
    pattern = r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$"
)]
pub struct TokenText(String);

/// A sku or a user id: 1 to 64 characters of `A-Z a-z 0-9 . _ -`, not only dots.
#[derive(ToSchema)]
#[schema(value_type = String, pattern = r"^(?!\.+$)[A-Za-z0-9._-]{1,64}$", example = "phone-2026")]
pub struct NameText(String);

/// An Idempotency-Key: 1 to 128 visible ASCII characters (a UUID is typical).
#[derive(ToSchema)]
#[schema(value_type = String, pattern = r"^[!-~]{1,128}$")]
pub struct IdempotencyKeyText(String);

/// How a lock is held: `exclusive` (alone, or as one of a counting lock's
/// `limit` places) or `shared` (with any number of other shared holders).
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum LockModeText {
    Exclusive,
    Shared,
}
