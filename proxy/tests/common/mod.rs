//! Helpers shared by the tests that run the real binary.
#![allow(dead_code)]

use chaos::client::{Reply, send};
use scenarios::{ScriptedUpstream, serve_upstream};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// A running `ferroute`, killed (SIGKILL) when dropped.
pub struct Proc {
    /// The process.
    pub child: Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts ferroute on an ephemeral port (`--listen 127.0.0.1:0`) and reads the address it
/// announces on stdout, so concurrent tests never race for a port.
pub async fn spawn(args: &[&str], cwd: &std::path::Path) -> Proc {
    spawn_with_env(args, cwd, &[]).await
}

/// The same with `env` set for the process.
#[allow(dead_code)] // not every test binary sets variables
pub async fn spawn_with_env(args: &[&str], cwd: &std::path::Path, env: &[(&str, &str)]) -> Proc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferroute"))
        .args(args)
        .args(["--listen", "127.0.0.1:0"])
        .current_dir(cwd)
        .env("FERROUTE_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ferroute");
    let stdout = child.stdout.take().expect("stdout");
    let line = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|l| l.strip_prefix("ferroute listening on ").map(str::to_owned))
    });
    match tokio::time::timeout(Duration::from_secs(20), line).await {
        Ok(Ok(Some(base))) => Proc { child, base },
        other => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ferroute did not announce its address: {other:?}");
        }
    }
}

/// A scripted upstream on an ephemeral loopback port.
pub async fn upstream(script: ScriptedUpstream) -> (SocketAddr, Arc<ScriptedUpstream>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    let script = Arc::new(script);
    tokio::spawn(serve_upstream(listener, Arc::clone(&script)));
    (addr, script)
}

/// A chat completion, non-streaming.
pub async fn chat_at(base: &str, model: &str) -> Reply {
    let body = serde_json::json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}).to_string();
    send("POST", &format!("{base}/v1/chat/completions"), &[], &body, Duration::from_secs(30)).await.expect("response")
}

/// The body as JSON (the test fails otherwise).
pub fn json(r: &Reply) -> serde_json::Value {
    r.json().unwrap_or_else(|| panic!("not JSON: {}", r.body))
}
