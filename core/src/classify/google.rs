//! M12 rules for Google's RPC errors, as the Gemini API sends them (`{"error": {"code",
//! "message", "status", "details"}}`, often pretty-printed). They apply to the providers whose
//! rule profile is listed in [`GOOGLE_PROFILES`] (a `gemini`-format provider's by default) and
//! come right after operator rules: Google's structured status is authoritative, and its
//! per-minute 429 says "You exceeded your current quota, please check your plan and billing
//! details", the same words as an OpenAI account that is out of credits.

use crate::types::{Reason, TerminalState};

/// What a matched rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// A daily quota of one model ran out: that model is locked on the connection until the
    /// provider's midnight (its `daily_quota_reset` zone).
    DailyQuota,
    /// A rate limit of one model: locked for `RetryInfo.retryDelay`, else the lockout ladder.
    RateLimit,
    /// The provider is overloaded or down: provider-level (the breaker counts it).
    ProviderLevel,
    /// The key is not valid: terminal, as a 401.
    InvalidKey,
    /// The key may not use this model: that model is locked on the connection.
    ModelDenied,
    /// The key, its project or its region cannot be served at all: the connection ends.
    Ended(TerminalState),
}

/// One rule: statuses, the `error.status` it requires, markers of which one must appear in
/// the lower-cased body (none: any body), and its effect.
#[derive(Debug)]
pub struct GoogleRule {
    /// Rule id, reported in decisions.
    pub id: &'static str,
    /// HTTP statuses it applies to.
    pub statuses: &'static [u16],
    /// The `google.rpc.Code` name in `error.status`.
    pub rpc_status: &'static str,
    /// Any of these substrings of the lower-cased body (empty: always).
    pub markers: &'static [&'static str],
    /// The failure's reason.
    pub reason: Reason,
    /// What happens.
    pub effect: Effect,
}

/// Rule profiles that read Google's RPC errors.
pub const GOOGLE_PROFILES: &[&str] = &["gemini"];

/// The rules, first match wins.
pub const GOOGLE_RULES: &[GoogleRule] = &[
    // "Your prepayment credits are depleted." (429, since 2026 also 402): the billing
    // account, not a window.
    GoogleRule {
        id: "gemini-prepayment-depleted",
        statuses: &[402, 429],
        rpc_status: "RESOURCE_EXHAUSTED",
        markers: &["prepayment credits are depleted"],
        reason: Reason::QuotaExhausted,
        effect: Effect::Ended(TerminalState::CreditsExhausted),
    },
    // Key-wide refusals (every model fails alike): a leaked or blocked key, a call without one.
    GoogleRule {
        id: "gemini-key-refused",
        statuses: &[403],
        rpc_status: "PERMISSION_DENIED",
        markers: &["reported as leaked", "api_key_service_blocked", "unregistered callers"],
        reason: Reason::AuthError,
        effect: Effect::Ended(TerminalState::Expired),
    },
    // The project: suspended, or the API disabled for it.
    GoogleRule {
        id: "gemini-project-refused",
        statuses: &[403],
        rpc_status: "PERMISSION_DENIED",
        markers: &["consumer_suspended", "has been suspended", "service_disabled", "has not been used in project"],
        reason: Reason::AuthError,
        effect: Effect::Ended(TerminalState::Banned),
    },
    // "User location is not supported for the API use.", "… free tier is not available in your
    // country": the egress's region.
    GoogleRule {
        id: "gemini-region-refused",
        statuses: &[400, 403],
        rpc_status: "FAILED_PRECONDITION",
        markers: &["location is not supported", "not available in your country"],
        reason: Reason::AuthError,
        effect: Effect::Ended(TerminalState::Banned),
    },
    // `quotaId: GenerateRequestsPerDayPerProjectPerModel-FreeTier` and its kin.
    GoogleRule {
        id: "gemini-per-day-quota",
        statuses: &[429],
        rpc_status: "RESOURCE_EXHAUSTED",
        markers: &["perday"],
        reason: Reason::QuotaExhausted,
        effect: Effect::DailyQuota,
    },
    // Per-minute quotas (`…PerMinute…`) and any other exhausted resource.
    GoogleRule {
        id: "gemini-rate-limit",
        statuses: &[429],
        rpc_status: "RESOURCE_EXHAUSTED",
        markers: &[],
        reason: Reason::RateLimitExceeded,
        effect: Effect::RateLimit,
    },
    // "The model is overloaded. Please try again later."
    GoogleRule {
        id: "gemini-unavailable",
        statuses: &[500, 502, 503, 504],
        rpc_status: "UNAVAILABLE",
        markers: &[],
        reason: Reason::ModelCapacity,
        effect: Effect::ProviderLevel,
    },
    // "API key not valid. Please pass a valid API key." (reason API_KEY_INVALID), expired keys.
    GoogleRule {
        id: "gemini-api-key-invalid",
        statuses: &[400, 401, 403],
        rpc_status: "INVALID_ARGUMENT",
        markers: &["api_key_invalid", "api key not valid", "api key expired", "api_key_expired"],
        reason: Reason::AuthError,
        effect: Effect::InvalidKey,
    },
    GoogleRule {
        id: "gemini-unauthenticated",
        statuses: &[401],
        rpc_status: "UNAUTHENTICATED",
        markers: &[],
        reason: Reason::AuthError,
        effect: Effect::InvalidKey,
    },
    GoogleRule {
        id: "gemini-permission-denied",
        statuses: &[403],
        rpc_status: "PERMISSION_DENIED",
        markers: &[],
        reason: Reason::AuthError,
        effect: Effect::ModelDenied,
    },
];

/// Whether `profile` reads Google's RPC errors.
pub fn applies(profile: &str) -> bool {
    GOOGLE_PROFILES.iter().any(|p| p.eq_ignore_ascii_case(profile))
}

/// `error.status` of a Google error body.
fn rpc_status(body: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(body.trim_start()).ok()?;
    let e = match &v {
        // The streaming endpoint without `alt=sse` answers a JSON array.
        serde_json::Value::Array(a) => a.first()?.get("error")?,
        other => other.get("error")?,
    };
    e.get("status")?.as_str().map(str::to_owned)
}

/// The first rule matching a failure of a provider with a Google profile.
pub fn find(status: u16, body: &str, lower: &str) -> Option<&'static GoogleRule> {
    let rpc = rpc_status(body)?;
    GOOGLE_RULES.iter().find(|r| {
        r.statuses.contains(&status)
            && r.rpc_status == rpc
            && (r.markers.is_empty() || r.markers.iter().any(|m| lower.contains(m)))
    })
}
