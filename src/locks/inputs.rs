//! Typed lock inputs (`LockKey`, `Token`, lease and wait lengths) that can only be made by parsing.

use std::fmt;
use std::time::Duration;

use uuid::Uuid;

use crate::duration::millis;
use crate::redis::locks::LockKind;

/// The longest lock key, in characters.
pub const MAX_KEY_LEN: usize = 200;

/// What a lock key may hold besides ASCII letters and digits.
const KEY_PUNCTUATION: &str = "._:-";

/// The largest lease a deployment allows unless configured otherwise.
pub const DEFAULT_MAX_TTL_MS: u64 = 3_600_000;

/// The longest server-side wait a deployment allows unless configured otherwise.
pub const DEFAULT_MAX_WAIT_MS: u64 = 60_000;

/// The shortest lease a client may ask for, in milliseconds.
pub const MIN_TTL_MS: u64 = 10;

/// A lock's name: 1 to 200 characters of `A-Z a-z 0-9 . _ : -`.
///
/// The alphabet keeps keys safe inside Redis key names and hash tags (no `{`,
/// `}` or spaces) and inside URL paths (no `/`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LockKey(String);

/// Why a string is not a [`LockKey`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidKey {
    #[error("a lock key cannot be empty")]
    Empty,
    #[error("a lock key is at most {MAX_KEY_LEN} characters; this one has {0}")]
    TooLong(usize),
    #[error("a lock key may only contain A-Z a-z 0-9 . _ : - (found {0:?})")]
    BadCharacter(char),
    #[error("a lock key in a path must percent-decode to text")]
    NotText,
    #[error("a lock key cannot be only dots: `.` and `..` name no path")]
    OnlyDots,
}

impl LockKey {
    pub fn parse(text: &str) -> Result<Self, InvalidKey> {
        if text.is_empty() {
            return Err(InvalidKey::Empty);
        }
        if let Some(bad) = text.chars().find(|c| !is_key_char(*c)) {
            return Err(InvalidKey::BadCharacter(bad));
        }
        // Every accepted character is ASCII, so bytes count characters.
        if text.len() > MAX_KEY_LEN {
            return Err(InvalidKey::TooLong(text.len()));
        }
        // `/locks/..` is no path to this key: clients and proxies remove dot
        // segments, so such a lock could be taken but never addressed.
        if text.bytes().all(|byte| byte == b'.') {
            return Err(InvalidKey::OnlyDots);
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Checks the start of a key (a listing's prefix): the key alphabet,
    /// at most as long as a key; empty, or only dots, are allowed.
    pub fn check_prefix(text: &str) -> Result<(), InvalidKey> {
        if let Some(bad) = text.chars().find(|c| !is_key_char(*c)) {
            return Err(InvalidKey::BadCharacter(bad));
        }
        if text.len() > MAX_KEY_LEN {
            return Err(InvalidKey::TooLong(text.len()));
        }
        Ok(())
    }
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || KEY_PUNCTUATION.contains(c)
}

/// The rule [`LockKey::parse`] applies, as a regular expression (ECMA-262,
/// as OpenAPI documents write them).
pub fn key_pattern() -> String {
    format!(r"^(?!\.+$)[A-Za-z0-9{KEY_PUNCTUATION}]{{1,{MAX_KEY_LEN}}}$")
}

impl fmt::Display for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An owner's secret: 128 random bits, written as a UUID.
///
/// `Debug` prints no digits, so a token never reaches a log by accident; the
/// text is only available through [`Token::expose`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Token(Uuid);

/// A string that is not a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a lock token is a UUID such as {EXAMPLE_TOKEN}")]
pub struct InvalidToken;

/// What a token looks like, for the answers that refuse one.
pub const EXAMPLE_TOKEN: &str = "0b6e2f4c-3d5a-4f1e-9a8b-7c6d5e4f3a2b";

impl Token {
    /// The text [`Token::parse`] takes (a hyphenated UUID), as a regular
    /// expression.
    pub const PATTERN: &str =
        "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$";

    /// A fresh random token for a new owner.
    pub fn generate() -> Self {
        Self(Uuid::new_v4())
    }

    pub fn parse(text: &str) -> Result<Self, InvalidToken> {
        // Only the hyphenated form is accepted: it is the form we hand out, and
        // one spelling per token keeps the comparison in Redis a plain string
        // equality.
        if text.len() != uuid::fmt::Hyphenated::LENGTH {
            return Err(InvalidToken);
        }
        let uuid = Uuid::try_parse(text).map_err(|_| InvalidToken)?;
        Ok(Self(uuid))
    }

    /// The token's text, for the one response that hands it out and for Redis.
    pub fn expose(&self) -> String {
        self.0.hyphenated().to_string()
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// The longest public value a holder may give, in bytes.
pub const MAX_VALUE_BYTES: usize = 1024;

/// A holder's public value: what every reader sees (an address, a host
/// name), at most [`MAX_VALUE_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockValue(String);

/// A value too long.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("is at most {MAX_VALUE_BYTES} bytes; this one has {0}")]
pub struct ValueTooLong(usize);

impl LockValue {
    pub fn parse(text: &str) -> Result<Self, ValueTooLong> {
        if text.len() > MAX_VALUE_BYTES {
            return Err(ValueTooLong(text.len()));
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The longest Idempotency-Key.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 200;

/// A client's name for one attempt (a lock's acquisition, a purchase), so
/// that a retry does nothing twice: 1 to [`MAX_IDEMPOTENCY_KEY_LEN`]
/// visible ASCII characters (a UUID is typical).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

/// A string that is no Idempotency-Key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} visible ASCII characters")]
pub struct InvalidIdempotencyKey;

impl IdempotencyKey {
    pub fn parse(text: &str) -> Result<Self, InvalidIdempotencyKey> {
        if text.is_empty()
            || text.len() > MAX_IDEMPOTENCY_KEY_LEN
            || !text.bytes().all(|byte| byte.is_ascii_graphic())
        {
            return Err(InvalidIdempotencyKey);
        }
        Ok(Self(text.to_owned()))
    }

    /// The key as `scope`'s (a name no other caller has): the same client
    /// key from two principals is two keys, as Stripe's are an account's,
    /// so one principal can never be answered another's grant. Joined by a
    /// unit separator, which no key and no scope contains.
    pub fn scoped(self, scope: &str) -> Self {
        if scope.is_empty() {
            return self;
        }
        Self(format!("{scope}\u{1f}{}", self.0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The rule an Idempotency-Key follows, as a regular expression.
pub fn idempotency_key_pattern() -> String {
    format!("^[!-~]{{1,{MAX_IDEMPOTENCY_KEY_LEN}}}$")
}

/// The most holders a counting lock may admit at once.
pub const MAX_LIMIT: u64 = 10_000;

/// How a request asks to hold a lock: `mode` (exclusive, the default, or
/// shared) and `limit` (places of an exclusive lock, 1 by default).
pub fn lock_kind(shared: bool, limit: Option<u64>) -> Result<LockKind, InvalidKind> {
    match (shared, limit) {
        (true, Some(_)) => Err(InvalidKind::LimitWithShared),
        (true, None) => Ok(LockKind::Shared),
        (false, None | Some(1)) => Ok(LockKind::Exclusive),
        (false, Some(limit)) => {
            let limit = within(limit, 1, MAX_LIMIT).map_err(InvalidKind::Limit)?;
            // Within MAX_LIMIT, so it fits.
            Ok(LockKind::Counted(u32::try_from(limit).unwrap_or(u32::MAX)))
        }
    }
}

/// Why a mode and limit name no kind of lock.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidKind {
    #[error("is for exclusive locks only: shared locks have no limit")]
    LimitWithShared,
    #[error(transparent)]
    Limit(OutOfRange),
}

/// The bounds a deployment puts on leases and waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LockLimits {
    pub max_ttl_ms: u64,
    pub max_wait_ms: u64,
}

impl Default for LockLimits {
    /// The settings' defaults.
    fn default() -> Self {
        Self {
            max_ttl_ms: DEFAULT_MAX_TTL_MS,
            max_wait_ms: DEFAULT_MAX_WAIT_MS,
        }
    }
}

/// A lease length within [`MIN_TTL_MS`] and the deployment's maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl(u64);

/// A server-side wait within zero and the deployment's maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitTime(u64);

/// A number of milliseconds outside what a field allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be an integer from {min} to {max}")]
pub struct OutOfRange {
    pub min: u64,
    pub max: u64,
}

impl Ttl {
    /// The lease a request gets when it names none.
    pub const DEFAULT_MS: u64 = 30_000;

    pub fn new(ms: u64, limits: LockLimits) -> Result<Self, OutOfRange> {
        within(ms, MIN_TTL_MS, limits.max_ttl_ms).map(Self)
    }

    /// A lease the gateway takes for itself, outside the clients' limits.
    pub(crate) fn fixed(length: Duration) -> Self {
        Self(millis(length).max(MIN_TTL_MS))
    }

    pub fn as_millis(self) -> u64 {
        self.0
    }

    pub fn as_duration(self) -> Duration {
        Duration::from_millis(self.0)
    }
}

impl WaitTime {
    pub const NONE: Self = Self(0);

    /// A wait the gateway sets for itself, outside the clients' limits.
    pub(crate) fn fixed(length: Duration) -> Self {
        Self(millis(length))
    }

    pub fn new(ms: u64, limits: LockLimits) -> Result<Self, OutOfRange> {
        within(ms, 0, limits.max_wait_ms).map(Self)
    }

    pub fn as_duration(self) -> Duration {
        Duration::from_millis(self.0)
    }

    pub fn as_millis(self) -> u64 {
        self.0
    }

    pub fn is_zero(self) -> bool {
        self.0 == 0
    }
}

fn within(ms: u64, min: u64, max: u64) -> Result<u64, OutOfRange> {
    if (min..=max).contains(&ms) {
        Ok(ms)
    } else {
        Err(OutOfRange { min, max })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: LockLimits = LockLimits {
        max_ttl_ms: 3_600_000,
        max_wait_ms: 60_000,
    };

    #[test]
    fn the_key_pattern_says_what_the_parser_takes() {
        let pattern = key_pattern();
        let class = &pattern[pattern.find('[').unwrap() + 1..pattern.find(']').unwrap()];
        for byte in 0..=127u8 {
            let c = char::from(byte);
            let in_class = c.is_ascii_alphanumeric() && class.starts_with("A-Za-z0-9")
                || class["A-Za-z0-9".len()..].contains(c);
            assert_eq!(in_class, is_key_char(c), "{c:?}");
        }
        assert!(
            pattern.ends_with(&format!("{{1,{MAX_KEY_LEN}}}$")),
            "{pattern}"
        );
        // The look-ahead refuses what `OnlyDots` refuses.
        assert!(pattern.starts_with(r"^(?!\.+$)"), "{pattern}");
    }

    #[test]
    fn keys_of_the_allowed_alphabet_and_length_parse() {
        for text in ["a", "orders:42", "A.b_c:d-0", &"k".repeat(MAX_KEY_LEN)] {
            assert_eq!(LockKey::parse(text).unwrap().as_str(), text);
        }
    }

    #[test]
    fn keys_outside_the_alphabet_or_length_are_refused() {
        assert_eq!(LockKey::parse(""), Err(InvalidKey::Empty));
        assert_eq!(
            LockKey::parse(&"k".repeat(MAX_KEY_LEN + 1)),
            Err(InvalidKey::TooLong(MAX_KEY_LEN + 1))
        );
        for (text, bad) in [("a/b", '/'), ("a b", ' '), ("café", 'é'), ("{x}", '{')] {
            assert_eq!(LockKey::parse(text), Err(InvalidKey::BadCharacter(bad)));
        }
        for dots in [".", "..", "..."] {
            assert_eq!(LockKey::parse(dots), Err(InvalidKey::OnlyDots));
        }
        assert!(LockKey::parse("..a").is_ok());
    }

    #[test]
    fn tokens_round_trip_and_only_hyphenated_uuids_parse() {
        let token = Token::generate();
        assert_eq!(Token::parse(&token.expose()), Ok(token));
        for text in [
            "",
            "not-a-token",
            "0b6e2f4c3d5a4f1e9a8b7c6d5e4f3a2b",
            "{0b6e2f4c-3d5a-4f1e-9a8b-7c6d5e4f3a2b}",
            "0b6e2f4c-3d5a-4f1e-9a8b-7c6d5e4f3a2g",
        ] {
            assert_eq!(Token::parse(text), Err(InvalidToken), "{text:?}");
        }
    }

    #[test]
    fn idempotency_keys_are_visible_ascii_of_a_bounded_length() {
        assert!(IdempotencyKey::parse("0b6e2f4c-3d5a-4f1e-9a8b-7c6d5e4f3a2b").is_ok());
        assert!(IdempotencyKey::parse(&"k".repeat(MAX_IDEMPOTENCY_KEY_LEN)).is_ok());
        for bad in [
            "",
            "has space",
            "tab\t",
            "é",
            &"k".repeat(MAX_IDEMPOTENCY_KEY_LEN + 1),
        ] {
            assert_eq!(
                IdempotencyKey::parse(bad),
                Err(InvalidIdempotencyKey),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn values_are_bounded_in_bytes() {
        assert!(LockValue::parse(&"v".repeat(MAX_VALUE_BYTES)).is_ok());
        assert_eq!(
            LockValue::parse(&"v".repeat(MAX_VALUE_BYTES + 1)),
            Err(ValueTooLong(MAX_VALUE_BYTES + 1))
        );
    }

    #[test]
    fn token_debug_output_hides_the_secret() {
        let token = Token::generate();
        assert!(!format!("{token:?}").contains(&token.expose()[..8]));
    }

    #[test]
    fn mode_and_limit_name_a_kind_of_lock() {
        assert_eq!(lock_kind(false, None), Ok(LockKind::Exclusive));
        assert_eq!(lock_kind(false, Some(1)), Ok(LockKind::Exclusive));
        assert_eq!(lock_kind(false, Some(3)), Ok(LockKind::Counted(3)));
        assert_eq!(
            lock_kind(false, Some(MAX_LIMIT)),
            Ok(LockKind::Counted(10_000))
        );
        assert_eq!(lock_kind(true, None), Ok(LockKind::Shared));
        assert_eq!(lock_kind(true, Some(1)), Err(InvalidKind::LimitWithShared));
        for limit in [0, MAX_LIMIT + 1] {
            assert_eq!(
                lock_kind(false, Some(limit)),
                Err(InvalidKind::Limit(OutOfRange {
                    min: 1,
                    max: MAX_LIMIT
                }))
            );
        }
    }

    #[test]
    fn lease_and_wait_lengths_respect_the_limits() {
        assert!(Ttl::new(MIN_TTL_MS, LIMITS).is_ok());
        assert!(Ttl::new(LIMITS.max_ttl_ms, LIMITS).is_ok());
        assert_eq!(
            Ttl::new(MIN_TTL_MS - 1, LIMITS),
            Err(OutOfRange {
                min: MIN_TTL_MS,
                max: LIMITS.max_ttl_ms
            })
        );
        assert!(Ttl::new(LIMITS.max_ttl_ms + 1, LIMITS).is_err());
        assert!(WaitTime::new(0, LIMITS).unwrap().is_zero());
        assert!(WaitTime::new(LIMITS.max_wait_ms + 1, LIMITS).is_err());
    }
}
