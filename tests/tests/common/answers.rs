//! What an answer says, in each client API's shape, whole or streamed: its text and the tools
//! it calls with their arguments, checked for the stream's own framing on the way.

use super::{Reply, sse_data};
use serde_json::Value;

/// (text, [(tool name, arguments JSON)]) of a chat answer, whole or streamed.
pub fn read_chat(r: &Reply) -> (String, Vec<(String, Value)>) {
    if r.header("content-type") == Some("text/event-stream") {
        let mut text = String::new();
        let mut calls: Vec<(String, String)> = Vec::new();
        for d in sse_data(&r.body) {
            let Ok(v) = serde_json::from_str::<Value>(&d) else { continue };
            if let Some(t) = v.pointer("/choices/0/delta/content").and_then(Value::as_str) {
                text.push_str(t);
            }
            for c in v.pointer("/choices/0/delta/tool_calls").and_then(Value::as_array).cloned().unwrap_or_default() {
                if let Some(n) = c.pointer("/function/name").and_then(Value::as_str) {
                    calls.push((n.to_owned(), String::new()));
                }
                if let (Some(a), Some(last)) =
                    (c.pointer("/function/arguments").and_then(Value::as_str), calls.last_mut())
                {
                    last.1.push_str(a);
                }
            }
        }
        assert_eq!(sse_data(&r.body).last().map(String::as_str), Some("[DONE]"), "{}", r.body);
        return (
            text,
            calls.into_iter().map(|(n, a)| (n, serde_json::from_str(&a).expect("arguments JSON"))).collect(),
        );
    }
    let v = r.json();
    let m = &v["choices"][0]["message"];
    let calls = m["tool_calls"].as_array().cloned().unwrap_or_default();
    let calls = calls
        .iter()
        .map(|c| {
            let args = c["function"]["arguments"].as_str().expect("arguments string");
            (
                c["function"]["name"].as_str().unwrap_or("").to_owned(),
                serde_json::from_str(args).expect("arguments JSON"),
            )
        })
        .collect();
    (m["content"].as_str().unwrap_or("").to_owned(), calls)
}

/// The same for a Messages answer.
pub fn read_messages(r: &Reply) -> (String, Vec<(String, Value)>) {
    if r.header("content-type") == Some("text/event-stream") {
        let mut text = String::new();
        let mut calls: Vec<(String, String)> = Vec::new();
        let mut kinds = Vec::new();
        for d in sse_data(&r.body) {
            let v: Value = serde_json::from_str(&d).expect("event JSON");
            kinds.push(v["type"].as_str().unwrap_or("").to_owned());
            match v["type"].as_str() {
                Some("content_block_start") if v["content_block"]["type"] == "tool_use" => {
                    calls.push((v["content_block"]["name"].as_str().unwrap_or("").to_owned(), String::new()))
                }
                Some("content_block_delta") => {
                    if let Some(t) = v.pointer("/delta/text").and_then(Value::as_str) {
                        text.push_str(t);
                    }
                    if let (Some(a), Some(last)) =
                        (v.pointer("/delta/partial_json").and_then(Value::as_str), calls.last_mut())
                    {
                        last.1.push_str(a);
                    }
                }
                _ => {}
            }
        }
        assert_eq!(kinds.first().map(String::as_str), Some("message_start"), "{}", r.body);
        assert_eq!(kinds.last().map(String::as_str), Some("message_stop"), "{}", r.body);
        return (
            text,
            calls.into_iter().map(|(n, a)| (n, serde_json::from_str(&a).expect("partial JSON joins"))).collect(),
        );
    }
    let v = r.json();
    assert_eq!(v["type"], "message", "{}", r.body);
    let mut text = String::new();
    let mut calls = Vec::new();
    for b in v["content"].as_array().cloned().unwrap_or_default() {
        match b["type"].as_str() {
            Some("text") => text.push_str(b["text"].as_str().unwrap_or("")),
            Some("tool_use") => calls.push((b["name"].as_str().unwrap_or("").to_owned(), b["input"].clone())),
            _ => {}
        }
    }
    (text, calls)
}

/// The same for a Responses answer.
pub fn read_responses(r: &Reply) -> (String, Vec<(String, Value)>) {
    let object = if r.header("content-type") == Some("text/event-stream") {
        let events: Vec<Value> =
            sse_data(&r.body).iter().map(|d| serde_json::from_str(d).expect("event JSON")).collect();
        assert_eq!(events.first().map(|e| e["type"].clone()), Some("response.created".into()), "{}", r.body);
        let last = events.last().expect("events");
        assert_eq!(last["type"], "response.completed", "{}", r.body);
        let streamed: String = events
            .iter()
            .filter(|e| e["type"] == "response.output_text.delta")
            .filter_map(|e| e["delta"].as_str())
            .collect();
        let object = last["response"].clone();
        let (text, _) = read_response_object(&object);
        assert_eq!(streamed, text, "the deltas add up to the completed response: {}", r.body);
        object
    } else {
        r.json()
    };
    assert_eq!(object["object"], "response", "{}", r.body);
    read_response_object(&object)
}

fn read_response_object(v: &Value) -> (String, Vec<(String, Value)>) {
    let mut text = String::new();
    let mut calls = Vec::new();
    for item in v["output"].as_array().cloned().unwrap_or_default() {
        match item["type"].as_str() {
            Some("message") => {
                for p in item["content"].as_array().cloned().unwrap_or_default() {
                    text.push_str(p["text"].as_str().unwrap_or(""));
                }
            }
            Some("function_call") => calls.push((
                item["name"].as_str().unwrap_or("").to_owned(),
                serde_json::from_str(item["arguments"].as_str().unwrap_or("")).expect("arguments JSON"),
            )),
            _ => {}
        }
    }
    (text, calls)
}

/// The same for a Gemini answer: every event of a stream is a `GenerateContentResponse`, and
/// only the last one says why it finished.
pub fn read_gemini(r: &Reply) -> (String, Vec<(String, Value)>) {
    let chunks: Vec<Value> = if r.header("content-type") == Some("text/event-stream") {
        sse_data(&r.body).iter().map(|d| serde_json::from_str(d).expect("event JSON")).collect()
    } else {
        // `:streamGenerateContent` without `alt=sse`: one JSON array of the same objects.
        match r.json() {
            Value::Array(a) => a,
            v => vec![v],
        }
    };
    let mut text = String::new();
    let mut calls = Vec::new();
    for (i, c) in chunks.iter().enumerate() {
        assert!(c.get("error").is_none(), "{}", r.body);
        let finish = c.pointer("/candidates/0/finishReason");
        assert_eq!(finish.is_some(), i + 1 == chunks.len(), "only the last chunk finishes: {}", r.body);
        for p in c.pointer("/candidates/0/content/parts").and_then(Value::as_array).cloned().unwrap_or_default() {
            if let Some(t) = p["text"].as_str() {
                text.push_str(t);
            }
            if let Some(f) = p.get("functionCall") {
                calls.push((f["name"].as_str().unwrap_or("").to_owned(), f["args"].clone()));
            }
        }
    }
    let last = chunks.last().expect("an answer");
    assert!(last.pointer("/usageMetadata/totalTokenCount").is_some(), "usage comes last: {}", r.body);
    (text, calls)
}
