//! How many calls a scripted upstream is answering at once, per route, and the most there ever
//! were (a call counts from its arrival until its response leaves the handler).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Per route: calls being answered now, and the most at once so far.
pub(crate) type Counts = Arc<Mutex<BTreeMap<String, (u64, u64)>>>;

/// The most calls for `model` (`*`: for any one route) ever answered at once.
pub(crate) fn peak(counts: &Counts, model: &str) -> u64 {
    counts
        .lock()
        .map(|m| m.iter().filter(|(r, _)| model == "*" || *r == model).map(|(_, (_, peak))| *peak).max().unwrap_or(0))
        .unwrap_or(0)
}

/// One call being answered: counted in its route's in-flight figure until dropped.
pub(crate) struct InFlight {
    map: Counts,
    route: String,
}

impl InFlight {
    pub(crate) fn enter(map: &Counts, route: &str) -> Self {
        if let Ok(mut m) = map.lock() {
            let (now, peak) = m.entry(route.to_owned()).or_insert((0, 0));
            *now += 1;
            *peak = (*peak).max(*now);
        }
        InFlight { map: Arc::clone(map), route: route.to_owned() }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Ok(mut m) = self.map.lock()
            && let Some((now, _)) = m.get_mut(&self.route)
        {
            *now = now.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_is_the_most_calls_at_once() {
        let counts = Counts::default();
        let a = InFlight::enter(&counts, "m");
        let b = InFlight::enter(&counts, "m");
        drop(a);
        let _c = InFlight::enter(&counts, "m");
        let _d = InFlight::enter(&counts, "other");
        drop(b);
        assert_eq!(peak(&counts, "m"), 2);
        assert_eq!(peak(&counts, "other"), 1);
        assert_eq!(peak(&counts, "*"), 2);
        assert_eq!(peak(&counts, "none"), 0);
    }
}
