//! The Gemini and Responses-provider translations, field by field.

use super::stream::{Event, Translate};
use super::{chat_gemini, chat_responses, gemini_chat, stream_gemini};
use serde_json::{Value, json};

fn data(events: &[Event]) -> Vec<Value> {
    events.iter().filter_map(|(_, d)| serde_json::from_str(d).ok()).collect()
}

#[test]
fn a_gemini_request_becomes_chat_field_by_field() {
    let req = json!({
        "system_instruction": {"parts": [{"text": "be "}, {"text": "brief"}]},
        "contents": [
            {"role": "user", "parts": [{"text": "look: "}, {"inlineData": {"mimeType": "image/png", "data": "AAAA"}}]},
            {"role": "model", "parts": [{"text": "calling", "thoughtSignature": "sig"}, {"functionCall": {"name": "ls", "args": {"dir": "/"}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"result": "a.txt"}}}]},
        ],
        "tools": [{"functionDeclarations": [{"name": "ls", "description": "list", "parameters": {"type": "OBJECT", "properties": {"dir": {"type": "STRING"}}}}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["ls"]}},
        "generationConfig": {"temperature": 0.2, "topP": 0.9, "maxOutputTokens": 99, "stopSequences": ["END"],
            "responseMimeType": "application/json", "responseSchema": {"type": "OBJECT"},
            "thinkingConfig": {"thinkingBudget": 3000, "includeThoughts": true}},
    });
    let t = gemini_chat::request(&req, "gem/flash", true).expect("translates");
    let c = &t.body;
    assert_eq!(c["model"], "gem/flash");
    assert_eq!(c["messages"][0], json!({"role": "system", "content": "be brief"}));
    assert_eq!(
        c["messages"][1]["content"][1],
        json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}})
    );
    let call = &c["messages"][2]["tool_calls"][0];
    assert_eq!(
        (call["id"].as_str(), call["function"]["arguments"].as_str()),
        (Some("call_gemini_0"), Some(r#"{"dir":"/"}"#))
    );
    assert_eq!(c["messages"][3], json!({"role": "tool", "tool_call_id": "call_gemini_0", "content": "a.txt"}));
    assert_eq!(
        c["tools"][0]["function"]["parameters"],
        json!({"type": "object", "properties": {"dir": {"type": "string"}}})
    );
    assert_eq!(c["tool_choice"], json!({"type": "function", "function": {"name": "ls"}}));
    assert_eq!(
        (c["temperature"].as_f64(), c["top_p"].as_f64(), c["max_tokens"].as_u64()),
        (Some(0.2), Some(0.9), Some(99))
    );
    assert_eq!(c["stop"], json!(["END"]));
    assert_eq!(c["response_format"]["json_schema"]["schema"], json!({"type": "object"}));
    assert_eq!(c["reasoning_effort"], "medium");
    assert_eq!(c["stream_options"], json!({"include_usage": true}));
    assert_eq!(t.dropped, vec!["thoughtSignature", "generationConfig.thinkingConfig.includeThoughts"]);
}

#[test]
fn gemini_features_other_formats_lack_are_refused_by_name() {
    let base = json!({"contents": [{"parts": [{"text": "x"}]}]});
    let with = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        b
    };
    for (req, field) in [
        (with("tools", json!([{"codeExecution": {}}])), "tools[0].codeExecution"),
        (with("generationConfig", json!({"candidateCount": 3})), "generationConfig.candidateCount"),
        (
            with("generationConfig", json!({"responseMimeType": "text/x.enum"})),
            "generationConfig.responseMimeType=text/x.enum",
        ),
        (with("generationConfig", json!({"speechConfig": {}})), "generationConfig.speechConfig"),
        (
            with("toolConfig", json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["a", "b"]}})),
            "toolConfig.functionCallingConfig.allowedFunctionNames",
        ),
        (json!({"contents": [{"parts": [{"fileData": {"fileUri": "gs://x"}}]}]}), "contents[0].parts[0].fileData"),
        (
            json!({"contents": [{"parts": [{"functionResponse": {"name": "nobody", "response": {}}}]}]}),
            "contents[0].parts[0].functionResponse",
        ),
    ] {
        let e = gemini_chat::request(&req, "m", false).expect_err(field);
        assert_eq!(e.feature, field);
    }
}

#[test]
fn chat_becomes_a_gemini_request_with_calls_named_by_function() {
    let chat = json!({"model": "x", "messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QQ=="}}]},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
        {"role": "tool", "tool_call_id": "call_9", "content": "{\"ok\":true}"},
        {"role": "tool", "tool_call_id": "call_9", "content": "plain"},
    ], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}], "tool_choice": "required",
       "max_tokens": 10, "stop": "Z", "response_format": {"type": "json_object"}, "reasoning_effort": "low", "user": "u"});
    let t = chat_gemini::request(&chat).expect("translates");
    let g = &t.body;
    assert!(g.get("model").is_none(), "the model goes in the URL");
    assert_eq!(g["systemInstruction"], json!({"parts": [{"text": "sys"}]}));
    assert_eq!(g["contents"][0]["parts"][1], json!({"inlineData": {"mimeType": "image/jpeg", "data": "QQ=="}}));
    assert_eq!(
        g["contents"][1],
        json!({"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"a": 1}}}]})
    );
    // Both results in one user turn, each named by the call it answers.
    assert_eq!(
        g["contents"][2]["parts"],
        json!([{"functionResponse": {"name": "f", "response": {"ok": true}}}, {"functionResponse": {"name": "f", "response": {"result": "plain"}}}])
    );
    assert_eq!(
        g["tools"][0]["functionDeclarations"][0],
        json!({"name": "f", "parametersJsonSchema": {"type": "object"}})
    );
    assert_eq!(g["toolConfig"], json!({"functionCallingConfig": {"mode": "ANY"}}));
    assert_eq!(
        g["generationConfig"],
        json!({"maxOutputTokens": 10, "stopSequences": ["Z"], "responseMimeType": "application/json", "thinkingConfig": {"thinkingBudget": 1024}})
    );
    assert_eq!(t.dropped, vec!["user"]);
    let url = json!({"model": "x", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]});
    assert_eq!(chat_gemini::request(&url).expect_err("no URLs").feature, "messages[0].content[0]");
}

#[test]
fn a_gemini_answer_becomes_chat_and_back() {
    let answer = json!({"candidates": [{"content": {"role": "model", "parts": [
        {"text": "thinking…", "thought": true}, {"text": "it is "}, {"text": "sunny"},
        {"functionCall": {"name": "f", "args": {"a": 1}}}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 7, "thoughtsTokenCount": 3, "totalTokenCount": 15},
        "modelVersion": "gemini-2.5-flash", "responseId": "r1"});
    let chat: Value =
        serde_json::from_slice(&chat_gemini::response(answer.to_string().as_bytes(), 9, "m").expect("chat"))
            .expect("json");
    let m = &chat["choices"][0]["message"];
    assert_eq!((m["content"].as_str(), m["reasoning_content"].as_str()), (Some("it is sunny"), Some("thinking…")));
    assert_eq!(m["tool_calls"][0]["id"], "call_gemini_0");
    assert_eq!(chat["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        (chat["usage"]["prompt_tokens"].as_u64(), chat["usage"]["completion_tokens"].as_u64()),
        (Some(5), Some(10))
    );
    let back: Value = serde_json::from_slice(&gemini_chat::response(chat.to_string().as_bytes(), "m").expect("gemini"))
        .expect("json");
    assert_eq!(back["candidates"][0]["content"]["parts"][0], json!({"text": "thinking…", "thought": true}));
    assert_eq!(back["candidates"][0]["content"]["parts"][2]["functionCall"]["args"], json!({"a": 1}));
    assert_eq!(
        back["usageMetadata"],
        json!({"promptTokenCount": 5, "candidatesTokenCount": 7, "thoughtsTokenCount": 3, "totalTokenCount": 15})
    );
    // A blocked prompt is a refusal.
    let blocked = json!({"promptFeedback": {"blockReason": "SAFETY"}});
    let chat: Value =
        serde_json::from_slice(&chat_gemini::response(blocked.to_string().as_bytes(), 0, "m").expect("chat"))
            .expect("json");
    assert_eq!(chat["choices"][0]["finish_reason"], "content_filter");
    assert!(chat["choices"][0]["message"]["refusal"].as_str().is_some_and(|r| r.contains("SAFETY")));
}

#[test]
fn a_gemini_stream_becomes_chat_chunks_with_stable_call_ids_and_back() {
    let mut t = stream_gemini::GeminiToChat::new(1, true, "m");
    let mut out = Vec::new();
    for chunk in [
        json!({"candidates": [{"content": {"parts": [{"text": "hel"}]}}], "responseId": "r", "modelVersion": "g"}),
        json!({"candidates": [{"content": {"parts": [{"text": "lo"}, {"functionCall": {"name": "f", "args": {}}}]}}]}),
        json!({"candidates": [{"content": {"parts": [{"functionCall": {"name": "g", "args": {"x": 2}}}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 2}}),
    ] {
        t.push(None, &chunk.to_string(), &mut out);
    }
    t.finish(&mut out);
    t.finish(&mut out);
    let chunks = data(&out);
    assert_eq!(out.last().map(|e| e.1.as_str()), Some("[DONE]"));
    assert_eq!(out.iter().filter(|e| e.1 == "[DONE]").count(), 1, "finished once");
    let ids: Vec<&str> =
        chunks.iter().filter_map(|c| c.pointer("/choices/0/delta/tool_calls/0/id")?.as_str()).collect();
    assert_eq!(ids, ["call_gemini_0", "call_gemini_1"]);
    assert_eq!(
        chunks.iter().rev().nth(1).and_then(|c| c.pointer("/choices/0/finish_reason")),
        Some(&json!("tool_calls"))
    );
    assert_eq!(chunks.last().and_then(|c| c.pointer("/usage/completion_tokens")), Some(&json!(2)));

    // And those chat chunks back to Gemini events: text as it comes, each call whole at the end.
    let mut g = stream_gemini::ChatToGemini::new("m");
    let mut back = Vec::new();
    for (_, d) in &out {
        g.push(None, d, &mut back);
    }
    let events = data(&back);
    let text: String =
        events.iter().filter_map(|e| e.pointer("/candidates/0/content/parts/0/text")?.as_str()).collect();
    assert_eq!(text, "hello");
    let last = events.last().expect("events");
    assert_eq!(last.pointer("/candidates/0/finishReason"), Some(&json!("STOP")));
    assert_eq!(last.pointer("/candidates/0/content/parts/1/functionCall/args"), Some(&json!({"x": 2})));
    assert_eq!(last.pointer("/usageMetadata/candidatesTokenCount"), Some(&json!(2)));
    // A mid-stream error reaches a Gemini client as Google's error object.
    let mut g = stream_gemini::ChatToGemini::new("m");
    let mut err = Vec::new();
    g.error("upstream_stream_error", "broke", &mut err);
    assert_eq!(data(&err)[0]["error"]["status"], "INTERNAL");
}

#[test]
fn chat_becomes_a_responses_request_and_a_response_becomes_chat() {
    let chat = json!({"model": "x", "messages": [
        {"role": "developer", "content": "rules"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "calling", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": true}}],
       "tool_choice": {"type": "function", "function": {"name": "f"}}, "max_completion_tokens": 50, "reasoning_effort": "high",
       "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}, "strict": true}}});
    let r = chat_responses::request(&chat).expect("translates").body;
    assert_eq!(r["instructions"], "rules");
    assert_eq!(r["store"], false);
    assert_eq!(r["input"][0], json!({"role": "user", "content": [{"type": "input_text", "text": "hi"}]}));
    assert_eq!(r["input"][2], json!({"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}));
    assert_eq!(r["input"][3], json!({"type": "function_call_output", "call_id": "c1", "output": "done"}));
    assert_eq!(
        r["tools"][0],
        json!({"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": true})
    );
    assert_eq!(r["tool_choice"], json!({"type": "function", "name": "f"}));
    assert_eq!((r["max_output_tokens"].as_u64(), &r["reasoning"]), (Some(50), &json!({"effort": "high"})));
    assert_eq!(
        r["text"]["format"],
        json!({"type": "json_schema", "name": "s", "schema": {"type": "object"}, "strict": true})
    );
    let stop = json!({"model": "x", "messages": [], "stop": ["x"]});
    assert_eq!(chat_responses::request(&stop).expect_err("no stop").feature, "stop");

    let response = json!({"id": "resp_1", "object": "response", "status": "incomplete", "model": "gpt",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [{"type": "reasoning", "summary": [{"type": "summary_text", "text": "hmm"}]},
                   {"type": "message", "content": [{"type": "output_text", "text": "partial"}]}],
        "usage": {"input_tokens": 3, "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 1}}});
    let c: Value = serde_json::from_slice(&chat_responses::response(response.to_string().as_bytes(), 2).expect("chat"))
        .expect("json");
    assert_eq!(c["choices"][0]["message"]["content"], "partial");
    assert_eq!(c["choices"][0]["message"]["reasoning_content"], "hmm");
    assert_eq!(c["choices"][0]["finish_reason"], "length");
    assert_eq!(c["usage"]["completion_tokens_details"]["reasoning_tokens"], 1);
    assert!(chat_responses::response(br#"{"choices":[]}"#, 0).is_err(), "not a Response object");
}

#[test]
fn a_responses_stream_that_ends_without_completing_is_an_error_not_a_clean_end() {
    let mut t = chat_responses::ResponsesToChat::new(0, true);
    let mut out = Vec::new();
    t.push(Some("response.output_text.delta"), r#"{"type":"response.output_text.delta","delta":"par"}"#, &mut out);
    t.finish(&mut out);
    let last = data(&out).pop().expect("events");
    assert_eq!(last["error"]["code"], "upstream_stream_incomplete");
    assert!(out.iter().all(|e| e.1 != "[DONE]"));
}
