//! Resolving a request's `model` into targets: a combo (nested combos flattened, a pinned
//! connection kept alone), `provider/model`, or a bare model a provider lists; and the
//! emergency target (M16).

use crate::config::{ComboConfig, Config, MAX_COMBO_DEPTH};
use ferroute_core::engine::Strategy;
use std::sync::Arc;

/// One routable target of a request.
#[derive(Debug, Clone)]
pub struct Target {
    /// Index into `config.providers`.
    pub provider: usize,
    /// Index into `config.connections`.
    pub connection: usize,
    /// The model sent upstream (shared by the target's connections).
    pub model: Arc<str>,
    /// `provider/model`, as reports name the target (shared likewise).
    pub name: Arc<str>,
    /// Position of the combo target it came from (0 for direct requests); nested combos
    /// are flattened, so this counts the leaves.
    pub target_index: usize,
    /// The target's weight (a nested combo's targets: the product along the path).
    pub weight: u32,
    /// Declared cost.
    pub cost: Option<f64>,
    /// Declared context window.
    pub context_window: Option<u64>,
}

impl Target {
    /// A target of a direct request (or the emergency target): one provider's model, no
    /// declared traits.
    fn direct(provider: usize, connection: usize, (model, name): (&Arc<str>, &Arc<str>)) -> Self {
        Target {
            provider,
            connection,
            model: model.clone(),
            name: name.clone(),
            target_index: 0,
            weight: 1,
            cost: None,
            context_window: None,
        }
    }
}

/// How a request's `model` resolved.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Candidates in order (shared: a provider's listed model keeps its targets per config).
    pub targets: Arc<[Target]>,
    /// Strategy.
    pub strategy: Strategy,
    /// Whether it is a combo. A plan that is no combo is one provider's model: every target
    /// is one of that provider's connections.
    pub combo: bool,
    /// Round-robin cursor name.
    pub key: String,
    /// Targets (provider/model leaves) the combo names, connections or not.
    pub pool: Arc<[String]>,
    /// A multi-call combo: how its targets are called.
    pub multi: Option<MultiCall>,
}

/// The multi-call strategies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiCall {
    /// The targets answer in parallel; `judge` (`provider/model`) writes one answer from theirs.
    Fusion {
        /// The judge.
        judge: String,
    },
    /// The targets in sequence, each improving the previous one's answer.
    Pipeline,
}

/// Resolves a request's `model`: a combo name, `provider/model`, or a bare model (the
/// first provider that lists it). Providers of every format are used: the request is
/// translated where the formats differ.
pub fn resolve(cfg: &Config, model: &str) -> Result<Plan, String> {
    resolve_with(cfg, model, &[])
}

/// A provider's listed models with their targets and pool, by provider index: kept per
/// config, so that a request for a listed model shares them instead of building them.
pub type Listed = [std::collections::BTreeMap<Box<str>, Listing>];

/// One listed model of a provider: its targets (one per connection) and its pool.
#[derive(Debug, Clone)]
pub struct Listing {
    targets: Arc<[Target]>,
    pool: Arc<[String]>,
}

/// Every listed model of every provider (see [`Listed`]).
pub fn listed(cfg: &Config) -> Vec<std::collections::BTreeMap<Box<str>, Listing>> {
    (0..cfg.providers.len())
        .map(|pi| cfg.providers[pi].models.iter().map(|m| (Box::from(m.as_str()), Listing::of(cfg, pi, m))).collect())
        .collect()
}

impl Listing {
    /// Provider `pi`'s `model`: a target per connection, and the pool of its one leaf, both
    /// named `provider/model` once.
    fn of(cfg: &Config, pi: usize, model: &str) -> Listing {
        let shared: Arc<str> = Arc::from(model);
        let name = format!("{}/{model}", cfg.providers[pi].id);
        let named: Arc<str> = Arc::from(name.as_str());
        let targets = connections_of(cfg, pi).map(|ci| Target::direct(pi, ci, (&shared, &named))).collect();
        Listing { targets, pool: Arc::from([name]) }
    }
}

/// [`resolve`], a listed model's targets taken from `listed` (built once per config).
pub fn resolve_with(cfg: &Config, model: &str, listed: &Listed) -> Result<Plan, String> {
    if let Some(combo) = cfg.combos.iter().find(|c| c.name == model) {
        return Ok(combo_plan(cfg, combo));
    }
    let (pi, upstream_model) = match model.split_once('/') {
        Some((p, m)) => match cfg.provider_position(p) {
            Some(pi) if !m.trim().is_empty() => (pi, m),
            Some(_) => return Err(format!("model {model:?} names provider {p:?} but no model after the '/'")),
            None => bare(cfg, model)?,
        },
        None => bare(cfg, model)?,
    };
    let Listing { targets, pool } = match listed.get(pi).and_then(|models| models.get(upstream_model)) {
        Some(l) => l.clone(),
        None => Listing::of(cfg, pi, upstream_model),
    };
    Ok(Plan { targets, strategy: Strategy::Priority, combo: false, key: model.to_owned(), pool, multi: None })
}

/// A bare model (or one whose prefix is no provider's id): the first provider that lists it.
fn bare<'m>(cfg: &Config, model: &'m str) -> Result<(usize, &'m str), String> {
    match cfg.provider_serving(model) {
        Some(pi) => Ok((pi, model)),
        None => Err(format!(
            "model {model:?} is not served here: use provider/model, a combo name, or a model a provider lists (GET /v1/models)"
        )),
    }
}

fn combo_plan(cfg: &Config, combo: &ComboConfig) -> Plan {
    let mut plan = Plan {
        targets: Arc::from([]),
        strategy: Strategy::parse(&combo.strategy).unwrap_or_default(),
        combo: true,
        key: combo.name.clone(),
        pool: Arc::from([]),
        multi: match (combo.strategy.as_str(), &combo.judge) {
            ("fusion", Some(judge)) => Some(MultiCall::Fusion { judge: judge.clone() }),
            ("pipeline", _) => Some(MultiCall::Pipeline),
            _ => None,
        },
    };
    let (mut targets, mut pool) = (Vec::new(), Vec::new());
    flatten(cfg, combo, 1, 1, &mut pool, &mut targets);
    plan.targets = targets.into();
    plan.pool = pool.into();
    plan
}

/// Appends a combo's targets to `targets` and its leaves to `pool`, a nested combo's targets in its own listed order
/// at the place it is named (validation refused cycles and nesting past the limit; the
/// depth check here only guards the recursion).
fn flatten(
    cfg: &Config,
    combo: &ComboConfig,
    depth: usize,
    weight: u32,
    pool: &mut Vec<String>,
    targets: &mut Vec<Target>,
) {
    for t in &combo.targets {
        let w = weight.saturating_mul(t.weight);
        if let Some(inner) = cfg.combos.iter().find(|c| c.name == t.target) {
            if depth < MAX_COMBO_DEPTH {
                flatten(cfg, inner, depth + 1, w, pool, targets);
            }
            continue;
        }
        let Some((p, m)) = t.target.split_once('/') else { continue };
        let Some(pi) = cfg.provider_position(p) else { continue };
        let index = pool.len();
        pool.push(t.target.clone());
        let pinned = t.connection.as_deref();
        let model: Arc<str> = Arc::from(m);
        let name: Arc<str> = Arc::from(t.target.as_str());
        targets.extend(
            connections_of(cfg, pi).filter(|ci| pinned.is_none_or(|pin| cfg.connections[*ci].id == pin)).map(|ci| {
                Target {
                    provider: pi,
                    connection: ci,
                    model: model.clone(),
                    name: name.clone(),
                    target_index: index,
                    weight: w,
                    cost: t.cost,
                    context_window: t.context_window,
                }
            }),
        );
    }
}

fn connections_of(cfg: &Config, provider: usize) -> impl Iterator<Item = usize> + '_ {
    cfg.connections_of(provider).iter().copied()
}

/// M16: the emergency target as a plan of its own, when one is configured.
pub fn emergency(cfg: &Config, key: &str) -> Option<Plan> {
    let target = cfg.emergency_fallback.target.as_deref()?;
    let (p, m) = target.split_once('/')?;
    let Listing { targets, pool } = Listing::of(cfg, cfg.provider_position(p)?, m);
    Some(Plan {
        targets,
        strategy: Strategy::Priority,
        combo: true,
        key: format!("{key}#emergency"),
        pool,
        multi: None,
    })
}
