//! Translation tests by example: the providers' documented wire shapes as fixtures, each
//! direction of each translator, and what is refused or dropped. The properties are in
//! `properties.rs`; the fixtures and helpers here serve both.

use super::responses_stream::ChatToResponses;
use super::stream::{Event, Translate};
use super::stream_chat::MessagesToChat;
use super::stream_messages::ChatToMessages;
use super::{chat_messages, messages_chat, responses};
use serde_json::{Value, json};

pub(super) fn run(t: &mut dyn Translate, input: &[Event]) -> Vec<Event> {
    let mut out = Vec::new();
    for (n, d) in input {
        t.push(n.as_deref(), d, &mut out);
    }
    t.finish(&mut out);
    out
}

pub(super) fn parsed(events: &[Event]) -> Vec<Value> {
    events.iter().filter_map(|(_, d)| serde_json::from_str(d).ok()).collect()
}

/// Anthropic's documented streaming example with a tool call (text, then tool_use with
/// partial JSON, then message_delta and message_stop), with a ping in between.
pub(super) fn anthropic_tool_stream() -> Vec<Event> {
    let ev = |n: &str, v: Value| (Some(n.to_owned()), v.to_string());
    vec![
        ev(
            "message_start",
            json!({"type":"message_start","message":{"id":"msg_014p7gG3wDgGV9EUtLvnow3U","type":"message","role":"assistant","model":"claude-sonnet-4-5","stop_sequence":null,"usage":{"input_tokens":472,"output_tokens":2},"content":[],"stop_reason":null}}),
        ),
        ev(
            "content_block_start",
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        ),
        ev("ping", json!({"type":"ping"})),
        ev(
            "content_block_delta",
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay, let's check"}}),
        ),
        ev(
            "content_block_delta",
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" the weather."}}),
        ),
        ev("content_block_stop", json!({"type":"content_block_stop","index":0})),
        ev(
            "content_block_start",
            json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}),
        ),
        ev(
            "content_block_delta",
            json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}),
        ),
        ev(
            "content_block_delta",
            json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\":"}}),
        ),
        ev(
            "content_block_delta",
            json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" \"San Francisco, CA\"}"}}),
        ),
        ev("content_block_stop", json!({"type":"content_block_stop","index":1})),
        ev(
            "message_delta",
            json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}),
        ),
        ev("message_stop", json!({"type":"message_stop"})),
    ]
}

/// OpenAI's documented chat stream with a tool call, then a usage chunk and `[DONE]`.
pub(super) fn openai_tool_stream() -> Vec<Event> {
    let c = |delta: Value, finish: Value| {
        (None, json!({"id":"chatcmpl-123","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":delta,"finish_reason":finish}]}).to_string())
    };
    vec![
        c(json!({"role":"assistant","content":""}), Value::Null),
        c(json!({"content":"Let me look."}), Value::Null),
        c(json!({"tool_calls":[{"index":0,"id":"call_abc","type":"function","function":{"name":"get_weather","arguments":""}}]}), Value::Null),
        c(json!({"tool_calls":[{"index":0,"function":{"arguments":"{\"location\":"}}]}), Value::Null),
        c(json!({"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}), Value::Null),
        c(json!({}), json!("tool_calls")),
        (None, json!({"id":"chatcmpl-123","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":9,"total_tokens":29}}).to_string()),
        (None, "[DONE]".into()),
    ]
}

/// Text and tool calls reassembled from chat chunks.
pub(super) fn reassemble_chat(events: &[Event]) -> (String, Vec<(String, String, String)>, Option<String>) {
    let mut text = String::new();
    let mut calls: Vec<(String, String, String)> = Vec::new();
    let mut finish = None;
    for v in parsed(events) {
        let Some(c) = v.pointer("/choices/0") else { continue };
        if let Some(t) = c.pointer("/delta/content").and_then(Value::as_str) {
            text.push_str(t);
        }
        for tc in c.pointer("/delta/tool_calls").and_then(Value::as_array).cloned().unwrap_or_default() {
            let i = tc["index"].as_u64().unwrap_or(0) as usize;
            if calls.len() <= i {
                calls.resize(i + 1, Default::default());
            }
            if let Some(id) = tc["id"].as_str() {
                calls[i].0 = id.to_owned();
            }
            if let Some(n) = tc.pointer("/function/name").and_then(Value::as_str) {
                calls[i].1 = n.to_owned();
            }
            if let Some(a) = tc.pointer("/function/arguments").and_then(Value::as_str) {
                calls[i].2.push_str(a);
            }
        }
        if let Some(f) = c["finish_reason"].as_str() {
            finish = Some(f.to_owned());
        }
    }
    (text, calls, finish)
}

#[test]
fn an_anthropic_stream_reaches_a_chat_client_as_chunks_with_tool_call_deltas() {
    let out = run(&mut MessagesToChat::new(7, true), &anthropic_tool_stream());
    let (text, calls, finish) = reassemble_chat(&out);
    assert_eq!(text, "Okay, let's check the weather.");
    assert_eq!(
        calls,
        vec![(
            "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
            "get_weather".into(),
            r#"{"location": "San Francisco, CA"}"#.into()
        )]
    );
    assert_eq!(finish.as_deref(), Some("tool_calls"));
    let last = parsed(&out).into_iter().rfind(|v| v.get("usage").is_some()).expect("a usage chunk");
    assert_eq!(last["usage"]["prompt_tokens"], 472);
    assert_eq!(last["usage"]["completion_tokens"], 89);
    assert_eq!(out.last().map(|e| e.1.as_str()), Some("[DONE]"));
    assert!(out.iter().all(|(n, _)| n.is_none()), "chat chunks carry no event names");
}

#[test]
fn a_chat_stream_reaches_a_messages_client_as_anthropic_events() {
    let out = run(&mut ChatToMessages::new(), &openai_tool_stream());
    let names: Vec<&str> = out.iter().filter_map(|(n, _)| n.as_deref()).collect();
    assert_eq!(
        names,
        vec![
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let v = parsed(&out);
    assert_eq!(v[4]["content_block"], json!({"type":"tool_use","id":"call_abc","name":"get_weather","input":{}}));
    assert_eq!(v[4]["index"], 1);
    let args: String = v.iter().filter_map(|e| e.pointer("/delta/partial_json").and_then(Value::as_str)).collect();
    assert_eq!(args, r#"{"location":"Paris"}"#);
    assert_eq!(v[8]["delta"]["stop_reason"], "tool_use");
    assert_eq!(v[8]["usage"]["output_tokens"], 9);
    assert_eq!(v[8]["usage"]["input_tokens"], 20);
}

#[test]
fn a_chat_stream_reaches_a_responses_client_as_response_events() {
    let req = json!({"model": "combo", "input": "weather?", "stream": true});
    let b = responses::ResponseBuilder::new("r1", 5, &req);
    let out = run(&mut ChatToResponses::new(b), &openai_tool_stream());
    let kinds: Vec<&str> = out.iter().filter_map(|(n, _)| n.as_deref()).collect();
    assert_eq!(kinds.first(), Some(&"response.created"));
    assert!(kinds.contains(&"response.output_text.delta"));
    assert!(kinds.contains(&"response.function_call_arguments.delta"));
    assert_eq!(kinds.last(), Some(&"response.completed"));
    let done = parsed(&out).pop().expect("completed");
    let r = &done["response"];
    assert_eq!(r["status"], "completed");
    assert_eq!(r["output"][0]["content"][0]["text"], "Let me look.");
    assert_eq!(r["output"][1]["type"], "function_call");
    assert_eq!(r["output"][1]["call_id"], "call_abc");
    assert_eq!(r["output"][1]["arguments"], r#"{"location":"Paris"}"#);
    assert_eq!(r["usage"]["total_tokens"], 29);
    let seqs: Vec<u64> = parsed(&out).iter().filter_map(|v| v["sequence_number"].as_u64()).collect();
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>(), "sequence numbers count up from 0");
}

#[test]
fn an_error_mid_stream_ends_each_client_stream_in_its_own_shape() {
    let mut out = Vec::new();
    let mut t = MessagesToChat::new(0, false);
    t.push(Some("error"), r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#, &mut out);
    t.finish(&mut out);
    assert_eq!(
        parsed(&out),
        vec![json!({"error":{"message":"Overloaded","type":"server_error","code":"overloaded_error"}})]
    );
    let mut out = Vec::new();
    let mut t = ChatToMessages::new();
    t.error("STREAM_THROUGHPUT_TOO_LOW", "too slow", &mut out);
    t.finish(&mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0.as_deref(), Some("error"));
    let mut out = Vec::new();
    let mut t = ChatToResponses::new(responses::ResponseBuilder::new("x", 0, &json!({"model": "m"})));
    t.error("upstream_stream_error", "broke", &mut out);
    let last = parsed(&out).pop().expect("failed event");
    assert_eq!(last["type"], "response.failed");
    assert_eq!(last["response"]["error"]["code"], "upstream_stream_error");
}

#[test]
fn a_chat_request_becomes_a_messages_request() {
    let chat = json!({
        "model": "x", "max_tokens": 100, "temperature": 0.5, "stop": "END", "user": "u-1", "stream": true,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "look", "arguments": "{\"q\":1}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "a cat"},
            {"role": "user", "content": "and?"}
        ],
        "tools": [{"type": "function", "function": {"name": "look", "description": "Look", "parameters": {"type": "object", "properties": {"q": {"type": "integer"}}}}}],
        "tool_choice": "required", "parallel_tool_calls": false
    });
    let t = chat_messages::request(&chat).expect("translates");
    assert_eq!(t.dropped, Vec::<String>::new());
    let b = &t.body;
    assert_eq!(b["system"], "Be brief.");
    assert_eq!(b["max_tokens"], 100);
    assert_eq!(b["stop_sequences"], json!(["END"]));
    assert_eq!(b["metadata"], json!({"user_id": "u-1"}));
    assert_eq!(b["tool_choice"], json!({"type": "any", "disable_parallel_tool_use": true}));
    assert_eq!(b["tools"][0]["input_schema"]["properties"]["q"]["type"], "integer");
    assert_eq!(
        b["messages"][0]["content"][1]["source"],
        json!({"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="})
    );
    assert_eq!(
        b["messages"][1]["content"][0],
        json!({"type": "tool_use", "id": "call_1", "name": "look", "input": {"q": 1}})
    );
    assert_eq!(
        b["messages"][2]["content"],
        json!([{"type": "tool_result", "tool_use_id": "call_1", "content": "a cat"}, {"type": "text", "text": "and?"}])
    );
    assert_eq!(chat_messages::request(&json!({"model": "x", "messages": []})).expect("ok").body["max_tokens"], 4096);
    // A limit that is not a positive integer is the client's mistake, named, never replaced by
    // the default.
    for bad in [json!("100"), json!(-1), json!(0), json!(1.5)] {
        let e = chat_messages::request(&json!({"model": "x", "messages": [], "max_tokens": bad})).expect_err("invalid");
        assert_eq!((e.feature.as_str(), e.kind), ("max_tokens", super::Cause::Invalid));
        assert!(chat_messages::plain_request(&json!({"model": "x", "messages": [], "max_tokens": bad})).is_none());
    }
}

#[test]
fn pdf_documents_cross_both_ways() {
    let chat = json!({"model": "x", "max_tokens": 4096, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "summarise"},
        {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0x"}}]}]});
    let msg = chat_messages::request(&chat).expect("translates").body;
    assert_eq!(
        msg["messages"][0]["content"][1],
        json!({"type": "document", "title": "a.pdf", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"}})
    );
    let mut back = messages_chat::request(&msg).expect("translates back").body;
    back["model"] = "x".into();
    assert_eq!(back, chat);
    let e = chat_messages::request(&json!({"model": "x", "messages": [{"role": "user", "content": [
        {"type": "file", "file": {"file_id": "file-1"}}]}]}))
    .expect_err("no file store");
    assert_eq!(e.feature, "messages[0].content[0].file.file_id");
    let e = messages_chat::request(&json!({"model": "x", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}}]}]}))
    .expect_err("url documents");
    assert_eq!(e.feature, "messages[0].content[0].source");
}

#[test]
fn what_anthropic_lacks_is_refused_by_name() {
    let base = |extra: Value| {
        let mut v = json!({"model": "x", "messages": [{"role": "user", "content": "hi"}]});
        for (k, val) in extra.as_object().cloned().unwrap_or_default() {
            v[k] = val;
        }
        v
    };
    for (extra, feature) in [
        (json!({"n": 2}), "n"),
        (json!({"logprobs": true}), "logprobs"),
        (json!({"response_format": {"type": "json_object"}}), "response_format"),
        (json!({"temperature": 1.5}), "temperature"),
        (json!({"frequency_penalty": 0.5}), "frequency_penalty"),
        (json!({"tools": [{"type": "custom", "custom": {"name": "x"}}]}), "tools[0].type=custom"),
        (json!({"audio": {"voice": "alloy"}}), "audio"),
    ] {
        let e = chat_messages::request(&base(extra.clone())).expect_err("refused");
        assert_eq!(e.feature, feature, "{extra}");
    }
}

#[test]
fn a_messages_request_becomes_a_chat_request_and_advice_is_named() {
    let msg = json!({
        "model": "x", "max_tokens": 64, "stream": true,
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "run ls"}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "a b"}], "is_error": true},
                {"type": "text", "text": "now?"}]}
        ],
        "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
        "thinking": {"type": "enabled", "budget_tokens": 10000},
        "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
        "metadata": {"user_id": "u"}
    });
    let t = messages_chat::request(&msg).expect("translates");
    assert_eq!(t.dropped, vec!["cache_control", "thinking blocks in the history", "context_management"]);
    let b = &t.body;
    assert_eq!(b["messages"][0], json!({"role": "system", "content": "You are Claude Code."}));
    assert_eq!(
        b["messages"][2]["tool_calls"][0]["function"],
        json!({"name": "Bash", "arguments": "{\"command\":\"ls\"}"})
    );
    assert_eq!(b["messages"][3], json!({"role": "tool", "tool_call_id": "toolu_1", "content": "[tool error] a b"}));
    assert_eq!(b["messages"][4], json!({"role": "user", "content": "now?"}));
    assert_eq!(b["reasoning_effort"], "high");
    assert_eq!(b["stream_options"], json!({"include_usage": true}));
    assert_eq!(b["user"], "u");
    let e =
        messages_chat::request(&json!({"model": "x", "max_tokens": 5, "messages": [], "top_k": 3})).expect_err("top_k");
    assert_eq!(e.feature, "top_k");
    // A server tool cannot run on a chat provider: offered, it is dropped and named; forced,
    // the request is refused.
    let t = messages_chat::request(&json!({"model": "x", "max_tokens": 5, "messages": [],
        "tools": [{"type": "web_search_20250305", "name": "web_search"}, {"name": "f", "input_schema": {"type": "object"}}]}))
    .expect("offer dropped");
    assert_eq!(t.dropped, vec!["tools:web_search_20250305"]);
    assert_eq!(t.body["tools"].as_array().map(Vec::len), Some(1));
    let e = messages_chat::request(&json!({"model": "x", "max_tokens": 5, "messages": [],
        "tools": [{"type": "web_search_20250305", "name": "web_search"}], "tool_choice": {"type": "tool", "name": "web_search"}}))
    .expect_err("forced server tool");
    assert_eq!(e.feature, "tool_choice.name=web_search");
    assert_eq!(
        messages_chat::betas("claude-code-20250219, interleaved-thinking-2025-05-14").expect("advisory"),
        vec!["anthropic-beta:claude-code-20250219", "anthropic-beta:interleaved-thinking-2025-05-14"]
    );
    assert_eq!(
        messages_chat::betas("mcp-client-2025-04-04").expect_err("refused").feature,
        "anthropic-beta: mcp-client-2025-04-04"
    );
}

#[test]
fn answers_translate_both_ways() {
    let msg = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "text", "text": "Hi"}, {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}],
        "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 3, "cache_read_input_tokens": 5}});
    let chat: Value =
        serde_json::from_str(&chat_messages::response(msg.to_string().as_bytes(), 9).expect("answer")).expect("json");
    assert_eq!(chat["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(chat["choices"][0]["message"]["content"], "Hi");
    assert_eq!(chat["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
    assert_eq!(
        chat["usage"],
        json!({"prompt_tokens": 15, "completion_tokens": 3, "total_tokens": 18, "prompt_tokens_details": {"cached_tokens": 5}})
    );
    let back: Value =
        serde_json::from_str(&messages_chat::response(chat.to_string().as_bytes()).expect("answer")).expect("json");
    assert_eq!(back["content"], msg["content"]);
    assert_eq!(back["stop_reason"], "tool_use");
    assert_eq!(back["usage"]["input_tokens"], 10);
    assert_eq!(back["usage"]["cache_read_input_tokens"], 5);
    let r = responses::ResponseBuilder::new("id", 3, &json!({"model": "m", "input": "x"})).from_chat(&chat);
    assert_eq!(r["object"], "response");
    assert_eq!(
        r["output"][0]["content"][0],
        json!({"type": "output_text", "text": "Hi", "annotations": [], "logprobs": []})
    );
    assert_eq!(r["output"][1]["arguments"], "{\"a\":1}");
    assert_eq!(r["usage"]["input_tokens"], 15);
}

#[test]
fn a_responses_request_becomes_chat_and_stored_state_is_refused() {
    let req = json!({
        "model": "m", "instructions": "Be terse.", "max_output_tokens": 50, "store": false,
        "reasoning": {"effort": "low"}, "include": ["reasoning.encrypted_content"],
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{\"cmd\":[\"ls\"]}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "a\nb"}
        ],
        "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}, "strict": false}],
        "tool_choice": "auto"
    });
    let t = responses::request(&req).expect("translates");
    assert_eq!(t.dropped, vec!["reasoning items", "include"]);
    let b = &t.body;
    assert_eq!(b["messages"][0], json!({"role": "system", "content": "Be terse."}));
    assert_eq!(b["messages"][1], json!({"role": "user", "content": "list files"}));
    assert_eq!(b["messages"][2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(b["messages"][3], json!({"role": "tool", "tool_call_id": "call_1", "content": "a\nb"}));
    assert_eq!(b["tools"][0]["function"]["name"], "shell");
    assert_eq!(b["max_tokens"], 50);
    assert_eq!(b["reasoning_effort"], "low");
    let e =
        responses::request(&json!({"model": "m", "input": "x", "previous_response_id": "resp_1"})).expect_err("stored");
    assert_eq!(e.feature, "previous_response_id");
    let t =
        responses::request(&json!({"model": "m", "input": "x", "tools": [{"type": "web_search"}]})).expect("dropped");
    assert_eq!(t.dropped, vec!["tools:web_search"]);
    assert!(t.body.get("tools").is_none());
}

#[test]
fn the_final_response_is_taken_from_the_stream_crlf_framed_too() {
    let stream = b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r1\",\"status\":\"in_progress\"}}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r1\",\"status\":\"completed\",\"output\":[]}}\n\n";
    let r: Value =
        serde_json::from_slice(&super::chat_responses::final_response(stream).expect("final")).expect("JSON");
    assert_eq!(r["status"], "completed");
    let failed = b"data: {\"type\":\"response.failed\",\"response\":{\"error\":{\"code\":\"server_error\"}}}\n\n";
    assert!(super::chat_responses::final_response(failed).expect_err("failed").contains("response.failed"));
    assert!(super::chat_responses::final_response(b"").is_err());
    // Framing is the event-stream parser's: CRLF line ends work as LF ones.
    let crlf = String::from_utf8_lossy(stream).replace('\n', "\r\n");
    assert!(super::chat_responses::final_response(crlf.as_bytes()).is_ok());
}
