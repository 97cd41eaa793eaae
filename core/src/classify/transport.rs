//! Failures without an upstream answer: the provider's transport, or a connection's own way
//! out.

use super::decision::{ConnectionEffect, CooldownProfile, Decision, LockSuggestion};
use crate::types::Reason;

/// A transport failure (connect refused, reset, timeout before headers): provider-level.
pub fn classify_transport() -> Decision {
    Decision {
        reason: Reason::Transport,
        status: 502,
        upstream_status: 0,
        restated_by: None,
        client_retry_after: None,
        should_fallback: true,
        trips_breaker: true,
        connection: ConnectionEffect::None,
        rule_scope: None,
        rule_id: None,
        lock: LockSuggestion { scope: None, cooldown: None, upstream_reset: false },
        unsuited: false,
    }
}

/// A connection's own egress proxy failed (refused, unreachable): the connection's fault, not
/// the provider's. It cools on its class's ladder from `backoff_level`, and the breaker is not
/// told.
pub fn classify_egress(profile: &CooldownProfile, backoff_level: u32) -> Decision {
    let duration = profile.scaled(backoff_level);
    let connection = if duration.is_zero() {
        ConnectionEffect::None
    } else {
        ConnectionEffect::Cooldown { duration, new_level: profile.next_level(backoff_level), hint: None }
    };
    Decision { trips_breaker: false, connection, ..classify_transport() }
}
