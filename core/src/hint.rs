//! Retry hints: `Retry-After`, rate-limit reset headers and reset text in error bodies (M3).
//!
//! Pure parsing. Hints that name a wall-clock instant (HTTP dates, epoch values, RFC 3339
//! timestamps) need the caller's wall clock, passed in as Unix milliseconds; without it only
//! relative hints are understood.

use crate::types::trim;
use std::time::Duration;

/// The longest hint ever honoured: 30 days.
pub const MAX_HINT: Duration = Duration::from_secs(30 * 24 * 3600);

/// Where a retry hint came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HintSource {
    /// The `Retry-After` header.
    RetryAfter,
    /// A rate-limit reset header (`x-ratelimit-reset*`, `anthropic-ratelimit-*-reset`).
    ResetHeader,
    /// Structured retry information in a JSON body (Google RPC `RetryInfo`, `retry_after_ms`).
    BodyStructured,
    /// Reset text in the body ("please retry in 30s", "resets in 2 hours").
    BodyText,
}

/// A parsed hint: how long to wait, and where that came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryHint {
    /// How long to wait (non-zero, at most [`MAX_HINT`]).
    pub wait: Duration,
    /// Where it came from.
    pub source: HintSource,
}

/// Case-insensitive header lookup over name/value pairs.
pub fn header<'a>(headers: &[(&str, &'a str)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| trim(v))
}

/// Headers first (Retry-After, then the longest reset header), then the body.
pub fn detect(headers: &[(&str, &str)], body: &str, wall_now_ms: Option<u64>) -> Option<RetryHint> {
    from_headers(headers, wall_now_ms).or_else(|| from_body(body, wall_now_ms))
}

/// `Retry-After` (seconds or HTTP date), else the longest rate-limit reset header.
pub fn from_headers(headers: &[(&str, &str)], wall_now_ms: Option<u64>) -> Option<RetryHint> {
    if let Some(v) = header(headers, "retry-after")
        && let Some(wait) = parse_retry_after(v, wall_now_ms)
    {
        return Some(RetryHint { wait, source: HintSource::RetryAfter });
    }
    let mut best: Option<Duration> = None;
    for (name, value) in headers {
        let n = name.to_ascii_lowercase();
        let wait = if n == "x-ratelimit-reset" {
            parse_epoch(value.trim(), wall_now_ms)
        } else if n.starts_with("x-ratelimit-reset-") {
            parse_go_duration(value.trim())
        } else if n.starts_with("anthropic-ratelimit-") && n.ends_with("-reset") && !n.contains("-slow-") {
            // (The low-priority lane's own budget reset says nothing about the account's window.)
            parse_instant_ms(value).and_then(|t| until(t, wall_now_ms))
        } else {
            None
        };
        if let Some(w) = wait.filter(|w| !w.is_zero()) {
            best = Some(best.map_or(w, |b| b.max(w)));
        }
    }
    best.map(|w| RetryHint { wait: w.min(MAX_HINT), source: HintSource::ResetHeader })
}

/// Parses `Retry-After`: delay-seconds or an IMF-fixdate.
pub fn parse_retry_after(v: &str, wall_now_ms: Option<u64>) -> Option<Duration> {
    let v = trim(v);
    if let Ok(secs) = v.parse::<u64>() {
        return nonzero(Duration::from_secs(secs));
    }
    if let Ok(secs) = v.parse::<f64>() {
        if secs.is_finite() && secs > 0.0 {
            return nonzero(Duration::from_secs_f64(secs.min(MAX_HINT.as_secs_f64())));
        }
        return None;
    }
    parse_http_date_ms(v).and_then(|t| until(t, wall_now_ms))
}

/// `x-ratelimit-reset`: epoch seconds, or epoch milliseconds when above 1e10.
fn parse_epoch(v: &str, wall_now_ms: Option<u64>) -> Option<Duration> {
    until(epoch_ms(v.parse().ok()?)?, wall_now_ms)
}

/// Epoch seconds, or epoch milliseconds when above 1e10, as Unix ms.
fn epoch_ms(n: u64) -> Option<u64> {
    if n > 10_000_000_000 { Some(n) } else { n.checked_mul(1000) }
}

/// An instant written as epoch seconds, epoch milliseconds (above 1e10) or RFC 3339, as Unix
/// ms (the reset headers and bodies that name a moment rather than a wait).
pub fn parse_instant_ms(v: &str) -> Option<u64> {
    let v = v.trim();
    match v.parse::<u64>() {
        Ok(n) => epoch_ms(n),
        Err(_) => parse_rfc3339_ms(v),
    }
}

/// The time from `wall_ms` (Unix ms) to the next midnight UTC (a full day at midnight).
pub fn until_midnight_utc(wall_ms: u64) -> Duration {
    const DAY_MS: u64 = 86_400_000;
    Duration::from_millis(DAY_MS - wall_ms % DAY_MS)
}

fn until(at_ms: u64, wall_now_ms: Option<u64>) -> Option<Duration> {
    let now = wall_now_ms?;
    nonzero(Duration::from_millis(at_ms.saturating_sub(now)))
}

fn nonzero(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then(|| d.min(MAX_HINT))
}

/// Reset hints in an error body: structured JSON first, then text.
pub fn from_body(body: &str, wall_now_ms: Option<u64>) -> Option<RetryHint> {
    if body.is_empty() {
        return None;
    }
    if let Some(wait) = from_json_body(body, wall_now_ms) {
        return Some(RetryHint { wait, source: HintSource::BodyStructured });
    }
    from_text(body, wall_now_ms).map(|wait| RetryHint { wait, source: HintSource::BodyText })
}

fn from_json_body(body: &str, wall_now_ms: Option<u64>) -> Option<Duration> {
    let v: serde_json::Value = serde_json::from_str(body.trim_start()).ok()?;
    let err = v.get("error").unwrap_or(&v);
    for holder in [err, &v] {
        if let Some(details) = holder.get("details").and_then(|d| d.as_array()) {
            for d in details {
                let is_retry = d.get("@type").and_then(|t| t.as_str()).is_some_and(|t| t.contains("RetryInfo"));
                if let (true, Some(delay)) = (is_retry, d.get("retryDelay").and_then(|x| x.as_str()))
                    && let Some(w) = parse_delay(delay)
                {
                    return nonzero(w);
                }
            }
        }
    }
    for holder in [err, &v] {
        for key in ["retryAfter", "retry_after"] {
            if let Some(s) = holder.get(key).and_then(|x| x.as_str())
                && let Some(w) = parse_rfc3339_ms(s).and_then(|t| until(t, wall_now_ms))
            {
                return Some(w);
            }
        }
        for key in ["retry_after_ms", "retryAfterMs"] {
            if let Some(ms) = holder.get(key).and_then(|x| x.as_f64())
                && ms.is_finite()
                && ms > 0.0
            {
                return nonzero(Duration::from_millis(ms.min(MAX_HINT.as_millis() as f64) as u64));
            }
        }
    }
    None
}

/// Reset phrases: "please retry in 12.5s", "try again in 30 seconds", "reset after 1h2m3s",
/// "resets in 2 days", and "try again at / reset at <RFC 3339>".
pub fn from_text(text: &str, wall_now_ms: Option<u64>) -> Option<Duration> {
    let lower = text.to_lowercase();
    for marker in
        ["please retry in", "try again in", "retry in", "will reset after", "reset after", "resets in", "reset in"]
    {
        if let Some(pos) = lower.find(marker)
            && let Some(w) = parse_duration_words(&lower[pos + marker.len()..])
        {
            return nonzero(w);
        }
    }
    for marker in ["try again at", "wait until", "resets at", "reset at", "available at", "retry after"] {
        if let Some(pos) = lower.find(marker) {
            let rest = lower[pos + marker.len()..].trim_start();
            let token: String = rest.chars().take_while(|c| !c.is_whitespace() && *c != ',' && *c != '"').collect();
            if let Some(w) = parse_rfc3339_ms(&token.to_uppercase()).and_then(|t| until(t, wall_now_ms)) {
                return Some(w);
            }
            if let Some(w) = parse_duration_words(rest) {
                return nonzero(w);
            }
        }
    }
    None
}

/// Google's `retryDelay` grammar: `Nms`, `N(.N)s`, `Nm`, `Nh`, or a bare number of seconds.
pub fn parse_delay(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, unit) = split_number(s)?;
    let secs = match unit.trim() {
        "ms" => num / 1000.0,
        "" | "s" => num,
        "m" => num * 60.0,
        "h" => num * 3600.0,
        _ => return None,
    };
    finite_secs(secs)
}

/// OpenAI's reset headers: Go durations such as `1s`, `6m0s`, `20ms`, `1h2m3.5s`.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let mut rest = s.trim();
    let mut total = 0.0;
    let mut any = false;
    while !rest.is_empty() {
        let (num, after) = split_number(rest)?;
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let unit = &after[..unit_len];
        total += num
            * match unit {
                "ms" => 0.001,
                "s" | "" => 1.0,
                "m" => 60.0,
                "h" => 3600.0,
                _ => return None,
            };
        any = true;
        rest = &after[unit_len..];
    }
    if any { finite_secs(total) } else { None }
}

/// Reads a duration at the start of free text: `1h2m3s`, `12.5s`, `30 seconds`, `2 days`,
/// `5 minutes and 3 seconds`. Stops at the first word that is not part of it.
pub fn parse_duration_words(text: &str) -> Option<Duration> {
    let mut rest = text.trim_start();
    let mut total = 0.0;
    let mut any = false;
    while let Some((num, after)) = split_number(rest) {
        let after = after.trim_start();
        let unit_len = after.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(after.len());
        let unit = &after[..unit_len];
        let mult = match unit {
            "ms" | "millisecond" | "milliseconds" => 0.001,
            "s" | "sec" | "secs" | "second" | "seconds" => 1.0,
            "m" | "min" | "mins" | "minute" | "minutes" => 60.0,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3600.0,
            "d" | "day" | "days" => 86_400.0,
            _ => {
                // A compact form such as `1h2m3s` has units without separators.
                if let Some(d) = parse_go_duration(&rest[..rest.find(char::is_whitespace).unwrap_or(rest.len())]) {
                    total += d.as_secs_f64();
                    any = true;
                }
                break;
            }
        };
        total += num * mult;
        any = true;
        rest = after[unit_len..].trim_start();
        rest = rest.strip_prefix("and").unwrap_or(rest).trim_start_matches([',', ' ']);
    }
    if any { finite_secs(total) } else { None }
}

fn split_number(s: &str) -> Option<(f64, &str)> {
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    if end == 0 {
        return None;
    }
    let num: f64 = s[..end].parse().ok()?;
    Some((num, &s[end..]))
}

fn finite_secs(secs: f64) -> Option<Duration> {
    if secs.is_finite() && secs > 0.0 { Some(Duration::from_secs_f64(secs.min(MAX_HINT.as_secs_f64()))) } else { None }
}

#[allow(clippy::too_many_arguments)] // one calendar field each, as the formats spell them
fn to_unix_ms(y: i64, mo: u32, d: u32, h: u32, mi: u32, s: u32, frac_ms: u32, offset_s: i64) -> Option<u64> {
    // Years past 9999 are nobody's reset time (and would overflow the day count).
    if !(1970..=9999).contains(&y) || !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let secs = crate::calendar::days_from_civil(y, i64::from(mo), i64::from(d)) * 86_400
        + i64::from(h) * 3600
        + i64::from(mi) * 60
        + i64::from(s)
        - offset_s;
    u64::try_from(secs).ok()?.checked_mul(1000)?.checked_add(u64::from(frac_ms))
}

/// Parses an RFC 3339 timestamp (`2026-11-30T16:00:00Z`, `…00.250+01:00`) to Unix ms.
pub fn parse_rfc3339_ms(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !(b[10] == b'T' || b[10] == b't' || b[10] == b' ') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<u32>().ok();
    let (y, mo, d, h, mi, sec) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    let mut i = 19;
    let mut frac_ms = 0;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let digits = s.get(start..i)?;
        let padded: String = digits.chars().chain(std::iter::repeat('0')).take(3).collect();
        frac_ms = padded.parse().ok()?;
    }
    let offset_s = match b.get(i)? {
        b'Z' | b'z' => 0,
        sign @ (b'+' | b'-') => {
            let oh = num(i + 1..i + 3)? as i64;
            let om = num(i + 4..i + 6)? as i64;
            let o = oh * 3600 + om * 60;
            if *sign == b'-' { -o } else { o }
        }
        _ => return None,
    };
    to_unix_ms(i64::from(y), mo, d, h, mi, sec, frac_ms, offset_s)
}

/// Parses an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) to Unix ms.
pub fn parse_http_date_ms(s: &str) -> Option<u64> {
    let parts: Vec<&str> = s.split_whitespace().collect();
    if parts.len() != 6 || !parts[5].eq_ignore_ascii_case("GMT") {
        return None;
    }
    let d: u32 = parts[1].parse().ok()?;
    const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
    let mo = MONTHS.iter().position(|m| parts[2].eq_ignore_ascii_case(m))? as u32 + 1;
    let y: i64 = parts[3].parse().ok()?;
    let hms: Vec<u32> = parts[4].split(':').map(|x| x.parse().ok()).collect::<Option<_>>()?;
    if hms.len() != 3 {
        return None;
    }
    to_unix_ms(y, mo, d, hms[0], hms[1], hms[2], 0, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_780_000_000_000;

    /// Found by the `retry_hints` fuzz target: a year of 16 digits overflowed the day count
    /// (a panic in debug builds, a wrapped instant in release).
    #[test]
    fn absurd_years_are_no_date() {
        assert_eq!(parse_http_date_ms("Wed, 1 Oct 2222222222222202760 07:28:00 GMT"), None);
        assert_eq!(parse_http_date_ms("Wed, 21 Oct 20262020262026 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("Wed, 21 Oct 20262020262026 07:28:00 GMT", Some(NOW)), None);
        assert_eq!(parse_http_date_ms("Fri, 31 Dec 9999 23:59:59 GMT"), Some(253_402_300_799_000));
        assert_eq!(parse_http_date_ms("Sat, 01 Jan 10000 00:00:00 GMT"), None);
        assert_eq!(parse_http_date_ms("Wed, 31 Dec 1969 23:59:59 GMT"), None);
    }

    #[test]
    fn retry_after_seconds_and_date() {
        assert_eq!(parse_retry_after("120", None), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after("0", None), None);
        assert_eq!(parse_http_date_ms("Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777_000));
        let at = parse_http_date_ms("Sun, 06 Nov 1994 08:50:37 GMT").map(|t| t - 784_111_777_000);
        assert_eq!(at, Some(60_000));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:50:37 GMT", Some(784_111_777_000)),
            Some(Duration::from_secs(60))
        );
        assert_eq!(parse_retry_after("garbage", Some(NOW)), None);
    }

    #[test]
    fn x_ratelimit_reset_epoch_seconds_and_ms() {
        // §12.15 case 8: reset header at now + 90 s, in seconds.
        let secs = ((NOW / 1000) + 90).to_string();
        let h = from_headers(&[("X-RateLimit-Reset", &secs)], Some(NOW)).map(|h| h.wait);
        assert_eq!(h, Some(Duration::from_secs(90)));
        let ms = (NOW + 5_000).to_string();
        let h = from_headers(&[("x-ratelimit-reset", &ms)], Some(NOW)).map(|h| h.wait);
        assert_eq!(h, Some(Duration::from_secs(5)));
    }

    #[test]
    fn openai_and_anthropic_reset_headers_take_the_longest() {
        let h = from_headers(&[("x-ratelimit-reset-requests", "1s"), ("x-ratelimit-reset-tokens", "6m0s")], None);
        assert_eq!(h.map(|h| h.wait), Some(Duration::from_secs(360)));
        let h = from_headers(
            &[("anthropic-ratelimit-requests-reset", "2026-05-28T20:27:00Z")],
            parse_rfc3339_ms("2026-05-28T20:26:00Z"),
        );
        assert_eq!(h.map(|h| (h.wait, h.source)), Some((Duration::from_secs(60), HintSource::ResetHeader)));
    }

    #[test]
    fn retry_after_wins_over_reset_headers() {
        let h = from_headers(&[("x-ratelimit-reset-tokens", "10m"), ("Retry-After", "7")], None);
        assert_eq!(h.map(|h| (h.wait, h.source)), Some((Duration::from_secs(7), HintSource::RetryAfter)));
    }

    #[test]
    fn body_hints() {
        let google =
            r#"{"error":{"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"30.5s"}]}}"#;
        assert_eq!(from_body(google, None).map(|h| h.wait), Some(Duration::from_millis(30_500)));
        assert_eq!(from_body(r#"{"retry_after_ms": 1500}"#, None).map(|h| h.wait), Some(Duration::from_millis(1500)));
        assert_eq!(from_text("Please retry in 12.5s.", None), Some(Duration::from_millis(12_500)));
        assert_eq!(from_text("Your quota will reset after 1h2m3s", None), Some(Duration::from_secs(3723)));
        assert_eq!(
            from_text("monthly usage limit reached, resets in 2 days", None),
            Some(Duration::from_secs(172_800))
        );
        assert_eq!(from_text("try again in 5 minutes and 3 seconds", None), Some(Duration::from_secs(303)));
        assert_eq!(
            from_text("Try again at 2026-05-28T20:27:00Z", parse_rfc3339_ms("2026-05-28T20:26:30Z")),
            Some(Duration::from_secs(30))
        );
        assert_eq!(from_text("no hint here", None), None);
    }

    #[test]
    fn hints_are_capped_at_thirty_days() {
        assert_eq!(parse_retry_after("999999999", None), Some(MAX_HINT));
        assert_eq!(from_text("resets in 400 days", None), Some(MAX_HINT));
    }

    #[test]
    fn delay_grammar() {
        assert_eq!(parse_delay("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_delay("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_delay("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_delay("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_delay("7x"), None);
    }
}
