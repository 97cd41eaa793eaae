//! `[[connections]]`: one key or account of a provider, and what its usage-limit 429 may
//! trigger.

use super::oauth::OAuthConfig;
use ferroute_core::admission::QueueOverride;
use serde::{Deserialize, Serialize};

/// `[[connections]]`: one key or account of a provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionConfig {
    /// Id.
    pub id: String,
    /// The provider id.
    pub provider: String,
    /// Credential (`env:NAME` reads a variable); local providers may have none.
    #[serde(default)]
    pub api_key: Option<String>,
    /// Concurrent requests allowed (empty = unlimited).
    #[serde(default)]
    pub max_concurrent: Option<u32>,
    /// Never cool this connection down (terminal states still apply).
    #[serde(default)]
    pub disable_cooling: bool,
    /// Per-connection queue overrides.
    #[serde(default)]
    pub request_queue: Option<QueueOverride>,
    /// Weight among the provider's connections (`connection_strategy = "weighted"`; 1).
    #[serde(default)]
    pub weight: Option<u32>,
    /// M13: the source IP this connection's requests leave from, when known (siblings with
    /// the same IP share an IP-bucketed quota). Without it the last observed local address is
    /// used.
    #[serde(default)]
    pub egress_ip: Option<String>,
    /// M4: Claude usage-limit handling (anthropic-format providers; both off by default).
    #[serde(default)]
    pub usage_limit: Option<UsageLimitConfig>,
    /// A subscription account signed in with OAuth, instead of an `api_key`.
    #[serde(default)]
    pub oauth: Option<OAuthConfig>,
    /// The egress proxy this connection's requests leave through, instead of its provider's
    /// (`http://[user:pass@]host:port`, `socks5://…`, `socks5h://…`, `env:NAME`, or `none`).
    #[serde(default)]
    pub proxy: Option<String>,
}

/// `[connections.usage_limit]`: what a Claude subscription's usage-limit 429 may trigger.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageLimitConfig {
    /// Accept the low-priority offer and keep sending on this account with
    /// `anthropic-usage-limit: slow` until the window resets.
    #[serde(default)]
    pub low_priority_lane: bool,
    /// Try the once-a-week session-limit reset first (needs `organization`).
    #[serde(default)]
    pub limit_reset: bool,
    /// Base URL of the usage and reset endpoints (default `https://api.anthropic.com`).
    #[serde(default)]
    pub reset_base_url: Option<String>,
    /// The account's organization UUID (the reset endpoint's path).
    #[serde(default)]
    pub organization: Option<String>,
}

impl UsageLimitConfig {
    /// What the core is asked to do.
    pub fn options(&self) -> ferroute_core::usage_limit::Options {
        ferroute_core::usage_limit::Options { lane: self.low_priority_lane, reset: self.limit_reset }
    }

    /// The usage/reset endpoints' base URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        self.reset_base_url
            .as_deref()
            .unwrap_or(ferroute_core::usage_limit::reset::DEFAULT_BASE_URL)
            .trim_end_matches('/')
    }
}
