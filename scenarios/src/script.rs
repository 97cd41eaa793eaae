//! Scripts: what an upstream does, per call or by the clock.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One SSE event on a stream's timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SseEvent {
    /// Delay before this event, after the previous one (ms).
    #[serde(default)]
    pub after_ms: u64,
    /// The `event:` name, if any.
    #[serde(default)]
    pub event: Option<String>,
    /// The `data:` payload.
    pub data: String,
    /// Pads the payload to exactly this many bytes: its `{pad}` is replaced by as many `x` as
    /// that takes (for events at a size limit).
    #[serde(default)]
    pub pad_to: Option<usize>,
}

impl SseEvent {
    /// A Chat Completions text delta.
    pub fn text(after_ms: u64, text: &str) -> Self {
        let data = serde_json::json!({
            "id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": "scripted",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]
        });
        SseEvent { after_ms, event: None, data: data.to_string(), pad_to: None }
    }

    /// A keep-alive comment-like heartbeat (an empty-delta chunk).
    pub fn heartbeat(after_ms: u64) -> Self {
        let data = serde_json::json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "choices": []});
        SseEvent { after_ms, event: None, data: data.to_string(), pad_to: None }
    }

    /// A tool-call delta.
    pub fn tool_call(after_ms: u64) -> Self {
        let data = serde_json::json!({
            "id": "chatcmpl-scripted", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}}]
        });
        SseEvent { after_ms, event: None, data: data.to_string(), pad_to: None }
    }

    /// The last content chunk: an empty delta with a `finish_reason`.
    pub fn finish(after_ms: u64, reason: &str) -> Self {
        let data = serde_json::json!({
            "id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": "scripted",
            "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]
        });
        SseEvent { after_ms, event: None, data: data.to_string(), pad_to: None }
    }

    /// A usage-only chunk.
    pub fn usage(after_ms: u64) -> Self {
        let data = serde_json::json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "choices": [],
            "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}});
        SseEvent { after_ms, event: None, data: data.to_string(), pad_to: None }
    }

    /// An Anthropic Messages event, named after its `type`.
    pub fn anthropic(after_ms: u64, data: serde_json::Value) -> Self {
        let event = data.get("type").and_then(|t| t.as_str()).map(str::to_owned);
        SseEvent { after_ms, event, data: data.to_string(), pad_to: None }
    }

    /// An Anthropic text delta of block `index`, in the key order Anthropic writes it.
    pub fn anthropic_text(after_ms: u64, index: u64, text: &str) -> Self {
        let text = serde_json::Value::from(text);
        SseEvent {
            after_ms,
            pad_to: None,
            event: Some("content_block_delta".into()),
            data: format!(
                r#"{{"type":"content_block_delta","index":{index},"delta":{{"type":"text_delta","text":{text}}}}}"#
            ),
        }
    }

    /// An Anthropic `message_start` for `model`.
    pub fn anthropic_start(model: &str, id: &str) -> Self {
        SseEvent::anthropic(
            0,
            serde_json::json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant",
                "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 3, "output_tokens": 0}}}),
        )
    }

    /// A whole Anthropic text answer as a stream: one text block of `pieces`, `chunk_ms` apart,
    /// then `end_turn` and `message_stop`.
    pub fn anthropic_text_stream(model: &str, pieces: &[String], chunk_ms: u64) -> Vec<Self> {
        let mut events = vec![
            SseEvent::anthropic_start(model, "msg_scripted"),
            SseEvent::anthropic(
                0,
                serde_json::json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
        ];
        events.extend(pieces.iter().map(|p| SseEvent::anthropic_text(chunk_ms, 0, p)));
        events.push(SseEvent::anthropic(0, serde_json::json!({"type": "content_block_stop", "index": 0})));
        events.push(SseEvent::anthropic(
            0,
            serde_json::json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                "usage": {"output_tokens": pieces.len()}}),
        ));
        events.push(SseEvent::anthropic(0, serde_json::json!({"type": "message_stop"})));
        events
    }

    /// The payload as written: `data` with `{pad}` filled to `pad_to` bytes.
    pub fn payload(&self) -> std::borrow::Cow<'_, str> {
        padded(&self.data, self.pad_to)
    }

    /// The final `[DONE]`.
    pub fn done(after_ms: u64) -> Self {
        SseEvent { after_ms, event: None, data: "[DONE]".into(), pad_to: None }
    }
}

/// `text` with its `{pad}` filled with `x` up to `pad_to` bytes in all (unchanged without one).
pub fn padded(text: &str, pad_to: Option<usize>) -> std::borrow::Cow<'_, str> {
    let Some(to) = pad_to else { return text.into() };
    let fill = to.saturating_sub(text.len().saturating_sub("{pad}".len()));
    text.replacen("{pad}", &"x".repeat(fill), 1).into()
}

/// One behaviour for one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Behaviour {
    /// Answer with a status, headers and body after `latency_ms`.
    Respond {
        /// HTTP status.
        status: u16,
        /// Extra headers.
        #[serde(default)]
        headers: BTreeMap<String, String>,
        /// Body text (JSON or not).
        #[serde(default)]
        body: String,
        /// Pads the body to exactly this many bytes: its `{pad}` is replaced by as many `x` as
        /// that takes (for bodies at a size limit).
        #[serde(default)]
        pad_to: Option<usize>,
        /// Delay before the headers.
        #[serde(default)]
        latency_ms: u64,
    },
    /// A 200 completion echoing the last user message (streamed word by word when the request
    /// asks for a stream, `chunk_ms` apart).
    Echo {
        /// Delay before the headers.
        #[serde(default)]
        latency_ms: u64,
        /// Delay between streamed words.
        #[serde(default)]
        chunk_ms: u64,
    },
    /// Like `Echo`, but a request that declares tools gets a call of its first tool with
    /// `{"text": <last user text>}`, and a request whose last turn is that tool's result gets
    /// `tool said: <result>` (a whole tool loop, in either wire format).
    ToolEcho {
        /// Delay before the headers.
        #[serde(default)]
        latency_ms: u64,
        /// Delay between streamed pieces.
        #[serde(default)]
        chunk_ms: u64,
    },
    /// A 200 SSE stream playing `events`.
    Stream {
        /// Delay before the headers.
        #[serde(default)]
        latency_ms: u64,
        /// The timeline.
        events: Vec<SseEvent>,
        /// Break the connection after the events instead of ending cleanly.
        #[serde(default)]
        reset_after: bool,
        /// Write the stream in pieces of this many bytes, so that events and lines are split
        /// across network writes at arbitrary bytes (every piece of an event is sent at once).
        #[serde(default)]
        chunk_bytes: Option<usize>,
        /// How lines end: `lf` (the default), `crlf` or `cr` (all three are valid event-stream
        /// line endings).
        #[serde(default)]
        line_ending: LineEnding,
        /// Start the stream with a UTF-8 byte order mark (which a reader must skip).
        #[serde(default)]
        bom: bool,
    },
    /// One character of `text` every `chunk_ms` as a stream.
    SlowDrip {
        /// The text.
        text: String,
        /// Gap between characters.
        chunk_ms: u64,
    },
    /// Break the connection before any response.
    Reset {
        /// Delay before breaking it.
        #[serde(default)]
        latency_ms: u64,
    },
    /// Accept the request and never answer.
    Stall,
    /// `then`, with these headers added to its response (a header already there is replaced).
    WithHeaders {
        /// The headers.
        headers: BTreeMap<String, String>,
        /// The behaviour whose response gets them.
        then: Box<Behaviour>,
    },
}

/// An event-stream line ending.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LineEnding {
    /// `\n`.
    #[default]
    Lf,
    /// `\r\n`.
    Crlf,
    /// `\r`.
    Cr,
}

impl LineEnding {
    /// The bytes.
    pub fn as_str(self) -> &'static str {
        match self {
            LineEnding::Lf => "\n",
            LineEnding::Crlf => "\r\n",
            LineEnding::Cr => "\r",
        }
    }
}

impl Behaviour {
    /// A plain JSON error response.
    pub fn status(status: u16, body: &str) -> Self {
        Behaviour::Respond { status, headers: BTreeMap::new(), body: body.to_owned(), pad_to: None, latency_ms: 0 }
    }

    /// A stream of `events`, written as they come with LF line endings (`reset_after`: break
    /// the connection after them).
    pub fn stream(events: Vec<SseEvent>, reset_after: bool) -> Self {
        Behaviour::Stream {
            latency_ms: 0,
            events,
            reset_after,
            chunk_bytes: None,
            line_ending: LineEnding::Lf,
            bom: false,
        }
    }

    /// The same with headers.
    pub fn status_with(status: u16, headers: &[(&str, &str)], body: &str) -> Self {
        Behaviour::Respond {
            status,
            headers: headers.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            body: body.to_owned(),
            pad_to: None,
            latency_ms: 0,
        }
    }

    /// An echo without delays.
    pub fn echo() -> Self {
        Behaviour::Echo { latency_ms: 0, chunk_ms: 0 }
    }

    /// A tool-calling echo without delays.
    pub fn tool_echo() -> Self {
        Behaviour::ToolEcho { latency_ms: 0, chunk_ms: 0 }
    }
}

/// A time window of a scheduled script.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Window {
    /// Start of the window within the period (ms).
    pub from_ms: u64,
    /// End of the window within the period (ms, exclusive).
    pub to_ms: u64,
    /// What calls inside the window get.
    pub behaviour: Behaviour,
}

/// How a script picks the behaviour of a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum Mode {
    /// Call `n` gets step `n`; the last step repeats.
    Sequence {
        /// The steps.
        steps: Vec<Behaviour>,
    },
    /// Call `n` gets step `n mod len`.
    Cycle {
        /// The steps.
        steps: Vec<Behaviour>,
    },
    /// By the upstream's clock: the window containing `elapsed mod period_ms`, else `otherwise`.
    Schedule {
        /// The period.
        period_ms: u64,
        /// The windows.
        windows: Vec<Window>,
        /// Outside every window.
        otherwise: Box<Behaviour>,
    },
}

/// What one upstream route does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Script(pub Mode);

impl Script {
    /// Always the same behaviour.
    pub fn always(b: Behaviour) -> Self {
        Script(Mode::Sequence { steps: vec![b] })
    }

    /// These behaviours in order; the last one repeats.
    pub fn sequence(steps: Vec<Behaviour>) -> Self {
        Script(Mode::Sequence { steps })
    }

    /// The behaviour of call number `call` (0-based) at `elapsed_ms` since the upstream started.
    pub fn pick(&self, call: u64, elapsed_ms: u64) -> Behaviour {
        let fallback = || Behaviour::status(500, r#"{"error":{"message":"empty script"}}"#);
        match &self.0 {
            Mode::Sequence { steps } => {
                steps.get(call as usize).or_else(|| steps.last()).cloned().unwrap_or_else(fallback)
            }
            Mode::Cycle { steps } if !steps.is_empty() => steps[(call % steps.len() as u64) as usize].clone(),
            Mode::Cycle { .. } => fallback(),
            Mode::Schedule { period_ms, windows, otherwise } => {
                let t = elapsed_ms % (*period_ms).max(1);
                windows
                    .iter()
                    .find(|w| w.from_ms <= t && t < w.to_ms)
                    .map(|w| w.behaviour.clone())
                    .unwrap_or_else(|| (**otherwise).clone())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_repeats_last_and_cycle_wraps() {
        let s = Script::sequence(vec![Behaviour::status(503, ""), Behaviour::echo()]);
        assert_eq!(s.pick(0, 0), Behaviour::status(503, ""));
        assert_eq!(s.pick(5, 0), Behaviour::echo());
        let c = Script(Mode::Cycle { steps: vec![Behaviour::status(503, ""), Behaviour::echo()] });
        assert_eq!(c.pick(2, 0), Behaviour::status(503, ""));
        assert_eq!(c.pick(3, 0), Behaviour::echo());
    }

    #[test]
    fn schedule_by_clock() {
        let s = Script(Mode::Schedule {
            period_ms: 60_000,
            windows: vec![Window { from_ms: 0, to_ms: 20_000, behaviour: Behaviour::status(503, "") }],
            otherwise: Box::new(Behaviour::echo()),
        });
        assert_eq!(s.pick(0, 19_999), Behaviour::status(503, ""));
        assert_eq!(s.pick(0, 20_000), Behaviour::echo());
        assert_eq!(s.pick(0, 60_500), Behaviour::status(503, ""));
    }

    #[test]
    fn scripts_are_data() {
        let s: Script = toml::from_str(
            r#"
mode = "sequence"
[[steps]]
kind = "respond"
status = 429
body = "slow down"
headers = { "retry-after" = "3" }
[[steps]]
kind = "stream"
events = [{ after_ms = 10, data = "[DONE]" }]
"#,
        )
        .expect("parses");
        assert!(matches!(s.pick(0, 0), Behaviour::Respond { status: 429, .. }));
        assert!(matches!(s.pick(1, 0), Behaviour::Stream { .. }));
    }
}
