//! Chat chunks → Responses API events: the stream a Responses client sees, built on the
//! [`ResponseBuilder`] that also makes whole Response objects.

use super::responses::ResponseBuilder;
use super::stream::{Event, Translate, chat_chunk, named};
use serde_json::{Value, json};
use std::collections::BTreeMap;

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

    /// Text for the open message item (opened on the first text).
    fn text_delta(&mut self, t: &str, out: &mut Vec<Event>) {
        let i = match self.text {
            Some(i) => i,
            None => {
                let i = self.builder.open_message();
                self.text = Some(i);
                let item = self.builder.item(i);
                let id = item["id"].clone();
                self.emit("response.output_item.added", json!({"output_index": i, "item": item}), out);
                let part = json!({"type": "output_text", "text": "", "annotations": []});
                self.emit(
                    "response.content_part.added",
                    json!({"item_id": id, "output_index": i, "content_index": 0, "part": part}),
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
        let Some(v) = chat_chunk(self, payload, out) else { return };
        let choice = v.choices.first();
        self.builder.observe(v.usage, choice.and_then(|c| c.finish_reason.as_deref()));
        self.start(out);
        let Some(delta) = choice.and_then(|c| c.delta.as_ref()) else { return };
        if let Some(t) = delta.content.as_deref().filter(|t| !t.is_empty()) {
            self.text_delta(t, out);
        }
        for c in delta.tool_calls.iter().flatten() {
            let f = c.function.as_ref();
            let i = match self.tools.get(&c.index) {
                Some(i) => *i,
                None => {
                    self.close_text(out);
                    let name = f.and_then(|f| f.name.as_deref()).unwrap_or("");
                    let i = self.builder.open_call(c.id.as_deref().unwrap_or(""), name);
                    self.tools.insert(c.index, i);
                    let item = self.builder.item(i);
                    self.emit("response.output_item.added", json!({"output_index": i, "item": item}), out);
                    i
                }
            };
            if let Some(a) = f.and_then(|f| f.arguments.as_deref()).filter(|a| !a.is_empty()) {
                let id = self.builder.append_arguments(i, a);
                self.emit(
                    "response.function_call_arguments.delta",
                    json!({"item_id": id, "output_index": i, "delta": a}),
                    out,
                );
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
