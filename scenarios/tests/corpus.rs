//! Every answer of the corpus, through the core's classifier: decided as the entry says, with
//! the wait it states. The gateway (`tests/tests/corpus.rs`) and the swarm read the same entries.

use scenarios::corpus::{Backend, Kind, Outcome, load};
use std::collections::BTreeSet;

#[test]
fn every_answer_is_decided_as_it_says() {
    let answers = load().unwrap_or_else(|e| panic!("the corpus loads: {e}"));
    let mut wrong = Vec::new();
    for a in &answers {
        let d = a.classify();
        if let Err(why) = a.check(&Outcome::of(&d)) {
            wrong.push(format!("{} ({}): {why} [{:?}, rule {:?}]", a.id, a.file, d.reason, d.rule_id));
        }
    }
    assert!(wrong.is_empty(), "{} of {} answers decided wrong:\n{}", wrong.len(), answers.len(), wrong.join("\n"));
}

#[test]
fn the_corpus_covers_every_format_backend_and_decision() {
    let answers = load().unwrap_or_else(|e| panic!("the corpus loads: {e}"));
    assert!(answers.len() >= 120, "{} answers: the corpus keeps at least 120", answers.len());
    let formats: BTreeSet<_> = answers.iter().map(|a| a.format.name()).collect();
    assert_eq!(formats.len(), 4, "every provider format: {formats:?}");
    let backends: BTreeSet<_> = answers.iter().map(|a| a.backend).collect();
    assert_eq!(backends, BTreeSet::from([Backend::Api, Backend::ClaudeOauth, Backend::Codex]));
    let kinds: BTreeSet<_> = answers.iter().map(|a| a.decision).collect();
    let all = [Kind::Pass, Kind::Fallback, Kind::Cool, Kind::End, Kind::LockModel, Kind::Provider];
    assert_eq!(kinds, BTreeSet::from(all), "every decision is exercised");
}

#[test]
fn a_lane_answer_is_one_the_lane_reads_as_an_offer() {
    let answers = load().unwrap_or_else(|e| panic!("the corpus loads: {e}"));
    for a in &answers {
        let u = ferroute_core::usage_limit::Unified::parse(&a.header_pairs());
        assert_eq!(a.lane, u.rejected && u.offer, "{}: lane = {}, the headers say otherwise", a.id, a.lane);
    }
}

#[test]
fn the_docs_page_is_made_from_the_corpus() {
    let answers = load().unwrap_or_else(|e| panic!("the corpus loads: {e}"));
    let page = scenarios::corpus::markdown(&answers);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/answers.md");
    if std::env::var_os("FERROUTE_WRITE_DOCS").is_some() {
        std::fs::write(&path, &page).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == page,
        "docs/answers.md is not the corpus's page: FERROUTE_WRITE_DOCS=1 cargo test -p scenarios --test corpus writes it"
    );
}
