//! Faults that are not network links: reloading the gateway's config (and the config text
//! itself), and the host names every fault must name.

use crate::shared::{SIM_CLIENT_KEY, Shared, lock};
use proxy::config::Config;
use scenarios::scenario::{FaultAction, Scenario};
use std::sync::{Arc, Mutex};

/// The scenario's gateway config, with the simulated clients' key unless it has keys of its
/// own (simulated clients are not on loopback).
pub(crate) fn load_config(text: &str) -> Result<Config, proxy::config::ConfigError> {
    let no_env = |_: &str| None;
    let text = if text.contains("[[keys]]") {
        text.to_owned()
    } else {
        // After the scenario's text, so that its top-level keys stay top-level (and the
        // errors' line numbers are the scenario's own).
        format!("{text}\n[[keys]]\nid = \"sim\"\nkey = \"{SIM_CLIENT_KEY}\"\n")
    };
    Config::from_toml_str(&text, &no_env, &[])
}

/// A `reload` fault: the gateway host reads `f.gateway` as its config file, as on SIGHUP.
pub(crate) fn reload(shared: &Arc<Mutex<Shared>>, f: &scenarios::scenario::Fault, t: u64) {
    let mut s = lock(shared);
    if s.gateway.is_none() {
        s.rec.note(t, "config reload: the gateway is not running".into());
        return;
    }
    let text = f.gateway.as_ref().map(|g| s.sign_ins.iter().fold(g.clone(), |t, (p, table)| t.replace(p, table)));
    s.next_config = text;
    s.reload.notify_one();
}

/// The trace line of a reload's outcome.
pub(crate) fn reload_line(r: Result<proxy::ops::reload::Report, proxy::config::ConfigError>) -> String {
    match r {
        Ok(r) => format!(
            "config {} (providers +{:?} -{:?} reset {:?}; connections +{:?} -{:?} reset {:?}; combos +{:?} -{:?})",
            r.status,
            r.providers.added,
            r.providers.removed,
            r.providers.reset,
            r.connections.added,
            r.connections.removed,
            r.connections.reset,
            r.combos.added,
            r.combos.removed
        ),
        Err(e) => format!("config reload refused: {}", e.to_string().trim_end().replace('\n', " ")),
    }
}

/// Host names must be unique and every fault must name known hosts (turmoil would panic).
pub(crate) fn check_hosts(scenario: &Scenario) -> Result<(), String> {
    let mut hosts = std::collections::BTreeSet::from(["gateway".to_owned()]);
    if !scenario.replicas.is_empty() {
        hosts.insert(crate::shared::STORE_HOST.to_owned());
    }
    if scenario.token_server.is_some() {
        hosts.insert(scenarios::token_server::TOKEN_HOST.to_owned());
    }
    for r in &scenario.replicas {
        if !hosts.insert(r.clone()) {
            return Err(format!("replica host {r:?} is defined twice (or is named \"gateway\" or \"store\")"));
        }
    }
    for w in &scenario.workload {
        if let Some(g) = &w.gateway
            && g != "gateway"
            && !scenario.replicas.contains(g)
        {
            return Err(format!("client {:?} sends to {g:?}, which is not a gateway replica", w.client));
        }
    }
    for u in &scenario.upstreams {
        if !hosts.insert(u.host.clone()) {
            return Err(format!("upstream host {:?} is defined twice (or is named \"gateway\")", u.host));
        }
    }
    for w in &scenario.workload {
        if hosts.contains(&w.client) {
            return Err(format!("client {:?} has the name of a host", w.client));
        }
    }
    let clients: std::collections::BTreeSet<&str> = scenario.workload.iter().map(|w| w.client.as_str()).collect();
    for f in &scenario.faults {
        if matches!(f.action, FaultAction::Restart | FaultAction::Reload) {
            if f.a != "gateway" || !f.b.is_empty() {
                return Err(format!("the {:?} at {} ms must name a = \"gateway\" and no b", f.action, f.at_ms));
            }
            if (f.action == FaultAction::Reload) != f.gateway.is_some() {
                return Err(format!(
                    "the fault at {} ms: a reload, and only a reload, names a gateway config",
                    f.at_ms
                ));
            }
            continue;
        }
        for h in [&f.a, &f.b] {
            if !hosts.contains(h) && !clients.contains(h.as_str()) {
                return Err(format!("fault at {} ms names unknown host {h:?}", f.at_ms));
            }
        }
    }
    Ok(())
}
