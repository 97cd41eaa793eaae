//! One client request's outcome, and how the trace words it.

/// One client request's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Client host.
    pub client: String,
    /// Request number within the client.
    pub seq: u64,
    /// Issued at (sim ms).
    pub issued_ms: u64,
    /// Finished at (sim ms).
    pub done_ms: u64,
    /// HTTP status, or `None` when no HTTP response arrived.
    pub status: Option<u16>,
    /// `error.code` of a JSON error, or of an SSE error event.
    pub code: Option<String>,
    /// `Retry-After`.
    pub retry_after_s: Option<u64>,
    /// `X-Ferroute-Selected-Connection-Id`.
    pub connection: Option<String>,
    /// The session header the request sent (M5: the first of the gateway's session headers).
    pub session: Option<String>,
    /// Whether `[DONE]` (or `message_stop`) arrived on a stream.
    pub done: bool,
    /// A transport error, when no response arrived.
    pub error: Option<String>,
    /// The gateway's own `x-ferroute-*` response headers, and `content-type`.
    pub headers: std::collections::BTreeMap<String, String>,
    /// The answer's body as text, its first 64 KiB (for `body_contains` and `body_lacks`).
    pub body: String,
    /// An expected abort: the client gave up on purpose (the workload's `abort`), or a
    /// partition cut it off from the gateway while it waited (`error` says which).
    pub aborted: bool,
}

impl Outcome {
    /// A request that never got an answer, for a reason that makes it an expected abort.
    pub fn lost(client: String, seq: u64, issued_ms: u64, done_ms: u64, why: String) -> Self {
        Outcome {
            client,
            seq,
            issued_ms,
            done_ms,
            status: None,
            code: None,
            retry_after_s: None,
            connection: None,
            session: None,
            done: false,
            error: Some(why),
            headers: Default::default(),
            body: String::new(),
            aborted: true,
        }
    }

    /// The answer in the gateway's words: `a#3: 503 server_error retry-after 5s via k1`,
    /// `b#0: 200 via k2, stream finished`, `c#1: no answer (connection reset)`.
    pub fn describe(&self, stream: bool) -> String {
        let mut out = format!("{}#{}: ", self.client, self.seq);
        match self.status {
            Some(status) => out.push_str(&status.to_string()),
            None => out.push_str("no answer"),
        }
        if let Some(code) = &self.code {
            out.push(' ');
            out.push_str(code);
        }
        if let Some(s) = self.retry_after_s {
            out.push_str(&format!(" retry-after {s}s"));
        }
        if let Some(c) = &self.connection {
            out.push_str(&format!(" via {c}"));
        }
        if stream && self.status == Some(200) {
            out.push_str(if self.done { ", stream finished" } else { ", stream unfinished" });
        }
        if self.aborted {
            out.push_str(&format!(" ({})", self.error.as_deref().unwrap_or("the client gave up")));
        } else if let (None, Some(e)) = (self.status, &self.error) {
            out.push_str(&format!(" ({e})"));
        }
        out
    }
}
