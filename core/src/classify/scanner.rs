//! The marker automaton as one flat table, walked a byte at a time.
//!
//! Aho-Corasick builds the automaton (standard match semantics, so a state reports every
//! marker ending there); this copies it into a table of its own, with classes only for the
//! bytes the markers use and the match states numbered first. A step is then one class
//! lookup and one table read, and "does a marker end here" one comparison. Rows are 32-bit
//! offsets into a table of the automaton's size plus 256 entries, so a row plus any class stays
//! inside it.

use aho_corasick::Anchored;
use aho_corasick::automaton::Automaton;
use aho_corasick::dfa::DFA;
use rustc_hash::FxHashMap;

/// The markers ending at one state: (marker, length in bytes).
type Ends = Box<[(u16, u16)]>;

/// The most entries a table may have (states × classes): 16 Mi, far past any marker set.
const ROWS: usize = 1 << 24;

/// The flat automaton.
pub(super) struct Scanner {
    /// The class of each byte: one per byte some marker uses, one for all others.
    classes: [u8; 256],
    /// Classes per state: a state's row starts at its index times this.
    stride: u32,
    /// The row of the state reached from a row plus a byte's class (entries past the last
    /// row are never reached).
    next: Box<[u32]>,
    /// Rows below this belong to match states.
    match_rows: u32,
    /// The start state's row.
    start: u32,
    /// For each match state (by index): the markers ending there, with their lengths.
    matches: Box<[Ends]>,
}

impl Scanner {
    /// Copies `dfa` built from `markers`; `None` if the automaton is too large for the table.
    pub(super) fn new(markers: &[&str], dfa: &DFA) -> Option<Scanner> {
        Scanner::within(markers, dfa, ROWS)
    }

    /// [`Scanner::new`] with at most `limit` entries (states × classes).
    fn within(markers: &[&str], dfa: &DFA, limit: usize) -> Option<Scanner> {
        let mut used = [false; 256];
        for b in markers.iter().flat_map(|m| m.bytes()) {
            used[usize::from(b)] = true;
        }
        // Class 0 holds every byte no marker uses (represented by the first of them).
        let mut classes = [0u8; 256];
        let mut reps: Vec<u8> = (0..=255u8).find(|b| !used[usize::from(*b)]).into_iter().collect();
        for b in 0..=255u8 {
            if used[usize::from(b)] {
                classes[usize::from(b)] = u8::try_from(reps.len()).ok()?;
                reps.push(b);
            }
        }
        // An ASCII capital no marker uses reads as its small letter: ASCII text needs no
        // lower-cased copy (and lower-cased text has no capitals, so it reads as before).
        for b in b'A'..=b'Z' {
            if !used[usize::from(b)] {
                classes[usize::from(b)] = classes[usize::from(b.to_ascii_lowercase())];
            }
        }
        // Every state reachable from the start, breadth first.
        let start = dfa.start_state(Anchored::No).ok()?;
        let mut states = vec![start];
        let mut index = FxHashMap::default();
        index.insert(start, 0usize);
        let mut at = 0;
        while at < states.len() {
            let from = states[at];
            for &b in &reps {
                let to = dfa.next_state(Anchored::No, from, b);
                if let std::collections::hash_map::Entry::Vacant(v) = index.entry(to) {
                    v.insert(states.len());
                    states.push(to);
                }
            }
            at += 1;
        }
        // Match states first, so that one comparison of a row tells a match.
        let mut order: Vec<usize> = (0..states.len()).collect();
        order.sort_by_key(|&i| !dfa.is_match(states[i]));
        let mut new_of = vec![0usize; states.len()];
        for (new, &old) in order.iter().enumerate() {
            new_of[old] = new;
        }
        let stride = reps.len();
        if states.len() * stride > limit {
            return None;
        }
        let row = |old: usize| u32::try_from(new_of[old] * stride).ok();
        let mut next = vec![0u32; states.len() * stride + 256];
        let mut matches = Vec::new();
        for (new, &old) in order.iter().enumerate() {
            let sid = states[old];
            for (class, &b) in reps.iter().enumerate() {
                next[new * stride + class] = row(index[&dfa.next_state(Anchored::No, sid, b)])?;
            }
            if dfa.is_match(sid) {
                let ends = (0..dfa.match_len(sid))
                    .map(|k| {
                        let pattern = dfa.match_pattern(sid, k);
                        Some((u16::try_from(pattern.as_usize()).ok()?, u16::try_from(dfa.pattern_len(pattern)).ok()?))
                    })
                    .collect::<Option<Box<[_]>>>()?;
                matches.push(ends);
            }
        }
        Some(Scanner {
            classes,
            stride: u32::try_from(stride).ok()?,
            next: next.into_boxed_slice(),
            match_rows: u32::try_from(matches.len() * stride).ok()?,
            start: row(0)?,
            matches: matches.into_boxed_slice(),
        })
    }

    /// Calls `found(marker, start, end)` for every occurrence of every marker in `text`, in the
    /// order they end (overlaps and repeats included). ASCII capitals match the small letters of
    /// markers written in small letters.
    #[inline]
    pub(super) fn scan(&self, text: &[u8], mut found: impl FnMut(usize, usize, usize)) {
        let mut row = self.start;
        // Four bytes a step (fewer loop checks per byte); a step's bytes in order.
        let (quads, rest) = text.as_chunks::<4>();
        for (q, quad) in quads.iter().enumerate() {
            for (k, &b) in quad.iter().enumerate() {
                row = self.step(row, b, 4 * q + k, &mut found);
            }
        }
        for (k, &b) in rest.iter().enumerate() {
            row = self.step(row, b, 4 * quads.len() + k, &mut found);
        }
    }

    /// Reads byte `text[at]` in state `row`; reports the markers ending there.
    #[inline(always)]
    fn step(&self, row: u32, b: u8, at: usize, found: &mut impl FnMut(usize, usize, usize)) -> u32 {
        // A row plus a class stays inside the table (entries past the rows are never reached).
        let row = self.next[row as usize + usize::from(self.classes[usize::from(b)])];
        if row < self.match_rows {
            let end = at + 1;
            for &(marker, len) in self.matches[(row / self.stride) as usize].iter() {
                found(usize::from(marker), end - usize::from(len), end);
            }
        }
        row
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_overlapping_markers_where_they_end() {
        let markers = ["he", "she", "hers", "频率"];
        let dfa = DFA::new(markers).expect("automaton");
        let scanner = Scanner::new(&markers, &dfa).expect("table");
        let mut seen = Vec::new();
        scanner.scan("ushers 频率".as_bytes(), |m, start, end| seen.push((m, start, end)));
        assert_eq!(seen, vec![(1, 1, 4), (0, 2, 4), (2, 2, 6), (3, 7, 13)]);
        let mut upper = Vec::new();
        scanner.scan("uSHErs 频率".as_bytes(), |m, start, end| upper.push((m, start, end)));
        assert_eq!(upper, seen, "ASCII capitals read as small letters");
    }

    #[test]
    fn a_capital_some_marker_uses_keeps_its_own_class() {
        let markers = ["Ab", "ab"];
        let dfa = DFA::new(markers).expect("automaton");
        let scanner = Scanner::new(&markers, &dfa).expect("table");
        let mut seen = Vec::new();
        scanner.scan(b"Ab ab AB", |m, start, end| seen.push((m, start, end)));
        // "AB": 'B' folds to 'b', but 'A' is a marker's own byte and stays itself.
        assert_eq!(seen, vec![(0, 0, 2), (1, 3, 5), (0, 6, 8)]);
    }

    #[test]
    fn the_classifiers_markers_fit_the_table() {
        let markers = super::super::text::markers();
        let dfa = DFA::new(markers).expect("automaton");
        let scanner = Scanner::new(markers, &dfa).expect("the classifier's markers fit the table");
        assert!(scanner.next.len() <= ROWS + 256);
    }

    #[test]
    fn an_automaton_too_large_for_the_table_is_refused() {
        // 2 000 markers of 40 distinct bytes each: far more than 2^16 entries.
        let markers: Vec<String> =
            (0..2000u32).map(|i| format!("{i:04}abcdefghijklmnopqrstuvwxyz0123456789")).collect();
        let refs: Vec<&str> = markers.iter().map(String::as_str).collect();
        let dfa = DFA::new(&refs).expect("automaton");
        assert!(Scanner::within(&refs, &dfa, 1 << 16).is_none());
        assert!(Scanner::new(&refs, &dfa).is_some(), "the classifier's own limit takes it");
    }
}
