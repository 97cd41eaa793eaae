//! When a subscription account's OAuth tokens are refreshed (RFC 6749 §6), decided from wall
//! time passed in.
//!
//! Access tokens live for hours (Claude) to days (ChatGPT), and each refresh returns a new
//! refresh token that replaces the old one (RFC 9700 §4.14: presenting an old one again may
//! revoke the whole family). So an [`Account`] allows one refresh in flight at a time (a
//! [`Flight`] names it; an answer to an older flight changes nothing), refreshes early in the
//! background — once `refresh_at` of the token's lifetime has passed, or when less than
//! [`MIN_LEFT_MS`] is left for a token long enough to have that margin — and, when the token endpoint fails (transport, timeout, 5xx),
//! tries again with a doubling delay while the access token is still good. `invalid_grant`
//! means the refresh token is dead: the account needs a new sign-in and is never refreshed
//! again until new tokens arrive ([`Account::reauthorize`]).
//!
//! A refresh whose answer was lost after its request may have reached the endpoint (a timeout,
//! a reset after sending, a 5xx without an OAuth error) leaves the refresh token **in doubt**:
//! the endpoint may have rotated it, and presenting it again would be a reuse. It is never
//! presented again. The account serves on its access token while that lives (a flight then
//! only looks for tokens another replica published, [`Flight::presents`] false), and an
//! answer to the lost flight that still arrives is taken; once the access token has expired the
//! account needs a new sign-in ([`Begin::Lapsed`]).
//!
//! ```text
//! Valid ──due──▶ Refreshing ──ok──▶ Valid (new tokens)
//!                    │ │ └──retryable──▶ Retrying { failures, next } ──due──▶ Refreshing
//!                    │ └──lost──▶ InDoubt { next } ──due──▶ Refreshing (looking only)
//!                    │                 │ └──late answer──▶ Valid
//!                    │                 └──expired──▶ NeedsSignIn
//!                    └──invalid_grant──▶ NeedsSignIn
//! ```

use serde::{Deserialize, Serialize};

/// A refresh is due at the latest this long before the access token expires.
pub const MIN_LEFT_MS: u64 = 5 * 60 * 1000;
/// First delay after a failed refresh (then doubled per failure).
pub const RETRY_BASE_MS: u64 = 5_000;
/// Longest delay between two refresh tries.
pub const RETRY_MAX_MS: u64 = 5 * 60 * 1000;
/// Default share of a token's lifetime after which it is refreshed.
pub const DEFAULT_REFRESH_AT: f64 = 0.8;

/// An access token's lifetime in wall time (Unix ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lifetime {
    /// When it was issued (or first seen, when only its expiry is known).
    pub issued_at_ms: u64,
    /// When it expires.
    pub expires_at_ms: u64,
}

impl Lifetime {
    /// When a refresh is due: once `refresh_at` of the lifetime has passed, or when
    /// [`MIN_LEFT_MS`] are left if that comes first. A token too short for that margin (it
    /// would leave less than half its life) is refreshed at its share alone.
    pub fn due_at_ms(&self, refresh_at: f64) -> u64 {
        let span = self.expires_at_ms.saturating_sub(self.issued_at_ms);
        let share = refresh_at.clamp(0.0, 1.0);
        let by_share = self.issued_at_ms.saturating_add((span as f64 * share) as u64);
        let by_margin = self.expires_at_ms.saturating_sub(MIN_LEFT_MS);
        if by_margin > self.issued_at_ms.saturating_add(span / 2) { by_share.min(by_margin) } else { by_share }
    }
}

/// Where an account's refreshing stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RefreshState {
    /// The tokens are good; the next refresh is due at the lifetime's share.
    Valid,
    /// A refresh is in flight.
    Refreshing,
    /// The last tries failed without an answer about the token; the next try is at `next_ms`.
    Retrying {
        /// When the next try is due (Unix ms).
        next_ms: u64,
    },
    /// A refresh's answer was lost: the refresh token may have been used and is not presented
    /// again. The access token serves until it expires; the account is looked at again at
    /// `next_ms` (for tokens another replica published, or the expiry).
    InDoubt {
        /// When it is looked at again (Unix ms).
        next_ms: u64,
    },
    /// The token endpoint refused the refresh token (`invalid_grant`), or the access token
    /// expired while the refresh token was in doubt: a new sign-in is needed.
    NeedsSignIn,
}

impl RefreshState {
    /// The name health shows.
    pub fn as_str(&self) -> &'static str {
        match self {
            RefreshState::Valid => "valid",
            RefreshState::Refreshing => "refreshing",
            RefreshState::Retrying { .. } => "retrying",
            RefreshState::InDoubt { .. } => "in_doubt",
            RefreshState::NeedsSignIn => "needs_sign_in",
        }
    }
}

/// Why a refresh is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The background schedule: only when due.
    Scheduled,
    /// An upstream refused the access token (a 401): at once, unless one is in flight or the
    /// tokens changed since the request was sent.
    Refused {
        /// The token generation the refused request carried.
        generation: u64,
    },
}

/// One refresh in flight: the refresh token generation it presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flight {
    /// The generation of the tokens it replaces.
    pub generation: u64,
    /// Whether it may present the refresh token: not when that is in doubt (the flight only
    /// looks for tokens another replica published).
    pub presents: bool,
}

/// How a refresh ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// New tokens with this lifetime (already stored by the caller).
    Refreshed(Lifetime),
    /// No answer, and the request did not reach the endpoint or was not acted on (a connect
    /// error, a 429, a 5xx naming an OAuth error): try again later.
    Retryable,
    /// The answer was lost after the request may have reached the endpoint (a timeout, a reset
    /// after sending, a 5xx without an OAuth error): the refresh token is in doubt. Looked at
    /// again at `look_at_ms` if given (a store other replicas publish to), else at the expiry.
    Lost {
        /// When to look again for tokens published elsewhere (Unix ms).
        look_at_ms: Option<u64>,
    },
    /// The refresh token is dead (`invalid_grant`, or a 400/401 naming the grant).
    InvalidGrant,
    /// Another replica refreshed first: its tokens (generation `generation` in the shared
    /// store) are taken instead, without presenting anything.
    Taken {
        /// Their lifetime.
        lifetime: Lifetime,
        /// Their generation.
        generation: u64,
    },
    /// Another replica holds the refresh (or one is in doubt): look again at `at_ms`. Not a
    /// failure.
    Deferred {
        /// When to look again (Unix ms).
        at_ms: u64,
    },
}

/// What the caller should do after [`Account::begin`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begin {
    /// Refresh now, presenting the current refresh token.
    Refresh(Flight),
    /// A refresh is already in flight: wait for it.
    InFlight,
    /// The tokens already changed since the refused request was sent: use the current ones.
    Newer,
    /// Nothing to do (not due yet, or a new sign-in is needed).
    No,
    /// The access token expired while the refresh token was in doubt: the account now needs a
    /// new sign-in (told once; the caller ends the connection).
    Lapsed,
}

/// One OAuth account's refresh schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Account {
    lifetime: Lifetime,
    refresh_at: f64,
    generation: u64,
    state: RefreshState,
    failures: u32,
    last_refresh_ms: Option<u64>,
    /// The generation whose refresh token is in doubt, if any.
    doubt: Option<u64>,
}

impl Account {
    /// An account whose current tokens have `lifetime`; they are generation `generation`
    /// (restored from the store, or 0).
    pub fn new(lifetime: Lifetime, refresh_at: f64, generation: u64) -> Self {
        Account {
            lifetime,
            refresh_at,
            generation,
            state: RefreshState::Valid,
            failures: 0,
            last_refresh_ms: None,
            doubt: None,
        }
    }

    /// The same account, its refresh token in doubt (restored from a store that recorded a
    /// flight which never ended): it is never presented.
    pub fn in_doubt(mut self) -> Self {
        self.doubt = Some(self.generation);
        self.state = RefreshState::InDoubt { next_ms: self.lifetime.expires_at_ms };
        self
    }

    /// Whether the current refresh token is in doubt.
    pub fn doubted(&self) -> bool {
        self.doubt == Some(self.generation)
    }

    /// The same account, last refreshed at `at_ms` (restored from the store).
    pub fn with_last_refresh(mut self, at_ms: Option<u64>) -> Self {
        self.last_refresh_ms = at_ms;
        self
    }

    /// The current tokens' lifetime.
    pub fn lifetime(&self) -> Lifetime {
        self.lifetime
    }

    /// The share of a lifetime after which a refresh is due.
    pub fn refresh_at(&self) -> f64 {
        self.refresh_at
    }

    /// Changes that share (a reloaded config); the next refresh is due by the new one.
    pub fn set_refresh_at(&mut self, refresh_at: f64) {
        self.refresh_at = refresh_at;
    }

    /// The current tokens' generation (one more after each refresh or new sign-in).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Where refreshing stands.
    pub fn state(&self) -> RefreshState {
        self.state
    }

    /// Failed tries since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// When the tokens were last refreshed here (Unix ms).
    pub fn last_refresh_ms(&self) -> Option<u64> {
        self.last_refresh_ms
    }

    /// When the next refresh is due (Unix ms): none while one is in flight or a sign-in is
    /// needed.
    pub fn next_refresh_ms(&self) -> Option<u64> {
        match self.state {
            RefreshState::Valid => Some(self.lifetime.due_at_ms(self.refresh_at)),
            RefreshState::Retrying { next_ms } => Some(next_ms),
            RefreshState::InDoubt { next_ms } => Some(next_ms.min(self.lifetime.expires_at_ms)),
            RefreshState::Refreshing | RefreshState::NeedsSignIn => None,
        }
    }

    /// Whether the access token has expired at `now_ms`.
    pub fn expired(&self, now_ms: u64) -> bool {
        now_ms >= self.lifetime.expires_at_ms
    }

    /// Asks for a refresh. Only one is in flight at a time; a scheduled one only when due.
    /// A flight whose refresh token is in doubt only looks; an in-doubt account whose access
    /// token has expired needs a new sign-in from then on ([`Begin::Lapsed`]).
    pub fn begin(&mut self, now_ms: u64, why: Why) -> Begin {
        match (self.state, why) {
            (RefreshState::NeedsSignIn, _) => Begin::No,
            (RefreshState::Refreshing, _) => Begin::InFlight,
            (_, Why::Refused { generation }) if generation != self.generation => Begin::Newer,
            // InDoubt => NeedsSignIn
            (RefreshState::InDoubt { .. }, _) if self.expired(now_ms) => {
                self.state = RefreshState::NeedsSignIn;
                Begin::Lapsed
            }
            (RefreshState::InDoubt { .. }, Why::Refused { .. }) => Begin::No,
            (_, Why::Scheduled) if self.next_refresh_ms().is_none_or(|due| now_ms < due) => Begin::No,
            // Valid | Retrying | InDoubt => Refreshing
            _ => {
                self.state = RefreshState::Refreshing;
                Begin::Refresh(Flight { generation: self.generation, presents: !self.doubted() })
            }
        }
    }

    /// Whether an answer to `flight` would be taken: it is the one in progress, or the one
    /// whose answer was lost (a late answer).
    pub fn is_current(&self, flight: Flight) -> bool {
        flight.generation == self.generation && (self.state == RefreshState::Refreshing || self.doubted())
    }

    /// Records how `flight` ended; an answer to a flight that is not the current one (its
    /// tokens were replaced meanwhile) changes nothing, and once the refresh token is in doubt
    /// only new tokens change anything. Returns whether it was taken.
    pub fn finish(&mut self, flight: Flight, answer: Answer, now_ms: u64) -> bool {
        if !self.is_current(flight) {
            return false;
        }
        if self.doubted() && self.state != RefreshState::Refreshing {
            // A late answer to the lost flight: only tokens are news.
            if !matches!(answer, Answer::Refreshed(_) | Answer::Taken { .. }) {
                return false;
            }
        }
        match answer {
            // Refreshing => Valid
            Answer::Refreshed(lifetime) => {
                self.lifetime = lifetime;
                self.generation += 1;
                self.doubt = None;
                self.failures = 0;
                self.last_refresh_ms = Some(now_ms);
                self.state = RefreshState::Valid;
            }
            // Refreshing => InDoubt (looking again, the token still in doubt)
            Answer::Retryable | Answer::Deferred { .. } | Answer::Lost { .. } if self.doubted() => {
                let at = match answer {
                    Answer::Deferred { at_ms } | Answer::Lost { look_at_ms: Some(at_ms) } => at_ms.max(now_ms),
                    _ => self.lifetime.expires_at_ms,
                };
                self.state = RefreshState::InDoubt { next_ms: at };
            }
            // Refreshing => InDoubt
            Answer::Lost { look_at_ms } => {
                self.failures = self.failures.saturating_add(1);
                self.doubt = Some(self.generation);
                let at = look_at_ms.map_or(self.lifetime.expires_at_ms, |at| at.max(now_ms));
                self.state = RefreshState::InDoubt { next_ms: at };
            }
            // Refreshing => Retrying
            Answer::Retryable => {
                self.failures = self.failures.saturating_add(1);
                let exponent = self.failures.saturating_sub(1).min(16);
                let delay = RETRY_BASE_MS.saturating_mul(1 << exponent).min(RETRY_MAX_MS);
                self.state = RefreshState::Retrying { next_ms: now_ms.saturating_add(delay) };
            }
            // Refreshing => NeedsSignIn
            Answer::InvalidGrant => {
                self.failures = self.failures.saturating_add(1);
                self.state = RefreshState::NeedsSignIn;
            }
            // Refreshing => Valid
            Answer::Taken { lifetime, generation } => {
                self.lifetime = lifetime;
                self.generation = generation.max(self.generation + 1);
                self.doubt = None;
                self.failures = 0;
                self.last_refresh_ms = Some(now_ms);
                self.state = RefreshState::Valid;
            }
            // Refreshing => Retrying
            Answer::Deferred { at_ms } => self.state = RefreshState::Retrying { next_ms: at_ms.max(now_ms) },
        }
        true
    }

    /// New tokens from outside a refresh (a new sign-in in the config, an import, another
    /// replica): they replace the current ones and end any sign-in wait. An answer to a flight
    /// started before is then ignored.
    pub fn reauthorize(&mut self, lifetime: Lifetime, generation: u64, now_ms: u64) {
        self.lifetime = lifetime;
        self.generation = generation.max(self.generation + 1);
        self.doubt = None;
        self.failures = 0;
        self.last_refresh_ms = Some(now_ms);
        self.state = RefreshState::Valid;
    }
}

#[cfg(test)]
#[path = "oauth_tests.rs"]
mod tests;
