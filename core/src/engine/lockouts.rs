//! Model lockouts (M6) as the engine records them: a failure that locks, and healthy
//! responses that end a lock early.

use super::{Candidate, Engine, Event, change};
use crate::classify::Decision;
use crate::lockout::{LockRequest, rule_lock_scope};
use std::sync::Arc;
use std::time::Instant;

impl Engine {
    /// `place` is `c`'s connection's place (from `Slots::place`).
    pub(super) fn maybe_lock(&mut self, now: Instant, c: &Candidate<'_>, place: usize, d: &Decision) {
        let lc = &self.derived.lockout;
        let rule_scope = rule_lock_scope(d.lock.scope);
        // A model-scoped rule always locks (it replaces a connection cooldown); otherwise the
        // settings gate it by status.
        let gated = lc.enabled && lc.error_codes.contains(&d.status);
        if !(gated || rule_scope.is_some()) {
            return;
        }
        // An upstream hint sets the lockout's length only when it is longer than the base
        // cooldown (a shorter one would shorten the lock); a rule's own cooldown always applies.
        let exact = d.lock.cooldown.filter(|x| *x > lc.base_cooldown || rule_scope.is_some());
        let req = LockRequest {
            provider: c.provider,
            connection: c.connection,
            model: c.model,
            family: c.family,
            reason: d.reason,
            status: d.status,
            scope: rule_scope,
            exact_cooldown: exact,
            exact_is_upstream_reset: d.lock.upstream_reset && exact.is_some(),
        };
        let cooldown = self.lockouts.record_failure(now, lc, &req);
        let (provider, connection, model) = self.conns.names_at(place, c, |s| super::intern_in(&mut self.ids, s));
        if self.outbox.is_some() {
            let (provider, connection, model) = (Arc::clone(&provider), Arc::clone(&connection), Arc::clone(&model));
            let until = now + cooldown;
            self.collect(change::Pending::Lockout { provider, connection, model, reason: d.reason, until });
        }
        self.push(Event::Lockout { provider, connection, model, cooldown });
    }

    /// A healthy response halves `c`'s model's lockout counts; each lock that reaches 0 ends
    /// before its deadline and is announced.
    pub(super) fn decay_lockouts(&mut self, now: Instant, c: &Candidate<'_>) {
        for model in self.lockouts.decay(now, c.provider, c.connection, c.model, c.family) {
            let (provider, connection, model) = (self.intern(c.provider), self.conns.id(c), self.intern(&model));
            self.push(Event::LockoutDecayed { provider, connection, model });
        }
    }
}
