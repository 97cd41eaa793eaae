//! End-to-end session affinity (M5) over real loopback sockets: a session stays on one key
//! while its provider rotates the others, moves when its key fails, keeps its pin across a
//! restart, and its headers never reach an upstream.

mod common;

use common::*;
use proxy::Persistence;
use scenarios::{Behaviour, Script, ScriptedUpstream};

const ROTATING: &str = r#"
[[providers]]
id = "up"
base_url = "{UP}"
models = ["m", "limited"]
connection_strategy = "round-robin"
[[connections]]
id = "k1"
provider = "up"
api_key = "sk-one"
[[connections]]
id = "k2"
provider = "up"
api_key = "sk-two"
[[connections]]
id = "k3"
provider = "up"
api_key = "sk-three"
[resilience.session_affinity]
ttl_ms = 600000
"#;

async fn chat_in(gw: &Running, model: &str, session: Option<&str>) -> Reply {
    // The same first user input in every request: without a header they would all share the
    // input-hash session.
    let body = serde_json::json!({"model": model, "messages": [{"role": "user", "content": "hello from the test"}]});
    let mut headers = vec![("content-type", "application/json")];
    if let Some(s) = session {
        headers.push(("x-session-id", s));
    }
    send("POST", &gw.url("/v1/chat/completions"), &headers, &body.to_string()).await
}

fn served(r: &Reply) -> String {
    assert_eq!(r.status, 200, "{}", r.body);
    r.header("x-ferroute-selected-connection-id").unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_stays_on_its_key_moves_when_it_fails_and_survives_a_restart() {
    let limited = Script::sequence(vec![
        Behaviour::status_with(429, &[("retry-after", "30")], r#"{"error":{"message":"Rate limit reached"}}"#),
        Behaviour::echo(),
    ]);
    let up =
        upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo())).route("limited", limited)).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = start(config(ROTATING, &up), Persistence::Dir(dir.path().to_owned())).await;

    // The provider rotates its keys, but every turn of one session lands on one key; a
    // second session is pinned to the least recently used key, another one.
    let mut pinned = Vec::new();
    for _ in 0..4 {
        pinned.push(served(&chat_in(&gw, "up/m", Some("agent-7")).await));
    }
    assert!(pinned.iter().all(|k| *k == pinned[0]), "{pinned:?}");
    let other = served(&chat_in(&gw, "up/m", Some("agent-8")).await);
    assert_ne!(other, pinned[0]);
    assert_eq!(served(&chat_in(&gw, "up/m", Some("agent-8")).await), other);
    assert_eq!(health(&gw).await["session_pins"], 2);
    // The session headers never reach the upstream.
    assert!(up.script.requests().iter().all(|q| !q.headers.contains_key("x-session-id")));

    // A 429 on the pinned key (the `limited` model answers 429 once): the session moves to
    // another key and stays there.
    let before = pinned[0].clone();
    let r = chat_in(&gw, "up/limited", Some("agent-7")).await;
    let moved = served(&r);
    assert_ne!(moved, before, "the key that answered 429 is cooling");
    assert_eq!(served(&chat_in(&gw, "up/m", Some("agent-7")).await), moved);

    // The pin survives a restart.
    gw.stop().await;
    let gw = start(config(ROTATING, &up), Persistence::Dir(dir.path().to_owned())).await;
    assert_eq!(health(&gw).await["session_pins"], 2);
    for _ in 0..3 {
        assert_eq!(served(&chat_in(&gw, "up/m", Some("agent-7")).await), moved);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ttl_can_be_overridden_per_request_and_bad_values_are_refused() {
    let up = upstream(ScriptedUpstream::new().route("m", Script::always(Behaviour::echo()))).await;
    let off = ROTATING.replace("ttl_ms = 600000", "ttl_ms = 0");
    let gw = start(config(&off, &up), Persistence::Memory).await;
    let body = serde_json::json!({"model": "up/m", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    // Affinity off in the settings: the session rotates like any request.
    let send_with = |ttl: &'static str| {
        let url = gw.url("/v1/chat/completions");
        let body = body.clone();
        async move {
            let mut h = vec![("content-type", "application/json"), ("x-codex-session-id", "codex-1")];
            if !ttl.is_empty() {
                h.push(("x-ferroute-session-ttl-ms", ttl));
            }
            send("POST", &url, &h, &body).await
        }
    };
    let a = served(&send_with("").await);
    let b = served(&send_with("").await);
    assert_ne!(a, b);
    // The request's own TTL turns it on for that session.
    let first = served(&send_with("60000").await);
    for _ in 0..3 {
        assert_eq!(served(&send_with("60000").await), first);
    }
    for bad in ["soon", "-5", "99999999999999"] {
        let r = send_with(bad).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
        assert_eq!(r.json()["error"]["code"], "invalid_session_ttl");
    }
}
