//! The official OpenAI, Anthropic and Google Gen AI Python SDKs against the gateway
//! (`tests/sdk/clients.py`):
//! every client API to every provider format, streamed and not, with tools, errors and
//! cross-format combos. The SDKs live in a virtualenv that `.ci/run` creates with
//! `tests/sdk/setup.sh`; outside CI the test creates it the same way. In CI a missing
//! virtualenv fails the test.

mod common;

use common::*;
use proxy::Persistence;
use scenarios::{Behaviour, Script, ScriptedUpstream};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Providers whose only model answers 429, one per format, so that the rate-limited
/// connections are not the ones the other cases use.
const LIMITED: &str = r#"
[[providers]]
id = "oai-lim"
format = "openai"
base_url = "{UP}"
models = ["limited"]
[[connections]]
id = "oai-lim-1"
provider = "oai-lim"
api_key = "sk-oai"
[[providers]]
id = "ant-lim"
format = "anthropic"
base_url = "{UP}"
models = ["limited"]
[[connections]]
id = "ant-lim-1"
provider = "ant-lim"
api_key = "sk-ant"
[[providers]]
id = "gem-lim"
format = "gemini"
base_url = "{UP}"
models = ["limited"]
[[connections]]
id = "gem-lim-1"
provider = "gem-lim"
api_key = "sk-gem"
"#;

fn sdk_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("sdk")
}

/// The virtualenv's python, creating the virtualenv outside CI.
fn python() -> Option<PathBuf> {
    let venv = std::env::var_os("FERROUTE_SDK_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("target").join("sdk-venv"));
    let python = venv.join("bin").join("python");
    let ready = || {
        Command::new(&python).args(["-c", "import openai, anthropic, google.genai"]).status().is_ok_and(|s| s.success())
    };
    if ready() {
        return Some(python);
    }
    let in_ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    assert!(
        !in_ci,
        "the SDK virtualenv {} is missing or broken: .ci/run creates it with tests/sdk/setup.sh",
        venv.display()
    );
    let made = Command::new("bash").arg(sdk_dir().join("setup.sh")).arg(&venv).status().is_ok_and(|s| s.success());
    if made && ready() {
        return Some(python);
    }
    eprintln!(
        "skipped: could not create the SDK virtualenv (needs python3 with venv and access to PyPI); run tests/sdk/setup.sh"
    );
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdks_work_for_every_client_and_provider_pairing() {
    let Some(python) = tokio::task::spawn_blocking(python).await.expect("venv check") else { return };
    let overloaded =
        Behaviour::status(529, r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#);
    let limited = Behaviour::status_with(
        429,
        &[("retry-after", "9")],
        r#"{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}"#,
    );
    let up = upstream(
        ScriptedUpstream::new()
            .route("tools", Script::always(Behaviour::tool_echo()))
            .route("failing", Script::always(overloaded))
            .route("limited", Script::always(limited)),
    )
    .await;
    let gw = start(config(&format!("{TWO_FORMATS}{NEW_FORMATS}{LIMITED}"), &up), Persistence::Memory).await;
    let base = format!("http://{}", gw.addr);
    let script = sdk_dir().join("clients.py");
    let out = tokio::task::spawn_blocking(move || Command::new(python).arg(script).arg(base).output())
        .await
        .expect("join")
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "SDK checks failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("sdk: 37 passed, 0 failed"), "{stdout}");
}
