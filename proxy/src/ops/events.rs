//! `GET /api/monitoring/events` (admin): the gateway's state changes as a server-sent event
//! stream, read from the [`Feed`]. Each change is one event, its id the change's id and its name
//! the change's kind:
//!
//! ```text
//! id: 42
//! event: breaker
//! data: {"provider":"demo-flaky","from":"CLOSED","to":"OPEN","reason":"FailureThreshold","at":"…"}
//! ```
//!
//! A stream starts with `event: ready` (`{"newest": ID}`) and goes on with the changes after
//! it. A client that reconnects with `Last-Event-ID` (or `?after=ID`) gets the changes it
//! missed; if they are no longer kept (or the id is another process's) it gets `event: resync`
//! first: it should read the state again (health) and go on from there. A comment every 15 s
//! keeps idle proxies from cutting the stream. The stream holds only its place in the feed, so a
//! slow reader costs nothing: hyper asks for the next event only when the last one was written.

use crate::edge::errors::Body;
use crate::state::feed::{Feed, Read};
use crate::state::gateway::Gateway;
use bytes::Bytes;
use http::{HeaderMap, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper_util::client::legacy::connect::Connect;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// How often an idle stream says it is alive.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How many changes one read of the feed takes.
const BATCH: usize = 64;

/// The change a resuming client names (`Last-Event-ID`, else `?after=`); one that is not a
/// number is not one of ours and must resync.
fn resumes_after(headers: &HeaderMap, query: Option<&str>) -> Option<u64> {
    let from_query = query.and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("after=")));
    let named = headers.get("last-event-id").and_then(|v| v.to_str().ok()).or(from_query)?;
    Some(named.trim().parse().unwrap_or(u64::MAX))
}

/// The stream.
pub fn stream<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Response<Body> {
    let feed = Arc::clone(&gw.feed);
    let newest = feed.newest();
    let mut first = String::from("retry: 2000\n\n");
    let place = match resumes_after(headers, query) {
        None => newest,
        Some(after) => match feed.after(after, 0) {
            Read::Items(_) => after,
            Read::Behind { newest } => {
                first.push_str(&format!("event: resync\ndata: {{\"newest\":{newest}}}\n\n"));
                newest
            }
        },
    };
    first.push_str(&format!("event: ready\ndata: {{\"newest\":{newest}}}\n\n"));
    let state = Reader { feed, place, pending: VecDeque::from([Bytes::from(first)]) };
    let events = futures_util::stream::unfold(state, |mut r| async move {
        let chunk = r.next().await?;
        Some((Ok::<_, std::io::Error>(Frame::data(chunk)), r))
    });
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .header("x-accel-buffering", "no")
        .body(StreamBody::new(events).boxed())
        .unwrap_or_else(|_| Response::new(crate::edge::errors::full(Bytes::new())))
}

/// One stream's place in the feed and what it has read but not yet written.
struct Reader {
    feed: Arc<Feed>,
    place: u64,
    pending: VecDeque<Bytes>,
}

impl Reader {
    /// The next piece to write; `None` ends the stream (the feed closed).
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if let Some(b) = self.pending.pop_front() {
                return Some(b);
            }
            if self.feed.is_closed() {
                return None;
            }
            match self.feed.after(self.place, BATCH) {
                Read::Items(items) if !items.is_empty() => {
                    for i in items {
                        self.place = i.id;
                        self.pending
                            .push_back(Bytes::from(format!("id: {}\nevent: {}\ndata: {}\n\n", i.id, i.kind, i.data)));
                    }
                }
                Read::Items(_) => {
                    if tokio::time::timeout(KEEP_ALIVE, self.feed.changed(self.place)).await.is_err() {
                        self.pending.push_back(Bytes::from_static(b": keep-alive\n\n"));
                    }
                }
                Read::Behind { newest } => {
                    self.place = newest;
                    self.pending.push_back(Bytes::from(format!("event: resync\ndata: {{\"newest\":{newest}}}\n\n")));
                }
            }
        }
    }
}
