//! M10: the slow-stream throughput watchdog (off by default).
//!
//! Aborts an attempt that keeps sending chunks but produces assistant text below a useful
//! rate. Not an idle timeout: heartbeats, usage and empty events count nothing and reset
//! nothing. It needs a warm-up and then one full sliding window before it may abort, and it
//! pauses while tool-call or reasoning output is in progress.

use crate::settings::WatchdogSettings;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

mod view;
#[cfg(test)]
mod view_tests;

/// The abort code.
pub const STREAM_THROUGHPUT_TOO_LOW: &str = "STREAM_THROUGHPUT_TOO_LOW";

/// One typed stream event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEvent {
    /// Assistant text; the UTF-8 byte count.
    Text(usize),
    /// A tool-call or function-call delta (pauses the watchdog).
    ToolCall,
    /// A reasoning or thinking delta (pauses the watchdog).
    Reasoning,
    /// Usage accounting only.
    Usage,
    /// A keep-alive or ping.
    Heartbeat,
    /// Nothing useful (empty delta, `[DONE]`, unparsable data).
    Empty,
}

/// Typed watchdog settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchdogConfig {
    /// Off: never aborts.
    pub enabled: bool,
    /// Grace period.
    pub warmup: Duration,
    /// Sliding window.
    pub window: Duration,
    /// Minimum bytes per second.
    pub min_bytes_per_second: u64,
    /// Minimum window bytes for the rate to be measurable (a window with 0 bytes always is).
    pub min_bytes: u64,
}

impl WatchdogConfig {
    /// From settings, normalised as the reference does (warm-up ≥ 0, window ≥ 1 s, rates ≥ 1).
    pub fn from_settings(s: &WatchdogSettings) -> Self {
        WatchdogConfig {
            enabled: s.enabled,
            warmup: Duration::from_millis(s.warmup_ms.clamp(0, 600_000) as u64),
            window: Duration::from_millis(s.window_ms.clamp(1_000, 600_000) as u64),
            min_bytes_per_second: s.min_bytes_per_second.clamp(1, 1_000_000) as u64,
            min_bytes: s.min_bytes.clamp(1, 1_000_000) as u64,
        }
    }
}

/// The watchdog's verdict.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// Keep streaming.
    Continue,
    /// Abort the attempt with `STREAM_THROUGHPUT_TOO_LOW`.
    Abort {
        /// Useful bytes in the window.
        useful_bytes: u64,
        /// The measured rate.
        bytes_per_second: f64,
    },
}

/// One attempt's watchdog.
#[derive(Debug, Clone)]
pub struct Watchdog {
    cfg: WatchdogConfig,
    started_at: Instant,
    samples: VecDeque<(Instant, u64)>,
    window_bytes: u64,
    protected: bool,
}

impl Watchdog {
    /// Starts watching at `now` (when the attempt's stream begins).
    pub fn new(cfg: WatchdogConfig, now: Instant) -> Self {
        // Room for the window of a usual stream at once (it would otherwise grow three times).
        Watchdog { cfg, started_at: now, samples: VecDeque::with_capacity(16), window_bytes: 0, protected: false }
    }

    /// Feeds one event and evaluates. Off, it keeps nothing (a long stream's samples would
    /// otherwise pile up with no window to trim them).
    pub fn observe(&mut self, now: Instant, event: StreamEvent) -> Verdict {
        if !self.cfg.enabled {
            return Verdict::Continue;
        }
        match event {
            StreamEvent::Text(n) if n > 0 => {
                self.protected = false;
                self.samples.push_back((now, n as u64));
                self.window_bytes += n as u64;
            }
            StreamEvent::ToolCall | StreamEvent::Reasoning => self.protected = true,
            _ => {}
        }
        self.check(now)
    }

    /// Whether it judges anything at all (`enabled`): off, a shell need not read events for it.
    pub fn is_on(&self) -> bool {
        self.cfg.enabled
    }

    /// Feeds one SSE event (its `event:` name, if any, and its `data:` payload): classified by
    /// [`classify_sse`] only when the watchdog is on, so an event costs nothing when it is off
    /// (the default).
    pub fn observe_sse(&mut self, now: Instant, event_name: Option<&str>, data: &str) -> Verdict {
        if !self.cfg.enabled {
            return Verdict::Continue;
        }
        self.observe(now, classify_sse(event_name, data))
    }

    /// Evaluates without an event (the shell may call it on a timer).
    pub fn check(&mut self, now: Instant) -> Verdict {
        if !self.cfg.enabled {
            return Verdict::Continue;
        }
        while let Some(&(at, n)) = self.samples.front() {
            if now.saturating_duration_since(at) > self.cfg.window {
                self.samples.pop_front();
                self.window_bytes -= n;
            } else {
                break;
            }
        }
        let ready = now.saturating_duration_since(self.started_at) >= self.cfg.warmup + self.cfg.window;
        let measurable = self.window_bytes == 0 || self.window_bytes >= self.cfg.min_bytes;
        let rate = self.window_bytes as f64 / self.cfg.window.as_secs_f64().max(1.0);
        if ready && !self.protected && measurable && rate < self.cfg.min_bytes_per_second as f64 {
            Verdict::Abort { useful_bytes: self.window_bytes, bytes_per_second: rate }
        } else {
            Verdict::Continue
        }
    }

    /// Whether tool-call or reasoning output is in progress (observed by the unit tests; the
    /// gateway only acts on verdicts).
    #[cfg(test)]
    pub fn protected_phase(&self) -> bool {
        self.protected
    }

    /// Useful bytes currently in the window (observed by the unit tests).
    #[cfg(test)]
    pub fn window_bytes(&self) -> u64 {
        self.window_bytes
    }
}

fn is_protected_name(s: &str) -> bool {
    ["reasoning", "thinking", "tool", "function_call"].iter().any(|m| contains_ignore_ascii_case(s, m))
}

/// Whether `hay` contains `needle` (lower-case ASCII), ignoring ASCII case, without a copy.
fn contains_ignore_ascii_case(hay: &str, needle: &str) -> bool {
    hay.as_bytes().windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

/// Types one SSE event (its `event:` name, if any, and its `data:` payload) for the watchdog.
/// Understands Chat Completions, Responses API, Anthropic Messages and Gemini events. The payload is
/// read in one pass for the few fields that matter (see `watchdog/view.rs`), not built into a
/// `serde_json::Value`.
pub fn classify_sse(event_name: Option<&str>, data: &str) -> StreamEvent {
    let data = data.trim();
    if event_name.is_some_and(|n| n.eq_ignore_ascii_case("ping")) {
        return StreamEvent::Heartbeat;
    }
    if data.is_empty() || data == "[DONE]" {
        return StreamEvent::Empty;
    }
    let Some(v) = view::read(data) else { return StreamEvent::Empty };
    let ty = v.ty.as_deref().or(event_name).unwrap_or("");
    if ty == "ping" {
        return StreamEvent::Heartbeat;
    }
    if is_protected_name(ty) {
        return if contains_ignore_ascii_case(ty, "tool") || ty.contains("function_call") {
            StreamEvent::ToolCall
        } else {
            StreamEvent::Reasoning
        };
    }
    if let Some(block_type) = v.block_type.as_deref()
        && is_protected_name(block_type)
    {
        return if block_type.contains("tool") { StreamEvent::ToolCall } else { StreamEvent::Reasoning };
    }
    // Chat Completions, and Gemini's candidates read the same way.
    let usage = if v.choices.is_some() { v.usage } else { v.usage_metadata };
    if let Some(choices) = v.choices.or(v.candidates) {
        return match choices.special {
            Some(true) => StreamEvent::ToolCall,
            Some(false) => StreamEvent::Reasoning,
            None if choices.bytes > 0 => StreamEvent::Text(choices.bytes),
            None if usage == Some(true) => StreamEvent::Usage,
            None => StreamEvent::Empty,
        };
    }
    // Anthropic content deltas; the Responses API's string deltas.
    match &v.delta {
        Some(view::Delta::Object { ty: Some(dt), .. }) if is_protected_name(dt) => {
            return if dt.contains("tool") { StreamEvent::ToolCall } else { StreamEvent::Reasoning };
        }
        Some(view::Delta::Object { text: Some(n), .. } | view::Delta::Str(n)) => {
            return if *n == 0 { StreamEvent::Empty } else { StreamEvent::Text(*n) };
        }
        _ => {}
    }
    if v.usage.is_some() {
        return StreamEvent::Usage;
    }
    StreamEvent::Empty
}

#[cfg(test)]
mod tests {
    //! BEHAVIOUR.md §12.15 `stream-throughput-watchdog.test.ts`.
    use super::*;
    use crate::testutil::t0;

    fn cfg(warmup: u64, window: u64, min: u64) -> WatchdogConfig {
        WatchdogConfig {
            enabled: true,
            warmup: Duration::from_millis(warmup),
            window: Duration::from_millis(window),
            min_bytes_per_second: min,
            min_bytes: 1,
        }
    }
    const MS: fn(u64) -> Duration = Duration::from_millis;
    fn text(s: &str) -> StreamEvent {
        classify_sse(None, &format!(r#"{{"choices":[{{"delta":{{"content":{}}}}}]}}"#, serde_json::Value::from(s)))
    }

    #[test]
    fn healthy_output_never_aborts() {
        let now = t0();
        let mut w = Watchdog::new(cfg(1000, 2000, 2), now);
        for s in 0..=8 {
            assert_eq!(w.observe(now + MS(s * 1000), text("healthy output")), Verdict::Continue);
        }
    }

    #[test]
    fn heartbeats_are_not_progress() {
        let now = t0();
        let mut w = Watchdog::new(cfg(1000, 2000, 10), now);
        assert_eq!(w.observe(now, text("x")), Verdict::Continue);
        assert_eq!(w.observe(now + MS(2999), StreamEvent::Heartbeat), Verdict::Continue);
        assert!(matches!(w.observe(now + MS(3000), StreamEvent::Heartbeat), Verdict::Abort { .. }));
    }

    #[test]
    fn usage_and_empty_events_count_zero() {
        let now = t0();
        let mut w = Watchdog::new(cfg(0, 1000, 1), now);
        w.observe(now, StreamEvent::Heartbeat);
        w.observe(now, classify_sse(None, r#"{"choices":[],"usage":{"total_tokens":3}}"#));
        w.observe(now, text(""));
        assert_eq!(
            w.observe(now + MS(1000), StreamEvent::Heartbeat),
            Verdict::Abort { useful_bytes: 0, bytes_per_second: 0.0 }
        );
    }

    #[test]
    fn tool_calls_and_reasoning_pause_it() {
        let now = t0();
        let mut w = Watchdog::new(cfg(0, 1000, 100), now);
        let tool = classify_sse(None, r#"{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}"#);
        assert_eq!(tool, StreamEvent::ToolCall);
        w.observe(now, tool);
        assert_eq!(w.observe(now + MS(2000), StreamEvent::Heartbeat), Verdict::Continue);
        assert!(w.protected_phase());
        let reasoning = classify_sse(None, r#"{"choices":[{"delta":{"reasoning_content":"hmm"}}]}"#);
        assert_eq!(reasoning, StreamEvent::Reasoning);
        w.observe(now + MS(2100), text("a"));
        assert!(!w.protected_phase());
    }

    #[test]
    fn responses_api_delta_counts() {
        let now = t0();
        let mut w = Watchdog::new(cfg(0, 1000, 3), now);
        let ev = classify_sse(
            Some("response.output_text.delta"),
            r#"{"type":"response.output_text.delta","delta":"hello"}"#,
        );
        assert_eq!(ev, StreamEvent::Text(5));
        w.observe(now, ev);
        assert_eq!(w.observe(now + MS(1000), StreamEvent::Heartbeat), Verdict::Continue);
        assert_eq!(w.window_bytes(), 5);
    }

    #[test]
    fn exactly_the_minimum_rate_does_not_abort() {
        // 4 bytes inside a 1 s window is exactly 4 B/s: no abort. One millisecond later the
        // sample leaves the window and the rate is 0.
        let now = t0();
        let mut w = Watchdog::new(cfg(0, 1000, 4), now);
        assert_eq!(w.observe(now + MS(1), StreamEvent::Text(4)), Verdict::Continue);
        assert_eq!(w.check(now + MS(1001)), Verdict::Continue);
        assert!(matches!(w.check(now + MS(1002)), Verdict::Abort { .. }));
    }

    #[test]
    fn disabled_never_aborts() {
        let now = t0();
        let mut c = cfg(0, 1000, 1);
        c.enabled = false;
        let mut w = Watchdog::new(c, now);
        for s in 0..=120 {
            assert_eq!(w.observe(now + MS(s * 1000), StreamEvent::Heartbeat), Verdict::Continue);
        }
    }

    #[test]
    fn off_it_keeps_nothing_of_a_long_stream_and_on_it_judges_sse_as_classified() {
        let now = t0();
        let mut c = cfg(0, 1000, 1_000);
        c.enabled = false;
        let mut off = Watchdog::new(c, now);
        let chunk = r#"{"choices":[{"delta":{"content":"hello"}}]}"#;
        for s in 0..10_000 {
            assert_eq!(off.observe_sse(now + MS(s), None, chunk), Verdict::Continue);
            assert_eq!(off.observe(now + MS(s), text("hello")), Verdict::Continue);
        }
        assert_eq!((off.samples.len(), off.window_bytes()), (0, 0));
        c.enabled = true;
        let mut on = Watchdog::new(c, now);
        assert_eq!(on.observe_sse(now, None, chunk), Verdict::Continue);
        assert_eq!(on.window_bytes(), 5);
        assert!(matches!(on.observe_sse(now + MS(1000), Some("ping"), ""), Verdict::Abort { .. }));
    }

    #[test]
    fn settings_normalise() {
        let s =
            WatchdogSettings { enabled: false, warmup_ms: -1, window_ms: 10, min_bytes_per_second: 0, min_bytes: 0 };
        let c = WatchdogConfig::from_settings(&s);
        assert_eq!((c.warmup, c.window, c.min_bytes_per_second, c.min_bytes), (MS(0), MS(1000), 1, 1));
        assert!(!WatchdogConfig::from_settings(&WatchdogSettings::default()).enabled);
    }

    #[test]
    fn anthropic_events() {
        assert_eq!(
            classify_sse(
                Some("content_block_delta"),
                r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"hé"}}"#
            ),
            StreamEvent::Text(3)
        );
        assert_eq!(
            classify_sse(
                Some("content_block_delta"),
                r#"{"type":"content_block_delta","delta":{"type":"thinking_delta","thinking":"x"}}"#
            ),
            StreamEvent::Reasoning
        );
        assert_eq!(
            classify_sse(
                Some("content_block_start"),
                r#"{"type":"content_block_start","content_block":{"type":"tool_use"}}"#
            ),
            StreamEvent::ToolCall
        );
        assert_eq!(classify_sse(Some("ping"), r#"{"type":"ping"}"#), StreamEvent::Heartbeat);
        assert_eq!(classify_sse(None, "[DONE]"), StreamEvent::Empty);
        assert_eq!(classify_sse(None, "not json"), StreamEvent::Empty);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn never_aborts_before_warmup_and_window_or_while_protected(
                events in proptest::collection::vec((0u64..3_000, 0u8..5, 0usize..40), 1..100),
                warmup in 0u64..5_000, window in 1_000u64..5_000, min in 1u64..50,
            ) {
                let start = t0();
                let c = cfg(warmup, window, min);
                let mut w = Watchdog::new(c, start);
                let mut now = start;
                for (gap, kind, n) in events {
                    now += MS(gap);
                    let ev = match kind { 0 => StreamEvent::Text(n), 1 => StreamEvent::Heartbeat, 2 => StreamEvent::ToolCall, 3 => StreamEvent::Usage, _ => StreamEvent::Reasoning };
                    let v = w.observe(now, ev);
                    if let Verdict::Abort { bytes_per_second, .. } = v {
                        prop_assert!(now - start >= c.warmup + c.window, "aborted during warm-up");
                        prop_assert!(!w.protected_phase(), "aborted while protected");
                        prop_assert!(bytes_per_second < min as f64);
                    }
                }
            }
        }
    }
}
