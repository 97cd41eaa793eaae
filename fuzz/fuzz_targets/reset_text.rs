//! Reset times in error bodies and the usage-limit reset endpoint's answers: any text parses
//! without a panic, and a hint found in a body is a wait within (0, 30 days].
#![no_main]

use ferroute_core::hint::{self, MAX_HINT};
use ferroute_core::usage_limit::reset;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let wall = Some(1_800_000_000_000);
    if let Some(h) = hint::from_body(&text, wall) {
        assert!(!h.wait.is_zero() && h.wait <= MAX_HINT, "body hint {h:?} outside (0, 30 days]");
    }
    if let Some(d) = hint::from_text(&text, wall) {
        assert!(d <= MAX_HINT, "text hint {d:?} over 30 days");
    }
    let _ = hint::parse_duration_words(&text);
    let _ = hint::until_midnight_utc(u64::from_le_bytes(data.get(..8).and_then(|b| b.try_into().ok()).unwrap_or([0; 8])));
    let _ = reset::usage_verdict(data);
    let _ = reset::result_of(data);
});
