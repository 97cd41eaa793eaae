//! The corpus's answers (`scenarios/corpus/`) read with plain TOML, for the corpus bench and
//! the callgrind driver (`examples/classify_corpus.rs`): neither depends on `scenarios`.

use ferroute_core::classify::{ErrorInput, classify, default_profile};
use ferroute_core::settings::ResilienceSettings;
use ferroute_core::types::{Format, ProviderClass};
use std::hint::black_box;

/// One answer as the bench reads it.
pub struct Answer {
    pub format: Format,
    pub class: ProviderClass,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// The corpus's answers, read with plain TOML (the bench does not depend on `scenarios`).
pub fn answers() -> Vec<Answer> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/corpus");
    let mut files: Vec<_> =
        std::fs::read_dir(&dir).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    files.retain(|p: &std::path::PathBuf| p.extension().is_some_and(|x| x == "toml"));
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let Ok(v) = text.parse::<toml::Table>() else { continue };
        for a in v.get("answer").and_then(|a| a.as_array()).into_iter().flatten() {
            let s = |k: &str| a.get(k).and_then(|x| x.as_str()).unwrap_or("").to_owned();
            let format = Format::parse(&s("format")).unwrap_or_default();
            let class = if s("backend") == "api" { ProviderClass::ApiKey } else { ProviderClass::OAuth };
            let headers = a
                .get("headers")
                .and_then(|h| h.as_array())
                .into_iter()
                .flatten()
                .filter_map(|p| {
                    let p = p.as_array()?;
                    Some((p.first()?.as_str()?.to_owned(), p.get(1)?.as_str()?.to_owned()))
                })
                .collect();
            let status = a.get("status").and_then(|x| x.as_integer()).unwrap_or(500) as u16;
            out.push(Answer { format, class, status, headers, body: s("body") });
        }
    }
    out
}

/// Classifies every answer once, as a provider of its format and class with `settings` would,
/// read at 2026-01-01T00:00:00Z.
pub fn classify_each(answers: &[Answer], settings: &ResilienceSettings) {
    for a in answers {
        let headers: Vec<(&str, &str)> = a.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        let input = ErrorInput {
            provider: default_profile(a.format, a.class),
            provider_id: "bench",
            format: a.format,
            class: a.class,
            status: a.status,
            headers: &headers,
            body: &a.body,
            backoff_level: 0,
            wall_now_ms: Some(1_767_225_600_000),
            until_daily_reset: None,
        };
        black_box(classify(black_box(&input), &settings.cooldown_profile(a.class), &[]));
    }
}
