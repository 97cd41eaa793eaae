//! What the client speaks against what each provider speaks: the request body and headers
//! prepared once per provider format, and the answer turned back into the client's API.

use crate::config::Format;
use crate::edge::errors::ErrorShape;
use crate::edge::head::{Head, JsonBody};
use crate::translate::chat_responses::ResponsesToChat;
use crate::translate::responses_stream::ChatToResponses;
use crate::translate::stream::{Chain, Translate};
use crate::translate::stream_chat::MessagesToChat;
use crate::translate::stream_gemini::{ChatToGemini, GeminiToChat};
use crate::translate::stream_messages::ChatToMessages;
use crate::translate::{Cause, ClientApi, Translated, Untranslatable, chat_messages, messages_chat, passthrough};
use crate::translate::{chat_gemini, chat_responses, gemini_chat};
use crate::translate::{responses, responses::ResponseBuilder};
use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use serde_json::Value;

/// The Anthropic API version sent when the client names none.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The wire format of an inbound body: chat for every client API but Anthropic's Messages
/// (a Responses or Gemini request is turned into chat when it arrives).
pub fn wire(api: ClientApi) -> Format {
    match api {
        ClientApi::Chat | ClientApi::Responses | ClientApi::Gemini => Format::Openai,
        ClientApi::Messages => Format::Anthropic,
    }
}

/// The provider format that speaks a client API as it is: requests to it pass through.
pub fn native(api: ClientApi) -> Format {
    match api {
        ClientApi::Chat => Format::Openai,
        ClientApi::Messages => Format::Anthropic,
        ClientApi::Responses => Format::Responses,
        ClientApi::Gemini => Format::Gemini,
    }
}

/// A client API's name in metrics and logs.
pub fn api_name(api: ClientApi) -> &'static str {
    match api {
        ClientApi::Chat => "chat",
        ClientApi::Messages => "messages",
        ClientApi::Responses => "responses",
        ClientApi::Gemini => "gemini",
    }
}

/// A provider format's name in metrics and logs.
pub fn format_name(format: Format) -> &'static str {
    format.name()
}

/// The error shape a client API expects.
pub fn error_shape(api: ClientApi) -> ErrorShape {
    match api {
        ClientApi::Messages => ErrorShape::Anthropic,
        ClientApi::Chat | ClientApi::Responses => ErrorShape::OpenAi,
        ClientApi::Gemini => ErrorShape::Google,
    }
}

pub use crate::request::api_headers::{ANTHROPIC_BETA, ANTHROPIC_VERSION_HEADER, ApiHeaders, OPENAI_BETA};

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
    /// Where the value of `raw`'s top-level `model` lies, when the head's pass saw it (set
    /// only with `raw`, from the same bytes).
    pub model_at: Option<std::ops::Range<usize>>,
    /// The client's own bytes when `body` is their chat translation (Responses, Gemini): sent
    /// as they are to a provider of the client's own format.
    pub native: Option<Bytes>,
    /// The model a Gemini client named in the URL (its body names none).
    pub url_model: Option<String>,
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
    /// Why a Responses or Gemini request has no chat translation (then only providers of the
    /// client's own format can serve it, and `body` is `null`).
    pub untranslated: Option<Untranslatable>,
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
            model_at: head.model_span.clone(),
            native: None,
            url_model: None,
            stream: head.stream.as_ref().and_then(Value::as_bool).unwrap_or(false),
            include_usage: head.include_usage,
            tools: head.tools,
            headers,
            query: None,
            responses: None,
            dropped: Vec::new(),
            untranslated: None,
            created,
            session: None,
            session_ttl: std::time::Duration::ZERO,
        }
    }

    /// A Responses request: translated to chat now; `id` names the response; `raw` is what
    /// the client sent.
    pub fn responses(
        body: &Value,
        raw: Bytes,
        headers: ApiHeaders,
        id: &str,
        created: u64,
    ) -> Result<Self, Untranslatable> {
        let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
        let mut inb = Self::native(ClientApi::Responses, raw, stream, headers, created);
        inb.responses = Some(ResponseBuilder::new(id, created, body));
        inb.with_chat(responses::request(body))
    }

    /// A Gemini request for `model` (from the URL): translated to chat now; `stream` is the
    /// method called.
    pub fn gemini(
        body: &Value,
        raw: Bytes,
        model: &str,
        stream: bool,
        headers: ApiHeaders,
        created: u64,
    ) -> Result<Self, Untranslatable> {
        let inb = Self::gemini_native(0, raw, model, stream, headers, created);
        inb.with_chat(gemini_chat::request(body, model, stream))
    }

    /// A Gemini request that only Gemini-format providers will see, declaring `tools`
    /// functions: never translated (its `body` is `null`; it goes as the client sent it).
    pub fn gemini_native(
        tools: usize,
        raw: Bytes,
        model: &str,
        stream: bool,
        headers: ApiHeaders,
        created: u64,
    ) -> Self {
        let inb = Self::native(ClientApi::Gemini, raw, stream, headers, created);
        Inbound { tools, url_model: Some(model.to_owned()), ..inb }
    }

    /// A request of `api` in the client's own bytes, not (yet) translated to chat.
    fn native(api: ClientApi, raw: Bytes, stream: bool, headers: ApiHeaders, created: u64) -> Self {
        Inbound {
            api,
            tools: 0,
            body: JsonBody::parsed(Value::Null),
            raw: None,
            model_at: None,
            native: Some(raw),
            url_model: None,
            stream,
            include_usage: true,
            headers,
            query: None,
            responses: None,
            dropped: Vec::new(),
            untranslated: None,
            created,
            session: None,
            session_ttl: std::time::Duration::ZERO,
        }
    }

    /// With its chat translation, or why it has none: a request its own API does not allow is
    /// refused at once; one that only chat cannot express may still go to a provider of the
    /// client's own format.
    fn with_chat(self, t: Result<Translated, Untranslatable>) -> Result<Self, Untranslatable> {
        match t {
            Ok(Translated { body, dropped }) => Ok(Inbound {
                tools: body.get("tools").and_then(Value::as_array).map_or(0, Vec::len),
                body: JsonBody::parsed(body),
                dropped,
                ..self
            }),
            Err(u) if u.kind == Cause::Invalid => Err(u),
            Err(u) => Ok(Inbound { untranslated: Some(u), ..self }),
        }
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
    /// Where the value of `raw`'s `model` lies, when it is known (the client's own bytes).
    model_at: Option<std::ops::Range<usize>>,
    /// Advisory fields dropped on the way, for the `x-ferroute-translation-dropped` header.
    pub dropped: Vec<String>,
    /// API headers to send.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The query string to send.
    pub query: Option<String>,
    /// The format it is in.
    pub format: Format,
    /// Whether it asks for a stream (a Gemini provider's URL says so, not its body).
    pub stream: bool,
    /// An empty header map to send the next upstream request with (the client's, once read and
    /// emptied by [`Prepared::lend_headers`]), so that the first attempt makes none.
    spare_headers: Option<http::HeaderMap>,
    /// What the Codex backend reads of the client.
    pub codex: crate::request::codex::ClientIds,
}

impl Prepared {
    /// Keeps `map`'s room for the next upstream request. It is emptied here, on the way in, so
    /// that nothing of the client's headers is held or sent.
    pub fn lend_headers(&mut self, mut map: http::HeaderMap) {
        map.clear();
        self.spare_headers = Some(map);
    }

    /// The lent map (empty), if it was not used yet.
    pub fn take_headers(&mut self) -> Option<http::HeaderMap> {
        self.spare_headers.take()
    }

    /// The body for one target's model.
    pub fn body_for(&mut self, model: &str) -> Result<Bytes, serde_json::Error> {
        if self.format == Format::Gemini {
            // The model is in the URL: the bytes go as they are.
            return match &self.raw {
                Some(raw) => Ok(raw.clone()),
                None => serde_json::to_vec(&self.body).map(Bytes::from),
            };
        }
        // `raw` is the client's bytes (same format), or a body written straight to bytes;
        // should its model not be found where expected, it is parsed and set the slow way.
        if let Some(raw) = &self.raw {
            let out = match &self.model_at {
                Some(at) => passthrough::model_at(raw, at.clone(), model),
                None => passthrough::replace_model(raw, model),
            };
            if let Some(out) = out {
                return Ok(Bytes::from(out));
            }
            if self.body.is_null() {
                self.body = serde_json::from_slice(raw)?;
            }
        }
        self.body["model"] = Value::String(model.to_owned());
        serde_json::to_vec(&self.body).map(Bytes::from)
    }
}

/// Prepares `inb` for providers speaking `format`.
pub fn prepare(inb: &Inbound, format: Format) -> Result<Prepared, Untranslatable> {
    let mut dropped = inb.dropped.clone();
    let mut headers = Vec::new();
    let same = wire(inb.api) == format;
    let native = native(inb.api) == format;
    // Read only when the request is translated, or its bytes are not the body (multicall).
    let body = || inb.body.try_get().map_err(|e| Untranslatable::invalid("body", e));
    let mut model_at = None;
    let (body, raw) = if native && inb.native.is_some() {
        // A Responses or Gemini client to a provider of its own format: its own bytes.
        (Value::Null, inb.native.clone())
    } else if let Some(u) = &inb.untranslated {
        return Err(u.clone());
    } else if same {
        match &inb.raw {
            Some(raw) => {
                model_at = inb.model_at.clone();
                (Value::Null, Some(raw.clone()))
            }
            None => (without_extensions(body()?, &mut dropped), None),
        }
    } else if let Some(bytes) = if format == Format::Anthropic && wire(inb.api) == Format::Openai {
        chat_messages::plain_request(body()?)
    } else {
        None
    } {
        (Value::Null, Some(Bytes::from(bytes)))
    } else {
        let t = match (wire(inb.api), format) {
            (_, Format::Anthropic) => chat_messages::request(body()?)?,
            (_, Format::Openai) => messages_chat::request(body()?)?,
            (Format::Openai, target) => from_chat(body()?, target)?,
            (_, target) => {
                // Messages → chat → the target.
                let chat = messages_chat::request(body()?)?;
                dropped.extend(chat.dropped);
                from_chat(&chat.body, target)?
            }
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
        (_, ClientApi::Messages) => {
            if let Some(b) = inb.headers.anthropic_beta.as_ref().and_then(|b| b.to_str().ok()) {
                dropped.extend(messages_chat::betas(b)?);
            }
        }
        (Format::Openai, ClientApi::Chat) | (Format::Responses, ClientApi::Responses) => {
            if let Some(b) = &inb.headers.openai_beta {
                headers.push((OPENAI_BETA.clone(), b.clone()));
            }
        }
        _ => {}
    }
    let mut seen = Vec::new();
    dropped.retain(|d| {
        let fresh = !seen.contains(d);
        seen.push(d.clone());
        fresh
    });
    let query = if native { inb.query.clone() } else { None };
    let codex = inb.headers.codex.clone();
    Ok(Prepared {
        body,
        raw,
        model_at,
        dropped,
        headers,
        query,
        format,
        stream: inb.stream,
        spare_headers: None,
        codex,
    })
}

/// A chat request in a format that is reached through chat (Responses, Gemini).
fn from_chat(chat: &Value, format: Format) -> Result<Translated, Untranslatable> {
    match format {
        Format::Gemini => chat_gemini::request(chat),
        Format::Responses => chat_responses::request(chat),
        Format::Anthropic => chat_messages::request(chat),
        Format::Openai => {
            let mut dropped = Vec::new();
            Ok(Translated { body: without_extensions(chat, &mut dropped), dropped })
        }
    }
}

/// The chat middle as a chat provider gets it: its extensions (a Gemini client's top-k) left
/// out and named in `dropped`.
fn without_extensions(chat: &Value, dropped: &mut Vec<String>) -> Value {
    let mut body = chat.clone();
    if body.as_object_mut().and_then(|o| o.remove(crate::translate::TOP_K)).is_some_and(|v| !v.is_null()) {
        dropped.push("generationConfig.topK".to_owned());
    }
    body
}

/// A whole (non-streamed) upstream answer in the client's API; `Err` when the provider's body
/// is not the JSON its format promises.
pub fn answer(inb: &Inbound, format: Format, body: Bytes) -> Result<Bytes, String> {
    if native(inb.api) == format {
        return Ok(body);
    }
    let bad = |e: serde_json::Error| format!("the answer is not a {}-format answer: {e}", format.name());
    let model = inb.url_model.as_deref().unwrap_or("");
    let chat = match format {
        Format::Openai => body,
        Format::Anthropic => Bytes::from(chat_messages::response(&body, inb.created).map_err(bad)?),
        Format::Responses => Bytes::from(chat_responses::response(&body, inb.created).map_err(bad)?),
        Format::Gemini => Bytes::from(chat_gemini::response(&body, inb.created, model).map_err(bad)?),
    };
    let bad = |e: serde_json::Error| format!("the answer is not a chat completion: {e}");
    let parsed = || -> Result<Value, String> {
        let v: Value = serde_json::from_slice(&chat).map_err(bad)?;
        if !v.is_object() {
            return Err("the answer is not a JSON object".into());
        }
        Ok(v)
    };
    match inb.api {
        ClientApi::Chat => Ok(chat),
        ClientApi::Messages => Ok(Bytes::from(messages_chat::response(&chat).map_err(bad)?)),
        ClientApi::Responses => match &inb.responses {
            Some(builder) => Ok(Bytes::from(builder.clone().from_chat(&parsed()?).to_string())),
            None => Ok(chat),
        },
        ClientApi::Gemini if !chat.trim_ascii_start().starts_with(b"{") => {
            Err("the answer is not a JSON object".into())
        }
        ClientApi::Gemini => Ok(Bytes::from(gemini_chat::response(&chat, model).map_err(bad)?)),
    }
}

/// The stream translator from a provider's events to the client's, if the formats differ: the
/// provider's events to chat chunks, then chat chunks to the client's events.
pub fn translator(inb: &Inbound, format: Format) -> Option<Box<dyn Translate>> {
    if native(inb.api) == format {
        return None;
    }
    let model = inb.url_model.as_deref().unwrap_or("");
    let usage = inb.api != ClientApi::Chat || inb.include_usage;
    let to_chat: Option<Box<dyn Translate>> = match format {
        Format::Openai => None,
        Format::Anthropic => Some(Box::new(MessagesToChat::new(inb.created, usage))),
        Format::Responses => Some(Box::new(ResponsesToChat::new(inb.created, usage))),
        Format::Gemini => Some(Box::new(GeminiToChat::new(inb.created, usage, model))),
    };
    let from_chat: Option<Box<dyn Translate>> = match inb.api {
        ClientApi::Chat => None,
        ClientApi::Messages => Some(Box::new(ChatToMessages::new())),
        ClientApi::Responses => inb.responses.clone().map(|b| Box::new(ChatToResponses::new(b)) as Box<dyn Translate>),
        ClientApi::Gemini => Some(Box::new(ChatToGemini::new(model))),
    };
    match (to_chat, from_chat) {
        (Some(a), Some(b)) => Some(Box::new(Chain::new(a, b))),
        (a, b) => a.or(b),
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
