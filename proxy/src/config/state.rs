//! `[state]`: where resilience state lives. `sqlite` (the default) keeps it in the embedded
//! store of this gateway alone; `redis` also shares it with every replica that names the same
//! Redis server and prefix (see `crate::replicas::follow`).

use super::error::err;
use ferroute_core::settings::FieldError;
use serde::{Deserialize, Serialize};

/// The state backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// This gateway's embedded SQLite store only.
    #[default]
    Sqlite,
    /// The embedded store, plus breakers, cooldowns, terminal states and model lockouts shared
    /// with the other replicas through Redis.
    Redis,
}

/// `[state]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StateConfig {
    /// `sqlite` or `redis`.
    pub backend: Backend,
    /// The Redis server, `redis://host:port[/db]` (`env:NAME` reads a variable; it may carry a
    /// password). Required with `backend = "redis"`.
    pub url: Option<String>,
    /// Prefix of every Redis key and channel: replicas sharing one prefix share their state.
    pub prefix: String,
    /// This replica's name in the shared state (defaults to a random one per start).
    pub replica: Option<String>,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig { backend: Backend::Sqlite, url: None, prefix: "ferroute".into(), replica: None }
    }
}

impl StateConfig {
    pub(super) fn validate_into(&self, errors: &mut Vec<FieldError>) {
        let prefix_ok = !self.prefix.is_empty()
            && self.prefix.len() <= 64
            && self.prefix.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
        if !prefix_ok {
            errors.push(err("state.prefix", "must be 1 to 64 characters of letters, digits, '-', '_', '.' or ':'"));
        }
        if self.replica.as_deref().is_some_and(|r| r.trim().is_empty() || r.len() > 64) {
            errors.push(err("state.replica", "must be 1 to 64 characters"));
        }
        match (self.backend, self.url.as_deref()) {
            (Backend::Redis, None) => {
                errors.push(err("state.url", "is required with backend = \"redis\" (e.g. redis://127.0.0.1:6379)"));
            }
            (Backend::Redis, Some("")) => {} // an unset `env:` variable, already reported
            (Backend::Redis, Some(url)) => {
                if let Err(e) = redis::Client::open(url) {
                    errors.push(err("state.url", format!("is not a Redis URL: {e}")));
                }
            }
            (Backend::Sqlite, Some(_)) => {
                errors.push(err("state.url", "is only read with backend = \"redis\""));
            }
            (Backend::Sqlite, None) => {}
        }
    }
}
