//! Helpers for unit tests: the one place a test takes a starting instant.

use std::time::Instant;

/// A starting instant for a test. Every later instant is derived from it by adding durations,
/// so the tests never depend on the real clock's progress.
#[allow(clippy::disallowed_methods)]
pub fn t0() -> Instant {
    Instant::now()
}

/// Candidates on provider `openai` (an API-key provider), model `gpt-4o`, one per id, each its
/// own target in order.
pub fn cands<'a>(ids: &'a [&'a str]) -> Vec<crate::engine::Candidate<'a>> {
    use crate::engine::{Candidate, Traits};
    ids.iter()
        .enumerate()
        .map(|(i, id)| Candidate {
            traits: Traits { target: i, ..Traits::default() },
            ..Candidate::new("openai", crate::types::ProviderClass::ApiKey, id, "gpt-4o")
        })
        .collect()
}
