//! Same-format hops: the client's body reaches the provider byte for byte except for the value
//! of its top-level `model` (key order, number spelling and unknown fields all kept).

/// Returns `raw` with every top-level `"model"` value replaced by `model` (a JSON string), or
/// `None` when `raw` is not a JSON object with such a member.
pub fn replace_model(raw: &[u8], model: &str) -> Option<Vec<u8>> {
    let mut spans = Vec::new();
    let mut i = skip_ws(raw, 0);
    if raw.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(raw, i + 1);
    if raw.get(i) == Some(&b'}') {
        return None;
    }
    loop {
        let key_start = i;
        let key_end = skip_string(raw, i)?;
        let key = &raw[key_start..key_end];
        i = skip_ws(raw, key_end);
        if raw.get(i) != Some(&b':') {
            return None;
        }
        let value_start = skip_ws(raw, i + 1);
        let value_end = skip_value(raw, value_start)?;
        if key == b"\"model\"" {
            spans.push((value_start, value_end));
        }
        i = skip_ws(raw, value_end);
        match raw.get(i) {
            Some(b',') => i = skip_ws(raw, i + 1),
            Some(b'}') => break,
            _ => return None,
        }
    }
    if spans.is_empty() {
        return None;
    }
    splice(raw, &spans, model)
}

/// Returns `raw` with the value at `at` (the top-level `model`'s, as the head's pass found it)
/// replaced by `model` (a JSON string); `None` when `at` is not within `raw`.
pub fn model_at(raw: &[u8], at: std::ops::Range<usize>, model: &str) -> Option<Vec<u8>> {
    raw.get(at.clone())?;
    splice(raw, &[(at.start, at.end)], model)
}

/// `raw` with each of `spans` (in order, within `raw`) replaced by `model` as a JSON string.
///
/// The result is exactly as long as its capacity, so that it becomes `Bytes` without another
/// allocation; a model name that needs no escaping (the usual one) is written as it is.
fn splice(raw: &[u8], spans: &[(usize, usize)], model: &str) -> Option<Vec<u8>> {
    let plain = !model.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\');
    let escaped = if plain { None } else { Some(serde_json::to_vec(model).ok()?) };
    let encoded_len = escaped.as_ref().map_or(model.len() + 2, Vec::len);
    let replaced: usize = spans.iter().map(|&(s, e)| e - s).sum();
    let mut out = Vec::with_capacity(raw.len().saturating_sub(replaced) + spans.len() * encoded_len);
    let mut at = 0;
    for &(s, e) in spans {
        out.extend_from_slice(&raw[at..s]);
        match &escaped {
            Some(encoded) => out.extend_from_slice(encoded),
            None => {
                out.push(b'"');
                out.extend_from_slice(model.as_bytes());
                out.push(b'"');
            }
        }
        at = e;
    }
    out.extend_from_slice(&raw[at..]);
    Some(out)
}

fn skip_ws(raw: &[u8], mut i: usize) -> usize {
    while raw.get(i).is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The end (exclusive) of the string starting at `i`.
pub(crate) fn skip_string(raw: &[u8], i: usize) -> Option<usize> {
    if raw.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    loop {
        match raw.get(j)? {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
}

/// The end (exclusive) of the value starting at `i`.
fn skip_value(raw: &[u8], i: usize) -> Option<usize> {
    match raw.get(i)? {
        b'"' => skip_string(raw, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match raw.get(j)? {
                    b'"' => {
                        j = skip_string(raw, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while raw.get(j).is_some_and(|b| !matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')) {
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{model_at, replace_model};
    use crate::edge::head::Head;
    use proptest::prelude::*;

    /// The head's pass finds the value `replace_model` would replace, and rewriting it there
    /// gives the same bytes.
    fn at_agrees(raw: &[u8]) {
        let head = Head::parse(raw).expect("an object");
        let at = head.model_span.clone().expect("one model key");
        assert_eq!(model_at(raw, at, "p/m\"x\""), replace_model(raw, "p/m\"x\""), "{}", String::from_utf8_lossy(raw));
    }

    #[test]
    fn the_heads_span_is_where_the_model_is() {
        at_agrees(br#"{ "z": 1.50, "model" : "combo", "messages":[{"model":"inner","x":"}\"{"}], "a": 1e3 }"#);
        at_agrees(br#"{"model":{"a":[1,"]"]},"stream":true}"#);
        at_agrees(b"{\"messages\":[],\n\t\"model\"\r\n:\n 12.5e1 \n}");
        at_agrees(br#"{"model":"with \"quotes\" and \u00e9"}"#);
        // No span where the key repeats, or is absent: the slow path decides.
        assert_eq!(Head::parse(br#"{"model":"a","model":"b"}"#).expect("object").model_span, None);
        assert_eq!(Head::parse(br#"{"a":"model"}"#).expect("object").model_span, None);
        assert_eq!(model_at(b"{}", 1..9, "m"), None, "a span outside the bytes is refused");
    }

    proptest! {
        #[test]
        fn a_drawn_body_is_rewritten_at_its_span_as_by_a_scan(
            before in proptest::collection::vec(("[a-z]{1,6}", "[ -~]{0,12}"), 0..4),
            after in proptest::collection::vec(("[a-z]{1,6}", "[ -~]{0,12}"), 0..4),
            model in "[ -~]{0,16}",
            space in "[ \t\n]{0,2}",
        ) {
            let member = |(k, v): &(String, String)| format!("\"x{k}\":{space}{}", serde_json::Value::from(v.as_str()));
            let mut members: Vec<String> = before.iter().map(member).collect();
            members.push(format!("{space}\"model\"{space}:{space}{}{space}", serde_json::Value::from(model.as_str())));
            members.extend(after.iter().map(member));
            let raw = format!("{{{}}}", members.join(","));
            at_agrees(raw.as_bytes());
        }
    }

    #[test]
    fn only_the_top_level_model_changes() {
        let raw = br#"{ "z": 1.50, "model" : "combo", "messages":[{"model":"inner","x":"}\"{"}], "a": 1e3 }"#;
        let out = replace_model(raw, "claude-\"x\"").expect("replaced");
        assert_eq!(
            String::from_utf8_lossy(&out),
            r#"{ "z": 1.50, "model" : "claude-\"x\"", "messages":[{"model":"inner","x":"}\"{"}], "a": 1e3 }"#
        );
    }

    #[test]
    fn the_model_is_written_as_serde_writes_it_and_the_bytes_fill_their_buffer() {
        let raw = br#"{"model" : "combo", "n": 1}"#;
        for model in ["m", "", "p/m-1.5", "caf\u{e9} \u{1f600}", "q\"t", "b\\s", "tab\t", "nul\u{0}", "\u{7f}/x"] {
            let out = model_at(raw, 11..18, model).expect("replaced");
            let want = format!(r#"{{"model" : {}, "n": 1}}"#, serde_json::to_string(model).expect("json"));
            assert_eq!(String::from_utf8_lossy(&out), want, "{model:?}");
            assert_eq!(out.len(), out.capacity(), "{model:?}: Bytes::from takes the buffer as it is");
            let twice = replace_model(br#"{"model":"a","x":{"model":"b"}}"#, model).expect("replaced");
            assert_eq!(twice.len(), twice.capacity(), "{model:?}");
        }
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        assert_eq!(replace_model(b"[1]", "m"), None);
        assert_eq!(replace_model(b"{}", "m"), None);
        assert_eq!(replace_model(br#"{"a":1}"#, "m"), None);
        assert_eq!(replace_model(br#"{"model":"#, "m"), None);
        assert_eq!(replace_model(br#"{"model":"x""#, "m"), None);
    }
}
