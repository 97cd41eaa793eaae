//! Claude usage limits (M4): the low-priority lane and the session-limit reset, both opt-in
//! per connection.
//!
//! A Claude subscription answers its 5-hour usage limit with a 429 whose headers carry
//! `anthropic-ratelimit-unified-status: rejected` and, for an eligible account,
//! `anthropic-ratelimit-unified-slow-offer: treatment`. Instead of cooling the account, the
//! gateway may first ask for the once-a-week session-limit reset ([`reset`]), then accept the
//! offer and keep sending on the same account with `anthropic-usage-limit: slow` until the
//! window resets ([`lane`]). Both are decisions over headers and `now`; the shell sends the
//! requests and sleeps.

pub mod lane;
pub mod reset;
mod signals;

#[cfg(test)]
mod tests;

pub use lane::{LaneChange, LaneRequest, LaneView, Lanes, Seen, Step};
pub use reset::{ResetOutcome, UsageVerdict};
pub use signals::{LaneEnd, Options, SLOW_HEADER, SLOW_VALUE, SlowStatus, Unified};
