//! One crate's module tree read from its sources with `syn`, the dependencies between its
//! modules, and the rings among them (strongly connected components, by Tarjan's algorithm).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use syn::spanned::Spanned;
use syn::visit::Visit;

/// A module: its path from the crate root and the file it lives in.
#[derive(Debug)]
struct Module {
    path: Vec<String>,
    file: PathBuf,
    /// Child modules by name (file or inline).
    children: BTreeSet<String>,
}

/// One crate's modules and the dependencies between them.
#[derive(Default)]
pub struct Crate {
    modules: Vec<Module>,
    by_path: BTreeMap<Vec<String>, usize>,
    /// (from, to) -> one place that makes the dependency.
    edges: BTreeMap<(usize, usize), String>,
}

fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find(|a| a.path().is_ident("path")).and_then(|a| match &a.meta {
        syn::Meta::NameValue(nv) => match &nv.value {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

impl Crate {
    pub fn load(root: &Path) -> Self {
        let mut krate = Crate::default();
        let dir = root.parent().map(Path::to_path_buf).unwrap_or_default();
        krate.add_file(Vec::new(), root, dir);
        krate
    }

    /// Adds the module in `file` (whose own child files live in `dir`) and its children.
    fn add_file(&mut self, path: Vec<String>, file: &Path, dir: PathBuf) {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        self.push(path.clone(), file);
        self.add_items(&path, &ast.items, file, &dir);
    }

    fn push(&mut self, path: Vec<String>, file: &Path) -> usize {
        let index = self.modules.len();
        if let Some(parent) = path.split_last().map(|(_, p)| p.to_vec())
            && let Some(&p) = self.by_path.get(&parent)
        {
            self.modules[p].children.insert(path.last().cloned().unwrap_or_default());
        }
        self.by_path.insert(path.clone(), index);
        self.modules.push(Module { path, file: file.to_path_buf(), children: BTreeSet::new() });
        index
    }

    fn add_items(&mut self, path: &[String], items: &[syn::Item], file: &Path, dir: &Path) {
        for item in items {
            let syn::Item::Mod(m) = item else { continue };
            let name = m.ident.to_string();
            let mut child = path.to_vec();
            child.push(name.clone());
            match &m.content {
                Some((_, inner)) => {
                    self.push(child.clone(), file);
                    self.add_items(&child, inner, file, &dir.join(&name));
                }
                None => {
                    let child_file = match path_attr(&m.attrs) {
                        Some(p) => file.parent().unwrap_or(dir).join(p),
                        None if dir.join(format!("{name}.rs")).is_file() => dir.join(format!("{name}.rs")),
                        None => dir.join(&name).join("mod.rs"),
                    };
                    let child_dir = if child_file.file_name().is_some_and(|n| n == "mod.rs") {
                        child_file.parent().map(Path::to_path_buf).unwrap_or_default()
                    } else {
                        child_file.with_extension("")
                    };
                    self.add_file(child, &child_file, child_dir);
                }
            }
        }
    }

    /// Reads every module's dependencies.
    pub fn link(&mut self, root_dir: &Path) {
        let files: BTreeSet<PathBuf> = self.modules.iter().map(|m| m.file.clone()).collect();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let Ok(ast) = syn::parse_file(&text) else { continue };
            let Some(&top) = self.modules.iter().position(|m| m.file == file).as_ref() else { continue };
            let shown = file.strip_prefix(root_dir).unwrap_or(&file).display().to_string();
            let mut reader = Reader { krate: self, module: top, file: shown, aliases: Vec::new(), found: Vec::new() };
            reader.aliases.push(BTreeMap::new());
            reader.read_items(&ast.items);
            let found = std::mem::take(&mut reader.found);
            for (from, to, place) in found {
                if from != to {
                    self.edges.entry((from, to)).or_insert(place);
                }
            }
        }
    }

    /// The module a path names from inside `module`, by its longest prefix that is a module,
    /// and whether the whole path is that module.
    fn resolve(&self, module: usize, segments: &[String], aliases: &BTreeMap<String, usize>) -> Option<(usize, bool)> {
        let first = segments.first()?;
        let here = &self.modules[module].path;
        let mut base: Vec<String> = match first.as_str() {
            "crate" => Vec::new(),
            "self" => here.clone(),
            "super" => here.split_last().map(|(_, p)| p.to_vec()).unwrap_or_default(),
            _ => {
                if self.modules[module].children.contains(first) {
                    let mut p = here.clone();
                    p.push(first.clone());
                    p
                } else if let Some(&target) = aliases.get(first) {
                    self.modules[target].path.clone()
                } else {
                    return None;
                }
            }
        };
        let mut rest = &segments[1..];
        while first == "super" && rest.first().is_some_and(|s| s == "super") {
            base.pop();
            rest = &rest[1..];
        }
        let mut found = *self.by_path.get(&base)?;
        for segment in rest {
            base.push(segment.clone());
            match self.by_path.get(&base) {
                Some(&m) => found = m,
                None => return Some((found, false)),
            }
        }
        Some((found, true))
    }

    /// Strongly connected components with more than one module.
    pub fn rings(&self) -> Vec<Vec<usize>> {
        let n = self.modules.len();
        let mut next: Vec<Vec<usize>> = vec![Vec::new(); n];
        for &(a, b) in self.edges.keys() {
            next[a].push(b);
        }
        // Tarjan's algorithm, iterative.
        let mut index = vec![usize::MAX; n];
        let mut low = vec![0; n];
        let mut on_stack = vec![false; n];
        let mut stack = Vec::new();
        let mut counter = 0;
        let mut rings = Vec::new();
        for start in 0..n {
            if index[start] != usize::MAX {
                continue;
            }
            let mut work = vec![(start, 0usize)];
            while let Some(&mut (v, ref mut i)) = work.last_mut() {
                if *i == 0 && index[v] == usize::MAX {
                    index[v] = counter;
                    low[v] = counter;
                    counter += 1;
                    stack.push(v);
                    on_stack[v] = true;
                }
                if let Some(&w) = next[v].get(*i) {
                    *i += 1;
                    if index[w] == usize::MAX {
                        work.push((w, 0));
                    } else if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                    continue;
                }
                work.pop();
                if let Some(&(parent, _)) = work.last() {
                    low[parent] = low[parent].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut ring = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        ring.push(w);
                        if w == v {
                            break;
                        }
                    }
                    if ring.len() > 1 {
                        ring.sort();
                        rings.push(ring);
                    }
                }
            }
        }
        rings
    }

    /// How many modules the crate has.
    pub fn module_count(&self) -> usize {
        self.modules.len()
    }

    /// How many dependencies between two modules it has.
    pub fn edge_count(&self) -> usize {
        self.edges.len()
    }

    /// A module's path, as the crate names it.
    pub fn name(&self, m: usize) -> String {
        let path = &self.modules[m].path;
        if path.is_empty() { "crate".to_string() } else { format!("crate::{}", path.join("::")) }
    }

    /// One shortest cycle through `start` inside `ring`, as the places that make each step.
    pub fn describe(&self, ring: &[usize]) -> String {
        let inside: BTreeSet<usize> = ring.iter().copied().collect();
        let start = ring[0];
        // Breadth-first from start back to start.
        let mut from: BTreeMap<usize, usize> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        let mut cycle = Vec::new();
        'search: while let Some(v) = queue.pop_front() {
            for (&(a, b), _) in self.edges.range((v, 0)..=(v, usize::MAX)) {
                debug_assert_eq!(a, v);
                if !inside.contains(&b) {
                    continue;
                }
                if b == start {
                    let mut node = v;
                    cycle.push((v, start));
                    while node != start {
                        let prev = from[&node];
                        cycle.push((prev, node));
                        node = prev;
                    }
                    break 'search;
                }
                if let std::collections::btree_map::Entry::Vacant(e) = from.entry(b) {
                    e.insert(v);
                    queue.push_back(b);
                }
            }
        }
        cycle.reverse();
        if std::env::var_os("LAYOUT_ALL_EDGES").is_some() {
            cycle = self.edges.keys().copied().filter(|(a, b)| inside.contains(a) && inside.contains(b)).collect();
        }
        let mut text = String::new();
        let names: Vec<String> = ring.iter().map(|&m| self.name(m)).collect();
        let _ = writeln!(text, "  ring of {} modules: {}", ring.len(), names.join(", "));
        for (a, b) in cycle {
            let _ = writeln!(text, "    {} -> {}   ({})", self.name(a), self.name(b), self.edges[&(a, b)]);
        }
        text
    }
}

/// Walks one file's syntax, recording which module each path names.
struct Reader<'a> {
    krate: &'a Crate,
    module: usize,
    file: String,
    /// Names brought into scope that stand for modules, one map per module being read.
    aliases: Vec<BTreeMap<String, usize>>,
    found: Vec<(usize, usize, String)>,
}

impl Reader<'_> {
    fn read_items(&mut self, items: &[syn::Item]) {
        // Module aliases first, so that paths through them resolve wherever they stand.
        for item in items {
            if let syn::Item::Use(u) = item {
                self.use_tree(&u.tree, Vec::new(), false);
            }
        }
        for item in items {
            match item {
                syn::Item::Use(u) => self.use_tree(&u.tree, Vec::new(), true),
                syn::Item::Mod(m) => {
                    if let Some((_, inner)) = &m.content {
                        let mut path = self.krate.modules[self.module].path.clone();
                        path.push(m.ident.to_string());
                        let Some(&child) = self.krate.by_path.get(&path) else { continue };
                        let outer = std::mem::replace(&mut self.module, child);
                        self.aliases.push(BTreeMap::new());
                        self.read_items(inner);
                        self.aliases.pop();
                        self.module = outer;
                    }
                }
                other => self.visit_item(other),
            }
        }
    }

    fn scope(&self) -> &BTreeMap<String, usize> {
        self.aliases.last().expect("a scope is always open")
    }

    fn record(&mut self, segments: &[String], line: usize) {
        if let Some((to, _)) = self.krate.resolve(self.module, segments, self.scope()) {
            let place = format!("{}:{line}: {}", self.file, segments.join("::"));
            self.found.push((self.module, to, place));
        }
    }

    /// Records a `use` tree's dependencies; with `record` false only collects module aliases.
    fn use_tree(&mut self, tree: &syn::UseTree, prefix: Vec<String>, record: bool) {
        let line = tree.span().start().line;
        match tree {
            syn::UseTree::Path(p) => {
                let mut prefix = prefix;
                prefix.push(p.ident.to_string());
                self.use_tree(&p.tree, prefix, record);
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(t, prefix.clone(), record);
                }
            }
            syn::UseTree::Glob(_) => {
                if record {
                    self.record(&prefix, line);
                }
            }
            syn::UseTree::Name(n) => self.use_leaf(prefix, n.ident.to_string(), None, line, record),
            syn::UseTree::Rename(r) => {
                self.use_leaf(prefix, r.ident.to_string(), Some(r.rename.to_string()), line, record)
            }
        }
    }

    fn use_leaf(&mut self, mut prefix: Vec<String>, name: String, rename: Option<String>, line: usize, record: bool) {
        let alias = rename
            .unwrap_or_else(|| if name == "self" { prefix.last().cloned().unwrap_or_default() } else { name.clone() });
        if name != "self" {
            prefix.push(name);
        }
        if record {
            self.record(&prefix, line);
            return;
        }
        // Only a leaf that is itself a module is an alias for one.
        if let Some((target, true)) = self.krate.resolve(self.module, &prefix, self.scope())
            && let Some(scope) = self.aliases.last_mut()
        {
            scope.insert(alias, target);
        }
    }

    fn macro_tokens(&mut self, tokens: proc_macro2::TokenStream) {
        let flat: Vec<proc_macro2::TokenTree> = flatten(tokens);
        let mut i = 0;
        while i < flat.len() {
            if let proc_macro2::TokenTree::Ident(id) = &flat[i] {
                let preceded_by_colons = i >= 1 && is_punct(&flat[i - 1], ':');
                if !preceded_by_colons {
                    let mut segments = vec![id.to_string()];
                    let line = id.span().start().line;
                    let mut j = i + 1;
                    while j + 2 < flat.len() && is_punct(&flat[j], ':') && is_punct(&flat[j + 1], ':') {
                        let proc_macro2::TokenTree::Ident(next) = &flat[j + 2] else { break };
                        segments.push(next.to_string());
                        j += 3;
                    }
                    if segments.len() > 1 {
                        self.record(&segments, line);
                    }
                    i = j.max(i + 1);
                    continue;
                }
            }
            i += 1;
        }
    }
}

fn flatten(tokens: proc_macro2::TokenStream) -> Vec<proc_macro2::TokenTree> {
    let mut out = Vec::new();
    for t in tokens {
        match t {
            proc_macro2::TokenTree::Group(g) => {
                out.extend(flatten(g.stream()));
                // A group boundary ends a path.
                out.push(proc_macro2::TokenTree::Punct(proc_macro2::Punct::new(',', proc_macro2::Spacing::Alone)));
            }
            other => out.push(other),
        }
    }
    out
}

fn is_punct(t: &proc_macro2::TokenTree, c: char) -> bool {
    matches!(t, proc_macro2::TokenTree::Punct(p) if p.as_char() == c)
}

impl<'ast> Visit<'ast> for Reader<'_> {
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&u.tree, Vec::new(), true);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        // Modules inside functions are read as part of the function's module.
        if let Some((_, items)) = &m.content {
            for item in items {
                self.visit_item(item);
            }
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if segments.len() > 1 || segments.first().is_some_and(|s| s == "crate" || s == "super") {
            self.record(&segments, path.span().start().line);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {
        // `pub(super)` and `pub(in crate::a)` say who may see an item, not what it needs.
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.macro_tokens(mac.tokens.clone());
    }
}
