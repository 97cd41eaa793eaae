//! OpenAI chat chunks → Anthropic Messages events: content blocks opened and closed in order,
//! tool-call argument deltas as `input_json_delta`, usage in the closing `message_delta`.

use super::stop_reason;
use super::stream::{Event, Translate, chat_chunk, messages_error};
use super::wire::{ChatToolCall, ChatUsage, quote};

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
    usage: Option<ChatUsage>,
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

    fn start(&mut self, id: &str, model: &str, out: &mut Vec<Event>) {
        if self.started {
            return;
        }
        self.started = true;
        let msg = format!(
            r#"{{"type":"message_start","message":{{"id":{},"type":"message","role":"assistant","model":{},"content":[],"stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":0,"output_tokens":0}}}}}}"#,
            quote(&format!("msg_{id}")),
            quote(model)
        );
        out.push((Some("message_start".into()), msg));
    }

    fn close_block(&mut self, out: &mut Vec<Event>) {
        if let Some(b) = self.open.take() {
            let i = b.index();
            out.push((Some("content_block_stop".into()), format!(r#"{{"type":"content_block_stop","index":{i}}}"#)));
        }
    }

    /// Opens a block whose `content_block` JSON is `start`.
    fn open_block(&mut self, block: Block, start: &str, out: &mut Vec<Event>) {
        self.close_block(out);
        let i = block.index();
        out.push((
            Some("content_block_start".into()),
            format!(r#"{{"type":"content_block_start","index":{i},"content_block":{start}}}"#),
        ));
        self.open = Some(block);
        self.next += 1;
    }

    /// A delta of the open block; `delta` is its JSON.
    fn delta(&self, out: &mut Vec<Event>, delta: &str) {
        let index = self.open.map_or(0, Block::index);
        out.push((
            Some("content_block_delta".into()),
            format!(r#"{{"type":"content_block_delta","index":{index},"delta":{delta}}}"#),
        ));
    }

    fn tool_calls(&mut self, calls: &[ChatToolCall<'_>], out: &mut Vec<Event>) {
        for c in calls {
            let same = matches!(self.open, Some(Block::Tool { call: k, .. }) if k == c.index);
            let f = c.function.as_ref();
            if !same {
                let start = format!(
                    r#"{{"type":"tool_use","id":{},"name":{},"input":{{}}}}"#,
                    quote(c.id.as_deref().unwrap_or("")),
                    quote(f.and_then(|f| f.name.as_deref()).unwrap_or(""))
                );
                self.open_block(Block::Tool { index: self.next, call: c.index }, &start, out);
            }
            if let Some(a) = f.and_then(|f| f.arguments.as_deref()).filter(|a| !a.is_empty()) {
                self.delta(out, &format!(r#"{{"type":"input_json_delta","partial_json":{}}}"#, quote(a)));
            }
        }
    }

    fn close(&mut self, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        self.start("ferroute", "", out);
        self.close_block(out);
        let usage =
            serde_json::to_string(&self.usage.unwrap_or_default().to_anthropic()).unwrap_or_else(|_| "{}".into());
        out.push((
            Some("message_delta".into()),
            format!(
                r#"{{"type":"message_delta","delta":{{"stop_reason":"{}","stop_sequence":null}},"usage":{usage}}}"#,
                self.stop.unwrap_or("end_turn")
            ),
        ));
        out.push((Some("message_stop".into()), r#"{"type":"message_stop"}"#.into()));
        self.done = true;
    }
}

impl Translate for ChatToMessages {
    fn push(&mut self, _name: Option<&str>, payload: &str, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        let Some(v) = chat_chunk(self, payload, out) else { return };
        self.start(v.id.as_deref().unwrap_or("ferroute"), v.model.as_deref().unwrap_or(""), out);
        if v.usage.is_some() {
            self.usage = v.usage;
        }
        let Some(choice) = v.choices.first() else { return };
        if let Some(delta) = &choice.delta {
            if let Some(r) = delta.reasoning_content.as_deref().filter(|r| !r.is_empty()) {
                if !matches!(self.open, Some(Block::Thinking(_))) {
                    self.open_block(Block::Thinking(self.next), r#"{"type":"thinking","thinking":""}"#, out);
                }
                self.delta(out, &format!(r#"{{"type":"thinking_delta","thinking":{}}}"#, quote(r)));
            }
            if let Some(t) = delta.content.as_deref().filter(|t| !t.is_empty()) {
                if !matches!(self.open, Some(Block::Text(_))) {
                    self.open_block(Block::Text(self.next), r#"{"type":"text","text":""}"#, out);
                }
                self.delta(out, &format!(r#"{{"type":"text_delta","text":{}}}"#, quote(t)));
            }
            if let Some(calls) = &delta.tool_calls {
                self.tool_calls(calls, out);
            }
        }
        if let Some(f) = choice.finish_reason.as_deref() {
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
        out.push(messages_error(code, message));
        self.done = true;
    }
}
