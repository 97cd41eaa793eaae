//! What the client speaks against what each provider speaks: the request body and headers
//! prepared once per provider format, and the answer turned back into the client's API.

use crate::config::Format;
use crate::edge::errors::ErrorShape;
use crate::edge::head::{Head, JsonBody};
use crate::translate::responses_stream::ChatToResponses;
use crate::translate::stream::{Chain, Translate};
use crate::translate::stream_chat::MessagesToChat;
use crate::translate::stream_messages::ChatToMessages;
use crate::translate::{Cause, ClientApi, Translated, Untranslatable, chat_messages, messages_chat, passthrough};
use crate::translate::{responses, responses::ResponseBuilder};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

/// The Anthropic API version sent when the client names none.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The wire format behind a client API (the Responses API is served over chat).
pub fn wire(api: ClientApi) -> Format {
    match api {
        ClientApi::Chat | ClientApi::Responses => Format::Openai,
        ClientApi::Messages => Format::Anthropic,
    }
}

/// A client API's name in metrics and logs.
pub fn api_name(api: ClientApi) -> &'static str {
    match api {
        ClientApi::Chat => "chat",
        ClientApi::Messages => "messages",
        ClientApi::Responses => "responses",
    }
}

/// A provider format's name in metrics and logs.
pub fn format_name(format: Format) -> &'static str {
    match format {
        Format::Openai => "openai",
        Format::Anthropic => "anthropic",
    }
}

/// The error shape a client API expects.
pub fn error_shape(api: ClientApi) -> ErrorShape {
    match api {
        ClientApi::Messages => ErrorShape::Anthropic,
        ClientApi::Chat | ClientApi::Responses => ErrorShape::OpenAi,
    }
}

/// `anthropic-beta`.
pub static ANTHROPIC_BETA: HeaderName = HeaderName::from_static("anthropic-beta");
/// `anthropic-version`.
pub static ANTHROPIC_VERSION_HEADER: HeaderName = HeaderName::from_static("anthropic-version");
/// `OpenAI-Beta`.
pub static OPENAI_BETA: HeaderName = HeaderName::from_static("openai-beta");

/// W3C trace context.
static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// Client headers that carry meaning for a provider's API, as the client sent them (values
/// that are visible ASCII only; others are not forwarded).
#[derive(Debug, Clone, Default)]
pub struct ApiHeaders {
    /// `anthropic-beta`.
    pub anthropic_beta: Option<HeaderValue>,
    /// `anthropic-version`.
    pub anthropic_version: Option<HeaderValue>,
    /// `OpenAI-Beta`.
    pub openai_beta: Option<HeaderValue>,
    /// The client's W3C `traceparent`.
    pub traceparent: Option<HeaderValue>,
}

impl ApiHeaders {
    /// Reads them from a request.
    pub fn from(headers: &HeaderMap) -> Self {
        let get = |n: &HeaderName| headers.get(n).filter(|v| v.to_str().is_ok()).cloned();
        ApiHeaders {
            anthropic_beta: get(&ANTHROPIC_BETA),
            anthropic_version: get(&ANTHROPIC_VERSION_HEADER),
            openai_beta: get(&OPENAI_BETA),
            traceparent: get(&TRACEPARENT),
        }
    }
}

/// One client request, in its client's wire format.
#[derive(Clone)]
pub struct Inbound {
    /// The API the client called.
    pub api: ClientApi,
    /// The body in `wire(api)`'s format (a Responses request already turned into chat),
    /// parsed when first read.
    pub body: JsonBody,
    /// The client's own bytes, when `body` is what it sent.
    pub raw: Option<Bytes>,
    /// Whether the client asked for a stream.
    pub stream: bool,
    /// Whether a chat client asked for a usage chunk.
    pub include_usage: bool,
    /// How many tools the request offers.
    pub tools: usize,
    /// Meaningful client headers.
    pub headers: ApiHeaders,
    /// The client's query string (`?beta=true` from Anthropic's SDK), kept on same-format hops.
    pub query: Option<String>,
    /// Builds the Response object for a Responses client.
    pub responses: Option<ResponseBuilder>,
    /// Fields left behind before any provider was chosen (Responses → chat).
    pub dropped: Vec<String>,
    /// Unix seconds, for `created` fields.
    pub created: u64,
    /// The session key (M5), when affinity is on and the request names or implies a session.
    pub session: Option<String>,
    /// How long this request's session pin lasts (the setting, or the request's override).
    pub session_ttl: std::time::Duration,
}

impl Inbound {
    /// A Chat or Messages request as the client sent it (`head` read from `raw`).
    pub fn direct(api: ClientApi, head: &Head, raw: Bytes, headers: ApiHeaders, created: u64) -> Self {
        Inbound {
            api,
            body: JsonBody::lazy(raw.clone()),
            raw: Some(raw),
            stream: head.stream.as_ref().and_then(Value::as_bool).unwrap_or(false),
            include_usage: head.include_usage,
            tools: head.tools,
            headers,
            query: None,
            responses: None,
            dropped: Vec::new(),
            created,
            session: None,
            session_ttl: std::time::Duration::ZERO,
        }
    }

    /// A Responses request: translated to chat now; `id` names the response.
    pub fn responses(body: &Value, headers: ApiHeaders, id: &str, created: u64) -> Result<Self, Untranslatable> {
        let Translated { body: chat, dropped } = responses::request(body)?;
        let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
        Ok(Inbound {
            api: ClientApi::Responses,
            tools: chat.get("tools").and_then(Value::as_array).map_or(0, Vec::len),
            body: JsonBody::parsed(chat),
            raw: None,
            stream,
            include_usage: true,
            headers,
            query: None,
            responses: Some(ResponseBuilder::new(id, created, body)),
            dropped,
            created,
            session: None,
            session_ttl: std::time::Duration::ZERO,
        })
    }
}

/// The request for providers of one format.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The translated body, when it is not already bytes; the gateway sets `model` per target.
    pub body: Value,
    /// The body as bytes: the client's own on a same-format hop, or written straight from a
    /// plain request.
    pub raw: Option<Bytes>,
    /// Advisory fields dropped on the way, for the `x-ferroute-translation-dropped` header.
    pub dropped: Vec<String>,
    /// API headers to send.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The query string to send.
    pub query: Option<String>,
}

impl Prepared {
    /// The body for one target's model.
    pub fn body_for(&mut self, model: &str) -> Result<Vec<u8>, serde_json::Error> {
        // `raw` is the client's bytes (same format), or a body written straight to bytes;
        // should its model not be found where expected, it is parsed and set the slow way.
        if let Some(raw) = &self.raw {
            if let Some(out) = passthrough::replace_model(raw, model) {
                return Ok(out);
            }
            if self.body.is_null() {
                self.body = serde_json::from_slice(raw)?;
            }
        }
        self.body["model"] = Value::String(model.to_owned());
        serde_json::to_vec(&self.body)
    }
}

/// Prepares `inb` for providers speaking `format`.
pub fn prepare(inb: &Inbound, format: Format) -> Result<Prepared, Untranslatable> {
    let mut dropped = inb.dropped.clone();
    let mut headers = Vec::new();
    let same = wire(inb.api) == format;
    // Read only when the request is translated, or its bytes are not the body (multicall).
    let body = || inb.body.try_get().map_err(|e| Untranslatable::invalid("body", e));
    let (body, raw) = if same {
        match &inb.raw {
            Some(raw) => (Value::Null, Some(raw.clone())),
            None => (body()?.clone(), None),
        }
    } else if let Some(bytes) = if format == Format::Anthropic && inb.api == ClientApi::Chat {
        chat_messages::plain_request(body()?)
    } else {
        None
    } {
        (Value::Null, Some(Bytes::from(bytes)))
    } else {
        let t = match format {
            Format::Anthropic => chat_messages::request(body()?)?,
            Format::Openai => messages_chat::request(body()?)?,
        };
        dropped.extend(t.dropped);
        (t.body, None)
    };
    match (format, inb.api) {
        (Format::Anthropic, ClientApi::Messages) => {
            if let Some(b) = &inb.headers.anthropic_beta {
                headers.push((ANTHROPIC_BETA.clone(), b.clone()));
            }
            let v = inb.headers.anthropic_version.clone().unwrap_or(HeaderValue::from_static(ANTHROPIC_VERSION));
            headers.push((ANTHROPIC_VERSION_HEADER.clone(), v));
        }
        (Format::Anthropic, _) => {
            headers.push((ANTHROPIC_VERSION_HEADER.clone(), HeaderValue::from_static(ANTHROPIC_VERSION)))
        }
        (Format::Openai, ClientApi::Messages) => {
            if let Some(b) = inb.headers.anthropic_beta.as_ref().and_then(|b| b.to_str().ok()) {
                dropped.extend(messages_chat::betas(b)?);
            }
        }
        (Format::Openai, ClientApi::Chat) => {
            if let Some(b) = &inb.headers.openai_beta {
                headers.push((OPENAI_BETA.clone(), b.clone()));
            }
        }
        (Format::Openai, ClientApi::Responses) => {}
    }
    let mut seen = Vec::new();
    dropped.retain(|d| {
        let fresh = !seen.contains(d);
        seen.push(d.clone());
        fresh
    });
    let query = if same { inb.query.clone() } else { None };
    Ok(Prepared { body, raw, dropped, headers, query })
}

/// A whole (non-streamed) upstream answer in the client's API; `Err` when the provider's body
/// is not the JSON its format promises.
pub fn answer(inb: &Inbound, format: Format, body: Bytes) -> Result<Bytes, String> {
    let bad = |e: serde_json::Error| format!("the answer is not a {format:?}-format answer: {e}").to_lowercase();
    let in_wire = match (format, wire(inb.api)) {
        (Format::Anthropic, Format::Openai) => Bytes::from(chat_messages::response(&body, inb.created).map_err(bad)?),
        (Format::Openai, Format::Anthropic) => Bytes::from(messages_chat::response(&body).map_err(bad)?),
        _ => body,
    };
    let Some(builder) = &inb.responses else { return Ok(in_wire) };
    let chat: Value = serde_json::from_slice(&in_wire).map_err(bad)?;
    if !chat.is_object() {
        return Err("the answer is not a JSON object".into());
    }
    Ok(Bytes::from(builder.clone().from_chat(&chat).to_string()))
}

/// The stream translator from a provider's events to the client's, if the formats differ.
pub fn translator(inb: &Inbound, format: Format) -> Option<Box<dyn Translate>> {
    match (format, inb.api, inb.responses.clone()) {
        (Format::Openai, ClientApi::Chat, _) | (Format::Anthropic, ClientApi::Messages, _) => None,
        (Format::Anthropic, ClientApi::Chat, _) => Some(Box::new(MessagesToChat::new(inb.created, inb.include_usage))),
        (Format::Openai, ClientApi::Messages, _) => Some(Box::new(ChatToMessages::new())),
        (Format::Openai, ClientApi::Responses, Some(b)) => Some(Box::new(ChatToResponses::new(b))),
        (Format::Anthropic, ClientApi::Responses, Some(b)) => {
            Some(Box::new(Chain::new(MessagesToChat::new(inb.created, true), ChatToResponses::new(b))))
        }
        (_, ClientApi::Responses, None) => None,
    }
}

/// A feature the target cannot express, as a 400 naming it.
pub fn untranslatable(u: Untranslatable) -> crate::edge::errors::ProxyError {
    let code = match u.kind {
        Cause::Feature => "untranslatable_feature",
        Cause::Stored => "stored_responses_unsupported",
        Cause::Invalid => "invalid_request",
    };
    crate::edge::errors::ProxyError::bad_request(code, u.to_string()).with("param", u.feature.into())
}
