//! What the dashboard shows of the recent past, kept in memory with fixed bounds: answers per
//! provider and minute ([`rates`]), the last hour of state changes ([`timeline`]) and each
//! combo's last request paths ([`paths`]). Production and the simulation keep it alike: it is
//! fed from the request path and the engine's events.

pub mod paths;
pub mod rates;
pub mod timeline;

use std::sync::{Mutex, MutexGuard};

/// The three records.
#[derive(Debug, Default)]
pub struct History {
    rates: Mutex<rates::Rates>,
    timeline: Mutex<timeline::Timeline>,
    paths: Mutex<paths::Paths>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each update leaves the record consistent: a poisoned lock is still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl History {
    /// The answers per provider and minute.
    pub fn rates(&self) -> MutexGuard<'_, rates::Rates> {
        lock(&self.rates)
    }

    /// The last hour of state changes.
    pub fn timeline(&self) -> MutexGuard<'_, timeline::Timeline> {
        lock(&self.timeline)
    }

    /// The combos' last request paths.
    pub fn paths(&self) -> MutexGuard<'_, paths::Paths> {
        lock(&self.paths)
    }
}
