//! What a subscription's usage-limit 429 says (the unified status, the slow-lane offer and its
//! status, when the window resets) and what an operator opted into. The lane and the reset
//! both read it; it reads neither.

use crate::hint::{header, parse_instant_ms};
use std::time::Duration;

/// The request header that puts a request into the low-priority lane.
pub const SLOW_HEADER: &str = "anthropic-usage-limit";
/// Its value.
pub const SLOW_VALUE: &str = "slow";

/// What the opt-in settings of one connection turn on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// Accept the low-priority offer.
    pub lane: bool,
    /// Try the session-limit reset first.
    pub reset: bool,
}

impl Options {
    /// Whether anything is on.
    pub fn any(self) -> bool {
        self.lane || self.reset
    }
}

/// `anthropic-ratelimit-unified-slow-status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowStatus {
    /// The request was served in the lane.
    Active,
    /// The lane was not needed for this request.
    NotNeeded,
    /// The lane has no free slot: wait and retry.
    SlotBusy,
    /// The weekly limit is reached: the lane cannot help.
    WeeklyLimit,
    /// The lane's own budget is spent until its reset.
    BudgetExhausted,
    /// The lane is switched off for the account.
    Off,
    /// The account may not use the lane.
    Ineligible,
    /// A value this gateway does not know (treated like no status).
    Other,
}

impl SlowStatus {
    pub(super) fn parse(v: &str) -> SlowStatus {
        match v.trim().to_ascii_lowercase().as_str() {
            "active" => SlowStatus::Active,
            "not_needed" => SlowStatus::NotNeeded,
            "slot_busy" => SlowStatus::SlotBusy,
            "weekly_limit" => SlowStatus::WeeklyLimit,
            "budget_exhausted" => SlowStatus::BudgetExhausted,
            "off" => SlowStatus::Off,
            "ineligible" => SlowStatus::Ineligible,
            _ => SlowStatus::Other,
        }
    }

    /// The lane end this status means, if it ends the lane.
    pub fn end(self) -> Option<LaneEnd> {
        match self {
            SlowStatus::WeeklyLimit => Some(LaneEnd::WeeklyLimit),
            SlowStatus::BudgetExhausted => Some(LaneEnd::BudgetExhausted),
            SlowStatus::Off => Some(LaneEnd::Off),
            SlowStatus::Ineligible => Some(LaneEnd::Ineligible),
            _ => None,
        }
    }
}

/// The `anthropic-ratelimit-unified-*` headers of one response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unified {
    /// `anthropic-ratelimit-unified-status: rejected`.
    pub rejected: bool,
    /// `anthropic-ratelimit-unified-slow-offer: treatment`.
    pub offer: bool,
    /// `anthropic-ratelimit-unified-reset`: when the 5-hour window resets (Unix ms).
    pub reset_ms: Option<u64>,
    /// `anthropic-ratelimit-unified-slow-status`.
    pub slow_status: Option<SlowStatus>,
    /// `anthropic-ratelimit-unified-slow-retry-after`, as sent (seconds).
    pub slow_retry_after: Option<Duration>,
    /// `anthropic-ratelimit-unified-slow-max-wait`, as sent (seconds).
    pub slow_max_wait: Option<Duration>,
    /// `anthropic-ratelimit-unified-overage-in-use: true`.
    pub overage_in_use: bool,
    /// `anthropic-ratelimit-unified-slow-budget-reset`: when a spent lane budget returns (Unix ms).
    pub budget_reset_ms: Option<u64>,
}

impl Unified {
    /// Reads the headers (names case-insensitive). Unparseable values count as absent.
    pub fn parse(headers: &[(&str, &str)]) -> Unified {
        let get = |suffix: &str| header(headers, &format!("anthropic-ratelimit-unified-{suffix}"));
        Unified {
            rejected: get("status").is_some_and(|v| v.eq_ignore_ascii_case("rejected")),
            offer: get("slow-offer").is_some_and(|v| v.eq_ignore_ascii_case("treatment")),
            reset_ms: get("reset").and_then(parse_instant_ms),
            slow_status: get("slow-status").map(SlowStatus::parse),
            slow_retry_after: get("slow-retry-after").and_then(parse_seconds),
            slow_max_wait: get("slow-max-wait").and_then(parse_seconds),
            overage_in_use: get("overage-in-use").is_some_and(|v| v.eq_ignore_ascii_case("true")),
            budget_reset_ms: get("slow-budget-reset").and_then(parse_instant_ms),
        }
    }

    /// Whether this is the usage-limit 429's signature (the lane's and the reset's trigger).
    pub fn is_trigger(&self, status: u16) -> bool {
        status == 429 && self.rejected
    }
}

/// Non-negative seconds (fractions allowed), at most a day.
fn parse_seconds(v: &str) -> Option<Duration> {
    let s: f64 = v.trim().parse().ok()?;
    (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s.min(86_400.0)))
}

/// The time from `now_ms` until `at_ms` (zero when past).
pub(crate) fn until(at_ms: u64, now_ms: u64) -> Duration {
    Duration::from_millis(at_ms.saturating_sub(now_ms))
}

/// Why a lane ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LaneEnd {
    /// The announced reset (+ grace) passed.
    Expired,
    /// A request's waits would have passed `slow-max-wait` or its start timeout; a guard follows.
    MaxWait,
    /// `slow-status: weekly_limit`.
    WeeklyLimit,
    /// `slow-status: budget_exhausted` (remembered until the budget resets).
    BudgetExhausted,
    /// `slow-status: off`.
    Off,
    /// `slow-status: ineligible`.
    Ineligible,
    /// A response announced a later window reset: the 5-hour window rolled over.
    WindowRollover,
    /// `overage-in-use: true`: paid extra usage now covers the limit.
    ExtraUsage,
}

impl LaneEnd {
    /// The snake_case name in logs, events and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            LaneEnd::Expired => "expired",
            LaneEnd::MaxWait => "max_wait",
            LaneEnd::WeeklyLimit => "weekly_limit",
            LaneEnd::BudgetExhausted => "budget_exhausted",
            LaneEnd::Off => "off",
            LaneEnd::Ineligible => "ineligible",
            LaneEnd::WindowRollover => "window_rollover",
            LaneEnd::ExtraUsage => "extra_usage",
        }
    }
}
