//! Gemini's `streamGenerateContent?alt=sse` events (each a partial `GenerateContentResponse`,
//! the stream ending with the connection, no end marker) to chat chunks, and chat chunks to
//! such events for a Gemini client.

use super::chat_gemini::{call_id, chat_usage, finish_reason as chat_finish};
use super::gemini_chat::{finish_reason as gemini_finish, usage_metadata};
use super::stream::{Event, Translate, chat_chunk, chat_error, gemini_error};
use super::wire::ChatUsage;
use super::{parse_arguments, str_of};
use serde_json::{Value, json};

/// Gemini stream events → OpenAI chat chunks.
pub struct GeminiToChat {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    started: bool,
    calls: usize,
    finish: Option<String>,
    usage: Option<Value>,
    done: bool,
}

impl GeminiToChat {
    /// `model` names the chunks until the provider names its model version.
    pub fn new(created: u64, include_usage: bool, model: &str) -> Self {
        GeminiToChat {
            id: "chatcmpl-gemini".into(),
            created,
            model: model.to_owned(),
            include_usage,
            started: false,
            calls: 0,
            finish: None,
            usage: None,
            done: false,
        }
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> Event {
        let v = json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        (None, v.to_string())
    }
}

impl Translate for GeminiToChat {
    fn push(&mut self, _name: Option<&str>, data: &str, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else { return };
        if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
            let code = str_of(e, "status").unwrap_or("upstream_stream_error").to_owned();
            let message = str_of(e, "message").unwrap_or("the upstream stream failed").to_owned();
            self.error(&code, &message, out);
            return;
        }
        if !self.started {
            if let Some(id) = str_of(&v, "responseId") {
                self.id = format!("chatcmpl-{id}");
            }
            if let Some(m) = str_of(&v, "modelVersion") {
                self.model = m.to_owned();
            }
            out.push(self.chunk(json!({"role": "assistant", "content": ""}), None));
            self.started = true;
        }
        let candidate = v.pointer("/candidates/0");
        for p in candidate.and_then(|c| c.pointer("/content/parts")).and_then(Value::as_array).into_iter().flatten() {
            if let Some(f) = p.get("functionCall") {
                let id = call_id(str_of(f, "id"), self.calls);
                let args = f.get("args").cloned().unwrap_or_else(|| json!({}));
                let delta = json!({"tool_calls": [{"index": self.calls, "id": id, "type": "function",
                    "function": {"name": str_of(f, "name").unwrap_or(""), "arguments": args.to_string()}}]});
                self.calls += 1;
                out.push(self.chunk(delta, None));
            } else if let Some(t) = str_of(p, "text").filter(|t| !t.is_empty()) {
                let key = if p.get("thought") == Some(&Value::Bool(true)) { "reasoning_content" } else { "content" };
                out.push(self.chunk(json!({ key: t }), None));
            }
        }
        if let Some(r) = candidate.and_then(|c| str_of(c, "finishReason")) {
            self.finish = Some(r.to_owned());
        }
        if v.pointer("/promptFeedback/blockReason").is_some() {
            self.finish = Some("SAFETY".into());
        }
        if let Some(u) = v.get("usageMetadata") {
            self.usage = Some(u.clone());
        }
    }

    fn finish(&mut self, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        if !self.started {
            out.push(self.chunk(json!({"role": "assistant", "content": ""}), None));
        }
        let reason = chat_finish(self.finish.as_deref().unwrap_or("STOP"), self.calls > 0);
        out.push(self.chunk(json!({}), Some(reason)));
        if self.include_usage
            && let Some(u) = &self.usage
        {
            let v = json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": [], "usage": chat_usage(u)});
            out.push((None, v.to_string()));
        }
        out.push((None, "[DONE]".into()));
        self.done = true;
    }

    fn error(&mut self, code: &str, message: &str, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        out.push(chat_error(code, message));
        self.done = true;
    }
}

/// A tool call being streamed: Gemini sends each call whole, so arguments are gathered.
struct Call {
    index: u64,
    id: String,
    name: String,
    arguments: String,
}

/// OpenAI chat chunks → Gemini stream events.
pub struct ChatToGemini {
    model: String,
    id: String,
    calls: Vec<Call>,
    finish: Option<String>,
    usage: Option<ChatUsage>,
    done: bool,
}

impl ChatToGemini {
    /// `model` is the model the client named (the provider's may differ).
    pub fn new(model: &str) -> Self {
        ChatToGemini {
            model: model.to_owned(),
            id: String::new(),
            calls: Vec::new(),
            finish: None,
            usage: None,
            done: false,
        }
    }

    fn event(&self, parts: Vec<Value>, finish: Option<&str>) -> Event {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if let Some(f) = finish {
            candidate["finishReason"] = f.into();
        }
        let mut v = json!({"candidates": [candidate], "modelVersion": self.model, "responseId": self.id});
        if finish.is_some()
            && let Some(u) = &self.usage
        {
            v["usageMetadata"] = usage_metadata(u);
        }
        (None, v.to_string())
    }
}

impl Translate for ChatToGemini {
    fn push(&mut self, _name: Option<&str>, payload: &str, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        let Some(v) = chat_chunk(self, payload, out) else { return };
        if self.id.is_empty()
            && let Some(id) = v.id.as_deref()
        {
            self.id = id.to_owned();
        }
        if let Some(u) = v.usage {
            self.usage = Some(u);
        }
        let Some(choice) = v.choices.first() else { return };
        if let Some(f) = choice.finish_reason.as_deref() {
            self.finish = Some(f.to_owned());
        }
        let Some(delta) = choice.delta.as_ref() else { return };
        let mut parts = Vec::new();
        if let Some(r) = delta.reasoning_content.as_deref().filter(|r| !r.is_empty()) {
            parts.push(json!({"text": r, "thought": true}));
        }
        if let Some(t) = delta.content.as_deref().filter(|t| !t.is_empty()) {
            parts.push(json!({ "text": t }));
        }
        if let Some(r) = delta.refusal.as_deref().filter(|r| !r.is_empty()) {
            parts.push(json!({ "text": r }));
        }
        if !parts.is_empty() {
            out.push(self.event(parts, None));
        }
        for c in delta.tool_calls.iter().flatten() {
            let f = c.function.as_ref();
            let args = f.and_then(|f| f.arguments.as_deref()).unwrap_or("");
            match self.calls.iter_mut().find(|k| k.index == c.index) {
                Some(k) => k.arguments.push_str(args),
                None => self.calls.push(Call {
                    index: c.index,
                    id: c.id.as_deref().unwrap_or("").to_owned(),
                    name: f.and_then(|f| f.name.as_deref()).unwrap_or("").to_owned(),
                    arguments: args.to_owned(),
                }),
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        let mut parts: Vec<Value> = std::mem::take(&mut self.calls)
            .into_iter()
            .map(|c| json!({"functionCall": {"id": c.id, "name": c.name, "args": parse_arguments(&c.arguments)}}))
            .collect();
        if parts.is_empty() {
            parts.push(json!({"text": ""}));
        }
        let finish = gemini_finish(self.finish.as_deref().unwrap_or("stop"));
        out.push(self.event(parts, Some(finish)));
        self.done = true;
    }

    fn error(&mut self, code: &str, message: &str, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        out.push(gemini_error(code, message));
        self.done = true;
    }
}
