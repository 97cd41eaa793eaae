//! A size-capped registry of breakers, one per provider.
//!
//! Eviction only ever removes idle `Closed` breakers with no failures, oldest failure first:
//! an `Open`, `HalfOpen` or `Degraded` breaker is never forgotten, so the cap is soft when
//! every entry carries state.

use super::{Breaker, BreakerConfig, BreakerSnapshot, BreakerState, TransitionReason};
use rustc_hash::FxBuildHasher;
use std::collections::BTreeSet;
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
///
/// Draining events never walks every breaker: a breaker can only change through
/// [`BreakerRegistry::get_or_insert`] or the registry's own resets, so the registry keeps the
/// providers that may hold events (`pending`), plus the slot last handed out (`last`), which
/// joins them when another is handed out or events are drained.
#[derive(Debug, Clone)]
pub struct BreakerRegistry {
    /// Slot of each provider's breaker (looked up on every pick and outcome: hashed, not
    /// searched; the provider order is restored where it is read).
    index: hashbrown::HashMap<String, usize, FxBuildHasher>,
    slots: Vec<(String, Breaker)>,
    cap: usize,
    pending: BTreeSet<String>,
    last: Option<usize>,
}

impl Default for BreakerRegistry {
    fn default() -> Self {
        BreakerRegistry::with_cap(DEFAULT_REGISTRY_CAP)
    }
}

impl BreakerRegistry {
    /// An empty registry holding at most about `cap` breakers.
    pub fn with_cap(cap: usize) -> Self {
        BreakerRegistry {
            index: hashbrown::HashMap::default(),
            slots: Vec::new(),
            cap: cap.max(1),
            pending: BTreeSet::new(),
            last: None,
        }
    }

    /// Number of breakers held (tests: the cap).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The breaker of `provider`, if it exists.
    pub fn get(&self, provider: &str) -> Option<&Breaker> {
        self.position(provider).map(|i| &self.slots[i].1)
    }

    /// The slot of `provider`'s breaker. The one last handed out is compared first: a pick
    /// checks a run of one provider's keys, admits one and records its outcome, so nearly
    /// every lookup asks for it again.
    #[inline]
    fn position(&self, provider: &str) -> Option<usize> {
        if let Some(i) = self.last
            && let Some((p, _)) = self.slots.get(i)
            && p == provider
        {
            return Some(i);
        }
        self.index.get(provider).copied()
    }

    /// The breaker of `provider`, created closed with `config` if needed. An existing breaker
    /// takes the new config (settings may have changed).
    pub fn get_or_insert(&mut self, provider: &str, config: &BreakerConfig, now: Instant) -> &mut Breaker {
        let i = match self.position(provider) {
            Some(i) => i,
            None => {
                if self.slots.len() >= self.cap {
                    self.evict_idle();
                }
                self.insert(provider, Breaker::new(config, now))
            }
        };
        if self.last != Some(i) {
            self.keep_last();
            self.last = Some(i);
        }
        let breaker = &mut self.slots[i].1;
        if breaker.config() != config {
            breaker.set_config(config);
        }
        breaker
    }

    fn insert(&mut self, provider: &str, breaker: Breaker) -> usize {
        self.slots.push((provider.to_owned(), breaker));
        let i = self.slots.len() - 1;
        self.index.insert(provider.to_owned(), i);
        i
    }

    /// Restores a persisted breaker (replacing any in memory).
    pub fn restore(&mut self, provider: &str, config: &BreakerConfig, snap: &BreakerSnapshot, now: Instant) {
        let breaker = Breaker::restore(config, snap, now);
        match self.index.get(provider) {
            Some(&i) => self.slots[i].1 = breaker,
            None => {
                self.insert(provider, breaker);
            }
        }
    }

    /// Every breaker, by provider id.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Breaker)> {
        let mut all: Vec<(&str, &Breaker)> = self.slots.iter().map(|(k, b)| (k.as_str(), b)).collect();
        all.sort_unstable_by_key(|(k, _)| *k);
        all.into_iter()
    }

    /// Resets every breaker to `Closed`; returns how many there were.
    pub fn reset_all(&mut self, now: Instant) -> usize {
        for (provider, b) in self.slots.iter_mut() {
            b.reset(now);
            if !b.events.is_empty() {
                self.pending.insert(provider.clone());
            }
        }
        self.slots.len()
    }

    /// Resets one breaker, if it exists.
    pub fn reset(&mut self, provider: &str, now: Instant) {
        if let Some(&i) = self.index.get(provider) {
            let b = &mut self.slots[i].1;
            b.reset(now);
            if !b.events.is_empty() {
                self.pending.insert(provider.to_owned());
            }
        }
    }

    /// The breaker last handed out joins `pending` if it holds events.
    #[inline]
    fn keep_last(&mut self) {
        let Some((provider, b)) = self.last.and_then(|i| self.slots.get(i)) else { return };
        if !b.events.is_empty() && !self.pending.contains(provider) {
            self.pending.insert(provider.clone());
        }
    }

    /// Drains the next state change of any breaker, in provider order.
    pub fn poll_event(&mut self) -> Option<BreakerTransition> {
        self.keep_last();
        while let Some(provider) = self.pending.first() {
            let Some(&i) = self.index.get(provider) else {
                self.pending.pop_first();
                continue;
            };
            let breaker = &mut self.slots[i].1;
            let Some(e) = breaker.poll_event() else {
                self.pending.pop_first();
                continue;
            };
            let provider =
                if breaker.events.is_empty() { self.pending.pop_first().unwrap_or_default() } else { provider.clone() };
            return Some(BreakerTransition {
                provider,
                from: e.from,
                to: e.to,
                reason: e.reason,
                open_until: e.open_until,
            });
        }
        None
    }

    /// The earliest self-driven state change across all breakers (tests).
    #[cfg(test)]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.slots.iter().filter_map(|(_, b)| b.poll_timeout()).min()
    }

    fn evict_idle(&mut self) {
        let mut idle: Vec<(Option<Instant>, String)> = self
            .slots
            .iter()
            .filter(|(_, b)| b.state == BreakerState::Closed && b.failure_count == 0 && b.events.is_empty())
            .map(|(k, b)| (b.last_failure_at, k.clone()))
            .collect();
        idle.sort();
        let excess = self.slots.len() + 1 - self.cap.min(self.slots.len() + 1);
        for (_, name) in idle.into_iter().take(excess.max(1)) {
            self.remove(&name);
        }
    }

    /// Removes a breaker; the last slot moves into its place.
    fn remove(&mut self, provider: &str) {
        let Some(i) = self.index.remove(provider) else { return };
        let moved = self.slots.len() - 1;
        self.slots.swap_remove(i);
        if let Some((name, _)) = self.slots.get(i)
            && let Some(slot) = self.index.get_mut(name)
        {
            *slot = i;
        }
        self.last = match self.last {
            Some(l) if l == i => None,
            Some(l) if l == moved => Some(i),
            other => other,
        };
    }
}
