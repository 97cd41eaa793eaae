//! The session-limit reset: once a week a Claude subscription may reset its 5-hour usage
//! window. The shell queries the usage endpoint, posts the reset when the program is armed and
//! available, and reports the outcome; this module reads the two bodies and says how long the
//! next try is held back.

use super::signals::until;
use crate::hint::parse_instant_ms;
use std::time::Duration;

/// The reset program's name in both bodies.
pub const PROGRAM: &str = "juniper_tide";
/// The usage endpoint, after the configured base URL.
pub const USAGE_PATH: &str = "/api/oauth/usage?at_wall=1&skip_spend=1";
/// The default base URL of both endpoints.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The next try after `already_used`/`not_offered` without `next_available_at`.
pub const DEFAULT_NEXT: Duration = Duration::from_secs(7 * 24 * 3600);
/// The next try after any failure (or a program that is not armed, without a date).
pub const FAILURE_NEXT: Duration = Duration::from_secs(15 * 60);
/// The longest a try is held back.
pub const MAX_NEXT: Duration = Duration::from_secs(8 * 24 * 3600);

/// The reset endpoint for an organization, after the base URL.
pub fn reset_path(organization: &str) -> String {
    format!("/api/organizations/{organization}/reset_rate_limits")
}

/// The reset request's body.
pub fn reset_body() -> String {
    serde_json::json!({ "program": PROGRAM }).to_string()
}

/// What the usage endpoint says about the reset program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageVerdict {
    /// `arm: "reset"` and `available: true`: post the reset.
    Post,
    /// Not armed or not available; the next chance if announced (Unix ms).
    Unavailable {
        /// `next_available_at`, if given.
        next_ms: Option<u64>,
    },
    /// Not the JSON this expects.
    Malformed,
}

/// How one reset try ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetOutcome {
    /// The window was reset: retry at full speed.
    Reset,
    /// The account was not limited after all: retry at full speed.
    NotLimited,
    /// This week's reset is spent.
    AlreadyUsed {
        /// `next_available_at`, if given (Unix ms).
        next_ms: Option<u64>,
    },
    /// The account is not offered the reset.
    NotOffered {
        /// `next_available_at`, if given (Unix ms).
        next_ms: Option<u64>,
    },
    /// The usage endpoint said the program is not armed or not available.
    Unavailable {
        /// `next_available_at`, if given (Unix ms).
        next_ms: Option<u64>,
    },
    /// An endpoint failed, timed out, or answered something unexpected.
    Failed,
}

impl ResetOutcome {
    /// The snake_case name in logs, events and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            ResetOutcome::Reset => "reset",
            ResetOutcome::NotLimited => "not_limited",
            ResetOutcome::AlreadyUsed { .. } => "already_used",
            ResetOutcome::NotOffered { .. } => "not_offered",
            ResetOutcome::Unavailable { .. } => "unavailable",
            ResetOutcome::Failed => "failed",
        }
    }

    /// How long the next try is held back (`None`: not held).
    pub fn hold(self, wall_ms: u64) -> Option<Duration> {
        let from = |next: Option<u64>, default: Duration| {
            next.map(|at| until(at, wall_ms)).filter(|d| !d.is_zero()).unwrap_or(default).min(MAX_NEXT)
        };
        match self {
            ResetOutcome::Reset | ResetOutcome::NotLimited => None,
            ResetOutcome::AlreadyUsed { next_ms } | ResetOutcome::NotOffered { next_ms } => {
                Some(from(next_ms, DEFAULT_NEXT))
            }
            ResetOutcome::Unavailable { next_ms } => Some(from(next_ms, FAILURE_NEXT)),
            ResetOutcome::Failed => Some(FAILURE_NEXT),
        }
    }
}

fn instant_of(v: Option<&serde_json::Value>) -> Option<u64> {
    match v? {
        serde_json::Value::String(s) => parse_instant_ms(s),
        serde_json::Value::Number(n) => n.as_u64().and_then(|n| parse_instant_ms(&n.to_string())),
        _ => None,
    }
}

/// Reads the usage endpoint's body: the `juniper_tide` block.
pub fn usage_verdict(body: &[u8]) -> UsageVerdict {
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) else { return UsageVerdict::Malformed };
    let Some(block) = json.get(PROGRAM).filter(|b| b.is_object()) else { return UsageVerdict::Malformed };
    let armed = block.get("arm").and_then(|a| a.as_str()) == Some("reset");
    let available = block.get("available").and_then(|a| a.as_bool()) == Some(true);
    if armed && available {
        UsageVerdict::Post
    } else {
        UsageVerdict::Unavailable { next_ms: instant_of(block.get("next_available_at")) }
    }
}

/// Reads the reset endpoint's body (`result`, optional `next_available_at`).
pub fn result_of(body: &[u8]) -> ResetOutcome {
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) else { return ResetOutcome::Failed };
    let next_ms = instant_of(json.get("next_available_at"));
    match json.get("result").and_then(|r| r.as_str()) {
        Some("reset") => ResetOutcome::Reset,
        Some("not_limited") => ResetOutcome::NotLimited,
        Some("already_used") => ResetOutcome::AlreadyUsed { next_ms },
        Some("not_offered") => ResetOutcome::NotOffered { next_ms },
        _ => ResetOutcome::Failed,
    }
}

impl UsageVerdict {
    /// What a usage answer ends the try with, if it does not call for the post.
    pub fn outcome(self) -> Option<ResetOutcome> {
        match self {
            UsageVerdict::Post => None,
            UsageVerdict::Unavailable { next_ms } => Some(ResetOutcome::Unavailable { next_ms }),
            UsageVerdict::Malformed => Some(ResetOutcome::Failed),
        }
    }
}
