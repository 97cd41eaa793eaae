//! The mechanism guide in `docs/` stays true to the repository: every `M<n>` used anywhere is
//! defined there exactly once, every scenario names only defined mechanisms, and each
//! mechanism's section lists exactly the catalog scenarios that pin it.

use scenarios::scenario::{catalog_dir, load_catalog};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `M<n>` tokens of `text` (not part of a longer word).
fn mechanism_ids(text: &str) -> BTreeSet<String> {
    let b = text.as_bytes();
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices('M') {
        let before_ok = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        let end = i + 1 + digits;
        let after_ok = end == b.len() || !(b[end].is_ascii_alphanumeric() || b[end] == b'_');
        if before_ok && digits > 0 && after_ok {
            out.insert(text[i..end].to_owned());
        }
    }
    out
}

/// Each mechanism's section (from its `## M<n> ` heading to the next `## `), by id, with its page.
fn sections() -> BTreeMap<String, Vec<(String, String)>> {
    let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let dir = root().join("docs");
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("docs/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    for page in pages {
        let text = std::fs::read_to_string(&page).expect("page reads");
        let name = page.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut current: Option<(String, String)> = None;
        for line in text.lines() {
            if line.starts_with("## ") || line.starts_with("# ") {
                if let Some((id, body)) = current.take() {
                    out.entry(id).or_default().push((name.clone(), body));
                }
                let id = line.trim_start_matches('#').trim().split(' ').next().unwrap_or("");
                if line.starts_with("## ") && mechanism_ids(id).len() == 1 && id.len() > 1 {
                    current = Some((id.to_owned(), String::new()));
                }
            } else if let Some((_, body)) = current.as_mut() {
                body.push_str(line);
                body.push('\n');
            }
        }
        if let Some((id, body)) = current {
            out.entry(id).or_default().push((name.clone(), body));
        }
    }
    out
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            let hidden = name.starts_with('.') && name != ".github" && name != ".ci";
            let generated = ["target", "node_modules", "mutants.out", "ferroute-data", "venv"].contains(&name.as_str());
            if !hidden && !generated {
                walk(&p, out);
            }
        } else if ["rs", "md", "toml", "yml", "sh", "txt", "py", "js"]
            .iter()
            .any(|x| p.extension().is_some_and(|e| e == *x))
        {
            out.push(p);
        }
    }
}

#[test]
fn every_mechanism_is_defined_once_and_every_use_is_defined() {
    let defined = sections();
    for n in 1..=20 {
        let id = format!("M{n}");
        let pages = defined.get(&id).map(Vec::len).unwrap_or(0);
        assert_eq!(pages, 1, "{id} must be defined by exactly one `## {id} ` section in docs/ (found {pages})");
    }
    let mut files = Vec::new();
    walk(&root(), &mut files);
    assert!(files.len() > 50, "the walk found only {} files", files.len());
    let mut undefined = Vec::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else { continue };
        for id in mechanism_ids(&text) {
            if !defined.contains_key(&id) {
                undefined.push(format!("{id} in {}", f.strip_prefix(root()).unwrap_or(&f).display()));
            }
        }
    }
    assert!(undefined.is_empty(), "mechanism ids used but not defined in docs/: {undefined:?}");
}

#[test]
fn each_mechanism_section_lists_exactly_its_scenarios() {
    let defined = sections();
    let catalog = load_catalog(&catalog_dir()).expect("catalog loads");
    let names: BTreeSet<&str> = catalog.iter().map(|s| s.name.as_str()).collect();
    let mut problems = Vec::new();
    for s in &catalog {
        for m in &s.mechanisms {
            if !defined.contains_key(m) {
                problems.push(format!("{} names {m}, which docs/ does not define", s.name));
            }
        }
    }
    for (id, found) in &defined {
        let (page, body) = &found[0];
        let listed: BTreeSet<&str> = body
            .lines()
            .filter_map(|l| l.strip_prefix("- `").and_then(|r| r.strip_suffix('`')))
            .filter(|n| !n.contains(' '))
            .collect();
        let want: BTreeSet<&str> =
            catalog.iter().filter(|s| s.mechanisms.iter().any(|m| m == id)).map(|s| s.name.as_str()).collect();
        for missing in want.difference(&listed) {
            problems.push(format!("docs/{page}, {id}: scenario {missing} is not listed"));
        }
        for extra in listed.difference(&want) {
            if names.contains(extra) {
                problems.push(format!("docs/{page}, {id}: {extra} is listed but does not name {id}"));
            } else {
                problems.push(format!("docs/{page}, {id}: {extra} is not a catalog scenario"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn mechanism_ids_are_whole_tokens() {
    let ids = mechanism_ids("M1 and M10, not M1x or XM2 or M; (M20)");
    assert_eq!(ids.into_iter().collect::<Vec<_>>(), vec!["M1", "M10", "M20"]);
}
