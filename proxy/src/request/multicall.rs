//! The multi-call strategies (M15): `fusion` sends the request to every target at once and
//! has a judge model write one answer from theirs; `pipeline` runs the targets in sequence,
//! each improving the previous answer. Every call is an ordinary dispatch (breakers,
//! cooldowns, fallback among a target's connections, the retry budget), so a failing member is
//! skipped rather than failing the request. A request that offers tools bypasses both (a
//! tool call cannot be merged or improved): it routes over the targets in order.

use crate::config::Format;
use crate::edge::auth::Client;
use crate::edge::body::whole;
use crate::edge::errors::{Body, ProxyError, Source, full};
use crate::request::dispatch::dispatch;
use crate::request::exchange::{self, Inbound};
use crate::request::plan::{ask, plan, prepare_all};
use crate::request::resolve::MultiCall;
use crate::request::resolve::Plan;
use crate::state::gateway::Gateway;
use crate::translate::{ClientApi, Untranslatable};
use http::{HeaderValue, Response};
use hyper_util::client::legacy::connect::Connect;
use serde_json::Value;
use std::sync::Arc;

/// Header: how many members answered, of how many asked (`fusion`), or how many steps
/// improved the answer (`pipeline`).
pub const MEMBERS: &str = "x-ferroute-combo-members";

/// What the judge is asked, above the panel's answers.
const JUDGE_PROMPT: &str = "Several assistants answered the conversation above. Their answers follow, each inside <answer> tags. Write the single best answer to the last user message: keep what they got right, resolve their disagreements, correct their mistakes. Reply with that answer only, without mentioning the other assistants.";

/// What each pipeline step after the first is asked, below the previous draft.
const IMPROVE_PROMPT: &str =
    "Improve the answer above: correct mistakes, fill gaps, keep what is right. Reply with the improved answer only.";

/// Runs a multi-call combo.
pub async fn run<C: Connect + Clone + Send + Sync + 'static>(
    gw: Arc<Gateway<C>>,
    plan_: Plan,
    multi: MultiCall,
    inbound: &Inbound,
    client: &Client,
) -> Response<Body> {
    let shape = exchange::error_shape(inbound.api);
    // Members are sent a rewritten body: one that cannot be read as a value (nested beyond
    // serde_json's depth limit) is refused here, not sent as an empty request.
    if let Err(e) = inbound.body.try_get() {
        return exchange::untranslatable(Untranslatable::invalid("body", e)).into_response_as(shape);
    }
    let has_tools = inbound.tools > 0;
    if has_tools {
        return routed(gw, Plan { multi: None, ..plan_ }, inbound).await;
    }
    match multi {
        MultiCall::Fusion { judge } => fusion(gw, plan_, &judge, inbound, client).await,
        MultiCall::Pipeline => pipeline(gw, plan_, inbound).await,
    }
    .unwrap_or_else(|e| e.into_response_as(shape))
}

/// An ordinary dispatch of `plan` for `inbound`.
async fn routed<C: Connect + Clone + Send + Sync + 'static>(
    gw: Arc<Gateway<C>>,
    plan_: Plan,
    inbound: &Inbound,
) -> Response<Body> {
    let shape = exchange::error_shape(inbound.api);
    let (plan_, mut preps) = match prepare_all(&gw, plan_, inbound) {
        Ok(x) => x,
        Err(e) => return e.into_response_as(shape),
    };
    let a = ask(plan_.strategy, inbound);
    dispatch(gw, plan_, inbound, &mut preps, a).await
}

/// The plan of one pool member: its connections only.
fn member(plan_: &Plan, index: usize) -> Plan {
    Plan {
        targets: plan_.targets.iter().filter(|t| t.target_index == index).cloned().collect(),
        combo: false,
        key: format!("{}#{index}", plan_.key),
        pool: plan_.pool.get(index).cloned().into_iter().collect::<Vec<_>>().into(),
        multi: None,
        ..plan_.clone()
    }
}

/// The request as an intermediate call: not streamed (in the body sent upstream too).
fn quiet(inbound: &Inbound) -> Inbound {
    let mut out =
        Inbound { stream: false, include_usage: false, raw: None, model_at: None, native: None, ..inbound.clone() };
    // `run` refused a body that cannot be rewritten before any call was made.
    if let Some(body) = out.body.try_get_mut().ok().and_then(Value::as_object_mut) {
        body.insert("stream".into(), Value::Bool(false));
        body.remove("stream_options");
    }
    out
}

/// A member's answer: the response (read whole) and its text, when it succeeded.
struct Answer {
    response: Response<Body>,
    text: Option<String>,
}

async fn answer<C: Connect + Clone + Send + Sync + 'static>(
    gw: Arc<Gateway<C>>,
    plan_: Plan,
    inbound: Inbound,
) -> Answer {
    let resp = routed(gw, plan_, &inbound).await;
    let (parts, body) = resp.into_parts();
    let bytes = whole(body).await.unwrap_or_default();
    let text = if parts.status.is_success() {
        serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| text_of(inbound.api, &v))
            .filter(|t| !t.trim().is_empty())
    } else {
        None
    };
    Answer { response: Response::from_parts(parts, full(bytes)), text }
}

/// The answer's text in the client API's shape.
pub fn text_of(api: ClientApi, v: &Value) -> Option<String> {
    match api {
        ClientApi::Chat => v.pointer("/choices/0/message/content").and_then(Value::as_str).map(str::to_owned),
        ClientApi::Messages => {
            let blocks = v.get("content")?.as_array()?;
            let text: Vec<&str> = blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            (!text.is_empty()).then(|| text.concat())
        }
        ClientApi::Responses => {
            let mut out = String::new();
            for item in v.get("output")?.as_array()? {
                if item.get("type").and_then(Value::as_str) != Some("message") {
                    continue;
                }
                for part in item.get("content").and_then(Value::as_array).into_iter().flatten() {
                    if part.get("type").and_then(Value::as_str) == Some("output_text") {
                        out.push_str(part.get("text").and_then(Value::as_str).unwrap_or(""));
                    }
                }
            }
            (!out.is_empty()).then_some(out)
        }
        ClientApi::Gemini => {
            let parts = v.pointer("/candidates/0/content/parts")?.as_array()?;
            let text: String = parts
                .iter()
                .filter(|p| p.get("thought") != Some(&Value::Bool(true)))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            (!text.is_empty()).then_some(text)
        }
    }
}

/// `inbound` with turns appended to its conversation (in its wire format: consecutive turns
/// of one role are merged where Anthropic's format requires alternation). The client's bytes
/// no longer describe it, so they are dropped.
pub fn with_turns(inbound: &Inbound, turns: &[(&str, &str)]) -> Inbound {
    let mut out = Inbound { raw: None, model_at: None, native: None, ..inbound.clone() };
    let anthropic = exchange::wire(inbound.api) == Format::Anthropic;
    if let Some(messages) =
        out.body.try_get_mut().ok().and_then(|b| b.get_mut("messages")).and_then(Value::as_array_mut)
    {
        for (role, text) in turns {
            let last_same = messages.last().and_then(|m| m.get("role")).and_then(Value::as_str) == Some(role);
            if anthropic && last_same {
                if let Some(last) = messages.last_mut() {
                    let block = serde_json::json!({"type": "text", "text": text});
                    match last.get_mut("content") {
                        Some(Value::Array(blocks)) => blocks.push(block),
                        Some(c @ Value::String(_)) => {
                            let first = serde_json::json!({"type": "text", "text": c.as_str().unwrap_or("")});
                            *c = Value::Array(vec![first, block]);
                        }
                        _ => last["content"] = Value::Array(vec![block]),
                    }
                }
            } else {
                messages.push(serde_json::json!({"role": role, "content": text}));
            }
        }
    }
    out
}

fn members_header(resp: &mut Response<Body>, value: String) {
    if let Ok(v) = HeaderValue::from_str(&value) {
        resp.headers_mut().insert(MEMBERS, v);
    }
}

async fn fusion<C: Connect + Clone + Send + Sync + 'static>(
    gw: Arc<Gateway<C>>,
    plan_: Plan,
    judge: &str,
    inbound: &Inbound,
    client: &Client,
) -> Result<Response<Body>, ProxyError> {
    let asked: Vec<usize> =
        (0..plan_.pool.len()).filter(|i| plan_.targets.iter().any(|t| t.target_index == *i)).collect();
    let calls = asked.iter().map(|&i| answer(Arc::clone(&gw), member(&plan_, i), quiet(inbound)));
    let answers: Vec<Answer> = futures_util::future::join_all(calls).await;
    let texts: Vec<&str> = answers.iter().filter_map(|a| a.text.as_deref()).collect();
    let tally = format!("{}/{}", texts.len(), asked.len());
    tracing::info!(combo = %plan_.key, answered = texts.len(), asked = asked.len(), "fusion panel done");
    if texts.is_empty() {
        return Err(ProxyError::new(
            Source::Upstream,
            503,
            "fusion_panel_failed",
            format!("no member of the fusion combo {} answered ({tally})", plan_.key),
        ));
    }
    if texts.len() == 1 && !inbound.stream {
        // One answer needs no judge.
        let mut only = answers.into_iter().find(|a| a.text.is_some()).map(|a| a.response).unwrap_or_else(full_empty);
        members_header(&mut only, tally);
        return Ok(only);
    }
    let mut prompt = JUDGE_PROMPT.to_owned();
    for (n, t) in texts.iter().enumerate() {
        prompt.push_str(&format!("\n\n<answer {}>\n{t}\n</answer {}>", n + 1, n + 1));
    }
    let judged = with_turns(inbound, &[("user", &prompt)]);
    let (jplan, mut preps, a) = plan(&gw, judge, client, &judged, None)?;
    let mut resp = dispatch(gw, jplan, &judged, &mut preps, a).await;
    members_header(&mut resp, tally);
    Ok(resp)
}

fn full_empty() -> Response<Body> {
    Response::new(full(bytes::Bytes::new()))
}

async fn pipeline<C: Connect + Clone + Send + Sync + 'static>(
    gw: Arc<Gateway<C>>,
    plan_: Plan,
    inbound: &Inbound,
) -> Result<Response<Body>, ProxyError> {
    let steps: Vec<usize> =
        (0..plan_.pool.len()).filter(|i| plan_.targets.iter().any(|t| t.target_index == *i)).collect();
    let Some((&last, drafts)) = steps.split_last() else {
        return Err(crate::request::refuse::no_executable(&plan_));
    };
    let mut current = inbound.clone();
    let mut improved = 0usize;
    let mut latest: Option<Response<Body>> = None;
    for &i in drafts {
        let a = answer(Arc::clone(&gw), member(&plan_, i), quiet(&current)).await;
        if let Some(text) = a.text {
            current = with_turns(inbound, &[("assistant", &text), ("user", IMPROVE_PROMPT)]);
            improved += 1;
            latest = Some(a.response);
        } else {
            tracing::info!(combo = %plan_.key, step = i, status = a.response.status().as_u16(), "pipeline step failed; the next step works from the previous answer");
        }
    }
    let mut resp = routed(Arc::clone(&gw), member(&plan_, last), &current).await;
    if !resp.status().is_success() {
        // The last step failed: a buffered client gets the best earlier answer.
        if let Some(earlier) = latest.filter(|_| !inbound.stream) {
            resp = earlier;
        }
    } else {
        improved += 1;
    }
    members_header(&mut resp, format!("{improved}/{}", steps.len()));
    Ok(resp)
}
