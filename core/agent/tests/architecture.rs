//! The shape of the source tree, checked so that it stays:
//!
//! - no two files of a crate depend on each other, directly or through others (an edge
//!   A → B is a path in A, `use` or inline or a serde `deserialize_with` string, naming an
//!   item defined in B; `mod x;` and `pub use` re-exports in `lib.rs`/`mod.rs` are not
//!   edges, and a path through a re-export leads to the file that defines the item);
//! - in the agent crate, a component imports only components of a lower layer (the order
//!   in `LAYERS`, stated in `core/agent/src/lib.rs` and docs/ARCHITECTURE.md);
//! - no source file in `core/` or `plugins/` has more than 700 lines before its
//!   `#[cfg(test)]` module.
//!
//! A failure names the file, the line and the path at fault.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The agent's components, lowest layer first; a component may import only components of
/// a lower layer. Components on one line must not import each other.
const LAYERS: &[&[&str]] = &[
    &["util"],
    &["selfmetrics", "audit"],
    &["store"],
    &["host"],
    &["rules"],
    &["pipeline"],
    &["export"],
    &["probes", "qos"],
    &["remediation"],
    &["alertmanager"],
    &["config"],
    &["app"],
    &["doctor", "demo"],
    &["cli"],
];

const MAX_LINES_BEFORE_TESTS: usize = 700;

fn workspace() -> PathBuf {
    let agent = Path::new(env!("CARGO_MANIFEST_DIR"));
    agent
        .parent()
        .and_then(Path::parent)
        .expect("core/agent is two folders down")
        .to_path_buf()
}

/// Every crate's `src` folder under `core/` and `plugins/`.
fn crate_sources() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for group in ["core", "plugins"] {
        let mut dirs: Vec<_> = std::fs::read_dir(workspace().join(group))
            .expect("read the workspace")
            .filter_map(|e| e.ok().map(|e| e.path().join("src")))
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        out.extend(dirs);
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read a source folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a file relative to its crate's `src`: `lib.rs` → [], `a/mod.rs` →
/// [a], `a/b.rs` → [a, b]. Binaries (`main.rs`, `bin/`) are roots of their own.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "lib" | "main" | "mod") {
        parts.push(stem.to_string());
    }
    parts
}

/// Source text without comments (strings are kept: serde paths live in them).
fn strip_comments(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            let t = l.trim_start();
            if t.starts_with("//") {
                return String::new();
            }
            // A trailing comment outside a string.
            let mut in_str = false;
            let b = l.as_bytes();
            for i in 0..b.len() {
                match b[i] {
                    b'"' if i == 0 || b[i - 1] != b'\\' => in_str = !in_str,
                    b'/' if !in_str && b.get(i + 1) == Some(&b'/') => return l[..i].to_string(),
                    _ => {}
                }
            }
            l.to_string()
        })
        .collect()
}

/// The text before the first `#[cfg(test)]` (test modules may reach anywhere).
fn before_tests(lines: &[String]) -> usize {
    lines
        .iter()
        .position(|l| l.trim_start().starts_with("#[cfg(test)]"))
        .unwrap_or(lines.len())
}

/// Expand `a::{b, c::{d, e}}` into `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.to_string()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(expand)
        .map(|p| format!("{prefix}{p}"))
        .collect()
}

/// One path a file names, with the line it is on.
struct Reference {
    line: usize,
    path: Vec<String>,
    /// A `pub use` in a `lib.rs`/`mod.rs`: a re-export, not a dependency.
    reexport: bool,
}

/// The paths in `lines`: starting with `crate`, `super`, `self`, or one of `children` (the
/// file's child modules, named without `self::`).
fn references(lines: &[String], is_facade: bool, children: &[String]) -> Vec<Reference> {
    let end = before_tests(lines);
    let mut out = Vec::new();
    let mut i = 0;
    while i < end {
        let t = lines[i].trim_start();
        let is_use =
            t.starts_with("use ") || t.starts_with("pub use ") || t.starts_with("pub(crate) use ");
        if is_use {
            // Gather the whole statement (it may span lines).
            let first = i;
            let mut stmt = String::new();
            loop {
                stmt.push_str(lines[i].trim());
                stmt.push(' ');
                if lines[i].contains(';') || i + 1 >= end {
                    break;
                }
                i += 1;
            }
            let body = stmt
                .trim()
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ")
                .trim_start_matches("use ")
                .trim_end()
                .trim_end_matches(';');
            for p in expand(body) {
                let p = p.split(" as ").next().unwrap_or("").trim().to_string();
                let path: Vec<String> = p.split("::").map(|s| s.trim().to_string()).collect();
                let mut path = path;
                if children.contains(&path[0]) {
                    path.insert(0, "self".into());
                }
                if matches!(path[0].as_str(), "crate" | "super" | "self") {
                    out.push(Reference {
                        line: first + 1,
                        path,
                        reexport: is_facade && t.starts_with("pub"),
                    });
                }
            }
            i += 1;
            continue;
        }
        // Inline paths: crate::a::b, super::a (not $crate:: in macros).
        let l = &lines[i];
        let starts: Vec<String> = ["crate", "super"]
            .iter()
            .map(|s| s.to_string())
            .chain(children.iter().cloned())
            .map(|s| format!("{s}::"))
            .collect();
        for start in &starts {
            let is_child = !matches!(start.as_str(), "crate::" | "super::");
            let mut from = 0;
            while let Some(pos) = l[from..].find(start) {
                let at = from + pos;
                from = at + start.len();
                let before = l[..at].chars().last();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':') {
                    continue;
                }
                let rest: String = l[at..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                let mut path: Vec<String> = rest
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect();
                if is_child {
                    path.insert(0, "self".into());
                }
                out.push(Reference {
                    line: i + 1,
                    path,
                    reexport: false,
                });
            }
        }
        i += 1;
    }
    out
}

/// One crate: its files by module path, and what each file's `pub use` re-exports.
struct Crate {
    files: BTreeMap<Vec<String>, PathBuf>,
    lines: BTreeMap<PathBuf, Vec<String>>,
    /// (module, item name) → the module path it re-exports.
    reexports: BTreeMap<(Vec<String>, String), Vec<String>>,
}

impl Crate {
    fn load(src: &Path) -> Crate {
        let mut paths = Vec::new();
        rust_files(src, &mut paths);
        let mut c = Crate {
            files: BTreeMap::new(),
            lines: BTreeMap::new(),
            reexports: BTreeMap::new(),
        };
        for p in paths {
            if p.strip_prefix(src).is_ok_and(|r| r.starts_with("bin")) || p.ends_with("main.rs") {
                continue; // binaries are their own crates
            }
            let text = std::fs::read_to_string(&p).expect("read a source file");
            let m = module_path(src, &p);
            c.lines.insert(p.clone(), strip_comments(&text));
            c.files.insert(m, p);
        }
        for (m, p) in &c.files {
            let facade = p.ends_with("lib.rs") || p.ends_with("mod.rs");
            for r in references(&c.lines[p], facade, &c.children(m)) {
                if r.reexport {
                    if let Some(target) = c.absolute(m, &r.path) {
                        let name = r.path.last().cloned().unwrap_or_default();
                        c.reexports.insert((m.clone(), name), target);
                    }
                }
            }
        }
        // Re-exports of `child::Item` written without `self::`.
        for (m, p) in &c.files {
            let facade = p.ends_with("lib.rs") || p.ends_with("mod.rs");
            if !facade {
                continue;
            }
            for l in &c.lines[p][..before_tests(&c.lines[p])] {
                let t = l.trim_start();
                if let Some(body) = t.strip_prefix("pub use ") {
                    for e in expand(body.trim_end_matches(';')) {
                        let path: Vec<String> =
                            e.split("::").map(|s| s.trim().to_string()).collect();
                        let mut child = m.clone();
                        child.push(path[0].clone());
                        if c.files.contains_key(&child) {
                            let mut target = m.clone();
                            target.extend(path[..path.len() - 1].iter().cloned());
                            let name = path.last().cloned().unwrap_or_default();
                            let name = name.split(" as ").last().unwrap_or("").trim().to_string();
                            c.reexports.insert((m.clone(), name), target);
                        }
                    }
                }
            }
        }
        c
    }

    /// The names of the child modules of `m` that have files.
    fn children(&self, m: &[String]) -> Vec<String> {
        self.files
            .keys()
            .filter(|k| k.len() == m.len() + 1 && k.starts_with(m))
            .map(|k| k[m.len()].clone())
            .collect()
    }

    /// The absolute module path a reference starts from, with its remaining segments.
    fn absolute(&self, from: &[String], path: &[String]) -> Option<Vec<String>> {
        let mut base: Vec<String> = from.to_vec();
        let mut rest = path;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                base.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            _ => return None,
        }
        let mut full = base;
        full.extend(rest.iter().cloned());
        Some(full)
    }

    /// The file that defines what `full` (an absolute path) names.
    fn resolve(&self, full: &[String]) -> Option<PathBuf> {
        // The longest prefix that is a module file.
        let mut module: Vec<String> = Vec::new();
        let mut i = 0;
        while i < full.len() {
            let mut next = module.clone();
            next.push(full[i].clone());
            if self.files.contains_key(&next) {
                module = next;
                i += 1;
            } else {
                break;
            }
        }
        // An item re-exported by that module leads to the module that defines it.
        if let Some(item) = full.get(i) {
            if let Some(target) = self.reexports.get(&(module.clone(), item.clone())) {
                if *target != module {
                    let mut t = target.clone();
                    t.push(item.clone());
                    return self.resolve(&t);
                }
            }
        }
        self.files.get(&module).cloned()
    }

    /// File → (file, line, path) edges.
    fn edges(&self) -> BTreeMap<PathBuf, Vec<(PathBuf, usize, String)>> {
        let mut out: BTreeMap<PathBuf, Vec<(PathBuf, usize, String)>> = BTreeMap::new();
        for (m, p) in &self.files {
            let facade = p.ends_with("lib.rs") || p.ends_with("mod.rs");
            for r in references(&self.lines[p], facade, &self.children(m)) {
                if r.reexport {
                    continue;
                }
                let Some(full) = self.absolute(m, &r.path) else {
                    continue;
                };
                let Some(target) = self.resolve(&full) else {
                    continue;
                };
                if &target != p {
                    out.entry(p.clone())
                        .or_default()
                        .push((target, r.line, r.path.join("::")));
                }
            }
        }
        out
    }

    fn rel(&self, p: &Path) -> String {
        p.strip_prefix(workspace())
            .unwrap_or(p)
            .display()
            .to_string()
    }
}

/// A cycle through `start`, if any (depth-first search).
fn find_cycle(
    edges: &BTreeMap<PathBuf, Vec<(PathBuf, usize, String)>>,
) -> Option<Vec<(PathBuf, usize, String)>> {
    fn visit(
        node: &PathBuf,
        edges: &BTreeMap<PathBuf, Vec<(PathBuf, usize, String)>>,
        state: &mut BTreeMap<PathBuf, u8>,
        stack: &mut Vec<(PathBuf, usize, String)>,
    ) -> Option<Vec<(PathBuf, usize, String)>> {
        state.insert(node.clone(), 1);
        for (to, line, path) in edges.get(node).into_iter().flatten() {
            let shown = to.strip_prefix(workspace()).unwrap_or(to);
            stack.push((
                node.clone(),
                *line,
                format!("{path} -> {}", shown.display()),
            ));
            match state.get(to).copied().unwrap_or(0) {
                1 => {
                    let start = stack.iter().position(|(n, ..)| n == to).unwrap_or(0);
                    return Some(stack[start..].to_vec());
                }
                0 => {
                    if let Some(c) = visit(to, edges, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
            stack.pop();
        }
        state.insert(node.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in edges.keys() {
        if state.get(n).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(n, edges, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn no_file_depends_on_itself_through_others() {
    let mut problems = Vec::new();
    for src in crate_sources() {
        let c = Crate::load(&src);
        if let Some(cycle) = find_cycle(&c.edges()) {
            let text: Vec<String> = cycle
                .iter()
                .map(|(f, line, path)| format!("  {}:{line}: {path}", c.rel(f)))
                .collect();
            problems.push(format!("a cycle between files:\n{}", text.join("\n")));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn layer_of(component: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&component))
}

#[test]
fn agent_components_import_only_lower_layers() {
    let src = workspace().join("core/agent/src");
    let c = Crate::load(&src);
    // Every top-level module has a layer.
    let components: BTreeSet<String> = c.files.keys().filter_map(|m| m.first().cloned()).collect();
    let unplaced: Vec<&String> = components
        .iter()
        .filter(|m| layer_of(m).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "components without a layer (add them to LAYERS in {} and to lib.rs's direction line): {unplaced:?}",
        file!()
    );
    let component_of = |p: &Path| -> Option<String> { module_path(&src, p).first().cloned() };
    let mut problems = Vec::new();
    for (from, edges) in c.edges() {
        let Some(a) = component_of(&from) else {
            continue; // lib.rs
        };
        for (to, line, path) in edges {
            let Some(b) = component_of(&to) else {
                continue;
            };
            if a == b {
                continue;
            }
            let (la, lb) = (layer_of(&a).unwrap(), layer_of(&b).unwrap());
            if lb >= la {
                problems.push(format!(
                    "{}:{line}: `{path}`: {a} (layer {la}) may not import {b} (layer {lb}); see LAYERS",
                    c.rel(&from)
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn lib_rs_states_the_direction_in_the_layers_order() {
    let lib = std::fs::read_to_string(workspace().join("core/agent/src/lib.rs")).unwrap();
    // The paragraph that starts with "Direction".
    let line: String = lib
        .lines()
        .skip_while(|l| !l.contains("Direction"))
        .take_while(|l| l.trim() != "//!")
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        !line.is_empty(),
        "lib.rs states the direction in a paragraph starting with \"Direction\""
    );
    let mut last = 0;
    for layer in LAYERS.iter().rev() {
        for c in *layer {
            let at = line
                .find(&format!("`{c}`"))
                .unwrap_or_else(|| panic!("lib.rs's direction line does not name `{c}`"));
            assert!(
                at >= last || layer.len() > 1,
                "lib.rs's direction line lists `{c}` out of order"
            );
            last = last.max(at);
        }
    }
}

#[test]
fn no_source_file_is_over_700_lines_before_its_tests() {
    let mut problems = Vec::new();
    for src in crate_sources() {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let n = text
                .lines()
                .position(|l| l.trim_start().starts_with("#[cfg(test)]"))
                .unwrap_or_else(|| text.lines().count());
            if n > MAX_LINES_BEFORE_TESTS {
                problems.push(format!(
                    "{}: {n} lines before its tests (at most {MAX_LINES_BEFORE_TESTS}): split it by responsibility",
                    f.strip_prefix(workspace()).unwrap_or(&f).display()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_checker_sees_a_cycle_and_a_wrong_layer() {
    // A crate of three files where a → b → a, checked with the same code.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("store")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\nmod store;\n").unwrap();
    std::fs::write(
        src.join("a.rs"),
        "use crate::b::{B, other::X};\npub struct A;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("b.rs"),
        "pub struct B;\nfn f() { let _ = super::a::A; }\n#[cfg(test)]\nmod tests { use crate::store::S; }\n",
    )
    .unwrap();
    std::fs::write(src.join("store/mod.rs"), "mod inner;\npub use inner::S;\n").unwrap();
    std::fs::write(src.join("store/inner.rs"), "pub struct S;\n").unwrap();
    let c = Crate::load(&src);
    let cycle = find_cycle(&c.edges()).expect("a -> b -> a is a cycle");
    assert_eq!(
        cycle.len(),
        2,
        "{:?}",
        cycle.iter().map(|c| &c.2).collect::<Vec<_>>()
    );
    // A path through a re-export reaches the defining file.
    assert_eq!(
        c.resolve(&["store".into(), "S".into()]),
        Some(src.join("store/inner.rs"))
    );
    assert_eq!(
        expand("a::{b, c::{d, e as f}}"),
        ["a::b", "a::c::d", "a::c::e as f"]
    );
}
