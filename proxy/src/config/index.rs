//! Lookups into a config, built once at load: providers by id, each provider's connections,
//! and the first provider listing each model.

use super::connection::ConnectionConfig;
use super::provider::ProviderConfig;
use std::collections::BTreeMap;

/// Lookups by id, built once per config.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Index {
    providers: BTreeMap<String, usize>,
    connections_of: Vec<Vec<usize>>,
    /// Each listed model's first provider.
    models: BTreeMap<String, usize>,
}

impl Index {
    pub(super) fn new(providers: &[ProviderConfig], connections: &[ConnectionConfig]) -> Index {
        let ids: BTreeMap<String, usize> = providers.iter().enumerate().rev().map(|(i, p)| (p.id.clone(), i)).collect();
        let mut connections_of = vec![Vec::new(); providers.len()];
        for (ci, c) in connections.iter().enumerate() {
            if let Some(&pi) = ids.get(&c.provider) {
                connections_of[pi].push(ci);
            }
        }
        let mut models = BTreeMap::new();
        for (i, p) in providers.iter().enumerate() {
            for m in &p.models {
                models.entry(m.clone()).or_insert(i);
            }
        }
        Index { providers: ids, connections_of, models }
    }

    /// Where the provider with this id is in `providers` (the first, should ids repeat).
    pub(super) fn provider_position(&self, providers: &[ProviderConfig], id: &str) -> Option<usize> {
        self.providers.get(id).copied().filter(|&i| providers.get(i).is_some_and(|p| p.id == id))
    }

    /// The positions of a provider's connections, in config order.
    pub(super) fn connections_of(&self, provider: usize) -> &[usize] {
        self.connections_of.get(provider).map_or(&[], Vec::as_slice)
    }

    /// Where the first provider that lists `model` is in `providers`.
    pub(super) fn provider_serving(&self, providers: &[ProviderConfig], model: &str) -> Option<usize> {
        let lists = |i: usize| providers.get(i).is_some_and(|p| p.models.iter().any(|m| m == model));
        match self.models.get(model) {
            Some(&i) if lists(i) => Some(i),
            // Only providers changed after the index was built could get here.
            Some(_) => providers.iter().position(|p| p.models.iter().any(|m| m == model)),
            None => None,
        }
    }
}
