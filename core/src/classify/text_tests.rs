//! The marker scan against a naive search.

use super::*;

#[test]
fn marker_table_matches_the_enum() {
    assert_eq!(TEXTS[M::Frequency as usize], "频率");
    assert_eq!(TEXTS[M::AccountDeactivatedCode as usize], "account_deactivated");
    assert!(SCANNER.is_some());
    assert!(TEXTS.iter().all(|t| t.to_lowercase() == *t), "markers must be lower-case");
}

#[test]
fn overlapping_markers_are_all_found() {
    let s = Signals::scan("you have exceeded your current quota; quota exceeded");
    assert!(s.has(M::ExceededCurrentQuota) && s.has(M::QuotaExceeded) && s.has(M::Quota) && s.has(M::Exceed));
    assert!(s.then(M::Quota, M::Exceed));
    let s = Signals::scan("exceeded quota");
    assert!(!s.then(M::Quota, M::Exceed), "order matters");
}

/// Every occurrence of every marker, found the slow way: each marker's first end and last
/// start.
fn naive(text: &str) -> Signals {
    let mut s = Signals { first_end: [ABSENT; N], last_start: [ABSENT; N] };
    for (i, marker) in TEXTS.iter().enumerate() {
        let starts: Vec<usize> =
            (0..text.len()).filter(|&at| text.as_bytes()[at..].starts_with(marker.as_bytes())).collect();
        if let (Some(first), Some(last)) = (starts.first(), starts.last()) {
            s.first_end[i] = (first + marker.len()) as u32;
            s.last_start[i] = *last as u32;
        }
    }
    s
}

proptest::proptest! {
    /// The one-pass scan finds exactly what a marker-by-marker search finds, overlaps and
    /// repeats included, in text made of markers, near misses, glue and multi-byte characters.
    #[test]
    fn scan_agrees_with_a_naive_search(parts in proptest::collection::vec((0..N, 0usize..4, 0usize..3), 0..12)) {
        let glue = ["", " ", "x", "é频"];
        let mut text = String::new();
        for (i, cut, g) in parts {
            // A whole marker, or one cut short by `cut` characters (a near miss).
            let chars = TEXTS[i].chars().count();
            text.extend(TEXTS[i].chars().take(chars.saturating_sub(cut)));
            text.push_str(glue[g]);
        }
        let (fast, slow) = (Signals::scan(&text), naive(&text));
        proptest::prop_assert_eq!(fast.first_end, slow.first_end, "first ends in {:?}", text);
        proptest::prop_assert_eq!(fast.last_start, slow.last_start, "last starts in {:?}", text);
    }

    /// ASCII text scanned as sent finds what its lower-cased copy finds, whichever letters
    /// are capitals.
    #[test]
    fn ascii_capitals_read_as_lower_casing_would(
        parts in proptest::collection::vec((0..N, 0usize..4, 0usize..3), 0..12),
        caps in proptest::collection::vec(proptest::bool::ANY, 0..400),
    ) {
        let glue = ["", " ", "x", "-"];
        let mut lower = String::new();
        for (i, cut, g) in parts {
            if !TEXTS[i].is_ascii() {
                continue;
            }
            lower.push_str(&TEXTS[i][..TEXTS[i].len().saturating_sub(cut)]);
            lower.push_str(glue[g]);
        }
        let sent: String = lower
            .chars()
            .zip(caps.iter().copied().chain(std::iter::repeat(true)))
            .map(|(c, up)| if up { c.to_ascii_uppercase() } else { c })
            .collect();
        let (fast, slow) = (Signals::scan(&sent), naive(&lower));
        proptest::prop_assert_eq!(fast.first_end, slow.first_end, "first ends in {:?}", sent);
        proptest::prop_assert_eq!(fast.last_start, slow.last_start, "last starts in {:?}", sent);
    }
}
