//! Every answer of the corpus (`scenarios/corpus/`), through the real gateway: a scripted
//! upstream replays it byte for byte to the first of two connections, and the test reads what
//! the client got, which connection served, and the state the gateway kept, against the decision
//! the entry calls for. Then the same answer to a lone connection: the client's `Retry-After`
//! never undercuts the wait the gateway recorded for it.

mod common;

use common::*;
use ferroute_core::hint::parse_rfc3339_ms;
use proxy::Persistence;
use scenarios::corpus::{Answer, Kind, load};
use scenarios::{Behaviour, Script, ScriptedUpstream};
use std::time::Duration;

/// A provider of the answer's format and class, with `connections` keys in priority order.
fn config_for(a: &Answer, connections: &[&str]) -> String {
    let class = a.class().as_str();
    let mut text = format!(
        "[[providers]]\nid = \"p\"\nformat = \"{}\"\nclass = \"{class}\"\nbase_url = \"{{UP}}\"\nmodels = [\"m\", \"n\"]\n",
        a.format.name()
    );
    for c in connections {
        text.push_str(&format!("[[connections]]\nid = \"{c}\"\nprovider = \"p\"\napi_key = \"sk-{c}\"\n"));
    }
    text
}

/// The answer as the scripted upstream sends it: its status, its headers, its body.
fn replay(a: &Answer) -> Behaviour {
    let headers: Vec<(&str, &str)> = a.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    Behaviour::status_with(a.status, &headers, &a.body)
}

fn streams(a: &Answer) -> bool {
    (200..300).contains(&a.status)
}

/// Seconds from the gateway's wall clock now to an RFC 3339 instant in the health JSON.
fn secs_until(gw: &Running, at: &serde_json::Value) -> Option<f64> {
    let at = parse_rfc3339_ms(at.as_str()?)?;
    let now = gw.gw.clock.wall_ms(gw.gw.clock.now());
    Some((at as f64 - now as f64) / 1000.0)
}

fn lockouts_of<'a>(h: &'a serde_json::Value, conn: &str) -> Vec<&'a serde_json::Value> {
    h["model_lockouts"].as_array().map(|a| a.iter().filter(|l| l["connection"] == conn).collect()).unwrap_or_default()
}

/// The wait an entry states, as the gateway keeps it (capped by `max_stated_reset_ms`).
fn kept(a: &Answer) -> Option<f64> {
    let cap = a.cooldown_profile().stated_cap.as_secs();
    a.wait_s.map(|w| w.min(cap) as f64)
}

/// One entry against two connections: what it calls for, seen from outside.
async fn decided_at_the_gateway(a: &Answer) -> Result<(), String> {
    let up = upstream(ScriptedUpstream::new().route("m", Script::sequence(vec![replay(a), Behaviour::echo()]))).await;
    let gw = start_at(config(&config_for(a, &["c1", "c2"]), &up), Persistence::Memory, a.wall_ms()).await;
    let r = chat(&gw, "p/m", streams(a)).await;
    let h = health(&gw).await;
    let c1 = connection(&h, "c1").clone();
    let calls = up.script.calls("m");
    let failures = provider(&h, "p")["failures"].as_u64().unwrap_or(0);
    let served_by_c2 = r.status == 200 && r.header("x-ferroute-selected-connection-id") == Some("c2");
    let c1_clean = c1["status"] == "active" && c1["rate_limited_until"].is_null();
    let locks = lockouts_of(&h, "c1");
    let seen = format!(
        "client {} from {:?}, {calls} upstream calls, c1 {} until {}, {} lockouts, {failures} breaker failures",
        r.status,
        r.header("x-ferroute-selected-connection-id"),
        c1["status"],
        c1["rate_limited_until"],
        locks.len()
    );
    let ok = match a.decision {
        Kind::Pass => calls == 1 && r.status == a.status && c1_clean && locks.is_empty() && failures == 0,
        Kind::Fallback => served_by_c2 && calls == 2 && c1_clean && locks.is_empty() && failures == 0,
        // Within one request the provider's next key is tried and the breaker is not counted
        // (the lone-connection run below counts it).
        Kind::Provider => served_by_c2 && c1_clean,
        Kind::Cool => {
            let left = secs_until(&gw, &c1["rate_limited_until"]);
            let wait_ok = match (kept(a), left) {
                (Some(w), Some(l)) => (l - w).abs() <= 2.0,
                (None, Some(l)) => l > 0.0,
                _ => false,
            };
            served_by_c2 && c1["status"] == "unavailable" && wait_ok && failures == 0
        }
        Kind::End => {
            let state = a.terminal.map(|t| t.as_str()).unwrap_or("");
            served_by_c2 && c1["status"] == state && failures == 0
        }
        Kind::LockModel => {
            let lock = locks.iter().find(|l| l["model"] == "m");
            let wait_ok = match (kept(a), lock.and_then(|l| secs_until(&gw, &l["expires_at"]))) {
                (Some(w), Some(l)) => (l - w).abs() <= 2.0,
                (None, Some(l)) => l > 0.0,
                _ => false,
            };
            served_by_c2 && c1_clean && wait_ok && failures == 0
        }
    };
    gw.stop().await;
    if ok { Ok(()) } else { Err(format!("{} ({}): expected {}, saw {seen}", a.id, a.file, a.expected())) }
}

/// One entry against a lone connection: a provider-level failure counts toward the breaker, and
/// a 429 the client gets tells it to wait at least as long as the gateway will keep that
/// connection (or model) out.
/// Returns whether the client got a 429 (whose `Retry-After` was then checked).
async fn retry_after_agrees(a: &Answer) -> Result<bool, String> {
    let up = upstream(ScriptedUpstream::new().route("m", Script::always(replay(a)))).await;
    let gw = start_at(config(&config_for(a, &["c1"]), &up), Persistence::Memory, a.wall_ms()).await;
    let r = chat(&gw, "p/m", streams(a)).await;
    let h = health(&gw).await;
    let c1 = connection(&h, "c1");
    if a.decision == Kind::Provider && provider(&h, "p")["failures"] != 1 {
        gw.stop().await;
        return Err(format!("{} ({}): a provider-level failure the breaker did not count: {h}", a.id, a.file));
    }
    let mut kept = secs_until(&gw, &c1["rate_limited_until"]).unwrap_or(0.0);
    for l in lockouts_of(&h, "c1") {
        kept = kept.max(secs_until(&gw, &l["expires_at"]).unwrap_or(0.0));
    }
    gw.stop().await;
    // A stream that failed after its 200 reaches the client as an error in its API's shape,
    // in the failure's own words, never as the upstream's events.
    if streams(a)
        && r.status != 200
        && (r.body.contains("data:") || serde_json::from_str::<serde_json::Value>(&r.body).is_err())
    {
        return Err(format!("{} ({}): a failed stream reached the client as {}", a.id, a.file, r.body));
    }
    if r.status != 429 {
        return Ok(false);
    }
    let told = r.header("retry-after").and_then(|v| v.parse::<f64>().ok());
    match told {
        Some(t) if t + 1.0 >= kept => Ok(true),
        _ => Err(format!(
            "{} ({}): the client was told Retry-After {told:?}, the gateway keeps it out {kept:.0} s",
            a.id, a.file
        )),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_is_decided_as_it_says_through_the_gateway() {
    let answers = load().unwrap_or_else(|e| panic!("the corpus loads: {e}"));
    let mut wrong = Vec::new();
    for a in &answers {
        let run = tokio::time::timeout(Duration::from_secs(30), decided_at_the_gateway(a)).await;
        match run {
            Ok(Ok(())) => {}
            Ok(Err(e)) => wrong.push(e),
            Err(_) => wrong.push(format!("{}: no answer within 30 s", a.id)),
        }
    }
    assert!(wrong.is_empty(), "{} of {} answers decided wrong:\n{}", wrong.len(), answers.len(), wrong.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_retry_after_never_undercuts_what_the_gateway_recorded() {
    let answers = load().unwrap_or_else(|e| panic!("the corpus loads: {e}"));
    let mut wrong = Vec::new();
    let mut checked = 0;
    for a in &answers {
        match tokio::time::timeout(Duration::from_secs(30), retry_after_agrees(a)).await {
            Ok(Ok(told)) => checked += usize::from(told),
            Ok(Err(e)) => wrong.push(e),
            Err(_) => wrong.push(format!("{}: no answer within 30 s", a.id)),
        }
    }
    assert!(wrong.is_empty(), "{} answers told the client less than was kept:\n{}", wrong.len(), wrong.join("\n"));
    assert!(checked >= 30, "only {checked} 429 answers were checked");
    eprintln!("{checked} answers reached the client as a 429; each told at least what was kept");
}

/// A credential that cannot serve this kind of client (a Claude subscription's token to a client
/// that is not Claude Code) is not penalised, and is not asked again for that kind while another
/// connection serves it; another kind of client still gets it, and a request it alone could
/// serve still asks it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_that_refuses_a_client_kind_is_not_asked_again_for_it() {
    let answers = load().unwrap_or_else(|e| panic!("the corpus loads: {e}"));
    let refusal = answers
        .iter()
        .find(|a| a.id == "claude-oauth-400-credential-only-for-claude-code")
        .unwrap_or_else(|| panic!("the corpus keeps the Claude Code refusal"));
    let body = serde_json::json!({"model": "p/m", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let ask = |gw: &Running, ua: &'static str| {
        let url = gw.url("/v1/chat/completions");
        let body = body.clone();
        async move { send("POST", &url, &[("content-type", "application/json"), ("user-agent", ua)], &body).await }
    };

    let up =
        upstream(ScriptedUpstream::new().route("m", Script::sequence(vec![replay(refusal), Behaviour::echo()]))).await;
    let gw = start(config(&config_for(refusal, &["c1", "c2"]), &up), Persistence::Memory).await;
    let r = ask(&gw, "some-agent/1.0").await;
    assert_eq!((r.status, r.header("x-ferroute-selected-connection-id")), (200, Some("c2")), "{}", r.body);
    assert_eq!(connection(&health(&gw).await, "c1")["status"], "active", "nothing penalised");
    let r = ask(&gw, "some-agent/1.1").await;
    assert_eq!((r.status, r.header("x-ferroute-selected-connection-id")), (200, Some("c2")));
    assert_eq!(up.script.calls("m"), 3, "the refusing credential was not asked again for the same kind");
    let r = ask(&gw, "claude-cli/2.0.0 (external, cli)").await;
    assert_eq!((r.status, r.header("x-ferroute-selected-connection-id")), (200, Some("c1")), "another kind asks it");
    gw.stop().await;

    // Alone, it is still asked: the client hears the upstream's own words each time.
    let up = upstream(ScriptedUpstream::new().route("m", Script::always(replay(refusal)))).await;
    let gw = start(config(&config_for(refusal, &["c1"]), &up), Persistence::Memory).await;
    for _ in 0..2 {
        let r = ask(&gw, "some-agent/1.0").await;
        assert_eq!(r.status, 400, "{}", r.body);
        assert!(r.body.contains("only authorized for use with Claude Code"), "{}", r.body);
    }
    assert_eq!(up.script.calls("m"), 2);
    gw.stop().await;
}
