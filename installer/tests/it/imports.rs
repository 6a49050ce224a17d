//! The import graph of `installer/src`: which file uses which, read from the source text.
//!
//! A small scanner (no parser dependency): comments, strings and chars are blanked, the rest is
//! split into tokens; `mod x;` declarations give the module tree from `lib.rs` and `main.rs`,
//! then every `use` tree and every `crate::`/`super::`/`self::`/child-module path is resolved
//! to the file that defines its longest module prefix. A `use` of a module itself only names
//! it (an alias): the edge is drawn where the alias is used. Tarjan's algorithm then gives the
//! strongly connected components; a component of more than two files is an import circle.
//!
//! Two rules hold: no import circle of more than two files, and component modules (os, runtime,
//! etcd, kubeadm, …) never import the day-2 groups (`modules::certs`, `modules::backup`,
//! `modules::lifecycle`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The largest import circle allowed, in files.
const MAX_CIRCLE: usize = 2;

/// Component modules: what a cluster is made of. They never import a day-2 group.
const COMPONENTS: [&str; 25] = [
    "addons",
    "apply",
    "delete",
    "dns",
    "etcd",
    "finalize",
    "images",
    "internal_lb",
    "k8s",
    "kubeadm",
    "kubexm",
    "loadbalancer",
    "network",
    "os",
    "osrepo",
    "plugins",
    "preflight",
    "ready",
    "registry",
    "remote_path",
    "runtime",
    "scripts",
    "security",
    "storage",
    "task_id",
];

/// Day-2 groups: they compose components (and each other); pipelines compose them all.
const DAY2: [&str; 3] = ["backup", "certs", "lifecycle"];

/// The top-level module of `modules/` a file belongs to (`modules/kubeadm/config.rs` →
/// `kubeadm`), or `None` outside `modules/` and for `modules/mod.rs`.
fn area(file: &str) -> Option<&str> {
    let rest = file.strip_prefix("modules/")?;
    let first = rest.split('/').next()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "mod").then_some(name)
}

/// One source file of a crate.
struct File {
    /// Path relative to `installer/src`, e.g. `modules/kubeadm/config.rs`.
    rel: String,
    tokens: Vec<String>,
}

/// The crate graph: files, their module paths, and the edges between files.
pub(crate) struct Graph {
    /// File names (relative to `installer/src`, prefixed `bin:` for the binary crate).
    pub(crate) names: Vec<String>,
    /// `edges[a]` = files `a` uses, with one example path per edge.
    pub(crate) edges: Vec<BTreeMap<usize, String>>,
}

/// Blank comments, string literals and char literals (keeping lifetimes).
fn strip(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    while i < c.len() {
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c[i] == 'r'
            && (i == 0 || !ident(c[i - 1]) || (c[i - 1] == 'b' && (i < 2 || !ident(c[i - 2]))))
            && matches!(c.get(i + 1), Some('"' | '#'))
        {
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) == Some(&'"') {
                j += 1;
                'raw: while j < c.len() {
                    if c[j] == '"' && (1..=hashes).all(|k| c.get(j + k) == Some(&'#')) {
                        j += 1 + hashes;
                        break 'raw;
                    }
                    j += 1;
                }
                out.push_str(" \"\" ");
                i = j;
            } else {
                // `r#ident`: a raw identifier.
                out.push(' ');
                i += 2;
            }
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str(" \"\" ");
        } else if c[i] == '\'' && c.get(i + 1) == Some(&'\\') {
            i += 2;
            while i < c.len() && c[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push(' ');
        } else if c[i] == '\'' && c.get(i + 2) == Some(&'\'') {
            i += 3;
            out.push(' ');
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// Identifiers, `::` and single punctuation characters.
pub(crate) fn tokens(src: &str) -> Vec<String> {
    let c: Vec<char> = strip(src).chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if c[i].is_whitespace() {
            i += 1;
        } else if c[i].is_alphanumeric() || c[i] == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(c[start..i].iter().collect());
        } else if c[i] == ':' && c.get(i + 1) == Some(&':') {
            out.push("::".to_string());
            i += 2;
        } else {
            out.push(c[i].to_string());
            i += 1;
        }
    }
    out
}

/// Module paths (`["modules", "kubeadm"]`) to the file defining each.
type Modules = BTreeMap<Vec<String>, usize>;

/// A path met in a file: the module it was written in, its segments, how it was used.
struct PathUse {
    scope: Vec<String>,
    segs: Vec<String>,
    kind: Kind,
}

#[derive(Clone, PartialEq)]
enum Kind {
    /// `use a::b;` or `use a::b as c;` (alias name).
    Use(String),
    /// `use a::b::*;`
    Glob,
    /// A path in code: `a::b::c(…)`.
    Code,
}

/// Walk a `use` tree starting at `tokens[i]` (just after `use`) with `prefix` already read.
fn use_tree(
    t: &[String],
    mut i: usize,
    prefix: &[String],
    out: &mut Vec<(Vec<String>, Kind)>,
) -> usize {
    let mut path = prefix.to_vec();
    if t.get(i).map(String::as_str) == Some("::") {
        i += 1;
    }
    loop {
        match t.get(i).map(String::as_str) {
            Some("{") => {
                i += 1;
                while t.get(i).map(String::as_str) != Some("}") && i < t.len() {
                    i = use_tree(t, i, &path, out);
                    if t.get(i).map(String::as_str) == Some(",") {
                        i += 1;
                    }
                }
                return i + 1;
            }
            Some("*") => {
                out.push((path, Kind::Glob));
                return i + 1;
            }
            Some(s) if s.chars().all(|ch| ch.is_alphanumeric() || ch == '_') => {
                path.push(s.to_string());
                i += 1;
                if t.get(i).map(String::as_str) == Some("::") {
                    i += 1;
                    continue;
                }
                let mut alias = path.last().cloned().unwrap_or_default();
                if t.get(i).map(String::as_str) == Some("as") {
                    alias = t.get(i + 1).cloned().unwrap_or_default();
                    i += 2;
                }
                if alias == "self" {
                    path.pop();
                    alias = path.last().cloned().unwrap_or_default();
                }
                out.push((path, Kind::Use(alias)));
                return i;
            }
            _ => return i,
        }
    }
}

/// The paths of one file (with the inline module each sits in) and its `mod x;` children.
fn scan(file: &File, base: &[String]) -> (Vec<PathUse>, Vec<Vec<String>>, Vec<Vec<String>>) {
    let t = &file.tokens;
    let mut uses = Vec::new();
    let mut children = Vec::new();
    let mut inline = Vec::new();
    // Inline modules: (name, brace depth inside them).
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let scope_of = |stack: &[(String, usize)]| {
        let mut s = base.to_vec();
        s.extend(stack.iter().map(|(n, _)| n.clone()));
        s
    };
    let mut i = 0;
    while i < t.len() {
        match t[i].as_str() {
            "{" => {
                depth += 1;
                i += 1;
            }
            "}" => {
                if stack.last().is_some_and(|(_, d)| *d == depth) {
                    stack.pop();
                }
                depth -= 1;
                i += 1;
            }
            "mod" if i + 2 < t.len() => {
                let name = t[i + 1].clone();
                let mut path = scope_of(&stack);
                path.push(name.clone());
                if t[i + 2] == ";" {
                    children.push(path);
                    i += 3;
                } else if t[i + 2] == "{" {
                    depth += 1;
                    stack.push((name, depth));
                    inline.push(path);
                    i += 3;
                } else {
                    i += 1;
                }
            }
            "use" => {
                let mut found = Vec::new();
                let end = use_tree(t, i + 1, &[], &mut found);
                let scope = scope_of(&stack);
                for (segs, kind) in found {
                    uses.push(PathUse {
                        scope: scope.clone(),
                        segs,
                        kind,
                    });
                }
                i = end.max(i + 1);
            }
            s if s.starts_with(|ch: char| ch.is_lowercase() || ch == '_')
                && t.get(i + 1).map(String::as_str) == Some("::")
                && (i == 0 || (t[i - 1] != "::" && t[i - 1] != "$")) =>
            {
                let mut segs = vec![s.to_string()];
                let mut j = i + 1;
                while t.get(j).map(String::as_str) == Some("::")
                    && t.get(j + 1).is_some_and(|n| {
                        n.starts_with(|ch: char| ch.is_alphanumeric() || ch == '_')
                    })
                {
                    segs.push(t[j + 1].clone());
                    j += 2;
                }
                uses.push(PathUse {
                    scope: scope_of(&stack),
                    segs,
                    kind: Kind::Code,
                });
                i = j;
            }
            _ => i += 1,
        }
    }
    (uses, children, inline)
}

/// Read one crate from its root file; returns (module path → file index, files, uses).
fn read_crate(
    src: &Path,
    root: &str,
    prefix: &str,
    graph: &mut Graph,
) -> Vec<(usize, Vec<PathUse>, Modules)> {
    let mut modules: Modules = BTreeMap::new();
    let mut scanned = Vec::new();
    let mut todo: Vec<(PathBuf, Vec<String>)> = vec![(src.join(root), Vec::new())];
    while let Some((path, modpath)) = todo.pop() {
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let rel = path
            .strip_prefix(src)
            .unwrap_or(&path)
            .to_string_lossy()
            .replace('\\', "/");
        let file = File {
            rel: format!("{prefix}{rel}"),
            tokens: tokens(&text),
        };
        let idx = graph.names.len();
        graph.names.push(file.rel.clone());
        graph.edges.push(BTreeMap::new());
        modules.insert(modpath.clone(), idx);
        let (uses, children, inline) = scan(&file, &modpath);
        for m in inline {
            modules.insert(m, idx);
        }
        // Children of `a/mod.rs`, `lib.rs` and `main.rs` live in `a/`; of `a/b.rs` in `a/b/`.
        let dir = match path.file_name().and_then(|n| n.to_str()) {
            Some("mod.rs" | "lib.rs" | "main.rs") => {
                path.parent().map(Path::to_path_buf).unwrap_or_default()
            }
            _ => path.with_extension(""),
        };
        for child in children {
            let inner = &child[modpath.len()..];
            let mut p = dir.clone();
            for seg in inner {
                p.push(seg);
            }
            let flat = p.with_extension("rs");
            let nested = p.join("mod.rs");
            if flat.exists() {
                todo.push((flat, child));
            } else if nested.exists() {
                todo.push((nested, child));
            }
        }
        scanned.push((idx, uses));
    }
    scanned
        .into_iter()
        .map(|(idx, uses)| (idx, uses, modules.clone()))
        .collect()
}

/// The absolute module path `segs` stands for, written in `scope`, or `None` (a crate, std,
/// a local item).
fn absolute(
    scope: &[String],
    segs: &[String],
    aliases: &BTreeMap<(Vec<String>, String), Vec<String>>,
    modules: &BTreeMap<Vec<String>, usize>,
) -> Option<Vec<String>> {
    let first = segs.first()?;
    let mut abs: Vec<String>;
    let rest: &[String];
    match first.as_str() {
        "crate" => {
            abs = Vec::new();
            rest = &segs[1..];
        }
        "self" => {
            abs = scope.to_vec();
            rest = &segs[1..];
        }
        "super" => {
            abs = scope.to_vec();
            let n = segs.iter().take_while(|s| *s == "super").count();
            for _ in 0..n {
                abs.pop()?;
            }
            rest = &segs[n..];
        }
        _ => {
            let mut child = scope.to_vec();
            child.push(first.clone());
            if let Some(target) = aliases.get(&(scope.to_vec(), first.clone())) {
                abs = target.clone();
            } else if modules.contains_key(&child) {
                abs = child;
            } else {
                return None;
            }
            rest = &segs[1..];
        }
    }
    abs.extend(rest.iter().cloned());
    Some(abs)
}

/// The file defining the longest module prefix of `abs`, and whether `abs` is itself a module.
fn owner(abs: &[String], modules: &BTreeMap<Vec<String>, usize>) -> Option<(usize, bool)> {
    (0..=abs.len())
        .rev()
        .find_map(|n| modules.get(&abs[..n]).map(|f| (*f, n == abs.len())))
}

/// The import graph of the library and the binary under `src`.
pub(crate) fn graph(src: &Path) -> Graph {
    let mut graph = Graph {
        names: Vec::new(),
        edges: Vec::new(),
    };
    for (root, prefix) in [("lib.rs", ""), ("main.rs", "bin:")] {
        let files = read_crate(src, root, prefix, &mut graph);
        for (idx, uses, modules) in files {
            // `use` of a module names it: resolve the use sites through the alias.
            let mut aliases = BTreeMap::new();
            for u in &uses {
                if let Kind::Use(alias) = &u.kind {
                    if let Some(abs) = absolute(&u.scope, &u.segs, &BTreeMap::new(), &modules) {
                        if modules.contains_key(&abs) {
                            aliases.insert((u.scope.clone(), alias.clone()), abs);
                        }
                    }
                }
            }
            for u in &uses {
                let Some(abs) = absolute(&u.scope, &u.segs, &aliases, &modules) else {
                    continue;
                };
                let Some((target, is_module)) = owner(&abs, &modules) else {
                    continue;
                };
                if target == idx || (is_module && matches!(u.kind, Kind::Use(_))) {
                    continue;
                }
                graph.edges[idx]
                    .entry(target)
                    .or_insert_with(|| u.segs.join("::"));
            }
        }
    }
    graph
}

/// Tarjan's strongly connected components, largest first.
pub(crate) fn components(graph: &Graph) -> Vec<Vec<usize>> {
    struct State<'a> {
        edges: &'a [BTreeMap<usize, String>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        let targets: Vec<usize> = s.edges[v].keys().copied().collect();
        for w in targets {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                comp.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(comp);
        }
    }
    let n = graph.names.len();
    let mut s = State {
        edges: &graph.edges,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    let mut out = s.out;
    for c in &mut out {
        c.sort_by(|a, b| graph.names[*a].cmp(&graph.names[*b]));
    }
    out.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    out
}

/// One circle through the first file of `comp`: `a.rs → b.rs (via path) → … → a.rs`.
pub(crate) fn circle(graph: &Graph, comp: &[usize]) -> String {
    let inside: BTreeSet<usize> = comp.iter().copied().collect();
    let start = comp[0];
    // Breadth-first from `start` back to `start` inside the component.
    let mut prev: BTreeMap<usize, usize> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    let mut end = None;
    'bfs: while let Some(v) = queue.pop_front() {
        for w in graph.edges[v].keys() {
            if *w == start {
                end = Some(v);
                break 'bfs;
            }
            if inside.contains(w) && !prev.contains_key(w) {
                prev.insert(*w, v);
                queue.push_back(*w);
            }
        }
    }
    let mut back = Vec::new();
    let mut v = end.unwrap_or(start);
    while v != start {
        back.push(v);
        v = prev[&v];
    }
    let mut path = vec![start];
    path.extend(back.into_iter().rev());
    path.push(start);
    let mut out = graph.names[start].clone();
    for pair in path.windows(2) {
        out.push_str(&format!(
            "\n    → {} (via `{}`)",
            graph.names[pair[1]], graph.edges[pair[0]][&pair[1]]
        ));
    }
    out
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_import_circle_of_more_than_two_files() {
    let graph = graph(&src_dir());
    assert!(
        graph.names.len() > 100,
        "scanned only {} files",
        graph.names.len()
    );
    let circles: Vec<Vec<usize>> = components(&graph)
        .into_iter()
        .filter(|c| c.len() > MAX_CIRCLE)
        .collect();
    let big: Vec<String> = circles
        .iter()
        .map(|c| {
            let files: Vec<&str> = c.iter().map(|f| graph.names[*f].as_str()).collect();
            format!(
                "{} files: {}\n  circle: {}",
                c.len(),
                files.join(", "),
                circle(&graph, c)
            )
        })
        .collect();
    assert!(
        big.is_empty(),
        "import circles of more than {MAX_CIRCLE} files:\n{}",
        big.join("\n")
    );
}

#[test]
fn component_modules_never_import_the_day2_groups() {
    let graph = graph(&src_dir());
    let mut bad = Vec::new();
    let mut unknown = BTreeSet::new();
    for (from, edges) in graph.edges.iter().enumerate() {
        let name = &graph.names[from];
        let Some(a) = area(name) else { continue };
        if !COMPONENTS.contains(&a) && !DAY2.contains(&a) {
            unknown.insert(a.to_string());
        }
        if !COMPONENTS.contains(&a) {
            continue;
        }
        for (to, via) in edges {
            if let Some(b) = area(&graph.names[*to]).filter(|b| DAY2.contains(b)) {
                bad.push(format!("{name} imports the day-2 group {b} (via `{via}`)"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "modules neither component nor day-2 (add them to COMPONENTS or DAY2): {unknown:?}"
    );
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_k8s_leaf_imports_no_other_module() {
    let graph = graph(&src_dir());
    let leaf = graph
        .names
        .iter()
        .position(|n| n == "modules/k8s.rs")
        .expect("modules/k8s.rs");
    let up: Vec<&str> = graph.edges[leaf]
        .keys()
        .map(|t| graph.names[*t].as_str())
        .filter(|n| n.starts_with("modules/"))
        .collect();
    assert!(up.is_empty(), "modules/k8s.rs imports {up:?}");
}

#[test]
fn scanner_sees_use_trees_and_code_paths() {
    let t = tokens("use crate::a::{b::{self, C}, d as e, f::*};\n// use crate::x;\nlet s = \"crate::y\"; super::g::h(); e::i();");
    let file = File {
        rel: "t.rs".into(),
        tokens: t,
    };
    let (uses, _, _) = scan(&file, &["m".to_string()]);
    let seen: Vec<String> = uses.iter().map(|u| u.segs.join("::")).collect();
    assert_eq!(
        seen,
        [
            "crate::a::b",
            "crate::a::b::C",
            "crate::a::d",
            "crate::a::f",
            "super::g::h",
            "e::i"
        ]
    );
}
