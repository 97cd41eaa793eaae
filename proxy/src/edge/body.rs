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
    read_body_keeping_headers(req, max, deadline).await.map(|(bytes, _)| bytes)
}

/// [`read_body`], giving back the request's header map too: the request path sends its
/// upstream request with it (cleared), so that no map is made per request.
pub async fn read_body_keeping_headers(
    req: Request<Incoming>,
    max: u64,
    deadline: Duration,
) -> Result<(Bytes, http::HeaderMap), ProxyError> {
    let (parts, body) = req.into_parts();
    let declared = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(too_large(max));
    }
    let collected = tokio::time::timeout(deadline, whole(Limited::new(body, max as usize))).await;
    let Ok(collected) = collected else {
        return Err(ProxyError::new(
            Source::Downstream,
            408,
            "request_timeout",
            format!("the request body did not arrive within {} ms", deadline.as_millis()),
        ));
    };
    let bytes = match collected {
        Ok(b) => b,
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => return Err(too_large(max)),
        Err(e) => {
            return Err(ProxyError::bad_request("body_read_error", format!("could not read the request body: {e}")));
        }
    };
    if bytes.is_empty() {
        return Err(ProxyError::bad_request("empty_body", "the request body is empty; send a JSON object"));
    }
    Ok((bytes, parts.headers))
}

/// A body's data, whole (its trailers, if any, are dropped). A body that comes in one frame,
/// the usual case, is that frame: nothing is allocated or copied; more frames are copied once
/// into one buffer.
pub async fn whole<B>(body: B) -> Result<Bytes, B::Error>
where
    B: hyper::body::Body<Data = Bytes>,
{
    let mut body = std::pin::pin!(body);
    let mut first: Option<Bytes> = None;
    let mut joined: Option<bytes::BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else { continue };
        match (&first, &mut joined) {
            (None, _) => first = Some(data),
            (Some(f), None) => {
                let mut all = bytes::BytesMut::with_capacity(f.len() + data.len());
                all.extend_from_slice(f);
                all.extend_from_slice(&data);
                joined = Some(all);
            }
            (Some(_), Some(all)) => all.extend_from_slice(&data),
        }
    }
    Ok(match joined {
        Some(all) => all.freeze(),
        None => first.unwrap_or_default(),
    })
}

fn too_large(max: u64) -> ProxyError {
    ProxyError::new(
        Source::Downstream,
        413,
        "request_too_large",
        format!("the request body exceeds {max} bytes (server.max_body_bytes)"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{Full, StreamBody};
    use hyper::body::Frame;

    fn frames(parts: Vec<Frame<Bytes>>) -> impl hyper::body::Body<Data = Bytes, Error = std::convert::Infallible> {
        StreamBody::new(futures_util::stream::iter(parts.into_iter().map(Ok)))
    }

    #[tokio::test]
    async fn a_body_is_read_whole_in_one_frame_or_many_and_its_trailers_are_dropped() {
        let one = Bytes::from_static(b"{\"model\":\"m\"}");
        let read = whole(Full::new(one.clone())).await.expect("read");
        assert_eq!(read, one);
        assert_eq!(read.as_ptr(), one.as_ptr(), "one frame is passed on, not copied");
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-sum", http::HeaderValue::from_static("1"));
        let many = frames(vec![
            Frame::data(Bytes::from_static(b"{\"mo")),
            Frame::data(Bytes::from_static(b"del\":")),
            Frame::data(Bytes::from_static(b"\"m\"}")),
            Frame::trailers(trailers),
        ]);
        assert_eq!(whole(many).await.expect("read"), one);
        assert_eq!(whole(frames(Vec::new())).await.expect("read"), Bytes::new());
        // The size limit still applies across frames.
        let over = Limited::new(
            frames(vec![Frame::data(Bytes::from_static(b"12345")), Frame::data(Bytes::from_static(b"678"))]),
            6,
        );
        let e = whole(over).await.expect_err("over the limit");
        assert!(e.downcast_ref::<http_body_util::LengthLimitError>().is_some(), "{e}");
    }
}
