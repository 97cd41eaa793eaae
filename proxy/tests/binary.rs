//! The real `ferroute` binary as a process: state survives `kill -9` and SIGTERM, and the
//! embedded default serves the demo provider with no config.

mod common;

use chaos::client::{breaker, connection_status, health, health_field, send};
use common::{chat_at, json, spawn, upstream};
use scenarios::{Behaviour, Script, ScriptedUpstream};
use std::process::Command;
use std::time::Duration;

/// How the process ended, if it did within 5 s.
async fn exit_of(p: &mut common::Proc) -> Option<std::process::ExitStatus> {
    for _ in 0..200 {
        if let Ok(Some(s)) = p.child.try_wait() {
            return Some(s);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    None
}

async fn state_of(base: &str, provider_id: &str) -> String {
    breaker(&health(base).await.expect("health"), provider_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaker_and_cooldown_state_survive_kill_9_and_sigterm() {
    let (up_addr, up) = upstream(
        ScriptedUpstream::new()
            .route("down", Script::always(Behaviour::status(503, "{}")))
            .route("limited", Script::always(Behaviour::status_with(429, &[("retry-after", "120")], "{}"))),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = format!(
        "[server]\ndata_dir = \"{}\"\n[[providers]]\nid = \"up\"\nbase_url = \"http://{}/v1\"\nmodels = [\"down\", \"limited\"]\n[[connections]]\nid = \"k1\"\nprovider = \"up\"\napi_key = \"sk-1\"\n[resilience.breaker.api_key]\nfailure_threshold = 1\ndegradation_threshold = 1\nreset_timeout_ms = 600000\n",
        dir.path().join("data").display(),
        up_addr
    );
    let cfg_path = dir.path().join("ferroute.toml");
    std::fs::write(&cfg_path, cfg).expect("write config");
    let cfg_arg = cfg_path.display().to_string();

    // A 429 cools k1 (account level); then a 503 would open the breaker, but k1 is cooling,
    // so use the cooldown first and the breaker on a second run.
    let p = spawn(&["--config", &cfg_arg], dir.path()).await;
    assert_eq!(chat_at(&p.base, "up/limited").await.status, 429);
    let h = health(&p.base).await.expect("health");
    assert_eq!(connection_status(&h, "k1"), "unavailable");
    drop(p); // SIGKILL: no chance to flush

    let mut p = spawn(&["--config", &cfg_arg], dir.path()).await;
    let h = health(&p.base).await.expect("health");
    assert_eq!(connection_status(&h, "k1"), "unavailable", "the cooldown survived kill -9: {h}");
    assert_eq!(health_field(&h, "connections", "k1", "last_error_type"), "rate_limit_exceeded");
    // Graceful stop on SIGTERM exits 0.
    let pid = p.child.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().expect("kill");
    assert!(status.success());
    let exited = exit_of(&mut p).await;
    assert!(exited.is_some_and(|s| s.success()), "SIGTERM stops the gateway cleanly: {exited:?}");

    // Reset the key by hand in a fresh store, then trip the breaker and kill -9 again.
    std::fs::remove_dir_all(dir.path().join("data")).expect("clear data");
    let p = spawn(&["--config", &cfg_arg], dir.path()).await;
    assert_eq!(chat_at(&p.base, "up/down").await.status, 503);
    assert_eq!(state_of(&p.base, "up").await, "OPEN");
    drop(p);
    let p = spawn(&["--config", &cfg_arg], dir.path()).await;
    assert_eq!(state_of(&p.base, "up").await, "OPEN", "the open breaker survived kill -9");
    let r = chat_at(&p.base, "up/down").await;
    assert_eq!(json(&r)["error"]["code"], "provider_circuit_open");
    assert_eq!(up.calls("down"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_config_the_demo_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = spawn(&[], dir.path()).await;
    let r = chat_at(&p.base, "demo/echo").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(json(&r)["choices"][0]["message"]["content"], "hi");
    assert_eq!(state_of(&p.base, "demo").await, "CLOSED");
    assert!(dir.path().join("ferroute-data").join("state.db").exists(), "state in ./ferroute-data/state.db");
    let models =
        json(&send("GET", &format!("{}/v1/models", p.base), &[], "", Duration::from_secs(10)).await.expect("models"));
    let ids: Vec<&str> =
        models["data"].as_array().map(|a| a.iter().filter_map(|m| m["id"].as_str()).collect()).unwrap_or_default();
    assert!(ids.contains(&"demo/echo") && ids.contains(&"demo/flaky"), "{ids:?}");
}

#[test]
fn check_config_reports_every_problem() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[server]\nlisten = \"nowhere\"\n[[providers]]\nid = \"x\"\nbase_url = \"ftp://x\"\n")
        .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_ferroute")).args(["check-config"]).arg(&path).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for f in ["server.listen", "providers[0].base_url"] {
        assert!(err.contains(f), "{f} not in: {err}");
    }
    // A provider without connections loads, with a warning (keys often arrive later).
    let lonely = dir.path().join("lonely.toml");
    std::fs::write(&lonely, "[[providers]]\nid = \"x\"\nbase_url = \"http://x.invalid/v1\"\n").expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_ferroute")).args(["check-config"]).arg(&lonely).output().expect("run");
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("warning: provider \"x\" has no [[connections]]"), "{said}");
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/ferroute.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_ferroute"))
        .args(["check-config", example])
        .env("FERROUTE_ADMIN_KEY", "a")
        .env("TEAM_A_KEY", "team-a-key-1")
        .env("CI_KEY", "ci-key-12345")
        .env("OPENAI_API_KEY", "x")
        .env("OPENAI_API_KEY_2", "y")
        .env("ANTHROPIC_API_KEY", "z")
        .env("CLAUDE_ACCESS_TOKEN", "sk-ant-oat01-o")
        .env("CLAUDE_REFRESH_TOKEN", "sk-ant-ort01-r")
        .env("FERROUTE_SECRET_KEY", "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")
        .env("MY_GATEWAY_KEY", "w")
        .env("FREE_KEY_1", "f1")
        .env("FREE_KEY_2", "f2")
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let help = Command::new(env!("CARGO_BIN_EXE_ferroute")).arg("--help").output().expect("run");
    assert!(String::from_utf8_lossy(&help.stdout).contains("--config"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_leases_and_their_generations_survive_kill_9() {
    let (addr, _script) = upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo()))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("leases.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\ndata_dir = \"data\"\n[[keys]]\nid = \"team\"\nkey = \"team-key-0001\"\npermissions = [\"lease:exclusive\"]\nallowed_connections = [\"c0\", \"c1\"]\n[[providers]]\nid = \"up\"\nbase_url = \"http://{addr}/v1\"\nmodels = [\"m\"]\n[[connections]]\nid = \"c0\"\nprovider = \"up\"\napi_key = \"sk-0\"\n[[connections]]\nid = \"c1\"\nprovider = \"up\"\napi_key = \"sk-1\"\n"
        ),
    )
    .expect("write config");
    let cfg_arg = cfg.display().to_string();
    let owner = |n: u8| format!("vlo_{}", std::iter::repeat_n(char::from(b'A' + n), 43).collect::<String>());
    let lease = |base: String, who: String, body: &'static str| async move {
        let headers = [
            ("content-type", "application/json"),
            ("authorization", "Bearer team-key-0001"),
            ("x-ferroute-lease-owner", who.as_str()),
        ];
        send("POST", &format!("{base}/api/v1/session-leases"), &headers, body, Duration::from_secs(10))
            .await
            .expect("lease")
    };
    let p = spawn(&["--config", &cfg_arg], dir.path()).await;
    let a = lease(p.base.clone(), owner(0), r#"{"action":"acquire","model":"up/m"}"#).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(json(&a)["connection"]["id"], "c0");
    let b = lease(p.base.clone(), owner(1), r#"{"action":"acquire","model":"up/m"}"#).await;
    assert_eq!(json(&b)["connection"]["id"], "c1");
    drop(p); // kill -9
    let p = spawn(&["--config", &cfg_arg], dir.path()).await;
    let s = lease(p.base.clone(), owner(0), r#"{"action":"status","generation":1}"#).await;
    assert_eq!(
        (s.status, json(&s)["state"].as_str(), json(&s)["connection"]["id"].as_str()),
        (200, Some("ACTIVE"), Some("c0"))
    );
    let c = lease(p.base.clone(), owner(2), r#"{"action":"acquire","model":"up/m"}"#).await;
    assert_eq!(c.status, 429, "both connections are still leased: {}", c.body);
    // The fence still holds: owner 0's generation 1 is served by c0.
    let first = owner(0);
    let headers = [
        ("authorization", "Bearer team-key-0001"),
        ("x-ferroute-lease-owner", first.as_str()),
        ("x-ferroute-lease-generation", "1"),
    ];
    let body = serde_json::json!({"model": "up/m", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let r = send("POST", &format!("{}/v1/chat/completions", p.base), &headers, &body, Duration::from_secs(10))
        .await
        .expect("chat");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.headers.get("x-ferroute-selected-connection-id").and_then(|v| v.to_str().ok()), Some("c0"));
}

/// `GET /livez` and `GET /readyz` answer without a key; on SIGTERM readiness turns off first,
/// requests are still taken for `unready_delay_ms`, and only then does the listener close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_answer_without_a_key_and_readiness_goes_off_before_the_listener_closes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = format!("[server]\ndata_dir = \"{}\"\nunready_delay_ms = 1500\n", dir.path().join("data").display());
    let cfg_path = dir.path().join("ferroute.toml");
    std::fs::write(&cfg_path, cfg).expect("write config");
    let mut p = spawn(&["--config", &cfg_path.display().to_string()], dir.path()).await;
    let base = p.base.clone();
    let get = |path: &str| {
        let url = format!("{base}{path}");
        async move { send("GET", &url, &[], "", Duration::from_secs(5)).await }
    };
    let live = get("/livez").await.expect("livez");
    assert_eq!((live.status, live.body.as_str()), (200, r#"{"status":"live"}"#));
    let ready = get("/readyz").await.expect("readyz");
    assert_eq!((ready.status, ready.body.as_str()), (200, r#"{"status":"ready"}"#));
    let pid = p.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    // Readiness is off while the listener still answers.
    let mut unready_seen = false;
    for _ in 0..40 {
        match get("/readyz").await {
            Ok(r) if r.status == 503 => {
                assert!(r.body.contains("shutting down"), "{}", r.body);
                assert_eq!(get("/livez").await.expect("still live").status, 200);
                assert_eq!(chat_at(&p.base, "demo/echo").await.status, 200, "requests are still taken");
                unready_seen = true;
                break;
            }
            Ok(r) => assert_eq!(r.status, 200, "{}", r.body),
            Err(e) => panic!("the listener closed before readiness went off: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(unready_seen, "readiness never went off");
    // Then the listener closes and the process exits cleanly.
    let exited = exit_of(&mut p).await;
    assert!(exited.is_some_and(|s| s.success()), "{exited:?}");
    assert!(get("/livez").await.is_err(), "the listener is closed");
}
