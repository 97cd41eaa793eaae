//! How an attempt ended, as the shell reports it, and the layer that outcome belongs to.

use crate::classify::is_provider_level_status;

/// How an attempt ended.
#[derive(Debug, Clone, Copy)]
pub enum AttemptOutcome<'a> {
    /// The upstream answered well (for a stream: it finished).
    Success,
    /// The upstream answered with an error status.
    Upstream {
        /// Status.
        status: u16,
        /// Headers.
        headers: &'a [(&'a str, &'a str)],
        /// Body text.
        body: &'a str,
    },
    /// The upstream could not be reached or the connection broke before a response.
    Transport,
    /// The connection's own way out failed: its egress proxy refused or could not be reached.
    /// Not the provider's fault: the connection cools down on its ladder (M3), the breaker is
    /// not told.
    Egress,
    /// The stream was aborted by the watchdog: the provider was too slow (provider-level).
    TooSlow,
    /// The client went away, or a local limit refused it: says nothing about the upstream.
    Neutral,
}

/// The layer of an attempt's outcome by its raw status or error, before any classification:
/// what the layer separation (SPEC "Exact semantics") is judged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeKind {
    /// A success.
    Success,
    /// An upstream error status other than 408 and 5xx.
    AccountLevel,
    /// 408, 5xx, a transport failure, or a stream too slow.
    ProviderLevel,
    /// The client went away or a local limit refused it: says nothing of the upstream.
    Neutral,
}

impl OutcomeKind {
    /// `success`, `account-level`, `provider-level` or `neutral`.
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeKind::Success => "success",
            OutcomeKind::AccountLevel => "account-level",
            OutcomeKind::ProviderLevel => "provider-level",
            OutcomeKind::Neutral => "neutral",
        }
    }
}

impl AttemptOutcome<'_> {
    /// Its layer.
    pub fn kind(&self) -> OutcomeKind {
        match self {
            AttemptOutcome::Transport | AttemptOutcome::TooSlow => OutcomeKind::ProviderLevel,
            AttemptOutcome::Egress => OutcomeKind::AccountLevel,
            AttemptOutcome::Upstream { status, .. } if is_provider_level_status(*status) => OutcomeKind::ProviderLevel,
            AttemptOutcome::Upstream { .. } => OutcomeKind::AccountLevel,
            AttemptOutcome::Success => OutcomeKind::Success,
            AttemptOutcome::Neutral => OutcomeKind::Neutral,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_by_layer() {
        let up = |status| AttemptOutcome::Upstream { status, headers: &[], body: "" };
        assert_eq!(up(408).kind(), OutcomeKind::ProviderLevel);
        assert_eq!(up(503).kind(), OutcomeKind::ProviderLevel);
        assert_eq!(up(529).kind(), OutcomeKind::ProviderLevel);
        assert_eq!(up(429).kind(), OutcomeKind::AccountLevel);
        assert_eq!(up(403).kind(), OutcomeKind::AccountLevel);
        assert_eq!(AttemptOutcome::Transport.kind(), OutcomeKind::ProviderLevel);
        assert_eq!(AttemptOutcome::TooSlow.kind(), OutcomeKind::ProviderLevel);
        assert_eq!(AttemptOutcome::Egress.kind(), OutcomeKind::AccountLevel);
        assert_eq!(AttemptOutcome::Neutral.kind(), OutcomeKind::Neutral);
        assert_eq!(AttemptOutcome::Success.kind(), OutcomeKind::Success);
    }
}
