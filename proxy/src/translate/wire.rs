//! Typed views of the providers' answers and stream events, borrowed from the bytes where the
//! JSON allows it, and the typed shapes written back: the hot path of translation reads and
//! writes these instead of building `serde_json::Value` trees.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;

/// A string borrowed from the input when it has no escapes.
pub type Str<'a> = Cow<'a, str>;

/// Anthropic usage counts.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub struct AntUsage {
    /// Uncached input tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Input tokens read from the cache.
    #[serde(default)]
    pub cache_read_input_tokens: u64,
    /// Input tokens written to the cache.
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
}

/// One content block of an Anthropic answer.
#[derive(Debug, Deserialize)]
pub struct AntBlock<'a> {
    /// `text`, `tool_use`, `thinking`, …
    #[serde(rename = "type", borrow)]
    pub kind: Str<'a>,
    /// Text of a text block.
    #[serde(default, borrow)]
    pub text: Option<Str<'a>>,
    /// Text of a thinking block.
    #[serde(default, borrow)]
    pub thinking: Option<Str<'a>>,
    /// Id of a tool use.
    #[serde(default, borrow)]
    pub id: Option<Str<'a>>,
    /// Tool name.
    #[serde(default, borrow)]
    pub name: Option<Str<'a>>,
    /// Tool input.
    #[serde(default)]
    pub input: Option<Value>,
}

/// An Anthropic Messages answer.
#[derive(Debug, Deserialize)]
pub struct AntMessage<'a> {
    /// Message id.
    #[serde(default, borrow)]
    pub id: Option<Str<'a>>,
    /// Model.
    #[serde(default, borrow)]
    pub model: Option<Str<'a>>,
    /// Content blocks.
    #[serde(default, borrow)]
    pub content: Vec<AntBlock<'a>>,
    /// Why it stopped.
    #[serde(default, borrow)]
    pub stop_reason: Option<Str<'a>>,
    /// Usage.
    #[serde(default)]
    pub usage: Option<AntUsage>,
}

/// A delta inside an Anthropic stream event.
#[derive(Debug, Default, Deserialize)]
pub struct AntDelta<'a> {
    /// `text_delta`, `input_json_delta`, `thinking_delta`, …
    #[serde(rename = "type", default, borrow)]
    pub kind: Option<Str<'a>>,
    /// Text.
    #[serde(default, borrow)]
    pub text: Option<Str<'a>>,
    /// Partial tool input JSON.
    #[serde(default, borrow)]
    pub partial_json: Option<Str<'a>>,
    /// Thinking text.
    #[serde(default, borrow)]
    pub thinking: Option<Str<'a>>,
    /// Stop reason (in `message_delta`).
    #[serde(default, borrow)]
    pub stop_reason: Option<Str<'a>>,
}

/// One Anthropic stream event.
#[derive(Debug, Deserialize)]
pub struct AntEvent<'a> {
    /// Event type (else the SSE event name applies).
    #[serde(rename = "type", default, borrow)]
    pub kind: Option<Str<'a>>,
    /// Block index.
    #[serde(default)]
    pub index: u64,
    /// The delta.
    #[serde(default, borrow)]
    pub delta: Option<AntDelta<'a>>,
    /// The block a `content_block_start` opens.
    #[serde(default, borrow)]
    pub content_block: Option<AntBlock<'a>>,
    /// The message a `message_start` opens.
    #[serde(default, borrow)]
    pub message: Option<AntMessage<'a>>,
    /// Usage (in `message_delta`).
    #[serde(default)]
    pub usage: Option<AntUsage>,
    /// The error of an `error` event.
    #[serde(default)]
    pub error: Option<Value>,
}

/// A tool call (whole, or a streamed piece of one).
#[derive(Debug, Deserialize)]
pub struct ChatToolCall<'a> {
    /// Position among the calls (streams).
    #[serde(default)]
    pub index: u64,
    /// Call id.
    #[serde(default, borrow)]
    pub id: Option<Str<'a>>,
    /// The function.
    #[serde(default, borrow)]
    pub function: Option<ChatFunction<'a>>,
}

/// A function call's name and arguments.
#[derive(Debug, Deserialize)]
pub struct ChatFunction<'a> {
    /// Function name.
    #[serde(default, borrow)]
    pub name: Option<Str<'a>>,
    /// Arguments (JSON text).
    #[serde(default, borrow)]
    pub arguments: Option<Str<'a>>,
}

/// A chat message or a stream delta.
#[derive(Debug, Default, Deserialize)]
pub struct ChatDelta<'a> {
    /// Text.
    #[serde(default, borrow)]
    pub content: Option<Str<'a>>,
    /// Reasoning text (some OpenAI-compatible providers).
    #[serde(default, borrow)]
    pub reasoning_content: Option<Str<'a>>,
    /// A refusal.
    #[serde(default, borrow)]
    pub refusal: Option<Str<'a>>,
    /// Tool calls.
    #[serde(default, borrow)]
    pub tool_calls: Option<Vec<ChatToolCall<'a>>>,
}

/// One choice of a completion or chunk.
#[derive(Debug, Deserialize)]
pub struct ChatChoice<'a> {
    /// The message (whole answers).
    #[serde(default, borrow)]
    pub message: Option<ChatDelta<'a>>,
    /// The delta (chunks).
    #[serde(default, borrow)]
    pub delta: Option<ChatDelta<'a>>,
    /// Why it stopped.
    #[serde(default, borrow)]
    pub finish_reason: Option<Str<'a>>,
}

/// Chat usage counts.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub struct ChatUsage {
    /// Prompt tokens (cached ones included).
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Completion tokens.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Details of the prompt tokens.
    #[serde(default)]
    pub prompt_tokens_details: Option<PromptDetails>,
    /// Details of the completion tokens.
    #[serde(default)]
    pub completion_tokens_details: Option<CompletionDetails>,
}

/// Reasoning tokens among the completion tokens.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub struct CompletionDetails {
    /// Reasoning tokens.
    #[serde(default)]
    pub reasoning_tokens: u64,
}

/// Cached prompt tokens.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub struct PromptDetails {
    /// Cached prompt tokens.
    #[serde(default)]
    pub cached_tokens: u64,
}

impl ChatUsage {
    /// Anthropic counts: cached tokens move from input to cache reads.
    pub fn to_anthropic(self) -> AntUsage {
        let cached = self.prompt_tokens_details.map_or(0, |d| d.cached_tokens);
        AntUsage {
            input_tokens: self.prompt_tokens.saturating_sub(cached),
            output_tokens: self.completion_tokens,
            cache_read_input_tokens: cached,
            cache_creation_input_tokens: 0,
        }
    }
}

/// A chat completion or chunk.
#[derive(Debug, Deserialize)]
pub struct ChatCompletion<'a> {
    /// Id.
    #[serde(default, borrow)]
    pub id: Option<Str<'a>>,
    /// Model.
    #[serde(default, borrow)]
    pub model: Option<Str<'a>>,
    /// Choices.
    #[serde(default, borrow)]
    pub choices: Vec<ChatChoice<'a>>,
    /// Usage.
    #[serde(default)]
    pub usage: Option<ChatUsage>,
    /// An error (streams).
    #[serde(default)]
    pub error: Option<Value>,
}

/// A JSON string literal for `s`.
pub fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

/// A Gemini answer, or one event of its stream, read for what chat needs (strings borrowed
/// where they have no escapes).
#[derive(Deserialize)]
pub struct GemAnswer<'a> {
    /// Candidates (Ferroute reads the first).
    #[serde(default, borrow)]
    pub candidates: Vec<GemCandidate<'a>>,
    /// `usageMetadata`.
    #[serde(default, rename = "usageMetadata")]
    pub usage: Option<Value>,
    /// `responseId`.
    #[serde(default, rename = "responseId", borrow)]
    pub response_id: Option<Str<'a>>,
    /// `modelVersion`.
    #[serde(default, rename = "modelVersion", borrow)]
    pub model_version: Option<Str<'a>>,
    /// `promptFeedback` (a blocked prompt has `blockReason`).
    #[serde(default, rename = "promptFeedback")]
    pub prompt_feedback: Option<Value>,
    /// An error object, mid-stream.
    #[serde(default)]
    pub error: Option<Value>,
}

/// One candidate.
#[derive(Deserialize)]
pub struct GemCandidate<'a> {
    /// Its content.
    #[serde(default, borrow)]
    pub content: Option<GemContent<'a>>,
    /// `finishReason`.
    #[serde(default, rename = "finishReason", borrow)]
    pub finish_reason: Option<Str<'a>>,
}

/// A candidate's content.
#[derive(Deserialize)]
pub struct GemContent<'a> {
    /// Its parts.
    #[serde(default, borrow)]
    pub parts: Vec<GemPart<'a>>,
}

/// One part of it.
#[derive(Deserialize)]
pub struct GemPart<'a> {
    /// Text.
    #[serde(default, borrow)]
    pub text: Option<Str<'a>>,
    /// Whether the text is a thought.
    #[serde(default)]
    pub thought: Option<bool>,
    /// A function call.
    #[serde(default, rename = "functionCall")]
    pub function_call: Option<Value>,
}

/// Writes JSON by hand: literal pieces as they are, strings escaped. Cheaper than `format!`
/// on the hot path.
#[derive(Debug, Default)]
pub struct Out(pub String);

impl Out {
    /// An empty buffer of `n` bytes' capacity.
    pub fn with_capacity(n: usize) -> Self {
        Out(String::with_capacity(n))
    }

    /// Appends JSON text as it is.
    pub fn raw(&mut self, s: &str) -> &mut Self {
        self.0.push_str(s);
        self
    }

    /// Appends `s` as a JSON string literal.
    pub fn str(&mut self, s: &str) -> &mut Self {
        // Most model output needs no escaping: copy it straight.
        if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
            self.0.push('"');
            self.0.push_str(s);
            self.0.push('"');
        } else {
            self.0.push_str(&quote(s));
        }
        self
    }

    /// Appends a number.
    pub fn num(&mut self, n: u64) -> &mut Self {
        use std::fmt::Write;
        let _ = write!(self.0, "{n}");
        self
    }
}
