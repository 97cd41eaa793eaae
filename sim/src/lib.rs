//! Ferroute's deterministic simulation.
//!
//! The real gateway (`proxy::edge::serve`) runs in a turmoil host over simulated sockets; scripted
//! upstream hosts play faults; client hosts send the scenario's workload. Checkers run as
//! every event arrives and at every step; a run is replayable from its seed.

pub mod check;
mod client;
pub mod coverage;
mod expect;
mod faults;
pub mod many;
pub mod net;
mod oauth;
pub mod replay;
pub mod report;
pub mod shared;
pub mod store;
pub mod svg;
pub mod swarm;
mod workload;
pub mod world;

pub use shared::RunResult;
pub use world::run;

/// Seeds per scenario in `cargo test -p sim` (override with `SIM_SEEDS`).
pub const DEFAULT_SEEDS: u64 = 3;

/// The seeds to sweep: `SIM_SEEDS` of them, starting at `SIM_SEED_START` (default 1).
pub fn seeds_from_env() -> std::ops::Range<u64> {
    let n = std::env::var("SIM_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_SEEDS);
    let start = std::env::var("SIM_SEED_START").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    start..start + n
}
