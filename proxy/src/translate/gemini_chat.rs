//! Google's Generative Language API as a client API on top of chat: a `generateContent`
//! request becomes a chat request (which may in turn go to any provider format), and chat
//! answers become `GenerateContentResponse` objects. Field names are read in the API's JSON
//! spelling (`systemInstruction`) and in its proto spelling (`system_instruction`), as the real
//! API accepts both.

use super::gemini_names::{json_schema, normalised, proto_spelled};
use super::wire::{ChatCompletion, ChatUsage, Out};
use super::{Translated, Untranslatable, effort_for_budget, str_of};
use serde_json::{Map, Value, json};

/// Request fields that carry over or are handled here; any other field is refused.
const KNOWN: &[&str] = &[
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "generationConfig",
    "safetySettings",
    "cachedContent",
    "labels",
    "model",
];

/// `generationConfig` fields handled here; any other is refused.
const CONFIG: &[&str] = &[
    "temperature",
    "topP",
    "topK",
    "maxOutputTokens",
    "stopSequences",
    "candidateCount",
    "responseMimeType",
    "responseSchema",
    "responseJsonSchema",
    "thinkingConfig",
    "presencePenalty",
    "frequencyPenalty",
    "seed",
];

/// Gemini request → chat request for `model` (the model is in the URL); `stream` from the
/// method called.
pub fn request(body: &Value, model: &str, stream: bool) -> Result<Translated, Untranslatable> {
    // Most clients send the JSON spelling: copied only when some key is in the proto one.
    let owned;
    let body = if proto_spelled(body, false) {
        owned = normalised(body, false);
        &owned
    } else {
        body
    };
    let Some(obj) = body.as_object() else { return Err(Untranslatable::invalid("body", "must be a JSON object")) };
    if let Some(k) = obj.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(Untranslatable::new(k.as_str(), "this Gemini API field is not supported by Ferroute"));
    }
    if obj.get("cachedContent").is_some_and(|v| !v.is_null()) {
        return Err(Untranslatable::stored(
            "cachedContent",
            "Ferroute keeps no cached contents; send the whole conversation in `contents`",
        ));
    }
    let mut out = Translated { body: json!({}), dropped: Vec::new() };
    let mut chat = Map::new();
    chat.insert("model".into(), model.into());
    let mut messages = Vec::new();
    if let Some(s) = obj.get("systemInstruction").filter(|s| !s.is_null()) {
        let text = parts_text(s.get("parts"), "systemInstruction.parts")?;
        if !text.is_empty() {
            messages.push(json!({"role": "system", "content": text}));
        }
    }
    let Some(contents) = obj.get("contents").and_then(Value::as_array) else {
        return Err(Untranslatable::invalid("contents", "must be a list of contents"));
    };
    let mut calls = Calls::default();
    for (i, c) in contents.iter().enumerate() {
        content(c, i, &mut calls, &mut messages, &mut out)?;
    }
    chat.insert("messages".into(), Value::Array(messages));
    tools(obj, &mut chat)?;
    if let Some(g) = obj.get("generationConfig").filter(|g| !g.is_null()) {
        generation(g, &mut chat, &mut out)?;
    }
    if stream {
        chat.insert("stream".into(), Value::Bool(true));
        chat.insert("stream_options".into(), json!({"include_usage": true}));
    }
    for k in ["safetySettings", "labels"] {
        if obj.get(k).is_some_and(|v| !v.is_null() && v != &json!([]) && v != &json!({})) {
            out.note(k);
        }
    }
    out.body = Value::Object(chat);
    Ok(out)
}

/// Function calls seen so far, for results that name their call by function name only.
#[derive(Default)]
struct Calls {
    /// (id, name, answered)
    seen: Vec<(String, String, bool)>,
}

impl Calls {
    fn call(&mut self, given: Option<&str>, name: &str) -> String {
        let id = super::chat_gemini::call_id(given, self.seen.len());
        self.seen.push((id.clone(), name.to_owned(), false));
        id
    }

    /// The call a result answers: its own id, or the earliest unanswered call of that name.
    fn answer(&mut self, given: Option<&str>, name: &str) -> Option<String> {
        let slot = match given.filter(|g| !g.is_empty()) {
            Some(g) => self.seen.iter_mut().find(|(id, _, _)| id == g),
            None => self.seen.iter_mut().find(|(_, n, done)| n == name && !done),
        }?;
        slot.2 = true;
        Some(slot.0.clone())
    }
}

fn parts_text(parts: Option<&Value>, field: &str) -> Result<String, Untranslatable> {
    let mut text = String::new();
    for (j, p) in parts.and_then(Value::as_array).into_iter().flatten().enumerate() {
        match str_of(p, "text") {
            Some(t) => text.push_str(t),
            None => return Err(Untranslatable::new(format!("{field}[{j}]"), "only text can be carried here")),
        }
    }
    Ok(text)
}

fn content(
    c: &Value,
    i: usize,
    calls: &mut Calls,
    messages: &mut Vec<Value>,
    out: &mut Translated,
) -> Result<(), Untranslatable> {
    let role = str_of(c, "role").unwrap_or("user");
    let model = match role {
        "user" | "function" | "tool" => false,
        "model" => true,
        other => {
            return Err(Untranslatable::invalid(
                format!("contents[{i}].role"),
                format!("{other:?} is not user or model"),
            ));
        }
    };
    let mut text = String::new();
    let mut user_parts: Vec<Value> = Vec::new();
    let mut tool_calls = Vec::new();
    let mut results = Vec::new();
    for (j, p) in c.get("parts").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let field = format!("contents[{i}].parts[{j}]");
        if p.get("thoughtSignature").is_some() {
            out.note("thoughtSignature");
        }
        if p.get("thought") == Some(&Value::Bool(true)) {
            // A model's earlier thinking is not input any other format takes.
            out.note("thought");
            continue;
        }
        if let Some(t) = str_of(p, "text") {
            if model {
                text.push_str(t);
            } else {
                user_parts.push(json!({"type": "text", "text": t}));
            }
        } else if let Some(d) = p.get("inlineData") {
            if model {
                return Err(Untranslatable::new(
                    format!("{field}.inlineData"),
                    "a model turn carries text and calls only",
                ));
            }
            let mime = str_of(d, "mimeType").unwrap_or("application/octet-stream");
            let url = format!("data:{mime};base64,{}", str_of(d, "data").unwrap_or(""));
            if mime == "application/pdf" {
                user_parts.push(json!({"type": "file", "file": {"file_data": url}}));
            } else if mime.starts_with("image/") {
                user_parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
            } else {
                return Err(Untranslatable::new(format!("{field}.inlineData.mimeType={mime}"), "images and PDFs only"));
            }
        } else if let Some(f) = p.get("functionCall") {
            let name = str_of(f, "name").unwrap_or("");
            let id = calls.call(str_of(f, "id"), name);
            let args = f.get("args").cloned().unwrap_or_else(|| json!({}));
            tool_calls
                .push(json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}));
        } else if let Some(r) = p.get("functionResponse") {
            let name = str_of(r, "name").unwrap_or("");
            let Some(id) = calls.answer(str_of(r, "id"), name) else {
                return Err(Untranslatable::invalid(
                    format!("{field}.functionResponse"),
                    format!("it answers no earlier functionCall of {name:?}"),
                ));
            };
            let response = r.get("response").cloned().unwrap_or_else(|| json!({}));
            results.push(json!({"role": "tool", "tool_call_id": id, "content": result_text(&response)}));
        } else {
            let kind = p.as_object().and_then(|m| m.keys().next().cloned()).unwrap_or_else(|| "empty".into());
            return Err(Untranslatable::new(format!("{field}.{kind}"), "this part cannot be translated"));
        }
    }
    if model {
        if !text.is_empty() || !tool_calls.is_empty() {
            let mut m =
                json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { text.into() }});
            if !tool_calls.is_empty() {
                m["tool_calls"] = Value::Array(tool_calls);
            }
            messages.push(m);
        }
        return Ok(());
    }
    messages.extend(results);
    if !user_parts.is_empty() {
        let all_text = user_parts.iter().all(|p| p["type"] == "text");
        let content = if all_text {
            Value::String(user_parts.iter().filter_map(|p| p["text"].as_str()).collect::<String>())
        } else {
            Value::Array(user_parts)
        };
        messages.push(json!({"role": "user", "content": content}));
    }
    Ok(())
}

/// A `functionResponse.response` as a tool result's text: `{"result": text}` (or `output`)
/// back to that text, any other object as JSON.
fn result_text(r: &Value) -> String {
    let single = r.as_object().filter(|m| m.len() == 1);
    match single.and_then(|m| m.get("result").or_else(|| m.get("output"))) {
        Some(Value::String(s)) => s.clone(),
        _ => r.to_string(),
    }
}

fn tools(obj: &Map<String, Value>, chat: &mut Map<String, Value>) -> Result<(), Untranslatable> {
    let mut out = Vec::new();
    for (i, t) in obj.get("tools").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let Some(m) = t.as_object() else {
            return Err(Untranslatable::invalid(format!("tools[{i}]"), "must be an object"));
        };
        if let Some(k) = m.keys().find(|k| *k != "functionDeclarations") {
            return Err(Untranslatable::new(format!("tools[{i}].{k}"), "only function declarations can be translated"));
        }
        for (j, d) in m.get("functionDeclarations").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let Some(name) = str_of(d, "name") else {
                return Err(Untranslatable::invalid(format!("tools[{i}].functionDeclarations[{j}].name"), "missing"));
            };
            let params = match (d.get("parametersJsonSchema"), d.get("parameters")) {
                (Some(p), _) if !p.is_null() => p.clone(),
                (_, Some(p)) if !p.is_null() => json_schema(p),
                _ => json!({"type": "object", "properties": {}}),
            };
            let mut f = json!({"name": name, "parameters": params});
            if let Some(desc) = str_of(d, "description") {
                f["description"] = desc.into();
            }
            out.push(json!({"type": "function", "function": f}));
        }
    }
    if !out.is_empty() {
        chat.insert("tools".into(), Value::Array(out));
    }
    let Some(c) = obj.get("toolConfig").and_then(|t| t.get("functionCallingConfig")).filter(|c| !c.is_null()) else {
        return Ok(());
    };
    let allowed: Vec<&str> = c
        .get("allowedFunctionNames")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let choice = match (str_of(c, "mode").unwrap_or("AUTO"), allowed.as_slice()) {
        ("AUTO" | "MODE_UNSPECIFIED" | "VALIDATED", _) => json!("auto"),
        ("NONE", _) => json!("none"),
        ("ANY", []) => json!("required"),
        ("ANY", [one]) => json!({"type": "function", "function": {"name": one}}),
        ("ANY", _) => {
            return Err(Untranslatable::new(
                "toolConfig.functionCallingConfig.allowedFunctionNames",
                "other formats can force one named function or any, not a subset",
            ));
        }
        (other, _) => {
            return Err(Untranslatable::invalid(
                "toolConfig.functionCallingConfig.mode",
                format!("unknown mode {other:?}"),
            ));
        }
    };
    chat.insert("tool_choice".into(), choice);
    Ok(())
}

fn generation(g: &Value, chat: &mut Map<String, Value>, out: &mut Translated) -> Result<(), Untranslatable> {
    let Some(g) = g.as_object() else { return Err(Untranslatable::invalid("generationConfig", "must be an object")) };
    if let Some(k) = g.keys().find(|k| !CONFIG.contains(&k.as_str())) {
        return Err(Untranslatable::new(format!("generationConfig.{k}"), "Ferroute cannot translate this setting"));
    }
    match g.get("candidateCount") {
        None | Some(Value::Null) => {}
        Some(v) if v.as_u64() == Some(1) => {}
        Some(_) => {
            return Err(Untranslatable::new("generationConfig.candidateCount", "Ferroute asks for one candidate only"));
        }
    }
    for (from, to) in [
        ("temperature", "temperature"),
        ("topP", "top_p"),
        ("maxOutputTokens", "max_tokens"),
        ("presencePenalty", "presence_penalty"),
        ("frequencyPenalty", "frequency_penalty"),
        ("seed", "seed"),
    ] {
        if let Some(v) = g.get(from).filter(|v| !v.is_null()) {
            chat.insert(to.into(), v.clone());
        }
    }
    // Carried to the providers that have it (Anthropic's `top_k`); dropped, and named, for the
    // others where the request is made for them.
    if let Some(k) = g.get("topK").filter(|v| !v.is_null()) {
        chat.insert(super::TOP_K.into(), k.clone());
    }
    if let Some(s) = g.get("stopSequences").and_then(Value::as_array).filter(|s| !s.is_empty()) {
        chat.insert("stop".into(), Value::Array(s.clone()));
    }
    let schema = match (g.get("responseJsonSchema"), g.get("responseSchema")) {
        (Some(s), _) if !s.is_null() => Some(s.clone()),
        (_, Some(s)) if !s.is_null() => Some(json_schema(s)),
        _ => None,
    };
    match (g.get("responseMimeType").and_then(Value::as_str), schema) {
        (None | Some("text/plain"), None) => {}
        (Some("application/json"), None) => {
            chat.insert("response_format".into(), json!({"type": "json_object"}));
        }
        (Some("application/json"), Some(s)) => {
            chat.insert(
                "response_format".into(),
                json!({"type": "json_schema", "json_schema": {"name": "response", "schema": s}}),
            );
        }
        (m, _) => {
            return Err(Untranslatable::new(
                format!("generationConfig.responseMimeType={}", m.unwrap_or("missing")),
                "a response schema needs application/json; other types cannot be translated",
            ));
        }
    }
    if let Some(t) = g.get("thinkingConfig").filter(|t| !t.is_null()) {
        if let Some(b) = t.get("thinkingBudget").and_then(Value::as_i64) {
            let effort = match b {
                0 => "none",
                b if b < 0 => "medium",
                b => effort_for_budget(b as u64),
            };
            chat.insert("reasoning_effort".into(), effort.into());
        } else if let Some(level) = str_of(t, "thinkingLevel") {
            chat.insert("reasoning_effort".into(), level.to_lowercase().into());
        }
        if t.get("includeThoughts").is_some_and(|v| !v.is_null()) {
            out.note("generationConfig.thinkingConfig.includeThoughts");
        }
    }
    Ok(())
}

/// Gemini `finishReason` for a chat `finish_reason`.
pub fn finish_reason(chat: &str) -> &'static str {
    match chat {
        "length" => "MAX_TOKENS",
        "content_filter" => "SAFETY",
        _ => "STOP",
    }
}

/// Gemini `usageMetadata` from chat usage.
pub fn usage_metadata(u: &ChatUsage) -> Value {
    let reasoning = u.completion_tokens_details.as_ref().map_or(0, |d| d.reasoning_tokens);
    let mut m = json!({
        "promptTokenCount": u.prompt_tokens,
        "candidatesTokenCount": u.completion_tokens.saturating_sub(reasoning),
        "totalTokenCount": u.prompt_tokens + u.completion_tokens,
    });
    if reasoning > 0 {
        m["thoughtsTokenCount"] = reasoning.into();
    }
    if let Some(c) = u.prompt_tokens_details.as_ref().map(|d| d.cached_tokens).filter(|c| *c > 0) {
        m["cachedContentTokenCount"] = c.into();
    }
    m
}

/// A chat completion (its bytes) → Gemini answer, read typed and written by hand.
pub fn response(chat: &[u8], model: &str) -> Result<Vec<u8>, serde_json::Error> {
    let c: ChatCompletion<'_> = serde_json::from_slice(chat)?;
    let choice = c.choices.first();
    let m = choice.and_then(|c| c.message.as_ref());
    let mut parts = Out::with_capacity(chat.len() + 64);
    let part = |o: &mut Out| {
        o.raw(if o.0.is_empty() { "{" } else { ",{" });
    };
    if let Some(r) = m.and_then(|m| m.reasoning_content.as_deref()).filter(|r| !r.is_empty()) {
        part(&mut parts);
        parts.raw(r#""text":"#).str(r).raw(r#","thought":true}"#);
    }
    for t in [m.and_then(|m| m.content.as_deref()), m.and_then(|m| m.refusal.as_deref())].into_iter().flatten() {
        if !t.is_empty() {
            part(&mut parts);
            parts.raw(r#""text":"#).str(t).raw("}");
        }
    }
    for call in m.and_then(|m| m.tool_calls.as_ref()).into_iter().flatten() {
        let f = call.function.as_ref();
        let args = super::parse_arguments(f.and_then(|f| f.arguments.as_deref()).unwrap_or(""));
        part(&mut parts);
        parts.raw(r#""functionCall":{"id":"#).str(call.id.as_deref().unwrap_or(""));
        parts.raw(r#","name":"#).str(f.and_then(|f| f.name.as_deref()).unwrap_or(""));
        parts.raw(r#","args":"#).raw(&args.to_string()).raw("}}");
    }
    let finish = finish_reason(choice.and_then(|c| c.finish_reason.as_deref()).unwrap_or("stop"));
    let mut o = Out::with_capacity(parts.0.len() + 256);
    o.raw(r#"{"candidates":[{"content":{"role":"model","parts":["#).raw(&parts.0);
    o.raw(r#"]},"finishReason":"#).str(finish).raw(r#","index":0}],"modelVersion":"#);
    o.str(c.model.as_deref().unwrap_or(model)).raw(r#","responseId":"#).str(c.id.as_deref().unwrap_or(""));
    if let Some(u) = &c.usage {
        o.raw(r#","usageMetadata":"#).raw(&usage_metadata(u).to_string());
    }
    o.raw("}");
    Ok(o.0.into_bytes())
}
