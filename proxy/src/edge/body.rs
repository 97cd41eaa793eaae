//! Reading a client's request body: the size limit, the time limit, and JSON.

use crate::edge::errors::{ProxyError, Source};
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use std::time::Duration;

/// Reads and parses a JSON request body, enforcing the size limit; returns the bytes too.
pub async fn read_json(
    req: Request<Incoming>,
    max: u64,
    deadline: Duration,
) -> Result<(Bytes, serde_json::Value), ProxyError> {
    let bytes = read_body(req, max, deadline).await?;
    let v = json_object(&bytes)?;
    Ok((bytes, v))
}

/// Parses a body that must be a JSON object.
pub fn json_object(bytes: &[u8]) -> Result<serde_json::Value, ProxyError> {
    let v: serde_json::Value = serde_json::from_slice(bytes).map_err(invalid_json)?;
    if !v.is_object() {
        return Err(not_an_object());
    }
    Ok(v)
}

/// A body that is not JSON, as a 400 naming the parser's complaint.
pub fn invalid_json(e: serde_json::Error) -> ProxyError {
    ProxyError::bad_request("invalid_json", format!("the request body is not valid JSON: {e}"))
}

/// A body that is JSON but not an object, as a 400.
pub fn not_an_object() -> ProxyError {
    ProxyError::bad_request("invalid_json", "the request body must be a JSON object")
}

/// Reads a request body (not empty), enforcing the size and time limits.
pub async fn read_body(req: Request<Incoming>, max: u64, deadline: Duration) -> Result<Bytes, ProxyError> {
    let declared = req
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(too_large(max));
    }
    let collected = tokio::time::timeout(deadline, Limited::new(req.into_body(), max as usize).collect()).await;
    let Ok(collected) = collected else {
        return Err(ProxyError::new(
            Source::Downstream,
            408,
            "request_timeout",
            format!("the request body did not arrive within {} ms", deadline.as_millis()),
        ));
    };
    let bytes = match collected {
        Ok(c) => c.to_bytes(),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => return Err(too_large(max)),
        Err(e) => {
            return Err(ProxyError::bad_request("body_read_error", format!("could not read the request body: {e}")));
        }
    };
    if bytes.is_empty() {
        return Err(ProxyError::bad_request("empty_body", "the request body is empty; send a JSON object"));
    }
    Ok(bytes)
}

fn too_large(max: u64) -> ProxyError {
    ProxyError::new(
        Source::Downstream,
        413,
        "request_too_large",
        format!("the request body exceeds {max} bytes (server.max_body_bytes)"),
    )
}
