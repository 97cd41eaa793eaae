//! An SVG timeline of one run: each breaker's and connection's states (from 0 s), lockouts,
//! the usage-limit lane, the upstream calls per connection and every client request from issue
//! to answer, on one time axis. The renderer is the core's ([`ferroute_core::timeline`]), the
//! one the gateway's dashboard draws its last hour with.

use crate::shared::RunResult;
use ferroute_core::timeline::{Frame, render as draw};

/// Renders the run's spans as an SVG document.
pub fn render(r: &RunResult) -> String {
    let end_ms = r.simulated.as_millis().max(1) as u64;
    let title = format!("{} (seed {}) — {:.1} s simulated", r.scenario, r.seed, end_ms as f64 / 1000.0);
    draw(&Frame { title: &title, end_ms, count_back: false }, &r.spans)
}
