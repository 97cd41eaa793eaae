//! Quota reports: what upstreams say of an account's remaining quota and its reset, read from
//! rate-limit headers on every response (success or failure), kept per connection for the
//! quota-aware strategies (fill-first, reset-aware, reset-window, headroom, auto).
//!
//! Understood: `x-ratelimit-{remaining,limit,reset}-{requests,tokens}` (OpenAI style; reset as a
//! Go duration), `x-ratelimit-{remaining,limit,reset}` (reset as epoch seconds),
//! `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{remaining,limit,reset}`
//! (reset as RFC 3339) and `anthropic-ratelimit-unified-{5h,7d}-{utilization,reset}` (the
//! subscription windows). Of several quotas the most constrained one (least remaining) is kept.

use crate::hint::{header, parse_go_duration, parse_rfc3339_ms};
use crate::strategy::Quota;
use std::time::{Duration, Instant};

/// One report, as of the instant it was read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuotaReport {
    /// Remaining share, 0.0 – 1.0.
    pub remaining: Option<f64>,
    /// When it resets.
    pub reset_at: Option<Instant>,
    /// Its window.
    pub window: Option<Duration>,
}

impl QuotaReport {
    /// The report as a strategy reads it at `now` (a reset that passed means a full quota).
    pub fn at(&self, now: Instant) -> Quota {
        match self.reset_at {
            Some(t) if t <= now => Quota { remaining: Some(1.0), resets_in: None, window: self.window },
            Some(t) => Quota { remaining: self.remaining, resets_in: Some(t - now), window: self.window },
            None => Quota { remaining: self.remaining, resets_in: None, window: self.window },
        }
    }
}

fn fraction(remaining: Option<&str>, limit: Option<&str>) -> Option<f64> {
    let r: f64 = remaining?.parse().ok()?;
    let l: f64 = limit?.parse().ok()?;
    (l > 0.0 && r.is_finite() && l.is_finite()).then(|| (r / l).clamp(0.0, 1.0))
}

fn epoch_ms(v: &str) -> Option<u64> {
    let x: f64 = v.trim().parse().ok()?;
    if !x.is_finite() || x <= 0.0 {
        return None;
    }
    // Seconds or milliseconds since the epoch.
    Some(if x > 1e12 { x as u64 } else { (x * 1000.0) as u64 })
}

/// Reads the quota headers of one response. `wall_now_ms` anchors absolute reset times.
pub fn parse(headers: &[(&str, &str)], now: Instant, wall_now_ms: u64) -> Option<QuotaReport> {
    // Most responses carry none of these headers: one look at the names, no lookups.
    let quota_header = |n: &str| {
        let n = n.as_bytes();
        [&b"x-ratelimit-"[..], &b"anthropic-ratelimit-"[..]]
            .iter()
            .any(|p| n.len() > p.len() && n[..p.len()].eq_ignore_ascii_case(p))
    };
    if !headers.iter().any(|(n, _)| quota_header(n)) {
        return None;
    }
    let mut found: Vec<QuotaReport> = Vec::new();
    let after = |d: Duration| now.checked_add(d);
    let at_wall = |ms: u64| after(Duration::from_millis(ms.saturating_sub(wall_now_ms)));
    for [r, l, reset] in OPENAI {
        if let Some(remaining) = fraction(header(headers, r), header(headers, l)) {
            let reset = header(headers, reset).and_then(parse_go_duration);
            found.push(QuotaReport { remaining: Some(remaining), reset_at: reset.and_then(after), window: None });
        }
    }
    if let Some(remaining) = fraction(header(headers, "x-ratelimit-remaining"), header(headers, "x-ratelimit-limit")) {
        let reset = header(headers, "x-ratelimit-reset").and_then(epoch_ms).and_then(at_wall);
        found.push(QuotaReport { remaining: Some(remaining), reset_at: reset, window: None });
    }
    for [r, l, reset] in ANTHROPIC {
        if let Some(remaining) = fraction(header(headers, r), header(headers, l)) {
            let reset = header(headers, reset).and_then(parse_rfc3339_ms).and_then(at_wall);
            found.push(QuotaReport { remaining: Some(remaining), reset_at: reset, window: None });
        }
    }
    for (utilization, reset, window) in UNIFIED {
        let used: Option<f64> = header(headers, utilization).and_then(|v| v.parse().ok());
        if let Some(u) = used.filter(|u| u.is_finite()) {
            let reset = header(headers, reset).and_then(epoch_ms).and_then(at_wall);
            found.push(QuotaReport {
                remaining: Some((1.0 - u).clamp(0.0, 1.0)),
                reset_at: reset,
                window: Some(Duration::from_secs(window)),
            });
        }
    }
    found.into_iter().min_by(|a, b| a.remaining.unwrap_or(1.0).total_cmp(&b.remaining.unwrap_or(1.0)))
}

/// Remaining, limit and reset, per kind (OpenAI style).
const OPENAI: [[&str; 3]; 2] = [
    ["x-ratelimit-remaining-requests", "x-ratelimit-limit-requests", "x-ratelimit-reset-requests"],
    ["x-ratelimit-remaining-tokens", "x-ratelimit-limit-tokens", "x-ratelimit-reset-tokens"],
];

/// Remaining, limit and reset, per kind (Anthropic).
const ANTHROPIC: [[&str; 3]; 4] = [
    [
        "anthropic-ratelimit-requests-remaining",
        "anthropic-ratelimit-requests-limit",
        "anthropic-ratelimit-requests-reset",
    ],
    ["anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-limit", "anthropic-ratelimit-tokens-reset"],
    [
        "anthropic-ratelimit-input-tokens-remaining",
        "anthropic-ratelimit-input-tokens-limit",
        "anthropic-ratelimit-input-tokens-reset",
    ],
    [
        "anthropic-ratelimit-output-tokens-remaining",
        "anthropic-ratelimit-output-tokens-limit",
        "anthropic-ratelimit-output-tokens-reset",
    ],
];

/// Utilization, reset and window length in seconds (Anthropic subscription windows).
const UNIFIED: [(&str, &str, u64); 2] = [
    ("anthropic-ratelimit-unified-5h-utilization", "anthropic-ratelimit-unified-5h-reset", 5 * 3_600),
    ("anthropic-ratelimit-unified-7d-utilization", "anthropic-ratelimit-unified-7d-reset", 7 * 86_400),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_headers_give_the_tighter_quota() {
        let now = crate::testutil::t0();
        let h = [
            ("x-ratelimit-limit-requests", "100"),
            ("x-ratelimit-remaining-requests", "80"),
            ("x-ratelimit-reset-requests", "6m0s"),
            ("x-ratelimit-limit-tokens", "1000"),
            ("x-ratelimit-remaining-tokens", "100"),
            ("x-ratelimit-reset-tokens", "1s"),
        ];
        let r = parse(&h, now, 1_000_000).expect("report");
        assert_eq!(r.remaining, Some(0.1));
        assert_eq!(r.at(now).resets_in, Some(Duration::from_secs(1)));
        // After the reset the quota reads full.
        assert_eq!(r.at(now + Duration::from_secs(2)).remaining, Some(1.0));
    }

    #[test]
    fn anthropic_unified_window_is_known() {
        let now = crate::testutil::t0();
        let wall = 1_700_000_000_000u64;
        let h = [
            ("anthropic-ratelimit-unified-5h-utilization", "0.25"),
            ("anthropic-ratelimit-unified-5h-reset", "1700003600"),
        ];
        let r = parse(&h, now, wall).expect("report");
        assert_eq!(r.remaining, Some(0.75));
        assert_eq!(r.window, Some(Duration::from_secs(5 * 3600)));
        assert_eq!(r.at(now).resets_in, Some(Duration::from_secs(3600)));
    }

    #[test]
    fn garbage_and_missing_limits_report_nothing() {
        let now = crate::testutil::t0();
        assert_eq!(parse(&[("x-ratelimit-remaining-requests", "5")], now, 0), None);
        assert_eq!(
            parse(&[("x-ratelimit-remaining-requests", "x"), ("x-ratelimit-limit-requests", "0")], now, 0),
            None
        );
        assert_eq!(parse(&[("anthropic-ratelimit-unified-5h-utilization", "NaN")], now, 0), None);
    }
}
