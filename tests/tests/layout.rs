//! The workspace's shape, checked on every test run: no module depends on itself through any
//! chain of other modules (in any crate: library, binaries, tests, benches, fuzz targets), and
//! no Rust source file reaches 500 lines.
//!
//! A module depends on another when it names it or an item in it: a `use` (re-exports
//! included), a path in code (`crate::a::b::f()`, `super::X`), or a path inside a macro's
//! tokens. Declaring a child module (`mod child;`) is not a dependency. Each ring is printed with
//! one place per step, so that the piece to move down is easy to find.
//!
//! `scripts/module-cycles` runs this test alone and prints the graph's size.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[path = "layout/modules.rs"]
mod modules;
use modules::Crate;

/// Files this long or longer are a sign that a module holds more than one concern.
const MAX_LINES: usize = 500;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// Every package directory: the workspace's members and the fuzz workspace.
fn packages(root: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(root.join("Cargo.toml")).expect("the workspace's Cargo.toml");
    let manifest: toml::Table = toml::from_str(&text).expect("Cargo.toml is TOML");
    let members = manifest
        .get("workspace")
        .and_then(|w| w.get("members"))
        .and_then(|m| m.as_array())
        .expect("[workspace] members");
    let mut dirs: Vec<PathBuf> = members.iter().filter_map(|m| m.as_str()).map(|m| root.join(m)).collect();
    dirs.push(root.join("fuzz"));
    dirs
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// Crate roots of a package: the library, binaries, and every test, bench, example and fuzz
/// target.
fn crate_roots(package: &Path) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    for file in ["src/lib.rs", "src/main.rs"] {
        if package.join(file).is_file() {
            roots.push(package.join(file));
        }
    }
    for dir in ["src/bin", "tests", "benches", "examples", "fuzz_targets"] {
        let Ok(entries) = std::fs::read_dir(package.join(dir)) else { continue };
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "rs"))
            .collect();
        found.sort();
        roots.extend(found);
    }
    roots
}

#[test]
fn no_module_depends_on_itself_through_others() {
    let root = workspace_root();
    let mut report = String::new();
    let (mut crates, mut modules, mut edges) = (0, 0, 0);
    for package in packages(&root) {
        for crate_root in crate_roots(&package) {
            let mut krate = Crate::load(&crate_root);
            krate.link(&root);
            crates += 1;
            modules += krate.module_count();
            edges += krate.edge_count();
            for ring in krate.rings() {
                let shown = crate_root.strip_prefix(&root).unwrap_or(&crate_root).display().to_string();
                let _ = writeln!(report, "{shown}:\n{}", krate.describe(&ring));
            }
        }
    }
    println!("{crates} crates, {modules} modules, {edges} dependencies between modules");
    assert!(report.is_empty(), "modules that depend on themselves through others:\n{report}");
}

#[test]
fn no_source_file_reaches_500_lines() {
    let root = workspace_root();
    let mut files = Vec::new();
    for package in packages(&root) {
        rust_files(&package, &mut files);
    }
    assert!(files.len() > 100, "found only {} Rust files under {}", files.len(), root.display());
    let mut long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).ok()?.lines().count();
            (lines >= MAX_LINES).then(|| format!("{}: {lines} lines", f.strip_prefix(&root).unwrap_or(f).display()))
        })
        .collect();
    long.sort();
    assert!(long.is_empty(), "files of {MAX_LINES} lines or more:\n{}", long.join("\n"));
}

#[test]
fn the_check_finds_rings_through_paths_macros_and_facades_but_not_through_declarations() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let files = [
        ("src/lib.rs", "mod a;\nmod b;\nmod c;\nmod facade;\nmod quiet;\n"),
        // a -> b (use), b -> c (a path in a type), c -> a (a path inside a macro's tokens).
        ("src/a.rs", "use crate::b::B;\npub const SIZE: usize = 1;\npub struct A(B);\n"),
        ("src/b.rs", "pub struct B(pub crate::c::C);\n"),
        ("src/c.rs", "pub struct C;\npub fn f() -> usize {\n    vec![crate::a::SIZE].len()\n}\n"),
        // A parent that re-exports its child, whose child imports the parent.
        ("src/facade/mod.rs", "mod inner;\npub use inner::Inner;\npub struct Outer;\n"),
        ("src/facade/inner.rs", "use super::Outer;\npub struct Inner(pub Outer);\n"),
        // Declarations, visibility and a test module that imports its parent make no ring.
        (
            "src/quiet.rs",
            "pub(crate) mod child {\n    pub(super) fn f() {}\n}\npub(super) fn g() {\n    child::f()\n}\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
        ),
    ];
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("a folder");
        std::fs::write(&path, text).expect("a file");
    }
    let mut krate = Crate::load(&dir.path().join("src/lib.rs"));
    krate.link(dir.path());
    let mut rings: Vec<Vec<String>> =
        krate.rings().iter().map(|r| r.iter().map(|&m| krate.name(m)).collect()).collect();
    rings.sort();
    assert_eq!(
        rings,
        vec![vec!["crate::a", "crate::b", "crate::c"], vec!["crate::facade", "crate::facade::inner"]],
        "{}",
        krate.rings().iter().map(|r| krate.describe(r)).collect::<String>()
    );
    let described: String = krate.rings().iter().map(|r| krate.describe(r)).collect();
    for place in ["src/c.rs:3: crate::a::SIZE", "src/a.rs:1: crate::b::B", "src/facade/inner.rs:1: super::Outer"] {
        assert!(described.contains(place), "{place} missing from:\n{described}");
    }
}
