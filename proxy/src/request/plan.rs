//! Planning a request: resolve its `model` into targets (a combo, `provider/model` or a bare
//! model), keep the connections the client key may use, prepare the request for each provider
//! format the targets speak, and note what strategies read of the request.

use crate::config::Format;
use crate::edge::auth::Client;
use crate::edge::errors::{ProxyError, Source};
use crate::request::exchange::{self, Inbound, Prepared, untranslatable};
use crate::request::resolve::{Plan, Target};
use crate::state::gateway::Gateway;
use crate::translate::Untranslatable;
use ferroute_core::strategy::{Ask, Strategy, stable_hash};
use hyper_util::client::legacy::connect::Connect;
use serde_json::Value;

/// Prepared requests by provider format.
pub type Preps = [Option<Prepared>; 4];

/// The slot of a format in [`Preps`].
pub fn slot(format: Format) -> usize {
    match format {
        Format::Openai => 0,
        Format::Anthropic => 1,
        Format::Responses => 2,
        Format::Gemini => 3,
    }
}

/// Resolves, filters and prepares. An unknown model is a 404 `model_not_found`; a combo or
/// provider none of whose targets has a connection is a 404 `no_executable_targets`; a key
/// allowed none of the connections is a 403; a leased request (`only`) whose connection
/// serves none of the targets is a 409 `LEASE_CONNECTION_MISMATCH`.
pub fn plan<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    model: &str,
    client: &Client,
    inbound: &Inbound,
    only: Option<&str>,
) -> Result<(Plan, Preps, Ask), ProxyError> {
    let plan = gw.resolve(model).map_err(|msg| ProxyError::new(Source::Downstream, 404, "model_not_found", msg))?;
    if plan.targets.is_empty() {
        return Err(crate::request::refuse::no_executable(&plan));
    }
    let plan = if client.may_use_all() {
        plan
    } else {
        Plan {
            targets: plan
                .targets
                .iter()
                .filter(|t| client.may_use(&gw.config.connections[t.connection].id))
                .cloned()
                .collect(),
            ..plan
        }
    };
    if plan.targets.is_empty() {
        return Err(ProxyError::new(
            Source::Downstream,
            403,
            "no_allowed_connections",
            format!("this key may not use any connection serving {model:?}"),
        ));
    }
    let plan = match only {
        Some(leased) => {
            let targets: std::sync::Arc<[_]> =
                plan.targets.iter().filter(|t| gw.config.connections[t.connection].id == leased).cloned().collect();
            if targets.is_empty() {
                return Err(crate::sessions::leases::refuse(
                    ferroute_core::session::lease::LeaseError::ConnectionMismatch,
                ));
            }
            Plan { targets, ..plan }
        }
        None => plan,
    };
    let (plan, preps) = prepare_all(gw, plan, inbound)?;
    let ask = ask(plan.strategy, inbound);
    Ok((plan, preps, ask))
}

/// What strategies read of the request: the tools it offers (always; tool limits apply to
/// every strategy), and only for the strategies that use them, its estimated size (about 4
/// bytes a token) and a hash of its prefix (system prompt and first user turn).
pub fn ask(strategy: Strategy, inbound: &Inbound) -> Ask {
    let tools = inbound.tools.min(u32::MAX as usize) as u32;
    let context_tokens = if strategy == Strategy::ContextOptimized {
        let bytes = match &inbound.raw {
            Some(raw) => raw.len(),
            None => inbound.body.get().to_string().len(),
        };
        (bytes / 4) as u64
    } else {
        0
    };
    let prefix_hash = if strategy == Strategy::CacheOptimized { prefix_hash(inbound.body.get()) } else { 0 };
    Ask { context_tokens, prefix_hash, tools }
}

/// The system prompt (Messages `system`, or chat `system`/`developer` turns before the first
/// user turn) and the first user turn, hashed: the part of a conversation a provider's prompt
/// cache keys on, the same across the turns of one session.
pub fn prefix_hash(body: &Value) -> u64 {
    let mut text = String::new();
    if let Some(system) = body.get("system") {
        text.push_str(&system.to_string());
    }
    if let Some(messages) = body.get("messages").and_then(Value::as_array) {
        for m in messages {
            let role = m.get("role").and_then(Value::as_str).unwrap_or("");
            if let Some(content) = m.get("content") {
                text.push_str(role);
                text.push_str(&content.to_string());
            }
            if role == "user" {
                break;
            }
        }
    }
    stable_hash(text.as_bytes())
}

/// The request prepared for each provider format the plan uses; targets whose format cannot
/// express the request are left out, and when none is left the request is refused naming the
/// feature.
pub fn prepare_all<C: Connect + Clone + Send + Sync + 'static>(
    gw: &Gateway<C>,
    plan: Plan,
    inbound: &Inbound,
) -> Result<(Plan, Preps), ProxyError> {
    let mut preps: Preps = [None, None, None, None];
    let mut refused: Option<Untranslatable> = None;
    // The formats the targets speak, in one pass (a target's connections share its provider;
    // a plan that is no combo is one provider's, so its first target says it).
    let mut used = [false; 4];
    let mut last_provider = usize::MAX;
    debug_assert!(plan.combo || plan.targets.windows(2).all(|w| w[0].provider == w[1].provider));
    let speaking = if plan.combo { &plan.targets[..] } else { &plan.targets[..plan.targets.len().min(1)] };
    for t in speaking {
        if t.provider != last_provider {
            last_provider = t.provider;
            used[slot(gw.parts(t).0.format)] = true;
        }
    }
    for format in Format::ALL {
        if !used[slot(format)] {
            continue;
        }
        match exchange::prepare(inbound, format) {
            Ok(p) => preps[slot(format)] = Some(p),
            Err(u) => {
                tracing::info!(format = ?format, feature = %u.feature, "request cannot be translated; skipping those targets");
                refused.get_or_insert(u);
            }
        }
    }
    if refused.is_none() {
        // Every target's format could express the request: all are kept as they are.
        return Ok((plan, preps));
    }
    let targets: std::sync::Arc<[Target]> =
        plan.targets.iter().filter(|t| preps[slot(gw.parts(t).0.format)].is_some()).cloned().collect();
    if targets.is_empty() {
        return Err(untranslatable(
            refused.unwrap_or_else(|| Untranslatable::new("model", "no target can serve this request")),
        ));
    }
    Ok((Plan { targets, ..plan }, preps))
}
