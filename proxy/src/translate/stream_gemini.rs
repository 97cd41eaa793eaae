//! Gemini's `streamGenerateContent?alt=sse` events (each a partial `GenerateContentResponse`,
//! the stream ending with the connection, no end marker) to chat chunks, and chat chunks to
//! such events for a Gemini client.

use super::chat_gemini::{call_id, chat_usage, finish_reason as chat_finish};
use super::gemini_chat::{finish_reason as gemini_finish, usage_metadata};
use super::stream::{ChunkPrefix, Event, Translate, chat_chunk, chat_error, gemini_error};
use super::wire::{ChatUsage, GemAnswer, Out};
use super::{parse_arguments, str_of};
use serde_json::{Value, json};

/// Gemini stream events → OpenAI chat chunks, written by hand: every chunk starts with the
/// same id, created time and model.
pub struct GeminiToChat {
    prefix: ChunkPrefix,
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
        let mut t = GeminiToChat {
            prefix: ChunkPrefix::default(),
            id: "chatcmpl-gemini".into(),
            created,
            model: model.to_owned(),
            include_usage,
            started: false,
            calls: 0,
            finish: None,
            usage: None,
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

    fn start(&mut self, out: &mut Vec<Event>) {
        if !self.started {
            out.push(self.chunk(r#"{"role":"assistant","content":""}"#, None));
            self.started = true;
        }
    }
}

impl Translate for GeminiToChat {
    fn push(&mut self, _name: Option<&str>, data: &str, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        let Ok(v) = serde_json::from_str::<GemAnswer<'_>>(data) else { return };
        if let Some(e) = v.error.as_ref().filter(|e| !e.is_null()) {
            let code = str_of(e, "status").unwrap_or("upstream_stream_error").to_owned();
            let message = str_of(e, "message").unwrap_or("the upstream stream failed").to_owned();
            self.error(&code, &message, out);
            return;
        }
        if !self.started {
            let renamed = v.response_id.is_some() || v.model_version.is_some();
            if let Some(id) = &v.response_id {
                self.id = format!("chatcmpl-{id}");
            }
            if let Some(m) = &v.model_version {
                self.model = m.to_string();
            }
            if renamed {
                self.set_prefix();
            }
            self.start(out);
        }
        let candidate = v.candidates.first();
        for p in candidate.and_then(|c| c.content.as_ref()).map(|c| c.parts.as_slice()).unwrap_or_default() {
            if let Some(f) = &p.function_call {
                let id = call_id(str_of(f, "id"), self.calls);
                let args = f.get("args").map_or_else(|| "{}".to_owned(), Value::to_string);
                let mut d = Out::with_capacity(96 + args.len());
                d.raw(r#"{"tool_calls":[{"index":"#).num(self.calls as u64).raw(r#","id":"#).str(&id);
                d.raw(r#","type":"function","function":{"name":"#).str(str_of(f, "name").unwrap_or(""));
                d.raw(r#","arguments":"#).str(&args).raw("}}]}");
                self.calls += 1;
                out.push(self.chunk(&d.0, None));
            } else if let Some(t) = p.text.as_deref().filter(|t| !t.is_empty()) {
                let key = if p.thought == Some(true) { "reasoning_content" } else { "content" };
                out.push(self.prefix.text(key, t));
            }
        }
        if let Some(r) = candidate.and_then(|c| c.finish_reason.as_deref()) {
            self.finish = Some(r.to_owned());
        }
        if v.prompt_feedback.as_ref().is_some_and(|f| f.get("blockReason").is_some()) {
            self.finish = Some("SAFETY".into());
        }
        if let Some(u) = v.usage {
            self.usage = Some(u);
        }
    }

    fn finish(&mut self, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        self.start(out);
        let reason = chat_finish(self.finish.as_deref().unwrap_or("STOP"), self.calls > 0);
        out.push(self.chunk("{}", Some(reason)));
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

    /// The last event: the calls gathered, why it finished, and the usage.
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
        // Text as it comes, written by hand (the common event).
        let mut parts = Out::with_capacity(64);
        for (text, thought) in [
            (delta.reasoning_content.as_deref(), true),
            (delta.content.as_deref(), false),
            (delta.refusal.as_deref(), false),
        ] {
            let Some(t) = text.filter(|t| !t.is_empty()) else { continue };
            parts.raw(if parts.0.is_empty() { r#"{"text":"# } else { r#",{"text":"# }).str(t);
            parts.raw(if thought { r#","thought":true}"# } else { "}" });
        }
        if !parts.0.is_empty() {
            let mut o = Out::with_capacity(parts.0.len() + self.model.len() + self.id.len() + 96);
            o.raw(r#"{"candidates":[{"content":{"role":"model","parts":["#).raw(&parts.0);
            o.raw(r#"]},"index":0}],"modelVersion":"#).str(&self.model).raw(r#","responseId":"#).str(&self.id).raw("}");
            out.push((None, o.0));
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
