use super::*;

const CLAUDE: &str = r#"{"claudeAiOauth":{"accessToken":"sk-ant-oat01-abc","refreshToken":"sk-ant-ort01-def","expiresAt":1790000000000,"scopes":["user:inference"],"subscriptionType":"max"}}"#;

fn codex_file(exp_s: u64) -> String {
    use base64::Engine as _;
    let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!(r#"{{"exp":{exp_s}}}"#));
    format!(
        r#"{{"OPENAI_API_KEY":null,"tokens":{{"id_token":"x","access_token":"eyJhbGciOiJSUzI1NiJ9.{claims}.sig","refresh_token":"rt-codex","account_id":"acct-1"}},"last_refresh":"2026-11-30T10:00:00Z"}}"#
    )
}

fn config(secret: bool) -> Config {
    let text = format!(
        r#"
{}
[[providers]]
id = "sub"
format = "anthropic"
class = "oauth"
base_url = "http://127.0.0.1:9/v1"
models = ["m"]
[[connections]]
id = "claude-1"
provider = "sub"
oauth = {{ preset = "claude", access_token = "at-config", refresh_token = "rt-config", expires_at = 1780000000000 }}
[[providers]]
id = "gpt"
format = "responses"
class = "oauth"
base_url = "http://127.0.0.1:9/v1"
models = ["m"]
[[connections]]
id = "codex-1"
provider = "gpt"
oauth = {{ preset = "codex", access_token = "at-c", refresh_token = "rt-c", expires_at = 1780000000000 }}
[[connections]]
id = "key-1"
provider = "gpt"
api_key = "sk-plain"
"#,
        if secret { "[server]\nsecret_key = \"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\"" } else { "" }
    );
    Config::from_toml_str(&text, &|_| None, &[]).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn both_clients_files_are_read_and_every_missing_field_is_named() {
    let t = parse(Client::ClaudeCode, CLAUDE, "c.json").expect("claude");
    assert_eq!(
        (t.access_token.as_str(), t.refresh_token.as_str(), t.expires_at_ms),
        ("sk-ant-oat01-abc", "sk-ant-ort01-def", 1_790_000_000_000)
    );
    let t = parse(Client::Codex, &codex_file(1_790_000_000), "a.json").expect("codex");
    assert_eq!(
        (t.refresh_token.as_str(), t.expires_at_ms, t.account_id.as_deref()),
        ("rt-codex", 1_790_000_000_000, Some("acct-1"))
    );
    for (client, body, named) in [
        (Client::ClaudeCode, "{}", "c.json: claudeAiOauth.accessToken is missing"),
        (
            Client::ClaudeCode,
            r#"{"claudeAiOauth":{"accessToken":"a","refreshToken":7}}"#,
            "c.json: claudeAiOauth.refreshToken is not a string",
        ),
        (
            Client::ClaudeCode,
            r#"{"claudeAiOauth":{"accessToken":"a","refreshToken":"r"}}"#,
            "c.json: claudeAiOauth.expiresAt is missing",
        ),
        (
            Client::ClaudeCode,
            r#"{"claudeAiOauth":{"accessToken":"a","refreshToken":"r","expiresAt":1790000000}}"#,
            "c.json: claudeAiOauth.expiresAt is not a time in Unix milliseconds",
        ),
        (
            Client::ClaudeCode,
            r#"{"claudeAiOauth":{"accessToken":"","refreshToken":"r","expiresAt":1790000000000}}"#,
            "c.json: claudeAiOauth.accessToken is empty or not a token",
        ),
        (
            Client::Codex,
            r#"{"tokens":{"access_token":"not-a-jwt","refresh_token":"r"}}"#,
            "c.json: tokens.access_token is not a JWT with an `exp` claim",
        ),
        (Client::Codex, r#"{"tokens":{}}"#, "c.json: tokens.access_token is missing"),
        (Client::Codex, "[1,", "c.json: not JSON"),
    ] {
        let e = parse(client, body, "c.json").expect_err(named);
        assert!(e.starts_with(named), "{e} vs {named}");
    }
}

#[test]
fn an_import_writes_the_store_only_for_a_matching_oauth_connection_and_list_shows_no_secret() {
    let dir = tempfile::tempdir().expect("a dir");
    let cfg = config(true);
    let now = 1_780_000_000_000 - 60_000;
    let file = dir.path().join("credentials.json");
    std::fs::write(&file, CLAUDE).expect("written");
    let data = dir.path().join("data");
    // Refused: unknown connection, a connection without oauth, the other client's preset.
    assert!(
        import_file(&cfg, &data, Client::ClaudeCode, &file, "nope", now)
            .expect_err("unknown")
            .contains("OAuth connections: claude-1, codex-1")
    );
    assert!(
        import_file(&cfg, &data, Client::ClaudeCode, &file, "key-1", now)
            .expect_err("no oauth")
            .contains("has no oauth table")
    );
    assert!(
        import_file(&cfg, &data, Client::ClaudeCode, &file, "codex-1", now)
            .expect_err("preset")
            .contains("\"codex\" preset")
    );
    // A malformed file writes nothing.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"claudeAiOauth":{}}"#).expect("written");
    assert!(import_file(&cfg, &data, Client::ClaudeCode, &bad, "claude-1", now).is_err());
    let sealer = Sealer::new(cfg.server.secret_key.as_deref()).expect("key");
    assert_eq!(Store::open_dir(&data).expect("store").load_tokens("claude-1", &sealer).expect("read"), None);
    let listed = list(&cfg, &data, now).expect("list");
    assert!(listed.contains("claude-1\tclaude\tconfig\t"), "{listed}");
    let said = import_file(&cfg, &data, Client::ClaudeCode, &file, "claude-1", now).expect("imported");
    assert!(said.contains("imported tokens for claude-1 (generation 0") && said.contains("encrypted"), "{said}");
    let stored = Store::open_dir(&data).expect("store").load_tokens("claude-1", &sealer).expect("read").expect("a row");
    assert_eq!((stored.refresh_token.as_str(), stored.lifetime.expires_at_ms), ("sk-ant-ort01-def", 1_790_000_000_000));
    assert_eq!(stored.origin, origin_of("rt-config"), "it descends from the config's sign-in, so the store wins");
    let listed = list(&cfg, &data, now).expect("list");
    assert!(listed.contains("claude-1\tclaude\tstored\t2026-09-21T"), "{listed}");
    assert!(listed.contains("\tvalid\n"), "{listed}");
    assert!(!listed.contains("sk-ant") && !listed.contains("rt-"), "a secret in the listing: {listed}");
    // A second import is one generation later.
    let said = import_file(&cfg, &data, Client::ClaudeCode, &file, "claude-1", now).expect("imported");
    assert!(said.contains("generation 1"), "{said}");
}

#[test]
fn an_expired_file_and_a_codex_account_id_are_told() {
    let dir = tempfile::tempdir().expect("a dir");
    let cfg = config(false);
    let file = dir.path().join("auth.json");
    std::fs::write(&file, codex_file(1_790_000_000)).expect("written");
    let data = dir.path().join("data");
    let late = 1_790_000_000_001;
    assert!(import_file(&cfg, &data, Client::Codex, &file, "codex-1", late).expect_err("expired").contains("expired"));
    let said = import_file(&cfg, &data, Client::Codex, &file, "codex-1", 1_780_000_000_000).expect("imported");
    assert!(said.contains("unencrypted") && said.contains(r#"account_id "acct-1" stored"#), "{said}");
    let store = Store::open_dir(&data).expect("store");
    assert_eq!(store.load_account_id("codex-1").expect("read").as_deref(), Some("acct-1"));
}

/// A file without `tokens.account_id` (written before Codex filled it): the id token's claim
/// `https://api.openai.com/auth` names the ChatGPT account, as Codex's own sign-in reads it.
#[test]
fn the_account_id_is_read_from_the_id_token_when_the_file_names_none() {
    use base64::Engine as _;
    let b64 = |v: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    let id_claims = b64(
        r#"{"email":"a@example.com","https://api.openai.com/auth":{"chatgpt_plan_type":"plus","chatgpt_account_id":"0f7e9c1a-acct"}}"#,
    );
    let access = format!("eyJhbGciOiJSUzI1NiJ9.{}.sig", b64(r#"{"exp":1790000000}"#));
    let body = format!(
        r#"{{"OPENAI_API_KEY":null,"tokens":{{"id_token":"eyJhbGciOiJSUzI1NiJ9.{id_claims}.sig","access_token":"{access}","refresh_token":"rt-codex"}},"last_refresh":"2026-11-30T10:00:00Z"}}"#
    );
    let t = parse(Client::Codex, &body, "auth.json").expect("parsed");
    assert_eq!(t.account_id.as_deref(), Some("0f7e9c1a-acct"));
    assert_eq!(chatgpt_account_id("not-a-jwt"), None);
    let dir = tempfile::tempdir().expect("a dir");
    let file = dir.path().join("auth.json");
    std::fs::write(&file, &body).expect("written");
    let data = dir.path().join("data");
    let said =
        import_file(&config(false), &data, Client::Codex, &file, "codex-1", 1_780_000_000_000).expect("imported");
    assert!(said.contains(r#"account_id "0f7e9c1a-acct" stored"#), "{said}");
    let store = Store::open_dir(&data).expect("store");
    assert_eq!(store.load_account_id("codex-1").expect("read").as_deref(), Some("0f7e9c1a-acct"));
}

#[test]
fn a_config_printed_for_debugging_shows_no_token() {
    let shown = format!("{:?}", config(true));
    assert!(shown.contains("preset: \"claude\"") && shown.contains("<redacted>"), "{shown}");
    assert!(!shown.contains("at-config") && !shown.contains("rt-config"), "{shown}");
}
