//! M3: per-connection cooldowns, terminal states, the request-rejected streak and the
//! expired-credentials retry ladder.
//!
//! A connection is one key or account. Account-level failures cool it down (a ladder, or the
//! upstream's retry hint for API keys) or end it in a terminal state that nothing transient
//! overwrites. Recovery is lazy: once `rate_limited_until` passes, the connection is usable.

use crate::classify::{ConnectionEffect, Decision};
use crate::types::{ConnectionStatus, Reason, TerminalState, after, scaled};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Refusals within this window continue a streak.
pub const REQUEST_REJECTED_WINDOW: Duration = Duration::from_secs(86_400);
/// The streak's cooldowns; the next refusal after the last one bans the connection.
pub const REQUEST_REJECTED_COOLDOWNS: [Duration; 2] = [Duration::from_secs(300), Duration::from_secs(900)];
/// Retries allowed for expired credentials before `expired` is final.
pub const EXPIRED_RETRY_MAX: u32 = 3;
/// First retry delay for expired credentials (then doubled: 5, 10, 20 min).
pub const EXPIRED_RETRY_BASE: Duration = Duration::from_secs(300);
/// The most of an upstream's error message a connection keeps (and persists), in characters.
pub const MAX_ERROR_CHARS: usize = 500;

/// Whether a connection can take a request now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    /// Usable.
    Available,
    /// Cooling down for `remaining` more.
    CoolingDown {
        /// Time left.
        remaining: Duration,
        /// Why.
        reason: Option<Reason>,
    },
    /// Terminal; `retry_in` is when an expired connection may be retried once, if ever.
    Terminal {
        /// Which terminal state.
        state: TerminalState,
        /// Time until the next allowed retry of expired credentials.
        retry_in: Option<Duration>,
    },
}

/// What a reported failure did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Nothing changed (terminal already, cooldown active, or no effect).
    Unchanged,
    /// A cooldown started.
    Cooldown {
        /// Its end.
        until: Instant,
        /// The stored level.
        level: u32,
    },
    /// The connection entered a terminal state.
    Terminal(TerminalState),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Streak {
    count: u32,
    last_refusal_at: Instant,
}

/// One connection's resilience state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionState {
    terminal: Option<TerminalState>,
    rate_limited_until: Option<Instant>,
    last_cooldown: Duration,
    backoff_level: u32,
    last_error: Option<String>,
    last_error_type: Option<Reason>,
    error_code: Option<u16>,
    expired_retries: u32,
    expired_retry_at: Option<Instant>,
    streak: Option<Streak>,
}

/// The persisted form; instants are relative to the snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ConnectionSnapshot {
    /// Terminal state, if any.
    pub terminal: Option<TerminalState>,
    /// Remaining cooldown in ms (0 = none).
    pub cooldown_remaining_ms: u64,
    /// How long ago the last cooldown ended, in ms, when it has ended and the ladder has not
    /// restarted yet (so that a quiet spanning a restart still restarts the ladder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_ended_ms_ago: Option<u64>,
    /// Length of the last cooldown in ms.
    pub last_cooldown_ms: u64,
    /// Backoff level.
    pub backoff_level: u32,
    /// Last error message.
    pub last_error: Option<String>,
    /// Last error reason.
    pub last_error_type: Option<Reason>,
    /// Last upstream status.
    pub error_code: Option<u16>,
    /// Expired-credential retries used.
    pub expired_retries: u32,
    /// Time until the next expired retry in ms, if one remains.
    pub expired_retry_in_ms: Option<u64>,
    /// Request-rejected streak count.
    pub rejected_streak: u32,
    /// Age of the last refusal in ms.
    pub rejected_age_ms: Option<u64>,
}

impl ConnectionSnapshot {
    /// The snapshot as seen `ms` later (the process was down, or it travelled to another
    /// replica): remaining times shortened, ages lengthened, and a cooldown that ran out meanwhile
    /// ended that long ago (so a quiet spanning the gap still restarts the ladder).
    pub fn aged(mut self, ms: u64) -> ConnectionSnapshot {
        if self.cooldown_remaining_ms > 0 && self.cooldown_remaining_ms <= ms {
            self.cooldown_ended_ms_ago = Some(ms - self.cooldown_remaining_ms);
        } else {
            self.cooldown_ended_ms_ago = self.cooldown_ended_ms_ago.map(|m| m.saturating_add(ms));
        }
        self.cooldown_remaining_ms = self.cooldown_remaining_ms.saturating_sub(ms);
        self.expired_retry_in_ms = self.expired_retry_in_ms.map(|m| m.saturating_sub(ms));
        self.rejected_age_ms = self.rejected_age_ms.map(|m| m.saturating_add(ms));
        self
    }
}

impl Default for ConnectionState {
    fn default() -> Self {
        ConnectionState {
            terminal: None,
            rate_limited_until: None,
            last_cooldown: Duration::ZERO,
            backoff_level: 0,
            last_error: None,
            last_error_type: None,
            error_code: None,
            expired_retries: 0,
            expired_retry_at: None,
            streak: None,
        }
    }
}

impl ConnectionState {
    /// A healthy connection.
    pub fn new() -> Self {
        Self::default()
    }

    /// The status shown in the health JSON.
    pub fn status(&self, now: Instant) -> ConnectionStatus {
        match self.terminal {
            Some(t) => t.into(),
            None if self.rate_limited_until.is_some_and(|u| now < u) => ConnectionStatus::Unavailable,
            None => ConnectionStatus::Active,
        }
    }

    /// The terminal state, if any (the gateway reads it through [`Self::status`] and
    /// [`Self::availability`]; the unit tests read it here).
    #[cfg(test)]
    pub fn terminal(&self) -> Option<TerminalState> {
        self.terminal
    }

    /// The cooldown's end, if one is active at `now`.
    pub fn rate_limited_until(&self, now: Instant) -> Option<Instant> {
        self.rate_limited_until.filter(|u| now < *u)
    }

    /// The stored backoff level.
    pub fn backoff_level(&self) -> u32 {
        self.backoff_level
    }

    /// The last error's reason.
    pub fn last_error_type(&self) -> Option<Reason> {
        self.last_error_type
    }

    /// The last error's message (persisted with the state; the unit tests read it here).
    #[cfg(test)]
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// The last upstream status.
    pub fn error_code(&self) -> Option<u16> {
        self.error_code
    }

    /// Whether the connection can take a request at `now`.
    pub fn availability(&self, now: Instant) -> Availability {
        if let Some(state) = self.terminal {
            let retry_in = match (state, self.expired_retry_at) {
                (TerminalState::Expired, Some(at)) => Some(at.saturating_duration_since(now)),
                _ => None,
            };
            if retry_in == Some(Duration::ZERO) {
                return Availability::Available;
            }
            return Availability::Terminal { state, retry_in };
        }
        match self.rate_limited_until {
            Some(until) if now < until => {
                Availability::CoolingDown { remaining: until - now, reason: self.last_error_type }
            }
            _ => Availability::Available,
        }
    }

    /// Called when routing picks this connection. An expired cooldown ends here (lazy
    /// recovery); if the connection then stayed quiet for as long as that cooldown lasted, its
    /// backoff level restarts at 0. A due expired-credentials retry is consumed here, so that
    /// only one request probes the credentials.
    pub fn on_selected(&mut self, now: Instant) {
        if let Some(until) = self.rate_limited_until
            && now >= until
        {
            self.rate_limited_until = None;
            if now.saturating_duration_since(until) >= self.last_cooldown {
                self.backoff_level = 0;
            }
        }
        if self.terminal == Some(TerminalState::Expired) && self.expired_retry_at.is_some_and(|at| now >= at) {
            self.expired_retries += 1;
            self.expired_retry_at = (self.expired_retries < EXPIRED_RETRY_MAX)
                .then(|| now + scaled(EXPIRED_RETRY_BASE, self.expired_retries));
        }
    }

    /// The level classification should use at `now` (see [`ConnectionState::on_selected`]).
    pub fn level_for(&self, now: Instant) -> u32 {
        match self.rate_limited_until {
            Some(until) if now >= until && now.saturating_duration_since(until) >= self.last_cooldown => 0,
            _ => self.backoff_level,
        }
    }

    /// A success clears every error field (and ends an expired state on a successful retry).
    pub fn record_success(&mut self) {
        *self = ConnectionState::default();
    }

    /// An operator reset: the same as a success (the engine forgets a reset connection's state
    /// instead; the unit tests use this).
    #[cfg(test)]
    pub fn reset(&mut self) {
        self.record_success();
    }

    /// Applies a classified failure. `disable_cooling` skips cooldowns (terminal states still
    /// apply). A failure on a terminal connection changes nothing. A failure while a cooldown
    /// is active does not climb the ladder (anti-thundering-herd: N concurrent failures raise
    /// the level once), but a longer explicit hint (Retry-After, a reset header) extends the
    /// deadline: a deadline never moves earlier, and an account that says "60 s" is not
    /// retried after the 1 s an earlier answer asked for.
    pub fn record_failure(
        &mut self,
        now: Instant,
        decision: &Decision,
        message: &str,
        disable_cooling: bool,
    ) -> Applied {
        if self.terminal.is_some() {
            return Applied::Unchanged;
        }
        if let Some(until) = self.rate_limited_until.filter(|u| now < *u) {
            return match decision.connection {
                // Cooling => Cooling, later deadline, same level.
                ConnectionEffect::Cooldown { duration, hint: Some(_), .. }
                    if !disable_cooling && now + duration > until =>
                {
                    self.note_error(decision, message);
                    let until = now + duration;
                    self.rate_limited_until = Some(until);
                    self.last_cooldown = self.last_cooldown.max(duration);
                    Applied::Cooldown { until, level: self.backoff_level }
                }
                _ => Applied::Unchanged,
            };
        }
        let effect = match decision.connection {
            ConnectionEffect::RequestRejected => self.refusal(now),
            other => other,
        };
        match effect {
            ConnectionEffect::None | ConnectionEffect::RequestRejected => Applied::Unchanged,
            ConnectionEffect::Terminal(t) => {
                self.note_error(decision, message);
                self.terminal = Some(t);
                self.rate_limited_until = None;
                self.expired_retries = 0;
                self.expired_retry_at = (t == TerminalState::Expired).then(|| now + EXPIRED_RETRY_BASE);
                Applied::Terminal(t)
            }
            ConnectionEffect::Cooldown { duration, new_level, .. } => {
                if disable_cooling || duration.is_zero() {
                    return Applied::Unchanged;
                }
                self.note_error(decision, message);
                let until = now + duration;
                self.rate_limited_until = Some(until);
                self.last_cooldown = duration;
                self.backoff_level = new_level;
                Applied::Cooldown { until, level: new_level }
            }
        }
    }

    /// M13: a sibling on the same egress IP hit the shared IP-bucketed quota; cool this
    /// connection until `until` as well. Never terminal, never over a terminal state, never
    /// shortening a longer cooldown, never with `disable_cooling`; the backoff level is not
    /// touched (this connection did not fail).
    pub fn share_cooldown(&mut self, now: Instant, until: Instant, reason: Reason, disable_cooling: bool) -> Applied {
        if disable_cooling || self.terminal.is_some() || until <= now {
            return Applied::Unchanged;
        }
        if self.rate_limited_until.is_some_and(|u| u >= until) {
            return Applied::Unchanged;
        }
        self.rate_limited_until = Some(until);
        self.last_cooldown = self.last_cooldown.max(until - now);
        self.last_error_type = Some(reason);
        Applied::Cooldown { until, level: self.backoff_level }
    }

    /// The request-rejected streak: 5 min, 15 min, then banned.
    fn refusal(&mut self, now: Instant) -> ConnectionEffect {
        let count = match self.streak {
            Some(s) if now.saturating_duration_since(s.last_refusal_at) < REQUEST_REJECTED_WINDOW => s.count + 1,
            _ => 1,
        };
        if count as usize > REQUEST_REJECTED_COOLDOWNS.len() {
            self.streak = None;
            return ConnectionEffect::Terminal(TerminalState::Banned);
        }
        self.streak = Some(Streak { count, last_refusal_at: now });
        ConnectionEffect::Cooldown {
            duration: REQUEST_REJECTED_COOLDOWNS[count as usize - 1],
            new_level: self.backoff_level,
            hint: None,
        }
    }

    /// Ends the connection in `state` for a reason found outside any request (an OAuth
    /// account whose refresh token the token endpoint refused), with `status` and `message` as
    /// its last error. A terminal state is never overwritten.
    pub fn end(&mut self, now: Instant, state: TerminalState, reason: Reason, status: u16, message: &str) -> Applied {
        if self.terminal.is_some() {
            return Applied::Unchanged;
        }
        // (Available | Cooling) => Terminal
        self.note(reason, status, message);
        self.terminal = Some(state);
        self.rate_limited_until = None;
        self.expired_retries = 0;
        self.expired_retry_at = (state == TerminalState::Expired).then(|| now + EXPIRED_RETRY_BASE);
        Applied::Terminal(state)
    }

    fn note_error(&mut self, decision: &Decision, message: &str) {
        self.note(decision.reason, decision.status, message);
    }

    fn note(&mut self, reason: Reason, status: u16, message: &str) {
        // Reuse the stored message's buffer: failures are the hot path under an outage.
        let mut buf = self.last_error.take().unwrap_or_default();
        buf.clear();
        // At most MAX_ERROR_CHARS characters; a message of at most that many bytes needs no
        // counting.
        let end = if message.len() <= MAX_ERROR_CHARS {
            message.len()
        } else {
            message.char_indices().nth(MAX_ERROR_CHARS).map_or(message.len(), |(i, _)| i)
        };
        buf.push_str(&message[..end]);
        self.last_error = Some(buf);
        self.last_error_type = Some(reason);
        self.error_code = Some(status);
    }

    /// The persisted form at `now`.
    pub fn snapshot(&self, now: Instant) -> ConnectionSnapshot {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        ConnectionSnapshot {
            terminal: self.terminal,
            cooldown_remaining_ms: self.rate_limited_until.map_or(0, |u| ms(u.saturating_duration_since(now))),
            cooldown_ended_ms_ago: self.rate_limited_until.filter(|u| *u <= now).map(|u| ms(now - u)),
            last_cooldown_ms: ms(self.last_cooldown),
            backoff_level: self.backoff_level,
            last_error: self.last_error.clone(),
            last_error_type: self.last_error_type,
            error_code: self.error_code,
            expired_retries: self.expired_retries,
            expired_retry_in_ms: self.expired_retry_at.map(|a| ms(a.saturating_duration_since(now))),
            rejected_streak: self.streak.map_or(0, |s| s.count),
            rejected_age_ms: self.streak.map(|s| ms(now.saturating_duration_since(s.last_refusal_at))),
        }
    }

    /// Merges another replica's state of this connection (shared state) at `now`. Its terminal
    /// state is taken when this one has none (one is never overwritten); its cooldown is taken
    /// when it ends later than this one's (the later deadline wins), at the higher backoff level.
    pub fn merge_replica(&mut self, s: &ConnectionSnapshot, now: Instant) -> Applied {
        let d = Duration::from_millis;
        if self.terminal.is_some() {
            return Applied::Unchanged;
        }
        if let Some(state) = s.terminal {
            self.terminal = Some(state);
            self.expired_retries = s.expired_retries;
            self.expired_retry_at = s.expired_retry_in_ms.map(|m| after(now, m));
            self.take_error(s);
            return Applied::Terminal(state);
        }
        if s.cooldown_remaining_ms == 0 {
            return Applied::Unchanged;
        }
        let until = after(now, s.cooldown_remaining_ms);
        if self.rate_limited_until.is_some_and(|mine| mine >= until) {
            return Applied::Unchanged;
        }
        self.rate_limited_until = Some(until);
        self.last_cooldown = d(s.last_cooldown_ms);
        self.backoff_level = self.backoff_level.max(s.backoff_level);
        self.take_error(s);
        Applied::Cooldown { until, level: self.backoff_level }
    }

    fn take_error(&mut self, s: &ConnectionSnapshot) {
        self.last_error.clone_from(&s.last_error);
        self.last_error_type = s.last_error_type;
        self.error_code = s.error_code;
    }

    /// Rebuilds the state from a snapshot at `now`.
    pub fn restore(s: &ConnectionSnapshot, now: Instant) -> Self {
        let d = Duration::from_millis;
        ConnectionState {
            terminal: s.terminal,
            // An ended cooldown keeps its deadline in the past (the quiet since then counts);
            // one further back than this process's own past is forgotten.
            rate_limited_until: if s.cooldown_remaining_ms > 0 {
                Some(after(now, s.cooldown_remaining_ms))
            } else {
                s.cooldown_ended_ms_ago.and_then(|ago| now.checked_sub(d(ago)))
            },
            last_cooldown: d(s.last_cooldown_ms),
            backoff_level: s.backoff_level,
            last_error: s.last_error.clone(),
            last_error_type: s.last_error_type,
            error_code: s.error_code,
            expired_retries: s.expired_retries,
            expired_retry_at: s.expired_retry_in_ms.map(|m| after(now, m)),
            streak: match (s.rejected_streak, s.rejected_age_ms) {
                (c, Some(age)) if c > 0 && d(age) < REQUEST_REJECTED_WINDOW => {
                    // An age beyond the process's own past cannot be represented; the streak
                    // then restarts, which errs towards fewer bans.
                    now.checked_sub(d(age)).map(|at| Streak { count: c, last_refusal_at: at })
                }
                _ => None,
            },
        }
    }
}

#[cfg(test)]
#[path = "connection_tests.rs"]
mod tests;
