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

    /// A new id for a session that `owner` opens ('' for none): its last
    /// 32 bits are a digest of the owner and the rest, so that whether an
    /// id belongs to a principal is known without asking Redis (the other
    /// 90 bits are random; a stranger's id passes for another owner one
    /// time in 2^32).
    pub fn generate_for(owner: &str) -> Self {
        let id = Self::generate();
        if owner.is_empty() {
            return id;
        }
        let mut bytes = *id.0.as_bytes();
        let tag = owner_tag(owner, &bytes);
        bytes[12..].copy_from_slice(&tag);
        Self(Uuid::from_bytes(bytes))
    }

    /// Whether `owner` opened this session (see `generate_for`).
    pub fn belongs_to(&self, owner: &str) -> bool {
        let bytes = self.0.as_bytes();
        bytes[12..] == owner_tag(owner, bytes)
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

/// The owner's mark in a session id: a digest of the owner's name and the
/// id's first 12 bytes (which hold the UUID's version and variant).
fn owner_tag(owner: &str, bytes: &[u8; 16]) -> [u8; 4] {
    let digest = Sha256::new()
        .chain_update(owner.as_bytes())
        .chain_update([0])
        .chain_update(&bytes[..12])
        .finalize();
    [digest[0], digest[1], digest[2], digest[3]]
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
        let owned = SessionId::generate_for("billing");
        assert!(owned.belongs_to("billing"));
        assert!(!owned.belongs_to("ops"));
        assert_eq!(SessionId::parse(&owned.expose()), Ok(owned.clone()));
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
