//! Scripted event streams as the upstream writes them: framing (line endings, a byte order
//! mark), pieces of a fixed size, delays between events, a reset after the last.

use crate::script::{LineEnding, SseEvent};
use bytes::Bytes;
use http::{HeaderValue, Response};
use http_body_util::BodyExt;
use http_body_util::channel::Channel;
use http_body_util::combinators::BoxBody;
use std::io;
use std::time::Duration;

/// The response body type of the scripted upstream.
pub type UpBody = BoxBody<Bytes, io::Error>;

/// A stream of whole events with LF line endings.
pub(crate) fn sse_response(events: Vec<SseEvent>, reset_after: bool) -> Response<UpBody> {
    sse_pieces(events, reset_after, Framing::default())
}

/// How a scripted stream is written: in pieces of how many bytes (whole events when `None`),
/// with which line ending, and whether a byte order mark comes first.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Framing {
    pub(crate) pieces: Option<usize>,
    pub(crate) line_ending: LineEnding,
    pub(crate) bom: bool,
}

/// One event as written: its `event:` and `data:` lines and the empty line that ends it (the
/// first event after a byte order mark, when the framing has one).
fn frame(e: &SseEvent, first: bool, framing: Framing) -> String {
    let eol = framing.line_ending.as_str();
    let mut frame = String::new();
    if framing.bom && first {
        frame.push('\u{feff}');
    }
    if let Some(name) = &e.event {
        frame.push_str(&format!("event: {name}{eol}"));
    }
    frame.push_str(&format!("data: {}{eol}{eol}", e.payload()));
    frame
}

/// The stream as written: whole events, or (`pieces`) runs of that many bytes, the tail of an
/// event waiting for the next event's start.
pub(crate) fn sse_pieces(events: Vec<SseEvent>, reset_after: bool, framing: Framing) -> Response<UpBody> {
    let (mut tx, body) = Channel::<Bytes, io::Error>::new(4);
    let pieces = framing.pieces;
    tokio::spawn(async move {
        let mut carry: Vec<u8> = Vec::new();
        for (i, e) in events.into_iter().enumerate() {
            if e.after_ms > 0 {
                tokio::time::sleep(Duration::from_millis(e.after_ms)).await;
            }
            let frame = frame(&e, i == 0, framing);
            let out: Vec<Bytes> = match pieces {
                None => vec![Bytes::from(frame)],
                Some(n) => {
                    carry.extend_from_slice(frame.as_bytes());
                    let n = n.max(1);
                    let whole = carry.len() / n * n;
                    let ready: Vec<u8> = carry.drain(..whole).collect();
                    ready.chunks(n).map(Bytes::copy_from_slice).collect()
                }
            };
            for b in out {
                if tx.send_data(b).await.is_err() {
                    return; // the client went away
                }
            }
        }
        if !carry.is_empty() && tx.send_data(Bytes::from(carry)).await.is_err() {
            return;
        }
        if reset_after {
            tx.abort(io::Error::new(io::ErrorKind::ConnectionReset, "scripted reset mid-stream"));
        }
    });
    let mut resp = Response::new(body.boxed());
    let h = resp.headers_mut();
    h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: Option<&str>, data: &str) -> SseEvent {
        SseEvent { after_ms: 0, event: name.map(str::to_owned), data: data.to_owned(), pad_to: None }
    }

    #[test]
    fn each_line_ending_and_the_byte_order_mark_are_written_as_asked() {
        let e = event(Some("ping"), "{}");
        let with = |line_ending, bom| Framing { pieces: None, line_ending, bom };
        assert_eq!(frame(&e, true, Framing::default()), "event: ping\ndata: {}\n\n");
        assert_eq!(frame(&e, true, with(LineEnding::Crlf, false)), "event: ping\r\ndata: {}\r\n\r\n");
        assert_eq!(frame(&e, true, with(LineEnding::Cr, true)), "\u{feff}event: ping\rdata: {}\r\r");
        assert_eq!(
            frame(&event(None, "x"), false, with(LineEnding::Lf, true)),
            "data: x\n\n",
            "the mark leads only the first event"
        );
    }
}
