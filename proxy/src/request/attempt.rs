//! One upstream attempt's resilience bookkeeping: the breaker ticket and the outcome, recorded
//! exactly once (a dropped attempt records a neutral outcome), and the header that names what a
//! translation dropped (the one naming the connection is [`crate::request::endpoint::SELECTED`]).

use crate::recording::record::Record;
use crate::recording::trace::Trace;
use crate::request::resolve::Target;
use crate::state::gateway::Gateway;
use ferroute_core::breaker::Ticket;
use ferroute_core::classify::{Decision, is_provider_level_status};
use ferroute_core::engine::{AttemptOutcome, OutcomeKind};
use hyper_util::client::legacy::connect::Connect;
use std::sync::Arc;

/// Header naming request fields a translation dropped as advisory.
pub const DROPPED: &str = "x-ferroute-translation-dropped";
/// One attempt's resilience bookkeeping; if dropped before an outcome is recorded (the client
/// went away mid-attempt), it records a neutral outcome so the breaker's probe slot returns.
pub struct Attempt<C: Connect + Clone + Send + Sync + 'static> {
    /// The gateway.
    pub gw: Arc<Gateway<C>>,
    /// The target.
    pub target: Target,
    /// The breaker ticket, until recorded.
    pub ticket: Option<Ticket>,
    /// Whether the next combo target is on the same provider.
    pub same_provider_next: bool,
    /// The client request (for observers).
    pub request: u64,
    /// The request's round (for observers).
    pub round: u32,
    /// What the flight recorder keeps of it.
    pub trace: Trace,
}

impl<C: Connect + Clone + Send + Sync + 'static> Attempt<C> {
    /// Records the outcome (once).
    pub fn record(&mut self, outcome: AttemptOutcome<'_>) -> Option<Decision> {
        let ticket = self.ticket.take()?;
        let gw = &self.gw;
        let (provider, connection) = gw.parts(&self.target);
        let cand = gw.candidate(&self.target);
        let now = gw.clock.now();
        let wall = gw.clock.wall_ms(now);
        let raw_kind = outcome.kind();
        let telemetry = gw.telemetry.get().filter(|_| self.trace.ids.is_some_and(|i| i.sampled));
        let recorded = (gw.recorder.is_some() || telemetry.is_some()).then_some(outcome);
        let d = gw.with_engine(|e| {
            e.record(
                now,
                &cand,
                provider.profile(),
                ticket,
                outcome,
                self.same_provider_next,
                connection.disable_cooling,
                Some(wall),
            )
        });
        // An upstream answer's layer is its status after restatement (M11 rewrites it before
        // anything classifies it; a stream that failed after its 200 has the status its
        // failure goes with): what the layer separation is judged by.
        let kind = match (raw_kind, d.as_ref()) {
            (OutcomeKind::AccountLevel | OutcomeKind::ProviderLevel, Some(d)) if d.upstream_status != 0 => {
                if is_provider_level_status(d.status) {
                    OutcomeKind::ProviderLevel
                } else {
                    OutcomeKind::AccountLevel
                }
            }
            (k, _) => k,
        };
        gw.observe(
            now,
            crate::state::gateway::Observed::Outcome { provider: &provider.id, connection: &connection.id, kind },
        );
        let events = gw.settle();
        if let Some(outcome) = recorded {
            let target = (provider.id.as_str(), connection.id.as_str(), &*self.target.model);
            if let Some(r) =
                self.trace.record(&gw.clock, now, (self.request, self.round), target, &outcome, d.as_ref(), &events)
            {
                if let (Some(t), Some(ids)) = (telemetry, self.trace.ids) {
                    t.attempt(&r, ids);
                }
                if let Some(recorder) = &gw.recorder {
                    recorder.record(Record::Attempt(Box::new(r)));
                }
            }
        }
        d
    }
}

impl<C: Connect + Clone + Send + Sync + 'static> Drop for Attempt<C> {
    fn drop(&mut self) {
        if self.ticket.is_some() {
            self.record(AttemptOutcome::Neutral);
        }
    }
}
