//! Anthropic Messages events → OpenAI chat chunks. Text and tool-input deltas in the shape
//! Anthropic writes them are copied without a parse; everything else is read typed.

use super::stream::{Event, Translate, chat_error};
use super::wire::{AntEvent, AntUsage, quote};
use super::{chat_usage, finish_reason, str_of};
use serde_json::Value;
use std::collections::BTreeMap;

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
        out.push(chat_error(code, message));
        self.done = true;
    }
}
