//! The one typed TOML config, its `env:NAME` secrets, and validation that reports every
//! problem at once.

use ferroute_core::settings::{ConfigError as CoreConfigError, FieldError, ResilienceSettings};
use ferroute_core::types::ProviderClass;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::net::SocketAddr;

pub use server::{DEFAULT_DATA_DIR, DEFAULT_LISTEN, DEFAULT_MAX_BODY_BYTES, ServerConfig, TlsRoots};

/// `[[keys]]`: a client key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    /// Name (logged instead of the key).
    pub id: String,
    /// The key (`env:NAME` reads a variable).
    pub key: String,
    /// Permissions such as `lease:exclusive`.
    #[serde(default)]
    pub permissions: Vec<String>,
    /// Connections this key may use (empty: all).
    #[serde(default)]
    pub allowed_connections: Vec<String>,
}

impl KeyConfig {
    /// Whether the key holds the permission exclusive leases need (M14).
    pub fn may_lease(&self) -> bool {
        self.permissions.iter().any(|p| p == ferroute_core::session::lease::PERMISSION)
    }

    /// Whether the key may lease `connection`: the permission, and the connection named in
    /// `allowed_connections` (leases need an explicit list).
    pub fn may_lease_connection(&self, connection: &str) -> bool {
        self.may_lease() && self.allowed_connections.iter().any(|c| c == connection)
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RawConfig {
    server: ServerConfig,
    keys: Vec<KeyConfig>,
    providers: Vec<ProviderConfig>,
    connections: Vec<ConnectionConfig>,
    combos: Vec<RawCombo>,
    emergency_fallback: EmergencyConfig,
    resilience: Option<toml::Value>,
    state: StateConfig,
    recording: RecordingConfig,
    telemetry: TelemetryConfig,
}

/// The loaded, validated config with secrets resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `[server]`, with `admin_key` resolved.
    pub server: ServerConfig,
    /// Client keys, resolved.
    pub keys: Vec<KeyConfig>,
    /// Providers.
    pub providers: Vec<ProviderConfig>,
    /// Connections, with `api_key` resolved.
    pub connections: Vec<ConnectionConfig>,
    /// Combos.
    pub combos: Vec<ComboConfig>,
    /// M16 emergency fallback.
    pub emergency_fallback: EmergencyConfig,
    /// Problems that do not stop the gateway (a provider without connections), for the log.
    pub warnings: Vec<String>,
    /// `[resilience]` over the environment's defaults.
    pub resilience: ResilienceSettings,
    /// `[state]`, with `url` resolved.
    pub state: StateConfig,
    /// `[recording]`: the flight recorder.
    pub recording: RecordingConfig,
    /// `[telemetry]`: OpenTelemetry export (header values resolved).
    pub telemetry: TelemetryConfig,
    /// Whether the built-in demo provider was added (no provider configured).
    pub demo: bool,
    /// Where each provider is in `providers`, and its connections' positions in
    /// `connections` (config order): a request's lookups cost the same with 1 provider or
    /// 1 000. Built once at load; providers and connections are not added or renamed after.
    index: index::Index,
}

impl Config {
    /// Parses and validates a config file's text. `env` looks up variables (for `env:NAME`
    /// secrets and `FERROUTE_…` settings overrides).
    pub fn from_toml_str(
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
        env_vars: &[(String, String)],
    ) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError(vec![err("config", e.to_string())]))?;
        Self::from_raw(raw, env, env_vars)
    }

    /// The embedded default: loopback, `./ferroute-data`, the built-in demo provider.
    pub fn embedded(
        env: &dyn Fn(&str) -> Option<String>,
        env_vars: &[(String, String)],
    ) -> Result<Config, ConfigError> {
        let raw = RawConfig {
            server: ServerConfig {
                admin_key: env("FERROUTE_ADMIN_KEY").map(|_| "env:FERROUTE_ADMIN_KEY".to_owned()),
                ..ServerConfig::default()
            },
            ..RawConfig::default()
        };
        Self::from_raw(raw, env, env_vars)
    }

    fn from_raw(
        mut raw: RawConfig,
        env: &dyn Fn(&str) -> Option<String>,
        env_vars: &[(String, String)],
    ) -> Result<Config, ConfigError> {
        let mut errors = Vec::new();
        let resilience = resilience_of(&mut raw, env_vars, &mut errors);
        let demo = raw.providers.is_empty();
        if demo {
            let (providers, connections, combo) = demo::parts();
            raw.providers.extend(providers);
            raw.connections.extend(connections);
            raw.combos.push(combo);
        }
        let oauth_of: Vec<_> = raw.connections.iter().map(|c| (c.provider.as_str(), c.oauth.as_ref())).collect();
        oauth::fill_base_urls(raw.providers.iter_mut().map(|p| (p.id.as_str(), &mut p.base_url)), &oauth_of);
        resolve_env(&mut raw, &mut Resolver { env, errors: &mut errors });
        let combos = raw.combos.iter().enumerate().map(|(i, c)| combo(i, c, &mut errors)).collect();
        let mut config = Config {
            server: raw.server,
            keys: raw.keys,
            providers: raw.providers,
            connections: raw.connections,
            combos,
            emergency_fallback: raw.emergency_fallback,
            warnings: Vec::new(),
            resilience,
            state: raw.state,
            recording: raw.recording,
            telemetry: raw.telemetry,
            demo,
            index: index::Index::default(),
        };
        config.index = index::Index::new(&config.providers, &config.connections);
        config.warnings = config.warnings();
        config.validate_into(&mut errors);
        if errors.is_empty() { Ok(config) } else { Err(ConfigError(errors)) }
    }

    fn validate_into(&self, errors: &mut Vec<FieldError>) {
        self.state.validate_into(errors);
        self.recording.validate_into(errors);
        self.telemetry.validate_into(errors);
        self.validate_server(errors);
        self.validate_keys(errors);
        provider::validate(&self.providers, errors);
        let mut ids = BTreeSet::new();
        for (i, c) in self.connections.iter().enumerate() {
            if !ids.insert(c.id.clone()) {
                errors.push(err(format!("connections[{i}].id"), format!("duplicate connection id {:?}", c.id)));
            }
            self.validate_connection(i, c, errors);
        }
        let sections = combos::Sections {
            combos: &self.combos,
            providers: &self.providers,
            connections: &self.connections,
            emergency_fallback: &self.emergency_fallback,
        };
        combos::validate(&sections, errors);
    }

    /// `[server]`.
    fn validate_server(&self, errors: &mut Vec<FieldError>) {
        if self.server.listen.parse::<SocketAddr>().is_err() {
            errors.push(err(
                "server.listen",
                format!("{:?} is not an address such as 127.0.0.1:8787", self.server.listen),
            ));
        }
        if let Some(key) = &self.server.secret_key
            && let Err(e) = crate::sessions::sealed::Sealer::new(Some(key))
        {
            errors.push(err("server.secret_key", e.to_string()));
        }
        if self.server.data_dir.trim().is_empty() {
            errors.push(err("server.data_dir", "must not be empty"));
        }
        if !(1024..=1 << 30).contains(&self.server.max_body_bytes) {
            errors.push(err(
                "server.max_body_bytes",
                format!("{} is out of range (allowed 1024..=1073741824)", self.server.max_body_bytes),
            ));
        }
        if !(100..=3_600_000).contains(&self.server.body_read_timeout_ms) {
            errors.push(err("server.body_read_timeout_ms", "is out of range (allowed 100..=3600000)"));
        }
        if self.server.shutdown_grace_ms > 3_600_000 {
            errors.push(err("server.shutdown_grace_ms", "is out of range (at most 3600000)"));
        }
        if self.server.unready_delay_ms > 600_000 {
            errors.push(err("server.unready_delay_ms", "is out of range (at most 600000)"));
        }
        if let Some(ca) = self.server.extra_ca.as_deref().filter(|p| !std::path::Path::new(p).is_file()) {
            errors.push(err("server.extra_ca", format!("{ca:?} is not a readable file")));
        }
        if let Some(Err(e)) = self.server.tls.as_ref().map(tls::server_config) {
            errors.push(err("server.tls", e));
        }
    }

    /// `[[keys]]`: ids unique, keys long enough, allowed connections configured.
    fn validate_keys(&self, errors: &mut Vec<FieldError>) {
        let mut seen = BTreeSet::new();
        for (i, k) in self.keys.iter().enumerate() {
            if k.id.trim().is_empty() {
                errors.push(err(format!("keys[{i}].id"), "must not be empty"));
            }
            if !seen.insert(k.id.clone()) {
                errors.push(err(format!("keys[{i}].id"), format!("duplicate key id {:?}", k.id)));
            }
            if k.key.len() < 8 && !k.key.is_empty() {
                errors.push(err(format!("keys[{i}].key"), "must be at least 8 characters"));
            }
            for c in &k.allowed_connections {
                if !self.connections.iter().any(|x| &x.id == c) {
                    errors.push(err(format!("keys[{i}].allowed_connections"), format!("unknown connection {c:?}")));
                }
            }
        }
    }

    /// Connection `i` (its id's uniqueness is checked by the caller).
    fn validate_connection(&self, i: usize, c: &ConnectionConfig, errors: &mut Vec<FieldError>) {
        if let Some(Err(e)) = c.proxy.as_deref().map(proxy::Via::parse) {
            errors.push(err(format!("connections[{i}].proxy"), e));
        }
        let f = |x: &str| format!("connections[{i}].{x}");
        if c.id.trim().is_empty() {
            errors.push(err(f("id"), "must not be empty"));
        }
        match self.providers.iter().find(|p| p.id == c.provider) {
            None => errors.push(err(f("provider"), format!("unknown provider {:?}", c.provider))),
            Some(p)
                if p.class != ProviderClass::Local
                    && c.api_key.as_deref().unwrap_or("").is_empty()
                    && c.oauth.is_none() =>
            {
                errors.push(err(f("api_key"), format!("provider {:?} is not local and needs a credential", p.id)));
            }
            Some(_) => {}
        }
        if let Some(o) = &c.oauth {
            let format = self.providers.iter().find(|p| p.id == c.provider).map(|p| p.format);
            oauth::validate(i, o, format, c.api_key.is_some(), errors);
        }
        if let Some(ip) = &c.egress_ip
            && ip.parse::<std::net::IpAddr>().is_err()
        {
            errors.push(err(f("egress_ip"), format!("{ip:?} is not an IP address")));
        }
        if let Some(u) = &c.usage_limit {
            let format = self.providers.iter().find(|p| p.id == c.provider).map(|p| p.format);
            if u.options().any() && format.is_some_and(|f| f != Format::Anthropic) {
                errors.push(err(f("usage_limit"), "applies to anthropic-format providers only"));
            }
            if u.limit_reset && u.organization.as_deref().is_none_or(|o| o.trim().is_empty()) {
                errors.push(err(f("usage_limit.organization"), "is needed when limit_reset is on"));
            }
            if let Some(o) = &u.organization
                && !o.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '-')
            {
                errors.push(err(f("usage_limit.organization"), format!("{o:?} is not an organization UUID")));
            }
            if let Some(url) = &u.reset_base_url {
                match url.parse::<http::Uri>() {
                    Ok(x) if matches!(x.scheme_str(), Some("http" | "https")) && x.host().is_some() => {}
                    _ => errors.push(err(f("usage_limit.reset_base_url"), format!("{url:?} is not an http(s) URL"))),
                }
            }
        }
        if c.weight.is_some_and(|w| w > 1000) {
            errors.push(err(f("weight"), "is out of range (allowed 0..=1000)"));
        }
        if c.max_concurrent == Some(0) {
            errors.push(err(f("max_concurrent"), "must be at least 1 (leave it out for unlimited)"));
        }
        if let Some(q) = &c.request_queue {
            for (name, v) in [
                ("max_wait_ms", q.max_wait_ms),
                ("execution_max_wait_ms", q.execution_max_wait_ms),
                ("max_queue_depth", q.max_queue_depth),
                ("concurrent_requests", q.concurrent_requests),
            ] {
                if v.is_some_and(|v| v < 0) {
                    errors.push(err(f(&format!("request_queue.{name}")), "must not be negative"));
                }
            }
        }
    }

    /// Problems that do not stop the gateway.
    fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for p in &self.providers {
            if !self.connections.iter().any(|c| c.provider == p.id) {
                out.push(format!(
                    "provider {:?} has no [[connections]]: requests for it answer 404 no_executable_targets until one is added",
                    p.id
                ));
            }
        }
        if self.server.secret_key.is_none() && self.connections.iter().any(|c| c.oauth.is_some()) {
            out.push(format!(
                "OAuth connections without [server] secret_key: their tokens are stored unencrypted in state.db{} \
                     (set secret_key = \"env:NAME\" to 32 bytes in base64, e.g. from `openssl rand -base64 32`, \
                     the same on every replica)",
                if self.state.backend == Backend::Redis { " and in Redis" } else { "" }
            ));
        }
        out.extend(self.shared_subscriptions());
        out
    }

    /// A subscription account (an OAuth connection) that more than one client key may use: a
    /// subscription belongs to one subscriber (docs/subscription-terms.md). Restricting it with
    /// `allowed_connections` on one key answers it.
    fn shared_subscriptions(&self) -> Vec<String> {
        let mut out = Vec::new();
        for c in self.connections.iter().filter(|c| c.oauth.is_some()) {
            let keys: Vec<&str> = self
                .keys
                .iter()
                .filter(|k| k.allowed_connections.is_empty() || k.allowed_connections.contains(&c.id))
                .map(|k| k.id.as_str())
                .collect();
            if keys.len() > 1 {
                out.push(format!(
                    "subscription connection {:?} can serve {} client keys ({}): a subscription's terms reserve it for its \
                     subscriber (docs/subscription-terms.md); name it in allowed_connections of one key only",
                    c.id,
                    keys.len(),
                    keys.join(", ")
                ));
            }
        }
        out
    }

    /// The provider with this id.
    pub fn provider(&self, id: &str) -> Option<&ProviderConfig> {
        self.provider_position(id).map(|i| &self.providers[i])
    }

    /// Where the provider with this id is in `providers` (the first, should ids repeat).
    pub fn provider_position(&self, id: &str) -> Option<usize> {
        self.index.provider_position(&self.providers, id)
    }

    /// The positions in `connections` of a provider's connections, in config order.
    pub fn connections_of(&self, provider: usize) -> &[usize] {
        self.index.connections_of(provider)
    }

    /// Where the first provider that lists `model` is in `providers`.
    pub fn provider_serving(&self, model: &str) -> Option<usize> {
        self.index.provider_serving(&self.providers, model)
    }
}

fn core_errors(e: CoreConfigError, prefix: &str) -> Vec<FieldError> {
    match e {
        CoreConfigError::Parse(m) => vec![err(prefix, m)],
        CoreConfigError::Invalid(v) => v,
    }
}

/// The resilience settings: the defaults, the `FERROUTE_…` variables over them, the file's
/// `[resilience]` over those; the defaults (and the problems in `errors`) when they do not load.
fn resilience_of(
    raw: &mut RawConfig,
    env_vars: &[(String, String)],
    errors: &mut Vec<FieldError>,
) -> ResilienceSettings {
    let base = ResilienceSettings::default().with_env(env_vars.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let resilience = match base {
        Ok(base) => match raw.resilience.take() {
            Some(table) => base.overlay_toml(table).map_err(|e| core_errors(e, "resilience")),
            None => Ok(base),
        },
        Err(e) => Err(core_errors(e, "environment")),
    };
    resilience.unwrap_or_else(|e| {
        errors.extend(e);
        ResilienceSettings::default()
    })
}

/// Reads `env:NAME` values; an unset variable is an error naming the field.
struct Resolver<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    errors: &'a mut Vec<FieldError>,
}

impl Resolver<'_> {
    fn resolve(&mut self, field: String, value: &str) -> Option<String> {
        let Some(name) = value.strip_prefix("env:") else { return Some(value.to_owned()) };
        match (self.env)(name) {
            Some(v) if !v.is_empty() => Some(v),
            _ => {
                self.errors.push(err(field, format!("environment variable {name} is not set")));
                None
            }
        }
    }
}

/// Every secret and `env:` value of `raw`, read in place (an unresolved one is reported once,
/// as unset, and left empty rather than reported again as missing).
fn resolve_env(raw: &mut RawConfig, r: &mut Resolver<'_>) {
    raw.server.admin_key = raw.server.admin_key.take().and_then(|k| r.resolve("server.admin_key".into(), &k));
    raw.server.secret_key = raw.server.secret_key.take().and_then(|k| r.resolve("server.secret_key".into(), &k));
    for (i, k) in raw.keys.iter_mut().enumerate() {
        k.key = r.resolve(format!("keys[{i}].key"), &k.key).unwrap_or_default();
    }
    for (i, c) in raw.connections.iter_mut().enumerate() {
        c.api_key = c.api_key.take().and_then(|k| r.resolve(format!("connections[{i}].api_key"), &k));
        c.proxy = c.proxy.take().and_then(|v| r.resolve(format!("connections[{i}].proxy"), &v));
        if let Some(o) = &mut c.oauth {
            o.access_token =
                r.resolve(format!("connections[{i}].oauth.access_token"), &o.access_token).unwrap_or_default();
            o.refresh_token =
                r.resolve(format!("connections[{i}].oauth.refresh_token"), &o.refresh_token).unwrap_or_default();
        }
    }
    for (i, p) in raw.providers.iter_mut().enumerate() {
        p.proxy = p.proxy.take().and_then(|v| r.resolve(format!("providers[{i}].proxy"), &v));
    }
    raw.state.url = raw.state.url.take().map(|u| r.resolve("state.url".into(), &u).unwrap_or_default());
    for (k, v) in raw.telemetry.headers.iter_mut() {
        let value = r.resolve(format!("telemetry.headers.{k}"), v).unwrap_or_default();
        *v = value;
    }
}

mod combos;
mod connection;
pub mod demo;
mod error;
mod index;
pub mod oauth;
mod provider;
pub mod proxy;
mod recording;
mod server;
mod state;
mod telemetry;
pub mod tls;

pub use connection::{ConnectionConfig, UsageLimitConfig};
use error::err;
pub use error::{ConfigError, field_error};
pub use oauth::OAuthConfig;
pub use provider::{Format, ProviderConfig};
pub use recording::RecordingConfig;
pub use state::{Backend, StateConfig};
pub use telemetry::TelemetryConfig;

pub use combos::{ComboConfig, ComboTarget, EmergencyConfig, MAX_COMBO_DEPTH, MULTI_CALL};
use combos::{RawCombo, combo};

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
