//! Retry-After and rate-limit reset headers: any value of any of them parses without a panic
//! into a wait within the documented bounds.
#![no_main]

use ferroute_core::hint::{self, MAX_HINT};
use ferroute_core::quota;
use ferroute_core::usage_limit::Unified;
use libfuzzer_sys::fuzz_target;
use std::time::{Duration, Instant};

const NAMES: &[&str] = &[
    "retry-after",
    "x-ratelimit-reset",
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-tokens",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-limit-tokens",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-unified-reset",
    "anthropic-ratelimit-unified-status",
    "anthropic-ratelimit-unified-slow-retry-after",
    "anthropic-ratelimit-unified-slow-max-wait",
    "anthropic-ratelimit-unified-5h-utilization",
    "anthropic-ratelimit-unified-7d-reset",
];

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // Lines of `<name index> <value>`; the wall clock comes from the input too.
    let wall = data.iter().take(8).fold(0u64, |a, b| a.wrapping_mul(251).wrapping_add(u64::from(*b)));
    let wall = Some(wall % 4_102_444_800_000); // up to 2100
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    for line in text.lines() {
        let Some(first) = line.chars().next() else { continue };
        let v = &line[first.len_utf8()..];
        let name = NAMES[first as usize % NAMES.len()];
        pairs.push((name, v));
        for d in [hint::parse_retry_after(v, wall), hint::parse_go_duration(v), hint::parse_delay(v)]
            .into_iter()
            .flatten()
        {
            assert!(d <= MAX_HINT.max(Duration::from_secs(u64::from(u32::MAX))), "{v:?} gave {d:?}");
        }
        let _ = hint::parse_instant_ms(v);
        let _ = hint::parse_rfc3339_ms(v);
        let _ = hint::parse_http_date_ms(v);
    }
    if let Some(h) = hint::from_headers(&pairs, wall) {
        assert!(!h.wait.is_zero() && h.wait <= MAX_HINT, "header hint {h:?} outside (0, 30 days]");
    }
    let _ = quota::parse(&pairs, Instant::now(), wall.unwrap_or(0));
    let _ = Unified::parse(&pairs);
});
