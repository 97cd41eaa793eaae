//! What the shell tells the engine about a routing decision: the candidates (a target on a
//! connection, with the traits strategies read) and the route (strategy, key, request traits,
//! session).

use crate::calendar::DailyReset;
use crate::strategy::{Ask, Strategy};
use crate::types::{Format, ProviderClass};
use std::time::Duration;

/// One routable (provider, connection, model) target.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    /// Provider id.
    pub provider: &'a str,
    /// Provider class.
    pub class: ProviderClass,
    /// Connection id.
    pub connection: &'a str,
    /// The connection's place in the engine's tables ([`super::Engine::slot`]), or
    /// [`Slot::NONE`] to find it by id.
    pub slot: Slot,
    /// Model as sent upstream.
    pub model: &'a str,
    /// The model's quota family, if the provider declares one.
    pub family: Option<&'a str>,
    /// What routing knows of its target and connection.
    pub traits: Traits,
}

impl<'a> Candidate<'a> {
    /// A candidate with default traits (target 0, weight 1, priority among connections).
    pub fn new(provider: &'a str, class: ProviderClass, connection: &'a str, model: &'a str) -> Self {
        Candidate { provider, class, connection, slot: Slot::NONE, model, family: None, traits: Traits::default() }
    }
}

/// A connection's place in the engine's tables ([`super::Engine::slot`]). [`Slot::NONE`] (the
/// default) means "find it by id".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slot(u32);

impl Slot {
    /// No place: the candidate is found by its id.
    pub const NONE: Slot = Slot(u32::MAX);

    /// The place at `index`.
    pub(super) fn at(index: u32) -> Slot {
        Slot(index)
    }

    /// Its index (out of any table's range for [`Slot::NONE`]).
    pub(super) fn index(self) -> usize {
        self.0 as usize
    }
}

impl Default for Slot {
    fn default() -> Self {
        Slot::NONE
    }
}

/// What routing knows of a candidate beyond its identity: the combo target it belongs to and
/// that target's declared traits, the provider's way of choosing among its connections and
/// where its day ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Traits {
    /// Position of the combo target it came from; candidates of one target are that target's
    /// connections.
    pub target: usize,
    /// The target's weight (`weighted`).
    pub weight: u32,
    /// The target's declared cost.
    pub cost: Option<f64>,
    /// The target's declared context window in tokens.
    pub context_window: Option<u64>,
    /// How the provider chooses among its connections.
    pub connection_strategy: Strategy,
    /// The connection's weight among the provider's connections.
    pub connection_weight: u32,
    /// The connection's `max_concurrent` (M7 quota-share gate), if any.
    pub max_concurrent: Option<u32>,
    /// Where the provider's day ends, for daily quotas.
    pub daily_reset: DailyReset,
    /// The provider's wire format: classification reads its answers by it.
    pub format: Format,
}

impl Default for Traits {
    fn default() -> Self {
        Traits {
            target: 0,
            weight: 1,
            cost: None,
            context_window: None,
            connection_strategy: Strategy::Priority,
            connection_weight: 1,
            max_concurrent: None,
            daily_reset: DailyReset::Utc,
            format: Format::Openai,
        }
    }
}

impl Traits {
    /// Whether a key with these traits may be tried in turn: ordered by priority or round
    /// robin alone, not held to a `max_concurrent`. One target's keys that all may, asked
    /// without a session, are tried in turn (`Engine::select_keys_in_turn`).
    pub fn tried_in_turn(&self) -> bool {
        matches!(self.connection_strategy, Strategy::Priority | Strategy::RoundRobin) && self.max_concurrent.is_none()
    }
}

/// How one request routes: the strategy among its targets, the key its round-robin cursor,
/// deck and last-known-good are kept under (a combo or model name), what strategies read of
/// the request, and its session (M5) with the pin's TTL.
#[derive(Debug, Clone, Copy)]
pub struct Route<'a> {
    /// Strategy among targets.
    pub strategy: Strategy,
    /// Cursor key.
    pub key: &'a str,
    /// The request's traits.
    pub ask: Ask,
    /// The session key, if the request has one.
    pub session: Option<&'a str>,
    /// How long a session pin lasts (zero: affinity off).
    pub session_ttl: Duration,
}

impl<'a> Route<'a> {
    /// A route with no request traits and no session.
    pub fn new(strategy: Strategy, key: &'a str) -> Self {
        Route { strategy, key, ask: Ask::default(), session: None, session_ttl: Duration::ZERO }
    }
}
