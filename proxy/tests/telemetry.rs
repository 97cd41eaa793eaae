//! OpenTelemetry export on the real binary, received by an OTLP/HTTP receiver in this test that
//! decodes what arrives with the protocol's own types (`opentelemetry-proto`): a request under a
//! client's `traceparent` is a server span in the client's trace, its two attempts (a 429 on
//! k1, then k2) client spans under it with GenAI and Ferroute attributes, k1's cooldown a span
//! event; the upstream got each attempt's own `traceparent`; no key, prompt or answer is in any
//! span.

mod common;

use common::{spawn, upstream};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;
use scenarios::collector::Collector;
use scenarios::{Behaviour, Script, ScriptedUpstream};
use std::time::Duration;

/// Every span the collector received, and the service names they came under. Each export went
/// to `/v1/traces` as protobuf.
fn spans(otlp: &Collector) -> (Vec<Span>, Vec<String>) {
    let mut spans = Vec::new();
    let mut services = Vec::new();
    for got in otlp.received() {
        assert_eq!(got.path, "/v1/traces");
        assert_eq!(got.content_type, "application/x-protobuf");
        let req = ExportTraceServiceRequest::decode(got.body.as_ref()).expect("OTLP protobuf");
        for rs in req.resource_spans {
            for kv in rs.resource.iter().flat_map(|r| r.attributes.iter()) {
                if kv.key == "service.name"
                    && let Some(Any::StringValue(s)) = kv.value.as_ref().and_then(|v| v.value.clone())
                {
                    services.push(s);
                }
            }
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
    }
    (spans, services)
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref()?.value.clone()).map(|v| match v {
        Any::StringValue(s) => s,
        Any::IntValue(i) => i.to_string(),
        Any::BoolValue(b) => b.to_string(),
        other => format!("{other:?}"),
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_and_its_attempts_reach_an_otlp_receiver_as_one_trace() {
    let otlp = Collector::start().await.expect("collector");
    let collector = otlp.addr;
    let (addr, script) = upstream(
        ScriptedUpstream::new()
            .route(
                "m#sk-secret-one",
                Script::always(Behaviour::status_with(
                    429,
                    &[("retry-after", "9")],
                    r#"{"error":{"message":"slow down"}}"#,
                )),
            )
            .route("m", Script::always(Behaviour::echo())),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "[telemetry]\notlp_endpoint = \"http://{collector}\"\nservice_name = \"ferroute-test\"\n\
         [[providers]]\nid = \"up\"\nbase_url = \"http://{addr}/v1\"\nmodels = [\"m\"]\n\
         [[connections]]\nid = \"k1\"\nprovider = \"up\"\napi_key = \"sk-secret-one\"\n\
         [[connections]]\nid = \"k2\"\nprovider = \"up\"\napi_key = \"sk-secret-two\"\n"
    );
    std::fs::write(dir.path().join("ferroute.toml"), text).expect("config");
    let p = spawn(&["--config", "ferroute.toml"], dir.path()).await;
    let client_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let client_span = "00f067aa0ba902b7";
    let body =
        serde_json::json!({"model": "up/m", "messages": [{"role": "user", "content": "a secret prompt"}]}).to_string();
    let tp = format!("00-{client_trace}-{client_span}-01");
    let r = chaos::client::send(
        "POST",
        &format!("{}/v1/chat/completions", p.base),
        &[("content-type", "application/json"), ("traceparent", &tp)],
        &body,
        Duration::from_secs(10),
    )
    .await
    .expect("chat");
    assert_eq!(r.status, 200, "{}", r.body);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let (spans, services) = loop {
        let (s, services) = spans(&otlp);
        if s.len() >= 3 || tokio::time::Instant::now() > deadline {
            break (s, services);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(spans.len(), 3, "one request and two attempts: {spans:#?}");
    assert!(services.iter().all(|s| s == "ferroute-test") && !services.is_empty(), "{services:?}");
    let server = spans.iter().find(|s| s.kind == SpanKind::Server as i32).expect("the request's span");
    assert_eq!(hex(&server.trace_id), client_trace, "in the client's trace");
    assert_eq!(hex(&server.parent_span_id), client_span, "under the client's span");
    assert_eq!(server.name, "chat up/m");
    assert_eq!(attr(server, "gen_ai.operation.name").as_deref(), Some("chat"));
    assert_eq!(attr(server, "gen_ai.request.model").as_deref(), Some("up/m"));
    assert_eq!(attr(server, "http.response.status_code").as_deref(), Some("200"));
    let attempts: Vec<&Span> = spans.iter().filter(|s| s.kind == SpanKind::Client as i32).collect();
    assert_eq!(attempts.len(), 2);
    for a in &attempts {
        assert_eq!(a.trace_id, server.trace_id);
        assert_eq!(a.parent_span_id, server.span_id, "each attempt under the request");
        assert_eq!(attr(a, "gen_ai.provider.name").as_deref(), Some("up"));
        assert_eq!(attr(a, "gen_ai.request.model").as_deref(), Some("m"));
    }
    let limited =
        attempts.iter().find(|a| attr(a, "ferroute.connection").as_deref() == Some("k1")).expect("k1's attempt");
    assert_eq!(attr(limited, "http.response.status_code").as_deref(), Some("429"));
    assert_eq!(attr(limited, "ferroute.reason").as_deref(), Some("rate_limit_exceeded"));
    assert_eq!(attr(limited, "ferroute.layer").as_deref(), Some("account-level"));
    assert!(
        limited.events.iter().any(|e| e.name.starts_with("cooldown k1 rate_limit_exceeded")),
        "{:?}",
        limited.events
    );
    let served =
        attempts.iter().find(|a| attr(a, "ferroute.connection").as_deref() == Some("k2")).expect("k2's attempt");
    assert_eq!(attr(served, "gen_ai.response.model").as_deref(), Some("m"));
    // The echo answers with as many tokens as the prompt has words (3), both ways.
    assert_eq!(attr(served, "gen_ai.usage.input_tokens").as_deref(), Some("3"));
    assert_eq!(attr(served, "gen_ai.usage.output_tokens").as_deref(), Some("3"));
    assert_eq!(attr(served, "ferroute.exclusions").as_deref(), Some("k1 unavailable"), "k1 cooled when k2 was picked");
    // The upstream got each attempt's own traceparent.
    let sent: Vec<String> = script.requests().iter().filter_map(|r| r.headers.get("traceparent").cloned()).collect();
    assert_eq!(sent.len(), 2, "{sent:?}");
    for (s, a) in sent.iter().zip(&attempts) {
        assert!(s.starts_with(&format!("00-{client_trace}-")) && s.ends_with("-01"), "{s}");
        assert!(attempts.iter().any(|x| s.contains(&hex(&x.span_id))), "{s} names an attempt span ({a:?})");
    }
    // Nothing secret in what was exported.
    let raw: Vec<u8> = otlp.received().iter().flat_map(|r| r.body.to_vec()).collect();
    let raw = String::from_utf8_lossy(&raw);
    for secret in ["sk-secret-one", "sk-secret-two", "a secret prompt", "slow down"] {
        assert!(!raw.contains(secret), "{secret} was exported");
    }
    let m = chaos::client::send("GET", &format!("{}/metrics", p.base), &[], "", Duration::from_secs(5))
        .await
        .expect("metrics");
    assert!(m.body.contains("ferroute_telemetry_spans_total{event=\"exported\"} 3"), "{}", m.body);
}
