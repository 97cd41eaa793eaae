//! A change one replica's outcomes make, in the form another replica applies through the same
//! state machines ([`SharedChange`], aged by its time in transit), and the form it is collected
//! in before it is taken (times still instants). How replicas merge them is in `shared.rs`.

use crate::connection::ConnectionSnapshot;
use crate::session::PinEvent;
use crate::types::Reason;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One change to share, with its times as durations from when it was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SharedChange {
    /// A provider-level failure of `connection`, counted towards `provider`'s breaker.
    ProviderFailure {
        /// Provider id.
        provider: String,
        /// Connection id.
        connection: String,
    },
    /// `provider`'s breaker opened (or its probe failed again).
    BreakerOpened {
        /// Provider id.
        provider: String,
        /// Time until it admits a probe, in ms.
        open_remaining_ms: u64,
        /// Consecutive failed-probe cycles.
        open_cycle_count: u32,
    },
    /// `provider`'s breaker closed after a probe succeeded, or an operator reset it.
    BreakerClosed {
        /// Provider id.
        provider: String,
    },
    /// A connection started a cooldown or became terminal: its state.
    Connection {
        /// Connection id.
        connection: String,
        /// Why.
        reason: Reason,
        /// Its state when taken.
        snapshot: ConnectionSnapshot,
    },
    /// A model lockout was recorded (or kept a longer one).
    Lockout {
        /// Provider id.
        provider: String,
        /// Connection id.
        connection: String,
        /// The model.
        model: String,
        /// Why.
        reason: Reason,
        /// Time left on it, in ms.
        remaining_ms: u64,
    },
    /// An operator cleared model lockouts: each field narrows; all `None` is every lockout.
    LockoutsCleared {
        /// Provider, when one was named.
        provider: Option<String>,
        /// Connection, when one was named.
        connection: Option<String>,
        /// Model, when one was named.
        model: Option<String>,
    },
    /// A session was pinned (or its pin moved or was refreshed).
    Pin {
        /// Session key.
        session: String,
        /// Provider id.
        provider: String,
        /// The pinned connection.
        connection: String,
        /// Time left on it, in ms.
        remaining_ms: u64,
    },
    /// A session's pin was dropped.
    PinDropped {
        /// Session key.
        session: String,
        /// Provider id.
        provider: String,
    },
    /// An operator switched the emergency fallback (the shell's flag; the engine ignores it).
    Emergency {
        /// Whether it is on.
        enabled: bool,
    },
}

impl SharedChange {
    /// The change as seen `elapsed` later (it spent that long in transit or in the store): its
    /// remaining times shortened, floored at zero.
    pub fn aged(mut self, elapsed: Duration) -> SharedChange {
        let ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        match &mut self {
            SharedChange::BreakerOpened { open_remaining_ms, .. } => {
                *open_remaining_ms = open_remaining_ms.saturating_sub(ms);
            }
            SharedChange::Lockout { remaining_ms, .. } | SharedChange::Pin { remaining_ms, .. } => {
                *remaining_ms = remaining_ms.saturating_sub(ms);
            }
            SharedChange::Connection { snapshot, .. } => *snapshot = std::mem::take(snapshot).aged(ms),
            SharedChange::ProviderFailure { .. }
            | SharedChange::BreakerClosed { .. }
            | SharedChange::LockoutsCleared { .. }
            | SharedChange::PinDropped { .. }
            | SharedChange::Emergency { .. } => {}
        }
        self
    }

    /// The state this change replaces when stored as the latest of its kind (one per provider,
    /// connection, lock or pin, and the emergency switch); `None` for changes that are only
    /// passed on (failures, clears). A dropped pin removes its pin's entry.
    pub fn store_key(&self) -> Option<String> {
        match self {
            SharedChange::BreakerOpened { provider, .. } | SharedChange::BreakerClosed { provider } => {
                Some(format!("breaker:{provider}"))
            }
            SharedChange::Connection { connection, .. } => Some(format!("connection:{connection}")),
            SharedChange::Lockout { provider, connection, model, .. } => {
                Some(format!("lockout:{provider}:{connection}:{}", model.trim().to_lowercase()))
            }
            SharedChange::Pin { session, provider, .. } | SharedChange::PinDropped { session, provider } => {
                Some(format!("pin:{provider}:{session}"))
            }
            SharedChange::Emergency { .. } => Some("emergency".to_owned()),
            SharedChange::ProviderFailure { .. } | SharedChange::LockoutsCleared { .. } => None,
        }
    }
}

/// A change collected before it is taken (times still instants).
#[derive(Debug, Clone)]
pub(super) enum Pending {
    Failure { provider: Arc<str>, connection: Arc<str> },
    Opened { provider: String, until: Instant },
    Closed { provider: String },
    Connection { connection: Arc<str>, reason: Reason },
    Lockout { provider: Arc<str>, connection: Arc<str>, model: Arc<str>, reason: Reason, until: Instant },
    Cleared { provider: Option<Arc<str>>, connection: Option<Arc<str>>, model: Option<Arc<str>> },
    Pin(PinEvent),
}
