//! A plan's targets as the core's candidates.

use super::Gateway;
use crate::config::{Config, ConnectionConfig, ProviderConfig};
use crate::request::resolve::{Plan, Target};
use ferroute_core::engine::{Candidate, Strategy, Traits};
use hyper_util::client::legacy::connect::Connect;

/// The requests connection `c` may run at once, when the M7 gate holds it to a number.
fn gate(config: &Config, c: &ConnectionConfig) -> Option<u32> {
    c.max_concurrent.filter(|_| config.resilience.quota_share.enabled)
}

impl<C: Connect + Clone + Send + Sync + 'static> Gateway<C> {
    /// Each provider's connection strategy, and whether its keys can be tried in turn: every
    /// one of them may be, as the core judges a key (`Traits::tried_in_turn`).
    pub(super) fn strategies(config: &Config) -> Vec<(Strategy, bool)> {
        (0..config.providers.len())
            .map(|pi| {
                let strategy = config.providers[pi].connection_strategy();
                let in_turn = config.connections_of(pi).iter().all(|&ci| {
                    let max_concurrent = gate(config, &config.connections[ci]);
                    Traits { connection_strategy: strategy, max_concurrent, ..Traits::default() }.tried_in_turn()
                });
                (strategy, in_turn)
            })
            .collect()
    }

    /// The provider and connection of a target.
    pub fn parts(&self, t: &Target) -> (&ProviderConfig, &ConnectionConfig) {
        (&self.config.providers[t.provider], &self.config.connections[t.connection])
    }

    /// A core candidate for a target.
    pub fn candidate<'a>(&'a self, t: &'a Target) -> Candidate<'a> {
        let family = self.parts(t).0.quota_family(&t.model);
        self.candidate_of_family(t, family)
    }

    fn candidate_of_family<'a>(&'a self, t: &'a Target, family: Option<&'a str>) -> Candidate<'a> {
        let (p, c) = self.parts(t);
        let (slot, id) = &self.connection_keys[t.connection];
        Candidate {
            provider: &p.id,
            class: p.class,
            connection: id,
            slot: *slot,
            model: &t.model,
            family,
            traits: Traits {
                target: t.target_index,
                weight: t.weight,
                cost: t.cost,
                context_window: t.context_window,
                connection_strategy: self.connection_strategies[t.provider].0,
                connection_weight: c.weight.unwrap_or(1),
                max_concurrent: gate(&self.config, c),
                daily_reset: self.daily_resets[t.provider],
                format: p.format,
            },
        }
    }

    /// Whether the core may try `plan`'s keys in turn, building each only when it checks it
    /// (`Engine::select_keys_in_turn`): one provider's model, not a combo, whose keys are tried
    /// in turn, for a request without a session.
    pub fn in_turn(&self, plan: &Plan, session: bool) -> bool {
        !plan.combo
            && plan.multi.is_none()
            && !session
            && plan.targets.first().is_some_and(|t| self.connection_strategies[t.provider].1)
    }

    /// The core candidates of a plan's targets, in order. A target's connections share its
    /// model, so its quota family is looked up once for the run of them.
    pub fn candidates<'a>(&'a self, plan: &'a Plan) -> Vec<Candidate<'a>> {
        let mut last: Option<(&'a Target, Option<&'a str>)> = None;
        plan.targets
            .iter()
            .map(|t| {
                let family = match last {
                    Some((prev, family))
                        if prev.provider == t.provider && std::sync::Arc::ptr_eq(&prev.model, &t.model) =>
                    {
                        family
                    }
                    _ => self.parts(t).0.quota_family(&t.model),
                };
                last = Some((t, family));
                self.candidate_of_family(t, family)
            })
            .collect()
    }
}
