//! Typed flash-sale inputs (`Sku`, `UserId`, `Quantity`, `SaleTerms`, pages of orders) that can only be made by parsing.

use std::fmt;

use crate::locks::{IdempotencyKey, LockKey};

/// The most segments a sale may have.
pub const MAX_SEGMENTS: u64 = 64;

/// The longest sku or user id.
pub const MAX_NAME_LEN: usize = 64;
/// The most units one purchase may ask for.
pub const MAX_QUANTITY: u64 = 1_000;
/// The largest stock a sale may have.
pub const MAX_STOCK: u64 = 1_000_000_000;
/// What a sku or user id may hold besides ASCII letters and digits.
const NAME_PUNCTUATION: &str = "._-";
/// The most orders one page lists.
pub const MAX_PAGE: usize = 1_000;
/// The orders a page lists when the request names no `limit`.
pub const DEFAULT_PAGE: usize = 100;

/// Why a field of a sale request was refused, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {reason}")]
pub struct InvalidInput {
    pub field: &'static str,
    pub reason: String,
}

impl InvalidInput {
    fn new(field: &'static str, reason: impl Into<String>) -> Self {
        Self {
            field,
            reason: reason.into(),
        }
    }
}

/// Checks a sku or user id: 1 to 64 characters of `A-Z a-z 0-9 . _ -`, not
/// only dots (a sku is a path segment, and `.` or `..` name no path). No
/// `:`, so `seckill:<sku>:<user>` names exactly one (sku, user) pair.
fn name(field: &'static str, text: &str) -> Result<String, InvalidInput> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || NAME_PUNCTUATION.contains(c);
    if text.is_empty() || text.len() > MAX_NAME_LEN || !text.chars().all(allowed) {
        return Err(InvalidInput::new(
            field,
            format!("must be 1 to {MAX_NAME_LEN} characters of A-Z a-z 0-9 . _ -"),
        ));
    }
    if text.bytes().all(|byte| byte == b'.') {
        return Err(InvalidInput::new(field, "cannot be only dots"));
    }
    Ok(text.to_owned())
}

/// The rule a sku or user id follows, as a regular expression.
pub fn name_pattern() -> String {
    format!(r"^(?!\.+$)[A-Za-z0-9{NAME_PUNCTUATION}]{{1,{MAX_NAME_LEN}}}$")
}

/// A sale's product code.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Sku(String);

impl Sku {
    pub fn parse(text: &str) -> Result<Self, InvalidInput> {
        name("sku", text).map(Self)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The lock a reset takes, so resets of one sale never overlap.
    pub fn lock_key(&self) -> LockKey {
        LockKey::parse(&format!("seckill:{}", self.0)).expect("a sku makes a valid lock key")
    }
}

impl fmt::Display for Sku {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A buyer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserId(String);

impl UserId {
    pub fn parse(text: &str) -> Result<Self, InvalidInput> {
        name("user_id", text).map(Self)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Units in one purchase: 1 to [`MAX_QUANTITY`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity(u64);

impl Quantity {
    pub fn new(units: u64) -> Result<Self, InvalidInput> {
        if (1..=MAX_QUANTITY).contains(&units) {
            Ok(Self(units))
        } else {
            Err(InvalidInput::new(
                "quantity",
                format!("must be an integer from 1 to {MAX_QUANTITY}"),
            ))
        }
    }

    pub fn get(self) -> u64 {
        self.0
    }
}

/// How many orders a page lists: 1 to [`MAX_PAGE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLimit(usize);

impl PageLimit {
    pub fn new(limit: u64) -> Result<Self, InvalidInput> {
        usize::try_from(limit)
            .ok()
            .filter(|limit| (1..=MAX_PAGE).contains(limit))
            .map(Self)
            .ok_or_else(|| {
                InvalidInput::new("limit", format!("must be an integer from 1 to {MAX_PAGE}"))
            })
    }

    pub fn get(self) -> usize {
        self.0
    }
}

impl Default for PageLimit {
    fn default() -> Self {
        Self(DEFAULT_PAGE)
    }
}

/// Where a page of orders begins: the `next_cursor` of the page before, as
/// it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cursor {
    /// Everyone's orders: after this one, in the order of their purchase
    /// time (ms) and then of their ids (`<ms>.<order id>`).
    After { ms: u64, order_id: String },
    /// One user's orders: after skipping this many.
    Skip(usize),
}

impl Cursor {
    /// What a cursor may look like, as a regular expression.
    pub const PATTERN: &str = r"^([0-9]{1,20}\.[0-9A-Za-z-]{1,64}|[0-9]{1,20})$";

    /// The cursor as a page gives it.
    pub fn to_text(&self) -> String {
        match self {
            Self::After { ms, order_id } => format!("{ms}.{order_id}"),
            Self::Skip(skip) => skip.to_string(),
        }
    }

    /// A cursor for everyone's orders (`for_user` false) or one user's.
    pub fn parse(text: &str, for_user: bool) -> Result<Self, InvalidInput> {
        let number = |part: &str| {
            part.bytes()
                .all(|byte| byte.is_ascii_digit())
                .then(|| part.parse::<u64>().ok())
                .flatten()
        };
        let cursor = if for_user {
            number(text)
                .and_then(|skip| usize::try_from(skip).ok())
                .map(Self::Skip)
        } else {
            text.split_once('.').and_then(|(ms, order_id)| {
                let id_like = !order_id.is_empty()
                    && order_id.len() <= 64
                    && order_id
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-');
                Some(Self::After {
                    ms: number(ms)?,
                    order_id: id_like.then(|| order_id.to_owned())?,
                })
            })
        };
        cursor.ok_or_else(|| {
            InvalidInput::new(
                "cursor",
                "must be the next_cursor of an earlier page, as it was given",
            )
        })
    }
}

/// Which page of a sale's orders to list.
#[derive(Debug, Clone, Default)]
pub struct OrdersQuery {
    /// Only this user's orders.
    pub user: Option<UserId>,
    pub cursor: Option<Cursor>,
    pub limit: PageLimit,
}

/// What a sale starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaleTerms {
    stock: u64,
    per_user_limit: u64,
    segments: u64,
}

impl SaleTerms {
    pub fn new(stock: u64, per_user_limit: u64) -> Result<Self, InvalidInput> {
        Self::segmented(stock, per_user_limit, 1)
    }

    /// Terms of a sale spread over `segments` slots (1 to [`MAX_SEGMENTS`]).
    pub fn segmented(stock: u64, per_user_limit: u64, segments: u64) -> Result<Self, InvalidInput> {
        if !(1..=MAX_SEGMENTS).contains(&segments) {
            return Err(InvalidInput::new(
                "segments",
                format!("must be an integer from 1 to {MAX_SEGMENTS}"),
            ));
        }
        if stock > MAX_STOCK {
            return Err(InvalidInput::new(
                "stock",
                format!("must be an integer from 0 to {MAX_STOCK}"),
            ));
        }
        if !(1..=MAX_STOCK).contains(&per_user_limit) {
            return Err(InvalidInput::new(
                "per_user_limit",
                format!("must be an integer from 1 to {MAX_STOCK}"),
            ));
        }
        Ok(Self {
            stock,
            per_user_limit,
            segments,
        })
    }

    pub fn segments(self) -> u64 {
        self.segments
    }

    pub fn stock(self) -> u64 {
        self.stock
    }

    pub fn per_user_limit(self) -> u64 {
        self.per_user_limit
    }
}

/// One purchase attempt, parsed.
#[derive(Debug, Clone)]
pub struct OrderRequest {
    pub sku: Sku,
    pub user: UserId,
    pub quantity: Quantity,
    pub idempotency_key: Option<IdempotencyKey>,
}

impl OrderRequest {
    /// The per-(sku, user) lock a purchase runs under (in the sale's own
    /// namespace, which no client can name).
    pub fn lock_key(&self) -> LockKey {
        LockKey::parse(&format!("seckill:{}:{}", self.sku, self.user))
            .expect("a sku and a user id make a valid lock key")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_pattern_says_what_the_parser_takes() {
        let pattern = name_pattern();
        assert_eq!(
            pattern,
            format!(r"^(?!\.+$)[A-Za-z0-9._-]{{1,{MAX_NAME_LEN}}}$")
        );
        for byte in 0..=127u8 {
            let text = char::from(byte).to_string();
            let expected = char::from(byte).is_ascii_alphanumeric() || "_-".contains(&*text);
            assert_eq!(Sku::parse(&text).is_ok(), expected, "{text:?}");
        }
    }

    #[test]
    fn names_take_the_lock_alphabet_without_colons() {
        assert!(Sku::parse("phone-2026.red_XL").is_ok());
        assert!(Sku::parse(&"s".repeat(MAX_NAME_LEN)).is_ok());
        for bad in [
            "",
            "a:b",
            "a b",
            "é",
            "a/b",
            ".",
            "..",
            &"s".repeat(MAX_NAME_LEN + 1),
        ] {
            assert_eq!(Sku::parse(bad).unwrap_err().field, "sku", "{bad:?}");
            assert_eq!(UserId::parse(bad).unwrap_err().field, "user_id", "{bad:?}");
        }
    }

    #[test]
    fn the_longest_sku_and_user_still_make_a_lock_key() {
        let order = OrderRequest {
            sku: Sku::parse(&"s".repeat(MAX_NAME_LEN)).unwrap(),
            user: UserId::parse(&"u".repeat(MAX_NAME_LEN)).unwrap(),
            quantity: Quantity::new(1).unwrap(),
            idempotency_key: None,
        };
        assert!(order.lock_key().as_str().starts_with("seckill:s"));
    }

    #[test]
    fn quantities_stock_and_limits_stay_in_range() {
        assert!(Quantity::new(0).is_err());
        assert!(Quantity::new(MAX_QUANTITY + 1).is_err());
        assert_eq!(Quantity::new(2).unwrap().get(), 2);
        assert!(SaleTerms::new(0, 1).is_ok());
        assert_eq!(SaleTerms::new(MAX_STOCK + 1, 1).unwrap_err().field, "stock");
        assert_eq!(SaleTerms::new(10, 0).unwrap_err().field, "per_user_limit");
        assert_eq!(
            SaleTerms::segmented(10, 1, 0).unwrap_err().field,
            "segments"
        );
        assert_eq!(
            SaleTerms::segmented(10, 1, 65).unwrap_err().field,
            "segments"
        );
        assert_eq!(SaleTerms::segmented(10, 1, 64).unwrap().segments(), 64);
    }

    #[test]
    fn cursors_are_stream_ids_or_offsets_and_limits_stay_in_range() {
        let after = Cursor::parse("1795331974189.0b6e2f4c-3d5a-4f1e-9a8b-7c6d5e4f3a2b", false);
        assert_eq!(
            after.clone().map(|cursor| cursor.to_text()).ok().as_deref(),
            Some("1795331974189.0b6e2f4c-3d5a-4f1e-9a8b-7c6d5e4f3a2b")
        );
        assert_eq!(Cursor::parse("200", true), Ok(Cursor::Skip(200)));
        for bad in [
            "",
            "1795331974189",
            "a.0",
            "1.",
            ".x",
            "1.a b",
            "1795331974189-0",
        ] {
            assert_eq!(
                Cursor::parse(bad, false).unwrap_err().field,
                "cursor",
                "{bad:?}"
            );
        }
        assert!(Cursor::parse("1-0", true).is_err());
        assert!(Cursor::parse("99999999999999999999999", true).is_err());
        assert!(PageLimit::new(0).is_err());
        assert!(PageLimit::new(1_001).is_err());
        assert_eq!(PageLimit::new(1_000).unwrap().get(), 1_000);
        assert_eq!(PageLimit::default().get(), DEFAULT_PAGE);
    }
}
