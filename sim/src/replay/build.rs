//! A recording turned into a scenario: the gateway under a given config, scripted upstreams
//! that answer each connection and model as they answered at that moment, and clients that
//! send the recorded requests at their recorded times.
//!
//! The model for attempts the recording has no counterpart for: an upstream answers a call
//! with the recorded outcome nearest in time of the same connection and model, else of the
//! same provider and model (another connection), else of the same provider (another model).
//! Each route is a schedule whose windows meet halfway between two recorded attempts. A
//! stream the watchdog cut goes on, if nothing cuts it, at its slowest recorded pace for a
//! minute; a stream served is an echo with the recorded number of events at the recorded pace.

use proxy::recording::record::{AttemptEnd, AttemptRecord, Record, RequestRecord};
use scenarios::scenario::Scenario;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Simulated time before the first recorded request (the gateway starts meanwhile).
pub const LEAD_MS: u64 = 1_000;
/// Simulated time after the last recorded answer before the run ends.
const TAIL_MS: u64 = 180_000;

/// A recording, in the order it happened.
#[derive(Debug, Clone)]
pub struct Recording {
    /// The client requests, by arrival.
    pub requests: Vec<RequestRecord>,
    /// The upstream attempts, by start.
    pub attempts: Vec<AttemptRecord>,
    /// The first record's time (Unix ms): simulated time [`LEAD_MS`].
    pub t0: u64,
}

impl Recording {
    /// Splits `records` (any order).
    pub fn new(records: Vec<Record>) -> Result<Recording, String> {
        let mut requests = Vec::new();
        let mut attempts = Vec::new();
        for r in records {
            match r {
                Record::Request(q) => requests.push(q),
                Record::Attempt(a) => attempts.push(*a),
            }
        }
        if requests.is_empty() {
            return Err("the recording holds no client request".into());
        }
        requests.sort_by_key(|q| (q.at_ms, q.request));
        attempts.sort_by_key(|a| (a.started_ms, a.request));
        let t0 = requests[0].at_ms.min(attempts.first().map_or(u64::MAX, |a| a.started_ms));
        Ok(Recording { requests, attempts, t0 })
    }

    /// Simulated ms of a recorded instant.
    pub fn sim_ms(&self, unix_ms: u64) -> u64 {
        unix_ms.saturating_sub(self.t0) + LEAD_MS
    }

    /// The simulated time the run needs.
    pub fn duration_ms(&self) -> u64 {
        let last = self.requests.iter().map(|q| q.answered_ms).chain(self.attempts.iter().map(|a| a.ended_ms)).max();
        self.sim_ms(last.unwrap_or(self.t0)) + TAIL_MS
    }
}

/// The upstream host a provider is reached at in the replay.
pub fn host(index: usize) -> String {
    format!("up-{index}")
}

/// The API key a connection gets in the replay (the upstream tells connections apart by it).
pub fn replay_key(connection: &str) -> String {
    format!("replay-{connection}")
}

/// Sets `path` (dotted, `resilience.breaker.api_key.failure_threshold`; a path that does not
/// start with a top-level table is under `resilience`) to `value` (TOML:
/// `20`, `true`, `"text"`, `[1, 2]`; anything that does not parse is a string) in `tree`.
pub fn set(tree: &mut toml::Table, path: &str, value: &str) -> Result<(), String> {
    let parsed = toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_owned()));
    const TOP: [&str; 10] = [
        "server",
        "keys",
        "providers",
        "connections",
        "combos",
        "emergency_fallback",
        "resilience",
        "state",
        "recording",
        "telemetry",
    ];
    let full = if TOP.iter().any(|t| path.split('.').next() == Some(*t)) {
        path.to_owned()
    } else {
        format!("resilience.{path}")
    };
    let parts: Vec<&str> = full.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(format!("`{path}` is not a dotted settings path"));
    }
    let mut at = tree;
    for p in &parts[..parts.len() - 1] {
        let next = at.entry((*p).to_owned()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        at = next.as_table_mut().ok_or_else(|| format!("`{path}`: `{p}` is not a table"))?;
    }
    at.insert(parts[parts.len() - 1].to_owned(), parsed);
    Ok(())
}

/// The gateway's config for the replay: `config` with `sets` applied, each provider reached at
/// its replay host, each connection given its replay key (OAuth connections become key
/// connections), and without client keys, state, recording or listen address (the simulation
/// supplies its own).
pub fn gateway_config(config: &str, sets: &[(String, String)]) -> Result<(String, Vec<String>), String> {
    let mut tree: toml::Table = toml::from_str(config).map_err(|e| format!("the config does not parse: {e}"))?;
    for (k, v) in sets {
        set(&mut tree, k, v)?;
    }
    for drop in ["keys", "state", "recording"] {
        tree.remove(drop);
    }
    if let Some(server) = tree.get_mut("server").and_then(toml::Value::as_table_mut) {
        for drop in ["listen", "data_dir", "admin_key", "secret_key"] {
            server.remove(drop);
        }
    }
    let mut providers = Vec::new();
    if let Some(list) = tree.get_mut("providers").and_then(toml::Value::as_array_mut) {
        for (i, p) in list.iter_mut().enumerate() {
            let Some(p) = p.as_table_mut() else { continue };
            providers.push(p.get("id").and_then(toml::Value::as_str).unwrap_or_default().to_owned());
            p.insert("base_url".into(), toml::Value::String(format!("http://{}:9000/v1", host(i))));
        }
    }
    if let Some(list) = tree.get_mut("connections").and_then(toml::Value::as_array_mut) {
        for c in list.iter_mut() {
            let Some(c) = c.as_table_mut() else { continue };
            let id = c.get("id").and_then(toml::Value::as_str).unwrap_or_default().to_owned();
            c.remove("oauth");
            c.insert("api_key".into(), toml::Value::String(replay_key(&id)));
        }
    }
    let text = toml::to_string(&tree).map_err(|e| format!("cannot write the replay config: {e}"))?;
    // Checked by the gateway's own loader, so that a bad `--set` is refused here, naming the
    // setting, rather than replayed as a gateway that never starts.
    proxy::config::Config::from_toml_str(&text, &|_: &str| None, &[]).map_err(|e| {
        format!("the config{} is not valid: {e}", if sets.is_empty() { "" } else { " with the --set values" })
    })?;
    Ok((text, providers))
}

/// What an upstream does for a call answered as `a` was.
fn behaviour(a: &AttemptRecord, shift_ms: i128) -> Value {
    let latency = a.headers_ms.unwrap_or(a.ended_ms).saturating_sub(a.started_ms);
    match a.end {
        AttemptEnd::Served | AttemptEnd::Aborted => {
            let t = a.timing.clone().unwrap_or_default();
            let gap = a.ended_ms.saturating_sub(a.headers_ms.unwrap_or(a.ended_ms)) / t.events.max(1);
            json!({"kind": "echo", "latency_ms": latency, "chunk_ms": gap})
        }
        AttemptEnd::Watchdog => {
            // Cut, it would have gone on at its slowest pace: for a minute, say.
            let gap = a.timing.as_ref().map_or(1_000, |t| t.longest_gap_ms.max(100));
            json!({"kind": "slow_drip", "text": "x".repeat((60_000 / gap).max(1) as usize), "chunk_ms": gap})
        }
        AttemptEnd::Transport => json!({"kind": "reset", "latency_ms": a.ended_ms.saturating_sub(a.started_ms)}),
        AttemptEnd::Failed => {
            let headers: BTreeMap<String, String> =
                a.hints.iter().map(|(k, v)| (k.clone(), shift_instant(v, shift_ms))).collect();
            let body = json!({"error": {"message": a.message.clone().unwrap_or_default()}}).to_string();
            json!({"kind": "respond", "status": a.status, "headers": headers, "body": body, "latency_ms": latency})
        }
    }
}

/// A hint that names an instant (Unix seconds or ms) moves with the replay's clock.
fn shift_instant(v: &str, shift_ms: i128) -> String {
    match v.trim().parse::<i128>() {
        Ok(n) if n >= 1_000_000_000_000 => (n + shift_ms).max(0).to_string(),
        Ok(n) if n >= 1_000_000_000 => (n + shift_ms / 1000).max(0).to_string(),
        _ => v.to_owned(),
    }
}

/// A schedule over the run: each attempt's behaviour from halfway after the one before.
fn schedule(rec: &Recording, attempts: &[&AttemptRecord], period: u64, shift_ms: i128) -> Value {
    let starts: Vec<u64> = attempts.iter().map(|a| rec.sim_ms(a.started_ms)).collect();
    let windows: Vec<Value> = attempts
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let from = if i == 0 { 0 } else { (starts[i - 1] + starts[i]) / 2 };
            let to = if i + 1 == attempts.len() { period } else { (starts[i] + starts[i + 1]) / 2 };
            json!({"from_ms": from, "to_ms": to.max(from + 1), "behaviour": behaviour(a, shift_ms)})
        })
        .collect();
    let last = attempts.last().map_or_else(|| json!({"kind": "echo"}), |a| behaviour(a, shift_ms));
    json!({"mode": "schedule", "period_ms": period, "windows": windows, "otherwise": last})
}

/// The scenario replaying `rec` under `gateway` (a replay config, see [`gateway_config`]).
pub fn scenario(rec: &Recording, gateway: &str, providers: &[String], name: &str) -> Result<Scenario, String> {
    let duration = rec.duration_ms();
    let period = duration * 2;
    let shift_ms = i128::from(scenarios::upstream::DEFAULT_WALL_START_MS) + i128::from(LEAD_MS) - i128::from(rec.t0);
    let mut upstreams = Vec::new();
    for (i, p) in providers.iter().enumerate() {
        let mine: Vec<&AttemptRecord> = rec.attempts.iter().filter(|a| &a.provider == p).collect();
        let mut routes = serde_json::Map::new();
        let mut by_model: BTreeMap<&str, Vec<&AttemptRecord>> = BTreeMap::new();
        let mut by_key: BTreeMap<(&str, &str), Vec<&AttemptRecord>> = BTreeMap::new();
        for a in &mine {
            by_model.entry(a.model.as_str()).or_default().push(a);
            by_key.entry((a.model.as_str(), a.connection.as_str())).or_default().push(a);
        }
        for ((model, connection), list) in &by_key {
            routes.insert(format!("{model}#{}", replay_key(connection)), schedule(rec, list, period, shift_ms));
        }
        for (model, list) in &by_model {
            routes.insert((*model).to_owned(), schedule(rec, list, period, shift_ms));
        }
        routes.insert(
            "*".into(),
            if mine.is_empty() {
                json!({"mode": "sequence", "steps": [{"kind": "echo"}]})
            } else {
                schedule(rec, &mine, period, shift_ms)
            },
        );
        upstreams.push(json!({"host": host(i), "routes": routes}));
    }
    let served_events: BTreeMap<u64, u64> = rec
        .attempts
        .iter()
        .filter(|a| a.end == AttemptEnd::Served)
        .map(|a| (a.request, a.timing.as_ref().map_or(4, |t| t.events.clamp(1, 2_000))))
        .collect();
    let workload: Vec<Value> = rec
        .requests
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let words = served_events.get(&q.request).copied().unwrap_or(4);
            let mut w = json!({
                "client": format!("r{i}"),
                "start_ms": rec.sim_ms(q.at_ms),
                "count": 1,
                "model": q.model,
                "stream": q.stream,
                "anthropic": q.api == "messages",
                "prompt": vec!["w"; words as usize].join(" "),
            });
            if let Some(s) = &q.session {
                w["headers"] = json!({"x-session-id": s});
            }
            w
        })
        .collect();
    let s = json!({
        "name": name,
        "description": format!("replay of {} recorded requests", rec.requests.len()),
        "duration_ms": duration,
        // Loopback-like: the recorded latencies are the upstreams' own.
        "latency_ms": [0, 1],
        "gateway": gateway,
        "upstreams": upstreams,
        "workload": workload,
    });
    serde_json::from_value(s).map_err(|e| format!("cannot build the replay scenario: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_is_set_by_its_dotted_path_with_toml_values() {
        let mut t: toml::Table =
            toml::from_str("[resilience.breaker.api_key]\nfailure_threshold = 12\n").expect("toml");
        set(&mut t, "resilience.breaker.api_key.failure_threshold", "24").expect("set");
        set(&mut t, "resilience.combo_cooldown_wait.enabled", "false").expect("set");
        set(&mut t, "server.name", "plain words").expect("set");
        assert_eq!(t["resilience"]["breaker"]["api_key"]["failure_threshold"].as_integer(), Some(24));
        assert_eq!(t["resilience"]["combo_cooldown_wait"]["enabled"].as_bool(), Some(false));
        assert_eq!(t["server"]["name"].as_str(), Some("plain words"));
        assert!(set(&mut t, "resilience..x", "1").is_err());
        set(&mut t, "routing.max_attempts", "5").expect("set");
        assert_eq!(t["resilience"]["routing"]["max_attempts"].as_integer(), Some(5));
    }

    #[test]
    fn the_replay_config_reaches_replay_hosts_with_replay_keys_and_no_secrets() {
        let config = "[server]\nlisten = \"0.0.0.0:8787\"\nadmin_key = \"secret-admin\"\n[recording]\nenabled = true\n[[keys]]\nid = \"t\"\nkey = \"k\"\n[[providers]]\nid = \"a\"\nbase_url = \"https://api.example.com/v1\"\nmodels = [\"m\"]\n[[connections]]\nid = \"k1\"\nprovider = \"a\"\napi_key = \"sk-live-secret\"\n";
        let (text, providers) = gateway_config(config, &[]).expect("config");
        assert_eq!(providers, vec!["a".to_owned()]);
        assert!(text.contains("http://up-0:9000/v1") && text.contains("replay-k1"), "{text}");
        for gone in ["sk-live-secret", "secret-admin", "[recording]", "[[keys]]", "0.0.0.0"] {
            assert!(!text.contains(gone), "{gone} in {text}");
        }
    }

    #[test]
    fn a_set_the_gateway_would_refuse_is_refused_naming_the_setting() {
        let config = "[[providers]]\nid = \"a\"\nbase_url = \"https://api.example.com/v1\"\nmodels = [\"m\"]\n[[connections]]\nid = \"k1\"\nprovider = \"a\"\napi_key = \"sk\"\n";
        let sets = [("breaker.api_key.failure_threshold".to_owned(), "-5".to_owned())];
        let err = gateway_config(config, &sets).expect_err("a negative threshold");
        assert!(err.contains("failure_threshold") && err.contains("--set"), "{err}");
        assert!(gateway_config(config, &[]).is_ok());
    }

    #[test]
    fn instants_in_hints_move_with_the_clock_and_delays_do_not() {
        assert_eq!(shift_instant("30", 5_000), "30");
        assert_eq!(shift_instant("1780000000", 5_000), "1780000005");
        assert_eq!(shift_instant("1780000000000", 5_000), "1780000005000");
    }
}
