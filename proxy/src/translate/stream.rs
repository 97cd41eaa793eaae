//! Stream translation as synchronous machines: each takes the upstream's SSE events one by one
//! and emits the client's events. They chain (an Anthropic stream reaches a Responses client
//! through chat chunks), and each can close its stream with an error in its own format. Here:
//! the event type, the trait, SSE writing, chaining, and the error events every client API
//! gets, translated or not. The machines live in `stream_chat`, `stream_messages` and
//! `responses_stream`.

use super::ClientApi;
use super::str_of;
use super::wire::{ChatCompletion, Out};
use serde_json::{Value, json};

/// One SSE event: the `event:` name, if any, and the `data:` payload.
pub type Event = (Option<String>, String);

/// A stream translator.
pub trait Translate: Send + Sync {
    /// One upstream event; the translated events are appended to `out`.
    fn push(&mut self, name: Option<&str>, data: &str, out: &mut Vec<Event>);
    /// The upstream ended cleanly: close whatever is still open.
    fn finish(&mut self, out: &mut Vec<Event>);
    /// End the stream with an error in the client's format.
    fn error(&mut self, code: &str, message: &str, out: &mut Vec<Event>);
}

impl Translate for Box<dyn Translate> {
    fn push(&mut self, name: Option<&str>, data: &str, out: &mut Vec<Event>) {
        (**self).push(name, data, out);
    }

    fn finish(&mut self, out: &mut Vec<Event>) {
        (**self).finish(out);
    }

    fn error(&mut self, code: &str, message: &str, out: &mut Vec<Event>) {
        (**self).error(code, message, out);
    }
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

/// Chat chunks written by hand: the id, created time and model every chunk of a stream
/// starts with, written once.
#[derive(Debug, Default)]
pub(crate) struct ChunkPrefix(String);

impl ChunkPrefix {
    /// The prefix of chunks with these fields.
    pub(crate) fn new(id: &str, created: u64, model: &str) -> Self {
        let mut o = Out::with_capacity(128);
        o.raw(r#"{"id":"#).str(id).raw(r#","object":"chat.completion.chunk","created":"#).num(created);
        o.raw(r#","model":"#).str(model).raw(r#","choices":[{"index":0,"delta":"#);
        ChunkPrefix(o.0)
    }

    /// A chunk of `delta` (JSON text), finishing with `finish` if given.
    pub(crate) fn chunk(&self, delta: &str, finish: Option<&str>) -> Event {
        let mut o = Out::with_capacity(self.0.len() + delta.len() + 48);
        o.raw(&self.0).raw(delta).raw(r#","finish_reason":"#);
        match finish {
            Some(f) => o.str(f),
            None => o.raw("null"),
        };
        o.raw("}]}");
        (None, o.0)
    }

    /// A chunk whose delta is one string field.
    pub(crate) fn text(&self, key: &str, text: &str) -> Event {
        let mut d = Out::with_capacity(text.len() + key.len() + 8);
        d.raw("{\"").raw(key).raw("\":").str(text).raw("}");
        self.chunk(&d.0, None)
    }
}

pub(crate) fn named(name: &str, v: &Value) -> Event {
    (Some(name.to_owned()), v.to_string())
}

/// A mid-stream error as a chat client reads it (the OpenAI SDKs raise on an `error` object).
pub fn chat_error(code: &str, message: &str) -> Event {
    (None, json!({"error": {"message": message, "type": "server_error", "code": code}}).to_string())
}

/// A mid-stream error as an Anthropic client reads it: an `error` event.
pub fn messages_error(code: &str, message: &str) -> Event {
    named("error", &json!({"type": "error", "error": {"type": "api_error", "message": message, "code": code}}))
}

/// A mid-stream error as a Gemini client reads it: an `error` object, as the API sends.
pub fn gemini_error(code: &str, message: &str) -> Event {
    (
        None,
        json!({"error": {"code": 500, "message": message, "status": "INTERNAL", "details": [{"reason": code}]}})
            .to_string(),
    )
}

/// The error event ending a stream of `api` that is passed through untranslated.
pub fn error_event(api: ClientApi, code: &str, message: &str) -> Event {
    match api {
        ClientApi::Messages => messages_error(code, message),
        ClientApi::Chat => chat_error(code, message),
        // The Responses API's own `error` event.
        ClientApi::Responses => {
            named("error", &json!({"type": "error", "code": code, "message": message, "param": null}))
        }
        ClientApi::Gemini => gemini_error(code, message),
    }
}

/// The next chunk of a chat stream for a translator reading chat: the end (`[DONE]`) and an
/// upstream error are handed to `t` (`finish`, `error`), and what is not JSON is skipped;
/// only a chunk to translate comes back.
pub(crate) fn chat_chunk<'a, T: Translate + ?Sized>(
    t: &mut T,
    payload: &'a str,
    out: &mut Vec<Event>,
) -> Option<ChatCompletion<'a>> {
    if payload.trim() == "[DONE]" {
        t.finish(out);
        return None;
    }
    let v = serde_json::from_str::<ChatCompletion<'_>>(payload).ok()?;
    if let Some(e) = v.error.as_ref().filter(|e| !e.is_null()) {
        let code = str_of(e, "code").unwrap_or("upstream_stream_error");
        let message = str_of(e, "message").unwrap_or("the upstream stream failed");
        t.error(code, message, out);
        return None;
    }
    Some(v)
}
