//! `[[combos]]` and `[emergency_fallback]`: combo targets as strings or tables, nesting and
//! cycle checks, and the emergency target (M15, M16).

use super::connection::ConnectionConfig;
use super::error::err;
use super::provider::ProviderConfig;
use ferroute_core::settings::FieldError;
use ferroute_core::strategy::Strategy;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// `[[combos]]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ComboConfig {
    /// Name clients ask for as `model`.
    pub name: String,
    /// One of the M15 strategies (`priority` by default), or a multi-call one (`fusion`,
    /// `pipeline`).
    pub strategy: String,
    /// Targets in order.
    pub targets: Vec<ComboTarget>,
    /// `fusion`: the `provider/model` that synthesises the panel's answers.
    pub judge: Option<String>,
    /// How many targets the file lists (unreadable ones are reported and left out).
    #[serde(skip)]
    pub declared_targets: usize,
}

/// One combo target: `provider/model` or another combo's name, written as a string or as an
/// inline table `{ target = "q/m2", weight = 3, connection = "q-1", cost = 0.5,
/// context_window = 200000 }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComboTarget {
    /// `provider/model` or a combo name.
    pub target: String,
    /// Weight for `weighted` (default 1, 0 – 1000).
    #[serde(default = "one")]
    pub weight: u32,
    /// Pin: only this connection serves the target.
    #[serde(default)]
    pub connection: Option<String>,
    /// Declared cost (any unit, lower is cheaper) for `cost-optimized` and `auto`.
    #[serde(default)]
    pub cost: Option<f64>,
    /// Declared context window in tokens for `context-optimized`.
    #[serde(default)]
    pub context_window: Option<u64>,
    /// Its position in the file's `targets` list (for error messages).
    #[serde(skip)]
    pub position: usize,
}

fn one() -> u32 {
    1
}

/// `[[combos]]` as written: targets are strings or tables, checked field by field.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCombo {
    pub(super) name: String,
    #[serde(default = "default_strategy")]
    pub(super) strategy: String,
    #[serde(default)]
    pub(super) targets: Vec<toml::Value>,
    #[serde(default)]
    pub(super) judge: Option<String>,
}

/// `[emergency_fallback]` (M16): a target used once when every target of a combo failed or
/// is excluded. Operators switch it at runtime (`POST /api/resilience/emergency-fallback`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct EmergencyConfig {
    /// `provider/model`.
    pub target: Option<String>,
    /// Whether it starts switched on (off by default: an emergency target is a deliberate act).
    pub enabled: bool,
}

/// Multi-call strategies Ferroute runs: several upstream calls per request.
pub const MULTI_CALL: [&str; 2] = ["fusion", "pipeline"];

/// Deepest combo nesting (a combo naming a combo naming a combo).
pub const MAX_COMBO_DEPTH: usize = 3;

fn default_strategy() -> String {
    "priority".into()
}

/// Checks every combo and the emergency target, naming each problem's field.
/// What combo validation reads of the config.
pub(super) struct Sections<'a> {
    pub(super) combos: &'a [ComboConfig],
    pub(super) providers: &'a [ProviderConfig],
    pub(super) connections: &'a [ConnectionConfig],
    pub(super) emergency_fallback: &'a EmergencyConfig,
}

impl Sections<'_> {
    fn provider(&self, id: &str) -> Option<&ProviderConfig> {
        self.providers.iter().find(|p| p.id == id)
    }
}

pub(super) fn validate(cfg: &Sections<'_>, errors: &mut Vec<FieldError>) {
    let mut combos = BTreeSet::new();
    for (i, c) in cfg.combos.iter().enumerate() {
        let f = |x: &str| format!("combos[{i}].{x}");
        if c.name.trim().is_empty() {
            errors.push(err(f("name"), "must not be empty"));
        }
        if !combos.insert(c.name.clone()) {
            errors.push(err(f("name"), format!("duplicate combo name {:?}", c.name)));
        }
        if c.strategy == "context-relay" {
            errors.push(err(
                f("strategy"),
                "\"context-relay\" (handing a conversation to the next account with a summary) is not available; use a routing strategy, fusion or pipeline",
            ));
        } else if MULTI_CALL.contains(&c.strategy.as_str()) {
            if c.targets.len() < 2 && c.declared_targets < 2 {
                errors.push(err(f("targets"), format!("{} needs at least two targets", c.strategy)));
            }
            if c.targets.iter().any(|t| cfg.combos.iter().any(|x| x.name == t.target)) {
                errors.push(err(f("targets"), format!("{} targets must be provider/model, not combos", c.strategy)));
            }
        } else if !Strategy::parse(&c.strategy).is_some_and(|s| Strategy::ALL.contains(&s)) {
            errors.push(err(
                f("strategy"),
                format!(
                    "{:?} is not a strategy ({}, or the multi-call fusion, pipeline)",
                    c.strategy,
                    Strategy::ALL.map(|s| s.as_str()).join(", ")
                ),
            ));
        }
        match (&c.judge, c.strategy.as_str()) {
            (None, "fusion") => {
                errors.push(err(f("judge"), "fusion needs a judge: the provider/model that writes the answer"))
            }
            (Some(j), "fusion") => match j.split_once('/') {
                Some((p, m)) if !m.is_empty() && cfg.provider(p).is_some() => {}
                _ => errors.push(err(f("judge"), format!("{j:?} is not provider/model with a configured provider"))),
            },
            (Some(_), _) => errors.push(err(f("judge"), "only a fusion combo has a judge")),
            (None, _) => {}
        }
        if MULTI_CALL.contains(&c.strategy.as_str())
            && cfg.combos.iter().any(|x| x.targets.iter().any(|t| t.target == c.name))
        {
            errors.push(err(f("name"), format!("a {} combo cannot be nested in another combo", c.strategy)));
        }
        if c.targets.is_empty() && c.declared_targets == 0 {
            errors.push(err(f("targets"), "must list at least one provider/model or combo"));
        }
        for t in &c.targets {
            let j = t.position;
            let f = |x: &str| format!("combos[{i}].targets[{j}]{x}");
            let nested = cfg.combos.iter().any(|x| x.name == t.target);
            if nested {
                if t.connection.is_some() {
                    errors.push(err(f(".connection"), "a combo target cannot pin a connection"));
                }
            } else {
                match t.target.split_once('/') {
                    Some((p, m)) if !m.is_empty() && cfg.provider(p).is_some() => {
                        if let Some(pin) = &t.connection
                            && !cfg.connections.iter().any(|x| &x.id == pin && x.provider == p)
                        {
                            errors
                                .push(err(f(".connection"), format!("{pin:?} is not a connection of provider {p:?}")));
                        }
                    }
                    _ => errors.push(err(
                        f(""),
                        format!("{:?} is neither provider/model with a configured provider nor a combo", t.target),
                    )),
                }
            }
            if t.weight > 1000 {
                errors.push(err(f(".weight"), "is out of range (allowed 0..=1000)"));
            }
            if t.cost.is_some_and(|x| !x.is_finite() || x < 0.0) {
                errors.push(err(f(".cost"), "must be a finite number, at least 0"));
            }
            if t.context_window == Some(0) {
                errors.push(err(f(".context_window"), "must be positive when set"));
            }
        }
        match combo_depth(cfg, &c.name, &mut Vec::new()) {
            Err(cycle) => {
                errors.push(err(f("targets"), format!("combos name each other in a cycle: {}", cycle.join(" -> "))))
            }
            Ok(d) if d > MAX_COMBO_DEPTH => {
                errors.push(err(f("targets"), format!("combos nest {d} deep; at most {MAX_COMBO_DEPTH} are allowed")))
            }
            Ok(_) => {}
        }
    }
    if let Some(t) = &cfg.emergency_fallback.target {
        match t.split_once('/') {
            Some((p, m)) if !m.is_empty() && cfg.provider(p).is_some() => {}
            _ => errors.push(err(
                "emergency_fallback.target",
                format!("{t:?} is not provider/model with a configured provider"),
            )),
        }
    } else if cfg.emergency_fallback.enabled {
        errors.push(err("emergency_fallback.enabled", "needs a target"));
    }
}

/// How deep a combo nests (1: only provider targets); `Err` names a cycle.
fn combo_depth(cfg: &Sections<'_>, name: &str, path: &mut Vec<String>) -> Result<usize, Vec<String>> {
    if path.iter().any(|p| p == name) {
        let mut cycle = path.clone();
        cycle.push(name.to_owned());
        return Err(cycle);
    }
    let Some(c) = cfg.combos.iter().find(|c| c.name == name) else { return Ok(0) };
    path.push(name.to_owned());
    let mut deepest = 0;
    for t in &c.targets {
        if cfg.combos.iter().any(|x| x.name == t.target) {
            deepest = deepest.max(combo_depth(cfg, &t.target, path)?);
        }
    }
    path.pop();
    Ok(deepest + 1)
}

/// Reads one `[[combos]]` entry; targets that are neither a string nor a table are named.
pub(super) fn combo(i: usize, raw: &RawCombo, errors: &mut Vec<FieldError>) -> ComboConfig {
    let mut targets = Vec::new();
    for (j, v) in raw.targets.iter().enumerate() {
        match v {
            toml::Value::String(s) => targets.push(ComboTarget {
                target: s.clone(),
                weight: 1,
                connection: None,
                cost: None,
                context_window: None,
                position: j,
            }),
            toml::Value::Table(_) => match v.clone().try_into::<ComboTarget>() {
                Ok(t) => targets.push(ComboTarget { position: j, ..t }),
                Err(e) => errors.push(err(format!("combos[{i}].targets[{j}]"), e.to_string().trim().to_owned())),
            },
            other => errors.push(err(
                format!("combos[{i}].targets[{j}]"),
                format!("must be \"provider/model\" or a table with `target`, not a {}", other.type_str()),
            )),
        }
    }
    ComboConfig {
        name: raw.name.clone(),
        strategy: raw.strategy.clone(),
        targets,
        judge: raw.judge.clone(),
        declared_targets: raw.targets.len(),
    }
}
