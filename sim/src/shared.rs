//! What every host of a simulated run shares: the ports and names they meet at, the run's
//! shared state (the recorder, the gateway being served, the upstreams, cuts and restarts),
//! and what a run produced. The hosts ([`crate::world`]) and the checks they run
//! (`expect`, `faults`, `client`) all import it; it imports none of
//! them.

use crate::check::{Outcome, Recorder, Violation};
use crate::net::SimConnector;
use proxy::ops::reload::Serving;
use proxy::state::gateway::Gateway;
use scenarios::ScriptedUpstream;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The gateway's port inside the simulation.
pub const GATEWAY_PORT: u16 = 8787;
/// The host replicas share their state through (a scenario with `replicas`).
pub const STORE_HOST: &str = "store";
/// The store host's port.
pub const STORE_PORT: u16 = 6379;
/// Upstreams' port inside the simulation.
pub const UPSTREAM_PORT: u16 = 9000;
/// The client key simulated clients send.
pub const SIM_CLIENT_KEY: &str = "sim-client-key";
/// The wall clock the gateway believes it started at (fixed, for determinism).
pub const WALL_START_MS: u64 = scenarios::upstream::DEFAULT_WALL_START_MS;

/// What a run produced.
#[derive(Debug)]
pub struct RunResult {
    /// Scenario name.
    pub scenario: String,
    /// Seed.
    pub seed: u64,
    /// Violations (first first); empty when the run passed.
    pub violations: Vec<Violation>,
    /// The ordered event log.
    pub log: Vec<(u64, String)>,
    /// Its hash.
    pub hash: u64,
    /// Client outcomes.
    pub outcomes: Vec<Outcome>,
    /// Simulated time covered.
    pub simulated: Duration,
    /// Wall time taken.
    pub wall: Duration,
    /// Timeline spans.
    pub spans: Vec<crate::check::Span>,
    /// The state machine transitions reached, with how often.
    pub coverage: std::collections::BTreeMap<String, u64>,
}

impl RunResult {
    /// Whether every check held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// The command that replays this run.
    pub fn replay_command(&self) -> String {
        format!("cargo run -p sim -- run {} --seed {} --trace", self.scenario, self.seed)
    }
}

pub(crate) struct GatewayHandle {
    /// The gateway being served (a reload swaps it; see [`GatewayHandle::gw`]).
    pub(crate) serving: Arc<Serving<SimConnector>>,
    pub(crate) base: Instant,
    pub(crate) e0: Duration,
}

impl GatewayHandle {
    /// The gateway a request arriving now would use.
    pub(crate) fn gw(&self) -> Arc<Gateway<SimConnector>> {
        self.serving.current()
    }
}

#[derive(Default)]
pub(crate) struct Shared {
    pub(crate) rec: Recorder,
    pub(crate) gateway: Option<GatewayHandle>,
    pub(crate) upstreams: BTreeMap<String, Arc<ScriptedUpstream>>,
    /// When each client was partitioned from the gateway: (from, until the repair).
    pub(crate) cuts: BTreeMap<String, Vec<(u64, Option<u64>)>>,
    /// When the gateway was restarted (its open connections die with it).
    pub(crate) restarts: Vec<u64>,
    /// The config text each gateway host's next reload reads (set by a `reload` fault just
    /// before it), by host.
    pub(crate) next_config: BTreeMap<String, String>,
    /// The sign-ins a reloaded config text's `{oauth:ID}` placeholders stand for.
    pub(crate) sign_ins: Vec<(String, String)>,
    /// Wakes a gateway host to reload (it must run there, on the simulated clock), by host.
    pub(crate) reload: BTreeMap<String, Arc<tokio::sync::Notify>>,
}

impl Shared {
    /// Why `client` could not get an answer in `from..=to`, if something outside the gateway's
    /// control cut it off: a partition from the gateway, or a gateway restart.
    pub(crate) fn cut_off(&self, client: &str, from: u64, to: u64) -> Option<&'static str> {
        if self.cuts.get(client).is_some_and(|c| c.iter().any(|(a, b)| *a <= to && b.is_none_or(|b| b >= from))) {
            return Some(CUT_OFF);
        }
        self.restarts.iter().any(|r| (from..=to).contains(r)).then_some(RESTARTED)
    }
}

/// What a client that a partition cut off from the gateway saw: no answer, an expected abort.
pub(crate) const CUT_OFF: &str = "cut off from the gateway by a partition";
/// What a client whose request was in flight when the gateway restarted saw.
const RESTARTED: &str = "in flight when the gateway restarted";

pub(crate) fn lock(s: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub(crate) fn sim_now() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}
