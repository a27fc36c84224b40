//! Installing a tracing subscriber as one thread's default so that it sees
//! every event and span of that thread, whatever the other test threads of
//! this binary do at the same time.
//!
//! tracing caches, per callsite and for the whole process, whether any
//! subscriber wants it. While only one dispatcher is registered, a callsite
//! that another thread (one with no subscriber of its own) reaches first is
//! cached as wanted by nobody, and a subscriber set as a thread default
//! never hears from it. Keeping a second dispatcher registered for the
//! whole process makes tracing ask every live dispatcher instead, so a
//! capturing subscriber is always asked.

use std::sync::OnceLock;

use tracing::Dispatch;
use tracing::subscriber::{DefaultGuard, NoSubscriber};

/// Sets `subscriber` as this thread's default until the guard is dropped.
pub fn set_default<S>(subscriber: S) -> DefaultGuard
where
    S: tracing::Subscriber + Send + Sync + 'static,
{
    static SECOND: OnceLock<Dispatch> = OnceLock::new();
    SECOND.get_or_init(|| Dispatch::new(NoSubscriber::default()));
    let guard = tracing::subscriber::set_default(subscriber);
    // A callsite whose first registration raced the line above is asked
    // again, now of every live dispatcher.
    tracing::callsite::rebuild_interest_cache();
    guard
}
