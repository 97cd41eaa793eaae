//! The Gemini API's model list in Google's shape, and `countTokens`: answered by a Gemini-format
//! target when the model has one, else by estimate.

use crate::edge::auth::Client;
use crate::edge::body::{json_object, read_body};
use crate::edge::errors::{Body, ErrorShape, json_response};
use crate::state::gateway::Gateway;
use bytes::Bytes;
use ferroute_core::types::Format;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::Connect;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// The largest `countTokens` answer read from a provider.
const MAX_COUNT_BODY: usize = 64 * 1024;

/// A model as Google lists it.
fn model_json(id: &str, description: &str) -> serde_json::Value {
    serde_json::json!({
        "name": format!("models/{id}"),
        "version": "ferroute",
        "displayName": id,
        "description": description,
        "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"],
    })
}

/// Every model Ferroute serves: `provider/model` and combos.
fn models<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for p in &gw.config.providers {
        for m in &p.models {
            out.push(model_json(&format!("{}/{m}", p.id), &format!("{m} at {}", p.id)));
        }
    }
    for c in &gw.config.combos {
        out.push(model_json(&c.name, "a Ferroute combo"));
    }
    out
}

/// `GET /v1beta/models`.
pub fn list<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>) -> Response<Body> {
    json_response(200, serde_json::json!({ "models": models(gw) }).to_string())
}

/// `GET /v1beta/models/{model}`.
pub fn get<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>, model: &str) -> Response<Body> {
    match models(gw).into_iter().find(|m| m["name"].as_str().and_then(|n| n.strip_prefix("models/")) == Some(model)) {
        Some(m) => json_response(200, m.to_string()),
        None => crate::edge::errors::ProxyError::new(
            crate::edge::errors::Source::Downstream,
            404,
            "model_not_found",
            format!("model {model:?} is not served here"),
        )
        .into_response_as(ErrorShape::Google),
    }
}

/// `POST …:countTokens`: asked of the model's first Gemini-format target that this key may use
/// and that is not cooling or ended (its own exact count, one upstream call); any other model,
/// or a target that does not answer 200, gets an estimate (about four characters a token) of
/// the request given as `contents` or as `generateContentRequest`.
pub async fn count_tokens<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Arc<Gateway<C>>,
    req: Request<Incoming>,
    client: &Client,
    model: &str,
) -> Response<Body> {
    let limit = Duration::from_millis(gw.config.server.body_read_timeout_ms);
    let raw = match read_body(req, gw.config.server.max_body_bytes, limit).await {
        Ok(b) => b,
        Err(e) => return e.into_response_as(ErrorShape::Google),
    };
    let body = match json_object(&raw) {
        Ok(v) => v,
        Err(e) => return e.into_response_as(ErrorShape::Google),
    };
    if let Some(answer) = counted_upstream(gw, client, model, &body).await {
        return answer;
    }
    json_response(200, serde_json::json!({ "totalTokens": estimate_tokens(&body) }).to_string())
}

/// The count of the model's first eligible Gemini-format target, when one answers 200.
async fn counted_upstream<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Arc<Gateway<C>>,
    client: &Client,
    model: &str,
    body: &Value,
) -> Option<Response<Body>> {
    let plan = gw.resolve(model).ok()?;
    let now = gw.clock.now();
    let target = plan.targets.iter().find(|t| {
        let (p, c) = gw.parts(t);
        p.format == Format::Gemini
            && client.may_use(&c.id)
            && matches!(gw.endpoints.credential(t.connection), Ok(Some(_)))
            && gw.with_engine(|e| e.exclusion(now, &gw.candidate(t)).is_none())
    })?;
    let (provider, connection) = gw.parts(target);
    let uri = gw.endpoints.count_tokens_uri(target.provider, &target.model).ok()?;
    // A whole request names its model as the client does: the provider's own name instead.
    let mut body = body.clone();
    if let Some(inner) = body.get_mut("generateContentRequest").and_then(Value::as_object_mut)
        && inner.contains_key("model")
    {
        inner.insert("model".into(), Value::String(format!("models/{}", target.model)));
    }
    let mut req = Request::post(uri).header(http::header::CONTENT_TYPE, "application/json");
    if let Ok(Some((name, value))) = gw.endpoints.credential(target.connection) {
        req = req.header(name.clone(), value.clone());
    }
    let mut req = req.body(Full::new(Bytes::from(body.to_string()))).ok()?;
    let _ = gw.authorize_for_proxy(target.connection, &mut req);
    let budget = Duration::from_millis(gw.config.server.body_read_timeout_ms.max(1));
    let answer = async {
        let resp = gw.client_for(target.connection).request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        // A count is a few bytes: a larger answer is no count.
        let bytes =
            Limited::new(resp.into_body(), MAX_COUNT_BODY).collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok::<_, String>((status, bytes))
    };
    match tokio::time::timeout(budget, answer).await {
        Ok(Ok((status, bytes))) if status.is_success() && serde_json::from_slice::<Value>(&bytes).is_ok() => {
            Some(json_response(200, String::from_utf8_lossy(&bytes).into_owned()))
        }
        other => {
            let why = match other {
                Ok(Ok((status, _))) => format!("answered {status}"),
                Ok(Err(e)) => e,
                Err(_) => "did not answer in time".to_owned(),
            };
            tracing::info!(provider = %provider.id, connection = %connection.id, %why, "countTokens estimated: the Gemini target gave no count");
            None
        }
    }
}

/// A whole-request token estimate for `countTokens` when no Gemini provider answers it: about
/// four characters a token over the texts, names, arguments and schemas (not the roles or
/// MIME types), and 258 tokens an inline image or file, as Gemini counts an image.
pub fn estimate_tokens(body: &Value) -> u64 {
    fn count(v: &Value, chars: &mut usize, media: &mut u64) {
        match v {
            Value::String(s) => *chars += s.chars().count(),
            Value::Array(a) => a.iter().for_each(|v| count(v, chars, media)),
            Value::Object(m) => {
                for (k, v) in m {
                    match k.as_str() {
                        "role" | "mimeType" | "mime_type" => {}
                        "inlineData" | "inline_data" | "fileData" | "file_data" => *media += 258,
                        _ => count(v, chars, media),
                    }
                }
            }
            _ => {}
        }
    }
    let request = body.get("generateContentRequest").unwrap_or(body);
    let (mut chars, mut media) = (0, 0);
    for k in ["contents", "systemInstruction", "system_instruction", "tools"] {
        if let Some(v) = request.get(k) {
            count(v, &mut chars, &mut media);
        }
    }
    (chars as u64).div_ceil(4) + media
}

#[cfg(test)]
mod tests {
    use super::estimate_tokens;
    use serde_json::json;

    #[test]
    fn the_estimate_counts_texts_and_images_not_roles() {
        let body = json!({"contents": [{"role": "user", "parts": [{"text": "twelve chars"},
            {"inlineData": {"mimeType": "image/png", "data": "AAAAAAAAAAAAAAAAAAAA"}}]}]});
        assert_eq!(estimate_tokens(&body), 3 + 258);
        let wrapped =
            json!({"generateContentRequest": {"model": "models/x", "contents": [{"parts": [{"text": "abcde"}]}]}});
        assert_eq!(estimate_tokens(&wrapped), 2);
    }
}
