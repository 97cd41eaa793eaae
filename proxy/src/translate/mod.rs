//! Translation between the client APIs Ferroute serves and the wire formats providers speak:
//! OpenAI Chat Completions, Anthropic Messages, the OpenAI Responses API and Google's Gemini
//! API, with chat as the common middle. Pure functions
//! and synchronous stream machines over `serde_json` values; no I/O, no clock (the caller
//! passes `created` times), so the production gateway and the simulation run the same code.
//!
//! Requests are refused with [`Untranslatable`] when they use a feature the target format
//! lacks; a feature that is only advice to the provider (a cache hint, an identification
//! beta) is dropped and named in [`Translated::dropped`], which the gateway reports in the
//! `x-ferroute-translation-dropped` response header. Nothing is dropped silently.

pub mod chat_gemini;
pub mod chat_messages;
pub mod chat_responses;
pub mod gemini_chat;
mod gemini_names;
pub mod messages_chat;
pub mod passthrough;
pub mod responses;
pub mod responses_stream;
pub mod stream;
pub mod stream_chat;
pub mod stream_gemini;
pub mod stream_messages;
pub mod wire;

#[cfg(test)]
mod gemini_tests;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;

use serde_json::{Map, Value};

/// The API a client speaks to Ferroute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientApi {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/messages`.
    Messages,
    /// `POST /v1/responses`.
    Responses,
    /// `POST /v1beta/models/{model}:generateContent` (and `:streamGenerateContent`).
    Gemini,
}

/// Why a request cannot go to a provider format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The target format has no such feature.
    Feature,
    /// It refers to state Ferroute does not keep (a stored response).
    Stored,
    /// The field's value is not valid for the client's own API.
    Invalid,
}

/// A request feature the target format cannot express.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untranslatable {
    /// The field or feature, as the client named it (`n`, `tools[0].type=web_search`, …).
    pub feature: String,
    /// Why, in a sentence.
    pub detail: String,
    /// What kind of refusal it is.
    pub kind: Cause,
}

impl Untranslatable {
    /// A feature the target lacks.
    pub fn new(feature: impl Into<String>, detail: impl Into<String>) -> Self {
        Untranslatable { feature: feature.into(), detail: detail.into(), kind: Cause::Feature }
    }

    /// A reference to state Ferroute does not store.
    pub fn stored(feature: impl Into<String>, detail: impl Into<String>) -> Self {
        Untranslatable { kind: Cause::Stored, ..Self::new(feature, detail) }
    }

    /// A value the client's own API does not allow.
    pub fn invalid(feature: impl Into<String>, detail: impl Into<String>) -> Self {
        Untranslatable { kind: Cause::Invalid, ..Self::new(feature, detail) }
    }
}

impl std::fmt::Display for Untranslatable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            Cause::Invalid => write!(f, "`{}` is invalid: {}", self.feature, self.detail),
            Cause::Feature | Cause::Stored => write!(f, "`{}` cannot be translated: {}", self.feature, self.detail),
        }
    }
}

/// A translated request body and what was left behind on purpose.
#[derive(Debug, Clone, PartialEq)]
pub struct Translated {
    /// The body for the provider (without its `model`, which the gateway sets per target).
    pub body: Value,
    /// Advisory fields dropped because the target has no equivalent, in order, once each.
    pub dropped: Vec<String>,
}

impl Translated {
    fn note(&mut self, what: &str) {
        if !self.dropped.iter().any(|d| d == what) {
            self.dropped.push(what.to_owned());
        }
    }
}

/// The chat middle's top-k (a Gemini client's `generationConfig.topK`): an extension field
/// that reaches Anthropic as `top_k` and Gemini as `topK`, and no chat or Responses provider.
pub const TOP_K: &str = "x_ferroute_top_k";

/// Fields of a chat request that the translations to other formats carry over or handle; any
/// other field is refused.
pub(crate) const CHAT_FIELDS: &[&str] = &[
    TOP_K,
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "stop",
    "stream",
    "stream_options",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "user",
    "metadata",
    "n",
    "presence_penalty",
    "frequency_penalty",
    "logprobs",
    "top_logprobs",
    "logit_bias",
    "response_format",
    "reasoning_effort",
    "store",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
    "seed",
    "verbosity",
];

/// The default `max_tokens` when a chat request names none (Anthropic requires one).
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// Thinking budgets for the reasoning efforts, and back.
pub fn budget_for_effort(effort: &str) -> Option<u64> {
    match effort {
        "minimal" | "none" => None,
        "low" => Some(1024),
        "medium" => Some(4096),
        _ => Some(16384),
    }
}

/// The reasoning effort closest to a thinking budget.
pub fn effort_for_budget(budget: u64) -> &'static str {
    match budget {
        0..=2048 => "low",
        2049..=8192 => "medium",
        _ => "high",
    }
}

/// Chat `finish_reason` for an Anthropic `stop_reason`.
pub fn finish_reason(stop_reason: &str) -> &'static str {
    match stop_reason {
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        _ => "stop",
    }
}

/// Anthropic `stop_reason` for a chat `finish_reason`.
pub fn stop_reason(finish_reason: &str) -> &'static str {
    match finish_reason {
        "length" => "max_tokens",
        "tool_calls" | "function_call" => "tool_use",
        "content_filter" => "refusal",
        _ => "end_turn",
    }
}

/// Parses tool-call arguments; a model's malformed JSON is kept as a string under
/// `_unparsed_arguments` rather than lost.
pub fn parse_arguments(args: &str) -> Value {
    if args.trim().is_empty() {
        return Value::Object(Map::new());
    }
    match serde_json::from_str::<Value>(args) {
        Ok(v @ Value::Object(_)) => v,
        _ => serde_json::json!({ "_unparsed_arguments": args }),
    }
}

/// A chat `usage` object from Anthropic usage counts.
pub fn chat_usage(input: u64, output: u64, cache_read: u64, cache_write: u64) -> Value {
    let prompt = input + cache_read + cache_write;
    serde_json::json!({
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt + output,
        "prompt_tokens_details": { "cached_tokens": cache_read },
    })
}

/// The chat request's `tools`, when it offers any, each function tool's `function` turned into
/// the target's tool by `map` (with its index); a tool of another type is refused, naming it and
/// `target`.
pub(crate) fn function_tools(
    obj: &Map<String, Value>,
    target: &str,
    mut map: impl FnMut(usize, &Value) -> Result<Value, Untranslatable>,
) -> Result<Option<Vec<Value>>, Untranslatable> {
    let Some(list) = obj.get("tools").and_then(Value::as_array).filter(|l| !l.is_empty()) else { return Ok(None) };
    let mut tools = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        if str_of(t, "type") != Some("function") {
            let kind = str_of(t, "type").unwrap_or("unknown");
            let why = format!("only function tools can be sent to {target}");
            return Err(Untranslatable::new(format!("tools[{i}].type={kind}"), why));
        }
        tools.push(map(i, t.get("function").unwrap_or(&Value::Null))?);
    }
    Ok(Some(tools))
}

/// A function tool's `name`, which every target needs.
pub(crate) fn tool_name(i: usize, f: &Value) -> Result<&str, Untranslatable> {
    str_of(f, "name")
        .ok_or_else(|| Untranslatable::new(format!("tools[{i}].function.name"), "a function tool needs a name"))
}

pub(crate) fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// Refuses `key` when present with a value other than the harmless ones `ok` accepts.
pub(crate) fn refuse_unless(
    obj: &Map<String, Value>,
    key: &str,
    ok: impl Fn(&Value) -> bool,
    detail: &str,
) -> Result<(), Untranslatable> {
    match obj.get(key) {
        Some(v) if !v.is_null() && !ok(v) => Err(Untranslatable::new(key, detail)),
        _ => Ok(()),
    }
}

/// The text of content that may be a string or a list of text parts.
pub(crate) fn joined_text(content: Option<&Value>, field: &str) -> Result<String, Untranslatable> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut out = String::new();
            for p in parts {
                match p.get("text").and_then(Value::as_str) {
                    Some(t) => out.push_str(t),
                    None => {
                        let kind = str_of(p, "type").unwrap_or("unknown");
                        return Err(Untranslatable::new(
                            format!("{field}.type={kind}"),
                            "only text can be carried in this position",
                        ));
                    }
                }
            }
            Ok(out)
        }
        Some(_) => Err(Untranslatable::new(field, "content must be a string or a list of parts")),
    }
}
