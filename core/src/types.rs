//! Small shared vocabulary: provider classes, failure reasons, lock scopes, connection statuses.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Which family of defaults a provider uses (M1 thresholds, M3 base cooldown, M2 windows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderClass {
    /// A plain API key: honours upstream retry hints.
    ApiKey,
    /// An OAuth account: uses its own cooldown ladder, ignores retry hints.
    #[serde(rename = "oauth")]
    OAuth,
    /// A local or self-hosted server: trips fast, recovers fast.
    Local,
}

impl ProviderClass {
    /// Every class, in a stable order.
    pub const ALL: [ProviderClass; 3] = [ProviderClass::ApiKey, ProviderClass::OAuth, ProviderClass::Local];

    /// The name used in config tables and environment variables (`api_key`, `oauth`, `local`).
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderClass::ApiKey => "api_key",
            ProviderClass::OAuth => "oauth",
            ProviderClass::Local => "local",
        }
    }
}

impl fmt::Display for ProviderClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an attempt failed, as decided by classification (M12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The account's quota or credits are used up for now.
    QuotaExhausted,
    /// The account is being throttled.
    RateLimitExceeded,
    /// The credentials are rejected, revoked, or lack permission.
    AuthError,
    /// The model or endpoint does not exist here.
    NotFound,
    /// The provider itself failed (408, 5xx).
    ServerError,
    /// The model is overloaded or the request does not fit it.
    ModelCapacity,
    /// The provider refused this request for this account ("Request not allowed").
    RequestRejected,
    /// A supervisor said the service behind the provider is not running.
    ServiceNotRunning,
    /// The connection to the provider failed (reset, refused, timed out).
    Transport,
    /// Nothing more specific is known.
    Unknown,
}

impl Reason {
    /// The snake_case name shown to users and stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::QuotaExhausted => "quota_exhausted",
            Reason::RateLimitExceeded => "rate_limit_exceeded",
            Reason::AuthError => "auth_error",
            Reason::NotFound => "not_found",
            Reason::ServerError => "server_error",
            Reason::ModelCapacity => "model_capacity",
            Reason::RequestRejected => "request_rejected",
            Reason::ServiceNotRunning => "service_not_running",
            Reason::Transport => "transport",
            Reason::Unknown => "unknown",
        }
    }

    /// Parses the stored name back; unknown names map to [`Reason::Unknown`].
    pub fn parse(s: &str) -> Reason {
        match s {
            "quota_exhausted" => Reason::QuotaExhausted,
            "rate_limit_exceeded" => Reason::RateLimitExceeded,
            "auth_error" => Reason::AuthError,
            "not_found" => Reason::NotFound,
            "server_error" => Reason::ServerError,
            "model_capacity" => Reason::ModelCapacity,
            "request_rejected" => Reason::RequestRejected,
            "service_not_running" => Reason::ServiceNotRunning,
            "transport" => Reason::Transport,
            _ => Reason::Unknown,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The wire format a provider speaks. Classification reads answers by it (and by the
/// provider's class), never by the id an operator gave the provider.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// OpenAI Chat Completions.
    #[default]
    Openai,
    /// Anthropic Messages.
    Anthropic,
    /// The OpenAI Responses API (`POST {base}/responses`).
    Responses,
    /// Google's Generative Language API (`{base}/models/{model}:generateContent`).
    Gemini,
}

impl Format {
    /// Every format, in config order.
    pub const ALL: [Format; 4] = [Format::Openai, Format::Anthropic, Format::Responses, Format::Gemini];

    /// Its name in the config, metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Format::Openai => "openai",
            Format::Anthropic => "anthropic",
            Format::Responses => "responses",
            Format::Gemini => "gemini",
        }
    }

    /// The format named `name` (as [`Format::name`] writes it).
    pub fn parse(name: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// What a rule's lock applies to (M12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// One model (or its quota family) on one connection.
    Model,
    /// The whole provider.
    Provider,
    /// One connection, all models.
    Connection,
}

/// States a connection never leaves on its own: only a success of an allowed retry, new
/// credentials, or an operator reset clears them (M3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TerminalState {
    /// The upstream banned or deactivated the account.
    Banned,
    /// The credentials expired; a few spaced retries are allowed before giving up.
    Expired,
    /// The account has no credits left.
    CreditsExhausted,
}

impl TerminalState {
    /// The name used in the health JSON and the store.
    pub fn as_str(self) -> &'static str {
        match self {
            TerminalState::Banned => "banned",
            TerminalState::Expired => "expired",
            TerminalState::CreditsExhausted => "credits_exhausted",
        }
    }
}

/// A connection's status as the health JSON shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionStatus {
    /// Usable.
    Active,
    /// Cooling down until `rate_limited_until`.
    Unavailable,
    /// Terminal: banned.
    Banned,
    /// Terminal: credentials expired.
    Expired,
    /// Terminal: out of credits.
    CreditsExhausted,
}

impl ConnectionStatus {
    /// The name used in the health JSON and the store.
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionStatus::Active => "active",
            ConnectionStatus::Unavailable => "unavailable",
            ConnectionStatus::Banned => "banned",
            ConnectionStatus::Expired => "expired",
            ConnectionStatus::CreditsExhausted => "credits_exhausted",
        }
    }

    /// Parses the stored name; unknown names are treated as active.
    pub fn parse(s: &str) -> ConnectionStatus {
        match s {
            "unavailable" => ConnectionStatus::Unavailable,
            "banned" => ConnectionStatus::Banned,
            "expired" => ConnectionStatus::Expired,
            "credits_exhausted" => ConnectionStatus::CreditsExhausted,
            _ => ConnectionStatus::Active,
        }
    }
}

impl From<TerminalState> for ConnectionStatus {
    fn from(t: TerminalState) -> Self {
        match t {
            TerminalState::Banned => ConnectionStatus::Banned,
            TerminalState::Expired => ConnectionStatus::Expired,
            TerminalState::CreditsExhausted => ConnectionStatus::CreditsExhausted,
        }
    }
}

/// The instant `ms` after `now`, for times read from a snapshot or another replica: a value too
/// large to represent (a corrupt row, a bad message) is held at a year rather than overflow.
pub fn after(now: std::time::Instant, ms: u64) -> std::time::Instant {
    const YEAR: std::time::Duration = std::time::Duration::from_secs(366 * 86_400);
    let d = std::time::Duration::from_millis(ms).min(YEAR);
    now.checked_add(d).unwrap_or(now)
}

/// Saturating `base * 2^exp`, for backoff ladders that must never overflow.
pub fn scaled(base: std::time::Duration, exp: u32) -> std::time::Duration {
    let factor = 1u32.checked_shl(exp.min(31)).unwrap_or(u32::MAX);
    base.saturating_mul(factor)
}

/// `s.trim()`, without decoding characters when both ends are visible ASCII (model names and
/// header values nearly always are: nothing to trim then).
pub fn trim(s: &str) -> &str {
    match (s.as_bytes().first(), s.as_bytes().last()) {
        (Some(a), Some(z)) if a.is_ascii_graphic() && z.is_ascii_graphic() => s,
        _ => s.trim(),
    }
}

/// `a == b`, without a `memcmp` call for the short ids the engine compares on every decision
/// (providers, models, connection ids): up to 16 bytes are read as two overlapping words.
#[inline]
pub fn same_text(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => word4(a, 0) == word4(b, 0) && word4(a, n - 4) == word4(b, n - 4),
        8..=16 => word8(a, 0) == word8(b, 0) && word8(a, n - 8) == word8(b, n - 8),
        _ => a == b,
    }
}

/// Whether `s` holds an ASCII capital: eight bytes a step (a lockout key is lower-cased only
/// when it has one, and model names nearly never do).
#[inline]
pub fn has_ascii_upper(s: &str) -> bool {
    // Per byte, ignoring its top bit: +63 carries into the top bit from 'A' up, +37 from past
    // 'Z' up; a byte with its top bit set (UTF-8) is never a capital.
    fn any(w: u64) -> bool {
        const LOW: u64 = 0x7f7f_7f7f_7f7f_7f7f;
        let low = w & LOW;
        let from_a = low + 0x3f3f_3f3f_3f3f_3f3f;
        let past_z = low + 0x2525_2525_2525_2525;
        from_a & !past_z & !w & !LOW != 0
    }
    let b = s.as_bytes();
    let n = b.len();
    match n {
        0..=3 => b.iter().any(u8::is_ascii_uppercase),
        4..=7 => any(u64::from(word4(b, 0)) | u64::from(word4(b, n - 4)) << 32),
        _ => {
            let (words, _) = b.as_chunks::<8>();
            words.iter().any(|w| any(u64::from_ne_bytes(*w))) || any(word8(b, n - 8))
        }
    }
}

fn word4(s: &[u8], at: usize) -> u32 {
    s.get(at..at + 4).and_then(|w| w.try_into().ok()).map_or(0, u32::from_ne_bytes)
}

fn word8(s: &[u8], at: usize) -> u64 {
    s.get(at..at + 8).and_then(|w| w.try_into().ok()).map_or(0, u64::from_ne_bytes)
}

#[cfg(test)]
mod trim_tests {
    proptest::proptest! {
        /// The same as `str::trim` for any text, Unicode spaces and control characters included.
        #[test]
        fn trims_as_str_trim_does(parts in proptest::collection::vec(proptest::sample::select(
            vec![" ", "\t", "\u{b}", "\u{a0}", "\u{3000}", "a", "gpt-4o", "é", "\n", "~", "\u{7f}"]), 0..6)) {
            let s: String = parts.concat();
            proptest::prop_assert_eq!(super::trim(&s), s.trim());
        }

        /// The same as asking every byte, for any text (capitals, their neighbours '@' and
        /// '[', and multi-byte characters).
        #[test]
        fn has_ascii_upper_asks_every_byte(s in "[a-zA-Z@\\[z{`\u{e9}\u{c9}\u{100}0-9-]{0,20}") {
            proptest::prop_assert_eq!(super::has_ascii_upper(&s), s.bytes().any(|b| b.is_ascii_uppercase()));
        }

        /// The same as `==` for any two texts, of every length around the word sizes.
        #[test]
        fn same_text_is_equality(a in "[ab\u{e9}]{0,20}", b in "[ab\u{e9}]{0,20}", copy in proptest::bool::ANY) {
            let b = if copy { a.clone() } else { b };
            proptest::prop_assert_eq!(super::same_text(&a, &b), a == b);
        }
    }
}
