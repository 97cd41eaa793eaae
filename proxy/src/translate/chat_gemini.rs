//! An OpenAI Chat Completions request to a Gemini-format provider (Google's Generative Language
//! API): the request to `generateContent`'s body (the model goes in the URL, not the body), and
//! the `GenerateContentResponse` back to a chat completion.

use super::wire::{GemAnswer, Out};
use super::{
    Translated, Untranslatable, budget_for_effort, function_tools, joined_text, parse_arguments, refuse_unless, str_of,
    tool_name,
};
use serde_json::{Map, Value, json};

/// Chat request → Gemini `generateContent` body.
pub fn request(chat: &Value) -> Result<Translated, Untranslatable> {
    let Some(obj) = chat.as_object() else { return Err(Untranslatable::new("body", "must be a JSON object")) };
    if let Some(k) = obj.keys().find(|k| !super::CHAT_FIELDS.contains(&k.as_str())) {
        return Err(Untranslatable::new(k.as_str(), "the Gemini API has no such field"));
    }
    refuse_unless(obj, "n", |v| v.as_u64() == Some(1), "Ferroute asks Gemini for one candidate only")?;
    refuse_unless(
        obj,
        "logprobs",
        |v| v == &Value::Bool(false),
        "Ferroute does not translate Gemini's log probabilities",
    )?;
    refuse_unless(obj, "top_logprobs", |_| false, "Ferroute does not translate Gemini's log probabilities")?;
    refuse_unless(obj, "logit_bias", |v| v.as_object().is_some_and(Map::is_empty), "Gemini has no logit bias")?;
    refuse_unless(obj, "store", |v| v == &Value::Bool(false), "Ferroute does not store completions")?;
    let mut out = Translated { body: json!({}), dropped: Vec::new() };
    let mut body = Map::new();
    let (system, contents) = contents(obj.get("messages"))?;
    if !system.is_empty() {
        body.insert("systemInstruction".into(), json!({"parts": [{"text": system}]}));
    }
    body.insert("contents".into(), Value::Array(contents));
    tools(obj, &mut body)?;
    let mut config = Map::new();
    let limit = ["max_completion_tokens", "max_tokens"]
        .into_iter()
        .find_map(|k| obj.get(k).filter(|v| !v.is_null()).map(|v| (k, v)));
    if let Some((k, v)) = limit {
        let n = v
            .as_u64()
            .filter(|n| *n > 0)
            .ok_or_else(|| Untranslatable::invalid(k, format!("must be a positive integer, not {v}")))?;
        config.insert("maxOutputTokens".into(), n.into());
    }
    for (from, to) in [
        ("temperature", "temperature"),
        ("top_p", "topP"),
        (super::TOP_K, "topK"),
        ("presence_penalty", "presencePenalty"),
        ("frequency_penalty", "frequencyPenalty"),
        ("seed", "seed"),
    ] {
        if let Some(v) = obj.get(from).filter(|v| !v.is_null()) {
            config.insert(to.into(), v.clone());
        }
    }
    match obj.get("stop") {
        Some(Value::String(s)) => {
            config.insert("stopSequences".into(), json!([s]));
        }
        Some(Value::Array(a)) if !a.is_empty() => {
            config.insert("stopSequences".into(), Value::Array(a.clone()));
        }
        _ => {}
    }
    if let Some(f) = obj.get("response_format").filter(|v| !v.is_null()) {
        match str_of(f, "type") {
            Some("text") => {}
            Some("json_object") => {
                config.insert("responseMimeType".into(), "application/json".into());
            }
            Some("json_schema") => {
                config.insert("responseMimeType".into(), "application/json".into());
                let schema = f.pointer("/json_schema/schema").cloned().unwrap_or_else(|| json!({}));
                config.insert("responseJsonSchema".into(), schema);
            }
            other => {
                return Err(Untranslatable::new(
                    format!("response_format.type={}", other.unwrap_or("missing")),
                    "unknown response format",
                ));
            }
        }
    }
    if let Some(effort) = obj.get("reasoning_effort").and_then(Value::as_str) {
        let budget = budget_for_effort(effort).unwrap_or(0);
        config.insert("thinkingConfig".into(), json!({"thinkingBudget": budget}));
    }
    if !config.is_empty() {
        body.insert("generationConfig".into(), Value::Object(config));
    }
    for k in [
        "user",
        "safety_identifier",
        "metadata",
        "service_tier",
        "prompt_cache_key",
        "verbosity",
        "parallel_tool_calls",
    ] {
        if obj.get(k).is_some_and(|v| !v.is_null()) {
            out.note(k);
        }
    }
    out.body = Value::Object(body);
    Ok(out)
}

/// The system text and the `contents` of chat `messages`: user and assistant turns become
/// `user` and `model` contents, tool results `functionResponse` parts of a user turn (named by
/// the call they answer), and turns of one role in a row are merged.
fn contents(messages: Option<&Value>) -> Result<(String, Vec<Value>), Untranslatable> {
    let Some(list) = messages.and_then(Value::as_array) else {
        return Err(Untranslatable::invalid("messages", "must be an array"));
    };
    let mut system = Vec::new();
    let mut out: Vec<Value> = Vec::new();
    // Tool call id → function name, for the results that answer them.
    let mut names: Vec<(String, String)> = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let (role, parts) = match str_of(m, "role") {
            Some("system" | "developer") => {
                system.push(joined_text(m.get("content"), &format!("messages[{i}].content"))?);
                continue;
            }
            Some("user") => ("user", user_parts(m.get("content"), i)?),
            Some("assistant") => ("model", model_parts(m, i, &mut names)?),
            Some("tool") => {
                let id = str_of(m, "tool_call_id").unwrap_or("");
                let Some(name) = names.iter().find(|(c, _)| c == id).map(|(_, n)| n.clone()) else {
                    return Err(Untranslatable::invalid(
                        format!("messages[{i}].tool_call_id"),
                        format!("{id:?} answers no tool call of an earlier assistant turn"),
                    ));
                };
                let text = joined_text(m.get("content"), &format!("messages[{i}].content"))?;
                // Ids are left out: Gemini pairs results with calls by name and order, and an id it
                // did not make is not one it knows.
                ("user", vec![json!({"functionResponse": {"name": name, "response": response_of(&text)}})])
            }
            other => {
                return Err(Untranslatable::new(
                    format!("messages[{i}].role={}", other.unwrap_or("missing")),
                    "Gemini has user and model turns only",
                ));
            }
        };
        if parts.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last["role"] == role => {
                if let Some(p) = last["parts"].as_array_mut() {
                    p.extend(parts);
                }
            }
            _ => out.push(json!({"role": role, "parts": parts})),
        }
    }
    Ok((system.join("\n\n"), out))
}

/// A tool result as a `functionResponse.response`: a JSON object as it is, anything else under
/// `result` (Gemini wants an object).
pub fn response_of(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({ "result": text }),
    }
}

fn user_parts(content: Option<&Value>, i: usize) -> Result<Vec<Value>, Untranslatable> {
    match content {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![json!({"text": s})]),
        Some(Value::Array(parts)) => {
            let mut out = Vec::new();
            for (j, p) in parts.iter().enumerate() {
                let field = format!("messages[{i}].content[{j}]");
                match str_of(p, "type") {
                    Some("text") => out.push(json!({"text": str_of(p, "text").unwrap_or("")})),
                    Some("image_url") => {
                        let url = p.pointer("/image_url/url").and_then(Value::as_str).unwrap_or("");
                        out.push(inline_data(url, &field)?);
                    }
                    Some("file") => {
                        let data = p.pointer("/file/file_data").and_then(Value::as_str).unwrap_or("");
                        out.push(inline_data(data, &format!("{field}.file.file_data"))?);
                    }
                    other => {
                        return Err(Untranslatable::new(
                            format!("{field}.type={}", other.unwrap_or("unknown")),
                            "Gemini accepts text, images and files here",
                        ));
                    }
                }
            }
            Ok(out)
        }
        Some(_) => Err(Untranslatable::new(format!("messages[{i}].content"), "must be a string or a list of parts")),
    }
}

/// A base64 `data:` URL as an `inlineData` part (Gemini fetches no URLs given this way).
pub fn inline_data(url: &str, field: &str) -> Result<Value, Untranslatable> {
    let parsed = url.strip_prefix("data:").and_then(|rest| rest.split_once(','));
    match parsed.and_then(|(meta, data)| meta.strip_suffix(";base64").map(|m| (m, data))) {
        Some((mime, data)) => Ok(json!({"inlineData": {"mimeType": mime, "data": data}})),
        None => Err(Untranslatable::new(field, "Gemini takes images and files inline: send a base64 data: URL")),
    }
}

fn model_parts(m: &Value, i: usize, names: &mut Vec<(String, String)>) -> Result<Vec<Value>, Untranslatable> {
    let mut parts = Vec::new();
    let text = joined_text(m.get("content"), &format!("messages[{i}].content"))?;
    if !text.is_empty() {
        parts.push(json!({"text": text}));
    }
    for (j, c) in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let Some(name) = c.pointer("/function/name").and_then(Value::as_str) else {
            return Err(Untranslatable::invalid(format!("messages[{i}].tool_calls[{j}].function.name"), "missing"));
        };
        let id = str_of(c, "id").unwrap_or("").to_owned();
        let args = parse_arguments(c.pointer("/function/arguments").and_then(Value::as_str).unwrap_or(""));
        names.push((id.clone(), name.to_owned()));
        parts.push(json!({"functionCall": {"name": name, "args": args}}));
    }
    Ok(parts)
}

fn tools(obj: &Map<String, Value>, body: &mut Map<String, Value>) -> Result<(), Untranslatable> {
    let declarations = function_tools(obj, "Gemini", |i, f| {
        let mut d = json!({"name": tool_name(i, f)?});
        if let Some(desc) = str_of(f, "description") {
            d["description"] = desc.into();
        }
        if let Some(p) = f.get("parameters").filter(|p| !p.is_null()) {
            d["parametersJsonSchema"] = p.clone();
        }
        Ok(d)
    })?;
    if let Some(declarations) = declarations {
        body.insert("tools".into(), json!([{ "functionDeclarations": declarations }]));
    }
    let config = match obj.get("tool_choice") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => Some(json!({"mode": "AUTO"})),
            "none" => Some(json!({"mode": "NONE"})),
            "required" => Some(json!({"mode": "ANY"})),
            other => return Err(Untranslatable::invalid("tool_choice", format!("unknown choice {other:?}"))),
        },
        Some(c) => match c.pointer("/function/name").and_then(Value::as_str) {
            Some(name) => Some(json!({"mode": "ANY", "allowedFunctionNames": [name]})),
            None => return Err(Untranslatable::new("tool_choice", "Gemini can be made to call a named function only")),
        },
    };
    if let Some(c) = config {
        body.insert("toolConfig".into(), json!({ "functionCallingConfig": c }));
    }
    Ok(())
}

/// Chat `finish_reason` for a Gemini `finishReason` (`tool_calls` when the answer calls one).
pub fn finish_reason(reason: &str, calls: bool) -> &'static str {
    match reason {
        "MAX_TOKENS" => "length",
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" | "LANGUAGE" => {
            "content_filter"
        }
        _ if calls => "tool_calls",
        _ => "stop",
    }
}

/// A chat `usage` object from Gemini's `usageMetadata` (thinking counts as completion, as
/// OpenAI counts reasoning).
pub fn chat_usage(u: &Value) -> Value {
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    let prompt = n("promptTokenCount") + n("toolUsePromptTokenCount");
    let thoughts = n("thoughtsTokenCount");
    let completion = n("candidatesTokenCount") + thoughts;
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": n("cachedContentTokenCount")},
        "completion_tokens_details": {"reasoning_tokens": thoughts},
    })
}

/// The id of the `k`-th function call of an answer that gave it none (stable across a stream).
pub fn call_id(given: Option<&str>, k: usize) -> String {
    match given {
        Some(id) if !id.is_empty() => id.to_owned(),
        _ => format!("call_gemini_{k}"),
    }
}

/// Gemini answer → chat completion (read typed, written by hand).
pub fn response(body: &[u8], created: u64, model: &str) -> Result<Vec<u8>, serde_json::Error> {
    if !body.trim_ascii_start().starts_with(b"{") {
        return Err(serde::de::Error::custom("a Gemini answer is a JSON object"));
    }
    let v: GemAnswer<'_> = serde_json::from_slice(body)?;
    let candidate = v.candidates.first();
    let parts = candidate.and_then(|c| c.content.as_ref()).map(|c| c.parts.as_slice()).unwrap_or_default();
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls = Out::with_capacity(64);
    let mut n = 0;
    for p in parts {
        if let Some(f) = &p.function_call {
            let args = f.get("args").map_or_else(|| "{}".to_owned(), Value::to_string);
            calls.raw(if n == 0 { r#"[{"id":"# } else { r#",{"id":"# }).str(&call_id(str_of(f, "id"), n));
            calls.raw(r#","type":"function","function":{"name":"#).str(str_of(f, "name").unwrap_or(""));
            calls.raw(r#","arguments":"#).str(&args).raw("}}");
            n += 1;
        } else if let Some(t) = p.text.as_deref() {
            if p.thought == Some(true) { reasoning.push_str(t) } else { text.push_str(t) }
        }
    }
    let blocked = v.prompt_feedback.as_ref().and_then(|f| str_of(f, "blockReason"));
    let reason = candidate.and_then(|c| c.finish_reason.as_deref()).or(blocked.map(|_| "SAFETY")).unwrap_or("STOP");
    let finish = finish_reason(reason, n > 0);
    let mut o = Out::with_capacity(body.len() + 256);
    o.raw(r#"{"id":"chatcmpl-"#);
    // The id's quoted form, without its opening quote (it follows the prefix).
    let mut id = Out::default();
    id.str(v.response_id.as_deref().unwrap_or("gemini"));
    o.raw(&id.0[1..]).raw(r#","object":"chat.completion","created":"#).num(created);
    o.raw(r#","model":"#).str(v.model_version.as_deref().unwrap_or(model));
    o.raw(r#","choices":[{"index":0,"message":{"role":"assistant","content":"#);
    match (text.is_empty(), n > 0) {
        (true, true) => o.raw("null"),
        _ => o.str(&text),
    };
    if n > 0 {
        o.raw(r#","tool_calls":"#).raw(&calls.0).raw("]");
    }
    if !reasoning.is_empty() {
        o.raw(r#","reasoning_content":"#).str(&reasoning);
    }
    if finish == "content_filter" {
        o.raw(r#","refusal":"#).str(&format!("Gemini blocked the answer ({})", blocked.unwrap_or(reason)));
    }
    o.raw(r#"},"finish_reason":"#).str(finish).raw("}]");
    if let Some(u) = &v.usage {
        o.raw(r#","usage":"#).raw(&chat_usage(u).to_string());
    }
    o.raw("}");
    Ok(o.0.into_bytes())
}
