//! The official OpenAI, Anthropic and Google Gen AI Python SDKs against the gateway
//! (`tests/sdk/clients.py`):
//! every client API to every provider format, streamed and not, with tools, errors and
//! cross-format combos. The SDKs live in a virtualenv ([`chaos::sdk::python`]).

mod common;

use common::*;
use proxy::Persistence;
use scenarios::{Behaviour, Script, ScriptedUpstream};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdks_work_for_every_client_and_provider_pairing() {
    let Some(python) = tokio::task::spawn_blocking(chaos::sdk::python).await.expect("venv check") else { return };
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
    let script = chaos::sdk::dir().join("clients.py");
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
