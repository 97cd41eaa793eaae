//! Hot reload of the real binary: the admin endpoint and SIGHUP swap the config in; an invalid
//! config is refused with every problem; state survives where the upstream and key did not
//! change; requests and streams in flight finish on the config they started with.

mod common;

use chaos::client::{Reply, connection_status, health, send};
use common::{Proc, chat_at, json, spawn, upstream};
use scenarios::{Behaviour, Script, ScriptedUpstream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const ADMIN: (&str, &str) = ("x-ferroute-admin-key", "admin-key-0001");

async fn reload(p: &Proc) -> Reply {
    send("POST", &format!("{}/api/config/reload", p.base), &[ADMIN], "", Duration::from_secs(10)).await.expect("reload")
}

fn ids(v: &serde_json::Value) -> Vec<&str> {
    v.as_array().map(|a| a.iter().filter_map(|x| x.as_str()).collect()).unwrap_or_default()
}

fn provider(id: &str, addr: std::net::SocketAddr, models: &str) -> String {
    format!("[[providers]]\nid = \"{id}\"\nbase_url = \"http://{addr}/v1\"\nmodels = [{models}]\n")
}

fn connection(id: &str, provider: &str, key: &str) -> String {
    format!("[[connections]]\nid = \"{id}\"\nprovider = \"{provider}\"\napi_key = \"{key}\"\n")
}

/// Writes the config whole (a new file renamed over the old), as editors and deploy tools do,
/// so that a reload never reads half a file.
fn write(path: &Path, parts: &[String]) {
    let head = "[server]\ndata_dir = \"data\"\nadmin_key = \"admin-key-0001\"\n".to_owned();
    replace(path, &(head + &parts.concat()));
}

fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).expect("write config");
    std::fs::rename(&tmp, path).expect("rename config");
}

async fn chat_text(base: &str, model: &str, text: &str, stream: bool) -> Reply {
    let body = serde_json::json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": text}]});
    send("POST", &format!("{base}/v1/chat/completions"), &[], &body.to_string(), Duration::from_secs(30))
        .await
        .expect("response")
}

/// The text a streamed chat completion carried, and whether it ended with `[DONE]`.
fn streamed(r: &Reply) -> (String, bool) {
    let data = r.sse_data();
    let text = data
        .iter()
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter_map(|v| v["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect();
    (text, data.last().is_some_and(|d| d == "[DONE]"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_and_sighup_reload_and_an_invalid_config_is_refused_whole() {
    let (addr, up) = upstream(
        ScriptedUpstream::new()
            .route("a", Script::always(Behaviour::echo()))
            .route("b", Script::always(Behaviour::echo()))
            .route("limited", Script::always(Behaviour::status_with(429, &[("retry-after", "120")], "{}"))),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("ferroute.toml");
    let models = "\"a\", \"limited\"";
    write(&cfg, &[provider("up", addr, models), connection("k1", "up", "sk-1")]);
    let cfg_arg = cfg.display().to_string();
    let p = spawn(&["--config", &cfg_arg], dir.path()).await;

    // A 429 with Retry-After 120 cools k1.
    assert_eq!(chat_at(&p.base, "up/limited").await.status, 429);
    assert_eq!(connection_status(&health(&p.base).await.expect("health"), "k1"), "unavailable");

    // The admin key is required.
    let r = send("POST", &format!("{}/api/config/reload", p.base), &[], "", Duration::from_secs(10)).await;
    assert_eq!(r.expect("reload").status, 401);
    let r = reload(&p).await;
    assert_eq!((r.status, json(&r)["status"].as_str()), (200, Some("unchanged")), "{}", r.body);

    // A new model, a new connection and a combo: unchanged k1 keeps its cooldown.
    let more = "\"a\", \"b\", \"limited\"";
    let combo = "[[combos]]\nname = \"fast\"\ntargets = [\"up/b\"]\n".to_owned();
    write(
        &cfg,
        &[provider("up", addr, more), connection("k1", "up", "sk-1"), connection("k3", "up", "sk-3"), combo.clone()],
    );
    let r = reload(&p).await;
    let v = json(&r);
    assert_eq!((r.status, v["status"].as_str()), (200, Some("reloaded")), "{}", r.body);
    assert_eq!(ids(&v["providers"]["changed"]), ["up"]);
    assert!(ids(&v["providers"]["reset"]).is_empty(), "the same upstream keeps its breaker: {v}");
    assert_eq!(ids(&v["connections"]["added"]), ["k3"]);
    assert_eq!(ids(&v["combos"]["added"]), ["fast"]);
    let h = health(&p.base).await.expect("health");
    assert_eq!(connection_status(&h, "k1"), "unavailable", "an unchanged connection keeps its cooldown: {h}");
    let r = chat_at(&p.base, "fast").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-ferroute-selected-connection-id"), Some("k3"));

    // Three problems: all named, nothing applied, the running config keeps serving.
    replace(
        &cfg,
        &format!(
            "[server]\nadmin_key = \"admin-key-0001\"\n{}[[providers]]\nid = \"bad\"\nbase_url = \"ftp://x\"\n{}{}",
            provider("up", addr, more),
            connection("k9", "nowhere", "sk-9"),
            "[[combos]]\nname = \"broken\"\ntargets = [\"missing/model\"]\n"
        ),
    );
    let r = reload(&p).await;
    let v = json(&r);
    assert_eq!((r.status, v["error"]["code"].as_str()), (422, Some("invalid_config")), "{}", r.body);
    let fields: Vec<&str> = v["error"]["problems"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x["field"].as_str()).collect())
        .unwrap_or_default();
    assert!(fields.len() >= 3, "every problem is named: {v}");
    for f in ["providers[1].base_url", "connections[0].provider", "combos[0]"] {
        assert!(fields.iter().any(|x| x.starts_with(f)), "{f} not in {fields:?}");
    }
    assert_eq!(chat_at(&p.base, "fast").await.status, 200, "the running config is kept");
    let unparsable = "[[providers]\nid = ";
    replace(&cfg, unparsable);
    assert_eq!(reload(&p).await.status, 422);
    assert_eq!(chat_at(&p.base, "fast").await.status, 200);

    // k1's key changes: its cooldown was the old key's, so it starts fresh.
    write(&cfg, &[provider("up", addr, more), connection("k1", "up", "sk-1-new"), combo.clone()]);
    let r = reload(&p).await;
    let v = json(&r);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(ids(&v["connections"]["reset"]), ["k1"]);
    assert_eq!(ids(&v["connections"]["removed"]), ["k3"]);
    let h = health(&p.base).await.expect("health");
    assert_eq!(connection_status(&h, "k1"), "active", "{h}");
    let listed: Vec<&str> =
        h["connections"].as_array().map(|a| a.iter().filter_map(|c| c["id"].as_str()).collect()).unwrap_or_default();
    assert_eq!(listed, ["k1"], "a removed connection leaves health");
    let queues: Vec<&str> =
        h["queues"].as_array().map(|a| a.iter().filter_map(|q| q["queue"].as_str()).collect()).unwrap_or_default();
    assert!(!queues.contains(&"up:k3"), "and so does its idle queue: {queues:?}");
    let r = chat_at(&p.base, "up/a").await;
    assert_eq!((r.status, r.header("x-ferroute-selected-connection-id")), (200, Some("k1")));
    let sent = up.requests().last().map(|q| q.headers.get("authorization").cloned()).unwrap_or_default();
    assert_eq!(sent.as_deref(), Some("Bearer sk-1-new"), "the new key goes upstream");

    // SIGHUP reloads too.
    let hup = "[[combos]]\nname = \"via-hup\"\ntargets = [\"up/a\"]\n".to_owned();
    write(&cfg, &[provider("up", addr, more), connection("k1", "up", "sk-1-new"), combo, hup]);
    let pid = p.child.id().to_string();
    assert!(Command::new("kill").args(["-HUP", &pid]).status().expect("kill").success());
    let mut served = 0;
    for _ in 0..200 {
        served = chat_at(&p.base, "via-hup").await.status;
        if served == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(served, 200, "SIGHUP loaded the new combo");
    let m = send("GET", &format!("{}/metrics", p.base), &[], "", Duration::from_secs(10)).await.expect("metrics");
    for line in
        ["ferroute_config_reloads_total{result=\"ok\"} 4", "ferroute_config_reloads_total{result=\"refused\"} 2"]
    {
        assert!(m.body.contains(line), "{line} not in metrics:\n{}", m.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_under_load_loses_no_request_and_streams_finish_on_their_config() {
    let (addr, up) = upstream(
        ScriptedUpstream::new()
            .route("fast", Script::always(Behaviour::echo()))
            .route("slow", Script::always(Behaviour::Echo { latency_ms: 0, chunk_ms: 40 })),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("ferroute.toml");
    let models = "\"fast\", \"slow\"";
    let a = vec![
        provider("up", addr, models),
        connection("k1", "up", "sk-1"),
        provider("gone", addr, models),
        connection("g1", "gone", "sk-g"),
        "[[combos]]\nname = \"c\"\ntargets = [\"up/fast\", \"gone/fast\"]\n".to_owned(),
    ];
    let b = vec![
        provider("up", addr, models),
        connection("k1", "up", "sk-1"),
        connection("k2", "up", "sk-2"),
        "[[combos]]\nname = \"c\"\ntargets = [\"up/fast\"]\n".to_owned(),
        "[resilience.breaker.api_key]\nfailure_threshold = 7\n".to_owned(),
    ];
    write(&cfg, &a);
    let cfg_arg = cfg.display().to_string();
    let p = spawn(&["--config", &cfg_arg], dir.path()).await;
    let words = "one two three four five six seven eight nine ten eleven twelve";

    // A stream on a provider the next config removes: it finishes, whole, on the old config.
    let base = p.base.clone();
    let long = tokio::spawn(async move { chat_text(&base, "gone/slow", words, true).await });
    while up.calls("slow") == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    write(&cfg, &b);
    let r = reload(&p).await;
    assert_eq!(ids(&json(&r)["providers"]["removed"]), ["gone"], "{}", r.body);
    let r = long.await.expect("join");
    assert_eq!(r.status, 200);
    assert_eq!(streamed(&r), (words.to_owned(), true), "the stream finished whole: {}", r.body);
    let r = chat_at(&p.base, "gone/slow").await;
    assert_eq!(r.status, 404, "a removed provider's models are gone for new requests: {}", r.body);

    // Eight clients, streaming and not, while the config flips 30 times (admin API and SIGHUP).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for i in 0..8 {
        let (base, stop) = (p.base.clone(), std::sync::Arc::clone(&stop));
        clients.push(tokio::spawn(async move {
            let (mut done, mut lost) = (0u32, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let stream = i % 2 == 0;
                let r = chat_text(&base, if stream { "up/slow" } else { "c" }, "a b c d", stream).await;
                let whole = if stream {
                    r.status == 200 && streamed(&r) == ("a b c d".to_owned(), true)
                } else {
                    r.status == 200 && json(&r)["choices"][0]["message"]["content"] == "a b c d"
                };
                if whole {
                    done += 1;
                } else {
                    lost.push(format!("{} {}", r.status, r.body));
                }
            }
            (done, lost)
        }));
    }
    let pid = p.child.id().to_string();
    for flip in 0..30 {
        write(&cfg, if flip % 2 == 0 { &a } else { &b });
        if flip % 3 == 0 {
            assert!(Command::new("kill").args(["-HUP", &pid]).status().expect("kill").success());
        } else {
            let r = reload(&p).await;
            assert_eq!(r.status, 200, "{}", r.body);
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut done, mut lost) = (0, Vec::new());
    for c in clients {
        let (d, l) = c.await.expect("join");
        done += d;
        lost.extend(l);
    }
    assert!(
        lost.is_empty(),
        "{} of {} requests lost across 30 reloads: {lost:?}",
        lost.len(),
        done as usize + lost.len()
    );
    assert!(done >= 40, "the load ran: {done} requests");
    eprintln!("reload under load: {done} requests answered whole across 30 reloads, none lost");
}
