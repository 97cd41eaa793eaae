//! Resilience state shared between replicas (several gateways behind one load balancer): the
//! changes this replica's own outcomes make, in a form another replica applies through the same
//! state machines, and how it merges them. A replica keeps deciding from its own state; these
//! changes only travel beside it (the proxy carries them through its state backend).
//!
//! Merging: a provider-level failure counts towards the breaker's threshold on every replica,
//! deduplicated per connection as a local one is; an open breaker's deadline, a connection's
//! cooldown and a model lockout take the later deadline; a terminal state is never overwritten;
//! a probe that succeeds (or an operator's reset) closes the breaker everywhere; the latest
//! session pin wins, and a dropped pin is dropped everywhere. A change this replica applies is
//! never collected again, so changes do not echo between replicas. The emergency switch travels
//! as a change too, but it is the shell's flag: the engine passes it by.

use super::change::{Pending, SharedChange};
use super::{Engine, Event};
use crate::breaker::registry::BreakerTransition;
use crate::breaker::{BreakerState, TransitionReason};
use crate::connection::Applied;
use crate::session::PinEvent;
use crate::types::{ProviderClass, Reason, after};
use std::time::{Duration, Instant};

/// Cap on collected changes not yet taken; the oldest go first.
const OUTBOX_CAP: usize = 4096;

impl Engine {
    /// Starts (or stops) collecting the changes this replica's own outcomes make.
    pub fn set_sharing(&mut self, on: bool) {
        self.outbox = on.then(Vec::new);
    }

    /// Whether changes are collected.
    pub fn is_sharing(&self) -> bool {
        self.outbox.is_some()
    }

    pub(super) fn collect(&mut self, p: Pending) {
        if let Some(out) = &mut self.outbox {
            if out.len() >= OUTBOX_CAP {
                out.remove(0);
            }
            out.push(p);
        }
    }

    /// Collects a breaker transition this replica made (never one another replica's caused).
    pub(super) fn collect_transition(&mut self, t: &BreakerTransition) {
        if self.outbox.is_none() {
            return;
        }
        match (t.to, t.reason, t.open_until) {
            (_, TransitionReason::Replica, _) => {}
            (BreakerState::Open, _, Some(until)) => {
                self.collect(Pending::Opened { provider: t.provider.clone(), until });
            }
            (BreakerState::Closed, TransitionReason::ProbeSucceeded | TransitionReason::ManualReset, _) => {
                self.collect(Pending::Closed { provider: t.provider.clone() });
            }
            _ => {}
        }
    }

    /// Whether changes wait to be taken ([`Engine::take_shared`]).
    pub fn has_shared(&self) -> bool {
        self.outbox.as_ref().is_some_and(|out| !out.is_empty())
    }

    /// The changes collected since the last call, with their times measured from `now`. Drain
    /// the events first ([`Engine::poll_event`]): breaker transitions are collected as they
    /// leave the engine.
    pub fn take_shared(&mut self, now: Instant) -> Vec<SharedChange> {
        let Some(out) = &mut self.outbox else { return Vec::new() };
        let pending = std::mem::take(out);
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        pending
            .into_iter()
            .map(|p| match p {
                Pending::Failure { provider, connection } => {
                    SharedChange::ProviderFailure { provider: provider.to_string(), connection: connection.to_string() }
                }
                Pending::Opened { provider, until } => {
                    let open_cycle_count = self.breakers.get(&provider).map_or(0, |b| b.open_cycle_count());
                    SharedChange::BreakerOpened {
                        provider,
                        open_remaining_ms: ms(until.saturating_duration_since(now)),
                        open_cycle_count,
                    }
                }
                Pending::Closed { provider } => SharedChange::BreakerClosed { provider },
                Pending::Connection { connection, reason } => SharedChange::Connection {
                    snapshot: self.connection(&connection).snapshot(now),
                    connection: connection.to_string(),
                    reason,
                },
                Pending::Lockout { provider, connection, model, reason, until } => SharedChange::Lockout {
                    provider: provider.to_string(),
                    connection: connection.to_string(),
                    model: model.to_string(),
                    reason,
                    remaining_ms: ms(until.saturating_duration_since(now)),
                },
                Pending::Cleared { provider, connection, model } => SharedChange::LockoutsCleared {
                    provider: provider.map(|p| p.to_string()),
                    connection: connection.map(|c| c.to_string()),
                    model: model.map(|m| m.to_string()),
                },
                Pending::Pin(PinEvent::Set { session, provider, connection, expires_at }) => SharedChange::Pin {
                    session,
                    provider,
                    connection,
                    remaining_ms: ms(expires_at.saturating_duration_since(now)),
                },
                Pending::Pin(PinEvent::Dropped { session, provider }) => SharedChange::PinDropped { session, provider },
            })
            .collect()
    }

    /// Everything this replica holds that another would take, as changes at `now`: open
    /// breakers, connections cooling or terminal, active model lockouts, fresh pins. Sent in full when a
    /// replica (re)joins the shared state, so that what it learned alone reaches the others.
    pub fn shared_state(&self, now: Instant) -> Vec<SharedChange> {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let mut out = Vec::new();
        for (provider, b) in self.breakers.iter() {
            if b.state(now) == BreakerState::Open {
                out.push(SharedChange::BreakerOpened {
                    provider: provider.to_owned(),
                    open_remaining_ms: ms(b.retry_after(now)),
                    open_cycle_count: b.open_cycle_count(),
                });
            }
        }
        for (id, c) in self.connections() {
            let snapshot = c.snapshot(now);
            if snapshot.terminal.is_some() || snapshot.cooldown_remaining_ms > 0 {
                let reason = snapshot.last_error_type.unwrap_or(Reason::Unknown);
                out.push(SharedChange::Connection { connection: id.to_owned(), reason, snapshot });
            }
        }
        for l in self.lockouts.list(now) {
            out.push(SharedChange::Lockout {
                remaining_ms: ms(l.until.saturating_duration_since(now)),
                provider: l.provider,
                connection: l.connection,
                model: l.model,
                reason: l.reason,
            });
        }
        for (session, provider, connection, left) in self.affinity.pins(now) {
            out.push(SharedChange::Pin { session, provider, connection, remaining_ms: ms(left) });
        }
        out
    }

    /// Applies another replica's change at `now` (its times already aged for the transit).
    /// `class_of` names a provider's class in this replica's config; a change for a provider
    /// this replica does not configure is ignored. What it changes leaves as the usual events
    /// (logged and persisted like local ones) but is not collected for sharing again.
    pub fn apply_shared(
        &mut self,
        now: Instant,
        change: &SharedChange,
        class_of: &dyn Fn(&str) -> Option<ProviderClass>,
    ) {
        // Pin changes this apply causes (a peer's cooldown evicts pins) are logged and
        // persisted, but they are the peer's doing: they are not collected for sharing.
        let mark = self.affinity.pending_events();
        self.apply_shared_inner(now, change, class_of);
        for p in self.affinity.take_events_after(mark) {
            self.push(Event::Pin(p));
        }
    }

    fn apply_shared_inner(
        &mut self,
        now: Instant,
        change: &SharedChange,
        class_of: &dyn Fn(&str) -> Option<ProviderClass>,
    ) {
        match change {
            SharedChange::ProviderFailure { provider, connection } => {
                let Some(class) = class_of(provider) else { return };
                let cfg = self.derived.breaker(class);
                self.breakers.get_or_insert(provider, cfg, now).record_replica_failure(now, connection);
            }
            SharedChange::BreakerOpened { provider, open_remaining_ms, open_cycle_count } => {
                let Some(class) = class_of(provider) else { return };
                let cfg = self.derived.breaker(class);
                let until = after(now, *open_remaining_ms);
                self.breakers.get_or_insert(provider, cfg, now).open_from_replica(now, until, *open_cycle_count);
            }
            SharedChange::BreakerClosed { provider } => {
                let Some(class) = class_of(provider) else { return };
                let cfg = self.derived.breaker(class);
                self.breakers.get_or_insert(provider, cfg, now).close_from_replica(now);
            }
            SharedChange::Connection { connection, reason, snapshot } => {
                let applied = self.conns.get_mut(connection).merge_replica(snapshot, now);
                if applied != Applied::Unchanged {
                    self.affinity.evict_connection(connection);
                }
                let connection = self.conns.slot(connection).1;
                match applied {
                    Applied::Cooldown { until, level } => {
                        self.push(Event::ConnectionCooldown { connection, until, level, reason: *reason });
                    }
                    Applied::Terminal(state) => self.push(Event::ConnectionTerminal { connection, state }),
                    Applied::Unchanged => {}
                }
            }
            SharedChange::Lockout { provider, connection, model, reason, remaining_ms } => {
                let until = after(now, *remaining_ms);
                if let Some(cooldown) = self.lockouts.merge_replica(now, (provider, connection, model), *reason, until)
                {
                    let (provider, connection, model) =
                        (self.intern(provider), self.intern(connection), self.intern(model));
                    self.push(Event::Lockout { provider, connection, model, cooldown });
                }
            }
            SharedChange::LockoutsCleared { provider, connection, model } => match (provider, connection, model) {
                (Some(p), c, Some(m)) => {
                    self.clear_lockouts_quietly(Some((p.as_str(), c.as_deref(), m.as_str())));
                }
                (None, None, None) => {
                    self.clear_lockouts_quietly(None);
                }
                (None, Some(c), None) => {
                    self.clear_connection_lockouts(c);
                }
                // No clear names a provider without a model, or a model without a provider.
                _ => {}
            },
            SharedChange::Pin { session, provider, connection, remaining_ms } => {
                if class_of(provider).is_none() || *remaining_ms == 0 {
                    return;
                }
                // A pin refused at this replica's cap is neither kept nor persisted.
                let left = Duration::from_millis(*remaining_ms);
                if !self.affinity.restore(now, session, provider, connection, left) {
                    return;
                }
                let (session, provider, connection) = (session.clone(), provider.clone(), connection.clone());
                self.push(Event::Pin(PinEvent::Set {
                    session,
                    provider,
                    connection,
                    expires_at: after(now, *remaining_ms),
                }));
            }
            SharedChange::PinDropped { session, provider } => {
                if self.affinity.unpin(session, provider) {
                    let (session, provider) = (session.clone(), provider.clone());
                    self.push(Event::Pin(PinEvent::Dropped { session, provider }));
                }
            }
            SharedChange::Emergency { .. } => {}
        }
    }
}

#[cfg(test)]
#[path = "shared_tests.rs"]
mod tests;
