//! The shell's one clock.
//!
//! `now()` is tokio's clock: real time in production, simulated time under turmoil. Wall-clock
//! values users see are derived from an anchor taken once at start-up.

use std::time::{Duration, Instant};

/// The current instant, from tokio's clock.
pub fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Converts instants to wall-clock milliseconds through a start-up anchor.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
    wall_start_ms: u64,
}

impl Clock {
    /// Anchors `now()` to `wall_start_ms` (Unix milliseconds).
    pub fn anchored(wall_start_ms: u64) -> Self {
        Clock { start: now(), wall_start_ms }
    }

    /// The instant the clock was anchored.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// The current instant.
    pub fn now(&self) -> Instant {
        now()
    }

    /// Unix milliseconds of `at`.
    pub fn wall_ms(&self, at: Instant) -> u64 {
        match at.checked_duration_since(self.start) {
            Some(d) => self.wall_start_ms.saturating_add(ms(d)),
            None => self.wall_start_ms.saturating_sub(ms(self.start.duration_since(at))),
        }
    }

    /// Unix milliseconds now.
    pub fn wall_now_ms(&self) -> u64 {
        self.wall_ms(now())
    }

    /// Time since start-up.
    pub fn uptime(&self) -> Duration {
        now().saturating_duration_since(self.start)
    }
}

/// The instant `budget` after `from`, for `tokio::time::timeout_at` (a timeout that reads no
/// clock: the caller already knows when its budget began). A budget past any instant is 30 years.
pub fn deadline(from: Instant, budget: Duration) -> tokio::time::Instant {
    let far = Duration::from_secs(30 * 365 * 86_400);
    tokio::time::Instant::from_std(from.checked_add(budget.min(far)).unwrap_or(from))
}

/// Whole milliseconds, saturating.
pub fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The real wall clock, for the binary's start-up anchor only.
#[allow(clippy::disallowed_methods)] // the one wall-clock read; everything else derives from it
pub fn system_wall_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(ms).unwrap_or(0)
}

/// RFC 3339 UTC (`2026-11-30T16:00:00.000Z`) of Unix milliseconds.
pub fn rfc3339(unix_ms: u64) -> String {
    let secs = (unix_ms / 1000) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = ferroute_core::calendar::civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z", rem / 3600, rem % 3600 / 60, rem % 60, unix_ms % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_is_its_budget_after_its_start_and_no_budget_overflows_it() {
        let from = now();
        assert_eq!(deadline(from, Duration::from_millis(1500)).into_std(), from + Duration::from_millis(1500));
        let far = Duration::from_secs(30 * 365 * 86_400);
        assert_eq!(deadline(from, Duration::MAX).into_std(), from + far);
    }

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(784_111_777_000), "1994-11-06T08:49:37.000Z");
        assert_eq!(rfc3339(1_780_000_000_123), "2026-05-28T20:26:40.123Z");
    }
}
