//! The log line of each engine event.

use crate::state::clock::{Clock, ms};
use ferroute_core::engine::Event;
use ferroute_core::session::PinEvent;
use ferroute_core::usage_limit::LaneChange;
use std::sync::Arc;

/// Logs one engine event (session pins at debug level: their keys may name clients).
pub(crate) fn log_event(ev: &Event, clock: &Clock) {
    match ev {
        Event::Breaker(t) => {
            tracing::warn!(provider = %t.provider, from = t.from.as_str(), to = t.to.as_str(), reason = ?t.reason, "breaker transition")
        }
        Event::ConnectionCooldown { connection, until, level, reason } => {
            tracing::info!(%connection, until = %crate::state::clock::rfc3339(clock.wall_ms(*until)), level, reason = reason.as_str(), "connection cooling down")
        }
        Event::ConnectionTerminal { connection, state } => {
            tracing::warn!(%connection, state = state.as_str(), "connection terminal")
        }
        Event::ConnectionRecovered { connection } => tracing::info!(%connection, "connection recovered"),
        Event::Lockout { provider, connection, model, cooldown } => {
            tracing::info!(%provider, %connection, %model, cooldown_ms = ms(*cooldown), "model locked out")
        }
        Event::LockoutDecayed { provider, connection, model } => {
            tracing::info!(%provider, %connection, %model, "model lockout ended by healthy responses")
        }
        Event::LockoutsCleared { provider, connection, model, removed } => {
            let any = |v: &Option<Arc<str>>| v.as_deref().unwrap_or("*").to_owned();
            tracing::info!(
                provider = any(provider),
                connection = any(connection),
                model = any(model),
                removed,
                "model lockouts cleared"
            )
        }
        // Session keys may carry client identifiers: pins are logged at debug level only.
        Event::Pin(PinEvent::Set { provider, connection, .. }) => {
            tracing::debug!(%provider, %connection, "session pinned")
        }
        Event::Pin(PinEvent::Dropped { provider, .. }) => tracing::debug!(%provider, "session pin dropped"),
        Event::Lane { connection, change: LaneChange::Accepted { until } } => {
            tracing::warn!(%connection, until = %crate::state::clock::rfc3339(clock.wall_ms(*until)), "usage limit: low-priority lane accepted")
        }
        Event::Lane { connection, change: LaneChange::Ended(why) } => {
            tracing::info!(%connection, reason = why.as_str(), "usage limit: low-priority lane ended")
        }
        Event::Lane { connection, change: LaneChange::Reset(outcome) } => {
            tracing::info!(%connection, outcome = outcome.as_str(), "usage limit: session-limit reset tried")
        }
    }
}
