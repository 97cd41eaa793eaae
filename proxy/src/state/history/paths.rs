//! The last requests of each combo with the path each took: which target and connection every
//! attempt used and why the request moved on (the dashboard's combos view).

use std::collections::{BTreeMap, VecDeque};

/// Requests kept per combo.
pub const PER_COMBO: usize = 20;
/// Combos kept (combos come from the config; this bounds a config that names very many).
const MAX_COMBOS: usize = 1024;

/// One step of a request's path.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Step {
    /// `provider/model` (empty for a step that is not an attempt, such as a wait).
    pub target: String,
    /// The connection (empty when none was used).
    pub connection: String,
    /// What happened: `served`, `429 rate_limit`, `excluded while queued`, `waited 1500 ms`, …
    pub result: String,
}

/// One request's path.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Path {
    /// When it was answered (RFC 3339).
    pub at: String,
    /// The status it was answered with.
    pub status: u16,
    /// Its steps, in order.
    pub steps: Vec<Step>,
}

/// The paths, newest last.
#[derive(Debug, Default)]
pub struct Paths {
    by_combo: BTreeMap<String, VecDeque<Path>>,
}

impl Paths {
    /// Keeps `path` as the newest of `combo`'s.
    pub fn add(&mut self, combo: &str, path: Path) {
        if !self.by_combo.contains_key(combo) {
            if self.by_combo.len() >= MAX_COMBOS {
                return;
            }
            self.by_combo.insert(combo.to_owned(), VecDeque::new());
        }
        let Some(paths) = self.by_combo.get_mut(combo) else { return };
        paths.push_back(path);
        if paths.len() > PER_COMBO {
            paths.pop_front();
        }
    }

    /// `combo`'s kept paths, newest first.
    pub fn of(&self, combo: &str) -> Vec<Path> {
        self.by_combo.get(combo).map(|p| p.iter().rev().cloned().collect()).unwrap_or_default()
    }

    /// Forgets the combos not in `keep` (after a reload removed some).
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.by_combo.retain(|c, _| keep(c));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(status: u16) -> Path {
        Path { at: String::new(), status, steps: Vec::new() }
    }

    #[test]
    fn newest_first_and_bounded() {
        let mut p = Paths::default();
        for s in 0..30u16 {
            p.add("team", path(200 + s));
        }
        let kept = p.of("team");
        assert_eq!(kept.len(), PER_COMBO);
        assert_eq!(kept[0].status, 229);
        assert_eq!(kept[PER_COMBO - 1].status, 210);
        assert!(p.of("other").is_empty());
        p.retain(|c| c != "team");
        assert!(p.of("team").is_empty());
    }
}
