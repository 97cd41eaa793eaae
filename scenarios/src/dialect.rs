//! The wire formats the scripted upstream speaks, told apart by path: OpenAI chat completions,
//! Anthropic messages, the Responses API and Gemini's `generateContent`. Requests of the last
//! two are read through a chat-shaped view (so the echo and tool behaviours decide once), and
//! answers are written in each format, whole and streamed.

use crate::script::SseEvent;
use serde_json::{Value, json};

/// A provider wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `…/chat/completions`.
    Openai,
    /// `…/messages`.
    Anthropic,
    /// `…/responses`.
    Responses,
    /// `…/models/{model}:generateContent` or `:streamGenerateContent`.
    Gemini,
}

impl Dialect {
    /// The format `path` is in, with a Gemini path's model and whether it streams.
    pub fn of(path: &str) -> (Dialect, Option<(String, bool)>) {
        if path.ends_with("/messages") {
            return (Dialect::Anthropic, None);
        }
        if path.ends_with("/responses") {
            return (Dialect::Responses, None);
        }
        if let Some((before, verb)) = path.rsplit_once(':')
            && let Some(i) = before.find("/models/")
        {
            let model = before[i + "/models/".len()..].to_owned();
            match verb {
                "generateContent" => return (Dialect::Gemini, Some((model, false))),
                "streamGenerateContent" => return (Dialect::Gemini, Some((model, true))),
                _ => {}
            }
        }
        (Dialect::Openai, None)
    }
}

/// What the scripted Gemini provider answers to `:countTokens`, in the shape Google documents
/// (`{"totalTokens": N}`, https://ai.google.dev/api/tokens): its own figure, a token for every
/// character of text in `contents` (or `generateContentRequest.contents`), so that a client can
/// tell it from the gateway's estimate (a token for about four).
pub fn count_tokens(json: &Value) -> Value {
    let request = json.get("generateContentRequest").unwrap_or(json);
    let chars: usize = request
        .get("contents")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|c| c.get("parts").and_then(Value::as_array).into_iter().flatten())
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .map(|t| t.chars().count())
        .sum();
    serde_json::json!({ "totalTokens": chars })
}

fn text_of(parts: Option<&Value>) -> String {
    match parts {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) => a.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect(),
        _ => String::new(),
    }
}

/// A Responses or Gemini request as the chat request the behaviours read (`messages` and
/// `tools` in chat's shape); other formats are returned as they are.
pub fn chat_view(json: &Value, dialect: Dialect) -> Value {
    let mut messages = Vec::new();
    let mut tools = Vec::new();
    match dialect {
        Dialect::Openai | Dialect::Anthropic => return json.clone(),
        Dialect::Responses => {
            match json.get("input") {
                Some(Value::String(s)) => messages.push(json!({"role": "user", "content": s})),
                Some(Value::Array(items)) => {
                    for it in items {
                        match it.get("type").and_then(Value::as_str) {
                            Some("function_call_output") => {
                                messages.push(json!({"role": "tool", "content": text_of(it.get("output"))}))
                            }
                            Some("function_call") => messages.push(json!({"role": "assistant"})),
                            _ => {
                                let role = it.get("role").and_then(Value::as_str).unwrap_or("user");
                                messages.push(json!({"role": role, "content": text_of(it.get("content"))}));
                            }
                        }
                    }
                }
                _ => {}
            }
            for t in json.get("tools").and_then(Value::as_array).into_iter().flatten() {
                tools.push(json!({"type": "function", "function": {"name": t.get("name")}}));
            }
        }
        Dialect::Gemini => {
            for c in json.get("contents").and_then(Value::as_array).into_iter().flatten() {
                let parts = c.get("parts").and_then(Value::as_array).cloned().unwrap_or_default();
                if let Some(r) = parts.iter().find_map(|p| p.get("functionResponse")) {
                    let response = r.get("response").cloned().unwrap_or(Value::Null);
                    let text = match response.get("result") {
                        Some(Value::String(s)) => s.clone(),
                        _ => response.to_string(),
                    };
                    messages.push(json!({"role": "tool", "content": text}));
                    continue;
                }
                let role = if c.get("role").and_then(Value::as_str) == Some("model") { "assistant" } else { "user" };
                messages.push(json!({"role": role, "content": text_of(Some(&Value::Array(parts)))}));
            }
            for t in json.get("tools").and_then(Value::as_array).into_iter().flatten() {
                for d in t.get("functionDeclarations").and_then(Value::as_array).into_iter().flatten() {
                    tools.push(json!({"type": "function", "function": {"name": d.get("name")}}));
                }
            }
        }
    }
    json!({"model": json.get("model"), "messages": messages, "tools": tools})
}

fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

/// A whole answer of `text` or of a call of `name` with arguments `{"text": text}`.
pub fn answer_json(dialect: Dialect, model: &str, text: &str, call: Option<&str>) -> String {
    let w = words(text);
    let args = json!({ "text": text });
    match (dialect, call) {
        (Dialect::Gemini, _) => {
            let part = match call {
                Some(name) => json!({"functionCall": {"name": name, "args": args}}),
                None => json!({ "text": text }),
            };
            json!({"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": w, "candidatesTokenCount": w, "totalTokenCount": 2 * w},
                "modelVersion": model, "responseId": "gemini-echo"})
            .to_string()
        }
        (Dialect::Responses, _) => {
            let item = match call {
                Some(name) => {
                    json!({"type": "function_call", "id": "fc_echo_1", "call_id": "call_echo_1", "name": name,
                    "arguments": args.to_string(), "status": "completed"})
                }
                None => message_item(text),
            };
            response_object(model, "completed", vec![item], w).to_string()
        }
        (Dialect::Openai | Dialect::Anthropic, Some(name)) => {
            tool_call_json(name, text, model, dialect == Dialect::Anthropic)
        }
        (Dialect::Openai | Dialect::Anthropic, None) => echo_json(text, model, dialect == Dialect::Anthropic),
    }
}

fn message_item(text: &str) -> Value {
    json!({"type": "message", "id": "msg_echo", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn response_object(model: &str, status: &str, output: Vec<Value>, w: usize) -> Value {
    json!({"id": "resp_echo", "object": "response", "created_at": 0, "status": status, "model": model,
        "output": output, "usage": {"input_tokens": w, "output_tokens": w, "total_tokens": 2 * w}})
}

/// A streamed answer: the text word by word, or the call (Gemini sends a call whole; the
/// Responses API streams its arguments in two deltas).
pub fn answer_events(dialect: Dialect, model: &str, text: &str, call: Option<&str>, chunk_ms: u64) -> Vec<SseEvent> {
    let w = words(text);
    let plain = |data: Value| SseEvent { after_ms: chunk_ms, event: None, data: data.to_string(), pad_to: None };
    let named = |name: &str, mut data: Value| {
        data["type"] = name.into();
        SseEvent { after_ms: chunk_ms, event: Some(name.to_owned()), data: data.to_string(), pad_to: None }
    };
    let args = json!({ "text": text }).to_string();
    match dialect {
        Dialect::Gemini => {
            let chunk = |parts: Value, finish: Option<&str>| {
                let mut c = json!({"content": {"role": "model", "parts": parts}, "index": 0});
                let mut v = json!({"candidates": [], "modelVersion": model, "responseId": "gemini-echo"});
                if let Some(f) = finish {
                    c["finishReason"] = f.into();
                    v["usageMetadata"] =
                        json!({"promptTokenCount": w, "candidatesTokenCount": w, "totalTokenCount": 2 * w});
                }
                v["candidates"] = json!([c]);
                plain(v)
            };
            let mut out = Vec::new();
            match call {
                Some(name) => out.push(chunk(json!([{"functionCall": {"name": name, "args": {"text": text}}}]), None)),
                None => {
                    for word in text.split_inclusive(' ') {
                        out.push(chunk(json!([{ "text": word }]), None));
                    }
                }
            }
            out.push(chunk(json!([{"text": ""}]), Some("STOP")));
            out
        }
        Dialect::Responses => {
            let mut out =
                vec![named("response.created", json!({"response": response_object(model, "in_progress", vec![], 0)}))];
            let item = match call {
                Some(name) => {
                    let item = json!({"type": "function_call", "id": "fc_echo_1", "call_id": "call_echo_1", "name": name,
                        "arguments": "", "status": "in_progress"});
                    out.push(named("response.output_item.added", json!({"output_index": 0, "item": item})));
                    let mid = args.char_indices().nth(args.chars().count() / 2).map_or(0, |(i, _)| i);
                    for d in [&args[..mid], &args[mid..]] {
                        out.push(named(
                            "response.function_call_arguments.delta",
                            json!({"item_id": "fc_echo_1", "output_index": 0, "delta": d}),
                        ));
                    }
                    json!({"type": "function_call", "id": "fc_echo_1", "call_id": "call_echo_1", "name": name,
                        "arguments": args, "status": "completed"})
                }
                None => {
                    let open = json!({"type": "message", "id": "msg_echo", "status": "in_progress", "role": "assistant", "content": []});
                    out.push(named("response.output_item.added", json!({"output_index": 0, "item": open})));
                    for word in text.split_inclusive(' ') {
                        out.push(named(
                            "response.output_text.delta",
                            json!({"item_id": "msg_echo", "output_index": 0, "content_index": 0, "delta": word}),
                        ));
                    }
                    message_item(text)
                }
            };
            out.push(named("response.output_item.done", json!({"output_index": 0, "item": item})));
            out.push(named(
                "response.completed",
                json!({"response": response_object(model, "completed", vec![item], w)}),
            ));
            out
        }
        Dialect::Openai | Dialect::Anthropic => {
            let anthropic = dialect == Dialect::Anthropic;
            match call {
                Some(name) => tool_call_events(name, text, model, chunk_ms, anthropic),
                None => echo_events(text, model, chunk_ms, anthropic),
            }
        }
    }
}

fn echo_events(text: &str, model: &str, chunk_ms: u64, anthropic: bool) -> Vec<SseEvent> {
    let words: Vec<String> = text.split_inclusive(' ').map(str::to_owned).collect();
    if anthropic {
        return SseEvent::anthropic_text_stream(model, &words, chunk_ms);
    }
    let named = serde_json::Value::from(model).to_string();
    let mut events: Vec<SseEvent> = words.iter().map(|w| SseEvent::text(chunk_ms, w)).collect();
    events.push(SseEvent::finish(0, "stop"));
    for e in &mut events {
        e.data = e.data.replace("\"scripted\"", &named);
    }
    events.push(SseEvent::usage(0));
    events.push(SseEvent::done(0));
    events
}

fn echo_json(text: &str, model: &str, anthropic: bool) -> String {
    let words = text.split_whitespace().count();
    if anthropic {
        serde_json::json!({"id":"msg_echo","type":"message","role":"assistant","model":model,
            "content":[{"type":"text","text":text}],"stop_reason":"end_turn",
            "usage":{"input_tokens":words,"output_tokens":words}})
        .to_string()
    } else {
        serde_json::json!({"id":"chatcmpl-echo","object":"chat.completion","created":0,"model":model,
            "choices":[{"index":0,"message":{"role":"assistant","content":text},"finish_reason":"stop"}],
            "usage":{"prompt_tokens":words,"completion_tokens":words,"total_tokens":words * 2}})
        .to_string()
    }
}

fn tool_call_json(name: &str, text: &str, model: &str, anthropic: bool) -> String {
    let input = serde_json::json!({ "text": text });
    if anthropic {
        serde_json::json!({"id":"msg_tool","type":"message","role":"assistant","model":model,
            "content":[{"type":"tool_use","id":"toolu_echo_1","name":name,"input":input}],"stop_reason":"tool_use",
            "stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":5}})
        .to_string()
    } else {
        serde_json::json!({"id":"chatcmpl-tool","object":"chat.completion","created":0,"model":model,
            "choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_echo_1","type":"function",
            "function":{"name":name,"arguments":input.to_string()}}]},"finish_reason":"tool_calls"}],
            "usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}})
        .to_string()
    }
}

/// A streamed call of `name`, its arguments split in two deltas.
fn tool_call_events(name: &str, text: &str, model: &str, chunk_ms: u64, anthropic: bool) -> Vec<SseEvent> {
    let args = serde_json::json!({ "text": text }).to_string();
    let mid = args.char_indices().nth(args.chars().count() / 2).map_or(0, |(i, _)| i);
    let (a, b) = args.split_at(mid);
    if anthropic {
        let ev = |data: serde_json::Value| SseEvent::anthropic(chunk_ms, data);
        let mut start = SseEvent::anthropic_start(model, "msg_tool");
        start.after_ms = chunk_ms;
        vec![
            start,
            ev(
                serde_json::json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_echo_1","name":name,"input":{}}}),
            ),
            ev(
                serde_json::json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":a}}),
            ),
            ev(
                serde_json::json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":b}}),
            ),
            ev(serde_json::json!({"type":"content_block_stop","index":0})),
            ev(
                serde_json::json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":5}}),
            ),
            ev(serde_json::json!({"type":"message_stop"})),
        ]
    } else {
        let chunk = |delta: serde_json::Value, finish: serde_json::Value| SseEvent {
            after_ms: chunk_ms,
            event: None,
            data: serde_json::json!({"id":"chatcmpl-tool","object":"chat.completion.chunk","created":0,"model":model,
                "choices":[{"index":0,"delta":delta,"finish_reason":finish}]})
            .to_string(),
            pad_to: None,
        };
        vec![
            chunk(serde_json::json!({"role":"assistant","content":null}), serde_json::Value::Null),
            chunk(
                serde_json::json!({"tool_calls":[{"index":0,"id":"call_echo_1","type":"function","function":{"name":name,"arguments":""}}]}),
                serde_json::Value::Null,
            ),
            chunk(serde_json::json!({"tool_calls":[{"index":0,"function":{"arguments":a}}]}), serde_json::Value::Null),
            chunk(serde_json::json!({"tool_calls":[{"index":0,"function":{"arguments":b}}]}), serde_json::Value::Null),
            chunk(serde_json::json!({}), serde_json::json!("tool_calls")),
            SseEvent::usage(0),
            SseEvent::done(0),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_their_dialect() {
        assert_eq!(Dialect::of("/v1/chat/completions").0, Dialect::Openai);
        assert_eq!(Dialect::of("/v1/messages").0, Dialect::Anthropic);
        assert_eq!(Dialect::of("/v1/responses").0, Dialect::Responses);
        assert_eq!(
            Dialect::of("/v1beta/models/g/m:streamGenerateContent"),
            (Dialect::Gemini, Some(("g/m".to_owned(), true)))
        );
    }

    #[test]
    fn a_gemini_tool_loop_reads_as_chat() {
        let req = json!({"contents": [
            {"role": "user", "parts": [{"text": "weather"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"result": "sunny"}}}]}],
            "tools": [{"functionDeclarations": [{"name": "f"}]}]});
        let v = chat_view(&req, Dialect::Gemini);
        assert_eq!(v["messages"][0]["content"], "weather");
        assert_eq!(v["messages"][2], json!({"role": "tool", "content": "sunny"}));
        assert_eq!(v["tools"][0]["function"]["name"], "f");
    }
}
