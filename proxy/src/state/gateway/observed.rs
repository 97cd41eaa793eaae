//! What the gateway did, as an observer (the simulation's checkers) sees it.

use ferroute_core::engine::{Event, OutcomeKind};
use std::time::Duration;

/// Something the gateway did, as an observer (the simulation's checkers) sees it.
#[derive(Debug)]
pub enum Observed<'a> {
    /// A state change in the core.
    Core(&'a Event),
    /// A request is about to be sent to this provider and connection.
    Dispatch {
        /// Provider id.
        provider: &'a str,
        /// Connection id.
        connection: &'a str,
        /// The model sent upstream.
        model: &'a str,
        /// The client request it belongs to (a number unique in this process).
        request: u64,
        /// Its round: 0, then one more after each cooldown wait or the emergency switch.
        round: u32,
        /// Sent again within the same attempt (the M4 lane), not a new attempt.
        resend: bool,
    },
    /// The engine's `select` picked this target for a request (before the re-check that
    /// guards the send; see [`Observed::Dispatch`] for what was sent).
    Pick {
        /// Provider id.
        provider: &'a str,
        /// Connection id.
        connection: &'a str,
        /// The model.
        model: &'a str,
        /// The client request it belongs to.
        request: u64,
    },
    /// An attempt's outcome is about to be recorded, as its raw status or error says (before
    /// any classification).
    Outcome {
        /// Provider id.
        provider: &'a str,
        /// Connection id.
        connection: &'a str,
        /// What kind of outcome.
        kind: OutcomeKind,
    },
    /// A combo request waits for a cooldown before dispatching its set again (M8).
    ComboWait {
        /// The combo.
        combo: &'a str,
        /// How long.
        wait: Duration,
    },
    /// A stream relay started.
    StreamStarted,
    /// A stream relay finalised (must happen exactly once per stream).
    StreamFinalized,
    /// Other replicas' changes are about to be applied: what changes now is their doing.
    Peers {
        /// How many changes.
        changes: usize,
    },
    /// Something happened to an OAuth account's tokens: `refreshed`, `taken` (from another
    /// replica), `published` (late, after the store was lost), `deferred` (another replica holds
    /// the refresh), `retry` or `refused`.
    Tokens {
        /// Connection id.
        connection: &'a str,
        /// What happened.
        what: &'static str,
        /// The tokens' generation afterwards.
        generation: u64,
    },
}
