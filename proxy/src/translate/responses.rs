//! The OpenAI Responses API on top of chat: a Responses request becomes a chat request (which
//! may in turn go to an Anthropic-format provider), and chat answers become Response objects.
//! Ferroute keeps no responses, so anything that refers to a stored one is refused.

use super::wire::ChatUsage;
use super::{Translated, Untranslatable, joined_text, str_of};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// Fields that carry over or are handled here; any other field is refused.
const KNOWN: &[&str] = &[
    "model",
    "input",
    "instructions",
    "max_output_tokens",
    "temperature",
    "top_p",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "stream",
    "stream_options",
    "store",
    "metadata",
    "user",
    "safety_identifier",
    "reasoning",
    "include",
    "text",
    "truncation",
    "background",
    "prompt_cache_key",
    "service_tier",
    "client_metadata",
];

/// Fields that only make sense with stored responses.
const STORED: &[&str] = &["previous_response_id", "conversation", "prompt"];

/// Responses request → chat request. `background` is left to the gateway (served
/// synchronously with a warning).
pub fn request(body: &Value) -> Result<Translated, Untranslatable> {
    let Some(obj) = body.as_object() else { return Err(Untranslatable::new("body", "must be a JSON object")) };
    if let Some(k) = obj.keys().find(|k| STORED.contains(&k.as_str())) {
        return Err(Untranslatable::stored(
            k.as_str(),
            "Ferroute does not store responses; send the whole conversation in `input`",
        ));
    }
    if let Some(k) = obj.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(Untranslatable::new(k.as_str(), "this Responses API field is not supported by Ferroute"));
    }
    let mut out = Translated { body: json!({}), dropped: Vec::new() };
    let mut chat = Map::new();
    let mut messages = Vec::new();
    if let Some(i) = obj.get("instructions").and_then(Value::as_str).filter(|i| !i.is_empty()) {
        messages.push(json!({"role": "system", "content": i}));
    }
    match obj.get("input") {
        Some(Value::String(s)) => messages.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                input_item(item, i, &mut messages, &mut out)?;
            }
        }
        _ => return Err(Untranslatable::new("input", "must be a string or a list of items")),
    }
    chat.insert("messages".into(), Value::Array(messages));
    if let Some(n) = obj.get("max_output_tokens").filter(|v| !v.is_null()) {
        chat.insert("max_tokens".into(), n.clone());
    }
    for k in ["temperature", "top_p", "parallel_tool_calls", "prompt_cache_key", "service_tier"] {
        if let Some(v) = obj.get(k).filter(|v| !v.is_null()) {
            chat.insert(k.into(), v.clone());
        }
    }
    if obj.get("stream") == Some(&Value::Bool(true)) {
        chat.insert("stream".into(), Value::Bool(true));
        chat.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if let Some(u) = obj.get("user").or_else(|| obj.get("safety_identifier")).and_then(Value::as_str) {
        chat.insert("user".into(), u.into());
    }
    if let Some(r) = obj.get("reasoning").filter(|r| !r.is_null()) {
        if let Some(e) = r.get("effort").and_then(Value::as_str) {
            chat.insert("reasoning_effort".into(), e.into());
        }
        if r.get("summary").is_some_and(|s| !s.is_null()) {
            out.note("reasoning.summary");
        }
    }
    if let Some(t) = obj.get("text").filter(|t| !t.is_null()) {
        text_format(t, &mut chat)?;
    }
    tools(obj, &mut chat, &mut out)?;
    for k in ["include", "metadata", "stream_options", "client_metadata"] {
        if obj.get(k).is_some_and(|v| !v.is_null() && v != &json!([]) && v != &json!({})) {
            out.note(k);
        }
    }
    if obj.get("truncation").and_then(Value::as_str) == Some("auto") {
        out.note("truncation");
    }
    if obj.get("store") == Some(&Value::Bool(true)) {
        out.note("store");
    }
    out.body = Value::Object(chat);
    Ok(out)
}

fn text_format(t: &Value, chat: &mut Map<String, Value>) -> Result<(), Untranslatable> {
    if let Some(v) = t.get("verbosity").filter(|v| !v.is_null()) {
        chat.insert("verbosity".into(), v.clone());
    }
    let Some(f) = t.get("format").filter(|f| !f.is_null()) else { return Ok(()) };
    match str_of(f, "type") {
        Some("text") => {}
        Some("json_object") => {
            chat.insert("response_format".into(), json!({"type": "json_object"}));
        }
        Some("json_schema") => {
            let mut schema = json!({"name": str_of(f, "name").unwrap_or("response"), "schema": f.get("schema").cloned().unwrap_or(json!({}))});
            if let Some(s) = f.get("strict") {
                schema["strict"] = s.clone();
            }
            if let Some(d) = f.get("description") {
                schema["description"] = d.clone();
            }
            chat.insert("response_format".into(), json!({"type": "json_schema", "json_schema": schema}));
        }
        other => {
            return Err(Untranslatable::new(
                format!("text.format.type={}", other.unwrap_or("missing")),
                "unknown format",
            ));
        }
    }
    Ok(())
}

fn tools(obj: &Map<String, Value>, chat: &mut Map<String, Value>, out: &mut Translated) -> Result<(), Untranslatable> {
    if let Some(list) = obj.get("tools").and_then(Value::as_array).filter(|l| !l.is_empty()) {
        let mut tools = Vec::new();
        for (i, t) in list.iter().enumerate() {
            if str_of(t, "type") != Some("function") {
                // Hosted tools (web_search, file_search, …) and tool namespaces cannot run on a
                // chat provider: the offer is dropped and named; forcing one is refused below.
                let kind = str_of(t, "type").unwrap_or("missing");
                match str_of(t, "name") {
                    Some(n) => out.note(&format!("tools:{kind}:{n}")),
                    None => out.note(&format!("tools:{kind}")),
                }
                continue;
            }
            let Some(name) = str_of(t, "name") else {
                return Err(Untranslatable::new(format!("tools[{i}].name"), "a function tool needs a name"));
            };
            let mut f = json!({"name": name, "parameters": t.get("parameters").cloned().unwrap_or(json!({"type": "object", "properties": {}}))});
            for k in ["description", "strict"] {
                if let Some(v) = t.get(k).filter(|v| !v.is_null()) {
                    f[k] = v.clone();
                }
            }
            tools.push(json!({"type": "function", "function": f}));
        }
        if !tools.is_empty() {
            chat.insert("tools".into(), Value::Array(tools));
        }
    }
    match obj.get("tool_choice") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            chat.insert("tool_choice".into(), Value::String(s.clone()));
        }
        Some(c) if str_of(c, "type") == Some("function") => {
            let name = str_of(c, "name").unwrap_or("");
            chat.insert("tool_choice".into(), json!({"type": "function", "function": {"name": name}}));
        }
        Some(c) => {
            return Err(Untranslatable::new(
                format!("tool_choice.type={}", str_of(c, "type").unwrap_or("missing")),
                "only a function tool can be forced",
            ));
        }
    }
    Ok(())
}

fn input_item(item: &Value, i: usize, messages: &mut Vec<Value>, out: &mut Translated) -> Result<(), Untranslatable> {
    let kind = str_of(item, "type").unwrap_or(if item.get("role").is_some() { "message" } else { "" });
    match kind {
        "message" => {
            let role = match str_of(item, "role") {
                Some("developer" | "system") => "system",
                Some("user") => "user",
                Some("assistant") => "assistant",
                other => {
                    return Err(Untranslatable::new(
                        format!("input[{i}].role={}", other.unwrap_or("missing")),
                        "a message is from user, assistant, system or developer",
                    ));
                }
            };
            let content = message_content(item.get("content"), role, i)?;
            messages.push(json!({"role": role, "content": content}));
        }
        "function_call" => {
            let call = json!({
                "id": str_of(item, "call_id").unwrap_or(""),
                "type": "function",
                "function": {"name": str_of(item, "name").unwrap_or(""), "arguments": str_of(item, "arguments").unwrap_or("{}")},
            });
            // Calls of one turn join the assistant message before them.
            match messages.last_mut() {
                Some(last) if last["role"] == "assistant" => {
                    match last.get_mut("tool_calls").and_then(Value::as_array_mut) {
                        Some(calls) => calls.push(call),
                        None => last["tool_calls"] = json!([call]),
                    }
                }
                _ => messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
            }
        }
        "function_call_output" => {
            let output = match item.get("output") {
                Some(Value::String(s)) => s.clone(),
                other => joined_text(other, &format!("input[{i}].output"))?,
            };
            messages.push(
                json!({"role": "tool", "tool_call_id": str_of(item, "call_id").unwrap_or(""), "content": output}),
            );
        }
        "reasoning" => out.note("reasoning items"),
        other => {
            return Err(Untranslatable::new(
                format!("input[{i}].type={}", if other.is_empty() { "missing" } else { other }),
                "only messages, function calls and their outputs can be served",
            ));
        }
    }
    Ok(())
}

fn message_content(content: Option<&Value>, role: &str, i: usize) -> Result<Value, Untranslatable> {
    let parts = match content {
        Some(Value::String(s)) => return Ok(Value::String(s.clone())),
        Some(Value::Array(parts)) => parts,
        _ => return Err(Untranslatable::new(format!("input[{i}].content"), "must be a string or a list of parts")),
    };
    let mut out = Vec::new();
    for (j, p) in parts.iter().enumerate() {
        match str_of(p, "type") {
            Some("input_text" | "output_text" | "text") => {
                out.push(json!({"type": "text", "text": str_of(p, "text").unwrap_or("")}))
            }
            Some("refusal") => out.push(json!({"type": "text", "text": str_of(p, "refusal").unwrap_or("")})),
            Some("input_image") if role == "user" => match str_of(p, "image_url") {
                Some(url) => out.push(json!({"type": "image_url", "image_url": {"url": url}})),
                None => {
                    return Err(Untranslatable::new(
                        format!("input[{i}].content[{j}].file_id"),
                        "Ferroute has no file store; send the image as a URL or data URL",
                    ));
                }
            },
            other => {
                return Err(Untranslatable::new(
                    format!("input[{i}].content[{j}].type={}", other.unwrap_or("missing")),
                    "only text and images can be served",
                ));
            }
        }
    }
    if role != "user" || out.iter().all(|p| p["type"] == "text") {
        let text: String = out.iter().filter_map(|p| str_of(p, "text")).collect();
        return Ok(Value::String(text));
    }
    Ok(Value::Array(out))
}

/// Builds the Response object a client sees, from the request it sent and the chat answer
/// (whole, or chunk by chunk).
#[derive(Debug, Clone)]
pub struct ResponseBuilder {
    id: String,
    created_at: u64,
    model: String,
    echo: Map<String, Value>,
    output: Vec<Value>,
    usage: Option<Value>,
    finish: Option<String>,
}

/// Request fields a Response object repeats.
const ECHO: &[&str] = &[
    "instructions",
    "max_output_tokens",
    "parallel_tool_calls",
    "temperature",
    "top_p",
    "tool_choice",
    "tools",
    "text",
];

impl ResponseBuilder {
    /// For the Responses request `req`; `id` is unique per response.
    pub fn new(id: &str, created_at: u64, req: &Value) -> Self {
        let mut echo = Map::new();
        for k in ECHO {
            echo.insert((*k).into(), req.get(*k).cloned().unwrap_or(Value::Null));
        }
        if echo["tool_choice"].is_null() {
            echo.insert("tool_choice".into(), "auto".into());
        }
        if echo["tools"].is_null() {
            echo.insert("tools".into(), json!([]));
        }
        if echo["parallel_tool_calls"].is_null() {
            echo.insert("parallel_tool_calls".into(), Value::Bool(true));
        }
        if echo["text"].is_null() {
            echo.insert("text".into(), json!({"format": {"type": "text"}}));
        }
        echo.insert("metadata".into(), req.get("metadata").cloned().unwrap_or(json!({})));
        echo.insert("store".into(), Value::Bool(false));
        echo.insert("background".into(), Value::Bool(false));
        ResponseBuilder {
            id: format!("resp_{id}"),
            created_at,
            model: str_of(req, "model").unwrap_or("").to_owned(),
            echo,
            output: Vec::new(),
            usage: None,
            finish: None,
        }
    }

    /// The Response object with `status` and the output so far.
    pub fn object(&self, status: &str) -> Value {
        let mut o = self.echo.clone();
        o.insert("id".into(), self.id.clone().into());
        o.insert("object".into(), "response".into());
        o.insert("created_at".into(), self.created_at.into());
        o.insert("status".into(), status.into());
        o.insert("model".into(), self.model.clone().into());
        o.insert("output".into(), Value::Array(self.output.clone()));
        o.insert("error".into(), Value::Null);
        o.insert("incomplete_details".into(), Value::Null);
        o.insert("usage".into(), self.usage.clone().unwrap_or(Value::Null));
        Value::Object(o)
    }

    /// Takes the usage and finish reason of a whole chat completion.
    pub fn observe_chunk(&mut self, v: &Value) {
        let usage = v.get("usage").and_then(|u| ChatUsage::deserialize(u).ok());
        self.observe(usage, v.pointer("/choices/0/finish_reason").and_then(Value::as_str));
    }

    /// Takes the usage and finish reason a chat chunk reports.
    pub fn observe(&mut self, usage: Option<ChatUsage>, finish: Option<&str>) {
        if let Some(u) = usage {
            let (i, o) = (u.prompt_tokens, u.completion_tokens);
            self.usage = Some(json!({
                "input_tokens": i,
                "input_tokens_details": {"cached_tokens": u.prompt_tokens_details.map_or(0, |d| d.cached_tokens)},
                "output_tokens": o,
                "output_tokens_details": {"reasoning_tokens": u.completion_tokens_details.map_or(0, |d| d.reasoning_tokens)},
                "total_tokens": i + o,
            }));
        }
        if let Some(f) = finish {
            self.finish = Some(f.to_owned());
        }
    }

    /// Opens an assistant message item; returns its output index.
    pub fn open_message(&mut self) -> usize {
        let i = self.output.len();
        self.output.push(json!({"id": format!("msg_{}_{i}", self.id), "type": "message", "status": "in_progress",
            "role": "assistant", "content": []}));
        i
    }

    /// Appends text to message item `i`; returns the item's id.
    pub fn append_text(&mut self, i: usize, text: &str) -> Value {
        let item = &mut self.output[i];
        if item["content"].as_array().is_none_or(Vec::is_empty) {
            item["content"] = json!([{"type": "output_text", "text": "", "annotations": [], "logprobs": []}]);
        }
        if let Some(Value::String(t)) = item.pointer_mut("/content/0/text") {
            t.push_str(text);
        }
        item["id"].clone()
    }

    /// Opens a function call item; returns its output index.
    pub fn open_call(&mut self, call_id: &str, name: &str) -> usize {
        let i = self.output.len();
        self.output.push(json!({"id": format!("fc_{}_{i}", self.id), "type": "function_call", "status": "in_progress",
            "call_id": call_id, "name": name, "arguments": ""}));
        i
    }

    /// Appends argument text to call item `i`; returns the item's id.
    pub fn append_arguments(&mut self, i: usize, args: &str) -> Value {
        let item = &mut self.output[i];
        if let Some(Value::String(a)) = item.get_mut("arguments") {
            a.push_str(args);
        }
        item["id"].clone()
    }

    /// Item `i` as it stands.
    pub fn item(&self, i: usize) -> Value {
        self.output[i].clone()
    }

    /// Marks item `i` completed and returns it.
    pub fn complete(&mut self, i: usize) -> Value {
        if self.output[i]["type"] == "message" && self.output[i]["content"].as_array().is_none_or(Vec::is_empty) {
            self.append_text(i, "");
        }
        self.output[i]["status"] = "completed".into();
        self.output[i].clone()
    }

    /// The final object: completed, or incomplete when the output hit its token limit.
    pub fn finished(&mut self) -> Value {
        for i in 0..self.output.len() {
            self.complete(i);
        }
        if self.finish.as_deref() == Some("length") {
            let mut o = self.object("incomplete");
            o["incomplete_details"] = json!({"reason": "max_output_tokens"});
            return o;
        }
        self.object("completed")
    }

    /// A failed object.
    pub fn failed(&self, code: &str, message: &str) -> Value {
        let mut o = self.object("failed");
        o["error"] = json!({"code": code, "message": message});
        o
    }

    /// A whole chat completion as the final Response object.
    pub fn from_chat(mut self, chat: &Value) -> Value {
        self.observe_chunk(chat);
        if let Some(m) = chat.pointer("/choices/0/message") {
            if let Some(t) = m.get("content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                let i = self.open_message();
                self.append_text(i, t);
            }
            for c in m.get("tool_calls").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]) {
                let name = c.pointer("/function/name").and_then(Value::as_str).unwrap_or("");
                let i = self.open_call(str_of(c, "id").unwrap_or(""), name);
                self.append_arguments(i, c.pointer("/function/arguments").and_then(Value::as_str).unwrap_or(""));
            }
        }
        self.finished()
    }
}
