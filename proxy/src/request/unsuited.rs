//! A credential that refused this kind of client lately (a Claude subscription's token to a
//! client that is not Claude Code) is skipped for that kind while another connection of the
//! request can serve it; the refusal penalised nothing, so a request it alone can serve still
//! asks it, and hears the upstream's own words.

use crate::request::exchange::{Inbound, api_name};
use crate::request::resolve::Plan;
use crate::state::gateway::Gateway;
use ferroute_core::tried::Tried;
use hyper_util::client::legacy::connect::Connect;
use std::time::Instant;

/// The kind of client a request comes from: its API and its `User-Agent`'s product
/// (`messages:claude-cli`, `chat:openai`).
pub fn client_kind(inbound: &Inbound) -> String {
    let product = inbound
        .headers
        .user_agent
        .as_ref()
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split(['/', ' ']).next())
        .unwrap_or("")
        .chars()
        .take(40)
        .collect::<String>()
        .to_ascii_lowercase();
    format!("{}:{product}", api_name(inbound.api))
}

/// Marks the connections that refused `kind` lately as tried, when another of the plan's
/// connections has not.
pub fn skip_refusing<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    plan: &Plan,
    kind: &str,
    tried: &mut Tried,
    now: Instant,
) {
    gw.with_unsuited(|memory| {
        if memory.is_empty() {
            return;
        }
        let refusing = |t: &crate::request::resolve::Target| memory.refuses(now, &gw.parts(t).1.id, kind);
        if plan.targets.iter().all(refusing) {
            return;
        }
        for t in plan.targets.iter().filter(|t| refusing(t)) {
            tried.exhaust(&gw.parts(t).1.id);
        }
    });
}

/// `connection` refused a client of `kind`.
pub fn note<C: Connect + Clone + Send + Sync + 'static>(gw: &Gateway<C>, connection: &str, kind: &str, now: Instant) {
    gw.with_unsuited(|memory| memory.note(now, connection, kind));
}
