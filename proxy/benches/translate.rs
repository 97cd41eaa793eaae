//! What translation costs per request: a plain-text chat request to an Anthropic-format
//! provider (request there, answer back) and a 10-token stream, against the same-format hop.

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use proxy::config::Format;
use proxy::edge::head::Head;
use proxy::request::exchange::{self, ApiHeaders, Inbound};
use proxy::translate::ClientApi;
use proxy::translate::stream::Event;
use std::hint::black_box;

const CHAT: &str = r#"{"model":"bench/m","stream":false,"messages":[{"role":"user","content":"measure the overhead of this gateway"}]}"#;

fn inbound() -> Inbound {
    let head = Head::parse(CHAT.as_bytes()).unwrap_or_default();
    Inbound::direct(ClientApi::Chat, &head, Bytes::from_static(CHAT.as_bytes()), ApiHeaders::default(), 0)
}

fn answer() -> Bytes {
    Bytes::from(
        serde_json::json!({"id":"msg_echo","type":"message","role":"assistant","model":"m",
            "content":[{"type":"text","text":"measure the overhead of this gateway"}],"stop_reason":"end_turn",
            "usage":{"input_tokens":6,"output_tokens":6}})
        .to_string(),
    )
}

fn stream_events() -> Vec<Event> {
    let ev = |n: &str, v: serde_json::Value| (Some(n.to_owned()), v.to_string());
    let mut e = vec![
        ev(
            "message_start",
            serde_json::json!({"type":"message_start","message":{"id":"msg_b","type":"message","role":"assistant","model":"as","content":[],"usage":{"input_tokens":3,"output_tokens":0}}}),
        ),
        ev(
            "content_block_start",
            serde_json::json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        ),
    ];
    // Deltas in the key order Anthropic writes them.
    for i in 0..10 {
        e.push((
            Some("content_block_delta".to_owned()),
            format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"token{i} "}}}}"#),
        ));
    }
    e.push(ev("content_block_stop", serde_json::json!({"type":"content_block_stop","index":0})));
    e.push(ev(
        "message_delta",
        serde_json::json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":10}}),
    ));
    e.push(ev("message_stop", serde_json::json!({"type":"message_stop"})));
    e
}

fn bench(c: &mut Criterion) {
    let inb = inbound();
    c.bench_function("same format: prepare + body", |b| {
        b.iter(|| {
            let mut p = exchange::prepare(black_box(&inb), Format::Openai).ok();
            p.as_mut().map(|p| p.body_for("m").map(|v| v.len()))
        })
    });
    c.bench_function("chat to anthropic: prepare + body + answer", |b| {
        let a = answer();
        b.iter(|| {
            let mut p = exchange::prepare(black_box(&inb), Format::Anthropic).ok();
            let n = p.as_mut().map(|p| p.body_for("m").map(|v| v.len()));
            (n, exchange::answer(&inb, Format::Anthropic, a.clone()).map(|b| b.len()))
        })
    });
    c.bench_function("chat to anthropic: prepare + body", |b| {
        b.iter(|| {
            let mut p = exchange::prepare(black_box(&inb), Format::Anthropic).ok();
            p.as_mut().map(|p| p.body_for("m").map(|v| v.len()))
        })
    });
    c.bench_function("anthropic answer to chat", |b| {
        let a = answer();
        b.iter(|| exchange::answer(black_box(&inb), Format::Anthropic, a.clone()).map(|b| b.len()))
    });
    let events = stream_events();
    c.bench_function("anthropic stream of 10 tokens to chat chunks", |b| {
        b.iter(|| {
            let mut t = exchange::translator(&inb, Format::Anthropic);
            let mut out = Vec::new();
            let mut buf = Vec::new();
            if let Some(t) = t.as_mut() {
                for (n, d) in &events {
                    t.push(n.as_deref(), d, &mut out);
                    proxy::translate::stream::write(&out, &mut buf);
                    out.clear();
                }
                t.finish(&mut out);
            }
            buf.len()
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
