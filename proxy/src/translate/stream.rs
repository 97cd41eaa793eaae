//! Stream translation as synchronous machines: each takes the upstream's SSE events one by one
//! and emits the client's events. They chain (an Anthropic stream reaches a Responses client
//! through chat chunks), and each can close its stream with an error in its own format.

use super::wire::{AntEvent, AntUsage, ChatCompletion, ChatToolCall, ChatUsage, quote};
use super::{chat_usage, finish_reason, stop_reason, str_of};
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
    buf.reserve(events.iter().map(|(n, d)| d.len() + n.as_ref().map_or(0, String::len) + 16).sum());
    for (name, data) in events {
        if let Some(n) = name {
            buf.extend_from_slice(b"event: ");
            buf.extend_from_slice(n.as_bytes());
            buf.push(b'\n');
        }
        if !data.contains('\n') {
            buf.extend_from_slice(b"data: ");
            buf.extend_from_slice(data.as_bytes());
            buf.extend_from_slice(b"\n\n");
            continue;
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

pub(crate) fn named(name: &str, v: &Value) -> Event {
    (Some(name.to_owned()), v.to_string())
}

/// Anthropic Messages events → OpenAI chat chunks.
pub struct MessagesToChat {
    /// Every chunk starts with the same id, created time and model.
    prefix: String,
    created: u64,
    include_usage: bool,
    usage: AntUsage,
    tools: BTreeMap<u64, u64>,
    finished: bool,
    done: bool,
}

/// The end of a chunk that finishes nothing.
const CHUNK_END: &str = r#","finish_reason":null,"logprobs":null}]}"#;

impl MessagesToChat {
    /// `include_usage`: the client asked for a usage chunk (`stream_options.include_usage`).
    pub fn new(created: u64, include_usage: bool) -> Self {
        let mut t = MessagesToChat {
            prefix: String::new(),
            created,
            include_usage,
            usage: AntUsage::default(),
            tools: BTreeMap::new(),
            finished: false,
            done: false,
        };
        t.set_prefix("ferroute", "");
        t
    }

    fn set_prefix(&mut self, id: &str, model: &str) {
        self.prefix = format!(
            r#"{{"id":{},"object":"chat.completion.chunk","created":{},"model":{},"choices":[{{"index":0,"delta":"#,
            quote(&format!("chatcmpl-{id}")),
            self.created,
            quote(model)
        );
    }

    fn chunk(&self, delta: &str, finish: Option<&str>) -> Event {
        let mut s = String::with_capacity(self.prefix.len() + delta.len() + CHUNK_END.len() + 16);
        s.push_str(&self.prefix);
        s.push_str(delta);
        match finish {
            Some(f) => {
                s.push_str(r#","finish_reason":""#);
                s.push_str(f);
                s.push_str(r#"","logprobs":null}]}"#);
            }
            None => s.push_str(CHUNK_END),
        }
        (None, s)
    }

    /// Takes the counts an event reports (a `message_delta` may carry only some of them).
    fn read_usage(&mut self, u: Option<AntUsage>) {
        let Some(u) = u else { return };
        let keep = |new: u64, old: u64| if new > 0 { new } else { old };
        self.usage = AntUsage {
            input_tokens: keep(u.input_tokens, self.usage.input_tokens),
            output_tokens: keep(u.output_tokens, self.usage.output_tokens),
            cache_read_input_tokens: keep(u.cache_read_input_tokens, self.usage.cache_read_input_tokens),
            cache_creation_input_tokens: keep(u.cache_creation_input_tokens, self.usage.cache_creation_input_tokens),
        };
    }

    fn close(&mut self, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        if !self.finished {
            out.push(self.chunk("{}", Some("stop")));
        }
        if self.include_usage {
            let u = self.usage;
            let usage =
                chat_usage(u.input_tokens, u.output_tokens, u.cache_read_input_tokens, u.cache_creation_input_tokens);
            // The usage chunk has no choices: the prefix up to `"choices":[`.
            let head = self.prefix.split_once(r#""choices":["#).map_or("{", |(h, _)| h);
            out.push((None, format!(r#"{head}"choices":[],"usage":{usage}}}"#)));
        }
        out.push((None, "[DONE]".into()));
        self.done = true;
    }
}

/// A text or tool-input delta in exactly the shape Anthropic writes it, found without parsing:
/// `{"type":"content_block_delta","index":N,"delta":{"type":"text_delta","text":"…"}}`.
/// Returns the block index, whether it is tool input, and the string literal as written
/// (still escaped, so it can be copied into the chat chunk as it is). Anything else is `None`
/// and takes the full parse.
fn quick_delta(payload: &str) -> Option<(u64, bool, &str)> {
    let rest = payload.strip_prefix(r#"{"type":"content_block_delta","index":"#)?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let index: u64 = rest[..digits].parse().ok()?;
    let rest = &rest[digits..];
    let (json, rest) = if let Some(r) = rest.strip_prefix(r#","delta":{"type":"text_delta","text":"#) {
        (false, r)
    } else {
        (true, rest.strip_prefix(r#","delta":{"type":"input_json_delta","partial_json":"#)?)
    };
    let end = super::passthrough::skip_string(rest.as_bytes(), 0)?;
    let literal = &rest[..end];
    (&rest[end..] == "}}" && valid_literal(literal.as_bytes())).then_some((index, json, literal))
}

/// Whether a quoted string literal is valid JSON as it stands (it is copied, not re-encoded):
/// no raw control characters, and only JSON's escapes. Anything else takes the full parse.
fn valid_literal(lit: &[u8]) -> bool {
    let inner = &lit[1..lit.len().saturating_sub(1).max(1)];
    let mut i = 0;
    while i < inner.len() {
        match inner[i] {
            b if b < 0x20 => return false,
            b'\\' => match inner.get(i + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                Some(b'u') if inner.get(i + 2..i + 6).is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) => i += 6,
                _ => return false,
            },
            _ => i += 1,
        }
    }
    true
}

impl Translate for MessagesToChat {
    fn push(&mut self, name: Option<&str>, payload: &str, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        if let Some((index, json, literal)) = quick_delta(payload) {
            let delta = if json {
                let ti = self.tools.get(&index).copied().unwrap_or(0);
                format!(r#"{{"tool_calls":[{{"index":{ti},"function":{{"arguments":{literal}}}}}]}}"#)
            } else {
                [r#"{"content":"#, literal, "}"].concat()
            };
            out.push(self.chunk(&delta, None));
            return;
        }
        let Ok(v) = serde_json::from_str::<AntEvent<'_>>(payload) else { return };
        let kind = v.kind.as_deref().or(name).unwrap_or("");
        match kind {
            "message_start" => {
                if let Some(m) = &v.message {
                    let (id, model) = (m.id.as_deref().unwrap_or("ferroute"), m.model.as_deref().unwrap_or(""));
                    self.set_prefix(id, model);
                    self.read_usage(m.usage);
                }
                out.push(self.chunk(r#"{"role":"assistant","content":""}"#, None));
            }
            "content_block_start" => match &v.content_block {
                Some(b) if b.kind == "tool_use" => {
                    let ti = self.tools.len() as u64;
                    self.tools.insert(v.index, ti);
                    let delta = format!(
                        r#"{{"tool_calls":[{{"index":{ti},"id":{},"type":"function","function":{{"name":{},"arguments":""}}}}]}}"#,
                        quote(b.id.as_deref().unwrap_or("")),
                        quote(b.name.as_deref().unwrap_or(""))
                    );
                    out.push(self.chunk(&delta, None));
                }
                Some(b) if b.kind == "text" => {
                    if let Some(t) = b.text.as_deref().filter(|t| !t.is_empty()) {
                        out.push(self.chunk(&format!(r#"{{"content":{}}}"#, quote(t)), None));
                    }
                }
                _ => {}
            },
            "content_block_delta" => {
                let Some(d) = &v.delta else { return };
                match d.kind.as_deref() {
                    Some("text_delta") => {
                        let text = d.text.as_deref().unwrap_or("");
                        out.push(self.chunk(&format!(r#"{{"content":{}}}"#, quote(text)), None));
                    }
                    Some("thinking_delta") => {
                        let text = d.thinking.as_deref().unwrap_or("");
                        out.push(self.chunk(&format!(r#"{{"reasoning_content":{}}}"#, quote(text)), None));
                    }
                    Some("input_json_delta") => {
                        let ti = self.tools.get(&v.index).copied().unwrap_or(0);
                        let args = quote(d.partial_json.as_deref().unwrap_or(""));
                        let delta = format!(r#"{{"tool_calls":[{{"index":{ti},"function":{{"arguments":{args}}}}}]}}"#);
                        out.push(self.chunk(&delta, None));
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                self.read_usage(v.usage);
                if let Some(r) = v.delta.as_ref().and_then(|d| d.stop_reason.as_deref()) {
                    self.finished = true;
                    out.push(self.chunk("{}", Some(finish_reason(r))));
                }
            }
            "message_stop" => self.close(out),
            "error" => {
                let e = v.error.unwrap_or(Value::Null);
                let message = str_of(&e, "message").unwrap_or("the upstream stream failed");
                let code = str_of(&e, "code").or_else(|| str_of(&e, "type")).unwrap_or("upstream_stream_error");
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

/// One event of a chat stream, as a translator reading chat sees it.
pub(crate) enum ChatInput<'a> {
    /// `[DONE]`.
    Done,
    /// An error object: (code, message).
    Error(String, String),
    /// A chunk.
    Chunk(ChatCompletion<'a>),
    /// Not JSON: skipped.
    Skip,
}

pub(crate) fn read_chat(payload: &str) -> ChatInput<'_> {
    if payload.trim() == "[DONE]" {
        return ChatInput::Done;
    }
    let Ok(v) = serde_json::from_str::<ChatCompletion<'_>>(payload) else { return ChatInput::Skip };
    match v.error.as_ref().filter(|e| !e.is_null()) {
        Some(e) => ChatInput::Error(
            str_of(e, "code").unwrap_or("upstream_stream_error").to_owned(),
            str_of(e, "message").unwrap_or("the upstream stream failed").to_owned(),
        ),
        None => ChatInput::Chunk(v),
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
        let v = match read_chat(payload) {
            ChatInput::Done => return self.close(out),
            ChatInput::Error(code, message) => return self.error(&code, &message, out),
            ChatInput::Skip => return,
            ChatInput::Chunk(v) => v,
        };
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
        out.push(named(
            "error",
            &json!({"type": "error", "error": {"type": "api_error", "message": message, "code": code}}),
        ));
        self.done = true;
    }
}
