//! M6 upkeep: how many locks are remembered, and the sweep and eviction that keep that number
//! bounded without a pass over every lock for each new one.

use super::{EVICTION_CAP, Lock, LockoutConfig, ModelLockouts};
use std::time::Instant;

impl ModelLockouts {
    /// Number of remembered locks (active or expired but not yet swept).
    pub(super) fn len(&self) -> usize {
        self.count
    }

    /// A new lock, ending at `until`, joins the count.
    pub(super) fn added(&mut self, until: Instant) {
        self.count += 1;
        self.ends_from = Some(self.ends_from.map_or(until, |e| e.min(until)));
    }

    /// Every lock.
    pub(super) fn all(&self) -> impl Iterator<Item = &Lock> {
        self.locks.values().flat_map(|b| b.values().flatten())
    }

    /// Keeps the locks `keep` accepts; recounts and recomputes the earliest end.
    pub(super) fn retain_all(&mut self, mut keep: impl FnMut(&Lock) -> bool) {
        for bucket in self.locks.values_mut() {
            for locks in bucket.values_mut() {
                locks.retain(&mut keep);
            }
            bucket.retain(|_, locks| !locks.is_empty());
        }
        self.locks.retain(|_, b| !b.is_empty());
        self.count = self.all().count();
        self.ends_from = self.all().map(|l| l.until).min();
    }

    /// Drops expired locks whose escalation window has also passed.
    pub fn sweep(&mut self, now: Instant, cfg: &LockoutConfig) {
        if self.ends_from.is_none_or(|e| now < e) {
            return; // nothing has expired
        }
        self.retain_all(|l| {
            now < l.until || now.saturating_duration_since(l.last_failure_at) <= cfg.escalation_window + l.last_cooldown
        });
        self.evict_at = 2 * self.count;
    }

    /// The earliest lock expiry (tests).
    #[cfg(test)]
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        self.all().map(|l| l.until).filter(|u| *u > now).min()
    }

    /// Expired locks go first (oldest first) once more than [`EVICTION_CAP`] are remembered;
    /// active ones are never evicted. While none can have expired, nothing is looked at; with
    /// more active locks than the cap, a pass comes only once their number has doubled.
    pub(super) fn evict(&mut self, now: Instant) {
        let total = self.len();
        if total <= self.evict_at.max(EVICTION_CAP) || self.ends_from.is_none_or(|e| now < e) {
            return;
        }
        let mut expired: Vec<Instant> = self.all().filter(|l| l.until <= now).map(|l| l.until).collect();
        self.evict_at = 2 * (total - expired.len());
        expired.sort();
        let Some(&cutoff) = expired.get((total - EVICTION_CAP).min(expired.len()).saturating_sub(1)) else {
            self.ends_from = self.all().map(|l| l.until).min();
            return;
        };
        // The cutoff is an expired lock's end, so every active lock ends after it.
        self.retain_all(|l| l.until > cutoff);
    }
}
