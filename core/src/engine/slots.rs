//! Connections by slot: each connection id the engine meets gets a place in one table for the
//! engine's life, and the shell resolves its connections' places once per config
//! (`Engine::slot`). A candidate that carries its place is found without hashing its id; one
//! without (or with a place that names another id) is found by id, as before.

use super::candidate::{Candidate, Slot};
use super::memory::Traffic;
use crate::connection::ConnectionState;
use crate::types::same_text;
use rustc_hash::FxBuildHasher;
use std::sync::Arc;

/// Places never freed: a slot stays valid for the engine's life (ids come from config, so the
/// table grows only with the distinct ids ever configured or announced by other replicas).
#[derive(Debug, Clone, Default)]
pub(super) struct Slots {
    of: hashbrown::HashMap<Arc<str>, usize, FxBuildHasher>,
    all: Vec<Place>,
}

#[derive(Debug, Clone)]
struct Place {
    id: Arc<str>,
    /// `None` until the connection has state (and again after an operator reset).
    state: Option<ConnectionState>,
    /// Requests in flight and dispatched.
    traffic: Traffic,
    /// The interned provider and model this connection's last lockout was announced with:
    /// a key failing again for the same model names both without hashing them.
    named: Option<(Arc<str>, Arc<str>)>,
}

/// Whether two ids are equal, without reading their bytes when they are the same string
/// (the shell builds candidates from the ids the engine hands out).
#[inline]
fn same(a: &str, b: &str) -> bool {
    (a.as_ptr() == b.as_ptr() && a.len() == b.len()) || a == b
}

impl Slots {
    /// The place of `id`, made on first use, with the engine's copy of the id.
    pub(super) fn slot(&mut self, id: &str) -> (Slot, Arc<str>) {
        let i = self.index(id);
        // (Past 2^32 - 1 places, which no config reaches, candidates are found by id.)
        (u32::try_from(i).map_or(Slot::NONE, Slot::at), Arc::clone(&self.all[i].id))
    }

    /// The index of `id`'s place, made on first use.
    fn index(&mut self, id: &str) -> usize {
        if let Some(&i) = self.of.get(id) {
            return i;
        }
        let id: Arc<str> = Arc::from(id);
        self.all.push(Place { id: Arc::clone(&id), state: None, traffic: Traffic::default(), named: None });
        self.of.insert(id, self.all.len() - 1);
        self.all.len() - 1
    }

    /// Where `c`'s connection is, if it has a place: its slot when that names it, else by id.
    #[inline]
    fn find(&self, c: &Candidate<'_>) -> Option<usize> {
        let i = c.slot.index();
        match self.all.get(i) {
            Some(p) if same(&p.id, c.connection) => Some(i),
            _ => self.of.get(c.connection).copied(),
        }
    }

    /// `c`'s connection's place, made on first use (for the `_at` accessors).
    #[inline]
    pub(super) fn place(&mut self, c: &Candidate<'_>) -> usize {
        match self.find(c) {
            Some(i) => i,
            None => self.index(c.connection),
        }
    }

    /// The state of `c`'s connection, if it has any.
    #[inline]
    pub(super) fn of(&self, c: &Candidate<'_>) -> Option<&ConnectionState> {
        self.find(c).and_then(|i| self.all[i].state.as_ref())
    }

    /// The state of `c`'s connection, made fresh on first use.
    #[inline]
    pub(super) fn of_mut(&mut self, c: &Candidate<'_>) -> &mut ConnectionState {
        let i = self.place(c);
        self.all[i].state.get_or_insert_with(ConnectionState::default)
    }

    /// The state at place `i` (from [`Self::place`]), made fresh on first use.
    pub(super) fn state_at(&mut self, i: usize) -> &mut ConnectionState {
        self.all[i].state.get_or_insert_with(ConnectionState::default)
    }

    /// One more request in flight and dispatched at place `i` (from [`Self::place`]).
    pub(super) fn dispatched_at(&mut self, i: usize) {
        let t = &mut self.all[i].traffic;
        t.in_flight = t.in_flight.saturating_add(1);
        t.dispatched = t.dispatched.saturating_add(1);
    }

    /// The engine's copy of the id at place `i` (from [`Self::place`]).
    pub(super) fn id_at(&self, i: usize) -> Arc<str> {
        Arc::clone(&self.all[i].id)
    }

    /// The engine's copy of `c`'s connection id (for events), made on first use.
    pub(super) fn id(&mut self, c: &Candidate<'_>) -> Arc<str> {
        let i = self.place(c);
        Arc::clone(&self.all[i].id)
    }

    /// `c`'s provider, connection and model as events name them, `c`'s place being `i` (from
    /// [`Self::place`]): the engine's copies, the provider and model interned by `intern` unless
    /// the place names them already.
    pub(super) fn names_at(
        &mut self,
        i: usize,
        c: &Candidate<'_>,
        mut intern: impl FnMut(&str) -> Arc<str>,
    ) -> (Arc<str>, Arc<str>, Arc<str>) {
        let place = &mut self.all[i];
        let (provider, model) = match &place.named {
            Some((p, m)) if same_text(p, c.provider) && same_text(m, c.model) => (Arc::clone(p), Arc::clone(m)),
            _ => {
                let named = (intern(c.provider), intern(c.model));
                place.named = Some((Arc::clone(&named.0), Arc::clone(&named.1)));
                named
            }
        };
        (provider, Arc::clone(&place.id), model)
    }

    /// The traffic of `c`'s connection (none if it has no place).
    #[inline]
    pub(super) fn traffic(&self, c: &Candidate<'_>) -> Traffic {
        self.find(c).map_or_else(Traffic::default, |i| self.all[i].traffic)
    }

    /// The traffic of `c`'s connection, to change.
    #[inline]
    pub(super) fn traffic_mut(&mut self, c: &Candidate<'_>) -> &mut Traffic {
        let i = self.place(c);
        &mut self.all[i].traffic
    }

    /// The traffic of connection `id` (none if it has no place).
    pub(super) fn traffic_of(&self, id: &str) -> Traffic {
        self.of.get(id).map_or_else(Traffic::default, |&i| self.all[i].traffic)
    }

    /// The state of connection `id`, if it has any.
    pub(super) fn get(&self, id: &str) -> Option<&ConnectionState> {
        self.of.get(id).and_then(|&i| self.all[i].state.as_ref())
    }

    /// The state of connection `id`, made fresh on first use.
    pub(super) fn get_mut(&mut self, id: &str) -> &mut ConnectionState {
        let i = self.index(id);
        self.all[i].state.get_or_insert_with(ConnectionState::default)
    }

    /// Sets the state of connection `id`.
    pub(super) fn insert(&mut self, id: &str, state: ConnectionState) {
        *self.get_mut(id) = state;
    }

    /// Forgets the state of connection `id` (its place stays); what it was.
    pub(super) fn remove(&mut self, id: &str) -> Option<ConnectionState> {
        let i = *self.of.get(id)?;
        self.all[i].state.take()
    }

    /// Every connection with state, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, &ConnectionState)> {
        self.all.iter().filter_map(|p| Some((&*p.id, p.state.as_ref()?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ProviderClass;

    #[test]
    fn a_candidate_is_found_by_its_slot_by_its_id_and_never_by_another_ids_slot() {
        let mut s = Slots::default();
        let (k1, id1) = s.slot("k1");
        let (k2, _) = s.slot("k2");
        assert_eq!(s.slot("k1").0, k1, "a second call gives the same place");
        s.get_mut("k2").record_success();
        let by_slot = Candidate { slot: k1, ..Candidate::new("p", ProviderClass::ApiKey, &id1, "m") };
        assert_eq!(s.find(&by_slot), Some(0));
        let by_id = Candidate::new("p", ProviderClass::ApiKey, "k2", "m");
        assert_eq!(s.find(&by_id), Some(1));
        // A slot that names another id (a stale one) is not trusted: the id decides.
        let stale = Candidate { slot: k1, ..Candidate::new("p", ProviderClass::ApiKey, "k2", "m") };
        assert_eq!(s.find(&stale), Some(1));
        assert!(s.of(&stale).is_some() && s.of(&by_slot).is_none(), "only k2 has state");
        let unknown = Candidate { slot: k2, ..Candidate::new("p", ProviderClass::ApiKey, "k3", "m") };
        assert_eq!(s.find(&unknown), None);
        assert_eq!(s.id(&unknown).as_ref(), "k3", "a new id gets a place of its own");
        assert_eq!(s.find(&unknown), Some(2));
        assert!(s.remove("k2").is_some() && s.get("k2").is_none() && s.find(&by_id) == Some(1));
    }

    #[test]
    fn a_place_names_its_provider_and_model_as_last_interned_and_renames_on_change() {
        let mut s = Slots::default();
        let mut interned = Vec::new();
        let mut intern = |x: &str| {
            interned.push(x.to_owned());
            Arc::<str>::from(x)
        };
        let c = Candidate::new("p", ProviderClass::ApiKey, "k1", "m1");
        let mut names = |s: &mut Slots, c: &Candidate<'_>| {
            let i = s.place(c);
            s.names_at(i, c, &mut intern)
        };
        let (p, id, m) = names(&mut s, &c);
        assert_eq!((&*p, &*id, &*m), ("p", "k1", "m1"));
        let again = names(&mut s, &c);
        assert!(Arc::ptr_eq(&again.0, &p) && Arc::ptr_eq(&again.2, &m), "the same names, not interned again");
        let other = Candidate::new("p", ProviderClass::ApiKey, "k1", "m2");
        let (_, _, m2) = names(&mut s, &other);
        assert_eq!(&*m2, "m2", "another model is named as itself");
        let moved = Candidate::new("q", ProviderClass::ApiKey, "k1", "m2");
        assert_eq!(&*names(&mut s, &moved).0, "q", "another provider is named as itself");
        assert_eq!(interned, ["p", "m1", "p", "m2", "q", "m2"]);
    }
}
