//! The last hour of state changes per breaker, connection, model lockout and usage-limit
//! lane, kept from the engine's events and drawn by the core's timeline renderer (the one
//! `sim svg` uses) for the dashboard.

use ferroute_core::engine::Event;
use ferroute_core::timeline::{Frame, Span, render};
use ferroute_core::usage_limit::LaneChange;
use std::collections::{BTreeMap, VecDeque};

/// How far back the timeline reaches.
pub const WINDOW_MS: u64 = 3_600_000;
/// Spans kept per lane (the oldest go first).
const PER_LANE: usize = 256;
/// Lanes kept (with room for every lockout a busy hour makes, and a bound all the same).
const MAX_LANES: usize = 4096;

#[derive(Debug, Clone)]
struct Entry {
    state: String,
    from: u64,
    to: Option<u64>,
    note: String,
}

/// The spans, in wall-clock ms.
#[derive(Debug, Default)]
pub struct Timeline {
    lanes: BTreeMap<String, VecDeque<Entry>>,
}

impl Timeline {
    /// Ends `lane`'s running span at `at`.
    fn close(&mut self, lane: &str, at: u64) {
        if let Some(last) = self.lanes.get_mut(lane).and_then(|l| l.back_mut())
            && last.to.is_none_or(|to| to > at)
        {
            last.to = Some(at.max(last.from));
        }
    }

    /// Starts `state` on `lane` at `at` (running until `until`, if known), ending the span
    /// before it.
    fn open(&mut self, lane: String, state: &str, at: u64, until: Option<u64>, note: String) {
        self.close(&lane, at);
        if !self.lanes.contains_key(&lane) && self.lanes.len() >= MAX_LANES {
            self.prune(at);
            if self.lanes.len() >= MAX_LANES {
                return;
            }
        }
        let spans = self.lanes.entry(lane).or_default();
        spans.push_back(Entry { state: state.to_owned(), from: at, to: until.map(|u| u.max(at)), note });
        if spans.len() > PER_LANE {
            spans.pop_front();
        }
    }

    /// Forgets what ended before the window.
    fn prune(&mut self, now: u64) {
        let start = now.saturating_sub(WINDOW_MS);
        for spans in self.lanes.values_mut() {
            while spans.front().is_some_and(|e| e.to.is_some_and(|to| to < start)) {
                spans.pop_front();
            }
        }
        self.lanes.retain(|_, s| !s.is_empty());
    }

    /// Takes in one engine event that happened at `at` (wall ms); `wall` turns the event's own
    /// instants into wall ms.
    pub fn event(&mut self, ev: &Event, at: u64, wall: impl Fn(std::time::Instant) -> u64) {
        match ev {
            Event::Breaker(t) => {
                let lane = format!("breaker:{}", t.provider);
                if t.to.as_str() == "CLOSED" {
                    self.close(&lane, at);
                } else {
                    self.open(lane, t.to.as_str(), at, None, format!("{} ({:?})", t.to.as_str(), t.reason));
                }
            }
            Event::ConnectionCooldown { connection, until, level, reason } => self.open(
                format!("conn:{connection}"),
                "cooldown",
                at,
                Some(wall(*until)),
                format!("cooldown: {} (level {level})", reason.as_str()),
            ),
            Event::ConnectionTerminal { connection, state } => {
                self.open(format!("conn:{connection}"), state.as_str(), at, None, String::new())
            }
            Event::ConnectionRecovered { connection } => self.close(&format!("conn:{connection}"), at),
            Event::Lockout { provider, connection, model, cooldown } => self.open(
                format!("lock:{provider}/{connection}/{model}"),
                "locked",
                at,
                Some(at + cooldown.as_millis() as u64),
                String::new(),
            ),
            Event::LockoutDecayed { provider, connection, model } => {
                self.close(&format!("lock:{provider}/{connection}/{model}"), at)
            }
            Event::LockoutsCleared { provider, connection, model, .. } => {
                let matches = |lane: &str| {
                    let Some(rest) = lane.strip_prefix("lock:") else { return false };
                    let mut parts = rest.splitn(3, '/');
                    let (p, c, m) = (parts.next(), parts.next(), parts.next());
                    provider.as_deref().is_none_or(|x| Some(x) == p)
                        && connection.as_deref().is_none_or(|x| Some(x) == c)
                        && model.as_deref().is_none_or(|x| Some(x) == m)
                };
                let lanes: Vec<String> = self.lanes.keys().filter(|l| matches(l)).cloned().collect();
                for lane in lanes {
                    self.close(&lane, at);
                }
            }
            Event::Lane { connection, change } => match change {
                LaneChange::Accepted { until } => {
                    self.open(format!("lane:{connection}"), "active", at, Some(wall(*until)), String::new())
                }
                LaneChange::Ended(_) => self.close(&format!("lane:{connection}"), at),
                LaneChange::Reset(_) => {}
            },
            Event::Pin(_) => {}
        }
    }

    /// The last hour up to `now` (wall ms) as SVG; while nothing older is kept it starts a
    /// little before the first span (at least a minute back), so that a young gateway's first
    /// changes are not squeezed against the right edge.
    pub fn svg(&mut self, now: u64, title: &str) -> String {
        self.prune(now);
        let earliest = self.lanes.values().filter_map(|s| s.front()).map(|e| e.from).min().unwrap_or(now);
        let lead = now.saturating_sub(earliest) / 10;
        let start = now.saturating_sub(WINDOW_MS).max(earliest.saturating_sub(lead).min(now.saturating_sub(60_000)));
        let spans: Vec<Span> = self
            .lanes
            .iter()
            .flat_map(|(lane, spans)| {
                spans.iter().filter(|e| e.from <= now).map(move |e| Span {
                    lane: lane.clone(),
                    state: e.state.clone(),
                    from_ms: e.from.max(start) - start,
                    to_ms: e.to.filter(|&to| to <= now).map(|to| to.max(start) - start),
                    note: e.note.clone(),
                })
            })
            .collect();
        render(&Frame { title, end_ms: now - start, count_back: true }, &spans)
    }

    /// How many spans are kept (for tests and bounds).
    pub fn len(&self) -> usize {
        self.lanes.values().map(VecDeque::len).sum()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroute_core::Reason;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn cooldown(t0: Instant, c: &str, secs: u64) -> Event {
        Event::ConnectionCooldown {
            connection: Arc::from(c),
            until: t0 + Duration::from_secs(secs),
            level: 1,
            reason: Reason::RateLimitExceeded,
        }
    }

    #[test]
    fn a_recovery_ends_a_cooldown_before_its_deadline_and_old_spans_leave_the_hour() {
        let t0 = crate::state::clock::now();
        let wall = |i: Instant| 1_000_000 + (i - t0).as_millis() as u64;
        let mut t = Timeline::default();
        t.event(&cooldown(t0, "k1", 60), 1_000_000, wall);
        t.event(&Event::ConnectionRecovered { connection: Arc::from("k1") }, 1_010_000, wall);
        let svg = t.svg(1_020_000, "hour");
        assert!(svg.contains(">conn:k1<"), "{svg}");
        assert!(svg.contains("cooldown: rate_limit_exceeded (level 1)"), "{svg}");
        assert_eq!(t.len(), 1);
        t.event(&cooldown(t0, "k2", 7_200), 1_030_000, wall);
        // An hour after k1's span ended, it is gone; k2's (ended later) is still there.
        let _ = t.svg(1_010_000 + WINDOW_MS + 1, "hour");
        assert_eq!(t.len(), 1);
        assert!(t.lanes.contains_key("conn:k2"));
    }

    #[test]
    fn a_lane_keeps_a_bounded_number_of_spans() {
        let t0 = crate::state::clock::now();
        let wall = |i: Instant| (i - t0).as_millis() as u64;
        let mut t = Timeline::default();
        for i in 0..1_000u64 {
            t.event(&cooldown(t0, "k1", i + 1), i * 1_000, wall);
        }
        assert_eq!(t.len(), PER_LANE);
    }
}
