//! `GET|PATCH|DELETE /api/resilience/settings` on the real binary: an invalid change is
//! refused naming its fields and changes nothing; a valid one changes behaviour at once (model
//! lockout switched on without a restart), stays over the file across a reload and a restart,
//! and `DELETE` returns to the file's settings.

mod common;

use chaos::client::{Reply, send};
use common::{Proc, chat_at, json, spawn, upstream};
use scenarios::{Behaviour, Script, ScriptedUpstream};
use std::time::Duration;

const ADMIN: (&str, &str) = ("x-ferroute-admin-key", "admin-key-0001");

async fn settings(p: &Proc, method: &str, body: &str) -> Reply {
    let url = format!("{}/api/resilience/settings", p.base);
    send(method, &url, &[ADMIN], body, Duration::from_secs(10)).await.expect("settings")
}

async fn lockouts(p: &Proc) -> serde_json::Value {
    let url = format!("{}/api/resilience/model-cooldowns", p.base);
    json(&send("GET", &url, &[ADMIN], "", Duration::from_secs(10)).await.expect("lockouts"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_are_checked_applied_at_once_kept_across_reload_and_restart_and_deleted() {
    let (addr, _) = upstream(
        ScriptedUpstream::new()
            .route("busy", Script::always(Behaviour::status(503, r#"{"error":{"message":"overloaded"}}"#)))
            .route("fine", Script::always(Behaviour::echo())),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("ferroute.toml");
    let text = format!(
        "[server]\ndata_dir = \"data\"\nadmin_key = \"admin-key-0001\"\n[[providers]]\nid = \"up\"\nbase_url = \"http://{addr}/v1\"\nmodels = [\"busy\", \"fine\"]\n[[connections]]\nid = \"k1\"\nprovider = \"up\"\napi_key = \"sk-1\"\n[[connections]]\nid = \"k2\"\nprovider = \"up\"\napi_key = \"sk-2\"\n"
    );
    std::fs::write(&cfg, text).expect("config");
    let cfg_arg = cfg.display().to_string();
    let p = spawn(&["--config", &cfg_arg], dir.path()).await;

    let r = settings(&p, "GET", "").await;
    let v = json(&r);
    assert_eq!(v["effective"]["model_lockout"]["enabled"], false, "{v}");
    assert_eq!(v["overrides"], serde_json::json!({}));
    assert_eq!(v["effective"], v["file"]);

    // The admin key is required; a wrong method is named.
    let url = format!("{}/api/resilience/settings", p.base);
    let r = send("PATCH", &url, &[("x-ferroute-admin-key", "wrong-key-0000")], "{}", Duration::from_secs(5)).await;
    assert_eq!(r.expect("refused").status, 401);
    assert_eq!(settings(&p, "POST", "{}").await.status, 405);

    // Invalid: max below base, a value out of range, an unknown key, not an object.
    let r = settings(&p, "PATCH", r#"{"model_lockout": {"base_cooldown_ms": 60000, "max_cooldown_ms": 1000}}"#).await;
    assert_eq!(r.status, 422, "{}", r.body);
    let v = json(&r);
    assert_eq!(v["error"]["code"], "invalid_settings");
    let fields: Vec<&str> =
        v["error"]["problems"].as_array().expect("problems").iter().filter_map(|p| p["field"].as_str()).collect();
    assert!(fields.iter().any(|f| f.contains("max_cooldown_ms")), "{v}");
    let r = settings(&p, "PATCH", r#"{"model_lockout": {"enabled": true, "bogus": 1}}"#).await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(r.body.contains("bogus"), "{}", r.body);
    let r = settings(&p, "PATCH", r#"{"model_lockout": {"enabled": "yes"}}"#).await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(settings(&p, "PATCH", "[1]").await.status, 400);
    assert_eq!(settings(&p, "PATCH", "{").await.status, 400);
    let v = json(&settings(&p, "GET", "").await);
    assert_eq!(
        (v["overrides"].clone(), v["effective"]["model_lockout"]["enabled"].clone()),
        (serde_json::json!({}), false.into()),
        "nothing half-applied: {v}"
    );

    // Before: a 503 locks nothing. After the change, at once: it locks the model.
    assert_eq!(chat_at(&p.base, "up/busy").await.status, 503);
    assert_eq!(lockouts(&p).await["items"].as_array().map(Vec::len), Some(0));
    let r = settings(&p, "PATCH", r#"{"model_lockout": {"enabled": true, "base_cooldown_ms": 60000}}"#).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = json(&r);
    assert_eq!(v["effective"]["model_lockout"]["enabled"], true, "{v}");
    assert_eq!(v["file"]["model_lockout"]["enabled"], false, "{v}");
    assert_eq!(v["overrides"], serde_json::json!({"model_lockout": {"enabled": true, "base_cooldown_ms": 60000}}));
    assert_eq!(chat_at(&p.base, "up/busy").await.status, 503);
    let items = lockouts(&p).await;
    assert!(items["items"].as_array().is_some_and(|a| !a.is_empty()), "a lockout after the change: {items}");
    // A merge patch: null removes one override, the rest stays.
    let v = json(&settings(&p, "PATCH", r#"{"model_lockout": {"base_cooldown_ms": null}}"#).await);
    assert_eq!(v["overrides"], serde_json::json!({"model_lockout": {"enabled": true}}), "{v}");

    // A reload keeps the override over the file.
    let r = send("POST", &format!("{}/api/config/reload", p.base), &[ADMIN], "", Duration::from_secs(10)).await;
    assert_eq!(r.expect("reload").status, 200);
    assert_eq!(json(&settings(&p, "GET", "").await)["effective"]["model_lockout"]["enabled"], true);

    // A restart too (the override is in the state store).
    drop(p);
    let p = spawn(&["--config", &cfg_arg], dir.path()).await;
    let v = json(&settings(&p, "GET", "").await);
    assert_eq!(v["effective"]["model_lockout"]["enabled"], true, "after a restart: {v}");
    assert_eq!(v["overrides"], serde_json::json!({"model_lockout": {"enabled": true}}));

    // DELETE: the file's settings again, also after the next restart.
    let v = json(&settings(&p, "DELETE", "").await);
    assert_eq!(
        (v["overrides"].clone(), v["effective"]["model_lockout"]["enabled"].clone()),
        (serde_json::json!({}), false.into()),
        "{v}"
    );
    drop(p);
    let p = spawn(&["--config", &cfg_arg], dir.path()).await;
    let v = json(&settings(&p, "GET", "").await);
    assert_eq!(v["effective"], v["file"], "{v}");
}
