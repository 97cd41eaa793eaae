//! `[connections.oauth]`: a subscription account signed in with OAuth, and the presets that
//! say how each provider's official client refreshes and sends its tokens.

use super::error::err;
use super::provider::Format;
use ferroute_core::oauth::{DEFAULT_REFRESH_AT, Lifetime};
use ferroute_core::settings::FieldError;
use serde::{Deserialize, Serialize};

/// `oauth = { preset, access_token, refresh_token, expires_at, … }` on a connection. Its
/// `Debug` never shows a token.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    /// `claude` or `codex`: how the tokens are refreshed and sent.
    pub preset: String,
    /// The access token (`env:NAME` reads a variable).
    pub access_token: String,
    /// The refresh token (`env:NAME` reads a variable). A different one than the store holds
    /// is a new sign-in of the same connection.
    pub refresh_token: String,
    /// When the access token expires (Unix ms).
    pub expires_at: u64,
    /// The token endpoint, instead of the preset's.
    #[serde(default)]
    pub token_url: Option<String>,
    /// The OAuth client id, instead of the preset's.
    #[serde(default)]
    pub client_id: Option<String>,
    /// The share of a token's lifetime after which it is refreshed (0.8).
    #[serde(default)]
    pub refresh_at: Option<f64>,
    /// The ChatGPT account id the `codex` preset sends (`chatgpt-account-id`).
    #[serde(default)]
    pub account_id: Option<String>,
}

impl std::fmt::Debug for OAuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthConfig")
            .field("preset", &self.preset)
            .field("access_token", &"<redacted>")
            .field("refresh_token", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .field("token_url", &self.token_url)
            .field("client_id", &self.client_id)
            .field("refresh_at", &self.refresh_at)
            .field("account_id", &self.account_id)
            .finish()
    }
}

impl OAuthConfig {
    /// The preset named, if it is one.
    pub fn preset(&self) -> Option<&'static Preset> {
        PRESETS.iter().find(|p| p.name == self.preset)
    }

    /// The token endpoint.
    pub fn token_url(&self) -> &str {
        self.token_url.as_deref().or(self.preset().map(|p| p.token_url)).unwrap_or_default()
    }

    /// The OAuth client id.
    pub fn client_id(&self) -> &str {
        self.client_id.as_deref().or(self.preset().map(|p| p.client_id)).unwrap_or_default()
    }

    /// The lifetime of the tokens this table names, seen at `now_ms`: issued then (their issue
    /// time is not known), or at their expiry when that has passed.
    pub fn lifetime(&self, now_ms: u64) -> Lifetime {
        Lifetime { issued_at_ms: now_ms.min(self.expires_at), expires_at_ms: self.expires_at }
    }

    /// The share of the lifetime after which a token is refreshed.
    pub fn refresh_at(&self) -> f64 {
        self.refresh_at.unwrap_or(DEFAULT_REFRESH_AT)
    }
}

/// How one provider's official client refreshes and sends its tokens. Both send the refresh
/// request as JSON (`grant_type=refresh_token`, the refresh token, the client id and, for
/// Codex, the scope), and the access token as `Authorization: Bearer`.
#[derive(Debug, PartialEq, Eq)]
pub struct Preset {
    /// Its name in the config.
    pub name: &'static str,
    /// The provider format its upstream speaks.
    pub format: Format,
    /// The token endpoint.
    pub token_url: &'static str,
    /// The OAuth client id of the official client.
    pub client_id: &'static str,
    /// The `scope` the refresh request names, if any.
    pub scope: Option<&'static str>,
    /// Merged into the request's `anthropic-beta`.
    pub beta: Option<&'static str>,
    /// The header that carries the account id, if the backend expects one.
    pub account_header: Option<&'static str>,
    /// The `base_url` of a provider whose connections use this preset, when it names none:
    /// the backend the official client reaches with this sign-in.
    pub base_url: &'static str,
    /// Whether requests are shaped for ChatGPT's Codex backend (its headers and request rules;
    /// see `request/codex.rs`).
    pub codex_backend: bool,
}

/// The presets: Claude Code's and Codex's sign-in.
pub const PRESETS: [Preset; 2] = [
    Preset {
        name: "claude",
        format: Format::Anthropic,
        token_url: "https://console.anthropic.com/v1/oauth/token",
        client_id: "9d1c250a-e61b-44d9-88ed-5944d1962f5e",
        scope: None,
        beta: Some("oauth-2025-04-20"),
        account_header: None,
        base_url: "https://api.anthropic.com/v1",
        codex_backend: false,
    },
    Preset {
        name: "codex",
        // ChatGPT's Codex backend, which Codex reaches with a ChatGPT sign-in, speaks the
        // Responses API (docs/codex-backend.md names the sources).
        format: Format::Responses,
        token_url: "https://auth.openai.com/oauth/token",
        client_id: "app_EMoamEEZ73f0CkXaXp7hrann",
        scope: Some("openid profile email"),
        beta: None,
        account_header: Some("chatgpt-account-id"),
        base_url: "https://chatgpt.com/backend-api/codex",
        codex_backend: true,
    },
];

/// Gives each provider (id, `base_url`) that names no `base_url` its connections' preset
/// backend, when they are OAuth connections (provider id, `oauth`) of one preset.
pub(super) fn fill_base_urls<'a>(
    providers: impl Iterator<Item = (&'a str, &'a mut String)>,
    connections: &[(&str, Option<&OAuthConfig>)],
) {
    for (id, base_url) in providers.filter(|(_, b)| b.is_empty()) {
        let mut presets = connections.iter().filter(|(p, _)| *p == id).map(|(_, o)| o.map(|o| o.preset()));
        let Some(Some(Some(first))) = presets.next() else { continue };
        if presets.all(|o| o == Some(Some(first))) {
            *base_url = first.base_url.to_owned();
        }
    }
}

/// Problems with connection `i`'s `oauth` table, for a provider of `format`.
pub(super) fn validate(i: usize, o: &OAuthConfig, format: Option<Format>, has_key: bool, errors: &mut Vec<FieldError>) {
    let f = |x: &str| format!("connections[{i}].oauth.{x}");
    if has_key {
        errors.push(err(format!("connections[{i}].api_key"), "a connection has an api_key or oauth, not both"));
    }
    match o.preset() {
        None => errors.push(err(
            f("preset"),
            format!(
                "unknown preset {:?} (known: {})",
                o.preset,
                PRESETS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
            ),
        )),
        Some(p) if format.is_some_and(|x| x != p.format) => {
            let needs = p.format.name();
            errors.push(err(f("preset"), format!("the {} preset needs a provider of format = \"{needs}\"", p.name)));
        }
        Some(_) => {}
    }
    for (name, v) in [("access_token", &o.access_token), ("refresh_token", &o.refresh_token)] {
        if v.trim().is_empty() {
            errors.push(err(f(name), "must not be empty"));
        } else if v.chars().any(|c| c.is_control() || c == ' ') {
            errors.push(err(f(name), "must not contain spaces or control characters"));
        }
    }
    if o.expires_at == 0 {
        errors.push(err(f("expires_at"), "must be the access token's expiry in Unix milliseconds"));
    } else if o.expires_at < 1_000_000_000_000 {
        errors.push(err(f("expires_at"), "looks like seconds: give Unix milliseconds"));
    }
    match o.token_url().parse::<http::Uri>() {
        Ok(u) if matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some() => {}
        _ => errors.push(err(f("token_url"), format!("{:?} is not an http(s) URL", o.token_url()))),
    }
    if o.client_id().trim().is_empty() {
        errors.push(err(f("client_id"), "must not be empty"));
    }
    if o.refresh_at.is_some_and(|r| !(r > 0.0 && r < 1.0)) {
        errors.push(err(f("refresh_at"), "must be between 0 and 1 (the share of the token's lifetime)"));
    }
    if let Some(a) = &o.account_id
        && (a.trim().is_empty() || a.chars().any(|c| c.is_control()))
    {
        errors.push(err(f("account_id"), "must be a header value"));
    }
}
