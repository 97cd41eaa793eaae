//! The real coding agents. The requests Claude Code and Codex send (captured from the CLIs
//! against the scripted upstream, in `tests/fixtures/`) go through the gateway to both provider
//! formats in the default suite; with `RUN_REAL_CLIENTS=1` the CLIs themselves are installed
//! from npm into a temp folder and run non-interactively through the gateway, to both
//! provider formats, answering plainly and through a whole tool loop.

mod common;

use common::*;
use proxy::Persistence;
use scenarios::{Behaviour, Script, ScriptedUpstream};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Fixture {
    path: String,
    headers: Vec<(String, String)>,
    body: Value,
}

fn fixture(name: &str) -> Fixture {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(name);
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let v: Value = serde_json::from_str(&text).expect("fixture JSON");
    let headers = v["headers"]
        .as_object()
        .expect("headers")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
        .collect();
    Fixture { path: v["path"].as_str().expect("path").to_owned(), headers, body: v["body"].clone() }
}

async fn replay(gw: &Running, f: &Fixture, model: &str) -> Reply {
    let mut body = f.body.clone();
    body["model"] = model.into();
    let headers: Vec<(&str, &str)> = f.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    send("POST", &gw.url(&f.path), &headers, &body.to_string()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_codes_request_reaches_both_provider_formats() {
    let up = upstream(ScriptedUpstream::new().route("echo", Script::always(Behaviour::echo()))).await;
    let gw = start(config(TWO_FORMATS, &up), Persistence::Memory).await;
    let f = fixture("claude-code-2.1.197.json");
    let beta = f.headers.iter().find(|(k, _)| k == "anthropic-beta").map(|(_, v)| v.clone()).expect("beta header");

    // Same format: the beta header and the body (but the model) reach the provider unchanged.
    let r = replay(&gw, &f, "ant/echo").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(scenarios::answer::stream_done_as(&r.body, true), "{}", r.body);
    let seen = up.script.requests().pop().expect("request");
    assert_eq!(seen.path, "/v1/messages");
    assert_eq!(seen.query.as_deref(), Some("beta=true"), "the query string rides along on a same-format hop");
    assert_eq!(seen.headers.get("anthropic-beta"), Some(&beta));
    let mut sent: Value = serde_json::from_str(&seen.body).expect("json");
    sent["model"] = "ant/echo".into();
    let mut expected = f.body.clone();
    expected["model"] = "ant/echo".into();
    assert_eq!(sent, expected);

    // Across formats: Claude Code's betas are mapped or named, its fields translated.
    let r = replay(&gw, &f, "oai/echo").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(scenarios::answer::stream_done_as(&r.body, true), "{}", r.body);
    let text: String = sse_data(&r.body)
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| v.pointer("/delta/text").and_then(Value::as_str).map(str::to_owned))
        .collect();
    assert!(text.contains("say hello ferroute"), "{text}");
    let dropped = r.header("x-ferroute-translation-dropped").unwrap_or("");
    for named in ["anthropic-beta:claude-code-20250219", "cache_control", "context_management"] {
        assert!(dropped.contains(named), "{named} in {dropped}");
    }
    let seen = up.script.requests().pop().expect("request");
    assert_eq!(seen.path, "/v1/chat/completions");
    let sent: Value = serde_json::from_str(&seen.body).expect("json");
    assert_eq!(sent["reasoning_effort"], "high", "output_config.effort maps to reasoning_effort");
    assert_eq!(sent["tools"].as_array().map(Vec::len), f.body["tools"].as_array().map(Vec::len));
    assert!(sent["messages"].as_array().is_some_and(|m| m.iter().any(|m| m["role"] == "system")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codexs_request_reaches_both_provider_formats() {
    let up = upstream(ScriptedUpstream::new().route("echo", Script::always(Behaviour::echo()))).await;
    let gw = start(config(TWO_FORMATS, &up), Persistence::Memory).await;
    let f = fixture("codex-0.171.0.json");
    for (model, path) in [("oai/echo", "/v1/chat/completions"), ("ant/echo", "/v1/messages")] {
        let r = replay(&gw, &f, model).await;
        assert_eq!(r.status, 200, "{model}: {}", r.body);
        let events: Vec<Value> =
            sse_data(&r.body).iter().map(|d| serde_json::from_str(d).expect("event JSON")).collect();
        assert_eq!(events.first().map(|e| e["type"].clone()), Some("response.created".into()));
        let done = events.last().expect("events");
        assert_eq!(done["type"], "response.completed", "{model}: {}", r.body);
        let text = done["response"]["output"][0]["content"][0]["text"].as_str().unwrap_or("");
        assert!(text.contains("say hello ferroute"), "{model}: {text}");
        let dropped = r.header("x-ferroute-translation-dropped").unwrap_or("");
        for named in ["client_metadata", "tools:web_search", "tools:namespace:multi_agent_v1", "include"] {
            assert!(dropped.contains(named), "{model}: {named} in {dropped}");
        }
        assert_eq!(up.script.requests().pop().map(|r| r.path).as_deref(), Some(path));
    }
}

/// `npm install`s both CLIs into `dir`; returns the `.bin` folder.
fn install_clis(dir: &Path) -> PathBuf {
    let status = Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--silent",
            "@anthropic-ai/claude-code@2.1",
            "@openai/codex@0.171",
        ])
        .current_dir(dir)
        .status()
        .expect("npm runs");
    assert!(status.success(), "npm install of the CLIs failed");
    dir.join("node_modules").join(".bin")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_claude_code_and_codex_answer_through_the_gateway() {
    if std::env::var("RUN_REAL_CLIENTS").as_deref() != Ok("1") {
        eprintln!("skipped (set RUN_REAL_CLIENTS=1 to install and run claude and codex from npm)");
        return;
    }
    // `echo` answers with the prompt; `tools` calls the agent's first tool, and answers with
    // what the agent sends back (its own validation error here): a whole tool loop.
    let up = upstream(
        ScriptedUpstream::new()
            .route("echo", Script::always(Behaviour::echo()))
            .route("tools", Script::always(Behaviour::tool_echo())),
    )
    .await;
    let gw = start(config(TWO_FORMATS, &up), Persistence::Memory).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = tokio::task::spawn_blocking({
        let d = dir.path().to_owned();
        move || install_clis(&d)
    })
    .await
    .expect("install");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let base = format!("http://{}", gw.addr);
    for (model, expect) in [
        ("ant/echo", "say hello ferroute"),
        ("oai/echo", "say hello ferroute"),
        ("ant/tools", "tool said:"),
        ("oai/tools", "tool said:"),
    ] {
        let out = Command::new(bin.join("claude"))
            .args(["-p", "say hello ferroute", "--model", model])
            .env("HOME", &home)
            .env("ANTHROPIC_BASE_URL", &base)
            .env("ANTHROPIC_API_KEY", "sk-local")
            .env("ANTHROPIC_DEFAULT_HAIKU_MODEL", model)
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("claude runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "claude -p via {model}: {stdout} {}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains(expect), "claude -p via {model}: {stdout}");
        if model == "ant/echo" {
            let seen = up.script.requests().into_iter().rfind(|r| r.path.starts_with("/v1/messages")).expect("request");
            let beta = seen.headers.get("anthropic-beta").cloned().unwrap_or_default();
            assert!(beta.contains("claude-code-"), "Claude Code's beta header reached the provider: {beta:?}");
        }
    }
    let codex_home = dir.path().join("codex-home");
    std::fs::create_dir_all(&codex_home).expect("codex home");
    for (model, expect) in [
        ("oai/echo", "say hello ferroute"),
        ("ant/echo", "say hello ferroute"),
        ("oai/tools", "tool said:"),
        ("ant/tools", "tool said:"),
    ] {
        let cfg = format!(
            "model = \"{model}\"\nmodel_provider = \"ferroute\"\n[model_providers.ferroute]\nname = \"Ferroute\"\nbase_url = \"{base}/v1\"\nenv_key = \"FERROUTE_KEY\"\nwire_api = \"responses\"\n"
        );
        std::fs::write(codex_home.join("config.toml"), cfg).expect("codex config");
        let out = Command::new(bin.join("codex"))
            .args(["exec", "--skip-git-repo-check", "say hello ferroute"])
            .env("CODEX_HOME", &codex_home)
            .env("FERROUTE_KEY", "sk-local")
            .current_dir(dir.path())
            .stdin(std::process::Stdio::null())
            .output()
            .expect("codex runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "codex exec via {model}: {stdout} {}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains(expect), "codex exec via {model}: {stdout}");
    }
}
