//! `ferroute accounts`: import the tokens an official client stored after its sign-in (Claude
//! Code's `~/.claude/.credentials.json`, Codex's `~/.codex/auth.json`) into the store of an
//! OAuth connection, and list the OAuth connections — never a secret.
//!
//! A malformed file is an error naming the field, and nothing is written. The gateway takes
//! imported tokens at its next start or config reload (they are one generation past what it
//! holds).

use crate::config::{Config, ConnectionConfig};
use crate::sessions::accounts::import;
use crate::sessions::sealed::Sealer;
use crate::sessions::token_endpoint::{jwt_claims, jwt_expiry_ms};
use crate::sessions::token_store::origin_of;
use crate::state::clock::rfc3339;
use crate::state::store::Store;
use ferroute_core::oauth::{Account, Lifetime};
use ferroute_core::types::TerminalState;
use serde_json::Value;
use std::path::Path;

/// Which official client stored the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Client {
    /// Claude Code (`~/.claude/.credentials.json`): the `claude` preset.
    ClaudeCode,
    /// Codex (`~/.codex/auth.json`): the `codex` preset.
    Codex,
}

impl Client {
    /// Where the client keeps its tokens, below the home directory.
    pub fn default_path(self) -> &'static str {
        match self {
            Client::ClaudeCode => ".claude/.credentials.json",
            Client::Codex => ".codex/auth.json",
        }
    }

    fn preset(self) -> &'static str {
        match self {
            Client::ClaudeCode => "claude",
            Client::Codex => "codex",
        }
    }
}

/// Tokens read from a client's file.
#[derive(PartialEq, Eq)]
pub struct Imported {
    /// The access token.
    pub access_token: String,
    /// The refresh token.
    pub refresh_token: String,
    /// When the access token expires (Unix ms).
    pub expires_at_ms: u64,
    /// The ChatGPT account id (Codex), if the file names one.
    pub account_id: Option<String>,
}

impl std::fmt::Debug for Imported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Imported").field("expires_at_ms", &self.expires_at_ms).finish_non_exhaustive()
    }
}

fn text<'a>(v: &'a Value, path: &[&str], file: &str) -> Result<&'a str, String> {
    let mut at = v;
    for p in path {
        at = at.get(p).ok_or_else(|| format!("{file}: {} is missing", path.join(".")))?;
    }
    match at.as_str() {
        Some(s) if !s.trim().is_empty() && !s.chars().any(char::is_control) => Ok(s),
        Some(_) => Err(format!("{file}: {} is empty or not a token", path.join("."))),
        None => Err(format!("{file}: {} is not a string", path.join("."))),
    }
}

/// Reads what `client` stored in `body` (the file named `file`, for messages).
pub fn parse(client: Client, body: &str, file: &str) -> Result<Imported, String> {
    let v: Value = serde_json::from_str(body).map_err(|e| format!("{file}: not JSON: {e}"))?;
    match client {
        Client::ClaudeCode => {
            let access = text(&v, &["claudeAiOauth", "accessToken"], file)?;
            let refresh = text(&v, &["claudeAiOauth", "refreshToken"], file)?;
            let expires = v
                .get("claudeAiOauth")
                .and_then(|o| o.get("expiresAt"))
                .ok_or_else(|| format!("{file}: claudeAiOauth.expiresAt is missing"))?
                .as_u64()
                .filter(|ms| *ms > 1_000_000_000_000)
                .ok_or_else(|| format!("{file}: claudeAiOauth.expiresAt is not a time in Unix milliseconds"))?;
            Ok(Imported {
                access_token: access.to_owned(),
                refresh_token: refresh.to_owned(),
                expires_at_ms: expires,
                account_id: None,
            })
        }
        Client::Codex => {
            let access = text(&v, &["tokens", "access_token"], file)?;
            let refresh = text(&v, &["tokens", "refresh_token"], file)?;
            let expires = jwt_expiry_ms(access)
                .ok_or_else(|| format!("{file}: tokens.access_token is not a JWT with an `exp` claim"))?;
            // Codex fills `tokens.account_id` at sign-in from the id token's claim; older files
            // may lack it, the id token still names it.
            let account_id = match v.get("tokens").and_then(|t| t.get("account_id")) {
                None | Some(Value::Null) => {
                    v.get("tokens").and_then(|t| t.get("id_token")).and_then(Value::as_str).and_then(chatgpt_account_id)
                }
                Some(_) => Some(text(&v, &["tokens", "account_id"], file)?.to_owned()),
            };
            Ok(Imported {
                access_token: access.to_owned(),
                refresh_token: refresh.to_owned(),
                expires_at_ms: expires,
                account_id,
            })
        }
    }
}

/// The ChatGPT account id an id token names (claim `https://api.openai.com/auth`,
/// `chatgpt_account_id`), if it is a JWT that does.
pub fn chatgpt_account_id(id_token: &str) -> Option<String> {
    let v = jwt_claims(id_token)?;
    let id = v.get("https://api.openai.com/auth")?.get("chatgpt_account_id")?.as_str()?;
    (!id.trim().is_empty() && !id.chars().any(char::is_control)).then(|| id.to_owned())
}

fn oauth_connection<'a>(config: &'a Config, id: &str) -> Result<&'a ConnectionConfig, String> {
    let c = config.connections.iter().find(|c| c.id == id).ok_or_else(|| {
        let ids: Vec<&str> = config.connections.iter().filter(|c| c.oauth.is_some()).map(|c| c.id.as_str()).collect();
        format!(
            "no connection {id:?} in the config (OAuth connections: {})",
            if ids.is_empty() { "none".into() } else { ids.join(", ") }
        )
    })?;
    if c.oauth.is_none() {
        return Err(format!(
            "connection {id:?} has no oauth table: add one (preset, access_token, refresh_token, expires_at) first"
        ));
    }
    Ok(c)
}

/// Imports `client`'s file at `path` into connection `id` of `config`, in the store in
/// `data_dir`, at wall time `now_ms`. Returns what to tell the operator.
pub fn import_file(
    config: &Config,
    data_dir: &Path,
    client: Client,
    path: &Path,
    id: &str,
    now_ms: u64,
) -> Result<String, String> {
    let c = oauth_connection(config, id)?;
    let preset = c.oauth.as_ref().map(|o| o.preset.as_str()).unwrap_or_default();
    if preset != client.preset() {
        return Err(format!(
            "connection {id:?} uses the {preset:?} preset; {client:?} files belong to the {:?} preset",
            client.preset()
        ));
    }
    let file = path.display().to_string();
    let body = std::fs::read_to_string(path).map_err(|e| format!("cannot read {file}: {e}"))?;
    let t = parse(client, &body, &file)?;
    if t.expires_at_ms <= now_ms {
        return Err(format!(
            "{file}: the access token expired at {}; sign in with the client again first",
            rfc3339(t.expires_at_ms)
        ));
    }
    let sealer = Sealer::new(config.server.secret_key.as_deref()).map_err(|e| e.to_string())?;
    let store = Store::open_dir(data_dir).map_err(|e| e.to_string())?;
    let lifetime = Lifetime { issued_at_ms: now_ms, expires_at_ms: t.expires_at_ms };
    let secrets = (t.access_token, t.refresh_token, t.account_id.as_deref());
    let stored = import(&store, &sealer, c, secrets, lifetime, now_ms).map_err(|e| e.to_string())?;
    let mut out = format!(
        "imported tokens for {id} (generation {}, expires {}){}; the gateway takes them at its next start or config reload",
        stored.generation,
        rfc3339(t.expires_at_ms),
        if sealer.encrypts() { ", encrypted" } else { ", unencrypted: set server.secret_key" }
    );
    match (t.account_id, c.oauth.as_ref().and_then(|o| o.account_id.as_deref())) {
        (Some(a), Some(set)) if a != set => out.push_str(&format!(
            "\nnote: the file names account_id {a:?}, but oauth.account_id = {set:?} on {id} is sent (it wins)"
        )),
        (Some(a), None) => out.push_str(&format!("\naccount_id {a:?} stored; it is sent with these tokens")),
        (None, None) if client == Client::Codex => {
            out.push_str(&format!("\nnote: the file names no ChatGPT account id; set oauth.account_id on {id}"))
        }
        _ => {}
    }
    Ok(out)
}

/// One line per OAuth connection of `config`: where its tokens come from, their expiry, the
/// last and next refresh, and its state. Never a token.
pub fn list(config: &Config, data_dir: &Path, now_ms: u64) -> Result<String, String> {
    let sealer = Sealer::new(config.server.secret_key.as_deref()).map_err(|e| e.to_string())?;
    let store = Store::open_dir(data_dir).map_err(|e| e.to_string())?;
    let snapshots = store.load().map_err(|e| e.to_string())?.connections;
    let mut out = String::from("connection\tpreset\ttokens\texpires_at\tlast_refresh\tnext_refresh\tstate\n");
    let show = |ms: Option<u64>| ms.map_or("-".to_owned(), rfc3339);
    for c in &config.connections {
        let Some(o) = &c.oauth else { continue };
        let (source, lifetime, last) = match store.load_tokens(&c.id, &sealer) {
            Ok(Some(t)) if t.origin == origin_of(&o.refresh_token) => ("stored", t.lifetime, t.last_refresh_ms),
            Ok(_) => ("config", o.lifetime(now_ms), None),
            Err(e) => return Err(e.to_string()),
        };
        let account = Account::new(lifetime, o.refresh_at(), 0);
        let ended = snapshots.iter().any(|(id, s, _)| id == &c.id && s.terminal == Some(TerminalState::Expired));
        let state = if ended {
            "needs_sign_in"
        } else if account.expired(now_ms) {
            "expired"
        } else {
            "valid"
        };
        out.push_str(&format!(
            "{}\t{}\t{source}\t{}\t{}\t{}\t{state}\n",
            c.id,
            o.preset,
            rfc3339(lifetime.expires_at_ms),
            show(last),
            show(account.next_refresh_ms()),
        ));
    }
    Ok(out)
}

#[cfg(test)]
#[path = "accounts_tests.rs"]
mod tests;
