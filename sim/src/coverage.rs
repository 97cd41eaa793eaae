//! Which transitions of each state machine a run reached: the breaker's moves (with why), a
//! connection's cooldowns (by reason), terminal states and recoveries, model lockouts and their
//! clearing, session pins, the Claude usage-limit lane, OAuth refreshes, replicas applying each
//! other's changes and combo waits. `sim swarm` adds them up over its seeds and prints the table
//! with the transitions no seed reached.

use ferroute_core::breaker::TransitionReason;
use ferroute_core::engine::Event;
use ferroute_core::session::PinEvent;
use ferroute_core::usage_limit::LaneChange;
use proxy::state::gateway::Observed;
use std::collections::BTreeMap;

/// The transition an observation is, if it is one.
pub(crate) fn label(what: &Observed<'_>) -> Option<String> {
    Some(match what {
        Observed::Core(Event::Breaker(t)) => {
            let why = match t.reason {
                TransitionReason::DegradationThreshold => "degradation threshold",
                TransitionReason::FailureThreshold => "failure threshold",
                TransitionReason::ResetTimeoutElapsed => "reset timeout",
                TransitionReason::ProbeSucceeded => "probe succeeded",
                TransitionReason::ProbeFailed { .. } => "probe failed",
                TransitionReason::Recovered => "recovered",
                TransitionReason::ManualReset => "manual reset",
                TransitionReason::Replica => "replica",
            };
            format!("breaker {:?} -> {:?} ({why})", t.from, t.to)
        }
        Observed::Core(Event::ConnectionCooldown { reason, .. }) => format!("connection cooldown ({reason:?})"),
        Observed::Core(Event::ConnectionTerminal { state, .. }) => format!("connection terminal ({})", state.as_str()),
        Observed::Core(Event::ConnectionRecovered { .. }) => "connection recovered".to_owned(),
        Observed::Core(Event::Pin(PinEvent::Set { .. })) => "pin set".to_owned(),
        Observed::Core(Event::Pin(PinEvent::Dropped { .. })) => "pin dropped".to_owned(),
        Observed::Core(Event::Lane { change, .. }) => {
            let d = format!("{change:?}");
            let kind = d.split([' ', '(', '{']).next().unwrap_or("?").to_owned();
            match change {
                LaneChange::Ended(end) => format!("lane ended ({end:?})"),
                _ => format!("lane {kind}"),
            }
        }
        Observed::Core(Event::Lockout { .. }) => "model lockout".to_owned(),
        Observed::Core(Event::LockoutDecayed { .. }) => "model lockout ended by successes".to_owned(),
        Observed::Core(Event::LockoutsCleared { .. }) => "model lockouts cleared".to_owned(),
        Observed::Tokens { what, .. } => format!("oauth {what}"),
        Observed::Peers { .. } => "replica applies others' changes".to_owned(),
        Observed::ComboWait { .. } => "combo waits for a cooldown".to_owned(),
        _ => return None,
    })
}

/// Transitions the swarm should reach within its nightly seed budget (the table marks those it
/// did not; the catalog reaches each of them). A server error or a transport failure is the
/// provider's, never a connection's cooldown, so those are not listed.
pub const EXPECTED: &[&str] = &[
    "breaker Closed -> Open (failure threshold)",
    "breaker Closed -> Degraded (degradation threshold)",
    "breaker Degraded -> Open (failure threshold)",
    "breaker Degraded -> Closed (recovered)",
    "breaker Open -> HalfOpen (reset timeout)",
    "breaker HalfOpen -> Closed (probe succeeded)",
    "breaker HalfOpen -> Open (probe failed)",
    "connection cooldown (RateLimitExceeded)",
    "connection cooldown (QuotaExhausted)",
    "connection cooldown (AuthError)",
    "connection terminal (banned)",
    "connection terminal (credits_exhausted)",
    "connection terminal (expired)",
    "connection recovered",
    "model lockout",
    "model lockout ended by successes",
    "model lockouts cleared",
    "pin set",
    "pin dropped",
    "lane Accepted",
    "oauth refreshed",
    "oauth taken",
    "oauth deferred",
    "oauth published",
    "oauth retry",
    "oauth refused",
    "replica applies others' changes",
];

/// The table: each transition reached, with the number of runs that reached it, then each
/// expected one no run reached.
pub fn table(seen: &BTreeMap<String, u64>, runs: u64) -> String {
    let mut out = format!("transitions reached over {runs} runs (runs reaching each):\n");
    for (label, n) in seen {
        out.push_str(&format!("  {n:>6}  {label}\n"));
    }
    let missed: Vec<&&str> = EXPECTED.iter().filter(|e| !seen.contains_key(**e)).collect();
    if missed.is_empty() {
        out.push_str("every expected transition was reached\n");
    } else {
        for m in missed {
            out.push_str(&format!("  never   {m}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_counts_runs_per_transition_and_names_each_expected_one_never_reached() {
        let mut seen: BTreeMap<String, u64> = EXPECTED.iter().map(|e| ((*e).to_owned(), 1)).collect();
        seen.insert("breaker Open -> Closed (manual reset)".into(), 3);
        let all = table(&seen, 4);
        assert!(all.starts_with("transitions reached over 4 runs"), "{all}");
        assert!(all.contains("       3  breaker Open -> Closed (manual reset)\n"), "{all}");
        assert!(all.ends_with("every expected transition was reached\n"), "{all}");
        seen.remove("model lockout");
        let missing = table(&seen, 4);
        assert!(missing.ends_with("  never   model lockout\n"), "{missing}");
        assert!(!missing.contains("every expected"), "{missing}");
    }
}
