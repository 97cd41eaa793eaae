//! What operators do to the engine (M17): reset every breaker, clear model lockouts.

use super::change::Pending;
use super::{Engine, Event};
use std::time::Instant;

impl Engine {
    /// Operator reset: every breaker closed, every lockout cleared. Returns the breaker count.
    pub fn reset_all(&mut self, now: Instant) -> usize {
        self.clear_lockouts(None);
        self.breakers.reset_all(now)
    }

    /// M17: clears model lockouts: `model` on `connection` of `provider`, `model` on every
    /// connection of `provider` (no connection), or every lockout (nothing named). Returns how
    /// many locks went; a clear that removed any is announced.
    pub fn clear_lockouts(&mut self, target: Option<(&str, Option<&str>, &str)>) -> usize {
        if self.outbox.is_some() {
            let (provider, connection, model) = match target {
                Some((p, c, m)) => (Some(self.intern(p)), c.map(|c| self.intern(c)), Some(self.intern(m))),
                None => (None, None, None),
            };
            self.collect(Pending::Cleared { provider, connection, model });
        }
        self.clear_lockouts_quietly(target)
    }

    /// [`Engine::clear_lockouts`] without sharing the clear (it came from another replica).
    pub(super) fn clear_lockouts_quietly(&mut self, target: Option<(&str, Option<&str>, &str)>) -> usize {
        let removed = match target {
            Some((provider, Some(connection), model)) => self.lockouts.clear(provider, connection, model),
            Some((provider, None, model)) => self.lockouts.clear_model(provider, model),
            None => self.lockouts.clear_all(),
        };
        if removed > 0 {
            let provider = target.map(|(p, _, _)| self.intern(p));
            let connection = target.and_then(|(_, c, _)| c).map(|c| self.intern(c));
            let model = target.map(|(_, _, m)| self.intern(m));
            self.push(Event::LockoutsCleared { provider, connection, model, removed });
        }
        removed
    }

    /// Forgets every lock of one connection (its key or provider changed); announced as a clear.
    pub fn clear_connection_lockouts(&mut self, connection: &str) -> usize {
        let removed = self.lockouts.clear_connection(connection);
        if removed > 0 {
            let connection = Some(self.intern(connection));
            self.push(Event::LockoutsCleared { provider: None, connection, model: None, removed });
        }
        removed
    }
}
