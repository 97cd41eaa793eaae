//! End-to-end Claude usage-limit handling (M4) over real loopback sockets: what actually goes
//! over the wire (the slow header, the usage query and the reset post with the connection's
//! credentials), what health and `/metrics` show, and that a connection without the opt-in
//! keeps the plain cooldown path.

mod common;

use common::*;
use proxy::Persistence;
use scenarios::{Behaviour, Script, ScriptedUpstream};

const U: &str = "anthropic-ratelimit-unified-";

fn claude_config(up: &Upstream, usage_limit: &str) -> proxy::config::Config {
    let text = format!(
        r#"
[[providers]]
id = "claude"
format = "anthropic"
base_url = "http://{addr}/v1"
models = ["sonnet"]
connection_strategy = "priority"
[[connections]]
id = "c1"
provider = "claude"
api_key = "sk-ant-oat01-one"
{usage_limit}
[[connections]]
id = "c2"
provider = "claude"
api_key = "sk-ant-oat01-two"
"#,
        addr = up.addr
    );
    config(&text, up)
}

fn trigger() -> Behaviour {
    let (status, offer, reset) = (format!("{U}status"), format!("{U}slow-offer"), format!("{U}reset"));
    Behaviour::status_with(
        429,
        &[(status.as_str(), "rejected"), (offer.as_str(), "treatment"), (reset.as_str(), "{epoch+3600}")],
        r#"{"type":"error","error":{"type":"rate_limit_error","message":"usage limit reached"}}"#,
    )
}

fn in_lane() -> Behaviour {
    Behaviour::WithHeaders {
        headers: [(format!("{U}slow-status"), "active".to_owned())].into_iter().collect(),
        then: Box::new(Behaviour::echo()),
    }
}

async fn messages(gw: &Running) -> Reply {
    let body = serde_json::json!({"model": "claude/sonnet", "max_tokens": 64,
        "messages": [{"role": "user", "content": "hello lane"}]});
    send("POST", &gw.url("/v1/messages"), &[("content-type", "application/json")], &body.to_string()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reset_is_asked_first_then_the_lane_carries_the_slow_header_on_the_same_account() {
    let up = upstream(
        ScriptedUpstream::new()
            .route("sonnet", Script::always(trigger()))
            .route("sonnet@slow", Script::always(in_lane()))
            .route(
                "@usage",
                Script::always(Behaviour::status(200, r#"{"juniper_tide":{"arm":"reset","available":true}}"#)),
            )
            .route(
                "@reset",
                Script::always(Behaviour::status(
                    200,
                    r#"{"result":"already_used","next_available_at":"2026-06-01T00:00:00Z"}"#,
                )),
            ),
    )
    .await;
    let root = format!("http://{}", up.addr);
    let opt_in = format!(
        r#"usage_limit = {{ low_priority_lane = true, limit_reset = true, organization = "6f1c2a9e-org", reset_base_url = "{root}/" }}"#
    );
    let gw = start(claude_config(&up, &opt_in), Persistence::Memory).await;

    let first = messages(&gw).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.header("x-ferroute-selected-connection-id"), Some("c1"));
    let second = messages(&gw).await;
    assert_eq!(second.status, 200, "{}", second.body);

    let seen = up.script.requests();
    let trail: Vec<(String, Option<String>, Option<&str>)> = seen
        .iter()
        .map(|r| (r.path.clone(), r.query.clone(), r.headers.get("anthropic-usage-limit").map(String::as_str)))
        .collect();
    assert_eq!(
        trail,
        vec![
            ("/v1/messages".to_owned(), None, None),
            ("/api/oauth/usage".to_owned(), Some("at_wall=1&skip_spend=1".to_owned()), None),
            ("/api/organizations/6f1c2a9e-org/reset_rate_limits".to_owned(), None, None),
            ("/v1/messages".to_owned(), None, Some("slow")),
            ("/v1/messages".to_owned(), None, Some("slow")),
        ]
    );
    // Both endpoints get the account's own credential; the post names the program.
    for r in &seen[1..3] {
        assert_eq!(r.headers.get("authorization").map(String::as_str), Some("Bearer sk-ant-oat01-one"));
    }
    assert_eq!(seen[2].body, r#"{"program":"juniper_tide"}"#);
    // Every message went to the same account's key.
    assert!(
        seen.iter()
            .filter(|r| r.path == "/v1/messages")
            .all(|r| r.headers.get("x-api-key").map(String::as_str) == Some("sk-ant-oat01-one"))
    );

    let health = health(&gw).await;
    let c1 = health["connections"].as_array().and_then(|cs| cs.iter().find(|c| c["id"] == "c1")).cloned();
    let c1 = c1.expect("c1 in health");
    assert_eq!(c1["status"], "active", "{c1}");
    assert_eq!(c1["usage_limit"]["lane"], "active", "{c1}");
    assert!(c1["usage_limit"]["until"].as_str().is_some_and(|u| u.starts_with("2026-")), "{c1}");
    assert_eq!(c1["usage_limit"]["next_reset_try"], "2026-06-01T00:00:00.000Z", "{c1}");
    let c2 = health["connections"].as_array().and_then(|cs| cs.iter().find(|c| c["id"] == "c2")).cloned();
    assert!(c2.expect("c2").get("usage_limit").is_none(), "no opt-in, no usage_limit block");

    let metrics = send("GET", &gw.url("/metrics"), &[], "").await.body;
    for line in [
        r#"ferroute_usage_limit_events_total{connection="c1",event="reset_already_used"} 1"#,
        r#"ferroute_usage_limit_events_total{connection="c1",event="accepted"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} missing from\n{metrics}");
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_opt_in_the_usage_limit_429_cools_the_account_and_falls_back() {
    let up = upstream(
        ScriptedUpstream::new()
            .route("sonnet", Script::sequence(vec![trigger(), Behaviour::echo()]))
            .route("sonnet@slow", Script::always(in_lane())),
    )
    .await;
    let gw = start(claude_config(&up, ""), Persistence::Memory).await;
    let r = messages(&gw).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-ferroute-selected-connection-id"), Some("c2"));
    let seen = up.script.requests();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|r| !r.headers.contains_key("anthropic-usage-limit")));
    let health = health(&gw).await;
    let c1 = health["connections"].as_array().and_then(|cs| cs.iter().find(|c| c["id"] == "c1")).cloned();
    assert_eq!(c1.expect("c1")["status"], "unavailable");
    gw.stop().await;
}

#[test]
fn usage_limit_settings_are_validated() {
    let bad = |extra: &str, format: &str| {
        let text = format!(
            r#"
[[providers]]
id = "p"
format = "{format}"
base_url = "http://127.0.0.1:1/v1"
models = ["m"]
[[connections]]
id = "c"
provider = "p"
api_key = "sk-12345678"
usage_limit = {{ {extra} }}
"#
        );
        match proxy::config::Config::from_toml_str(&text, &|_: &str| None, &[]) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    };
    assert!(bad("low_priority_lane = true", "openai").contains("anthropic-format providers only"));
    assert!(bad("limit_reset = true", "anthropic").contains("usage_limit.organization"));
    assert!(bad(r#"limit_reset = true, organization = "a/b""#, "anthropic").contains("not an organization UUID"));
    assert!(bad(r#"low_priority_lane = true, reset_base_url = "ftp://x""#, "anthropic").contains("not an http(s) URL"));
    assert!(bad("lane = true", "anthropic").contains("unknown field"));
    assert_eq!(bad(r#"low_priority_lane = true, limit_reset = true, organization = "org-1""#, "anthropic"), "");
}
