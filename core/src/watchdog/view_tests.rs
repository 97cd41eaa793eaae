//! The one-pass view against the full parse it replaced: on any JSON, repeated keys and
//! escapes included, [`super::classify_sse`] must classify as the `serde_json::Value` version
//! did.

use super::{StreamEvent, classify_sse};
use proptest::prelude::*;

// The classification as it was before the one-pass view: every event built into a
// `serde_json::Value`. The view must agree with it on any JSON.
fn is_protected_name_value(s: &str) -> bool {
    let l = s.to_ascii_lowercase();
    ["reasoning", "thinking", "tool", "function_call"].iter().any(|m| l.contains(m))
}

// Types one SSE event (its `event:` name, if any, and its `data:` payload) for the watchdog.
// Understands Chat Completions, Responses API, Anthropic Messages and Gemini events.
fn classify_sse_value(event_name: Option<&str>, data: &str) -> StreamEvent {
    let data = data.trim();
    if event_name.is_some_and(|n| n.eq_ignore_ascii_case("ping")) {
        return StreamEvent::Heartbeat;
    }
    if data.is_empty() || data == "[DONE]" {
        return StreamEvent::Empty;
    }
    let Ok(v) = serde_json::from_str::<serde_json::Value>(data) else { return StreamEvent::Empty };
    let ty = v.get("type").and_then(|t| t.as_str()).or(event_name).unwrap_or("");
    if ty == "ping" {
        return StreamEvent::Heartbeat;
    }
    if is_protected_name_value(ty) {
        return if ty.to_ascii_lowercase().contains("tool") || ty.contains("function_call") {
            StreamEvent::ToolCall
        } else {
            StreamEvent::Reasoning
        };
    }
    if let Some(block_type) = v.pointer("/content_block/type").and_then(|t| t.as_str())
        && is_protected_name_value(block_type)
    {
        return if block_type.contains("tool") { StreamEvent::ToolCall } else { StreamEvent::Reasoning };
    }
    // Chat Completions.
    if let Some(choices) = v.get("choices").and_then(|c| c.as_array()) {
        let mut bytes = 0;
        for c in choices {
            let delta = c.get("delta").unwrap_or(c);
            if delta.get("tool_calls").is_some_and(|t| !t.is_null())
                || delta.get("function_call").is_some_and(|t| !t.is_null())
            {
                return StreamEvent::ToolCall;
            }
            if ["reasoning_content", "reasoning"]
                .iter()
                .any(|k| delta.get(*k).and_then(|r| r.as_str()).is_some_and(|s| !s.is_empty()))
            {
                return StreamEvent::Reasoning;
            }
            for k in ["content", "text"] {
                if let Some(s) = delta.get(k).and_then(|s| s.as_str()) {
                    bytes += s.len();
                }
            }
        }
        if bytes > 0 {
            return StreamEvent::Text(bytes);
        }
        return if v.get("usage").is_some_and(|u| !u.is_null()) { StreamEvent::Usage } else { StreamEvent::Empty };
    }
    // Gemini: the first candidate's parts.
    if let Some(candidates) = v.get("candidates").and_then(|c| c.as_array()) {
        let parts = candidates.first().and_then(|c| c.get("content")).and_then(|c| c.get("parts"));
        let mut bytes = 0;
        for p in parts.and_then(|p| p.as_array()).into_iter().flatten() {
            if p.get("functionCall").is_some_and(|f| !f.is_null()) {
                return StreamEvent::ToolCall;
            }
            let text = p.get("text").and_then(|t| t.as_str());
            if p.get("thought") == Some(&serde_json::Value::Bool(true)) && text.is_some_and(|t| !t.is_empty()) {
                return StreamEvent::Reasoning;
            }
            bytes += text.map_or(0, str::len);
        }
        if bytes > 0 {
            return StreamEvent::Text(bytes);
        }
        let usage = v.get("usageMetadata").is_some_and(|u| !u.is_null());
        return if usage { StreamEvent::Usage } else { StreamEvent::Empty };
    }
    // Anthropic content deltas.
    if let Some(delta) = v.get("delta") {
        if let Some(dt) = delta.get("type").and_then(|t| t.as_str())
            && is_protected_name_value(dt)
        {
            return if dt.contains("tool") { StreamEvent::ToolCall } else { StreamEvent::Reasoning };
        }
        if let Some(s) = delta.get("text").and_then(|s| s.as_str()) {
            return if s.is_empty() { StreamEvent::Empty } else { StreamEvent::Text(s.len()) };
        }
        // Responses API: a string delta.
        if let Some(s) = delta.as_str() {
            return if s.is_empty() { StreamEvent::Empty } else { StreamEvent::Text(s.len()) };
        }
    }
    if v.get("usage").is_some() {
        return StreamEvent::Usage;
    }
    StreamEvent::Empty
}

/// A JSON text: objects may repeat keys, strings may be escaped.
fn json_text() -> impl Strategy<Value = String> {
    let keys = prop::sample::select(vec![
        "type",
        "content_block",
        "choices",
        "delta",
        "usage",
        "tool_calls",
        "function_call",
        "reasoning_content",
        "reasoning",
        "content",
        "text",
        "index",
        "id",
        "t\\u0079pe",
        "candidates",
        "parts",
        "thought",
        "functionCall",
        "usageMetadata",
    ]);
    let strings = prop::sample::select(vec![
        "\"\"",
        "\"hi\"",
        "\"tool_use\"",
        "\"thinking\"",
        "\"ping\"",
        "\"text_delta\"",
        "\"Function_Call\"",
        "\"\\u0074ool\"",
        "\"caf\\u00e9 \\\"x\\\"\"",
        "\"Thinking_delta\"",
        "\"\u{e9}t\u{e9}\"",
    ]);
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        (-5i64..5).prop_map(|n| n.to_string()),
        Just("1.5e3".to_owned()),
        strings.prop_map(str::to_owned),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec((keys.clone(), inner), 0..6).prop_map(|kv| {
                let fields: Vec<String> = kv.into_iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                format!("{{{}}}", fields.join(","))
            }),
        ]
    })
}

/// An object of `(key, value)` pairs (keys may repeat), each pair kept or not.
fn object(pairs: Vec<(&'static str, BoxedStrategy<String>)>) -> BoxedStrategy<String> {
    let each: Vec<BoxedStrategy<Option<String>>> =
        pairs.into_iter().map(|(k, v)| prop::option::of(v.prop_map(move |v| format!("\"{k}\":{v}"))).boxed()).collect();
    (each, any::<bool>())
        .prop_map(|(fields, reverse)| {
            let mut f: Vec<String> = fields.into_iter().flatten().collect();
            if reverse {
                f.reverse();
            }
            format!("{{{}}}", f.join(","))
        })
        .boxed()
}

/// Chat Completions and Anthropic/Responses events with fields of any type.
fn event_text() -> impl Strategy<Value = String> {
    let any = || json_text().boxed();
    let strings = || {
        prop::sample::select(vec![
            "\"\"",
            "\"hi\"",
            "\"tool_use\"",
            "\"thinking_delta\"",
            "\"text_delta\"",
            "\"\\u0074ool\"",
        ])
        .prop_map(str::to_owned)
        .boxed()
    };
    let value = move || prop_oneof![3 => strings(), 1 => any()].boxed();
    let fields = move || {
        object(vec![
            ("tool_calls", value()),
            ("function_call", value()),
            ("reasoning_content", value()),
            ("reasoning", value()),
            ("content", value()),
            ("text", value()),
            ("content", value()),
        ])
    };
    let choice = move || prop_oneof![fields(), object(vec![("index", any()), ("delta", fields()), ("text", value())])];
    let chat = object(vec![
        ("choices", prop::collection::vec(choice(), 0..3).prop_map(|c| format!("[{}]", c.join(","))).boxed()),
        ("usage", any()),
        ("type", value()),
    ]);
    let delta =
        prop_oneof![object(vec![("type", value()), ("text", value()), ("type", value()), ("text", value())]), value()]
            .boxed();
    let anthropic = object(vec![
        ("type", value()),
        ("content_block", object(vec![("type", value()), ("text", value())])),
        ("delta", delta),
        ("usage", any()),
        ("delta", value()),
    ]);
    let flag = || prop_oneof![3 => Just("true".to_owned()), 1 => Just("false".to_owned()), 1 => any()].boxed();
    let part = move || object(vec![("text", value()), ("thought", flag()), ("functionCall", any()), ("text", value())]);
    let parts = move || prop::collection::vec(part(), 0..4).prop_map(|p| format!("[{}]", p.join(","))).boxed();
    let content = move || object(vec![("parts", parts()), ("role", value()), ("parts", parts())]);
    let candidate = move || object(vec![("content", content()), ("index", any()), ("content", content())]);
    let gemini = object(vec![
        ("candidates", prop::collection::vec(candidate(), 0..3).prop_map(|c| format!("[{}]", c.join(","))).boxed()),
        ("usageMetadata", any()),
        ("modelVersion", value()),
    ]);
    prop_oneof![1 => json_text(), 1 => chat, 1 => anthropic, 2 => gemini]
}

proptest! {
    #[test]
    fn the_one_pass_view_classifies_as_a_full_parse(
        data in event_text(),
        name in prop::option::of(prop::sample::select(vec!["ping", "thinking", "message", "content_block_delta", "TOOL", "x"])),
        pad in prop::sample::select(vec!["", " ", "\n"]),
    ) {
        let data = format!("{pad}{data}{pad}");
        prop_assert_eq!(classify_sse(name, &data), classify_sse_value(name, &data), "{}", data);
    }

    #[test]
    fn any_text_classifies_as_a_full_parse(data in ".{0,40}") {
        prop_assert_eq!(classify_sse(None, &data), classify_sse_value(None, &data));
    }
}

#[test]
fn gemini_events_are_read_like_chat_chunks() {
    let ev = |parts: &str, extra: &str| {
        format!(r#"{{"candidates":[{{"content":{{"role":"model","parts":{parts}}}}}]{extra}}}"#)
    };
    let cases = [
        (ev(r#"[{"text":"hello"},{"text":" you"}]"#, ""), StreamEvent::Text(9)),
        (ev(r#"[{"text":"plan","thought":true}]"#, ""), StreamEvent::Reasoning),
        (ev(r#"[{"text":"a"},{"functionCall":{"name":"f","args":{}}}]"#, ""), StreamEvent::ToolCall),
        (ev(r#"[{"text":""}]"#, r#","usageMetadata":{"totalTokenCount":3}"#), StreamEvent::Usage),
        (ev(r#"[{"text":""}]"#, ""), StreamEvent::Empty),
        (r#"{"candidates":[]}"#.to_owned(), StreamEvent::Empty),
    ];
    for (data, want) in cases {
        assert_eq!(classify_sse(None, &data), want, "{data}");
        assert_eq!(classify_sse_value(None, &data), want, "{data}");
    }
}
