//! Stream translation as synchronous machines: each takes the upstream's SSE events one by one
//! and emits the client's events. They chain (an Anthropic stream reaches a Responses client
//! through chat chunks), and each can close its stream with an error in its own format.

use super::responses::ResponseBuilder;
use super::{chat_usage, finish_reason, messages_usage, stop_reason, str_of};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// One SSE event: the `event:` name, if any, and the `data:` payload.
pub type Event = (Option<String>, String);

/// A stream translator.
pub trait Translate: Send {
    /// One upstream event; the translated events are appended to `out`.
    fn push(&mut self, name: Option<&str>, data: &str, out: &mut Vec<Event>);
    /// The upstream ended cleanly: close whatever is still open.
    fn finish(&mut self, out: &mut Vec<Event>);
    /// End the stream with an error in the client's format.
    fn error(&mut self, code: &str, message: &str, out: &mut Vec<Event>);
}

/// Serialises events as SSE.
pub fn write(events: &[Event], buf: &mut Vec<u8>) {
    for (name, data) in events {
        if let Some(n) = name {
            buf.extend_from_slice(b"event: ");
            buf.extend_from_slice(n.as_bytes());
            buf.push(b'\n');
        }
        for line in data.split('\n') {
            buf.extend_from_slice(b"data: ");
            buf.extend_from_slice(line.as_bytes());
            buf.push(b'\n');
        }
        buf.push(b'\n');
    }
}

/// Two translators in a row.
pub struct Chain<A, B> {
    first: A,
    second: B,
    scratch: Vec<Event>,
}

impl<A: Translate, B: Translate> Chain<A, B> {
    /// `first`'s output feeds `second`.
    pub fn new(first: A, second: B) -> Self {
        Chain { first, second, scratch: Vec::new() }
    }

    fn pass(&mut self, out: &mut Vec<Event>) {
        for (n, d) in std::mem::take(&mut self.scratch) {
            self.second.push(n.as_deref(), &d, out);
        }
    }
}

impl<A: Translate, B: Translate> Translate for Chain<A, B> {
    fn push(&mut self, name: Option<&str>, data: &str, out: &mut Vec<Event>) {
        self.first.push(name, data, &mut self.scratch);
        self.pass(out);
    }

    fn finish(&mut self, out: &mut Vec<Event>) {
        self.first.finish(&mut self.scratch);
        self.pass(out);
        self.second.finish(out);
    }

    fn error(&mut self, code: &str, message: &str, out: &mut Vec<Event>) {
        self.second.error(code, message, out);
    }
}

fn data(v: &Value) -> Event {
    (None, v.to_string())
}

fn named(name: &str, v: &Value) -> Event {
    (Some(name.to_owned()), v.to_string())
}

/// Anthropic Messages events → OpenAI chat chunks.
pub struct MessagesToChat {
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
    usage: [u64; 4],
    tools: BTreeMap<u64, u64>,
    finished: bool,
    done: bool,
}

impl MessagesToChat {
    /// `include_usage`: the client asked for a usage chunk (`stream_options.include_usage`).
    pub fn new(created: u64, include_usage: bool) -> Self {
        MessagesToChat {
            id: "chatcmpl-ferroute".into(),
            model: String::new(),
            created,
            include_usage,
            usage: [0; 4],
            tools: BTreeMap::new(),
            finished: false,
            done: false,
        }
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> Event {
        data(&json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null}],
        }))
    }

    fn read_usage(&mut self, u: Option<&Value>) {
        let Some(u) = u else { return };
        for (i, k) in ["input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"]
            .iter()
            .enumerate()
        {
            if let Some(n) = u.get(*k).and_then(Value::as_u64) {
                self.usage[i] = n;
            }
        }
    }

    fn close(&mut self, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        if !self.finished {
            out.push(self.chunk(json!({}), Some("stop")));
        }
        if self.include_usage {
            let [i, o, r, w] = self.usage;
            out.push(data(&json!({
                "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [], "usage": chat_usage(i, o, r, w),
            })));
        }
        out.push((None, "[DONE]".into()));
        self.done = true;
    }
}

impl Translate for MessagesToChat {
    fn push(&mut self, name: Option<&str>, payload: &str, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(payload) else { return };
        let kind = str_of(&v, "type").or(name).unwrap_or("");
        match kind {
            "message_start" => {
                let m = v.get("message").unwrap_or(&Value::Null);
                if let Some(id) = str_of(m, "id") {
                    self.id = format!("chatcmpl-{id}");
                }
                self.model = str_of(m, "model").unwrap_or("").to_owned();
                self.read_usage(m.get("usage"));
                out.push(self.chunk(json!({"role": "assistant", "content": ""}), None));
            }
            "content_block_start" => {
                let b = v.get("content_block").unwrap_or(&Value::Null);
                let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                match str_of(b, "type") {
                    Some("tool_use") => {
                        let ti = self.tools.len() as u64;
                        self.tools.insert(index, ti);
                        let call = json!({"index": ti, "id": str_of(b, "id").unwrap_or(""), "type": "function",
                            "function": {"name": str_of(b, "name").unwrap_or(""), "arguments": ""}});
                        out.push(self.chunk(json!({"tool_calls": [call]}), None));
                    }
                    Some("text") => {
                        if let Some(t) = str_of(b, "text").filter(|t| !t.is_empty()) {
                            out.push(self.chunk(json!({"content": t}), None));
                        }
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let d = v.get("delta").unwrap_or(&Value::Null);
                let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                match str_of(d, "type") {
                    Some("text_delta") => {
                        out.push(self.chunk(json!({"content": str_of(d, "text").unwrap_or("")}), None))
                    }
                    Some("thinking_delta") => {
                        out.push(self.chunk(json!({"reasoning_content": str_of(d, "thinking").unwrap_or("")}), None))
                    }
                    Some("input_json_delta") => {
                        let ti = self.tools.get(&index).copied().unwrap_or(0);
                        let call =
                            json!({"index": ti, "function": {"arguments": str_of(d, "partial_json").unwrap_or("")}});
                        out.push(self.chunk(json!({"tool_calls": [call]}), None));
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                self.read_usage(v.get("usage"));
                if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.finished = true;
                    out.push(self.chunk(json!({}), Some(finish_reason(r))));
                }
            }
            "message_stop" => self.close(out),
            "error" => {
                let e = v.get("error").unwrap_or(&Value::Null);
                let message = str_of(e, "message").unwrap_or("the upstream stream failed");
                let code = str_of(e, "code").or_else(|| str_of(e, "type")).unwrap_or("upstream_stream_error");
                self.error(code, message, out);
            }
            _ => {}
        }
    }

    fn finish(&mut self, out: &mut Vec<Event>) {
        self.close(out);
    }

    fn error(&mut self, code: &str, message: &str, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        out.push(data(&json!({"error": {"message": message, "type": "server_error", "code": code}})));
        self.done = true;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Text(u64),
    Thinking(u64),
    Tool { index: u64, call: u64 },
}

impl Block {
    fn index(self) -> u64 {
        match self {
            Block::Text(i) | Block::Thinking(i) | Block::Tool { index: i, .. } => i,
        }
    }
}

/// OpenAI chat chunks → Anthropic Messages events.
pub struct ChatToMessages {
    started: bool,
    open: Option<Block>,
    next: u64,
    stop: Option<&'static str>,
    usage: Option<Value>,
    done: bool,
}

impl Default for ChatToMessages {
    fn default() -> Self {
        Self::new()
    }
}

impl ChatToMessages {
    /// A new stream.
    pub fn new() -> Self {
        ChatToMessages { started: false, open: None, next: 0, stop: None, usage: None, done: false }
    }

    fn start(&mut self, chunk: &Value, out: &mut Vec<Event>) {
        if self.started {
            return;
        }
        self.started = true;
        let msg = json!({
            "id": format!("msg_{}", str_of(chunk, "id").unwrap_or("ferroute")), "type": "message", "role": "assistant",
            "model": str_of(chunk, "model").unwrap_or(""), "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        });
        out.push(named("message_start", &json!({"type": "message_start", "message": msg})));
    }

    fn close_block(&mut self, out: &mut Vec<Event>) {
        if let Some(b) = self.open.take() {
            out.push(named("content_block_stop", &json!({"type": "content_block_stop", "index": b.index()})));
        }
    }

    fn open_block(&mut self, block: Block, start: Value, out: &mut Vec<Event>) {
        self.close_block(out);
        out.push(named(
            "content_block_start",
            &json!({"type": "content_block_start", "index": block.index(), "content_block": start}),
        ));
        self.open = Some(block);
        self.next += 1;
    }

    fn delta(&self, out: &mut Vec<Event>, delta: Value) {
        let index = self.open.map_or(0, Block::index);
        out.push(named("content_block_delta", &json!({"type": "content_block_delta", "index": index, "delta": delta})));
    }

    fn tool_calls(&mut self, calls: &[Value], out: &mut Vec<Event>) {
        for c in calls {
            let call = c.get("index").and_then(Value::as_u64).unwrap_or(0);
            let same = matches!(self.open, Some(Block::Tool { call: k, .. }) if k == call);
            if !same {
                let start = json!({"type": "tool_use", "id": str_of(c, "id").unwrap_or(""),
                    "name": c.pointer("/function/name").and_then(Value::as_str).unwrap_or(""), "input": {}});
                self.open_block(Block::Tool { index: self.next, call }, start, out);
            }
            if let Some(a) = c.pointer("/function/arguments").and_then(Value::as_str).filter(|a| !a.is_empty()) {
                self.delta(out, json!({"type": "input_json_delta", "partial_json": a}));
            }
        }
    }

    fn close(&mut self, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        self.start(&Value::Null, out);
        self.close_block(out);
        let usage = messages_usage(self.usage.as_ref());
        out.push(named(
            "message_delta",
            &json!({"type": "message_delta", "delta": {"stop_reason": self.stop.unwrap_or("end_turn"), "stop_sequence": null}, "usage": usage}),
        ));
        out.push(named("message_stop", &json!({"type": "message_stop"})));
        self.done = true;
    }
}

impl Translate for ChatToMessages {
    fn push(&mut self, _name: Option<&str>, payload: &str, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        if payload.trim() == "[DONE]" {
            self.close(out);
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(payload) else { return };
        if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
            let message = str_of(e, "message").unwrap_or("the upstream stream failed");
            let code = str_of(e, "code").unwrap_or("upstream_stream_error");
            self.error(code, message, out);
            return;
        }
        self.start(&v, out);
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            self.usage = Some(u.clone());
        }
        let Some(choice) = v.pointer("/choices/0") else { return };
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(r) = delta.get("reasoning_content").and_then(Value::as_str).filter(|r| !r.is_empty()) {
            if !matches!(self.open, Some(Block::Thinking(_))) {
                self.open_block(Block::Thinking(self.next), json!({"type": "thinking", "thinking": ""}), out);
            }
            self.delta(out, json!({"type": "thinking_delta", "thinking": r}));
        }
        if let Some(t) = delta.get("content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
            if !matches!(self.open, Some(Block::Text(_))) {
                self.open_block(Block::Text(self.next), json!({"type": "text", "text": ""}), out);
            }
            self.delta(out, json!({"type": "text_delta", "text": t}));
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            self.tool_calls(calls, out);
        }
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            self.stop = Some(stop_reason(f));
        }
    }

    fn finish(&mut self, out: &mut Vec<Event>) {
        self.close(out);
    }

    fn error(&mut self, code: &str, message: &str, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        out.push(named(
            "error",
            &json!({"type": "error", "error": {"type": "api_error", "message": message, "code": code}}),
        ));
        self.done = true;
    }
}

/// OpenAI chat chunks → Responses API events.
pub struct ChatToResponses {
    builder: ResponseBuilder,
    seq: u64,
    started: bool,
    text: Option<usize>,
    tools: BTreeMap<u64, usize>,
    done: bool,
}

impl ChatToResponses {
    /// A stream building the response that `builder` describes.
    pub fn new(builder: ResponseBuilder) -> Self {
        ChatToResponses { builder, seq: 0, started: false, text: None, tools: BTreeMap::new(), done: false }
    }

    fn emit(&mut self, kind: &str, mut v: Value, out: &mut Vec<Event>) {
        v["type"] = kind.into();
        v["sequence_number"] = self.seq.into();
        self.seq += 1;
        out.push(named(kind, &v));
    }

    fn start(&mut self, out: &mut Vec<Event>) {
        if self.started {
            return;
        }
        self.started = true;
        let r = self.builder.object("in_progress");
        self.emit("response.created", json!({"response": r}), out);
        self.emit("response.in_progress", json!({"response": r}), out);
    }

    fn close_text(&mut self, out: &mut Vec<Event>) {
        let Some(i) = self.text.take() else { return };
        let item = self.builder.complete(i);
        let (id, text) = (item["id"].clone(), item["content"][0]["text"].clone());
        self.emit(
            "response.output_text.done",
            json!({"item_id": id, "output_index": i, "content_index": 0, "text": text, "logprobs": []}),
            out,
        );
        self.emit(
            "response.content_part.done",
            json!({"item_id": id, "output_index": i, "content_index": 0, "part": item["content"][0]}),
            out,
        );
        self.emit("response.output_item.done", json!({"output_index": i, "item": item}), out);
    }

    fn close_tools(&mut self, out: &mut Vec<Event>) {
        for (_, i) in std::mem::take(&mut self.tools) {
            let item = self.builder.complete(i);
            self.emit(
                "response.function_call_arguments.done",
                json!({"item_id": item["id"], "output_index": i, "arguments": item["arguments"]}),
                out,
            );
            self.emit("response.output_item.done", json!({"output_index": i, "item": item}), out);
        }
    }

    fn close(&mut self, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        self.start(out);
        self.close_text(out);
        self.close_tools(out);
        let r = self.builder.finished();
        let kind = if r["status"] == "incomplete" { "response.incomplete" } else { "response.completed" };
        self.emit(kind, json!({"response": r}), out);
        self.done = true;
    }
}

impl Translate for ChatToResponses {
    fn push(&mut self, _name: Option<&str>, payload: &str, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        if payload.trim() == "[DONE]" {
            self.close(out);
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(payload) else { return };
        if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
            let message = str_of(e, "message").unwrap_or("the upstream stream failed").to_owned();
            let code = str_of(e, "code").unwrap_or("upstream_stream_error").to_owned();
            self.error(&code, &message, out);
            return;
        }
        self.builder.observe_chunk(&v);
        self.start(out);
        let Some(choice) = v.pointer("/choices/0") else { return };
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(t) = delta.get("content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
            let i = match self.text {
                Some(i) => i,
                None => {
                    let i = self.builder.open_message();
                    self.text = Some(i);
                    let item = self.builder.item(i);
                    let id = item["id"].clone();
                    self.emit("response.output_item.added", json!({"output_index": i, "item": item}), out);
                    self.emit(
                        "response.content_part.added",
                        json!({"item_id": id, "output_index": i, "content_index": 0,
                            "part": {"type": "output_text", "text": "", "annotations": []}}),
                        out,
                    );
                    i
                }
            };
            let id = self.builder.append_text(i, t);
            self.emit(
                "response.output_text.delta",
                json!({"item_id": id, "output_index": i, "content_index": 0, "delta": t, "logprobs": []}),
                out,
            );
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for c in calls {
                let k = c.get("index").and_then(Value::as_u64).unwrap_or(0);
                let i = match self.tools.get(&k) {
                    Some(i) => *i,
                    None => {
                        self.close_text(out);
                        let call_id = str_of(c, "id").unwrap_or("").to_owned();
                        let name = c.pointer("/function/name").and_then(Value::as_str).unwrap_or("").to_owned();
                        let i = self.builder.open_call(&call_id, &name);
                        self.tools.insert(k, i);
                        let item = self.builder.item(i);
                        self.emit("response.output_item.added", json!({"output_index": i, "item": item}), out);
                        i
                    }
                };
                if let Some(a) = c.pointer("/function/arguments").and_then(Value::as_str).filter(|a| !a.is_empty()) {
                    let id = self.builder.append_arguments(i, a);
                    self.emit(
                        "response.function_call_arguments.delta",
                        json!({"item_id": id, "output_index": i, "delta": a}),
                        out,
                    );
                }
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<Event>) {
        self.close(out);
    }

    fn error(&mut self, code: &str, message: &str, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        self.start(out);
        let r = self.builder.failed(code, message);
        self.emit("response.failed", json!({"response": r}), out);
        self.done = true;
    }
}
