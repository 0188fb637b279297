//! The lock domain: acquire (or wait in the fair queue for), release, extend, inspect, watch and revoke named locks held in Redis.
//!
//! A plain lock is a Redis hash whose TTL is the lease, so a crashed
//! holder's lock frees itself; a shared or counting lock keeps each
//! holder's lease in a sorted set, and every script drops the holders whose
//! lease ended. Waiters queue in Redis in arrival order across every
//! instance ([`waiting`]); a change writes its event in the same script
//! while someone watches ([`watch`]). Every read-check-write is one Lua
//! script (see `lua/`), and times come from the Redis clock.
//!
//! The parts, from the ground up: [`inputs`] (typed inputs made by
//! parsing), `waiting` and `watch` (this instance's waiters and watchers),
//! `shared` ([`Locks`], what every operation uses), `error`; then one file
//! per kind of operation: `acquire/` (new grants, re-entry, the guard of a grant
//! to the client), `batch/` (several locks at once), `hold` (release,
//! extend, value, revoke), `modes` (upgrade, downgrade), `reading`
//! (inspect, listing), `sessions/` and `streamed/` (streamed locks and batches).

mod acquire;
mod batch;
mod error;
mod hold;
mod inputs;
mod modes;
mod reading;
pub mod sessions;
mod shared;
mod streamed;
pub mod waiting;
pub mod watch;

pub use acquire::{AcquireRequest, GrantGuard, Lease};
pub use batch::{BatchHold, BatchLease, BatchLock, BatchRequest, MAX_BATCH};
pub use error::LockError;
pub use hold::Released;
pub use inputs::{
    DEFAULT_MAX_TTL_MS, DEFAULT_MAX_WAIT_MS, EXAMPLE_TOKEN, IdempotencyKey, InvalidIdempotencyKey,
    InvalidKey, InvalidKind, InvalidToken, LockKey, LockLimits, LockValue, MAX_IDEMPOTENCY_KEY_LEN,
    MAX_KEY_LEN, MAX_LIMIT, MAX_VALUE_BYTES, MIN_TTL_MS, OutOfRange, Token, Ttl, ValueTooLong,
    WaitTime, idempotency_key_pattern, key_pattern, lock_kind,
};
pub use modes::{HoldMode, ModeChanged};
pub use reading::{ListCursor, LockPage, MAX_LIST};
pub use sessions::{
    SessionError, SessionHandle, SessionId, SessionLease, SessionTerms, SessionView, Sessions,
};
pub use shared::Locks;
pub use streamed::{
    LostReason, StreamEnd, StreamEvent, StreamedBatch, StreamedLock, StreamedLocks,
};
pub use waiting::{WaitRefused, Waiting};
pub use watch::{WatchEvent, Watcher, Watches};

// Read from Redis as they are and handed on unchanged: one type each.
pub use crate::redis::locks::view::{LockSight, LockView};
pub use crate::redis::locks::{LeaseView, LockKind, LockState, WaiterView};
