//! `:streamGenerateContent` without `alt=sse`: Google's API answers one JSON array of
//! `GenerateContentResponse` objects, streamed as it grows (`[`, the objects separated by `,`,
//! `]`), and REST clients and older SDKs read it so. The gateway streams every Gemini answer as
//! events; for such a client the events' objects are written as that array, each as it comes,
//! so a slow answer still reaches the client as it goes.

use crate::edge::errors::Body;
use bytes::Bytes;
use ferroute_core::sse::SseParser;
use http::{HeaderValue, Response};
use http_body_util::BodyExt;
use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Whether a Gemini client's query asks for events (`alt=sse`).
pub fn wants_events(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.split('&').any(|p| p.eq_ignore_ascii_case("alt=sse")))
}

/// `resp` as one JSON array when it is an event stream; anything else (an error answered
/// whole) as it is.
pub fn as_array(resp: Response<Body>) -> Response<Body> {
    let events = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !events {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    parts.headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    parts.headers.remove(http::header::CONTENT_LENGTH);
    let body =
        ArrayBody { events: body, parser: SseParser::default(), opened: false, closed: false, out: VecDeque::new() };
    Response::from_parts(parts, body.boxed())
}

/// The events' objects, written as one array as they come.
struct ArrayBody {
    events: Body,
    parser: SseParser,
    /// `[` was written.
    opened: bool,
    /// `]` was written.
    closed: bool,
    out: VecDeque<Bytes>,
}

impl ArrayBody {
    /// Queues the objects `data` completes.
    fn take(&mut self, data: &[u8]) {
        let (opened, out) = (&mut self.opened, &mut self.out);
        self.parser.feed(data, |ev| {
            let object = ev.data.trim();
            if object.is_empty() || object == "[DONE]" {
                return;
            }
            let mut piece = Vec::with_capacity(object.len() + 3);
            piece.extend_from_slice(if *opened { b",\r\n" } else { b"[" });
            piece.extend_from_slice(object.as_bytes());
            *opened = true;
            out.push_back(Bytes::from(piece));
        });
    }

    /// Ends the array (an empty one when no object came).
    fn close(&mut self) {
        if !self.closed {
            self.closed = true;
            self.out.push_back(Bytes::from_static(if self.opened { b"]" } else { b"[]" }));
        }
    }
}

impl hyper::body::Body for ArrayBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        loop {
            if let Some(b) = this.out.pop_front() {
                return Poll::Ready(Some(Ok(hyper::body::Frame::data(b))));
            }
            if this.closed {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.events).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        this.take(&data);
                    }
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => this.close(),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge::errors::full;

    async fn array_of(events: &'static str) -> (Option<String>, String) {
        let mut resp = Response::new(full(Bytes::from_static(events.as_bytes())));
        resp.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        let out = as_array(resp);
        let ct = out.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let body = out.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        (ct, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn events_become_one_array_and_none_an_empty_one() {
        let (ct, body) = array_of("data: {\"a\":1}\n\ndata: {\"b\":2}\r\n\r\ndata: [DONE]\n\n").await;
        assert_eq!(ct.as_deref(), Some("application/json"));
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        assert_eq!(v, serde_json::json!([{"a": 1}, {"b": 2}]), "{body}");
        assert_eq!(array_of(": only a comment\n\n").await.1, "[]");
    }

    #[test]
    fn only_alt_sse_asks_for_events() {
        assert!(wants_events(Some("alt=sse")));
        assert!(wants_events(Some("key=k&alt=sse")));
        assert!(!wants_events(Some("key=k")));
        assert!(!wants_events(None));
    }
}
