//! An OpenAI Chat Completions request to an Anthropic-format provider: the request to
//! Anthropic Messages, and the Messages answer back to a chat completion.

use super::wire::{AntMessage, Out};
use super::{
    DEFAULT_MAX_TOKENS, Translated, Untranslatable, budget_for_effort, finish_reason, function_tools, joined_text,
    refuse_unless, str_of, tool_name,
};
use serde_json::{Map, Value, json};

/// Chat request → Messages request.
pub fn request(chat: &Value) -> Result<Translated, Untranslatable> {
    let Some(obj) = chat.as_object() else { return Err(Untranslatable::new("body", "must be a JSON object")) };
    if let Some(k) = obj.keys().find(|k| !super::CHAT_FIELDS.contains(&k.as_str())) {
        return Err(Untranslatable::new(k.as_str(), "the Anthropic Messages API has no such field"));
    }
    refuse_unless(obj, "n", |v| v.as_u64() == Some(1), "Anthropic returns one choice per request")?;
    for k in ["presence_penalty", "frequency_penalty"] {
        refuse_unless(obj, k, |v| v.as_f64() == Some(0.0), "Anthropic has no sampling penalties")?;
    }
    refuse_unless(obj, "logprobs", |v| v == &Value::Bool(false), "Anthropic returns no log probabilities")?;
    refuse_unless(obj, "top_logprobs", |_| false, "Anthropic returns no log probabilities")?;
    refuse_unless(obj, "logit_bias", |v| v.as_object().is_some_and(Map::is_empty), "Anthropic has no logit bias")?;
    refuse_unless(obj, "seed", |_| false, "Anthropic has no sampling seed")?;
    refuse_unless(obj, "store", |v| v == &Value::Bool(false), "Ferroute does not store completions")?;
    refuse_unless(
        obj,
        "response_format",
        |v| str_of(v, "type") == Some("text"),
        "Anthropic has no JSON mode or response schema",
    )?;
    refuse_unless(
        obj,
        "temperature",
        |v| v.as_f64().is_some_and(|t| (0.0..=1.0).contains(&t)),
        "Anthropic accepts temperatures from 0 to 1 only",
    )?;
    let mut out = Translated { body: json!({}), dropped: Vec::new() };
    let mut body = Map::new();
    let (system, messages) = messages(obj.get("messages"))?;
    if !system.is_empty() {
        body.insert("system".into(), Value::String(system));
    }
    body.insert("messages".into(), Value::Array(messages));
    let limit = ["max_completion_tokens", "max_tokens"]
        .into_iter()
        .find_map(|k| obj.get(k).filter(|v| !v.is_null()).map(|v| (k, v)));
    let mut max_tokens = match limit {
        None => DEFAULT_MAX_TOKENS,
        Some((k, v)) => v
            .as_u64()
            .filter(|n| *n > 0)
            .ok_or_else(|| Untranslatable::invalid(k, format!("must be a positive integer, not {v}")))?,
    };
    if let Some(effort) = obj.get("reasoning_effort").and_then(Value::as_str)
        && let Some(budget) = budget_for_effort(effort)
    {
        // Anthropic counts thinking against max_tokens; raise it so the visible answer keeps
        // the budget the client asked for.
        max_tokens += budget;
        body.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": budget}));
    }
    body.insert("max_tokens".into(), max_tokens.into());
    for k in ["temperature", "top_p", "stream"] {
        if let Some(v) = obj.get(k).filter(|v| !v.is_null()) {
            body.insert(k.into(), v.clone());
        }
    }
    if let Some(v) = obj.get(super::TOP_K).filter(|v| !v.is_null()) {
        body.insert("top_k".into(), v.clone());
    }
    match obj.get("stop") {
        Some(Value::String(s)) => {
            body.insert("stop_sequences".into(), json!([s]));
        }
        Some(Value::Array(a)) if !a.is_empty() => {
            body.insert("stop_sequences".into(), Value::Array(a.clone()));
        }
        _ => {}
    }
    let user = obj.get("user").or_else(|| obj.get("safety_identifier")).and_then(Value::as_str);
    let meta_user = obj.get("metadata").and_then(|m| m.get("user_id")).and_then(Value::as_str);
    if let Some(m) = obj.get("metadata").and_then(Value::as_object)
        && let Some(k) = m.keys().find(|k| *k != "user_id")
    {
        return Err(Untranslatable::new(format!("metadata.{k}"), "Anthropic metadata carries only user_id"));
    }
    if let Some(u) = meta_user.or(user) {
        body.insert("metadata".into(), json!({ "user_id": u }));
    }
    tools(obj, &mut body)?;
    for k in ["service_tier", "prompt_cache_key", "verbosity"] {
        if obj.get(k).is_some_and(|v| !v.is_null()) {
            out.note(k);
        }
    }
    out.body = Value::Object(body);
    Ok(out)
}

/// The common case written straight to bytes: a request of only turns with string content
/// and the plain sampling fields. Returns `None` for anything else (the general [`request`]
/// handles it); for what it accepts it writes the same body [`request`] builds, without the
/// `model` (the property tests hold the two to that).
pub fn plain_request(chat: &Value) -> Option<Vec<u8>> {
    let obj = chat.as_object()?;
    if obj.contains_key("max_tokens") && obj.contains_key("max_completion_tokens") {
        return None;
    }
    let mut out = Out::with_capacity(256);
    out.raw(r#"{"model":"","messages":["#);
    let mut system: Vec<&str> = Vec::new();
    let mut last: Option<&str> = None;
    for m in obj.get("messages")?.as_array()? {
        let m = m.as_object()?;
        if m.len() != 2 {
            return None;
        }
        let role = match m.get("role")?.as_str()? {
            "system" | "developer" => {
                system.push(m.get("content")?.as_str()?);
                continue;
            }
            r @ ("user" | "assistant") => r,
            _ => return None,
        };
        let text = m.get("content")?.as_str()?;
        // As in the general path: an empty assistant turn is left out, an empty user turn kept.
        if text.is_empty() && role == "assistant" {
            continue;
        }
        if last == Some(role) {
            out.0.truncate(out.0.len() - 2);
            out.raw(",");
        } else {
            if last.is_some() {
                out.raw(",");
            }
            out.raw(r#"{"role":""#).raw(role).raw(r#"","content":["#);
        }
        out.raw(r#"{"type":"text","text":"#).str(text).raw("}]}");
        last = Some(role);
    }
    out.raw("]");
    let mut max_tokens = DEFAULT_MAX_TOKENS;
    for (k, v) in obj {
        match (k.as_str(), v) {
            ("model" | "messages", _) | ("stream_options", Value::Object(_)) | (_, Value::Null) => {}
            ("max_tokens" | "max_completion_tokens", Value::Number(n)) => max_tokens = n.as_u64().filter(|n| *n > 0)?,
            ("temperature", Value::Number(n)) if n.as_f64().is_some_and(|t| (0.0..=1.0).contains(&t)) => {
                out.raw(r#","temperature":"#).raw(&n.to_string());
            }
            ("top_p", Value::Number(n)) => {
                out.raw(r#","top_p":"#).raw(&n.to_string());
            }
            ("stream", Value::Bool(b)) => {
                out.raw(r#","stream":"#).raw(if *b { "true" } else { "false" });
            }
            _ => return None,
        }
    }
    out.raw(r#","max_tokens":"#).num(max_tokens);
    let system = system.join("\n\n");
    if !system.is_empty() {
        out.raw(r#","system":"#).str(&system);
    }
    out.raw("}");
    Some(out.0.into_bytes())
}

fn tools(obj: &Map<String, Value>, body: &mut Map<String, Value>) -> Result<(), Untranslatable> {
    let tools = function_tools(obj, "Anthropic", |i, f| {
        let name = tool_name(i, f)?;
        if f.get("strict") == Some(&Value::Bool(true)) {
            return Err(Untranslatable::new(
                format!("tools[{i}].function.strict"),
                "Anthropic does not enforce strict tool schemas",
            ));
        }
        let mut tool = json!({
            "name": name,
            "input_schema": f.get("parameters").cloned().unwrap_or_else(|| json!({"type": "object", "properties": {}})),
        });
        if let Some(d) = str_of(f, "description") {
            tool["description"] = d.into();
        }
        Ok(tool)
    })?;
    if let Some(tools) = tools {
        body.insert("tools".into(), Value::Array(tools));
    }
    let mut choice = match obj.get("tool_choice") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(match s.as_str() {
            "auto" => json!({"type": "auto"}),
            "required" => json!({"type": "any"}),
            "none" => json!({"type": "none"}),
            other => return Err(Untranslatable::new(format!("tool_choice={other}"), "unknown tool choice")),
        }),
        Some(v) => match v.pointer("/function/name").and_then(Value::as_str) {
            Some(name) => Some(json!({"type": "tool", "name": name})),
            None => return Err(Untranslatable::new("tool_choice", "only a function tool can be forced")),
        },
    };
    if obj.get("parallel_tool_calls") == Some(&Value::Bool(false)) {
        let c = choice.get_or_insert_with(|| json!({"type": "auto"}));
        c["disable_parallel_tool_use"] = Value::Bool(true);
    }
    if let Some(c) = choice {
        if !body.contains_key("tools") && c["type"] != "none" {
            return Err(Untranslatable::new("tool_choice", "a tool choice needs tools"));
        }
        body.insert("tool_choice".into(), c);
    }
    Ok(())
}

/// Chat messages → (system prompt, Anthropic messages). Consecutive messages of one role are
/// merged, since Anthropic alternates user and assistant turns, and tool results join the
/// user turn that follows the tool calls.
fn messages(list: Option<&Value>) -> Result<(String, Vec<Value>), Untranslatable> {
    let Some(list) = list.and_then(Value::as_array) else {
        return Err(Untranslatable::new("messages", "must be an array"));
    };
    let mut system = Vec::new();
    let mut out: Vec<Value> = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let role = str_of(m, "role").unwrap_or("");
        if m.get("name").is_some_and(|n| !n.is_null()) {
            return Err(Untranslatable::new(
                format!("messages[{i}].name"),
                "Anthropic messages carry no speaker names",
            ));
        }
        let (role, blocks) = match role {
            "system" | "developer" => {
                system.push(joined_text(m.get("content"), &format!("messages[{i}].content"))?);
                continue;
            }
            "user" => ("user", user_blocks(m.get("content"), i)?),
            "assistant" => ("assistant", assistant_blocks(m, i)?),
            "tool" => {
                let Some(id) = str_of(m, "tool_call_id") else {
                    return Err(Untranslatable::new(
                        format!("messages[{i}].tool_call_id"),
                        "a tool result needs its id",
                    ));
                };
                let text = joined_text(m.get("content"), &format!("messages[{i}].content"))?;
                ("user", vec![json!({"type": "tool_result", "tool_use_id": id, "content": text})])
            }
            other => {
                return Err(Untranslatable::new(
                    format!("messages[{i}].role={other}"),
                    "Anthropic knows user, assistant and system turns",
                ));
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last["role"] == role => {
                if let Some(c) = last["content"].as_array_mut() {
                    // Tool results must open their user turn.
                    let tool_result = blocks.first().is_some_and(|b| b["type"] == "tool_result");
                    if tool_result {
                        let at = c.iter().take_while(|b| b["type"] == "tool_result").count();
                        for (k, b) in blocks.into_iter().enumerate() {
                            c.insert(at + k, b);
                        }
                    } else {
                        c.extend(blocks);
                    }
                }
            }
            _ => out.push(json!({"role": role, "content": blocks})),
        }
    }
    Ok((system.join("\n\n"), out))
}

fn user_blocks(content: Option<&Value>, i: usize) -> Result<Vec<Value>, Untranslatable> {
    match content {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![json!({"type": "text", "text": s})]),
        Some(Value::Array(parts)) => {
            let mut blocks = Vec::new();
            for (j, p) in parts.iter().enumerate() {
                match str_of(p, "type") {
                    Some("text") => blocks.push(json!({"type": "text", "text": str_of(p, "text").unwrap_or("")})),
                    Some("image_url") => {
                        let url = p.pointer("/image_url/url").and_then(Value::as_str).unwrap_or("");
                        blocks.push(image_block(url, &format!("messages[{i}].content[{j}]"))?);
                    }
                    Some("file") => blocks.push(document_block(p, &format!("messages[{i}].content[{j}]"))?),
                    other => {
                        return Err(Untranslatable::new(
                            format!("messages[{i}].content[{j}].type={}", other.unwrap_or("unknown")),
                            "Anthropic accepts text and images here",
                        ));
                    }
                }
            }
            Ok(blocks)
        }
        Some(_) => Err(Untranslatable::new(format!("messages[{i}].content"), "must be a string or a list of parts")),
    }
}

/// An image part's URL (a `data:` URL or an http(s) URL) as an Anthropic image block.
pub fn image_block(url: &str, field: &str) -> Result<Value, Untranslatable> {
    if let Some(rest) = url.strip_prefix("data:") {
        let Some((meta, data)) = rest.split_once(',') else {
            return Err(Untranslatable::new(field, "a data URL needs a comma before its data"));
        };
        let Some(media_type) = meta.strip_suffix(";base64") else {
            return Err(Untranslatable::new(field, "Anthropic takes base64 data URLs only"));
        };
        return Ok(json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}));
    }
    if url.starts_with("http://") || url.starts_with("https://") {
        return Ok(json!({"type": "image", "source": {"type": "url", "url": url}}));
    }
    Err(Untranslatable::new(field, "an image must be a data: or http(s) URL"))
}

/// A PDF file part (`file.file_data` as a base64 data URL) as an Anthropic document block.
fn document_block(part: &Value, field: &str) -> Result<Value, Untranslatable> {
    let file = part.get("file").unwrap_or(&Value::Null);
    if file.get("file_id").is_some() {
        return Err(Untranslatable::new(
            format!("{field}.file.file_id"),
            "Ferroute has no file store; send the file as file_data",
        ));
    }
    let data = str_of(file, "file_data").unwrap_or("");
    let Some(pdf) = data.strip_prefix("data:application/pdf;base64,") else {
        return Err(Untranslatable::new(
            format!("{field}.file.file_data"),
            "Anthropic takes files as base64 PDF data URLs",
        ));
    };
    let mut block =
        json!({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": pdf}});
    if let Some(name) = str_of(file, "filename") {
        block["title"] = name.into();
    }
    Ok(block)
}

fn assistant_blocks(m: &Value, i: usize) -> Result<Vec<Value>, Untranslatable> {
    let mut blocks = Vec::new();
    if let Some(r) = m.get("reasoning_content").and_then(Value::as_str).filter(|r| !r.is_empty()) {
        return Err(Untranslatable::new(
            format!("messages[{i}].reasoning_content"),
            format!("Anthropic needs signed thinking blocks, not {} characters of plain reasoning", r.len()),
        ));
    }
    let text = joined_text(m.get("content"), &format!("messages[{i}].content"))?;
    if !text.is_empty() {
        blocks.push(json!({"type": "text", "text": text}));
    }
    if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
        for (j, c) in calls.iter().enumerate() {
            let (Some(id), Some(name)) = (str_of(c, "id"), c.pointer("/function/name").and_then(Value::as_str)) else {
                return Err(Untranslatable::new(
                    format!("messages[{i}].tool_calls[{j}]"),
                    "a tool call needs an id and a function name",
                ));
            };
            let args = c.pointer("/function/arguments").and_then(Value::as_str).unwrap_or("{}");
            let input: Value = serde_json::from_str(args).map_err(|e| {
                Untranslatable::new(
                    format!("messages[{i}].tool_calls[{j}].function.arguments"),
                    format!("Anthropic needs the arguments as a JSON object: {e}"),
                )
            })?;
            blocks.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
        }
    }
    if m.get("function_call").is_some_and(|f| !f.is_null()) {
        return Err(Untranslatable::new(format!("messages[{i}].function_call"), "use tool_calls"));
    }
    Ok(blocks)
}

/// Messages answer → chat completion. `created` is the Unix time in seconds. Written by
/// hand: only the strings that come from the answer are escaped.
pub fn response(body: &[u8], created: u64) -> Result<String, serde_json::Error> {
    let msg: AntMessage<'_> = serde_json::from_slice(body)?;
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls = Out::default();
    for b in &msg.content {
        match b.kind.as_ref() {
            "text" => text.push_str(b.text.as_deref().unwrap_or("")),
            "thinking" => reasoning.push_str(b.thinking.as_deref().unwrap_or("")),
            "tool_use" => {
                let args = b.input.as_ref().map_or_else(|| "{}".to_owned(), Value::to_string);
                if !calls.0.is_empty() {
                    calls.raw(",");
                }
                calls.raw(r#"{"id":"#).str(b.id.as_deref().unwrap_or(""));
                calls.raw(r#","type":"function","function":{"name":"#).str(b.name.as_deref().unwrap_or(""));
                calls.raw(r#","arguments":"#).str(&args).raw("}}");
            }
            _ => {}
        }
    }
    let u = msg.usage.unwrap_or_default();
    let prompt = u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens;
    let mut out = Out::with_capacity(256 + text.len());
    out.raw(r#"{"id":"#).str(&["chatcmpl-", msg.id.as_deref().unwrap_or("ferroute")].concat());
    out.raw(r#","object":"chat.completion","created":"#).num(created);
    out.raw(r#","model":"#).str(msg.model.as_deref().unwrap_or(""));
    out.raw(r#","choices":[{"index":0,"message":{"role":"assistant","content":"#);
    if text.is_empty() && !calls.0.is_empty() {
        out.raw("null");
    } else {
        out.str(&text);
    }
    if !calls.0.is_empty() {
        out.raw(r#","tool_calls":["#).raw(&calls.0).raw("]");
    }
    if !reasoning.is_empty() {
        out.raw(r#","reasoning_content":"#).str(&reasoning);
    }
    out.raw(r#"},"finish_reason":""#).raw(finish_reason(msg.stop_reason.as_deref().unwrap_or("end_turn")));
    out.raw(r#"","logprobs":null}],"usage":{"prompt_tokens":"#).num(prompt);
    out.raw(r#","completion_tokens":"#).num(u.output_tokens);
    out.raw(r#","total_tokens":"#).num(prompt + u.output_tokens);
    out.raw(r#","prompt_tokens_details":{"cached_tokens":"#).num(u.cache_read_input_tokens).raw("}}}");
    Ok(out.0)
}
