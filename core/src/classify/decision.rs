//! The classification's input (an upstream failure and the provider's cooldown ladder) and its
//! output (the decision: status for the client, fallback, breaker, connection and lockout).

use crate::hint::HintSource;
use crate::types::{Format, ProviderClass, Reason, Scope, TerminalState, scaled};
use std::time::Duration;

/// The connection cooldown ladder of one provider class (M3), as classification uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CooldownProfile {
    /// First cooldown.
    pub base: Duration,
    /// Highest ladder level.
    pub max_steps: u32,
    /// No ladder cooldown exceeds this.
    pub cap: Duration,
    /// Whether upstream retry hints replace the ladder.
    pub use_hints: bool,
    /// The longest wait a usage limit's stated end sets (`max_stated_reset_ms`), hints or not.
    pub stated_cap: Duration,
}

impl CooldownProfile {
    /// `min(base × 2^min(level, steps), cap)`.
    pub fn scaled(&self, level: u32) -> Duration {
        scaled(self.base, level.min(self.max_steps)).min(self.cap)
    }

    /// The level after one more failure.
    pub fn next_level(&self, level: u32) -> u32 {
        level.saturating_add(1).min(self.max_steps)
    }
}

/// Everything classification looks at.
#[derive(Debug, Clone, Copy)]
pub struct ErrorInput<'a> {
    /// The provider's rule profile: the one it declares (e.g. `agentrouter`), else one its
    /// format and class imply (`claude`, `codex`, `gemini`, or the format's name).
    pub provider: &'a str,
    /// The provider's id, as the operator named it: only operator rules read it.
    pub provider_id: &'a str,
    /// The provider's wire format.
    pub format: Format,
    /// The provider's class.
    pub class: ProviderClass,
    /// The upstream status.
    pub status: u16,
    /// Upstream response headers.
    pub headers: &'a [(&'a str, &'a str)],
    /// The upstream error body as text (JSON or not).
    pub body: &'a str,
    /// The connection's current backoff level.
    pub backoff_level: u32,
    /// Wall clock as Unix milliseconds, for hints that name an instant.
    pub wall_now_ms: Option<u64>,
    /// Time until the daily quota resets (the shell knows the calendar); 24 h when unknown.
    pub until_daily_reset: Option<Duration>,
}

/// What happens to the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionEffect {
    /// Nothing (provider-level failure, or not the account's fault).
    None,
    /// Cool down for `duration`, then store `new_level`.
    Cooldown {
        /// How long.
        duration: Duration,
        /// The backoff level to store.
        new_level: u32,
        /// Where the duration came from, when an upstream hint set it.
        hint: Option<HintSource>,
    },
    /// Enter a terminal state.
    Terminal(TerminalState),
    /// An OAuth per-request refusal: the refusal streak decides (5 min, 15 min, then banned).
    RequestRejected,
}

/// A suggested model lockout (M6); the lockout settings decide whether it applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockSuggestion {
    /// An explicit scope from a rule; otherwise the status decides.
    pub scope: Option<Scope>,
    /// A declared cooldown (before capping).
    pub cooldown: Option<Duration>,
    /// Whether the cooldown is the upstream's own reset (not capped by `max_cooldown_ms`).
    pub upstream_reset: bool,
}

/// The decision for one upstream failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Why it failed.
    pub reason: Reason,
    /// The status to report (after restatement).
    pub status: u16,
    /// The status the upstream sent.
    pub upstream_status: u16,
    /// The restatement rule that applied, if any.
    pub restated_by: Option<&'static str>,
    /// Retry-After for the client, when one is known.
    pub client_retry_after: Option<Duration>,
    /// Whether another connection or target should be tried for this request.
    pub should_fallback: bool,
    /// Whether it counts toward the provider breaker.
    pub trips_breaker: bool,
    /// What happens to the connection.
    pub connection: ConnectionEffect,
    /// A rule's scope, when the provider honours rule scopes.
    pub rule_scope: Option<Scope>,
    /// The rule that decided, if any.
    pub rule_id: Option<String>,
    /// The lockout this failure suggests.
    pub lock: LockSuggestion,
    /// The credential cannot serve this client kind (or this request's shape): the connection
    /// is not penalised, and is not asked again for the same client kind for a while.
    pub unsuited: bool,
}
