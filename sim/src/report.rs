//! Human-readable output: failure reports and timelines.

use crate::shared::RunResult;
use std::fmt::Write;

/// The failure report: scenario, seed, the first violated property and the replay command.
pub fn failure(r: &RunResult) -> String {
    let mut s = String::new();
    let first = r.violations.first().map_or_else(|| "none".to_owned(), |v| format!("at {} ms: {}", v.at_ms, v.what));
    let _ = writeln!(s, "scenario {} failed with seed {}", r.scenario, r.seed);
    let _ = writeln!(s, "  first violation: {first}");
    if r.violations.len() > 1 {
        let _ = writeln!(s, "  ({} more)", r.violations.len() - 1);
    }
    let _ = writeln!(s, "  replay: {}", r.replay_command());
    s
}

/// The timeline: one line per event, `simulated time  event`.
pub fn timeline(r: &RunResult) -> String {
    let mut s = String::new();
    for (at, line) in &r.log {
        let _ = writeln!(s, "{:>9.3}s  {line}", *at as f64 / 1000.0);
    }
    s
}
