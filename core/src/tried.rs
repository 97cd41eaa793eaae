//! What one request has tried so far: the same-request skip sets and the retry budget.
//!
//! BEHAVIOUR.md §10.1: a candidate (target + connection) is tried at most once per request; a
//! connection-level failure (quota, auth, a 429 cooldown — anything that changes the
//! connection) makes the rest of the request skip that connection for every target, while a
//! provider-level failure (5xx, transport, too slow) leaves the connection available for the
//! other targets' models. Every upstream attempt counts against the request's budget
//! (`[resilience.routing] max_attempts`, 30 by default).

use crate::classify::{ConnectionEffect, Decision};
use std::collections::BTreeSet;

/// One request's attempts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tried {
    candidates: BTreeSet<usize>,
    exhausted: BTreeSet<String>,
    attempts: u32,
}

impl Tried {
    /// Nothing tried yet.
    pub fn new() -> Self {
        Tried::default()
    }

    /// Records an upstream attempt at candidate `index` on `connection` that failed with
    /// `decision` (`None`: ended without a verdict on the connection, such as a local refusal).
    pub fn failed(&mut self, index: usize, connection: &str, decision: Option<&Decision>) {
        self.candidates.insert(index);
        self.attempts = self.attempts.saturating_add(1);
        // A credential that cannot serve this client cannot serve its other targets either.
        if decision.is_some_and(|d| d.connection != ConnectionEffect::None || d.unsuited) {
            self.exhausted.insert(connection.to_owned());
        }
    }

    /// Skips `connection` for the rest of the request (it refused this kind of client lately).
    pub fn exhaust(&mut self, connection: &str) {
        self.exhausted.insert(connection.to_owned());
    }

    /// Whether candidate `index` was tried.
    pub fn was_tried(&self, index: usize) -> bool {
        self.candidates.contains(&index)
    }

    /// Whether `connection` is exhausted for the rest of the request.
    pub fn is_exhausted(&self, connection: &str) -> bool {
        self.exhausted.contains(connection)
    }

    /// Upstream attempts so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Forgets which candidates were tried and which connections were exhausted (after a
    /// cooldown-aware wait the whole set is dispatched again); the attempt count stays.
    pub fn new_round(&mut self) {
        self.candidates.clear();
        self.exhausted.clear();
    }
}
