//! M6: model lockout.
//!
//! Locks one model (or its quota family) on one connection. Scope by status: 402/403/404/429
//! lock the quota family (404: the model itself), anything else the exact model; an explicit
//! scope always wins. Failures inside the escalation window raise the count and lengthen the
//! lock; each healthy response halves the count, and at 0 the lockout is gone.

use crate::settings::ModelLockoutSettings;
use crate::types::{Reason, Scope, has_ascii_upper, same_text, scaled, trim};
use rustc_hash::FxBuildHasher;
use std::borrow::Cow;
use std::time::{Duration, Instant};

/// Typed lockout settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockoutConfig {
    /// Whether lockouts are recorded at all.
    pub enabled: bool,
    /// Statuses that lock.
    pub error_codes: Vec<u16>,
    /// First lock.
    pub base_cooldown: Duration,
    /// Longest lock (except an upstream's own reset).
    pub max_cooldown: Duration,
    /// Escalation steps.
    pub max_backoff_steps: u32,
    /// Whether repeated failures double the lock.
    pub use_exponential_backoff: bool,
    /// Failures within this window (plus the last lock) escalate.
    pub escalation_window: Duration,
}

impl LockoutConfig {
    /// From validated settings.
    pub fn from_settings(s: &ModelLockoutSettings) -> Self {
        LockoutConfig {
            enabled: s.enabled,
            error_codes: s.error_codes.iter().filter_map(|c| u16::try_from(*c).ok()).collect(),
            base_cooldown: Duration::from_millis(s.base_cooldown_ms.max(0) as u64),
            max_cooldown: Duration::from_millis(s.max_cooldown_ms.max(0) as u64),
            max_backoff_steps: s.max_backoff_steps.clamp(0, 32) as u32,
            use_exponential_backoff: s.use_exponential_backoff,
            escalation_window: Duration::from_millis(1_800_000),
        }
    }
}

/// What a lock covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LockScope {
    /// Only this exact model.
    Exact,
    /// The model's quota family (models sharing one quota).
    QuotaFamily,
}

/// `explicit ?? (402/403/404/429 → quota family, else exact)`.
pub fn resolve_scope(status: u16, explicit: Option<LockScope>) -> LockScope {
    explicit.unwrap_or(if matches!(status, 402 | 403 | 404 | 429) { LockScope::QuotaFamily } else { LockScope::Exact })
}

/// Maps a rule scope to a lock scope: a model-scoped rule locks the exact model.
pub fn rule_lock_scope(scope: Option<Scope>) -> Option<LockScope> {
    match scope {
        Some(Scope::Model) => Some(LockScope::Exact),
        _ => None,
    }
}

/// One lock: what it covers on its connection, and its timer and count.
#[derive(Debug, Clone)]
struct Lock {
    provider: String,
    /// The family name, or the model for not-found and exact locks (trimmed, ASCII lower-case:
    /// the key it is filed under).
    subject: String,
    scope: LockScope,
    reason: Reason,
    until: Instant,
    failure_count: u32,
    last_failure_at: Instant,
    last_cooldown: Duration,
    model: String,
}

impl Lock {
    fn is(&self, provider: &str, subject: &str, scope: LockScope) -> bool {
        self.scope == scope && same_text(&self.provider, provider) && same_key(&self.subject, subject)
    }

    /// Whether this lock covers `model` (of `family`): its family key, its own not-found key
    /// (a 404 locks the model itself at family scope), or its exact key.
    fn covers(&self, provider: &str, model: &str, family: Option<&str>) -> bool {
        self.provider == provider
            && (same_key(&self.subject, trim(model))
                || (self.scope == LockScope::QuotaFamily && family.is_some_and(|f| same_key(&self.subject, trim(f)))))
    }
}

/// A failure to record.
#[derive(Debug, Clone, Copy)]
pub struct LockRequest<'a> {
    /// Provider id.
    pub provider: &'a str,
    /// Connection id.
    pub connection: &'a str,
    /// The model requested.
    pub model: &'a str,
    /// The model's quota family, when the provider declares one (defaults to the model).
    pub family: Option<&'a str>,
    /// Why.
    pub reason: Reason,
    /// The (restated) upstream status.
    pub status: u16,
    /// An explicit scope.
    pub scope: Option<LockScope>,
    /// A fixed cooldown (a rule's, or the upstream's reset).
    pub exact_cooldown: Option<Duration>,
    /// Whether `exact_cooldown` is the upstream's own reset (not capped).
    pub exact_is_upstream_reset: bool,
}

/// One active lockout, for listings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockoutEntry {
    /// Provider id.
    pub provider: String,
    /// Connection id.
    pub connection: String,
    /// The model (bare name).
    pub model: String,
    /// Family or exact.
    pub scope: LockScope,
    /// The quota family it locks (every model of it on this connection), when it locks one.
    pub family: Option<String>,
    /// Why.
    pub reason: Reason,
    /// When it ends.
    pub until: Instant,
    /// Escalation count.
    pub failure_count: u32,
}

/// Cap on remembered lock entries; expired ones go first, active ones never.
pub const EVICTION_CAP: usize = 1000;

type Map<V> = hashbrown::HashMap<String, V, FxBuildHasher>;

/// One connection's locks, by subject, so that a lookup costs the same with one lock on the
/// connection or a hundred thousand.
type Bucket = Map<Vec<Lock>>;

/// Whether `subject` is filed under `key` (a lock's subject, already lower-case): compared
/// as is first, since model names nearly always are lower-case.
#[inline]
fn same_key(key: &str, subject: &str) -> bool {
    same_text(key, subject) || key.eq_ignore_ascii_case(subject)
}

/// The key a model or family is filed under: trimmed, ASCII lower-case (borrowed when it
/// already is, as model names nearly always are).
#[inline]
fn key(s: &str) -> Cow<'_, str> {
    let s = trim(s);
    if has_ascii_upper(s) { Cow::Owned(s.to_ascii_lowercase()) } else { Cow::Borrowed(s) }
}

/// All model lockouts (in memory only), indexed by connection and then by subject, so that a
/// lookup never allocates and never scans.
#[derive(Debug, Clone, Default)]
pub struct ModelLockouts {
    locks: Map<Bucket>,
    /// Locks remembered, active or expired.
    count: usize,
    /// No lock ends later than this (a bound, not lowered when locks go): once it has passed,
    /// nothing is locked and a lookup needs no search.
    ends_by: Option<Instant>,
    /// No lock ends earlier than this (a bound, raised only by a full pass): until it has
    /// passed, nothing has expired and eviction has nothing to look for.
    ends_from: Option<Instant>,
    /// Eviction looks again only past this many locks (twice those active at its last pass,
    /// at least the cap), so that with far more active locks than the cap each new lock does
    /// not cost a pass over all of them: a pass every so many new locks, O(1) per lock.
    evict_at: usize,
}

impl ModelLockouts {
    /// No lockouts.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a failure; returns the time left on the lock now in force. Keeps the longer lock
    /// when one exists (its time left is returned then, not the shorter one this failure asked for).
    pub fn record_failure(&mut self, now: Instant, cfg: &LockoutConfig, req: &LockRequest<'_>) -> Duration {
        let scope = resolve_scope(req.status, req.scope);
        let subject = match (scope, req.family) {
            (LockScope::QuotaFamily, Some(f)) if req.status != 404 => trim(f),
            _ => trim(req.model),
        };
        let bucket = self.locks.entry_ref(req.connection).or_default();
        let locks = bucket.entry_ref(key(subject).as_ref()).or_default();
        let pos = locks.iter().position(|l| l.is(req.provider, subject, scope));
        let prev = pos.map(|i| &locks[i]);
        let within = prev.is_some_and(|p| {
            now.saturating_duration_since(p.last_failure_at) <= cfg.escalation_window + p.last_cooldown
        });
        let failure_count = if within { prev.map_or(1, |p| p.failure_count + 1) } else { 1 };
        let cooldown = match req.exact_cooldown.filter(|d| !d.is_zero()) {
            Some(exact) if req.exact_is_upstream_reset => exact,
            Some(exact) => exact.min(cfg.max_cooldown),
            None if cfg.use_exponential_backoff => {
                scaled(cfg.base_cooldown, (failure_count - 1).min(cfg.max_backoff_steps)).min(cfg.max_cooldown)
            }
            None => cfg.base_cooldown.min(cfg.max_cooldown),
        };
        let until = now + cooldown;
        match pos.map(|i| &mut locks[i]) {
            Some(existing) if existing.until > until => {
                existing.failure_count = existing.failure_count.max(failure_count);
                existing.last_failure_at = now;
                return existing.until - now;
            }
            // The same provider, subject and scope: renewed in place.
            Some(existing) => {
                existing.reason = req.reason;
                existing.until = until;
                existing.failure_count = failure_count;
                existing.last_failure_at = now;
                existing.last_cooldown = cooldown;
                if !same_text(&existing.model, req.model) {
                    existing.model = req.model.to_owned();
                }
            }
            // Only a new lock adds to the count: eviction is checked then.
            None => locks.push(Lock {
                provider: req.provider.to_owned(),
                subject: key(subject).into_owned(),
                scope,
                reason: req.reason,
                until,
                failure_count,
                last_failure_at: now,
                last_cooldown: cooldown,
                model: req.model.to_owned(),
            }),
        }
        self.ends_by = self.ends_by.max(Some(until));
        if pos.is_none() {
            self.added(until);
            self.evict(now);
        }
        cooldown
    }

    /// Merges another replica's lock of `model` on `connection` (shared state), ending at
    /// `until`: taken when it ends later than every lock of this replica covering the model (the
    /// later deadline wins). Returns its time left when taken.
    pub fn merge_replica(
        &mut self,
        now: Instant,
        (provider, connection, model): (&str, &str, &str),
        reason: Reason,
        until: Instant,
    ) -> Option<Duration> {
        if until <= now {
            return None;
        }
        let bucket = self.locks.entry_ref(connection).or_default();
        let locks = bucket.entry_ref(key(model).as_ref()).or_default();
        let longest = locks.iter().filter(|l| l.covers(provider, model, None)).map(|l| l.until).max();
        match longest {
            Some(mine) if mine >= until => return None,
            Some(_) => {
                for l in locks.iter_mut().filter(|l| l.covers(provider, model, None)) {
                    l.until = until;
                    l.reason = reason;
                    l.last_failure_at = now;
                    l.last_cooldown = until - now;
                }
            }
            // Only a new lock adds to the count: eviction is checked then.
            None => {
                locks.push(Lock {
                    provider: provider.to_owned(),
                    subject: key(model).into_owned(),
                    scope: LockScope::Exact,
                    reason,
                    until,
                    failure_count: 1,
                    last_failure_at: now,
                    last_cooldown: until - now,
                    model: model.to_owned(),
                });
                self.added(until);
            }
        }
        self.ends_by = self.ends_by.max(Some(until));
        self.evict(now);
        Some(until - now)
    }

    /// Time left on any lock covering this model on this connection.
    #[inline]
    pub fn remaining(
        &self,
        now: Instant,
        provider: &str,
        connection: &str,
        model: &str,
        family: Option<&str>,
    ) -> Option<(Duration, Reason)> {
        if self.ends_by.is_none_or(|end| now >= end) {
            return None;
        }
        self.remaining_of(now, (provider, connection, model), family)
    }

    /// [`Self::remaining`] past its quick check (out of line, so that a check of many
    /// candidates with no lock running stays small).
    #[inline(never)]
    fn remaining_of(
        &self,
        now: Instant,
        (provider, connection, model): (&str, &str, &str),
        family: Option<&str>,
    ) -> Option<(Duration, Reason)> {
        let bucket = self.locks.get(connection)?;
        Self::covering(bucket, model, family)
            .filter(|l| now < l.until && l.covers(provider, model, family))
            .map(|l| (l.until - now, l.reason))
            .max_by_key(|(d, _)| *d)
    }

    /// The locks filed under `model` or its `family` (a superset of those covering it).
    fn covering<'b>(bucket: &'b Bucket, model: &str, family: Option<&str>) -> impl Iterator<Item = &'b Lock> {
        let model_key = key(model);
        let family_key = family.map(key).filter(|f| *f != model_key);
        let of_model = bucket.get(model_key.as_ref()).into_iter().flatten();
        let of_family = family_key.and_then(|f| bucket.get(f.as_ref())).into_iter().flatten();
        of_model.chain(of_family)
    }

    /// A healthy response: halve every failure count for this model; a count reaching 0
    /// removes its lockout. Returns the models whose lockouts (still running at `now`) it
    /// ended, as they were announced.
    pub fn decay(
        &mut self,
        now: Instant,
        provider: &str,
        connection: &str,
        model: &str,
        family: Option<&str>,
    ) -> Vec<String> {
        let mut ended = Vec::new();
        let Some(bucket) = self.locks.get_mut(connection) else { return ended };
        let model_key = key(model);
        let family_key = family.map(key).filter(|f| *f != model_key);
        let mut removed = 0;
        for k in std::iter::once(model_key).chain(family_key) {
            let Some(locks) = bucket.get_mut(k.as_ref()) else { continue };
            let before = locks.len();
            locks.retain_mut(|l| {
                if !l.covers(provider, model, family) {
                    return true;
                }
                l.failure_count /= 2;
                if l.failure_count == 0 && now < l.until {
                    ended.push(l.model.clone());
                }
                l.failure_count > 0
            });
            removed += before - locks.len();
            if locks.is_empty() {
                bucket.remove(k.as_ref());
            }
        }
        if bucket.is_empty() {
            self.locks.remove(connection);
        }
        self.count -= removed;
        ended
    }

    /// Removes the locks of one model on one connection; returns how many there were.
    pub fn clear(&mut self, provider: &str, connection: &str, model: &str) -> usize {
        let Some(bucket) = self.locks.get_mut(connection) else { return 0 };
        let mut removed = 0;
        for locks in bucket.values_mut() {
            let before = locks.len();
            locks.retain(|l| {
                !(l.provider == provider
                    && (l.subject.eq_ignore_ascii_case(model.trim()) || l.model.eq_ignore_ascii_case(model)))
            });
            removed += before - locks.len();
        }
        bucket.retain(|_, locks| !locks.is_empty());
        if bucket.is_empty() {
            self.locks.remove(connection);
        }
        self.count -= removed;
        removed
    }

    /// Removes one model's locks on every connection of a provider; returns how many there were.
    pub fn clear_model(&mut self, provider: &str, model: &str) -> usize {
        let connections: Vec<String> = self.locks.keys().cloned().collect();
        connections.iter().map(|c| self.clear(provider, c, model)).sum()
    }

    /// Removes every lock of one connection (its key changed); returns how many there were.
    pub fn clear_connection(&mut self, connection: &str) -> usize {
        let removed = self.locks.remove(connection).map_or(0, |b| b.values().map(Vec::len).sum());
        self.count -= removed;
        removed
    }

    /// Removes everything; returns how many locks there were.
    pub fn clear_all(&mut self) -> usize {
        let n = self.len();
        self.locks.clear();
        self.count = 0;
        self.evict_at = 0;
        n
    }

    /// Active lockouts at `now`, longest remaining first.
    pub fn list(&self, now: Instant) -> Vec<LockoutEntry> {
        let mut out: Vec<LockoutEntry> = self
            .locks
            .iter()
            .flat_map(|(conn, bucket)| bucket.values().flatten().map(move |l| (conn, l)))
            .filter(|(_, l)| now < l.until)
            .map(|(conn, l)| LockoutEntry {
                provider: l.provider.clone(),
                connection: conn.clone(),
                model: l.model.clone(),
                scope: l.scope,
                family: (l.scope == LockScope::QuotaFamily && !l.subject.eq_ignore_ascii_case(l.model.trim()))
                    .then(|| l.subject.clone()),
                reason: l.reason,
                until: l.until,
                failure_count: l.failure_count,
            })
            .collect();
        out.sort_by(|a, b| {
            b.until
                .cmp(&a.until)
                .then_with(|| a.provider.cmp(&b.provider))
                .then_with(|| a.connection.cmp(&b.connection))
        });
        out
    }

    /// The failure count of one lock, for tests.
    #[cfg(test)]
    fn count_of(&self, provider: &str, connection: &str, subject: &str, scope: LockScope) -> Option<u32> {
        self.locks
            .get(connection)?
            .get(key(subject).as_ref())?
            .iter()
            .find(|l| l.is(provider, subject, scope))
            .map(|l| l.failure_count)
    }
}

#[path = "lockout_upkeep.rs"]
mod upkeep;

#[cfg(test)]
#[path = "lockout_tests.rs"]
mod tests;
