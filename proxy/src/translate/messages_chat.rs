//! An Anthropic Messages request to an OpenAI-format provider: the request to Chat
//! Completions, the chat answer back to a Messages answer, and the `anthropic-beta` header.

use super::wire::{AntUsage, ChatCompletion};
use super::{Translated, Untranslatable, effort_for_budget, joined_text, parse_arguments, stop_reason, str_of};
use serde::Serialize;
use serde_json::{Map, Value, json};

/// Fields of a Messages request that carry over; `context_management` is advice about long
/// contexts (clear old tool results past a threshold) that a chat provider cannot follow, so
/// it is dropped and named. Any other field is refused.
const KNOWN: &[&str] = &[
    "model",
    "messages",
    "system",
    "max_tokens",
    "metadata",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "thinking",
    "service_tier",
    "context_management",
    "output_config",
];

/// Beta features that change only how the provider serves a request, not what it answers;
/// across a translation they are dropped and named.
const ADVISORY_BETAS: &[&str] = &[
    "claude-code-",
    "interleaved-thinking-",
    "context-management-",
    "fine-grained-tool-streaming-",
    "prompt-caching-",
    "token-efficient-tools-",
    "output-128k-",
    "context-1m-",
    "extended-cache-ttl-",
    "oauth-",
    "thinking-token-count-",
];

/// Beta features whose body fields this translation maps (system turns mid-conversation,
/// `output_config.effort`): they need no header on the chat side.
const MAPPED_BETAS: &[&str] = &["mid-conversation-system-", "effort-"];

/// Checks the client's `anthropic-beta` header for a chat provider: advisory betas are
/// returned to be named as dropped; a beta whose feature a chat provider lacks is refused.
pub fn betas(header: &str) -> Result<Vec<String>, Untranslatable> {
    let mut dropped = Vec::new();
    for beta in header.split(',').map(str::trim).filter(|b| !b.is_empty()) {
        if MAPPED_BETAS.iter().any(|p| beta.starts_with(p)) {
            continue;
        }
        if ADVISORY_BETAS.iter().any(|p| beta.starts_with(p)) {
            dropped.push(format!("anthropic-beta:{beta}"));
        } else {
            return Err(Untranslatable::new(
                format!("anthropic-beta: {beta}"),
                "this beta feature exists only on Anthropic-format providers",
            ));
        }
    }
    Ok(dropped)
}

/// Messages request → chat request.
pub fn request(msg: &Value) -> Result<Translated, Untranslatable> {
    let Some(obj) = msg.as_object() else { return Err(Untranslatable::new("body", "must be a JSON object")) };
    if let Some(k) = obj.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(Untranslatable::new(k.as_str(), "OpenAI Chat Completions has no such field"));
    }
    if obj.get("top_k").is_some_and(|v| !v.is_null()) {
        return Err(Untranslatable::new("top_k", "OpenAI Chat Completions has no top-k sampling"));
    }
    let mut out = Translated { body: json!({}), dropped: Vec::new() };
    let mut body = Map::new();
    let mut messages = Vec::new();
    match obj.get("system") {
        None | Some(Value::Null) => {}
        Some(s) => {
            if s.as_array().is_some_and(|a| a.iter().any(|b| b.get("cache_control").is_some())) {
                out.note("cache_control");
            }
            let text = system_text(s)?;
            if !text.is_empty() {
                messages.push(json!({"role": "system", "content": text}));
            }
        }
    }
    let Some(list) = obj.get("messages").and_then(Value::as_array) else {
        return Err(Untranslatable::new("messages", "must be an array"));
    };
    for (i, m) in list.iter().enumerate() {
        turn(m, i, &mut messages, &mut out)?;
    }
    body.insert("messages".into(), Value::Array(messages));
    if let Some(n) = obj.get("max_tokens").filter(|v| !v.is_null()) {
        body.insert("max_tokens".into(), n.clone());
    }
    for k in ["temperature", "top_p", "stream"] {
        if let Some(v) = obj.get(k).filter(|v| !v.is_null()) {
            body.insert(k.into(), v.clone());
        }
    }
    if obj.get("stream") == Some(&Value::Bool(true)) {
        // Usage arrives in a last chunk only when asked for; message_delta needs it.
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if let Some(s) = obj.get("stop_sequences").and_then(Value::as_array).filter(|s| !s.is_empty()) {
        body.insert("stop".into(), Value::Array(s.clone()));
    }
    if let Some(m) = obj.get("metadata").and_then(Value::as_object) {
        if let Some(k) = m.keys().find(|k| *k != "user_id") {
            return Err(Untranslatable::new(format!("metadata.{k}"), "only metadata.user_id has a chat equivalent"));
        }
        if let Some(u) = m.get("user_id").and_then(Value::as_str) {
            body.insert("user".into(), u.into());
        }
    }
    let effort = obj.get("output_config").and_then(|o| o.get("effort")).and_then(Value::as_str);
    match obj.get("thinking") {
        Some(t) if str_of(t, "type") == Some("enabled") => {
            let budget = t.get("budget_tokens").and_then(Value::as_u64).unwrap_or(0);
            body.insert("reasoning_effort".into(), effort.unwrap_or(effort_for_budget(budget)).into());
        }
        Some(t) if str_of(t, "type") == Some("adaptive") => {
            body.insert("reasoning_effort".into(), effort.unwrap_or("medium").into());
        }
        _ => {
            if let Some(e) = effort {
                body.insert("reasoning_effort".into(), e.into());
            }
        }
    }
    if let Some(o) = obj.get("output_config").and_then(Value::as_object) {
        output_config(o, &mut body)?;
    }
    if body.get("reasoning_effort").and_then(Value::as_str) == Some("max") {
        body.insert("reasoning_effort".into(), "high".into());
    }
    tools(obj, &mut body, &mut out)?;
    if obj.get("context_management").is_some_and(|v| !v.is_null()) {
        out.note("context_management");
    }
    if obj.get("service_tier").is_some_and(|v| !v.is_null()) {
        out.note("service_tier");
    }
    out.body = Value::Object(body);
    Ok(out)
}

/// `output_config`: the effort (read above) and a structured-output format.
fn output_config(o: &Map<String, Value>, body: &mut Map<String, Value>) -> Result<(), Untranslatable> {
    for (k, v) in o {
        match k.as_str() {
            "effort" => {}
            "format" if str_of(v, "type") == Some("json_schema") => {
                let schema = v.get("schema").cloned().unwrap_or_else(|| json!({}));
                body.insert(
                    "response_format".into(),
                    json!({"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}),
                );
            }
            _ => {
                return Err(Untranslatable::new(
                    format!("output_config.{k}"),
                    "OpenAI Chat Completions has no equivalent output setting",
                ));
            }
        }
    }
    Ok(())
}

fn system_text(s: &Value) -> Result<String, Untranslatable> {
    match s {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut parts = Vec::new();
            for (i, b) in blocks.iter().enumerate() {
                match (str_of(b, "type"), str_of(b, "text")) {
                    (Some("text"), Some(t)) => parts.push(t.to_owned()),
                    (kind, _) => {
                        return Err(Untranslatable::new(
                            format!("system[{i}].type={}", kind.unwrap_or("unknown")),
                            "a system prompt carries text only",
                        ));
                    }
                }
            }
            Ok(parts.join("\n\n"))
        }
        _ => Err(Untranslatable::new("system", "must be a string or a list of text blocks")),
    }
}

/// One Messages turn → chat messages: tool results become `tool` messages (before the rest
/// of the user turn), tool uses become `tool_calls`, thinking blocks in the history are
/// dropped and named (a chat provider takes no reasoning as input).
fn turn(m: &Value, i: usize, out: &mut Vec<Value>, t: &mut Translated) -> Result<(), Untranslatable> {
    let role = match str_of(m, "role") {
        Some(r @ ("user" | "assistant")) => r,
        Some("system") => {
            // A system turn mid-conversation (Anthropic's mid-conversation-system beta).
            let text = system_text(m.get("content").unwrap_or(&Value::Null))?;
            out.push(json!({"role": "system", "content": text}));
            return Ok(());
        }
        other => {
            return Err(Untranslatable::new(
                format!("messages[{i}].role={}", other.unwrap_or("missing")),
                "a turn is user or assistant",
            ));
        }
    };
    let blocks = match m.get("content") {
        Some(Value::String(s)) => {
            out.push(json!({"role": role, "content": s}));
            return Ok(());
        }
        Some(Value::Array(b)) => b,
        _ => return Err(Untranslatable::new(format!("messages[{i}].content"), "must be a string or blocks")),
    };
    let mut parts: Vec<Value> = Vec::new();
    let mut calls = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let field = format!("messages[{i}].content[{j}]");
        if b.get("cache_control").is_some() {
            t.note("cache_control");
        }
        match str_of(b, "type") {
            Some("text") => parts.push(json!({"type": "text", "text": str_of(b, "text").unwrap_or("")})),
            Some("image") if role == "user" => parts.push(image_part(b, &field)?),
            Some("document") if role == "user" => parts.push(document_part(b, &field)?),
            Some("tool_use") if role == "assistant" => calls.push(json!({
                "id": str_of(b, "id").unwrap_or(""),
                "type": "function",
                "function": {
                    "name": str_of(b, "name").unwrap_or(""),
                    "arguments": b.get("input").map_or_else(|| "{}".to_owned(), Value::to_string),
                },
            })),
            Some("tool_result") if role == "user" => {
                let mut text = joined_text(b.get("content"), &format!("{field}.content"))?;
                if b.get("is_error") == Some(&Value::Bool(true)) {
                    text = format!("[tool error] {text}");
                }
                out.push(
                    json!({"role": "tool", "tool_call_id": str_of(b, "tool_use_id").unwrap_or(""), "content": text}),
                );
            }
            Some("thinking" | "redacted_thinking") if role == "assistant" => t.note("thinking blocks in the history"),
            other => {
                return Err(Untranslatable::new(
                    format!("{field}.type={}", other.unwrap_or("unknown")),
                    format!("a chat provider cannot take this block in a {role} turn"),
                ));
            }
        }
    }
    if role == "assistant" {
        let text: String = parts.iter().filter_map(|p| str_of(p, "text")).collect();
        if text.is_empty() && calls.is_empty() {
            return Ok(());
        }
        let mut msg =
            json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { Value::String(text) }});
        if !calls.is_empty() {
            msg["tool_calls"] = Value::Array(calls);
        }
        out.push(msg);
    } else if !parts.is_empty() {
        let only_text = parts.iter().all(|p| p["type"] == "text");
        let content = if only_text && parts.len() == 1 { parts[0]["text"].clone() } else { Value::Array(parts) };
        out.push(json!({"role": "user", "content": content}));
    }
    Ok(())
}

/// A document block as a chat part: a base64 PDF as a file part, plain text as text.
fn document_part(b: &Value, field: &str) -> Result<Value, Untranslatable> {
    let src = b.get("source").unwrap_or(&Value::Null);
    match (str_of(src, "type"), str_of(src, "media_type")) {
        (Some("base64"), Some("application/pdf")) => {
            let data = format!("data:application/pdf;base64,{}", str_of(src, "data").unwrap_or(""));
            let name = str_of(b, "title").unwrap_or("document.pdf");
            Ok(json!({"type": "file", "file": {"filename": name, "file_data": data}}))
        }
        (Some("text"), _) => Ok(json!({"type": "text", "text": str_of(src, "data").unwrap_or("")})),
        (kind, media) => Err(Untranslatable::new(
            format!("{field}.source"),
            format!(
                "a chat provider takes documents as base64 PDF or text, not {} {}",
                kind.unwrap_or("unknown"),
                media.unwrap_or("")
            ),
        )),
    }
}

fn image_part(b: &Value, field: &str) -> Result<Value, Untranslatable> {
    let src = b.get("source").unwrap_or(&Value::Null);
    let url = match str_of(src, "type") {
        Some("base64") => format!(
            "data:{};base64,{}",
            str_of(src, "media_type").unwrap_or("image/png"),
            str_of(src, "data").unwrap_or("")
        ),
        Some("url") => str_of(src, "url").unwrap_or("").to_owned(),
        other => {
            return Err(Untranslatable::new(
                format!("{field}.source.type={}", other.unwrap_or("unknown")),
                "a chat provider takes images as base64 or URL",
            ));
        }
    };
    Ok(json!({"type": "image_url", "image_url": {"url": url}}))
}

fn tools(obj: &Map<String, Value>, body: &mut Map<String, Value>, t: &mut Translated) -> Result<(), Untranslatable> {
    if let Some(list) = obj.get("tools").and_then(Value::as_array).filter(|l| !l.is_empty()) {
        let mut tools = Vec::new();
        for (i, tool) in list.iter().enumerate() {
            // Client tools have no `type` (or "custom"); Anthropic-defined and server tools
            // carry a versioned type. A chat provider can run none of those: the offer is
            // dropped and named (a tool_choice that forces one is refused below).
            if let Some(kind) = str_of(tool, "type").filter(|k| *k != "custom") {
                t.note(&format!("tools:{kind}"));
                continue;
            }
            let Some(name) = str_of(tool, "name") else {
                return Err(Untranslatable::new(format!("tools[{i}].name"), "a tool needs a name"));
            };
            if tool.get("cache_control").is_some() {
                t.note("cache_control");
            }
            let mut f = json!({"name": name, "parameters": tool.get("input_schema").cloned().unwrap_or_else(|| json!({"type": "object"}))});
            if let Some(d) = str_of(tool, "description") {
                f["description"] = d.into();
            }
            tools.push(json!({"type": "function", "function": f}));
        }
        if !tools.is_empty() {
            body.insert("tools".into(), Value::Array(tools));
        }
    }
    if let Some(c) = obj.get("tool_choice").filter(|c| !c.is_null()) {
        let choice = match str_of(c, "type") {
            Some("auto") => json!("auto"),
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => {
                let name = str_of(c, "name").unwrap_or("");
                let offered = body.get("tools").and_then(Value::as_array).is_some_and(|l| {
                    l.iter().any(|f| f.pointer("/function/name").and_then(Value::as_str) == Some(name))
                });
                if !offered {
                    return Err(Untranslatable::new(
                        format!("tool_choice.name={name}"),
                        "the forced tool is not a client tool a chat provider can call",
                    ));
                }
                json!({"type": "function", "function": {"name": name}})
            }
            other => {
                return Err(Untranslatable::new(
                    format!("tool_choice.type={}", other.unwrap_or("missing")),
                    "unknown tool choice",
                ));
            }
        };
        if c.get("disable_parallel_tool_use") == Some(&Value::Bool(true)) && body.contains_key("tools") {
            body.insert("parallel_tool_calls".into(), Value::Bool(false));
        }
        body.insert("tool_choice".into(), choice);
    }
    Ok(())
}

/// Chat completion → Messages answer.
pub fn response(body: &[u8]) -> Result<String, serde_json::Error> {
    let chat: ChatCompletion<'_> = serde_json::from_slice(body)?;
    let choice = chat.choices.first();
    let message = choice.and_then(|c| c.message.as_ref());
    let mut content = Vec::new();
    if let Some(m) = message {
        if let Some(r) = m.reasoning_content.as_deref().filter(|r| !r.is_empty()) {
            content.push(OutBlock::Thinking { thinking: r, signature: "" });
        }
        if let Some(t) = m.content.as_deref().filter(|t| !t.is_empty()) {
            content.push(OutBlock::Text { text: t });
        }
        if let Some(t) = m.refusal.as_deref().filter(|t| !t.is_empty()) {
            content.push(OutBlock::Text { text: t });
        }
        for c in m.tool_calls.iter().flatten() {
            let f = c.function.as_ref();
            content.push(OutBlock::ToolUse {
                id: c.id.as_deref().unwrap_or(""),
                name: f.and_then(|f| f.name.as_deref()).unwrap_or(""),
                input: parse_arguments(f.and_then(|f| f.arguments.as_deref()).unwrap_or("")),
            });
        }
    }
    let out = OutAnswer {
        id: format!("msg_{}", chat.id.as_deref().unwrap_or("ferroute")),
        kind: "message",
        role: "assistant",
        model: chat.model.as_deref().unwrap_or(""),
        content,
        stop_reason: stop_reason(choice.and_then(|c| c.finish_reason.as_deref()).unwrap_or("stop")),
        stop_sequence: None,
        usage: chat.usage.unwrap_or_default().to_anthropic(),
    };
    serde_json::to_string(&out)
}

#[derive(Serialize)]
struct OutAnswer<'a> {
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: &'a str,
    content: Vec<OutBlock<'a>>,
    stop_reason: &'static str,
    stop_sequence: Option<()>,
    usage: AntUsage,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutBlock<'a> {
    Thinking { thinking: &'a str, signature: &'static str },
    Text { text: &'a str },
    ToolUse { id: &'a str, name: &'a str, input: Value },
}
