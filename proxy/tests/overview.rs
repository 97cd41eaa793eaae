//! What the dashboard reads beyond health, against the real binary: answers per provider and
//! minute, each combo's targets with their exclusions and its last request paths, session pins
//! (hashed) and leases (owners hashed), connections' load, and the last hour as SVG.

mod common;

use chaos::client::send;
use common::{json, spawn, upstream};
use scenarios::{Behaviour, Script, ScriptedUpstream};
use serde_json::Value;
use std::time::Duration;

const KEY: &str = "admin-key-0001";
const TEAM: &str = "Bearer team-key-0001";

async fn admin(base: &str, path: &str) -> chaos::client::Reply {
    send("GET", &format!("{base}{path}"), &[("x-ferroute-admin-key", KEY)], "", Duration::from_secs(10))
        .await
        .expect(path)
}

async fn chat(base: &str, model: &str, session: &str) -> u16 {
    let body = serde_json::json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let headers = [("authorization", TEAM), ("content-type", "application/json"), ("x-session-id", session)];
    send("POST", &format!("{base}/v1/chat/completions"), &headers, &body, Duration::from_secs(30))
        .await
        .expect("chat")
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_api_shows_rates_combo_paths_pins_leases_and_the_last_hour() {
    let (addr, _) = upstream(
        ScriptedUpstream::new()
            .route("down", Script::always(Behaviour::status(500, r#"{"error":{"message":"boom"}}"#)))
            .route("fine", Script::always(Behaviour::echo())),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("ferroute.toml");
    let text = format!(
        "[server]\nadmin_key = \"{KEY}\"\n[resilience.session_affinity]\nttl_ms = 600000\n\
         [[keys]]\nid = \"team\"\nkey = \"team-key-0001\"\npermissions = [\"lease:exclusive\"]\nallowed_connections = [\"f1\", \"f2\", \"k1\", \"k2\"]\n\
         [[providers]]\nid = \"flaky\"\nclass = \"local\"\nbase_url = \"http://{addr}/v1\"\nmodels = [\"down\"]\n\
         [[connections]]\nid = \"f1\"\nprovider = \"flaky\"\napi_key = \"sk-f1\"\n\
         [[connections]]\nid = \"f2\"\nprovider = \"flaky\"\napi_key = \"sk-f2\"\n\
         [[providers]]\nid = \"keys\"\nbase_url = \"http://{addr}/v1\"\nmodels = [\"fine\"]\n\
         [[connections]]\nid = \"k1\"\nprovider = \"keys\"\napi_key = \"sk-1\"\n\
         [[connections]]\nid = \"k2\"\nprovider = \"keys\"\napi_key = \"sk-2\"\n\
         [[combos]]\nname = \"team-combo\"\ntargets = [\"flaky/down\", \"keys/fine\"]\n"
    );
    std::fs::write(&cfg, text).expect("config");
    let cfg_arg = cfg.display().to_string();
    let p = spawn(&["--config", &cfg_arg], dir.path()).await;

    // Two combo requests: the first tries both of flaky's keys (a 500 each, which opens its
    // `local` breaker) and moves on to keys; the second goes to keys at once. Then flaky
    // directly: refused by the open breaker.
    assert_eq!(chat(&p.base, "team-combo", "session-alpha-1").await, 200);
    assert_eq!(chat(&p.base, "team-combo", "session-alpha-1").await, 200);
    assert_eq!(chat(&p.base, "flaky/down", "session-beta-22").await, 503, "the breaker is open");

    // A lease.
    let owner = format!("vlo_{}", "B".repeat(43));
    let headers = [("content-type", "application/json"), ("authorization", TEAM), ("x-ferroute-lease-owner", &owner)];
    let a = send(
        "POST",
        &format!("{}/api/v1/session-leases", p.base),
        &headers,
        r#"{"action":"acquire","model":"keys/fine"}"#,
        Duration::from_secs(10),
    )
    .await
    .expect("lease");
    assert_eq!(a.status, 200, "{}", a.body);

    let r = admin(&p.base, "/api/monitoring/dashboard").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let d = json(&r);
    let text = d.to_string();

    // Rates: keys answered twice (200), flaky once (503); each over the last 15 minutes.
    let rate = |provider: &str| -> Value {
        d["rates"]["providers"]
            .as_array()
            .expect("rates")
            .iter()
            .find(|r| r["provider"] == provider)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(d["rates"]["minutes"], 15);
    assert_eq!(rate("keys")["requests_15m"], 2, "{text}");
    assert_eq!(rate("keys")["errors_15m"], 0, "{text}");
    assert_eq!(rate("flaky")["requests_15m"], 1, "{text}");
    assert_eq!(rate("flaky")["errors_15m"], 1, "{text}");
    assert_eq!(rate("keys")["requests"].as_array().map(Vec::len), Some(15));

    // The combo: its targets with what excludes each connection now (flaky's breaker is open),
    // and its two requests' paths, newest first.
    let combo = &d["combos"][0];
    assert_eq!(combo["name"], "team-combo");
    assert_eq!(combo["targets"][0]["target"], "flaky/down");
    assert_eq!(combo["targets"][0]["connections"][0]["excluded"], "circuit_open", "{text}");
    assert_eq!(combo["targets"][0]["connections"][1]["excluded"], "circuit_open", "{text}");
    assert_eq!(combo["targets"][1]["connections"].as_array().map(Vec::len), Some(2));
    let recent = combo["recent"].as_array().expect("recent");
    assert_eq!(recent.len(), 2, "{text}");
    let steps = |i: usize| -> Vec<String> {
        recent[i]["steps"]
            .as_array()
            .map(|s| {
                s.iter()
                    .map(|x| {
                        format!(
                            "{} {} {}",
                            x["target"].as_str().unwrap_or(""),
                            x["connection"].as_str().unwrap_or(""),
                            x["result"].as_str().unwrap_or("")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let first = steps(1);
    assert_eq!(first.len(), 3, "{text}");
    assert!(first[0].starts_with("flaky/down f") && first[0].ends_with(" 500 server_error"), "{text}");
    assert!(first[1].starts_with("flaky/down f") && first[1].ends_with(" 500 server_error"), "{text}");
    assert!(first[2].starts_with("keys/fine k") && first[2].ends_with(" served"), "{text}");
    let second = steps(0);
    assert_eq!(second.len(), 1, "the open breaker kept the second away from flaky: {text}");
    assert!(second[0].starts_with("keys/fine k") && second[0].ends_with(" served"), "{text}");
    assert_eq!(recent[0]["status"], 200);

    // Pins: the session's pin, its key hashed; leases: the owner hashed, never raw.
    assert!(d["pins"]["active"].as_u64().is_some_and(|n| n >= 1), "{text}");
    let pin = &d["pins"]["items"][0];
    assert_eq!(pin["session"].as_str().map(str::len), Some(12), "{text}");
    assert!(!text.contains("session-alpha-1") && !text.contains("session-beta-22"), "sessions only hashed: {text}");
    assert_eq!(d["leases"]["active"], 1, "{text}");
    let lease = &d["leases"]["items"][0];
    assert_eq!(lease["key"], "team");
    assert_eq!(lease["owner"].as_str().map(str::len), Some(12));
    assert!(!text.contains(&owner), "{text}");

    // Load per connection: nothing in flight or queued now; k1 or k2 holds the pin.
    let conns = d["connections"].as_array().expect("connections");
    assert_eq!(conns.len(), 4);
    assert_eq!(conns[0]["last_error"]["status"], 500, "{text}");
    assert_eq!(conns[0]["last_error"]["message"], "boom", "the upstream's own words: {text}");
    assert!(conns[2]["last_error"].is_null(), "k1 never failed: {text}");
    assert!(conns.iter().all(|c| c["in_flight"] == 0 && c["queued"] == 0), "{text}");
    assert_eq!(
        conns.iter().map(|c| c["pins"].as_u64().unwrap_or(0)).sum::<u64>(),
        d["pins"]["active"].as_u64().unwrap_or(0)
    );

    // The last hour, as SVG: the open breaker's lane.
    let t = admin(&p.base, "/api/monitoring/timeline").await;
    assert_eq!(t.status, 200);
    assert!(t.body.starts_with("<svg") && t.body.contains(">breaker:flaky<"), "{}", t.body);
    assert!(t.body.contains(">now<"), "the axis counts back to now");

    // Admin only, GET only.
    let anon = send("GET", &format!("{}/api/monitoring/dashboard", p.base), &[], "", Duration::from_secs(5)).await;
    assert_eq!(anon.expect("anon").status, 401);
    let post = send(
        "POST",
        &format!("{}/api/monitoring/timeline", p.base),
        &[("x-ferroute-admin-key", KEY)],
        "",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(post.expect("post").status, 405);
}
