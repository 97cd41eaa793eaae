//! This replica's link to the shared state: what the gateway holds to publish its changes
//! (queued, never waited on), the counters health and metrics read, the leases and OAuth
//! tokens kept in the same store, and the envelope a change travels in. Imports only the core,
//! the lease store on Redis and the shared tokens, so that [`crate::state`] can hold a link
//! without knowing how replicas follow each other ([`super::follow`]).

use super::shared_tokens::SharedTokens;
use crate::sessions::lease_shared::SharedLeases;
use ferroute_core::engine::SharedChange;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

/// How a change travels: who sent it, and when (Unix ms), so the receiver can age it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// The sending replica.
    pub replica: String,
    /// Wall time when it was taken.
    pub wall_ms: u64,
    /// The change.
    pub change: SharedChange,
}

impl Envelope {
    /// The change aged by the time since it was taken (none when the clocks disagree).
    pub fn aged(self, wall_now_ms: u64) -> SharedChange {
        self.change.aged(Duration::from_millis(wall_now_ms.saturating_sub(self.wall_ms)))
    }
}

/// Counters for `/health` and `/metrics`.
#[derive(Debug, Default)]
pub struct ReplicaStats {
    pub(super) reachable: AtomicBool,
    pub(super) joined: AtomicBool,
    pub(super) published: AtomicU64,
    pub(super) applied: AtomicU64,
    pub(super) errors: AtomicU64,
    pub(super) dropped: AtomicU64,
}

impl ReplicaStats {
    /// Whether the store answered last time it was asked.
    pub fn reachable(&self) -> bool {
        self.reachable.load(Ordering::Relaxed)
    }
    /// Whether this replica has joined the store since it started (it then serves on, locally,
    /// should the store be lost).
    pub fn joined(&self) -> bool {
        self.joined.load(Ordering::Relaxed)
    }
    /// Changes this replica published.
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::Relaxed)
    }
    /// Changes of other replicas this replica applied.
    pub fn applied(&self) -> u64 {
        self.applied.load(Ordering::Relaxed)
    }
    /// Failed store operations.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }
    /// Changes not published (the store was unreachable or the queue full); a resync sends
    /// the state they changed once the store is back.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// This replica's link to the shared state.
pub struct Replicas {
    pub(super) name: String,
    pub(super) stats: Arc<ReplicaStats>,
    pub(super) tx: mpsc::Sender<(u64, SharedChange)>,
    pub(super) leases: SharedLeases,
    pub(super) tokens: SharedTokens,
}

impl std::fmt::Debug for Replicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicas").field("name", &self.name).finish_non_exhaustive()
    }
}

impl Replicas {
    /// This replica's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The leases, held in the same store (see [`crate::sessions::lease_shared`]).
    pub fn leases(&self) -> &SharedLeases {
        &self.leases
    }

    /// The OAuth accounts' tokens, held in the same store (see [`super::shared_tokens`]).
    pub fn tokens(&self) -> &SharedTokens {
        &self.tokens
    }

    /// The counters.
    pub fn stats(&self) -> &ReplicaStats {
        &self.stats
    }

    /// Queues changes taken at `wall_ms` for publishing; never waits.
    pub fn publish(&self, changes: Vec<SharedChange>, wall_ms: u64) {
        for ch in changes {
            if self.tx.try_send((wall_ms, ch)).is_err() {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
