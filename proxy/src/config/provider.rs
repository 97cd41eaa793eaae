//! `[[providers]]`: an upstream's wire format, class, models and the settings routing and
//! resilience read per provider, and their validation.

use super::error::err;
use ferroute_core::calendar::DailyReset;
use ferroute_core::settings::FieldError;
use ferroute_core::strategy::Strategy;
use ferroute_core::types::ProviderClass;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

pub use ferroute_core::types::Format;

/// `[[providers]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// Id, the prefix of `provider/model`.
    pub id: String,
    /// Wire format.
    #[serde(default = "default_format")]
    pub format: Format,
    /// Base URL (`…/v1`). May be left out for a provider whose connections use an OAuth
    /// preset: the preset's backend (`codex`: `https://chatgpt.com/backend-api/codex`).
    #[serde(default)]
    pub base_url: String,
    /// Class: selects breaker and cooldown defaults.
    #[serde(default = "default_class")]
    pub class: ProviderClass,
    /// Models it serves.
    #[serde(default)]
    pub models: Vec<String>,
    /// The error-rule profile (defaults to one the format and class imply), e.g. `agentrouter`
    /// for a gateway that misreports quota errors as 403.
    #[serde(default)]
    pub profile: Option<String>,
    /// Time allowed until response headers; none by default (the execution budget applies).
    #[serde(default)]
    pub start_timeout_ms: Option<u64>,
    /// How to choose among this provider's connections: priority (config order, the
    /// default), weighted, fill-first, round-robin, p2c, random, least-used, strict-random.
    #[serde(default)]
    pub connection_strategy: Option<String>,
    /// M13: the free tier is bucketed by source IP, so a quota or rate-limit 429 on one
    /// connection cools every sibling connection that leaves from the same egress IP.
    #[serde(default)]
    pub egress_ip_lock: bool,
    /// M6: models that draw on one quota, by family name (`codex = ["gpt-5.6-luna",
    /// "gpt-5.6-sol"]`): a quota or permission failure (429, 403, 402) of one model locks every
    /// model of its family on that connection. A model in no family is its own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub quota_families: BTreeMap<String, Vec<String>>,
    /// Where the provider's daily quotas reset, at midnight: `UTC`, `America/Los_Angeles` or
    /// `UTC±HH:MM`. Defaults to `America/Los_Angeles` for the `gemini` format (Google resets
    /// Gemini's daily quotas at midnight Pacific), `UTC` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily_quota_reset: Option<String>,
    /// The egress proxy its connections' requests leave through (`http://[user:pass@]host:port`,
    /// `socks5://…`, `socks5h://…`, `env:NAME`, or `none`); without one, `[server]
    /// proxy_from_env` decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,
}

fn default_format() -> Format {
    Format::Openai
}

fn default_class() -> ProviderClass {
    ProviderClass::ApiKey
}

impl ProviderConfig {
    /// The parsed `connection_strategy` (priority when absent; validation rejects others).
    pub fn connection_strategy(&self) -> Strategy {
        self.connection_strategy.as_deref().and_then(Strategy::parse).unwrap_or_default()
    }

    /// The rule profile: the declared one, else the one the format and class imply (never the
    /// id an operator chose): `gemini` for a Gemini-format provider (whose errors are Google's),
    /// `claude` for an Anthropic-format OAuth provider (a Claude subscription), `codex` for a
    /// Responses-format OAuth provider (ChatGPT's Codex backend), else the format's name.
    pub fn profile(&self) -> &str {
        match &self.profile {
            Some(p) => p,
            None => ferroute_core::classify::default_profile(self.format, self.class),
        }
    }

    /// Where the provider's day ends (validation rejects what does not parse).
    pub fn daily_reset(&self) -> DailyReset {
        match (self.daily_quota_reset.as_deref().and_then(DailyReset::parse), self.format) {
            (Some(z), _) => z,
            (None, Format::Gemini) => DailyReset::UsPacific,
            (None, _) => DailyReset::Utc,
        }
    }

    /// The quota family `model` belongs to, if one names it (model names compare without
    /// regard to ASCII case).
    pub fn quota_family(&self, model: &str) -> Option<&str> {
        let model = model.trim();
        self.quota_families
            .iter()
            .find(|(_, models)| models.iter().any(|m| m.trim().eq_ignore_ascii_case(model)))
            .map(|(family, _)| family.as_str())
    }
}

/// Every provider's errors, named by field (`providers[i].…`).
pub(super) fn validate(providers: &[ProviderConfig], errors: &mut Vec<FieldError>) {
    let mut ids = BTreeSet::new();
    for (i, p) in providers.iter().enumerate() {
        let f = |x: &str| format!("providers[{i}].{x}");
        if p.id.trim().is_empty() || p.id.contains('/') {
            errors.push(err(f("id"), "must be non-empty and contain no '/'"));
        }
        if !ids.insert(p.id.clone()) {
            errors.push(err(f("id"), format!("duplicate provider id {:?}", p.id)));
        }
        match p.base_url.parse::<http::Uri>() {
            Ok(u) if matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some() => {}
            _ if p.base_url.is_empty() => errors.push(err(
                f("base_url"),
                "is required (only a provider whose connections use an OAuth preset has a default)",
            )),
            _ => errors.push(err(f("base_url"), format!("{:?} is not an http(s) URL", p.base_url))),
        }
        if let Some(Err(e)) = p.proxy.as_deref().map(super::proxy::Via::parse) {
            errors.push(err(f("proxy"), e));
        }
        if let Some(cs) = &p.connection_strategy {
            match Strategy::parse(cs) {
                Some(s) if s.for_connections() => {}
                _ => errors.push(err(
                    f("connection_strategy"),
                    format!(
                        "{cs:?} is not a connection strategy ({})",
                        Strategy::FOR_CONNECTIONS.map(|s| s.as_str()).join(", ")
                    ),
                )),
            }
        }
        if let Some(z) = p.daily_quota_reset.as_deref().filter(|z| DailyReset::parse(z).is_none()) {
            errors.push(err(
                f("daily_quota_reset"),
                format!("{z:?} is not a zone Ferroute knows: UTC, America/Los_Angeles or UTC±HH:MM"),
            ));
        }
        if p.start_timeout_ms == Some(0) {
            errors.push(err(f("start_timeout_ms"), "must be positive when set"));
        }
        let mut in_family: BTreeMap<String, &str> = BTreeMap::new();
        for (family, models) in &p.quota_families {
            let at = f(&format!("quota_families.{family}"));
            if family.trim().is_empty() {
                errors.push(err(at.clone(), "a family needs a name"));
            }
            if models.is_empty() {
                errors.push(err(at.clone(), "a family needs at least one model"));
            }
            for m in models {
                match in_family.insert(m.trim().to_ascii_lowercase(), family) {
                    Some(other) if other != family => {
                        errors.push(err(at.clone(), format!("model {m:?} is already in quota family {other:?}")))
                    }
                    Some(_) => errors.push(err(at.clone(), format!("model {m:?} is listed twice"))),
                    None if m.trim().is_empty() => errors.push(err(at.clone(), "a model name must not be empty")),
                    None => {}
                }
            }
        }
    }
}
