//! What the client is told after an upstream failure agrees with the state just recorded.

use super::{Candidate, Engine, ExclusionReason};
use crate::classify::Decision;
use std::time::{Duration, Instant};

/// What a client is told to wait when the connection that answered was just ended and has no
/// retry of its own (banned, out of credits): an hour.
pub(super) const ENDED_RETRY_AFTER: Duration = Duration::from_secs(3600);

impl Engine {
    /// What the client is told agrees with what was just recorded: when the answer cooled,
    /// ended or locked this candidate, its `Retry-After` is never shorter than the wait it now
    /// serves. An ended connection with no retry of its own is out until an operator or new
    /// credentials revive it: the client is told [`ENDED_RETRY_AFTER`], not the upstream's
    /// short hint.
    pub(super) fn tell_what_was_recorded(&self, now: Instant, c: &Candidate<'_>, d: &mut Decision) {
        let Some((reason, left)) = self.account_exclusion(now, c) else { return };
        let floor = match reason {
            ExclusionReason::Terminal(_) if left.is_zero() => ENDED_RETRY_AFTER,
            _ => left,
        };
        if d.status == 429 || d.client_retry_after.is_some() {
            d.client_retry_after = Some(d.client_retry_after.map_or(floor, |r| r.max(floor)));
        }
    }
}
