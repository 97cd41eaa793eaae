//! Hot reload: SIGHUP or `POST /api/config/reload` loads the config again and, when it is
//! valid, swaps it in without a restart.
//!
//! - An invalid config is refused with every problem, and the running one stays.
//! - Each request takes the gateway current when it arrives and keeps it to its end, so
//!   requests and streams in flight finish on the config they started with.
//! - The new gateway shares the old one's state (see [`Gateway::successor`]): breakers,
//!   connection states, lockouts and pins carry over by id. Two exceptions start fresh: a
//!   provider whose upstream changed (`base_url` or `format`) gets a closed breaker, and a
//!   connection whose credentials or provider changed loses its cooldown, terminal state and
//!   model lockouts, since they were earned by another key or another upstream.
//! - `server.listen` and `server.data_dir` are bound at start: a change is reported and takes
//!   effect at the next restart.

use crate::config::{Config, ConfigError, ConnectionConfig, ProviderConfig};
use crate::state::gateway::Gateway;
use hyper_util::client::legacy::connect::Connect;
use serde::Serialize;
use std::sync::{Arc, Mutex, RwLock};

/// Loads the config from where the gateway got it (the file, the environment, the command
/// line), every problem in the error.
pub type Loader = Box<dyn Fn() -> Result<Config, ConfigError> + Send + Sync>;

/// The gateway being served, swapped whole by a reload.
pub struct Serving<C> {
    current: RwLock<Arc<Gateway<C>>>,
    loader: Option<Loader>,
    // One reload (or settings change) at a time: two racing reloads would each diff against
    // the same old config.
    reloading: Mutex<()>,
    /// The operator's runtime overrides of `[resilience]` (see [`crate::ops::settings`]).
    pub(super) overrides: Mutex<crate::ops::overrides::Overrides>,
    /// Set once shutdown began: readiness is off from then on.
    draining: std::sync::atomic::AtomicBool,
    /// `[server] tls`: the certificate new connections get, read again on every reload.
    tls: RwLock<Option<tokio_rustls::TlsAcceptor>>,
}

/// What a reload changed, by id.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Changes {
    /// In the new config only.
    pub added: Vec<String>,
    /// In the old config only (their state is kept in case they come back, but nothing routes
    /// to them and health no longer lists them).
    pub removed: Vec<String>,
    /// In both, with different settings.
    pub changed: Vec<String>,
    /// Of `changed`, those whose state was reset.
    pub reset: Vec<String>,
}

/// The outcome of an accepted reload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// `"reloaded"`, or `"unchanged"` when the new config equals the running one.
    pub status: &'static str,
    /// Providers.
    pub providers: Changes,
    /// Connections.
    pub connections: Changes,
    /// Combos (by name).
    pub combos: Changes,
    /// Whether `[resilience]` changed.
    pub resilience_changed: bool,
    /// Changes that need a restart, and the new config's warnings.
    pub warnings: Vec<String>,
}

impl<C: Connect + Clone + Send + Sync + 'static> Serving<C> {
    /// Serves `gw`; `loader` is where a reload reads the config from (`None`: reloads are
    /// refused, as in the simulation).
    pub fn new(gw: Arc<Gateway<C>>, loader: Option<Loader>) -> Arc<Self> {
        let overrides = crate::ops::overrides::Overrides::load(&gw);
        let serving = Arc::new(Serving {
            current: RwLock::new(Arc::clone(&gw)),
            loader,
            reloading: Mutex::new(()),
            overrides: Mutex::new(overrides),
            draining: std::sync::atomic::AtomicBool::new(false),
            tls: RwLock::new(None),
        });
        match gw.config.server.tls.as_ref().map(crate::config::tls::server_config).transpose() {
            Ok(tls) => serving.set_tls(tls),
            Err(e) => tracing::error!("server.tls: {e}; serving plain HTTP"),
        }
        // Stored overrides apply from the start, over the file's settings.
        let mut config = gw.config.clone();
        if serving.overrides().apply(&mut config) {
            serving.install(gw.successor(config));
        }
        serving
    }

    /// What a new connection's TLS handshake uses (`None`: plain HTTP).
    pub fn tls(&self) -> Option<tokio_rustls::TlsAcceptor> {
        self.tls.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_tls(&self, tls: Option<std::sync::Arc<rustls::ServerConfig>>) {
        *self.tls.write().unwrap_or_else(|p| p.into_inner()) = tls.map(tokio_rustls::TlsAcceptor::from);
    }

    /// Turns readiness off for good: shutdown has begun.
    pub fn drain(&self) {
        self.draining.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether shutdown has begun.
    pub fn draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The runtime overrides (one lock; held only to read or replace them).
    pub(super) fn overrides(&self) -> std::sync::MutexGuard<'_, crate::ops::overrides::Overrides> {
        self.overrides.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The runtime overrides of `[resilience]` in force (a partial tree; `{}` for none).
    pub fn override_values(&self) -> serde_json::Value {
        self.overrides().values.clone()
    }

    /// Serves `gw` from now on.
    pub(super) fn install(&self, gw: Gateway<C>) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(gw);
    }

    /// Runs `f` while no reload runs.
    pub(super) fn exclusively<T>(&self, f: impl FnOnce() -> T) -> T {
        let _one = self.reloading.lock().unwrap_or_else(|p| p.into_inner());
        f()
    }

    /// The gateway a request arriving now uses.
    pub fn current(&self) -> Arc<Gateway<C>> {
        Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Loads the config again and swaps it in; a config with problems is refused whole and the
    /// running one kept.
    pub fn reload(&self) -> Result<Report, ConfigError> {
        let _one = self.reloading.lock().unwrap_or_else(|p| p.into_inner());
        let Some(loader) = &self.loader else {
            return Err(ConfigError(vec![crate::config::field_error(
                "config",
                "this gateway was started without a config source to reload from",
            )]));
        };
        // The certificate files are read again even when the config text is unchanged: a
        // renewed certificate at the same path is served from now on.
        let result = loader().and_then(|new| {
            let tls = new.server.tls.as_ref().map(crate::config::tls::server_config).transpose();
            let tls = tls.map_err(|e| ConfigError(vec![crate::config::field_error("server.tls", e)]))?;
            let report = self.swap(new)?;
            self.set_tls(tls);
            Ok(report)
        });
        let serving = self.current();
        let data = match &result {
            Ok(r) => serde_json::to_value(r).unwrap_or_default(),
            Err(e) => {
                serde_json::json!({"status": "refused", "problems": e.0.iter().map(ToString::to_string).collect::<Vec<_>>()})
            }
        };
        serving.feed.publish("reload", serving.clock.wall_now_ms(), data);
        match &result {
            Ok(r) => {
                serving.metrics.config_reload("ok");
                tracing::info!(
                    status = r.status,
                    providers = serving.config.providers.len(),
                    connections = serving.config.connections.len(),
                    combos = serving.config.combos.len(),
                    added = ?[&r.providers.added[..], &r.connections.added[..], &r.combos.added[..]].concat(),
                    removed = ?[&r.providers.removed[..], &r.connections.removed[..], &r.combos.removed[..]].concat(),
                    reset = ?[&r.providers.reset[..], &r.connections.reset[..]].concat(),
                    "config reloaded"
                );
                for w in &r.warnings {
                    tracing::warn!("{w}");
                }
            }
            Err(e) => {
                serving.metrics.config_reload("refused");
                tracing::error!(problems = e.0.len(), "config reload refused; the running config is kept");
                for p in &e.0 {
                    tracing::error!("  {p}");
                }
            }
        }
        result
    }

    fn swap(&self, mut new: Config) -> Result<Report, ConfigError> {
        let old = self.current();
        // The operator's runtime overrides stay over the file's new settings.
        self.overrides().apply(&mut new);
        let mut warnings = std::mem::take(&mut new.warnings);
        if new.server.listen != old.config.server.listen {
            warnings.push(format!(
                "server.listen changed to {:?}: the gateway keeps listening on {:?} until it restarts",
                new.server.listen, old.config.server.listen
            ));
            new.server.listen.clone_from(&old.config.server.listen);
        }
        if new.server.data_dir != old.config.server.data_dir {
            warnings.push(format!(
                "server.data_dir changed to {:?}: state stays in {:?} until the gateway restarts",
                new.server.data_dir, old.config.server.data_dir
            ));
            new.server.data_dir.clone_from(&old.config.server.data_dir);
        }
        let mut shown = new.clone();
        shown.warnings.clear();
        let mut running = old.config.clone();
        running.warnings.clear();
        if shown == running {
            return Ok(Report {
                status: "unchanged",
                providers: Changes::default(),
                connections: Changes::default(),
                combos: Changes::default(),
                resilience_changed: false,
                warnings,
            });
        }
        let providers = diff(&old.config.providers, &new.providers, |p| &p.id, provider_reset);
        let connections = diff(&old.config.connections, &new.connections, |c| &c.id, connection_reset);
        let combos = diff(&old.config.combos, &new.combos, |c| &c.name, |_, _| false);
        let resilience_changed = old.config.resilience != new.resilience;
        let emergency_switched = old.config.emergency_fallback.enabled != new.emergency_fallback.enabled;
        let enabled = new.emergency_fallback.enabled;
        let gw = old.successor(new);
        let now = gw.clock.now();
        gw.with_engine(|e| {
            for p in &providers.reset {
                e.breakers_mut().reset(p, now);
            }
            for c in &connections.reset {
                e.reset_connection(c);
                e.clear_connection_lockouts(c);
            }
        });
        gw.settle();
        gw.prune_idle_queues();
        if emergency_switched {
            gw.emergency.store(enabled, std::sync::atomic::Ordering::Relaxed);
        }
        if let Err(e) = gw.invalidate_stale_leases() {
            tracing::error!(error = %e, "could not check leases against the reloaded config");
        }
        let gw = Arc::new(gw);
        if gw.replicas().is_some()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let shared = Arc::clone(&gw);
            rt.spawn(async move {
                if let Err(e) = crate::sessions::leases::invalidate_stale_shared(&shared).await {
                    tracing::error!(error = %e, "could not check the shared leases against the reloaded config");
                }
            });
        }
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = gw;
        Ok(Report { status: "reloaded", providers, connections, combos, resilience_changed, warnings })
    }
}

/// A provider whose upstream is another one starts with a closed breaker.
fn provider_reset(old: &ProviderConfig, new: &ProviderConfig) -> bool {
    old.base_url != new.base_url || old.format != new.format
}

/// A connection with another key or another provider starts without cooldowns, terminal
/// states or lockouts.
fn connection_reset(old: &ConnectionConfig, new: &ConnectionConfig) -> bool {
    old.api_key != new.api_key || old.provider != new.provider
}

fn diff<T: PartialEq>(old: &[T], new: &[T], id: impl Fn(&T) -> &String, reset: impl Fn(&T, &T) -> bool) -> Changes {
    let mut ch = Changes::default();
    for n in new {
        match old.iter().find(|o| id(o) == id(n)) {
            None => ch.added.push(id(n).clone()),
            Some(o) if o != n => {
                ch.changed.push(id(n).clone());
                if reset(o, n) {
                    ch.reset.push(id(n).clone());
                }
            }
            Some(_) => {}
        }
    }
    ch.removed = old.iter().filter(|o| !new.iter().any(|n| id(n) == id(o))).map(|o| id(o).clone()).collect();
    ch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_names_added_removed_changed_and_reset() {
        let old = vec![("a".to_owned(), 1), ("b".to_owned(), 1), ("c".to_owned(), 1)];
        let new = vec![("a".to_owned(), 1), ("b".to_owned(), 2), ("c".to_owned(), 3), ("d".to_owned(), 1)];
        let ch = diff(&old, &new, |x| &x.0, |o, n| n.1 - o.1 > 1);
        assert_eq!(ch.added, ["d"]);
        assert!(ch.removed.is_empty());
        assert_eq!(ch.changed, ["b", "c"]);
        assert_eq!(ch.reset, ["c"]);
        let ch = diff(&new, &old[..1], |x| &x.0, |_, _| true);
        assert_eq!(ch.removed, ["b", "c", "d"]);
        assert!(ch.added.is_empty() && ch.changed.is_empty() && ch.reset.is_empty());
    }
}
