//! The checker's view of one gateway replica: what it has announced (the state its own
//! dispatches are held to), and how its log lines and timeline lanes are named.

use super::Recorder;
use proxy::state::gateway::Observed;

impl Recorder {
    /// Adds a log line of the gateway being observed (named when it is a second replica).
    pub(super) fn gw_note(&mut self, at_ms: u64, line: String) {
        let line = if self.host.is_empty() || self.host == "gateway" { line } else { format!("{}: {line}", self.host) };
        self.log.push((at_ms, line));
    }

    /// Records a violation of the gateway being observed.
    pub(super) fn gw_violate(&mut self, at_ms: u64, what: String) {
        let what = if self.host.is_empty() || self.host == "gateway" { what } else { format!("{}: {what}", self.host) };
        self.violate(at_ms, what);
    }

    /// A timeline lane of the gateway being observed.
    pub(super) fn lane(&self, lane: String) -> String {
        if self.host.is_empty() || self.host == "gateway" { lane } else { format!("{lane}@{}", self.host) }
    }

    /// Feeds one observation of gateway host `host` (see [`Recorder::observe`]).
    pub fn observe_on(&mut self, host: &str, at: u64, what: &Observed<'_>, ms_of: &dyn Fn(std::time::Instant) -> u64) {
        if host != self.host {
            let next = self.views.remove(host).unwrap_or_default();
            let prev = std::mem::replace(&mut self.view, next);
            self.views.insert(std::mem::replace(&mut self.host, host.to_owned()), prev);
        }
        self.observe(at, what, ms_of);
    }

    /// The gateway process started again: request ids start again from 0 in the new process
    /// (requests in flight at the restart were aborted), so per-request counts start afresh.
    pub fn started_again(&mut self, at_ms: u64) {
        self.note(at_ms, "gateway started again".into());
        let primary = if self.host.is_empty() || self.host == "gateway" {
            &mut self.view
        } else {
            self.views.entry("gateway".to_owned()).or_default()
        };
        primary.attempts.clear();
        primary.sent.clear();
        primary.ladder.clear();
    }

    /// A config reload may renew or replace connections: their ladders are not followed across it.
    pub fn reloaded(&mut self) {
        self.view.ladder.clear();
        for v in self.views.values_mut() {
            v.ladder.clear();
        }
    }
}
