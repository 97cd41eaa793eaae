//! Quota-aware orders from what upstreams report (rate-limit and reset headers, kept per
//! connection): reset-aware, reset-window, headroom.

use super::item::{Item, ord_f64, sorted_by};
use std::time::Duration;

/// Below this share of remaining quota an option counts as nearly exhausted (reset-aware's
/// exhaustion guard, 10% as in the reference gateway).
pub const EXHAUSTION_GUARD: f64 = 0.10;

/// Headroom assumed for an option that never reported one: between full and empty, so that
/// a reported healthy quota beats the unknown and the unknown beats a drained one.
pub const UNKNOWN_HEADROOM: f64 = 0.5;

/// Windows within 5% of each other rank as equal (the tie band); the headroom then decides.
/// An option that never reported a window ranks first, so that every option gets to report
/// once (a report that passed its reset reads as unknown too: a fresh quota).
fn window_band(w: Option<Duration>) -> i64 {
    match w {
        Some(w) => ((w.as_millis().max(1) as f64).ln() / 1.05f64.ln()).floor() as i64,
        None => i64::MIN,
    }
}

/// The shortest quota window first (its quota comes back soonest, so spending it costs the
/// least), options under the exhaustion guard last; within the tie band, more headroom first.
pub fn reset_aware(items: &[Item]) -> Vec<usize> {
    sorted_by(items, |i| {
        let guarded = i.quota.remaining.is_some_and(|r| r < EXHAUSTION_GUARD);
        let headroom = i.quota.remaining.unwrap_or(UNKNOWN_HEADROOM);
        (guarded, window_band(i.quota.window), -ord_f64(headroom))
    })
}

/// The soonest reset first. An option that never reported a reset (or whose reset passed: its
/// quota is fresh) counts as resetting now, so every option gets to report once.
pub fn reset_window(items: &[Item]) -> Vec<usize> {
    sorted_by(items, |i| i.quota.resets_in.map_or(0, |d| d.as_millis()))
}

/// The most remaining quota first.
pub fn headroom(items: &[Item]) -> Vec<usize> {
    sorted_by(items, |i| -ord_f64(i.quota.remaining.unwrap_or(UNKNOWN_HEADROOM)))
}
