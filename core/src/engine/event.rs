//! What leaves the engine: one event per state change.

use crate::breaker::registry::BreakerTransition;
use crate::session::PinEvent;
use crate::types::{Reason, TerminalState};
use crate::usage_limit::LaneChange;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A state change anywhere in the engine, as the shell logs it and the simulation checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A breaker moved.
    Breaker(BreakerTransition),
    /// A connection started a cooldown.
    ConnectionCooldown {
        /// Connection id.
        connection: Arc<str>,
        /// Its end.
        until: Instant,
        /// Stored backoff level.
        level: u32,
        /// Why.
        reason: Reason,
    },
    /// A connection became terminal.
    ConnectionTerminal {
        /// Connection id.
        connection: Arc<str>,
        /// Which state.
        state: TerminalState,
    },
    /// A connection recovered (success after errors, or operator reset).
    ConnectionRecovered {
        /// Connection id.
        connection: Arc<str>,
    },
    /// A session pin changed (M5).
    Pin(PinEvent),
    /// A connection's Claude usage-limit state changed (M4).
    Lane {
        /// Connection id.
        connection: Arc<str>,
        /// What changed.
        change: LaneChange,
    },
    /// A model lockout was recorded.
    Lockout {
        /// Provider.
        provider: Arc<str>,
        /// Connection.
        connection: Arc<str>,
        /// Model.
        model: Arc<str>,
        /// Its length.
        cooldown: Duration,
    },
    /// Healthy responses halved a running model lockout's failure count to 0, which ended it
    /// before its deadline (M6; on this gateway only: other replicas keep it to its deadline).
    LockoutDecayed {
        /// Provider.
        provider: Arc<str>,
        /// Connection.
        connection: Arc<str>,
        /// The model it was announced for.
        model: Arc<str>,
    },
    /// Model lockouts were cleared by an operator (or with their connection's key): those of
    /// `model` on `connection` of `provider`, each field narrowing; all `None` is every lockout.
    LockoutsCleared {
        /// Provider, when one was named.
        provider: Option<Arc<str>>,
        /// Connection, when one was named.
        connection: Option<Arc<str>>,
        /// Model, when one was named.
        model: Option<Arc<str>>,
        /// How many locks went.
        removed: usize,
    },
}
