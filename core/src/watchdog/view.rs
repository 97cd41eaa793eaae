//! The watchdog's view of one event's JSON: only the fields [`super::classify_sse`] reads,
//! taken in one pass with no `serde_json::Value` (no map per object, no copy of a string
//! unless it is a `type` with escapes). Like a `Value`, it accepts any valid JSON: a field of
//! an unexpected type reads as absent, and of a repeated key the last one counts.

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

/// A JSON value read as one of the shapes below; anything else reads as its default.
trait Node<'de>: Sized + Default {
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Self::default())
    }
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Self::default())
    }
    fn str(_s: &str) -> Self {
        Self::default()
    }
    fn borrowed(s: &'de str) -> Self {
        Self::str(s)
    }
    fn null() -> Self {
        Self::default()
    }
}

/// Deserializes any JSON value as the node `T`.
struct N<T>(T);

impl<'de, T: Node<'de>> Deserialize<'de> for N<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor(PhantomData)).map(N)
    }
}

struct NodeVisitor<T>(PhantomData<T>);

impl<'de, T: Node<'de>> Visitor<'de> for NodeVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::map(map)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        T::seq(seq)
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<T, E> {
        Ok(T::borrowed(s))
    }
    fn visit_str<E>(self, s: &str) -> Result<T, E> {
        Ok(T::str(s))
    }
    fn visit_unit<E>(self) -> Result<T, E> {
        Ok(T::null())
    }
    fn visit_none<E>(self) -> Result<T, E> {
        Ok(T::null())
    }
    fn visit_bool<E>(self, _: bool) -> Result<T, E> {
        Ok(T::default())
    }
    fn visit_i64<E>(self, _: i64) -> Result<T, E> {
        Ok(T::default())
    }
    fn visit_u64<E>(self, _: u64) -> Result<T, E> {
        Ok(T::default())
    }
    fn visit_f64<E>(self, _: f64) -> Result<T, E> {
        Ok(T::default())
    }
}

/// Present and not `null` (any other value, numbers and booleans too).
struct NotNull(bool);

impl<'de> Deserialize<'de> for NotNull {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NotNull;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NotNull, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(NotNull(true))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NotNull, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(NotNull(true))
            }
            fn visit_str<E>(self, _: &str) -> Result<NotNull, E> {
                Ok(NotNull(true))
            }
            fn visit_unit<E>(self) -> Result<NotNull, E> {
                Ok(NotNull(false))
            }
            fn visit_none<E>(self) -> Result<NotNull, E> {
                Ok(NotNull(false))
            }
            fn visit_bool<E>(self, _: bool) -> Result<NotNull, E> {
                Ok(NotNull(true))
            }
            fn visit_i64<E>(self, _: i64) -> Result<NotNull, E> {
                Ok(NotNull(true))
            }
            fn visit_u64<E>(self, _: u64) -> Result<NotNull, E> {
                Ok(NotNull(true))
            }
            fn visit_f64<E>(self, _: f64) -> Result<NotNull, E> {
                Ok(NotNull(true))
            }
        }
        d.deserialize_any(V)
    }
}

/// The byte length of a string.
#[derive(Default)]
struct StrLen(Option<usize>);

impl Node<'_> for StrLen {
    fn str(s: &str) -> Self {
        StrLen(Some(s.len()))
    }
}

/// A string, borrowed from the event when it has no escapes.
#[derive(Default)]
struct Text<'a>(Option<Cow<'a, str>>);

impl<'de> Node<'de> for Text<'de> {
    fn str(s: &str) -> Self {
        Text(Some(Cow::Owned(s.to_owned())))
    }
    fn borrowed(s: &'de str) -> Self {
        Text(Some(Cow::Borrowed(s)))
    }
}

/// The fields of a Chat Completions delta (or of a choice without one).
#[derive(Default, Clone, Copy)]
struct Fields {
    tool_calls: bool,
    function_call: bool,
    reasoning_content: bool,
    reasoning: bool,
    content: Option<usize>,
    text: Option<usize>,
}

impl Fields {
    /// Reads `key`'s value into the fields; `false` when the key is none of them.
    fn read<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "tool_calls" => self.tool_calls = map.next_value::<NotNull>()?.0,
            "function_call" => self.function_call = map.next_value::<NotNull>()?.0,
            "reasoning_content" => {
                self.reasoning_content = map.next_value::<N<StrLen>>()?.0.0.is_some_and(|n| n > 0);
            }
            "reasoning" => self.reasoning = map.next_value::<N<StrLen>>()?.0.0.is_some_and(|n| n > 0),
            "content" => self.content = map.next_value::<N<StrLen>>()?.0.0,
            "text" => self.text = map.next_value::<N<StrLen>>()?.0.0,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl<'de> Node<'de> for Fields {
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut f = Fields::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if !f.read(&key.0, &mut map)? {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(f)
    }
}

/// An object key, borrowed when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// One choice: its `delta`'s fields when it has a `delta` (of any type), else its own.
#[derive(Default)]
struct Choice {
    own: Fields,
    delta: Option<Fields>,
}

impl<'de> Node<'de> for Choice {
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut c = Choice::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if key.0 == "delta" {
                c.delta = Some(map.next_value::<N<Fields>>()?.0);
            } else if !c.own.read(&key.0, &mut map)? {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(c)
    }
}

/// What a `choices` array says, choice by choice as the watchdog reads them.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Choices {
    /// The first choice with a tool call (`true`) or reasoning (`false`).
    pub special: Option<bool>,
    /// Text bytes of the choices before it.
    pub bytes: usize,
}

/// `Some` for an array.
#[derive(Default)]
struct ChoiceList(Option<Choices>);

impl<'de> Node<'de> for ChoiceList {
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let mut out = Choices::default();
        while let Some(N(c)) = seq.next_element::<N<Choice>>()? {
            if out.special.is_some() {
                continue;
            }
            let f = c.delta.unwrap_or(c.own);
            if f.tool_calls || f.function_call {
                out.special = Some(true);
            } else if f.reasoning_content || f.reasoning {
                out.special = Some(false);
            } else {
                out.bytes += f.content.unwrap_or(0) + f.text.unwrap_or(0);
            }
        }
        Ok(ChoiceList(Some(out)))
    }
}

/// `true` only for the JSON `true`.
struct IsTrue(bool);

impl<'de> Deserialize<'de> for IsTrue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IsTrue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, b: bool) -> Result<IsTrue, E> {
                Ok(IsTrue(b))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<IsTrue, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(IsTrue(false))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<IsTrue, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(IsTrue(false))
            }
            fn visit_str<E>(self, _: &str) -> Result<IsTrue, E> {
                Ok(IsTrue(false))
            }
            fn visit_unit<E>(self) -> Result<IsTrue, E> {
                Ok(IsTrue(false))
            }
            fn visit_i64<E>(self, _: i64) -> Result<IsTrue, E> {
                Ok(IsTrue(false))
            }
            fn visit_u64<E>(self, _: u64) -> Result<IsTrue, E> {
                Ok(IsTrue(false))
            }
            fn visit_f64<E>(self, _: f64) -> Result<IsTrue, E> {
                Ok(IsTrue(false))
            }
        }
        d.deserialize_any(V)
    }
}

/// One part of a Gemini candidate's content: its text's length, whether it is a thought, and
/// whether it calls a function.
#[derive(Default)]
struct Part {
    text: Option<usize>,
    thought: bool,
    call: bool,
}

impl<'de> Node<'de> for Part {
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut p = Part::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match &*key.0 {
                "text" => p.text = map.next_value::<N<StrLen>>()?.0.0,
                "thought" => p.thought = map.next_value::<IsTrue>()?.0,
                "functionCall" => p.call = map.next_value::<NotNull>()?.0,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(p)
    }
}

/// A `parts` array read as [`Choices`]: the first part calling a function (`true`) or
/// thinking (`false`), and the text bytes before it.
#[derive(Default)]
struct PartList(Choices);

impl<'de> Node<'de> for PartList {
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let mut out = Choices::default();
        while let Some(N(p)) = seq.next_element::<N<Part>>()? {
            if out.special.is_some() {
                continue;
            }
            if p.call {
                out.special = Some(true);
            } else if p.thought && p.text.is_some_and(|n| n > 0) {
                out.special = Some(false);
            } else {
                out.bytes += p.text.unwrap_or(0);
            }
        }
        Ok(PartList(out))
    }
}

/// An object with `field` holding `T`; anything else reads as `T`'s default.
#[derive(Default)]
struct Field<T, const CONTENT: bool>(T);

impl<'de, T: Node<'de>, const CONTENT: bool> Node<'de> for Field<T, CONTENT> {
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let wanted = if CONTENT { "content" } else { "parts" };
        let mut out = T::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if key.0 == wanted {
                out = map.next_value::<N<T>>()?.0;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(Field(out))
    }
}

/// A Gemini `candidates` array: its first candidate's `content.parts`.
#[derive(Default)]
struct CandidateList(Option<Choices>);

impl<'de> Node<'de> for CandidateList {
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let mut first = None;
        while let Some(N(c)) = seq.next_element::<N<Field<Field<PartList, false>, true>>>()? {
            first.get_or_insert(c.0.0.0);
        }
        Ok(CandidateList(Some(first.unwrap_or_default())))
    }
}

/// An object's `type`, when it is a string.
#[derive(Default)]
struct Typed<'a>(Option<Cow<'a, str>>);

impl<'de> Node<'de> for Typed<'de> {
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut ty = None;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if key.0 == "type" {
                ty = map.next_value::<N<Text<'de>>>()?.0.0;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(Typed(ty))
    }
}

/// A top-level `delta`: an object (Anthropic), a string (Responses API), or anything else.
#[derive(Default)]
pub(super) enum Delta<'a> {
    /// An object: its `type` and its `text`'s length, when strings.
    Object { ty: Option<Cow<'a, str>>, text: Option<usize> },
    /// A string's length.
    Str(usize),
    /// Any other value.
    #[default]
    Other,
}

impl<'de> Node<'de> for Delta<'de> {
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let (mut ty, mut text) = (None, None);
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match &*key.0 {
                "type" => ty = map.next_value::<N<Text<'de>>>()?.0.0,
                "text" => text = map.next_value::<N<StrLen>>()?.0.0,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Delta::Object { ty, text })
    }
    fn str(s: &str) -> Self {
        Delta::Str(s.len())
    }
}

/// The fields of one event that the watchdog reads.
#[derive(Default)]
pub(super) struct View<'a> {
    /// `type`, when a string.
    pub ty: Option<Cow<'a, str>>,
    /// `content_block.type`, when a string.
    pub block_type: Option<Cow<'a, str>>,
    /// `choices`, when an array.
    pub choices: Option<Choices>,
    /// `delta`, when present.
    pub delta: Option<Delta<'a>>,
    /// `usage`, when present: whether it is not `null`.
    pub usage: Option<bool>,
    /// Gemini's `usageMetadata`, when present: whether it is not `null`.
    pub usage_metadata: Option<bool>,
    /// Gemini's `candidates`, when an array: its first candidate's parts as choices.
    pub candidates: Option<Choices>,
}

impl<'de> Node<'de> for View<'de> {
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut v = View::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match &*key.0 {
                "type" => v.ty = map.next_value::<N<Text<'de>>>()?.0.0,
                "content_block" => v.block_type = map.next_value::<N<Typed<'de>>>()?.0.0,
                "choices" => v.choices = map.next_value::<N<ChoiceList>>()?.0.0,
                "delta" => v.delta = Some(map.next_value::<N<Delta<'de>>>()?.0),
                "usage" => v.usage = Some(map.next_value::<NotNull>()?.0),
                "usageMetadata" => v.usage_metadata = Some(map.next_value::<NotNull>()?.0),
                "candidates" => v.candidates = map.next_value::<N<CandidateList>>()?.0.0,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(v)
    }
}

/// Reads an event's data; `None` when it is not valid JSON.
pub(super) fn read(data: &str) -> Option<View<'_>> {
    serde_json::from_str::<N<View<'_>>>(data).ok().map(|n| n.0)
}
