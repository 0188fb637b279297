//! A mutex guard that outlives a panic: every lock in the gateway guards state that each change leaves whole.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, ignoring poisoning. Every mutex in the gateway guards
/// state that each change leaves consistent (one push, pop, insert or
/// assignment at a time), so a panic in another holder leaves nothing half
/// done, and refusing the lock from then on would only turn one failed
/// request into many.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
