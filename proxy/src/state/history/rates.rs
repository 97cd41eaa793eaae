//! Answers per provider over the last [`MINUTES`] minutes, in one-minute buckets: what the
//! dashboard's overview draws as request and error rates.

use std::collections::{BTreeMap, VecDeque};

/// How many minutes are kept.
pub const MINUTES: usize = 15;
/// At most this many providers are counted (more are the same `(other)` row); a reload may add
/// providers, but never this many.
const MAX_PROVIDERS: usize = 1024;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Bucket {
    minute: u64,
    requests: u32,
    errors: u32,
}

/// One provider's last minutes, oldest first: answers and, of them, errors (status ≥ 400).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The provider (`""`: answers no provider was named for, such as refusals).
    pub provider: String,
    /// Answers per minute, oldest first; the last is the current minute.
    pub requests: [u32; MINUTES],
    /// Error answers per minute, in the same order.
    pub errors: [u32; MINUTES],
}

/// The counters.
#[derive(Debug, Default)]
pub struct Rates {
    by_provider: BTreeMap<String, VecDeque<Bucket>>,
}

impl Rates {
    /// Counts one answer of `status` for `provider` in `minute` (minutes since the epoch).
    pub fn add(&mut self, minute: u64, provider: &str, status: u16) {
        // A provider already counted: one lookup.
        if let Some(buckets) = self.by_provider.get_mut(provider) {
            return count(buckets, minute, status);
        }
        let key = if self.by_provider.len() < MAX_PROVIDERS { provider } else { "(other)" };
        count(self.by_provider.entry(key.to_owned()).or_default(), minute, status);
    }

    /// Every provider's last [`MINUTES`] minutes up to `minute`; providers with no answers in
    /// them are left out (and forgotten).
    pub fn view(&mut self, minute: u64) -> Vec<Row> {
        let first = minute.saturating_sub(MINUTES as u64 - 1);
        self.by_provider.retain(|_, b| b.back().is_some_and(|b| b.minute >= first));
        self.by_provider
            .iter()
            .map(|(provider, buckets)| {
                let mut row = Row { provider: provider.clone(), requests: [0; MINUTES], errors: [0; MINUTES] };
                for b in buckets.iter().filter(|b| b.minute >= first && b.minute <= minute) {
                    let i = (b.minute - first) as usize;
                    row.requests[i] = b.requests;
                    row.errors[i] = b.errors;
                }
                row
            })
            .collect()
    }
}

/// Counts one answer of `status` in `minute`'s bucket, keeping the last [`MINUTES`].
fn count(buckets: &mut VecDeque<Bucket>, minute: u64, status: u16) {
    if buckets.back().is_none_or(|b| b.minute != minute) {
        buckets.push_back(Bucket { minute, ..Bucket::default() });
    }
    while buckets.len() > MINUTES {
        buckets.pop_front();
    }
    if let Some(b) = buckets.back_mut() {
        b.requests = b.requests.saturating_add(1);
        if status >= 400 {
            b.errors = b.errors.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_fill_from_the_right_and_fall_off_the_left() {
        let mut r = Rates::default();
        r.add(100, "a", 200);
        r.add(100, "a", 503);
        r.add(101, "a", 200);
        r.add(101, "b", 429);
        let v = r.view(101);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].provider, "a");
        assert_eq!(&v[0].requests[MINUTES - 2..], &[2, 1]);
        assert_eq!(&v[0].errors[MINUTES - 2..], &[1, 0]);
        assert_eq!(v[1].errors[MINUTES - 1], 1);
        // Fourteen minutes on, minute 100 is the oldest kept; fifteen on, it is gone.
        assert_eq!(r.view(114)[0].requests[0], 2);
        let later = r.view(115);
        assert_eq!(later[0].requests[0], 1);
        assert!(r.view(116).is_empty(), "providers without answers in the window are forgotten");
    }

    #[test]
    fn a_provider_answering_every_minute_keeps_fifteen_buckets() {
        let mut r = Rates::default();
        for m in 0..100 {
            r.add(m, "a", 200);
        }
        assert_eq!(r.by_provider["a"].len(), MINUTES);
        assert_eq!(r.view(99)[0].requests, [1; MINUTES]);
    }
}
