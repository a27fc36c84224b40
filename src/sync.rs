//! Locking that survives a panic in another holder of the lock.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, also after another holder panicked with it locked: the pool
/// goes on with the data as that holder left it rather than failing every
/// later caller.
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
