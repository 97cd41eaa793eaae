//! Faults that are not network links: reloading the gateway's config (and the config text
//! itself), and the host names every fault must name.

use crate::shared::{SIM_CLIENT_KEY, Shared, lock};
use proxy::config::Config;
use scenarios::scenario::{Abort, FaultAction, Scenario};
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

/// A `reload` fault: the gateway host `f.a` (the first replica or another) reads `f.gateway`
/// as its config file, as on SIGHUP.
pub(crate) fn reload(shared: &Arc<Mutex<Shared>>, f: &scenarios::scenario::Fault, t: u64) {
    let mut s = lock(shared);
    if f.a == "gateway" && s.gateway.is_none() {
        s.rec.note(t, "config reload: the gateway is not running".into());
        return;
    }
    let text = f.gateway.as_ref().map(|g| s.sign_ins.iter().fold(g.clone(), |t, (p, table)| t.replace(p, table)));
    match text {
        Some(text) => s.next_config.insert(f.a.clone(), text),
        None => s.next_config.remove(&f.a),
    };
    s.reload.entry(f.a.clone()).or_default().notify_one();
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
        // A bound of 0 would hang up before anything could arrive: a mistake, not a test.
        if matches!(w.abort, Some(Abort::BeforeHeaders | Abort::After)) && w.abort_after_ms == 0 {
            return Err(format!("client {:?} aborts {:?} with no abort_after_ms above 0", w.client, w.abort));
        }
    }
    let clients: std::collections::BTreeSet<&str> = scenario.workload.iter().map(|w| w.client.as_str()).collect();
    for f in &scenario.faults {
        if f.action == FaultAction::Reload && (f.a != "gateway" && !scenario.replicas.contains(&f.a) || !f.b.is_empty())
        {
            return Err(format!("the reload at {} ms must name a gateway replica as a and no b", f.at_ms));
        }
        if matches!(f.action, FaultAction::Restart | FaultAction::Reload) {
            if f.action == FaultAction::Restart && (f.a != "gateway" || !f.b.is_empty()) {
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

#[cfg(test)]
mod tests {
    use super::check_hosts;
    use scenarios::scenario::Scenario;

    /// `check_hosts` of a scenario that is only a gateway and `rest` at its end.
    fn checked(rest: &str) -> Result<(), String> {
        let text = format!("description = \"d\"\nmechanisms = []\nduration_ms = 10\ngateway = \"\"\n{rest}\n");
        check_hosts(&Scenario::from_toml_str(&text, "t")?)
    }

    /// One fault, in a scenario with one replica beside the gateway.
    fn with_fault(fault: &str) -> Result<(), String> {
        checked(&format!("replicas = [\"gateway-b\"]\n\n[[faults]]\nat_ms = 1\n{fault}"))
    }

    #[test]
    fn a_reload_names_any_gateway_replica_and_a_restart_only_the_first() {
        assert_eq!(with_fault("action = \"reload\"\na = \"gateway\"\ngateway = \"\""), Ok(()));
        assert_eq!(with_fault("action = \"reload\"\na = \"gateway-b\"\ngateway = \"\""), Ok(()));
        let unknown = with_fault("action = \"reload\"\na = \"gateway-c\"\ngateway = \"\"");
        assert_eq!(unknown, Err("the reload at 1 ms must name a gateway replica as a and no b".into()));
        let no_text = with_fault("action = \"reload\"\na = \"gateway-b\"");
        assert!(no_text.as_ref().is_err_and(|e| e.contains("only a reload, names a gateway config")), "{no_text:?}");
        assert_eq!(with_fault("action = \"restart\"\na = \"gateway\""), Ok(()));
        let replica = with_fault("action = \"restart\"\na = \"gateway-b\"");
        assert!(replica.as_ref().is_err_and(|e| e.contains("must name a = \"gateway\"")), "{replica:?}");
    }

    fn with_abort(abort: &str) -> Result<(), String> {
        checked(&format!("\n[[workload]]\nclient = \"c\"\n{abort}"))
    }

    #[test]
    fn an_abort_with_a_bound_needs_one_above_zero() {
        for kind in ["before_headers", "after"] {
            let none = with_abort(&format!("abort = \"{kind}\""));
            assert!(none.as_ref().is_err_and(|e| e.contains("no abort_after_ms above 0")), "{kind}: {none:?}");
            assert_eq!(with_abort(&format!("abort = \"{kind}\"\nabort_after_ms = 3000")), Ok(()), "{kind}");
        }
        assert_eq!(with_abort("abort = \"random\""), Ok(()), "random draws below max(bound, 1)");
        assert_eq!(with_abort("abort = \"after_first_chunk\""), Ok(()));
    }
}
