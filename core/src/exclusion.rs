//! Why a candidate cannot run now, what selection returns, and which refusal the client gets
//! when nothing can run: the vocabulary the engine and the shell share for "no".

use crate::breaker::Ticket;
use crate::engine::candidate::Candidate;
use crate::types::TerminalState;
use std::collections::BTreeSet;
use std::time::Duration;

/// Why a candidate was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExclusionReason {
    /// The provider's breaker is open (or its probe slots are taken).
    CircuitOpen,
    /// The M2 tracker says the provider or connection is cooling.
    ProviderCooldown,
    /// The connection is cooling down.
    Unavailable,
    /// The model is locked out on this connection.
    ModelLockout,
    /// The connection is terminal (not a timer).
    Terminal(TerminalState),
    /// Already tried in this request, or its connection was exhausted by a connection-level
    /// failure earlier in this request.
    Skipped,
    /// The request offers more tools than this provider/model was found to accept.
    ToolLimit,
}

impl ExclusionReason {
    /// The name used in `diagnostics.excluded[]`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExclusionReason::CircuitOpen => "circuit_open",
            ExclusionReason::ProviderCooldown => "provider_cooldown",
            ExclusionReason::Unavailable => "unavailable",
            ExclusionReason::ModelLockout => "model_lockout",
            ExclusionReason::Terminal(t) => t.as_str(),
            ExclusionReason::Skipped => "skipped",
            ExclusionReason::ToolLimit => "tool_limit",
        }
    }

    /// Whether a timer ends this exclusion by itself.
    pub fn is_timer(self) -> bool {
        matches!(
            self,
            ExclusionReason::CircuitOpen
                | ExclusionReason::ProviderCooldown
                | ExclusionReason::Unavailable
                | ExclusionReason::ModelLockout
        )
    }
}

/// One skipped candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exclusion {
    /// Index into the candidates.
    pub index: usize,
    /// Why.
    pub reason: ExclusionReason,
    /// Time until it may be eligible again (zero if unknown or not a timer).
    pub retry_after: Duration,
}

/// What `select` decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Dispatch to `candidates[index]`, reporting the outcome with `ticket`.
    Pick {
        /// The candidate.
        index: usize,
        /// The breaker ticket.
        ticket: Ticket,
    },
    /// Nothing is eligible.
    NoneEligible(Vec<Exclusion>),
    /// The request has spent its retry budget (`[resilience.routing] max_attempts`).
    BudgetSpent {
        /// Attempts made.
        attempts: u32,
    },
}

/// What a request gets when nothing was eligible and nothing was tried. The shell turns it
/// into a status and body; the choice itself is policy and lives here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Every connection is terminal (401: nothing heals by itself).
    AllTerminal,
    /// Only one provider's breaker stands in the way (503 `provider_circuit_open`).
    CircuitOpen {
        /// Until the breaker admits a probe (at least 1 s).
        retry_after: Duration,
    },
    /// A direct request whose connections all cool down or are locked (429).
    ConnectionsCooling {
        /// The soonest a connection becomes usable (at least 1 s).
        retry_after: Duration,
    },
    /// Every target is excluded and at least one by a timer (503 `all_targets_cooling_down`).
    AllCooling {
        /// The soonest a target becomes usable (at least 1 s).
        retry_after: Duration,
    },
    /// Nothing is excluded by a timer, yet nothing can run (404 `no_executable_targets`).
    NoExecutable,
}

/// The soonest a timer ends one of `exclusions` (reason, time left), if a timer excludes any:
/// the `Retry-After` of a refusal. Terminal states and zero waits are not timers that end.
pub fn soonest_by_timer(exclusions: impl IntoIterator<Item = (ExclusionReason, Duration)>) -> Option<Duration> {
    exclusions.into_iter().filter(|(r, d)| r.is_timer() && !d.is_zero()).map(|(_, d)| d).min()
}

/// Chooses the refusal for `exclusions` of `candidates`. Exclusions because a connection was
/// already tried in this request (`Skipped`) do not count. `combo` marks a combo request.
pub fn refusal(candidates: &[Candidate<'_>], exclusions: &[Exclusion], combo: bool) -> Refusal {
    let relevant: Vec<&Exclusion> = exclusions.iter().filter(|e| e.reason != ExclusionReason::Skipped).collect();
    if relevant.is_empty() {
        return Refusal::NoExecutable;
    }
    let at_least_1s = |d: Option<Duration>| d.unwrap_or(Duration::ZERO).max(Duration::from_secs(1));
    let soonest = at_least_1s(soonest_by_timer(relevant.iter().map(|e| (e.reason, e.retry_after))));
    if relevant.iter().all(|e| matches!(e.reason, ExclusionReason::Terminal(_))) {
        return Refusal::AllTerminal;
    }
    let providers: BTreeSet<&str> =
        relevant.iter().filter_map(|e| candidates.get(e.index)).map(|c| c.provider).collect();
    if providers.len() == 1 && relevant.iter().all(|e| e.reason == ExclusionReason::CircuitOpen) {
        return Refusal::CircuitOpen { retry_after: at_least_1s(relevant.iter().map(|e| e.retry_after).min()) };
    }
    let account_level = |r: ExclusionReason| {
        matches!(
            r,
            ExclusionReason::Unavailable
                | ExclusionReason::ModelLockout
                | ExclusionReason::Terminal(_)
                | ExclusionReason::ProviderCooldown
        )
    };
    if !combo && relevant.iter().all(|e| account_level(e.reason)) {
        return Refusal::ConnectionsCooling { retry_after: soonest };
    }
    if relevant.iter().any(|e| e.reason.is_timer()) {
        return Refusal::AllCooling { retry_after: soonest };
    }
    Refusal::NoExecutable
}
