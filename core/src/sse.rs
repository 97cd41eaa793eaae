//! Server-sent events, parsed by the WHATWG event-stream rules
//! (<https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation>):
//! lines end in LF, CR or CRLF (a CRLF split between two chunks is one ending), a leading
//! byte-order mark is dropped, `:` lines are comments, a field without a colon has an empty
//! value, one space after the colon is dropped, `data` lines are joined with LF, `retry` takes
//! only ASCII digits, `id` never contains NUL, and an event is dispatched by an empty line
//! only when it has data. Bytes may be split anywhere, even inside a UTF-8 character.
//!
//! The parser owns three buffers that are cleared, never freed, between events: a stream
//! allocates only while its largest event grows, not per line or per event. One event may hold
//! at most [`MAX_EVENT_BYTES`] (see there); a larger one is skipped to its end and [`SseParser::overflowed`]
//! says so (the bytes themselves are the relay's business).

/// The most one event may hold before it is skipped: its data so far plus its current line as
/// it arrived (field name included), so a `data:` line of exactly this many bytes passes.
pub const MAX_EVENT_BYTES: usize = 1 << 20;

/// One dispatched event. `name` is `None` for the default type (`message`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The `event:` field, if the event had a non-empty one.
    pub name: Option<&'a str>,
    /// The `data:` lines joined with LF.
    pub data: &'a str,
}

/// An incremental event-stream parser.
#[derive(Debug)]
pub struct SseParser {
    /// The current line when it spans chunks.
    line: Vec<u8>,
    /// The current event's data (each line followed by LF).
    data: Vec<u8>,
    /// The current event's type.
    name: Vec<u8>,
    /// The last byte seen was a CR: an LF right after it ends nothing.
    after_cr: bool,
    /// No byte seen yet (a BOM is still possible); holds a partial BOM meanwhile.
    start: Option<Vec<u8>>,
    /// The current event outgrew the limit: skip to its end.
    skipping: bool,
    /// Part of the current line was dropped while skipping (its end is not an empty line).
    dropped: bool,
    overflowed: bool,
    /// After an overflow, read nothing more (see [`SseParser::halting`]).
    halt: bool,
    limit: usize,
    retry_ms: Option<u64>,
    last_id: Vec<u8>,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::with_limit(MAX_EVENT_BYTES)
    }
}

const BOM: &[u8] = b"\xEF\xBB\xBF";
/// Bytes of event data a parser has room for before its first event.
const EVENT_DATA_ROOM: usize = 512;

/// The text of `bytes`, invalid sequences replaced (U+FFFD); valid text, the usual case, is
/// checked by the standard library's word-at-a-time path and never copied.
fn utf8(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

impl SseParser {
    /// A parser whose events may hold at most `limit` bytes.
    pub fn with_limit(limit: usize) -> Self {
        SseParser {
            line: Vec::new(),
            // Room for a usual event's data from the start (it is kept between events), so
            // that a stream's first events do not grow it step by step.
            data: Vec::with_capacity(EVENT_DATA_ROOM.min(limit)),
            name: Vec::new(),
            after_cr: false,
            start: Some(Vec::new()),
            skipping: false,
            dropped: false,
            overflowed: false,
            halt: false,
            limit,
            retry_ms: None,
            last_id: Vec::new(),
        }
    }

    /// A parser that dispatches nothing after the first oversized event: for a reader that
    /// ends the stream there (a translated stream cannot skip an event it never saw, so what
    /// follows in the same bytes must not reach the client either).
    pub fn halting(mut self) -> Self {
        self.halt = true;
        self
    }

    /// Feeds the next bytes of the stream; calls `on_event` for every event they complete.
    pub fn feed(&mut self, chunk: &[u8], mut on_event: impl FnMut(SseEvent<'_>)) {
        let mut rest = chunk;
        if let Some(mut head) = self.start.take() {
            // The BOM may itself arrive split; hold its prefix until it is decided.
            let take = rest.len().min(BOM.len() - head.len());
            head.extend_from_slice(&rest[..take]);
            if BOM.starts_with(&head) {
                if head.len() < BOM.len() {
                    self.start = Some(head);
                    return;
                }
                rest = &rest[take..];
            } else {
                // Not a BOM: the held bytes are ordinary stream bytes.
                let held = head.len() - take;
                self.scan(&head[..held], &mut on_event);
            }
        }
        self.scan(rest, &mut on_event);
    }

    fn scan(&mut self, mut bytes: &[u8], on_event: &mut impl FnMut(SseEvent<'_>)) {
        if bytes.is_empty() || (self.halt && self.overflowed) {
            return;
        }
        if self.after_cr && bytes.first() == Some(&b'\n') {
            bytes = &bytes[1..];
        }
        self.after_cr = false;
        while let Some(i) = memchr::memchr2(b'\n', b'\r', bytes) {
            if self.halt && self.overflowed {
                return;
            }
            let cr = bytes[i] == b'\r';
            if self.dropped {
                // The end of a line that was skipped: not an empty line.
                self.dropped = false;
            } else if self.line.is_empty() {
                self.line_done(&bytes[..i], on_event);
            } else {
                self.extend_line(&bytes[..i]);
                if std::mem::take(&mut self.dropped) {
                    // The line outgrew the limit on its last part: it is gone.
                    bytes = &bytes[i + 1..];
                    self.skip_lf(&mut bytes, cr);
                    continue;
                }
                let line = std::mem::take(&mut self.line);
                self.line_done(&line, on_event);
                self.line = line;
                self.line.clear();
            }
            bytes = &bytes[i + 1..];
            self.skip_lf(&mut bytes, cr);
        }
        self.extend_line(bytes);
    }

    /// After a CR, an LF completes the same line ending (possibly in the next chunk).
    fn skip_lf(&mut self, bytes: &mut &[u8], cr: bool) {
        if cr {
            match bytes.first() {
                Some(b'\n') => *bytes = &bytes[1..],
                Some(_) => {}
                None => self.after_cr = true,
            }
        }
    }

    fn extend_line(&mut self, part: &[u8]) {
        if self.skipping {
            self.dropped |= !part.is_empty();
            return;
        }
        if self.line.len() + self.data.len() + part.len() > self.limit {
            self.skip();
            self.dropped = true;
        } else {
            self.line.extend_from_slice(part);
        }
    }

    fn skip(&mut self) {
        self.skipping = true;
        self.overflowed = true;
        self.line.clear();
        self.data.clear();
        self.name.clear();
    }

    fn line_done(&mut self, line: &[u8], on_event: &mut impl FnMut(SseEvent<'_>)) {
        if line.is_empty() {
            self.dispatch(on_event);
            return;
        }
        if self.skipping {
            return;
        }
        if self.data.len() + line.len() > self.limit {
            self.skip();
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(c) => {
                let v = &line[c + 1..];
                (&line[..c], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                self.data.extend_from_slice(value);
                self.data.push(b'\n');
            }
            b"event" => {
                self.name.clear();
                self.name.extend_from_slice(value);
            }
            b"id" if !value.contains(&0) => {
                self.last_id.clear();
                self.last_id.extend_from_slice(value);
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                // Digits too many for a u64 keep the previous value.
                if let Some(ms) = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok()) {
                    self.retry_ms = Some(ms);
                }
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, on_event: &mut impl FnMut(SseEvent<'_>)) {
        if self.skipping {
            self.skipping = false;
            return;
        }
        if !self.data.is_empty() {
            let data = &self.data[..self.data.len() - 1];
            let data = utf8(data);
            let name = (!self.name.is_empty()).then(|| utf8(&self.name));
            on_event(SseEvent { name: name.as_deref(), data: &data });
        }
        self.data.clear();
        self.name.clear();
    }

    /// Whether an event outgrew the limit and was skipped.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// The last valid `retry:` field, in milliseconds.
    pub fn retry_ms(&self) -> Option<u64> {
        self.retry_ms
    }

    /// The last event ID the stream set (`id:`), lossily decoded.
    pub fn last_event_id(&self) -> String {
        String::from_utf8_lossy(&self.last_id).into_owned()
    }
}

#[cfg(test)]
#[path = "sse_tests.rs"]
mod tests;
