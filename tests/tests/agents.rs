//! The real coding agents. The requests Claude Code, Codex and Gemini CLI send (captured from
//! the CLIs against a scripted upstream, in `tests/fixtures/`) go through the gateway to every
//! provider format in the default suite; with `RUN_REAL_CLIENTS=1` the CLIs themselves are
//! installed from npm into a temp folder and run non-interactively through the gateway, to
//! every provider format, answering plainly and through a whole tool loop.

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
async fn codexs_request_reaches_every_provider_format() {
    let up = upstream(ScriptedUpstream::new().route("echo", Script::always(Behaviour::echo()))).await;
    let gw = start(config(&format!("{TWO_FORMATS}{NEW_FORMATS}"), &up), Persistence::Memory).await;
    let f = fixture("codex-0.171.0.json");
    // To a Responses-format provider: Codex's own bytes, only the model changed.
    let r = replay(&gw, &f, "rsp/echo").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let seen = up.script.requests().pop().expect("request");
    assert_eq!(seen.path, "/v1/responses");
    let mut sent: Value = serde_json::from_str(&seen.body).expect("json");
    sent["model"] = "rsp/echo".into();
    let mut expected = f.body.clone();
    expected["model"] = "rsp/echo".into();
    assert_eq!(sent, expected);
    for (model, path) in [
        ("oai/echo", "/v1/chat/completions"),
        ("ant/echo", "/v1/messages"),
        ("gem/echo", "/v1/models/echo:streamGenerateContent"),
    ] {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_clis_request_reaches_every_provider_format() {
    let up = upstream(ScriptedUpstream::new().route("echo", Script::always(Behaviour::echo()))).await;
    let gw = start(config(&format!("{TWO_FORMATS}{NEW_FORMATS}"), &up), Persistence::Memory).await;
    let f = fixture("gemini-cli-0.61.0.json");
    let headers: Vec<(&str, &str)> = f.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    for (model, path) in [
        ("gem/echo", "/v1/models/echo:streamGenerateContent"),
        ("oai/echo", "/v1/chat/completions"),
        ("ant/echo", "/v1/messages"),
        ("rsp/echo", "/v1/responses"),
    ] {
        let url = f.path.replace("gemini-2.5-flash", model);
        let r = send("POST", &gw.url(&url), &headers, &f.body.to_string()).await;
        assert_eq!(r.status, 200, "{model}: {}", r.body);
        assert!(scenarios::answer::stream_done_gemini(&r.body), "{model}: {}", r.body);
        let text: String = sse_data(&r.body)
            .iter()
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .filter_map(|v| v.pointer("/candidates/0/content/parts/0/text").and_then(Value::as_str).map(str::to_owned))
            .collect();
        assert!(text.contains("say hello ferroute"), "{model}: {text}");
        let seen = up.script.requests().pop().expect("request");
        assert_eq!(seen.path, path, "{model}");
        let sent: Value = serde_json::from_str(&seen.body).expect("json");
        if model == "gem/echo" {
            // Same format: the CLI's body as it was, its key replaced by the provider's.
            assert_eq!(sent, f.body);
            assert_eq!(seen.query.as_deref(), Some("alt=sse"));
            assert_eq!(seen.headers.get("x-goog-api-key").map(String::as_str), Some("sk-gem"));
            continue;
        }
        let dropped = r.header("x-ferroute-translation-dropped").unwrap_or("");
        assert!(dropped.contains("generationConfig.thinkingConfig.includeThoughts"), "{model}: {dropped}");
        // Top-k reaches Anthropic as `top_k`; the chat and Responses providers have none.
        if model == "ant/echo" {
            assert!(!dropped.contains("generationConfig.topK"), "{model}: {dropped}");
            assert_eq!(sent["top_k"], f.body["generationConfig"]["topK"], "{model}: {sent}");
        } else {
            assert!(dropped.contains("generationConfig.topK"), "{model}: {dropped}");
            assert!(sent.get("top_k").is_none() && sent.get("x_ferroute_top_k").is_none(), "{model}: {sent}");
        }
        let tools = sent["tools"].as_array().map(Vec::len);
        assert_eq!(tools, f.body["tools"][0]["functionDeclarations"].as_array().map(Vec::len), "{model}");
    }
}

/// `npm install`s the three CLIs into `dir`; returns the `.bin` folder.
fn install_clis(dir: &Path) -> PathBuf {
    let status = Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--silent",
            "@anthropic-ai/claude-code@2.1",
            "@openai/codex@0.171",
            "@google/gemini-cli@0.61",
        ])
        .current_dir(dir)
        .status()
        .expect("npm runs");
    assert!(status.success(), "npm install of the CLIs failed");
    dir.join("node_modules").join(".bin")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_claude_code_codex_and_gemini_cli_answer_through_the_gateway() {
    if std::env::var("RUN_REAL_CLIENTS").as_deref() != Ok("1") {
        eprintln!("skipped (set RUN_REAL_CLIENTS=1 to install and run claude, codex and gemini from npm)");
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
    let gw = start(config(&format!("{TWO_FORMATS}{NEW_FORMATS}"), &up), Persistence::Memory).await;
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
    for (model, expect) in EVERY_FORMAT {
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
    for (model, expect) in EVERY_FORMAT {
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
    // Gemini CLI: the gateway as its Gemini API (`GOOGLE_GEMINI_BASE_URL`), an API key, and
    // this temp folder trusted for a headless run.
    let gemini_home = dir.path().join("gemini-home");
    std::fs::create_dir_all(gemini_home.join(".gemini")).expect("gemini home");
    std::fs::write(
        gemini_home.join(".gemini").join("settings.json"),
        r#"{"security":{"auth":{"selectedType":"gemini-api-key"}}}"#,
    )
    .expect("gemini settings");
    for (model, expect) in EVERY_FORMAT {
        let out = Command::new(bin.join("gemini"))
            .args(["-p", "say hello ferroute", "-m", model])
            .env("HOME", &gemini_home)
            .env("GOOGLE_GEMINI_BASE_URL", &base)
            .env("GEMINI_API_KEY", "sk-local")
            .env("GEMINI_CLI_TRUST_WORKSPACE", "true")
            .current_dir(dir.path())
            .stdin(std::process::Stdio::null())
            .output()
            .expect("gemini runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "gemini -p via {model}: {stdout} {}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains(expect), "gemini -p via {model}: {stdout}");
    }
    let via_gemini = up.script.requests().into_iter().filter(|r| r.path.contains(":streamGenerateContent")).count();
    assert!(via_gemini >= 2, "the Gemini-format provider was reached ({via_gemini} requests)");
}

/// Every provider format, answering plainly and through a tool loop.
const EVERY_FORMAT: [(&str, &str); 8] = [
    ("oai/echo", "say hello ferroute"),
    ("ant/echo", "say hello ferroute"),
    ("rsp/echo", "say hello ferroute"),
    ("gem/echo", "say hello ferroute"),
    ("oai/tools", "tool said:"),
    ("ant/tools", "tool said:"),
    ("rsp/tools", "tool said:"),
    ("gem/tools", "tool said:"),
];
