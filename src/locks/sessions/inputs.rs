//! Typed session inputs: a session's secret id and the public handle made from it, and the terms of a new session, each made only by parsing.

use std::fmt;

use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::locks::inputs::{LockValue, OutOfRange};

/// The shortest session lease, in milliseconds.
pub const MIN_SESSION_TTL_MS: u64 = 1_000;
/// A session's lease when the request names none.
pub const DEFAULT_SESSION_TTL_MS: u64 = 10_000;
/// The longest lock-delay a session may ask for.
pub const MAX_LOCK_DELAY_MS: u64 = 60_000;

/// A session's id: a secret like an owner token (128 random bits, UUID
/// text). Whoever has it can hang locks on the session and end it.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionId(Uuid);

/// Text that is no session id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a session id is a UUID such as 7c1f0b2e-6a4d-4e8b-9f3a-2d5c6b7a8e90")]
pub struct InvalidSessionId;

impl SessionId {
    pub fn generate() -> Self {
        Self(Uuid::new_v4())
    }

    /// The hyphenated UUID text only: one spelling per id.
    pub fn parse(text: &str) -> Result<Self, InvalidSessionId> {
        if text.len() != uuid::fmt::Hyphenated::LENGTH {
            return Err(InvalidSessionId);
        }
        Uuid::try_parse(text)
            .map(Self)
            .map_err(|_| InvalidSessionId)
    }

    /// The id's text, for the one answer that hands it out.
    pub fn expose(&self) -> String {
        self.0.hyphenated().to_string()
    }

    /// The public handle of the session: what names its Redis keys and
    /// what a lock's readers see of it, from which the id cannot be had.
    pub fn handle(&self) -> SessionHandle {
        let digest = Sha256::digest(self.expose().as_bytes());
        let hex: String = digest[..16]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        SessionHandle(hex)
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionId(<redacted>)")
    }
}

/// A session's public handle (32 hex digits).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionHandle(String);

impl SessionHandle {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A handle as Redis holds it (a lock's holder record, the index).
    pub(crate) fn from_stored(text: &str) -> Self {
        Self(text.to_owned())
    }
}

impl fmt::Display for SessionHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a new session asks for.
#[derive(Debug, Clone)]
pub struct SessionTerms {
    pub ttl_ms: u64,
    pub lock_delay_ms: u64,
    pub value: Option<LockValue>,
}

impl SessionTerms {
    /// The lease (`MIN_SESSION_TTL_MS ..= max_ttl_ms`) and the lock-delay
    /// (`0 ..= MAX_LOCK_DELAY_MS`), or which is out of range.
    pub fn new(
        ttl_ms: u64,
        lock_delay_ms: u64,
        value: Option<LockValue>,
        max_ttl_ms: u64,
    ) -> Result<Self, (&'static str, OutOfRange)> {
        session_ttl(ttl_ms, max_ttl_ms).map_err(|range| ("ttl_ms", range))?;
        if lock_delay_ms > MAX_LOCK_DELAY_MS {
            let range = OutOfRange {
                min: 0,
                max: MAX_LOCK_DELAY_MS,
            };
            return Err(("lock_delay_ms", range));
        }
        Ok(Self {
            ttl_ms,
            lock_delay_ms,
            value,
        })
    }
}

/// A session lease within its bounds.
pub fn session_ttl(ttl_ms: u64, max_ttl_ms: u64) -> Result<u64, OutOfRange> {
    if (MIN_SESSION_TTL_MS..=max_ttl_ms).contains(&ttl_ms) {
        Ok(ttl_ms)
    } else {
        Err(OutOfRange {
            min: MIN_SESSION_TTL_MS,
            max: max_ttl_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_in_one_spelling_and_their_handles_reveal_nothing_of_them() {
        let id = SessionId::generate();
        let text = id.expose();
        assert_eq!(SessionId::parse(&text), Ok(id.clone()));
        assert!(SessionId::parse(&text.to_uppercase()).is_ok());
        for bad in ["", "nope", &text[1..], &text.replace('-', "")] {
            assert_eq!(SessionId::parse(bad), Err(InvalidSessionId), "{bad}");
        }
        let handle = id.handle();
        assert_eq!(handle.as_str().len(), 32);
        assert!(!text.contains(handle.as_str()) && !handle.as_str().contains(&text[..8]));
        assert_eq!(handle, SessionId::parse(&text).unwrap().handle());
        assert_eq!(format!("{id:?}"), "SessionId(<redacted>)");
    }

    #[test]
    fn terms_stay_in_their_bounds() {
        assert!(SessionTerms::new(1_000, 0, None, 60_000).is_ok());
        assert_eq!(
            SessionTerms::new(999, 0, None, 60_000).unwrap_err().0,
            "ttl_ms"
        );
        assert_eq!(
            SessionTerms::new(60_001, 0, None, 60_000).unwrap_err().0,
            "ttl_ms"
        );
        assert_eq!(
            SessionTerms::new(5_000, 60_001, None, 60_000)
                .unwrap_err()
                .0,
            "lock_delay_ms"
        );
    }
}
