//! The low-priority lane: per connection, in memory (a restart costs one more usage-limit 429
//! to re-accept).
//!
//! ```text
//!          429 rejected + treatment                 reset + 60 s passed, weekly_limit,
//!   off ──────────────────────────────▶ active ───▶ budget_exhausted, off, ineligible,
//!    ▲  (not while guarded or budget      │          window rollover, overage in use ──▶ off
//!    │   exhausted; reset tried first)    │ slot_busy / 529: wait retry-after ±30 %
//!    │                                    │ and retry, while the request's waits fit
//!    └──────── guard (10 min) ◀───────────┘ past max-wait or the start timeout − 5 s
//! ```

use super::reset::ResetOutcome;
use super::signals::{LaneEnd, Options, SlowStatus, Unified, until};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// Added to the announced window reset before the lane ends by itself.
pub const GRACE: Duration = Duration::from_secs(60);
/// After the lane ends on its maximum wait, re-acceptance is blocked this long.
pub const GUARD: Duration = Duration::from_secs(600);
/// The wait on `slot_busy` without `slow-retry-after`.
pub const DEFAULT_SLOW_RETRY: Duration = Duration::from_secs(20);
/// Bounds of `slow-retry-after`.
pub const SLOW_RETRY_BOUNDS: (Duration, Duration) = (Duration::from_secs(5), Duration::from_secs(600));
/// Jitter on every wait: ± this share.
pub const JITTER: f64 = 0.30;
/// The maximum total wait of one request without `slow-max-wait`.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(20 * 60);
/// Bounds of `slow-max-wait`.
pub const MAX_WAIT_BOUNDS: (Duration, Duration) = (Duration::from_secs(60), Duration::from_secs(6 * 3600));
/// Kept free of the request's start timeout, so that a wait ends the lane in order instead of
/// timing the request out mid-sleep.
pub const START_MARGIN: Duration = Duration::from_secs(5);
/// The usage window: the longest a lane lasts, and its length when no reset is announced.
pub const WINDOW: Duration = Duration::from_secs(5 * 3600);
/// The longest a spent lane budget is remembered.
pub const BUDGET_CAP: Duration = Duration::from_secs(8 * 24 * 3600);
/// A later response announcing a reset more than this after the lane's own is a new window.
const ROLLOVER_TOLERANCE_MS: u64 = 60_000;

/// A change of one connection's usage-limit state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaneChange {
    /// The offer was accepted; the lane lasts until `until`.
    Accepted {
        /// Its end (the announced reset + grace).
        until: Instant,
    },
    /// The lane ended.
    Ended(LaneEnd),
    /// A session-limit reset was tried.
    Reset(ResetOutcome),
}

/// What the shell does next with the response it just got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing for M4: the response goes down the normal path (success, cooldown, fallback).
    Pass,
    /// Query the usage endpoint and post the reset if offered, then call
    /// [`Lanes::on_reset`] with what came back.
    TryReset,
    /// Send again on the same connection after `after`, with the slow header when `slow`.
    /// The response just read never reaches the cooldown path.
    Retry {
        /// Whether to send `anthropic-usage-limit: slow`.
        slow: bool,
        /// How long to wait first.
        after: Duration,
    },
}

/// A response as the lane reads it.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// The connection that answered.
    pub connection: &'a str,
    /// When.
    pub now: Instant,
    /// The same instant as Unix ms (the headers name wall-clock instants).
    pub wall_ms: u64,
    /// Its status.
    pub status: u16,
    /// Its `anthropic-ratelimit-unified-*` headers.
    pub headers: &'a Unified,
}

/// One request's share of the lane: what it sent, how long it waited.
#[derive(Debug, Clone, Copy, Default)]
pub struct LaneRequest {
    slow: bool,
    waited: Duration,
    accepted: bool,
    reset_tried: bool,
}

impl LaneRequest {
    /// Records whether the send about to happen carries the slow header.
    pub fn sending(&mut self, slow: bool) {
        self.slow = slow;
    }

    /// Total time this request waited in the lane.
    pub fn waited(&self) -> Duration {
        self.waited
    }
}

/// What health and the simulation see of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaneView {
    /// No lane.
    Off,
    /// In the lane for `remaining`.
    Active {
        /// Time left.
        remaining: Duration,
    },
    /// Re-acceptance blocked for `remaining` after a max-wait end.
    Guard {
        /// Time left.
        remaining: Duration,
    },
    /// The lane budget is spent for `remaining`.
    BudgetExhausted {
        /// Time left.
        remaining: Duration,
    },
}

impl LaneView {
    /// `off`, `active`, `guard` or `budget_exhausted`.
    pub fn as_str(self) -> &'static str {
        match self {
            LaneView::Off => "off",
            LaneView::Active { .. } => "active",
            LaneView::Guard { .. } => "guard",
            LaneView::BudgetExhausted { .. } => "budget_exhausted",
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Active {
    until: Instant,
    reset_ms: Option<u64>,
    max_wait: Duration,
}

#[derive(Debug, Clone, Copy, Default)]
struct ConnLane {
    active: Option<Active>,
    guard_until: Option<Instant>,
    budget_until: Option<Instant>,
    reset_next: Option<Instant>,
}

impl ConnLane {
    fn is_empty(&self) -> bool {
        self.active.is_none() && self.guard_until.is_none() && self.budget_until.is_none() && self.reset_next.is_none()
    }
}

/// Every connection's lane and reset state.
#[derive(Debug, Clone, Default)]
pub struct Lanes {
    conns: BTreeMap<String, ConnLane>,
    events: VecDeque<(String, LaneChange)>,
}

/// Cap on undrained changes.
const EVENT_CAP: usize = 1024;

fn clamp(d: Duration, (lo, hi): (Duration, Duration)) -> Duration {
    d.clamp(lo, hi)
}

fn later(at: Option<Instant>, now: Instant) -> Option<Instant> {
    at.filter(|t| *t > now)
}

impl Lanes {
    /// No lanes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a request sent to `connection` now carries the slow header.
    pub fn slow(&self, connection: &str, now: Instant) -> bool {
        self.conns.get(connection).and_then(|c| c.active).is_some_and(|a| a.until > now)
    }

    /// What `connection`'s lane looks like at `now`.
    pub fn view(&self, connection: &str, now: Instant) -> LaneView {
        let Some(c) = self.conns.get(connection) else { return LaneView::Off };
        if let Some(a) = c.active.filter(|a| a.until > now) {
            return LaneView::Active { remaining: a.until - now };
        }
        if let Some(b) = later(c.budget_until, now) {
            return LaneView::BudgetExhausted { remaining: b - now };
        }
        if let Some(g) = later(c.guard_until, now) {
            return LaneView::Guard { remaining: g - now };
        }
        LaneView::Off
    }

    /// Whether a session-limit reset may be tried on `connection` now.
    pub fn reset_due(&self, connection: &str, now: Instant) -> bool {
        self.conns.get(connection).and_then(|c| later(c.reset_next, now)).is_none()
    }

    /// When the next session-limit reset may be tried, if it is held back.
    pub fn reset_next(&self, connection: &str, now: Instant) -> Option<Instant> {
        self.conns.get(connection).and_then(|c| later(c.reset_next, now))
    }

    /// The next change, oldest first.
    pub fn poll_change(&mut self) -> Option<(String, LaneChange)> {
        self.events.pop_front()
    }

    /// The earliest instant at which some lane state ends by itself (tests).
    #[cfg(test)]
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        self.conns
            .values()
            .flat_map(|c| [c.active.map(|a| a.until), c.guard_until, c.budget_until, c.reset_next])
            .flatten()
            .filter(|t| *t > now)
            .min()
    }

    /// Ends lanes past their reset and forgets guards, budgets and reset holds that passed.
    pub fn sweep(&mut self, now: Instant) {
        let ids: Vec<String> = self.conns.keys().cloned().collect();
        for id in ids {
            self.expire(&id, now);
        }
        self.conns.retain(|_, c| !c.is_empty());
    }

    fn push(&mut self, connection: &str, change: LaneChange) {
        if self.events.len() >= EVENT_CAP {
            self.events.pop_front();
        }
        self.events.push_back((connection.to_owned(), change));
    }

    /// Lazily ends what passed; returns whether a lane is active after that.
    fn expire(&mut self, connection: &str, now: Instant) -> bool {
        let Some(c) = self.conns.get_mut(connection) else { return false };
        c.guard_until = later(c.guard_until, now);
        c.budget_until = later(c.budget_until, now);
        c.reset_next = later(c.reset_next, now);
        match c.active {
            Some(a) if a.until <= now => {
                c.active = None;
                self.push(connection, LaneChange::Ended(LaneEnd::Expired));
                false
            }
            Some(_) => true,
            None => false,
        }
    }

    fn end(&mut self, connection: &str, now: Instant, why: LaneEnd, h: &Unified, wall_ms: u64) {
        let c = self.conns.entry(connection.to_owned()).or_default();
        c.active = None;
        if why == LaneEnd::MaxWait {
            c.guard_until = Some(now + GUARD);
        }
        self.push(connection, LaneChange::Ended(why));
        if why == LaneEnd::BudgetExhausted {
            self.remember_budget(connection, now, h, wall_ms);
        }
    }

    /// `budget_exhausted` is remembered until the announced budget reset (else the window
    /// reset, else the cap), at most [`BUDGET_CAP`].
    fn remember_budget(&mut self, connection: &str, now: Instant, h: &Unified, wall_ms: u64) {
        let left = h.budget_reset_ms.or(h.reset_ms).map_or(BUDGET_CAP, |at| until(at, wall_ms)).min(BUDGET_CAP);
        let c = self.conns.entry(connection.to_owned()).or_default();
        let at = now + left;
        c.budget_until = Some(c.budget_until.map_or(at, |b| b.max(at)));
    }

    /// Decides what a response means for M4. `start_left` is what remains of the request's
    /// start timeout; `req` is this request's lane state across its sends.
    pub fn on_response(
        &mut self,
        seen: &Seen<'_>,
        opts: Options,
        req: &mut LaneRequest,
        start_left: Duration,
        rng: &mut ChaCha8Rng,
    ) -> Step {
        if !opts.any() {
            return Step::Pass;
        }
        let Seen { connection, now, wall_ms, status, headers: h } = *seen;
        if self.expire(connection, now) {
            // `None`: the lane ended on this response, which may still be a new trigger.
            if let Some(step) = self.in_lane(seen, req, start_left, rng) {
                return step;
            }
        }
        if !h.is_trigger(status) {
            return Step::Pass;
        }
        if h.overage_in_use {
            return Step::Pass;
        }
        if let Some(end) = h.slow_status.and_then(SlowStatus::end) {
            if end == LaneEnd::BudgetExhausted {
                self.remember_budget(connection, now, h, wall_ms);
            }
            return Step::Pass;
        }
        if opts.reset && !req.reset_tried && self.reset_due(connection, now) {
            req.reset_tried = true;
            return Step::TryReset;
        }
        self.accept(connection, now, wall_ms, h, opts, req)
    }

    /// A response while the lane is active: `None` when it ended the lane.
    fn in_lane(
        &mut self,
        seen: &Seen<'_>,
        req: &mut LaneRequest,
        start_left: Duration,
        rng: &mut ChaCha8Rng,
    ) -> Option<Step> {
        let Seen { connection, now, wall_ms, status, headers: h } = *seen;
        let a = self.conns.get(connection).and_then(|c| c.active)?;
        let ended = if h.overage_in_use {
            Some(LaneEnd::ExtraUsage)
        } else if let Some(end) = h.slow_status.and_then(SlowStatus::end) {
            Some(end)
        } else if let (Some(mine), Some(announced)) = (a.reset_ms, h.reset_ms) {
            (announced > mine.saturating_add(ROLLOVER_TOLERANCE_MS)).then_some(LaneEnd::WindowRollover)
        } else {
            None
        };
        if let Some(why) = ended {
            self.end(connection, now, why, h, wall_ms);
            return None;
        }
        // The lane learns its window if the offer did not name it, and the latest maximum wait.
        let max_wait = h.slow_max_wait.map_or(a.max_wait, |mw| clamp(mw, MAX_WAIT_BOUNDS));
        if let Some(active) = self.conns.get_mut(connection).and_then(|c| c.active.as_mut()) {
            active.reset_ms = active.reset_ms.or(h.reset_ms);
            active.max_wait = max_wait;
        }
        let busy = status == 529 || (status == 429 && h.slow_status == Some(SlowStatus::SlotBusy));
        if req.slow && busy {
            let wait = jittered(clamp(h.slow_retry_after.unwrap_or(DEFAULT_SLOW_RETRY), SLOW_RETRY_BOUNDS), rng);
            if req.waited + wait > max_wait || wait > start_left.saturating_sub(START_MARGIN) {
                self.end(connection, now, LaneEnd::MaxWait, h, wall_ms);
                return Some(Step::Pass);
            }
            req.waited += wait;
            return Some(Step::Retry { slow: true, after: wait });
        }
        if !req.slow && h.is_trigger(status) {
            // Sent just before another request accepted the offer: into the lane at once.
            return Some(Step::Retry { slow: true, after: Duration::ZERO });
        }
        Some(Step::Pass)
    }

    fn accept(
        &mut self,
        connection: &str,
        now: Instant,
        wall_ms: u64,
        h: &Unified,
        opts: Options,
        req: &mut LaneRequest,
    ) -> Step {
        if !opts.lane || !h.offer || req.accepted {
            return Step::Pass;
        }
        let c = self.conns.entry(connection.to_owned()).or_default();
        if later(c.guard_until, now).is_some() || later(c.budget_until, now).is_some() {
            return Step::Pass;
        }
        let left = h.reset_ms.map_or(WINDOW, |at| until(at, wall_ms)).min(WINDOW);
        let until = now + left + GRACE;
        c.active = Some(Active {
            until,
            reset_ms: h.reset_ms,
            max_wait: clamp(h.slow_max_wait.unwrap_or(DEFAULT_MAX_WAIT), MAX_WAIT_BOUNDS),
        });
        req.accepted = true;
        self.push(connection, LaneChange::Accepted { until });
        Step::Retry { slow: true, after: Duration::ZERO }
    }

    /// What the session-limit reset came to, for the request whose trigger (`seen`, with
    /// `now` when the try ended) asked for it: retry at full speed after `reset`/`not_limited`,
    /// else hold the next try back and go on to the lane.
    pub fn on_reset(&mut self, seen: &Seen<'_>, outcome: ResetOutcome, opts: Options, req: &mut LaneRequest) -> Step {
        let Seen { connection, now, wall_ms, headers: h, .. } = *seen;
        self.push(connection, LaneChange::Reset(outcome));
        let hold = outcome.hold(wall_ms);
        let c = self.conns.entry(connection.to_owned()).or_default();
        c.reset_next = hold.map(|d| now + d);
        match outcome {
            ResetOutcome::Reset | ResetOutcome::NotLimited => Step::Retry { slow: false, after: Duration::ZERO },
            _ => self.accept(connection, now, wall_ms, h, opts, req),
        }
    }
}

/// `base` ± [`JITTER`], from the caller's seeded RNG.
pub fn jittered(base: Duration, rng: &mut ChaCha8Rng) -> Duration {
    let ms = base.as_millis() as u64;
    let spread = (ms as f64 * JITTER) as u64;
    Duration::from_millis(ms - spread + rng.random_range(0..=2 * spread))
}
