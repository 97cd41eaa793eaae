//! Helpers for unit tests: the one place a test takes a starting instant.

use std::time::Instant;

/// A starting instant for a test. Every later instant is derived from it by adding durations,
/// so the tests never depend on the real clock's progress.
#[allow(clippy::disallowed_methods)]
pub fn t0() -> Instant {
    Instant::now()
}
