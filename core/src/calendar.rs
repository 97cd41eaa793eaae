//! When a provider's day ends: daily quotas reset at a provider's midnight, which for Google's
//! Gemini API is midnight Pacific time (with US daylight saving). Pure arithmetic on Unix
//! milliseconds; no time-zone database.

use std::time::Duration;

/// The zone a provider's daily quotas reset in, at its midnight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DailyReset {
    /// Midnight UTC.
    #[default]
    Utc,
    /// Midnight in `America/Los_Angeles`: UTC−8, or UTC−7 from the second Sunday of March
    /// (02:00 local) to the first Sunday of November (02:00 local).
    UsPacific,
    /// Midnight at a fixed offset from UTC, in minutes east.
    Offset(i32),
}

const DAY_MS: i64 = 86_400_000;
const HOUR_MS: i64 = 3_600_000;

/// Days since 1970-01-01 of a civil date (proleptic Gregorian; Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date (year, month, day) of a day count since 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The time from `wall_ms` (Unix ms) to the first instant of the next month, UTC (monthly caps
/// reset then).
pub fn until_next_month_utc(wall_ms: u64) -> Duration {
    let now = i64::try_from(wall_ms).unwrap_or(i64::MAX);
    let (y, m, _) = civil_from_days(now.div_euclid(86_400_000));
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    let next = days_from_civil(ny, nm, 1).saturating_mul(86_400_000);
    Duration::from_millis(u64::try_from(next.saturating_sub(now)).unwrap_or(0))
}

/// The civil year of a day count.
fn year_of(days: i64) -> i64 {
    civil_from_days(days).0
}

/// The day count of the `n`-th Sunday (1-based) of month `m` in year `y`.
fn nth_sunday(y: i64, m: i64, n: i64) -> i64 {
    let first = days_from_civil(y, m, 1);
    // 1970-01-01 was a Thursday: weekday 0 = Sunday.
    let weekday = (first + 4).rem_euclid(7);
    first + (7 - weekday) % 7 + 7 * (n - 1)
}

/// Pacific time's offset from UTC at `utc_ms`, in milliseconds (negative: west).
fn pacific_offset_ms(utc_ms: i64) -> i64 {
    let y = year_of(utc_ms.div_euclid(DAY_MS));
    // 02:00 PST is 10:00 UTC; 02:00 PDT is 09:00 UTC.
    let starts = nth_sunday(y, 3, 2) * DAY_MS + 10 * HOUR_MS;
    let ends = nth_sunday(y, 11, 1) * DAY_MS + 9 * HOUR_MS;
    if (starts..ends).contains(&utc_ms) { -7 * HOUR_MS } else { -8 * HOUR_MS }
}

impl DailyReset {
    /// Parses a setting: `UTC`, `America/Los_Angeles` (or `US/Pacific`), or `UTC+HH:MM` /
    /// `UTC-HH:MM`.
    pub fn parse(s: &str) -> Option<DailyReset> {
        match s.trim() {
            "UTC" | "utc" | "Etc/UTC" => return Some(DailyReset::Utc),
            "America/Los_Angeles" | "US/Pacific" | "pacific" => return Some(DailyReset::UsPacific),
            _ => {}
        }
        let rest = s.trim().strip_prefix("UTC")?;
        let (sign, rest) = match rest.as_bytes().first()? {
            b'+' => (1, &rest[1..]),
            b'-' => (-1, &rest[1..]),
            _ => return None,
        };
        let (h, m) = rest.split_once(':').unwrap_or((rest, "0"));
        let (h, m): (i32, i32) = (h.parse().ok()?, m.parse().ok()?);
        ((0..=14).contains(&h) && (0..60).contains(&m)).then_some(DailyReset::Offset(sign * (h * 60 + m)))
    }

    /// The zone's offset from UTC at `utc_ms`.
    fn offset_ms(self, utc_ms: i64) -> i64 {
        match self {
            DailyReset::Utc => 0,
            DailyReset::UsPacific => pacific_offset_ms(utc_ms),
            DailyReset::Offset(min) => i64::from(min) * 60_000,
        }
    }

    /// Time from `wall_ms` (Unix milliseconds) to the zone's next midnight (never zero: at
    /// midnight itself, a whole day).
    pub fn until_midnight(self, wall_ms: u64) -> Duration {
        let utc = i64::try_from(wall_ms).unwrap_or(i64::MAX / 2);
        let local = utc + self.offset_ms(utc);
        let mut left = DAY_MS - local.rem_euclid(DAY_MS);
        // A day with a daylight-saving change is 23 or 25 hours long: the local midnight ahead
        // is at the offset in force then.
        let at = utc + left;
        left += self.offset_ms(utc) - self.offset_ms(at);
        Duration::from_millis(u64::try_from(left.max(1)).unwrap_or(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unix ms of a UTC date and time.
    fn utc(y: i64, m: i64, d: i64, h: i64, min: i64) -> u64 {
        (days_from_civil(y, m, d) * DAY_MS + h * HOUR_MS + min * 60_000) as u64
    }

    fn hours(d: Duration) -> f64 {
        d.as_secs_f64() / 3600.0
    }

    #[test]
    fn pacific_midnight_in_winter_and_summer() {
        // 2026-01-15 12:00 UTC is 04:00 PST: midnight PST is 08:00 UTC the next day, 20 h on.
        assert_eq!(hours(DailyReset::UsPacific.until_midnight(utc(2026, 1, 15, 12, 0))), 20.0);
        // 2026-07-15 12:00 UTC is 05:00 PDT: midnight PDT is 07:00 UTC, 19 h on.
        assert_eq!(hours(DailyReset::UsPacific.until_midnight(utc(2026, 7, 15, 12, 0))), 19.0);
        // Just before midnight PST (07:59 UTC) a minute is left; at it, a whole day.
        assert_eq!(DailyReset::UsPacific.until_midnight(utc(2026, 1, 16, 7, 59)), Duration::from_secs(60));
        assert_eq!(hours(DailyReset::UsPacific.until_midnight(utc(2026, 1, 16, 8, 0))), 24.0);
    }

    #[test]
    fn daylight_saving_days_are_23_and_25_hours_long() {
        // 2026: DST starts Sunday 8 March, ends Sunday 1 November.
        assert_eq!(nth_sunday(2026, 3, 2), days_from_civil(2026, 3, 8));
        assert_eq!(nth_sunday(2026, 11, 1), days_from_civil(2026, 11, 1));
        // Midnight PST starting 8 March is 08:00 UTC; the next midnight is PDT, 07:00 UTC on 9 March.
        assert_eq!(hours(DailyReset::UsPacific.until_midnight(utc(2026, 3, 8, 8, 0))), 23.0);
        // Midnight PDT starting 1 November is 07:00 UTC; the next is PST, 08:00 UTC on 2 November.
        assert_eq!(hours(DailyReset::UsPacific.until_midnight(utc(2026, 11, 1, 7, 0))), 25.0);
    }

    #[test]
    fn utc_and_fixed_offsets() {
        assert_eq!(hours(DailyReset::Utc.until_midnight(utc(2026, 1, 15, 18, 0))), 6.0);
        let india = DailyReset::parse("UTC+05:30").expect("offset");
        assert_eq!(india, DailyReset::Offset(330));
        // 18:00 UTC is 23:30 IST: half an hour to midnight.
        assert_eq!(india.until_midnight(utc(2026, 1, 15, 18, 0)), Duration::from_secs(1800));
        assert_eq!(DailyReset::parse("America/Los_Angeles"), Some(DailyReset::UsPacific));
        assert_eq!(DailyReset::parse("UTC-08:00"), Some(DailyReset::Offset(-480)));
        for bad in ["Europe/Prague", "UTC+15:00", "UTC+1:60", "UTC5", ""] {
            assert_eq!(DailyReset::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn civil_from_days_inverts_days_from_civil() {
        for (y, m, d) in [(1970, 1, 1), (2000, 2, 29), (2026, 12, 31), (2027, 1, 1), (2100, 3, 1)] {
            assert_eq!(civil_from_days(days_from_civil(y, m, d)), (y, m, d), "{y}-{m}-{d}");
        }
    }
}
