//! The first events of an upstream stream, read before the client's response starts. A stream
//! that fails before any content (the Responses API's `response.failed`, an `event: error`
//! frame, a chat chunk that is only an `error`) failed as surely as a 4xx or 5xx would have: it
//! is classified and fallen back from, and no byte of it reaches the client. Any other stream
//! goes to the client with the frames read so far first.
//!
//! Only the opening events are held: those a stream sends before its content
//! (`response.created`, `response.in_progress`, `message_start`, `ping`). The first event of any
//! other kind ends the look, as do [`MAX_PEEK`] bytes and [`PEEK_WINDOW`]. What the events say
//! is the core's reading ([`ferroute_core::classify::in_stream`]); this is the waiting for them.

use bytes::Bytes;
use ferroute_core::classify::in_stream::{Opening, Seen};
use http::Response;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::time::Duration;

/// The most bytes held while looking.
pub const MAX_PEEK: usize = 64 * 1024;
/// The longest the opening events are held back from the client.
pub const PEEK_WINDOW: Duration = Duration::from_secs(10);

/// What the look found.
pub enum Peeked {
    /// The stream failed before any content: its headers, and what it sent, as text.
    Failed(http::response::Parts, String),
    /// The stream goes on: these frames first, then the rest of the body.
    Going(Response<Incoming>, Vec<Bytes>),
    /// The upstream broke off before any content.
    Broke(String),
}

/// Reads the opening events of `resp` (until `deadline` at the latest).
pub async fn peek(resp: Response<Incoming>, deadline: tokio::time::Instant) -> Peeked {
    let (parts, mut body) = resp.into_parts();
    let deadline = deadline.min(tokio::time::Instant::now() + PEEK_WINDOW);
    let mut held: Vec<Bytes> = Vec::new();
    let (mut opening, mut seen, mut size) = (Opening::default(), Seen::Opening, 0);
    loop {
        match seen {
            Seen::Failure => {
                let text: Vec<u8> = held.concat();
                return Peeked::Failed(parts, String::from_utf8_lossy(&text).into_owned());
            }
            Seen::Content => return Peeked::Going(Response::from_parts(parts, body), held),
            Seen::Opening if size >= MAX_PEEK => return Peeked::Going(Response::from_parts(parts, body), held),
            Seen::Opening => {}
        }
        match tokio::time::timeout_at(deadline, body.frame()).await {
            // Still only opening events: the relay takes over (and its silence timer).
            Err(_) | Ok(None) => return Peeked::Going(Response::from_parts(parts, body), held),
            Ok(Some(Err(e))) => return Peeked::Broke(e.to_string()),
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    seen = opening.feed(&data);
                    size += data.len();
                    held.push(data);
                }
            }
        }
    }
}
