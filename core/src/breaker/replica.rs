//! A breaker's state as it travels: a snapshot aged by the time it spent away (a restart, or
//! the trip to another replica), and the moves another replica's breaker asks of this one.

use super::{Breaker, BreakerSnapshot, BreakerState, TransitionReason};
use std::time::Instant;

impl BreakerSnapshot {
    /// The snapshot as seen `ms` later: less open time left, and an open breaker whose time ran
    /// out meanwhile reads as half-open.
    pub fn aged(mut self, ms: u64) -> BreakerSnapshot {
        self.open_remaining_ms = self.open_remaining_ms.saturating_sub(ms);
        if self.state == BreakerState::Open && self.open_remaining_ms == 0 {
            self.state = BreakerState::HalfOpen;
        }
        self
    }
}

impl Breaker {
    /// A provider-level failure another replica counted (shared state): counted here as an
    /// ordinary failure of `connection`, deduplicated per connection as local ones are.
    pub fn record_replica_failure(&mut self, now: Instant, connection: &str) {
        self.refresh(now);
        if matches!(self.state, BreakerState::Closed | BreakerState::Degraded) {
            self.on_failure_flowing(now, Some(connection), true);
        }
    }

    /// Another replica's breaker opened until `until` after `cycles` failed-probe cycles: this
    /// one is open until then too. The later deadline wins; a deadline already past is ignored.
    pub fn open_from_replica(&mut self, now: Instant, until: Instant, cycles: u32) {
        self.refresh(now);
        if until <= now {
            return;
        }
        self.open_cycle_count = self.open_cycle_count.max(cycles);
        match (self.state, self.open_until) {
            (BreakerState::Open, Some(mine)) if mine >= until => {}
            (BreakerState::Open, _) => self.open_until = Some(until),
            _ => {
                self.open_until = Some(until);
                self.probes_in_flight = 0;
                self.generation += 1;
                self.transition(BreakerState::Open, TransitionReason::Replica);
            }
        }
    }

    /// Another replica's probe succeeded (or an operator reset its breaker): closed here too,
    /// every counter zeroed.
    pub fn close_from_replica(&mut self, now: Instant) {
        self.refresh(now);
        self.failure_count = 0;
        self.open_cycle_count = 0;
        self.last_failure_at = None;
        self.dedupe.clear();
        if self.state != BreakerState::Closed {
            self.probes_in_flight = 0;
            self.generation += 1;
            self.transition(BreakerState::Closed, TransitionReason::Replica);
        }
    }
}
