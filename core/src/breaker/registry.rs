//! A size-capped registry of breakers, one per provider.
//!
//! Eviction only ever removes idle `Closed` breakers with no failures, oldest failure first:
//! an `Open`, `HalfOpen` or `Degraded` breaker is never forgotten, so the cap is soft when
//! every entry carries state.

use super::{Breaker, BreakerConfig, BreakerSnapshot, BreakerState, TransitionReason};
use std::collections::BTreeMap;
use std::time::Instant;

/// A breaker state change tagged with its provider, as the shell logs it and the simulation
/// checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerTransition {
    /// The provider whose breaker moved.
    pub provider: String,
    /// State before.
    pub from: BreakerState,
    /// State after.
    pub to: BreakerState,
    /// Why.
    pub reason: TransitionReason,
    /// When an `Open` breaker will admit a probe (only for transitions to `Open`).
    pub open_until: Option<Instant>,
}

/// The default registry cap.
pub const DEFAULT_REGISTRY_CAP: usize = 500;

/// Breakers by provider id, in a stable order.
#[derive(Debug, Clone)]
pub struct BreakerRegistry {
    breakers: BTreeMap<String, Breaker>,
    cap: usize,
}

impl Default for BreakerRegistry {
    fn default() -> Self {
        BreakerRegistry::with_cap(DEFAULT_REGISTRY_CAP)
    }
}

impl BreakerRegistry {
    /// An empty registry holding at most about `cap` breakers.
    pub fn with_cap(cap: usize) -> Self {
        BreakerRegistry { breakers: BTreeMap::new(), cap: cap.max(1) }
    }

    /// Number of breakers held (tests: the cap).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.breakers.len()
    }

    /// The breaker of `provider`, if it exists.
    pub fn get(&self, provider: &str) -> Option<&Breaker> {
        self.breakers.get(provider)
    }

    /// The breaker of `provider`, created closed with `config` if needed. An existing breaker
    /// takes the new config (settings may have changed).
    pub fn get_or_insert(&mut self, provider: &str, config: &BreakerConfig, now: Instant) -> &mut Breaker {
        if !self.breakers.contains_key(provider) {
            if self.breakers.len() >= self.cap {
                self.evict_idle();
            }
            self.breakers.insert(provider.to_owned(), Breaker::new(config, now));
        }
        let breaker = self.breakers.get_mut(provider).unwrap_or_else(|| unreachable!("inserted above"));
        if breaker.config() != config {
            breaker.set_config(config);
        }
        breaker
    }

    /// Restores a persisted breaker (replacing any in memory).
    pub fn restore(&mut self, provider: &str, config: &BreakerConfig, snap: &BreakerSnapshot, now: Instant) {
        self.breakers.insert(provider.to_owned(), Breaker::restore(config, snap, now));
    }

    /// Every breaker, by provider id.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Breaker)> {
        self.breakers.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Resets every breaker to `Closed`; returns how many there were.
    pub fn reset_all(&mut self, now: Instant) -> usize {
        for b in self.breakers.values_mut() {
            b.reset(now);
        }
        self.breakers.len()
    }

    /// Resets one breaker, if it exists.
    pub fn reset(&mut self, provider: &str, now: Instant) {
        if let Some(b) = self.breakers.get_mut(provider) {
            b.reset(now);
        }
    }

    /// Drains the next state change of any breaker, in provider order.
    pub fn poll_event(&mut self) -> Option<BreakerTransition> {
        for (provider, breaker) in self.breakers.iter_mut() {
            if let Some(e) = breaker.poll_event() {
                return Some(BreakerTransition {
                    provider: provider.clone(),
                    from: e.from,
                    to: e.to,
                    reason: e.reason,
                    open_until: e.open_until,
                });
            }
        }
        None
    }

    /// The earliest self-driven state change across all breakers (tests).
    #[cfg(test)]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.breakers.values().filter_map(Breaker::poll_timeout).min()
    }

    fn evict_idle(&mut self) {
        let mut idle: Vec<(Option<Instant>, String)> = self
            .breakers
            .iter()
            .filter(|(_, b)| b.state == BreakerState::Closed && b.failure_count == 0 && b.events.is_empty())
            .map(|(k, b)| (b.last_failure_at, k.clone()))
            .collect();
        idle.sort();
        let excess = self.breakers.len() + 1 - self.cap.min(self.breakers.len() + 1);
        for (_, name) in idle.into_iter().take(excess.max(1)) {
            self.breakers.remove(&name);
        }
    }
}
