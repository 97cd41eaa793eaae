//! Usage limits that state when they end: a subscription's window (Anthropic's
//! `anthropic-ratelimit-unified-*` headers, the Codex backend's `usage_limit_reached` body and
//! `x-codex-*-reset-after-seconds` headers), an API key's spend limit that names the day
//! access returns ("You will regain access on 2026-01-01 at 00:00 UTC") and a monthly spend
//! cap (the month's end).
//!
//! These are read by what the answer says, for every provider and class: a stated end is the
//! account's own word on when it can serve again, so it is honoured even where retry hints are
//! not (OAuth ladders), capped by `max_stated_reset_ms`.

use crate::hint::{HintSource, header, parse_instant_ms, parse_retry_after};
use std::time::Duration;

/// A usage limit with its stated end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatedReset {
    /// Time left until the limit ends (zero when the end is stated but already past or the wall
    /// clock is unknown: the limit is real, its end is not known).
    pub wait: Duration,
    /// Where the end was read.
    pub source: HintSource,
    /// Only the model's own window ran out (the account's shared windows still allow).
    pub model_only: bool,
}

/// What the body's one marker scan found for [`find`].
#[derive(Debug, Clone, Copy, Default)]
pub struct BodySays {
    /// `usage_limit_reached` occurs.
    pub usage_limit_reached: bool,
    /// "regain access on" occurs.
    pub regain_access: bool,
    /// "monthly spend limit" occurs.
    pub monthly_spend: bool,
}

/// The usage limit an answer states, if it states one.
pub fn find(headers: &[(&str, &str)], body: &str, says: BodySays, wall_now_ms: Option<u64>) -> Option<StatedReset> {
    unified(headers, wall_now_ms)
        .or_else(|| says.usage_limit_reached.then(|| codex_body(body, wall_now_ms)).flatten())
        .or_else(|| codex_headers(headers))
        .or_else(|| says.regain_access.then(|| regain_access(body, wall_now_ms)).flatten())
        .or_else(|| says.monthly_spend.then(|| monthly(wall_now_ms)))
}

fn until(at_ms: u64, wall_now_ms: Option<u64>) -> Duration {
    wall_now_ms.map_or(Duration::ZERO, |now| Duration::from_millis(at_ms.saturating_sub(now)))
}

/// Anthropic's subscription limit: `anthropic-ratelimit-unified-status: rejected`. It ends at
/// the latest reset among `anthropic-ratelimit-unified-reset` and the resets of the shared
/// windows (`-5h-`, `-7d-`) that are themselves rejected. When only a model's own window is
/// rejected (`-7d_oi-`, `-7d_opus-`: the shared windows still allow), the limit is that
/// model's. Without a reset instant, `Retry-After` says when.
fn unified(headers: &[(&str, &str)], wall_now_ms: Option<u64>) -> Option<StatedReset> {
    const PREFIX: &str = "anthropic-ratelimit-unified-";
    let rejected = header(headers, "anthropic-ratelimit-unified-status")?.eq_ignore_ascii_case("rejected");
    if !rejected {
        return None;
    }
    let (mut shared, mut model) = (false, false);
    let (mut shared_end, mut model_end): (Option<u64>, Option<u64>) = (None, None);
    for (name, value) in headers {
        let Some(window) = name
            .get(..PREFIX.len())
            .filter(|p| p.eq_ignore_ascii_case(PREFIX))
            .and_then(|_| name[PREFIX.len()..].strip_suffix("-status"))
        else {
            continue;
        };
        if window.is_empty() || window.contains("slow") || !value.trim().eq_ignore_ascii_case("rejected") {
            continue;
        }
        let at = header(headers, &format!("{PREFIX}{window}-reset")).and_then(parse_instant_ms);
        let (seen, end) =
            if matches!(window, "5h" | "7d") { (&mut shared, &mut shared_end) } else { (&mut model, &mut model_end) };
        *seen = true;
        if let Some(at) = at {
            *end = Some(end.map_or(at, |e| e.max(at)));
        }
    }
    let model_only = model && !shared;
    let end = if model_only {
        model_end
    } else {
        let overall = header(headers, "anthropic-ratelimit-unified-reset").and_then(parse_instant_ms);
        match (overall, shared_end) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    };
    let wait = match end {
        Some(at) => until(at, wall_now_ms),
        None => {
            header(headers, "retry-after").and_then(|v| parse_retry_after(v, wall_now_ms)).unwrap_or(Duration::ZERO)
        }
    };
    Some(StatedReset { wait, source: HintSource::ResetHeader, model_only })
}

/// The Codex backend's usage limit: `{"error":{"type":"usage_limit_reached", "resets_in_seconds":
/// N, "resets_at": EPOCH}}`.
fn codex_body(body: &str, wall_now_ms: Option<u64>) -> Option<StatedReset> {
    let v: serde_json::Value = serde_json::from_str(body.trim_start()).ok()?;
    let e = v.get("error").unwrap_or(&v);
    let kind = e.get("type").or_else(|| e.get("code")).and_then(|t| t.as_str())?;
    if kind != "usage_limit_reached" {
        return None;
    }
    let wait = if let Some(secs) = e.get("resets_in_seconds").and_then(|s| s.as_f64()).filter(|s| s.is_finite()) {
        Duration::from_secs_f64(secs.clamp(0.0, 366.0 * 86_400.0))
    } else if let Some(at) = e.get("resets_at").and_then(|s| s.as_u64()).and_then(|s| parse_instant_ms(&s.to_string()))
    {
        until(at, wall_now_ms)
    } else {
        Duration::ZERO
    };
    Some(StatedReset { wait, source: HintSource::BodyStructured, model_only: false })
}

/// The Codex backend's window headers: a window used to 100 % ends after its
/// `x-codex-<window>-reset-after-seconds` (the latest such, when two are full).
fn codex_headers(headers: &[(&str, &str)]) -> Option<StatedReset> {
    const WINDOWS: [(&str, &str); 2] = [
        ("x-codex-primary-used-percent", "x-codex-primary-reset-after-seconds"),
        ("x-codex-secondary-used-percent", "x-codex-secondary-reset-after-seconds"),
    ];
    let mut wait: Option<Duration> = None;
    for (used, reset) in WINDOWS {
        let used = header(headers, used).and_then(|v| v.parse::<f64>().ok());
        if !used.is_some_and(|u| u >= 100.0) {
            continue;
        }
        let after = header(headers, reset)
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| Duration::from_secs_f64(s.min(366.0 * 86_400.0)));
        if let Some(w) = after {
            wait = Some(wait.map_or(w, |b| b.max(w)));
        }
    }
    wait.map(|wait| StatedReset { wait, source: HintSource::ResetHeader, model_only: false })
}

/// Anthropic's spend limit: "You will regain access on 2026-01-01 at 00:00 UTC."
fn regain_access(body: &str, wall_now_ms: Option<u64>) -> Option<StatedReset> {
    const MARKER: &str = "regain access on ";
    let at = body.find(MARKER)? + MARKER.len();
    let rest = body.get(at..)?;
    let date = rest.get(..10)?;
    let time = rest.get(10..)?.strip_prefix(" at ").and_then(|t| t.get(..5)).unwrap_or("00:00");
    let zone_ok = rest.get(10..)?.strip_prefix(" at ").and_then(|t| t.get(5..)).is_none_or(|z| {
        let z = z.trim_start();
        z.is_empty() || z.starts_with("UTC") || z.starts_with('.') || z.starts_with(',')
    });
    if !zone_ok {
        return None;
    }
    let at = parse_instant_ms(&format!("{date}T{time}:00Z"))?;
    Some(StatedReset { wait: until(at, wall_now_ms), source: HintSource::BodyText, model_only: false })
}

/// A monthly spend cap ("This request would exceed your account's monthly spend limit"): it
/// ends with the month, UTC (unknown without a wall clock).
fn monthly(wall_now_ms: Option<u64>) -> StatedReset {
    let wait = wall_now_ms.map_or(Duration::ZERO, crate::calendar::until_next_month_utc);
    StatedReset { wait, source: HintSource::BodyText, model_only: false }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hint::parse_rfc3339_ms;

    const S: fn(u64) -> Duration = Duration::from_secs;
    /// The body markers these bodies carry (a monthly cap is named only where a test says so:
    /// it needs no more than the marker).
    const ALL: BodySays = BodySays { usage_limit_reached: true, regain_access: true, monthly_spend: false };

    /// The answers below are the corpus's (`scenarios/corpus/`), each named with its source;
    /// the classifier's corpus test runs them all, these pin the reading of each field.
    #[test]
    fn unified_takes_the_latest_rejected_window() {
        // claude-oauth-429-usage-limit-reached-epoch
        // (https://github.com/anthropics/claude-code/issues/11429): the reset 73 194 s on.
        let real =
            [("anthropic-ratelimit-unified-status", "rejected"), ("anthropic-ratelimit-unified-reset", "1762952400")];
        let now = parse_rfc3339_ms("2025-11-11T16:40:06Z");
        assert_eq!(find(&real, "", ALL, now).map(|s| (s.wait, s.model_only)), Some((S(73_194), false)));
        // The same answer with the per-window headers the 5h/7d quota reading already knows
        // (`quota.rs`): a rejected window's later reset wins, an allowed window's does not.
        let mut h = real.to_vec();
        h.extend([
            ("anthropic-ratelimit-unified-7d-status", "rejected"),
            ("anthropic-ratelimit-unified-7d-reset", "1763039600"),
            ("anthropic-ratelimit-unified-5h-status", "allowed"),
            ("anthropic-ratelimit-unified-5h-reset", "1763999999"),
        ]);
        assert_eq!(find(&h, "", ALL, now).map(|s| s.wait), Some(S(73_194 + 87_200)));
        assert_eq!(find(&[("anthropic-ratelimit-unified-status", "allowed")], "", ALL, now), None);
    }

    #[test]
    fn a_models_own_window_is_that_models_limit() {
        // claude-oauth-429-unified-7d-oi-rejected-model-scoped
        // (https://github.com/dhkts1/teamclaude-rs/issues/178).
        let h = [
            ("retry-after", "120"),
            ("anthropic-ratelimit-unified-status", "rejected"),
            ("anthropic-ratelimit-unified-5h-status", "allowed"),
            ("anthropic-ratelimit-unified-7d-status", "allowed_warning"),
            ("anthropic-ratelimit-unified-7d_oi-status", "rejected"),
        ];
        let s = find(&h, "", ALL, parse_rfc3339_ms("2026-09-04T00:00:00Z"));
        assert_eq!(s.map(|s| (s.wait, s.model_only)), Some((S(120), true)));
    }

    #[test]
    fn codex_body_and_headers() {
        // codex-429-usage-limit-reached-plus-5h-window
        // (https://github.com/earendil-works/pi/issues/4172).
        let body = r#"{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached","plan_type":"plus","resets_at":1777936568,"eligible_promo":null,"resets_in_seconds":13872}}"#;
        let now = parse_rfc3339_ms("2026-05-04T19:24:56Z");
        assert_eq!(find(&[], body, ALL, now).map(|s| s.wait), Some(S(13_872)));
        // Without resets_in_seconds, resets_at names the instant.
        let at_only = body.replace(r#","resets_in_seconds":13872"#, "");
        assert_eq!(find(&[], &at_only, ALL, now).map(|s| s.wait), Some(S(13_872)));
        let h = [
            ("x-codex-primary-used-percent", "100"),
            ("x-codex-secondary-used-percent", "80"),
            ("x-codex-primary-window-minutes", "300"),
            ("x-codex-secondary-window-minutes", "10080"),
            ("x-codex-primary-reset-after-seconds", "13873"),
            ("x-codex-secondary-reset-after-seconds", "316705"),
        ];
        assert_eq!(find(&h, "", ALL, None).map(|s| s.wait), Some(S(13_873)), "the full window's reset");
        assert_eq!(find(&h[1..], "", ALL, None), None, "a window not full states no limit");
    }

    #[test]
    fn regain_access_names_a_day() {
        // anthropic-400-org-usage-limit-with-regain-date
        // (https://github.com/anthropics/claude-code/issues/38035).
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits. You will regain access on 2026-04-01 at 00:00 UTC."},"request_id":"req_011CZLrUfBVkVHn5T6EqQaf7"}"#;
        let now = parse_rfc3339_ms("2026-03-23T23:08:46Z");
        assert_eq!(find(&[], body, ALL, now).map(|s| s.wait), Some(S(694_274)));
        assert_eq!(find(&[], "regain access on someday", ALL, now), None);
    }

    #[test]
    fn a_monthly_spend_cap_ends_with_the_month() {
        // claude-oauth-429-monthly-spend-limit (https://github.com/NousResearch/hermes-agent/issues/91091).
        let body = r#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your account's monthly spend limit. Please try again later."}}"#;
        let now = parse_rfc3339_ms("2025-06-30T12:00:00Z");
        let says = BodySays { monthly_spend: true, ..ALL };
        assert_eq!(find(&[], body, says, now).map(|s| s.wait), Some(S(12 * 3600)));
        assert_eq!(find(&[], body, ALL, now), None, "only when the scan found it");
    }
}
