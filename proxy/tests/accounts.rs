//! `ferroute accounts` as a process: tokens that Claude Code and Codex stored are imported into
//! an OAuth connection's store, listed without a secret, and served by the real binary.

mod common;

use common::{spawn, upstream};
use scenarios::token_server::{Grant, TokenServer, serve_token_server};
use scenarios::{Behaviour, Script, ScriptedUpstream};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

/// The real binary reads the real clock, so the files it imports carry real expiry times.
#[allow(clippy::disallowed_methods)]
fn wall_now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn ferroute(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ferroute")).args(args).output().expect("run ferroute");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A config with one OAuth connection per preset (`claude-1`, `codex-1`) whose own tokens
/// are long gone: the clients' files hold the live sign-ins. Returns its path.
fn write_config(dir: &Path, up: SocketAddr, tokens: SocketAddr) -> String {
    let cfg = format!(
        r#"[server]
data_dir = "{data}"
secret_key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
[[providers]]
id = "sub"
format = "anthropic"
class = "oauth"
base_url = "http://{up}/v1"
models = ["m"]
[[connections]]
id = "claude-1"
provider = "sub"
oauth = {{ preset = "claude", access_token = "at-old", refresh_token = "rt-old", expires_at = 1780000000000, token_url = "http://{tokens}/v1/oauth/token" }}
[[providers]]
id = "gpt"
format = "responses"
class = "oauth"
base_url = "http://{up}/v1"
models = ["m"]
[[connections]]
id = "codex-1"
provider = "gpt"
oauth = {{ preset = "codex", access_token = "at-old2", refresh_token = "rt-old2", expires_at = 1780000000000, token_url = "http://{tokens}/oauth/token", account_id = "acct-9" }}
"#,
        data = dir.join("data").display(),
    );
    let path = dir.join("ferroute.toml");
    std::fs::write(&path, cfg).expect("config");
    path.display().to_string()
}

/// Claude Code's credentials file for `grant`, expiring at `expires` (Unix ms).
fn write_claude_file(dir: &Path, grant: &Grant, expires: u64) -> String {
    let path = dir.join(".credentials.json");
    let body = format!(
        r#"{{"claudeAiOauth":{{"accessToken":"{}","refreshToken":"{}","expiresAt":{expires},"scopes":["user:inference"]}}}}"#,
        grant.access_token, grant.refresh_token
    );
    std::fs::write(&path, body).expect("claude file");
    path.display().to_string()
}

/// Codex's auth file for `grant`. Codex stores JWTs; the upstream here knows the token
/// server's own tokens, so the file carries a JWT whose expiry is read, and the gateway's
/// refresh swaps it for a live one.
fn write_codex_file(dir: &Path, grant: &Grant, expires: u64) -> String {
    use base64::Engine as _;
    let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!(r#"{{"exp":{}}}"#, expires / 1000));
    let path = dir.join("auth.json");
    let body = format!(
        r#"{{"OPENAI_API_KEY":null,"tokens":{{"id_token":"x","access_token":"eyJhbGciOiJSUzI1NiJ9.{claims}.sig","refresh_token":"{}","account_id":"acct-9"}}}}"#,
        grant.refresh_token
    );
    std::fs::write(&path, body).expect("codex file");
    path.display().to_string()
}

/// `ferroute --config CFG accounts import CLIENT FILE --connection ID`.
fn import(cfg: &str, client: &str, file: &str, connection: &str) -> (i32, String, String) {
    ferroute(&["--config", cfg, "accounts", "import", client, file, "--connection", connection])
}

/// A chat completion for `model` through the gateway at `base`.
async fn ask(base: &str, model: &str) -> chaos::client::Reply {
    let body = serde_json::json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}).to_string();
    chaos::client::send("POST", &format!("{base}/v1/chat/completions"), &[], &body, Duration::from_secs(30))
        .await
        .expect("an answer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_and_codex_credentials_are_imported_listed_and_served() {
    let tokens = Arc::new(TokenServer::new(Duration::from_secs(3600)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind token server");
    let token_addr = listener.local_addr().expect("addr");
    tokio::spawn(serve_token_server(listener, Arc::clone(&tokens)));
    let (up_addr, up) = upstream(
        ScriptedUpstream::new().route("m", Script::always(Behaviour::echo())).require_tokens(Arc::clone(&tokens)),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = write_config(dir.path(), up_addr, token_addr);
    let (claude, codex) = (tokens.sign_in(), tokens.sign_in());
    let expires = wall_now_ms() + 3_600_000;
    let claude_file = write_claude_file(dir.path(), &claude, expires);
    let codex_file = write_codex_file(dir.path(), &codex, expires);

    // A malformed file: the field is named, the exit code is 2, nothing is written.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"claudeAiOauth":{"accessToken":"a","expiresAt":1}}"#).expect("bad file");
    let (code, _, err) = import(&cfg, "claude-code", &bad.display().to_string(), "claude-1");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("claudeAiOauth.refreshToken is missing"), "{err}");
    let (code, listed, err) = ferroute(&["--config", &cfg, "accounts", "list"]);
    assert_eq!(code, 0, "{err}");
    assert!(listed.contains("claude-1\tclaude\tconfig\t"), "{listed}");

    // Both files imported, listed as stored, no secret shown.
    let (code, out, err) = import(&cfg, "claude-code", &claude_file, "claude-1");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("imported tokens for claude-1") && out.contains("encrypted"), "{out}");
    let (code, out, err) = import(&cfg, "codex", &codex_file, "codex-1");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("imported tokens for codex-1"), "{out}");
    let (code, listed, _) = ferroute(&["--config", &cfg, "accounts", "list"]);
    assert_eq!(code, 0);
    assert!(listed.contains("claude-1\tclaude\tstored\t") && listed.contains("codex-1\tcodex\tstored\t"), "{listed}");
    for secret in [&claude.access_token, &claude.refresh_token, &codex.refresh_token] {
        assert!(!listed.contains(secret.as_str()), "a secret in the listing");
    }

    // The real gateway serves both with the imported sign-ins: Claude's token as it is, Codex's
    // after a refresh that presents the imported refresh token once.
    let p = spawn(&["--config", &cfg], dir.path()).await;
    let r = ask(&p.base, "sub/m").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = ask(&p.base, "gpt/m").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let stats = tokens.stats();
    assert_eq!((stats.refreshed, stats.reused, stats.refused), (1, 0, 0), "{stats:?}");
    let sent = up.requests();
    assert!(sent.iter().any(|r| r.headers.get("authorization") == Some(&format!("Bearer {}", claude.access_token))));
    let codex_sent = sent.iter().rfind(|r| r.path.ends_with("/responses")).expect("a codex request");
    assert_eq!(codex_sent.headers.get("chatgpt-account-id").map(String::as_str), Some("acct-9"));
    drop(p);
}
