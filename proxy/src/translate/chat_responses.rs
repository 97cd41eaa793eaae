//! An OpenAI Chat Completions request to a provider that speaks the Responses API (OpenAI's
//! newest models, ChatGPT's Codex backend): the request to `POST /responses`, the Response
//! object back to a chat completion, and the Responses event stream to chat chunks. Ferroute
//! keeps no responses, so it asks the provider not to store them either (`store: false`).

use super::stream::{ChunkPrefix, Event, Translate, chat_error};
use super::wire::{Out, Str};
use super::{Translated, Untranslatable, function_tools, joined_text, refuse_unless, str_of};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// Chat request → Responses request.
pub fn request(chat: &Value) -> Result<Translated, Untranslatable> {
    let Some(obj) = chat.as_object() else { return Err(Untranslatable::new("body", "must be a JSON object")) };
    if let Some(k) = obj.keys().find(|k| !super::CHAT_FIELDS.contains(&k.as_str())) {
        return Err(Untranslatable::new(k.as_str(), "the Responses API has no such field"));
    }
    refuse_unless(obj, "n", |v| v.as_u64() == Some(1), "the Responses API returns one answer per request")?;
    for k in ["presence_penalty", "frequency_penalty"] {
        refuse_unless(obj, k, |v| v.as_f64() == Some(0.0), "the Responses API has no sampling penalties")?;
    }
    refuse_unless(obj, "logprobs", |v| v == &Value::Bool(false), "Ferroute does not translate log probabilities")?;
    refuse_unless(obj, "top_logprobs", |_| false, "Ferroute does not translate log probabilities")?;
    refuse_unless(
        obj,
        "logit_bias",
        |v| v.as_object().is_some_and(Map::is_empty),
        "the Responses API has no logit bias",
    )?;
    refuse_unless(obj, "seed", |_| false, "the Responses API has no sampling seed")?;
    refuse_unless(obj, "stop", |v| v.as_array().is_some_and(Vec::is_empty), "the Responses API has no stop sequences")?;
    refuse_unless(obj, "store", |v| v == &Value::Bool(false), "Ferroute does not store completions")?;
    let mut out = Translated { body: json!({}), dropped: Vec::new() };
    if obj.get(super::TOP_K).is_some_and(|v| !v.is_null()) {
        out.note("generationConfig.topK");
    }
    let mut body = Map::new();
    let (instructions, input) = input(obj.get("messages"))?;
    if !instructions.is_empty() {
        body.insert("instructions".into(), instructions.into());
    }
    body.insert("input".into(), Value::Array(input));
    body.insert("store".into(), Value::Bool(false));
    if let Some(n) = ["max_completion_tokens", "max_tokens"].iter().find_map(|k| obj.get(*k).filter(|v| !v.is_null())) {
        body.insert("max_output_tokens".into(), n.clone());
    }
    for k in ["temperature", "top_p", "parallel_tool_calls", "service_tier", "prompt_cache_key", "metadata"] {
        if let Some(v) = obj.get(k).filter(|v| !v.is_null()) {
            body.insert(k.into(), v.clone());
        }
    }
    if let Some(u) = obj.get("safety_identifier").or_else(|| obj.get("user")).filter(|v| !v.is_null()) {
        body.insert("safety_identifier".into(), u.clone());
    }
    if obj.get("stream") == Some(&Value::Bool(true)) {
        body.insert("stream".into(), Value::Bool(true));
    }
    if let Some(e) = obj.get("reasoning_effort").filter(|v| !v.is_null()) {
        body.insert("reasoning".into(), json!({ "effort": e }));
    }
    let mut text = Map::new();
    if let Some(v) = obj.get("verbosity").filter(|v| !v.is_null()) {
        text.insert("verbosity".into(), v.clone());
    }
    if let Some(f) = obj.get("response_format").filter(|v| !v.is_null()) {
        match str_of(f, "type") {
            Some("text") => {}
            Some("json_object") => {
                text.insert("format".into(), json!({"type": "json_object"}));
            }
            Some("json_schema") => {
                let s = f.get("json_schema").cloned().unwrap_or_else(|| json!({}));
                let mut format = json!({"type": "json_schema", "name": str_of(&s, "name").unwrap_or("response"),
                    "schema": s.get("schema").cloned().unwrap_or_else(|| json!({}))});
                for k in ["strict", "description"] {
                    if let Some(v) = s.get(k) {
                        format[k] = v.clone();
                    }
                }
                text.insert("format".into(), format);
            }
            other => {
                return Err(Untranslatable::new(
                    format!("response_format.type={}", other.unwrap_or("missing")),
                    "unknown response format",
                ));
            }
        }
    }
    if !text.is_empty() {
        body.insert("text".into(), Value::Object(text));
    }
    tools(obj, &mut body)?;
    out.body = Value::Object(body);
    Ok(out)
}

/// The instructions (system turns) and the input items of chat `messages`.
fn input(messages: Option<&Value>) -> Result<(String, Vec<Value>), Untranslatable> {
    let Some(list) = messages.and_then(Value::as_array) else {
        return Err(Untranslatable::invalid("messages", "must be an array"));
    };
    let mut system = Vec::new();
    let mut items = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let field = format!("messages[{i}].content");
        match str_of(m, "role") {
            Some("system" | "developer") => system.push(joined_text(m.get("content"), &field)?),
            Some("user") => items.push(json!({"role": "user", "content": user_content(m.get("content"), i)?})),
            Some("assistant") => {
                let text = joined_text(m.get("content"), &field)?;
                if !text.is_empty() {
                    items.push(json!({"role": "assistant", "content": [{"type": "output_text", "text": text}]}));
                }
                for c in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                    items.push(json!({"type": "function_call", "call_id": str_of(c, "id").unwrap_or(""),
                        "name": c.pointer("/function/name").and_then(Value::as_str).unwrap_or(""),
                        "arguments": c.pointer("/function/arguments").and_then(Value::as_str).unwrap_or("{}")}));
                }
            }
            Some("tool") => items.push(json!({"type": "function_call_output",
                "call_id": str_of(m, "tool_call_id").unwrap_or(""), "output": joined_text(m.get("content"), &field)?})),
            other => {
                return Err(Untranslatable::new(
                    format!("messages[{i}].role={}", other.unwrap_or("missing")),
                    "unknown role",
                ));
            }
        }
    }
    Ok((system.join("\n\n"), items))
}

fn user_content(content: Option<&Value>, i: usize) -> Result<Value, Untranslatable> {
    match content {
        None | Some(Value::Null) => Ok(json!([])),
        Some(Value::String(s)) => Ok(json!([{"type": "input_text", "text": s}])),
        Some(Value::Array(parts)) => {
            let mut out = Vec::new();
            for (j, p) in parts.iter().enumerate() {
                match str_of(p, "type") {
                    Some("text") => out.push(json!({"type": "input_text", "text": str_of(p, "text").unwrap_or("")})),
                    Some("image_url") => out.push(json!({"type": "input_image",
                        "image_url": p.pointer("/image_url/url").and_then(Value::as_str).unwrap_or("")})),
                    Some("file") => {
                        let mut f = json!({"type": "input_file"});
                        for k in ["file_data", "filename", "file_id"] {
                            if let Some(v) = p.get("file").and_then(|f| f.get(k)) {
                                f[k] = v.clone();
                            }
                        }
                        out.push(f);
                    }
                    other => {
                        return Err(Untranslatable::new(
                            format!("messages[{i}].content[{j}].type={}", other.unwrap_or("unknown")),
                            "the Responses API takes text, images and files here",
                        ));
                    }
                }
            }
            Ok(Value::Array(out))
        }
        Some(_) => Err(Untranslatable::new(format!("messages[{i}].content"), "must be a string or a list of parts")),
    }
}

fn tools(obj: &Map<String, Value>, body: &mut Map<String, Value>) -> Result<(), Untranslatable> {
    let tools = function_tools(obj, "the Responses API", |_, f| {
        let mut tool = json!({"type": "function", "name": str_of(f, "name").unwrap_or(""),
            "parameters": f.get("parameters").cloned().unwrap_or_else(|| json!({"type": "object", "properties": {}}))});
        for k in ["description", "strict"] {
            if let Some(v) = f.get(k).filter(|v| !v.is_null()) {
                tool[k] = v.clone();
            }
        }
        Ok(tool)
    })?;
    if let Some(tools) = tools {
        body.insert("tools".into(), Value::Array(tools));
    }
    match obj.get("tool_choice") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            body.insert("tool_choice".into(), s.clone().into());
        }
        Some(c) => {
            let name = c.pointer("/function/name").and_then(Value::as_str).unwrap_or("");
            body.insert("tool_choice".into(), json!({"type": "function", "name": name}));
        }
    }
    Ok(())
}

/// A chat `usage` object from a Response's usage.
fn chat_usage(u: &Value) -> Value {
    let n = |p: &str| u.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    json!({
        "prompt_tokens": n("/input_tokens"),
        "completion_tokens": n("/output_tokens"),
        "total_tokens": n("/input_tokens") + n("/output_tokens"),
        "prompt_tokens_details": {"cached_tokens": n("/input_tokens_details/cached_tokens")},
        "completion_tokens_details": {"reasoning_tokens": n("/output_tokens_details/reasoning_tokens")},
    })
}

/// Chat `finish_reason` for a finished Response.
fn finish_of(r: &Value, calls: bool) -> &'static str {
    match r.pointer("/incomplete_details/reason").and_then(Value::as_str) {
        Some("max_output_tokens") => "length",
        Some("content_filter") => "content_filter",
        _ if calls => "tool_calls",
        _ => "stop",
    }
}

/// A Response object → chat completion.
pub fn response(body: &[u8], created: u64) -> Result<Vec<u8>, serde_json::Error> {
    let r: Value = serde_json::from_slice(body)?;
    if str_of(&r, "object") != Some("response") {
        return Err(serde::de::Error::custom("a Response object has `object: \"response\"`"));
    }
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut refusal = String::new();
    let mut calls = Vec::new();
    for item in r.get("output").and_then(Value::as_array).into_iter().flatten() {
        match str_of(item, "type") {
            Some("message") => {
                for p in item.get("content").and_then(Value::as_array).into_iter().flatten() {
                    match str_of(p, "type") {
                        Some("output_text") => text.push_str(str_of(p, "text").unwrap_or("")),
                        Some("refusal") => refusal.push_str(str_of(p, "refusal").unwrap_or("")),
                        _ => {}
                    }
                }
            }
            Some("function_call") => calls.push(json!({"id": str_of(item, "call_id").unwrap_or(""), "type": "function",
                "function": {"name": str_of(item, "name").unwrap_or(""), "arguments": str_of(item, "arguments").unwrap_or("")}})),
            Some("reasoning") => {
                for s in item.get("summary").and_then(Value::as_array).into_iter().flatten() {
                    reasoning.push_str(str_of(s, "text").unwrap_or(""));
                }
            }
            _ => {}
        }
    }
    let finish = finish_of(&r, !calls.is_empty());
    let mut message = json!({"role": "assistant", "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { text.into() }});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    if !reasoning.is_empty() {
        message["reasoning_content"] = reasoning.into();
    }
    if !refusal.is_empty() {
        message["refusal"] = refusal.into();
    }
    let mut out = json!({
        "id": format!("chatcmpl-{}", str_of(&r, "id").unwrap_or("responses")),
        "object": "chat.completion",
        "created": created,
        "model": str_of(&r, "model").unwrap_or(""),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    });
    if let Some(u) = r.get("usage").filter(|u| !u.is_null()) {
        out["usage"] = chat_usage(u);
    }
    serde_json::to_vec(&out)
}

/// One Responses API event, read for the fields the chat chunks need (the others are skipped
/// unread).
#[derive(Deserialize)]
struct RspEvent<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Str<'a>>,
    #[serde(default)]
    delta: Option<Value>,
    #[serde(default)]
    output_index: Option<Value>,
    #[serde(default)]
    item: Option<Value>,
    #[serde(default)]
    response: Option<Value>,
    #[serde(default)]
    code: Option<Value>,
    #[serde(default)]
    message: Option<Value>,
}

/// Responses API events → OpenAI chat chunks (written by hand: every chunk starts with the
/// same id, created time and model).
pub struct ResponsesToChat {
    prefix: ChunkPrefix,
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
    started: bool,
    /// Output index of each function call → its tool call index.
    calls: Vec<u64>,
    done: bool,
}

impl ResponsesToChat {
    /// `include_usage`: the client asked for a usage chunk.
    pub fn new(created: u64, include_usage: bool) -> Self {
        let mut t = ResponsesToChat {
            prefix: ChunkPrefix::default(),
            id: "chatcmpl-responses".into(),
            model: String::new(),
            created,
            include_usage,
            started: false,
            calls: Vec::new(),
            done: false,
        };
        t.set_prefix();
        t
    }

    fn set_prefix(&mut self) {
        self.prefix = ChunkPrefix::new(&self.id, self.created, &self.model);
    }

    fn chunk(&self, delta: &str, finish: Option<&str>) -> Event {
        self.prefix.chunk(delta, finish)
    }

    fn text(&self, key: &str, text: &str) -> Event {
        self.prefix.text(key, text)
    }

    fn start(&mut self, r: Option<&Value>, out: &mut Vec<Event>) {
        if self.started {
            return;
        }
        if let Some(r) = r {
            if let Some(id) = str_of(r, "id") {
                self.id = format!("chatcmpl-{id}");
            }
            self.model = str_of(r, "model").unwrap_or("").to_owned();
            self.set_prefix();
        }
        out.push(self.chunk(r#"{"role":"assistant","content":""}"#, None));
        self.started = true;
    }

    fn end(&mut self, r: &Value, out: &mut Vec<Event>) {
        self.start(Some(r), out);
        out.push(self.chunk("{}", Some(finish_of(r, !self.calls.is_empty()))));
        if self.include_usage
            && let Some(u) = r.get("usage").filter(|u| !u.is_null())
        {
            let v = json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": [], "usage": chat_usage(u)});
            out.push((None, v.to_string()));
        }
        out.push((None, "[DONE]".into()));
        self.done = true;
    }

    fn call_index(&self, output_index: u64) -> Option<usize> {
        self.calls.iter().position(|o| *o == output_index)
    }
}

impl Translate for ResponsesToChat {
    fn push(&mut self, name: Option<&str>, data: &str, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        let Ok(v) = serde_json::from_str::<RspEvent<'_>>(data) else { return };
        let kind = v.kind.as_deref().or(name).unwrap_or("");
        let delta = v.delta.as_ref().and_then(Value::as_str);
        match kind {
            "response.created" | "response.in_progress" => self.start(v.response.as_ref(), out),
            "response.output_text.delta" => {
                self.start(None, out);
                if let Some(d) = delta.filter(|d| !d.is_empty()) {
                    out.push(self.text("content", d));
                }
            }
            "response.reasoning_summary_text.delta" => {
                self.start(None, out);
                if let Some(d) = delta.filter(|d| !d.is_empty()) {
                    out.push(self.text("reasoning_content", d));
                }
            }
            "response.refusal.delta" => {
                self.start(None, out);
                if let Some(d) = delta {
                    out.push(self.text("refusal", d));
                }
            }
            "response.output_item.added" => {
                let item = v.item.as_ref().unwrap_or(&Value::Null);
                if str_of(item, "type") == Some("function_call") {
                    self.start(None, out);
                    let index = self.calls.len();
                    self.calls.push(v.output_index.as_ref().and_then(Value::as_u64).unwrap_or(index as u64));
                    let delta = json!({"tool_calls": [{"index": index, "id": str_of(item, "call_id").unwrap_or(""),
                        "type": "function", "function": {"name": str_of(item, "name").unwrap_or(""), "arguments": ""}}]});
                    out.push(self.chunk(&delta.to_string(), None));
                }
            }
            "response.function_call_arguments.delta" => {
                let at = v.output_index.as_ref().and_then(Value::as_u64).and_then(|o| self.call_index(o));
                if let (Some(index), Some(d)) = (at, delta) {
                    let mut o = Out::with_capacity(d.len() + 64);
                    o.raw(r#"{"tool_calls":[{"index":"#).num(index as u64).raw(r#","function":{"arguments":"#).str(d);
                    o.raw("}}]}");
                    out.push(self.chunk(&o.0, None));
                }
            }
            "response.completed" | "response.incomplete" => {
                let r = v.response.unwrap_or(Value::Null);
                self.end(&r, out);
            }
            "response.failed" => {
                let e = v.response.as_ref().and_then(|r| r.get("error")).cloned().unwrap_or(Value::Null);
                let code = str_of(&e, "code").unwrap_or("upstream_stream_error").to_owned();
                let message = str_of(&e, "message").unwrap_or("the upstream response failed").to_owned();
                self.error(&code, &message, out);
            }
            "error" => {
                let code = v.code.as_ref().and_then(Value::as_str).unwrap_or("upstream_stream_error").to_owned();
                let message =
                    v.message.as_ref().and_then(Value::as_str).unwrap_or("the upstream stream failed").to_owned();
                self.error(&code, &message, out);
            }
            _ => {}
        }
    }

    fn finish(&mut self, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        // The provider ended the stream without saying how the response ended.
        self.error("upstream_stream_incomplete", "the upstream stream ended before the response completed", out);
    }

    fn error(&mut self, code: &str, message: &str, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        out.push(chat_error(code, message));
        self.done = true;
    }
}
/// The final Response object of a Responses event stream (`response.completed` or
/// `response.incomplete`), for a client that asked for one JSON answer from a provider that
/// streams every answer (ChatGPT's Codex backend); `Err` names what the stream ended with
/// instead. The events are read by the core's parser ([`ferroute_core::sse::SseParser`]).
pub fn final_response(stream: &[u8]) -> Result<bytes::Bytes, String> {
    let mut last: Option<Result<bytes::Bytes, String>> = None;
    ferroute_core::sse::SseParser::default().feed(stream, |ev| {
        if matches!(last, Some(Ok(_))) {
            return;
        }
        let Ok(event) = serde_json::from_str::<Value>(ev.data) else { return };
        match str_of(&event, "type") {
            Some("response.completed" | "response.incomplete") => {
                last = Some(match event.get("response").filter(|r| r.is_object()) {
                    Some(r) => serde_json::to_vec(r).map(bytes::Bytes::from).map_err(|e| e.to_string()),
                    None => Err("a final event without a response".into()),
                });
            }
            Some(t @ ("response.failed" | "error")) => last = Some(Err(format!("the stream ended with {t}: {event}"))),
            _ => {}
        }
    });
    last.unwrap_or_else(|| Err("the stream ended without response.completed".to_owned()))
}
