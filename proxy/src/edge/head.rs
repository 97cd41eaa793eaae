//! What the request path reads of a client's JSON body before it chooses a provider: the
//! model, the fields each API requires, `stream` and its options, the number of tools. A
//! Chat or Messages body is read for these in one pass that builds nothing else (every other
//! value is skipped, still checked as JSON); the whole body becomes a `serde_json::Value` only
//! when something needs it ([`JsonBody`]): a translation, a session key taken from the body,
//! a strategy that hashes the prompt. A same-format request with affinity off never needs it.

use bytes::Bytes;
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::fmt;
use std::sync::OnceLock;

/// The fields read before routing. Where a key repeats, the last one counts (as in a
/// `serde_json::Value`).
#[derive(Debug, Default, Clone)]
pub struct Head {
    /// `model`, as sent.
    pub model: Option<Value>,
    /// Whether `messages` is an array.
    pub messages_is_array: bool,
    /// Whether `max_tokens` is present.
    pub has_max_tokens: bool,
    /// Whether `input` is present (Responses).
    pub has_input: bool,
    /// `stream`, as sent.
    pub stream: Option<Value>,
    /// `stream_options.include_usage` is `true`.
    pub include_usage: bool,
    /// The length of `tools` when it is an array, else 0.
    pub tools: usize,
    /// `background` is `true` (Responses).
    pub background: bool,
    /// Where the value of `model` lies in the bytes read, when the object has one `model` key:
    /// a same-format hop rewrites it there without reading the body again.
    pub model_span: Option<std::ops::Range<usize>>,
}

/// Why a body is not a request: not JSON, or JSON but not an object.
#[derive(Debug)]
pub enum BadBody {
    /// Not valid JSON.
    Invalid(serde_json::Error),
    /// Valid JSON (as far as it was read) but not an object.
    NotAnObject,
}

impl Head {
    /// Reads a body's head in one pass.
    pub fn parse(raw: &[u8]) -> Result<Head, BadBody> {
        let read = serde_json::from_slice::<Read<'_>>(raw);
        let read = read.map_err(|e| {
            // A type error at the top level: JSON, but no object. Inside an object nothing is
            // read strictly, so an error there is the JSON's own (a number out of range, say).
            let object = raw.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
            match e.classify() {
                serde_json::error::Category::Data if !object => BadBody::NotAnObject,
                _ => BadBody::Invalid(e),
            }
        })?;
        let mut head = read.head;
        head.model_span = match read.model {
            Model::One(v) => {
                let text = v.get();
                // The value's text is a slice of `raw`: its place is the distance between them.
                let start = (text.as_ptr() as usize).checked_sub(raw.as_ptr() as usize);
                start.map(|s| s..s + text.len()).filter(|r| raw.get(r.clone()) == Some(text.as_bytes()))
            }
            Model::None | Model::Repeated => None,
        };
        Ok(head)
    }

    /// The same fields of an already parsed object.
    pub fn of(body: &Value) -> Head {
        Head {
            model: body.get("model").cloned(),
            model_span: None,
            messages_is_array: body.get("messages").is_some_and(Value::is_array),
            has_max_tokens: body.get("max_tokens").is_some(),
            has_input: body.get("input").is_some(),
            stream: body.get("stream").cloned(),
            include_usage: include_usage(body.get("stream_options")),
            tools: body.get("tools").and_then(Value::as_array).map_or(0, Vec::len),
            background: body.get("background") == Some(&Value::Bool(true)),
        }
    }
}

fn include_usage(options: Option<&Value>) -> bool {
    options.and_then(|o| o.get("include_usage")).and_then(Value::as_bool).unwrap_or(false)
}

/// The keys the head reads.
enum Field {
    Model,
    Messages,
    MaxTokens,
    Input,
    Stream,
    StreamOptions,
    Tools,
    Background,
    Other,
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Field, D::Error> {
        struct Name;
        impl Visitor<'_> for Name {
            type Value = Field;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Field, E> {
                Ok(match key {
                    "model" => Field::Model,
                    "messages" => Field::Messages,
                    "max_tokens" => Field::MaxTokens,
                    "input" => Field::Input,
                    "stream" => Field::Stream,
                    "stream_options" => Field::StreamOptions,
                    "tools" => Field::Tools,
                    "background" => Field::Background,
                    _ => Field::Other,
                })
            }
        }
        d.deserialize_identifier(Name)
    }
}

/// Any value, skipped; the number of elements if it is an array.
struct Elements(Option<usize>);

impl<'de> Deserialize<'de> for Elements {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Elements, D::Error> {
        struct Count;
        impl<'de> Visitor<'de> for Count {
            type Value = Elements;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Elements, A::Error> {
                let mut n = 0;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Elements(Some(n)))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Elements, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Elements(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Elements, E> {
                Ok(Elements(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Elements, E> {
                Ok(Elements(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Elements, E> {
                Ok(Elements(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Elements, E> {
                Ok(Elements(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Elements, E> {
                Ok(Elements(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Elements, E> {
                Ok(Elements(None))
            }
        }
        d.deserialize_any(Count)
    }
}

/// The contents of a JSON string with no escapes (the text of a value already read as JSON).
fn plain_string(json: &str) -> Option<&str> {
    let inner = json.strip_prefix('"')?.strip_suffix('"')?;
    (!inner.contains('\\')).then_some(inner)
}

/// The head as read, with the text of `model` borrowed from the bytes.
struct Read<'de> {
    head: Head,
    model: Model<'de>,
}

/// The top-level `model` keys seen, and the text of the value when there is one.
enum Model<'de> {
    None,
    One(&'de serde_json::value::RawValue),
    Repeated,
}

impl<'de> Deserialize<'de> for Read<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Read<'de>, D::Error> {
        struct Object;
        impl<'de> Visitor<'de> for Object {
            type Value = Read<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Read<'de>, A::Error> {
                let mut h = Head::default();
                let mut model = Model::None;
                while let Some(field) = map.next_key::<Field>()? {
                    match field {
                        Field::Model => {
                            let text: &'de serde_json::value::RawValue = map.next_value()?;
                            h.model = Some(match plain_string(text.get()) {
                                Some(s) => Value::String(s.to_owned()),
                                None => serde_json::from_str(text.get()).map_err(de::Error::custom)?,
                            });
                            model = match model {
                                Model::None => Model::One(text),
                                _ => Model::Repeated,
                            };
                        }
                        Field::Messages => h.messages_is_array = map.next_value::<Elements>()?.0.is_some(),
                        Field::MaxTokens => h.has_max_tokens = map.next_value::<IgnoredAny>().map(|_| true)?,
                        Field::Input => h.has_input = map.next_value::<IgnoredAny>().map(|_| true)?,
                        Field::Stream => h.stream = Some(map.next_value()?),
                        Field::StreamOptions => h.include_usage = include_usage(Some(&map.next_value::<Value>()?)),
                        Field::Tools => h.tools = map.next_value::<Elements>()?.0.unwrap_or(0),
                        Field::Background => h.background = map.next_value::<Value>()? == Value::Bool(true),
                        Field::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(Read { head: h, model })
            }
        }
        d.deserialize_map(Object)
    }
}

/// A request body as a `serde_json::Value`, parsed from the client's bytes the first time it is
/// read. The head was read from the same bytes, so they are JSON; the one thing the head's pass
/// does not check is nesting depth, which `serde_json` limits to 128: a deeper body parses as
/// nothing here ([`JsonBody::try_get`] says why).
#[derive(Debug, Clone)]
pub struct JsonBody {
    raw: Option<Bytes>,
    parsed: OnceLock<Result<Value, String>>,
}

impl JsonBody {
    /// A body already parsed.
    pub fn parsed(v: Value) -> JsonBody {
        JsonBody { raw: None, parsed: OnceLock::from(Ok(v)) }
    }

    /// A body to parse when first read.
    pub fn lazy(raw: Bytes) -> JsonBody {
        JsonBody { raw: Some(raw), parsed: OnceLock::new() }
    }

    /// The value, or why the bytes could not become one.
    pub fn try_get(&self) -> Result<&Value, &str> {
        let parsed = self.parsed.get_or_init(|| match &self.raw {
            Some(raw) => serde_json::from_slice(raw).map_err(|e| format!("the request body cannot be read: {e}")),
            None => Ok(Value::Null),
        });
        parsed.as_ref().map_err(String::as_str)
    }

    /// The value (`null` when the bytes could not become one).
    pub fn get(&self) -> &Value {
        static NULL: Value = Value::Null;
        self.try_get().unwrap_or(&NULL)
    }

    /// The value, to change: from then on the client's bytes no longer describe the body.
    /// Bytes that cannot become a value (nested beyond `serde_json`'s depth limit) are an error,
    /// and the body is left as it was: nothing is ever rewritten from `null`.
    pub fn try_get_mut(&mut self) -> Result<&mut Value, String> {
        if let Err(e) = self.try_get() {
            return Err(e.to_owned());
        }
        self.raw = None;
        match self.parsed.get_mut() {
            Some(Ok(v)) => Ok(v),
            _ => unreachable!("parsed above"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-pass head agrees with the same fields read off a `serde_json::Value`.
    fn agrees(text: &str) {
        // Where `model` lies is known only from bytes (see the passthrough's tests).
        let head = Head { model_span: None, ..Head::parse(text.as_bytes()).expect("an object") };
        let value: Value = serde_json::from_str(text).expect("json");
        let of = Head::of(&value);
        assert_eq!(format!("{head:?}"), format!("{of:?}"), "{text}");
    }

    #[test]
    fn the_head_reads_what_a_value_would() {
        agrees(r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}"#);
        agrees(r#"{"model":{"x":1},"messages":{"a":[1]},"max_tokens":10,"stream":"yes","tools":[{},{},[]]}"#);
        agrees(r#"{"stream_options":{"include_usage":true},"stream":null,"tools":{"a":1},"background":true}"#);
        agrees(r#"{"stream_options":{"include_usage":"true"},"input":null,"background":false,"tools":7}"#);
        // Repeated keys: the last counts.
        agrees(r#"{"model":"a","model":"b","tools":[1],"tools":[1,2,3],"messages":[],"messages":1}"#);
        // Escaped keys are read as their text.
        agrees(r#"{"mod\u0065l":"m","\u0073tream":false}"#);
        agrees("{}");
    }

    #[test]
    fn a_body_that_is_not_an_object_or_not_json_is_told_apart() {
        for text in ["[1]", "\"x\"", "1", "null"] {
            assert!(matches!(Head::parse(text.as_bytes()), Err(BadBody::NotAnObject)), "{text}");
        }
        for text in
            ["", "{", r#"{"model":}"#, r#"{"a":1} x"#, r#"{"a":[1,]}"#, "{\"a\":\"\u{1}\"}", r#"{"stream":1e400}"#]
        {
            assert!(matches!(Head::parse(text.as_bytes()), Err(BadBody::Invalid(_))), "{text}");
        }
    }

    #[test]
    fn the_body_is_parsed_when_first_read() {
        let body = JsonBody::lazy(Bytes::from_static(br#"{"model":"m","n":1}"#));
        assert!(body.parsed.get().is_none());
        assert_eq!(body.get()["n"], 1);
        let mut body = body.clone();
        body.try_get_mut().expect("a value")["n"] = 2.into();
        assert_eq!(body.get()["n"], 2);
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
        assert!(Head::parse(deep.as_bytes()).is_ok(), "the head's pass does not limit depth");
        let body = JsonBody::lazy(Bytes::from(deep));
        assert!(body.try_get().is_err_and(|e| e.contains("recursion limit")));
        assert!(body.get().is_null());
        let mut body = body.clone();
        assert!(body.try_get_mut().is_err_and(|e| e.contains("recursion limit")), "never rewritten from null");
        assert!(body.try_get().is_err(), "the body is left as it was");
    }
}
