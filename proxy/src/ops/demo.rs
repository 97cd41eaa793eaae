//! The built-in demo provider: the scripted upstream on loopback, so that a chat completion
//! works offline at once. `demo/echo` echoes; `demo/tools` calls the first tool a request
//! declares and then echoes its result; `demo/flaky` fails for the first 20 s of every minute,
//! so its breaker visibly opens and recovers. `demo-claude/…`, `demo-gemini/…` and
//! `demo-responses/…` (`echo` and `tools`) are the same behind Anthropic-, Gemini- and
//! Responses-format providers, so every client API reaches every format.

use scenarios::{Behaviour, Mode, Script, ScriptedUpstream, Window, serve_upstream};
use std::net::SocketAddr;
use std::sync::Arc;

/// The demo's scripts.
pub fn upstream() -> ScriptedUpstream {
    let unavailable = Behaviour::status(
        503,
        r#"{"error":{"message":"demo/flaky is in its failing window (the first 20 s of every minute)","type":"server_error"}}"#,
    );
    ScriptedUpstream::new()
        .route("echo", Script::always(Behaviour::Echo { latency_ms: 0, chunk_ms: 20 }))
        .route("tools", Script::always(Behaviour::ToolEcho { latency_ms: 0, chunk_ms: 20 }))
        .route(
            "flaky",
            Script(Mode::Schedule {
                period_ms: 60_000,
                windows: vec![Window { from_ms: 0, to_ms: 20_000, behaviour: unavailable }],
                otherwise: Box::new(Behaviour::Echo { latency_ms: 0, chunk_ms: 20 }),
            }),
        )
}

/// Starts the demo upstream on an ephemeral loopback port; returns its address.
pub async fn start() -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(serve_upstream(listener, Arc::new(upstream())));
    Ok(addr)
}
