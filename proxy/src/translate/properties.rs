//! Translation properties: a request or a stream translated there and back keeps its meaning,
//! the fast paths write what the general translation writes, and no input makes a translator
//! panic or write broken JSON.

use super::responses_stream::ChatToResponses;
use super::stream::Translate;
use super::stream_chat::MessagesToChat;
use super::stream_messages::ChatToMessages;
use super::tests::{anthropic_tool_stream, openai_tool_stream, parsed, reassemble_chat, run};
use super::{chat_messages, messages_chat, responses};
use proptest::prelude::*;
use serde_json::{Value, json};

fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 ,.!?\"\\\\{}\n]{1,24}"
}

/// A canonical chat request: one optional system prompt, then user turns, each optionally
/// answered by an assistant turn with text and/or tool calls whose results follow as tool
/// messages.
fn chat_request() -> impl Strategy<Value = Value> {
    let call = (text(), "[a-z_]{1,8}", prop::collection::btree_map("[a-z]{1,5}", any::<i32>(), 0..3));
    let turn = (text(), prop::option::of(text()), prop::collection::vec(call, 0..3));
    (prop::option::of(text()), prop::collection::vec(turn, 1..4), 1u64..4000, prop::option::of(0.0f64..=1.0))
        .prop_map(|(system, turns, max_tokens, temperature)| {
            let mut messages = Vec::new();
            if let Some(s) = system {
                messages.push(json!({"role": "system", "content": s}));
            }
            let mut n = 0;
            for (user, answer, calls) in turns {
                messages.push(json!({"role": "user", "content": user}));
                if answer.is_none() && calls.is_empty() {
                    messages.push(json!({"role": "assistant", "content": "ok"}));
                    continue;
                }
                let mut a = json!({"role": "assistant", "content": answer});
                if !calls.is_empty() {
                    let tc: Vec<Value> = calls
                        .iter()
                        .map(|(_, name, args)| {
                            n += 1;
                            json!({"id": format!("call_{n}"), "type": "function",
                                "function": {"name": name, "arguments": serde_json::to_string(args).unwrap_or_default()}})
                        })
                        .collect();
                    a["tool_calls"] = Value::Array(tc.clone());
                    messages.push(a);
                    for (c, (result, _, _)) in tc.iter().zip(&calls) {
                        messages.push(json!({"role": "tool", "tool_call_id": c["id"], "content": result}));
                    }
                } else {
                    messages.push(a);
                }
            }
            let mut req = json!({"model": "m", "messages": messages, "max_tokens": max_tokens, "stop": ["STOP"]});
            if let Some(t) = temperature {
                req["temperature"] = t.into();
            }
            req
        })
}

/// Plain chat requests: string turns in any order, the plain sampling fields.
fn plain_chat_request() -> impl Strategy<Value = Value> {
    let role = prop::sample::select(vec!["system", "developer", "user", "assistant"]);
    let turn = (role, prop::option::of(text()));
    (
        prop::collection::vec(turn, 1..6),
        prop::option::of(1u64..9000),
        prop::option::of(0.0f64..=1.0),
        prop::option::of(any::<bool>()),
    )
        .prop_map(|(turns, max_tokens, temperature, stream)| {
            let messages: Vec<Value> =
                turns.into_iter().map(|(r, t)| json!({"role": r, "content": t.unwrap_or_default()})).collect();
            let mut req = json!({"model": "m", "messages": messages});
            if let Some(n) = max_tokens {
                req["max_tokens"] = n.into();
            }
            if let Some(t) = temperature {
                req["temperature"] = t.into();
                req["top_p"] = 0.5.into();
            }
            if let Some(s) = stream {
                req["stream"] = s.into();
                req["stream_options"] = json!({"include_usage": true});
            }
            req
        })
}

proptest! {
    #[test]
    fn the_plain_fast_path_writes_what_the_general_translation_builds(chat in plain_chat_request()) {
        let fast = chat_messages::plain_request(&chat).expect("plain requests take the fast path");
        let mut fast: Value = serde_json::from_slice(&fast).expect("fast path writes JSON");
        fast["model"] = Value::Null;
        // Both go through text once (floats are compared as the provider will read them).
        let general = chat_messages::request(&chat).expect("translates").body.to_string();
        let mut general: Value = serde_json::from_str(&general).expect("json");
        general["model"] = Value::Null;
        prop_assert_eq!(fast, general);
    }

    #[test]
    fn the_fast_path_takes_only_what_it_writes_the_same(mut chat in chat_request(), keep_stop in any::<bool>()) {
        // Over requests with and without tool turns and `stop`: whatever the fast path takes,
        // it writes as the general translation does; tool turns and `stop` it leaves alone.
        if !keep_stop {
            chat.as_object_mut().map(|o| o.remove("stop"));
        }
        let tools = chat["messages"].as_array().is_some_and(|m| m.iter().any(|m| m.get("tool_calls").is_some() || m["role"] == "tool"));
        match chat_messages::plain_request(&chat) {
            Some(fast) => {
                prop_assert!(!tools && !keep_stop, "took a request it does not cover: {}", chat);
                let mut fast: Value = serde_json::from_slice(&fast).expect("fast path writes JSON");
                let mut general: Value = serde_json::from_str(&chat_messages::request(&chat).expect("translates").body.to_string()).expect("json");
                fast["model"] = Value::Null;
                general["model"] = Value::Null;
                prop_assert_eq!(fast, general);
            }
            None => prop_assert!(tools || keep_stop, "declined a plain request: {}", chat),
        }
    }

    #[test]
    fn chat_to_messages_and_back_keeps_the_request(chat in chat_request()) {
        let there = chat_messages::request(&chat).expect("translates");
        let mut back = messages_chat::request(&there.body).expect("translates back").body;
        back["model"] = chat["model"].clone();
        prop_assert_eq!(back, chat);
    }

    #[test]
    fn messages_to_chat_and_back_keeps_the_request(chat in chat_request()) {
        // Start from the Messages form of a canonical request.
        let msg = chat_messages::request(&chat).expect("translates").body;
        let there = messages_chat::request(&msg).expect("translates");
        let back = chat_messages::request(&there.body).expect("translates back").body;
        prop_assert_eq!(back, msg);
    }

    #[test]
    fn deltas_read_without_parsing_translate_as_parsed_ones(texts in prop::collection::vec("\\PC{0,12}", 1..5)) {
        // Anthropic's own key order takes the quick path; the same events with their keys in
        // another order take the full parse. The chunks must be the same.
        let mut quick = anthropic_tool_stream();
        let mut parsed_order = anthropic_tool_stream();
        for (k, t) in texts.iter().enumerate() {
            let exact = format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":{}}}}}"#, serde_json::to_string(t).unwrap_or_default());
            let reordered = json!({"delta": {"text": t, "type": "text_delta"}, "index": 0, "type": "content_block_delta"}).to_string();
            quick.insert(3 + k, (Some("content_block_delta".into()), exact));
            parsed_order.insert(3 + k, (Some("content_block_delta".into()), reordered));
        }
        let a = run(&mut MessagesToChat::new(1, true), &quick);
        let b = run(&mut MessagesToChat::new(1, true), &parsed_order);
        prop_assert_eq!(parsed(&a), parsed(&b));
        prop_assert_eq!(reassemble_chat(&a).0, format!("{}Okay, let's check the weather.", texts.concat()));
    }

    #[test]
    fn a_stream_through_both_translators_keeps_text_and_tool_calls(
        parts in prop::collection::vec(text(), 1..6),
        args in prop::collection::vec("[a-z0-9:,{}\" ]{0,6}", 0..5),
    ) {
        let mut input = openai_tool_stream();
        input.splice(1..2, parts.iter().map(|p| (None, json!({"id":"c","model":"g","choices":[{"index":0,"delta":{"content":p},"finish_reason":null}]}).to_string())));
        let at = input.len() - 3;
        for (k, a) in args.iter().enumerate() {
            input.insert(at + k, (None, json!({"id":"c","model":"g","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":a}}]},"finish_reason":null}]}).to_string()));
        }
        let original = reassemble_chat(&input);
        let anthropic = run(&mut ChatToMessages::new(), &input);
        let back = run(&mut MessagesToChat::new(0, true), &anthropic);
        prop_assert_eq!(reassemble_chat(&back), original);
    }
}

/// Arbitrary JSON, biased towards the field names the translators look at.
fn any_json() -> impl Strategy<Value = Value> {
    let key = prop::sample::select(vec![
        "model",
        "messages",
        "role",
        "content",
        "type",
        "text",
        "tool_calls",
        "function",
        "name",
        "arguments",
        "tools",
        "tool_choice",
        "input",
        "system",
        "max_tokens",
        "stream",
        "delta",
        "index",
        "choices",
        "usage",
        "message",
        "content_block",
        "error",
        "source",
        "data",
        "id",
        "call_id",
        "output",
        "file",
        "image_url",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        prop::sample::select(vec![
            "user",
            "assistant",
            "system",
            "tool",
            "text",
            "tool_use",
            "tool_result",
            "function",
            "image",
            "document",
            "message_start",
            "content_block_delta",
            "text_delta",
            "input_json_delta",
            "[DONE]",
            "data:application/pdf;base64,AA",
            "data:image/png;base64,AA",
            "{",
            ""
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

proptest! {
    #[test]
    fn no_input_makes_a_translator_panic(v in any_json(), name in prop::option::of("[a-z_]{0,20}")) {
        let text = v.to_string();
        let _ = chat_messages::request(&v);
        let _ = chat_messages::plain_request(&v);
        let _ = messages_chat::request(&v);
        let _ = responses::request(&v);
        let _ = chat_messages::response(text.as_bytes(), 0);
        let _ = messages_chat::response(text.as_bytes());
        let _ = responses::ResponseBuilder::new("p", 0, &v).from_chat(&v);
        let mut out = Vec::new();
        let mut a = MessagesToChat::new(0, true);
        let mut b = ChatToMessages::new();
        let mut c = ChatToResponses::new(responses::ResponseBuilder::new("p", 0, &v));
        for t in [&mut a as &mut dyn Translate, &mut b, &mut c] {
            t.push(name.as_deref(), &text, &mut out);
            t.push(name.as_deref(), "[DONE]", &mut out);
            t.finish(&mut out);
        }
        for (_, d) in &out {
            prop_assert!(d == "[DONE]" || serde_json::from_str::<Value>(d).is_ok(), "not JSON: {}", d);
        }
    }
}

proptest! {
    #[test]
    fn a_delta_read_without_parsing_never_yields_broken_json(rest in "\\PC{0,40}", raw in prop::collection::vec(any::<u8>(), 0..40)) {
        let tail = String::from_utf8_lossy(&raw).into_owned();
        for payload in [
            format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":{rest}"#),
            format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"{tail}"}}}}"#),
            format!(r#"{{"type":"content_block_delta","index":7,"delta":{{"type":"input_json_delta","partial_json":"{rest}"}}}}"#),
        ] {
            let mut out = Vec::new();
            MessagesToChat::new(0, false).push(Some("content_block_delta"), &payload, &mut out);
            for (_, d) in &out {
                prop_assert!(serde_json::from_str::<Value>(d).is_ok(), "not JSON: {} from {}", d, payload);
            }
        }
    }
}
