//! The shape of the source tree, checked so that it stays, where the compiler cannot say
//! it (crates carry the layers: a wrong-way import between crates does not build):
//!
//! - crates depend only on crates of a lower layer (`CRATE_LAYERS`); no plugin crate
//!   depends on another, and only the agent depends on plugin crates, naming them in
//!   `builtins.rs` alone (read from `cargo metadata` and the agent's sources);
//! - docs/ARCHITECTURE.md's layer table lists the crates of `CRATE_LAYERS`, each at its
//!   layer;
//! - no two files of a crate depend on each other, directly or through others (an edge
//!   A → B is a path in A, `use` or inline or a serde `deserialize_with` string, naming an
//!   item defined in B; `mod x;` and `pub use` re-exports in `lib.rs`/`mod.rs` are not
//!   edges, and a path through a re-export leads to the file that defines the item);
//! - in the crates made of components (`COMPONENT_LAYERS`: the runtime, the agent and the
//!   doctor), a component imports only components of a lower layer, and `lib.rs` states
//!   that order;
//! - no source file in `core/` or `plugins/` has more than 700 lines of production code
//!   (everything but its `#[cfg(test)]` items: the test module, test-only `use`s and helpers).
//!
//! A failure names the crate or the file, the line and the path at fault.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace's crates, lowest layer first: a crate depends (as a normal or build
/// dependency) only on crates of a lower layer. Crates on one line must not depend on each
/// other. Plugins (`plugins/*`) may depend on the first three layers only: the contract
/// and the readers. docs/ARCHITECTURE.md's layer table is the readable copy, checked
/// against this one both ways (`the_layer_table_in_architecture_md_is_crate_layers`).
const CRATE_LAYERS: &[&[&str]] = &[
    &[
        "rocewatch-plugin-api",
        "rocewatch-process",
        "rocewatch-duration",
        "rocewatch-optics",
    ],
    &[
        "rocewatch-plugin-sdk",
        "rocewatch-sysfs",
        "rocewatch-metrics",
        "rocewatch-netlink",
        "rocewatch-pcap",
        "rocewatch-ethtool",
        "rocewatch-slurm",
        "rocewatch-fleet",
    ],
    &["rocewatch-klog", "rocewatch-congestion"],
    &["rocewatch-runtime"],
    &["rocewatch-web", "rocewatch-probes", "rocewatch-qos"],
    &["rocewatch-export"],
    &["rocewatch-remediation"],
    &["rocewatch-doctor"],
    &["rocewatch-health", "rocewatch-preflight"],
    &["rocewatch"],
];

/// Layers a plugin may depend on (the contract and the readers).
const PLUGIN_MAX_LAYER: usize = 2;

/// Crates made of components, with the components lowest layer first: a component may
/// import only components of a lower layer; components on one line must not import each
/// other.
const COMPONENT_LAYERS: &[(&str, &[&[&str]])] = &[
    (
        "core/runtime",
        &[
            &["util"],
            &["events"],
            &["selfmetrics", "audit"],
            &["store"],
            &["host"],
            &["rules"],
            &["pipeline"],
            &["app", "quarantine"],
        ],
    ),
    (
        "core/agent",
        &[
            &["builtins"],
            &["config"],
            &["quarantine"],
            &["app"],
            &["supervisor"],
            &["demo"],
            &["cli"],
        ],
    ),
    (
        "core/doctor",
        &[
            &["shell", "tool", "config"],
            &["check"],
            &["checks", "appenv"],
            &["guide"],
        ],
    ),
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

/// Production code: `lines` with each `#[cfg(test)]` item blanked (the test module, which
/// may reach anywhere, a test-only `use`, a test helper), wherever it is in the file, and
/// the names of the child modules declared test-only (`#[cfg(test)] mod x;`).
fn production(lines: &[String]) -> (Vec<String>, Vec<String>) {
    let mut out: Vec<String> = Vec::with_capacity(lines.len());
    let mut test_children = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() != "#[cfg(test)]" {
            out.push(lines[i].clone());
            i += 1;
            continue;
        }
        // The item the attribute applies to (after any further attributes).
        let mut j = i + 1;
        while j < lines.len()
            && (lines[j].trim().is_empty() || lines[j].trim_start().starts_with("#["))
        {
            j += 1;
        }
        let item = lines.get(j).map(|l| l.trim()).unwrap_or("");
        let decl = item
            .trim_start_matches("pub ")
            .trim_start_matches("pub(crate) ");
        if let Some(name) = decl.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
            test_children.push(name.trim().to_string());
        }
        // A test module is blanked like any test-only item; code after it is production.
        // Blank the item: to its `;` or to where its braces close.
        let mut depth: i64 = 0;
        let mut end = j;
        while end < lines.len() {
            depth +=
                lines[end].matches('{').count() as i64 - lines[end].matches('}').count() as i64;
            let t = lines[end].trim_end();
            if depth <= 0 && (t.ends_with(';') || t.ends_with('}')) {
                break;
            }
            end += 1;
        }
        for _ in i..=end.min(lines.len() - 1) {
            out.push(String::new());
        }
        i = end + 1;
    }
    (out, test_children)
}

/// How many lines of production code `text` has: every line but those of its
/// `#[cfg(test)]` items (the test module, test-only `use`s and helpers), wherever they are.
fn production_lines(text: &str) -> usize {
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let (prod, _) = production(&lines);
    let blanked = lines
        .iter()
        .zip(&prod)
        .filter(|(l, p)| p.is_empty() && !l.trim().is_empty())
        .count();
    lines.len() - blanked
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
    let end = lines.len();
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
        let mut test_only: BTreeSet<Vec<String>> = BTreeSet::new();
        for p in paths {
            if p.strip_prefix(src).is_ok_and(|r| r.starts_with("bin")) || p.ends_with("main.rs") {
                continue; // binaries are their own crates
            }
            let text = std::fs::read_to_string(&p).expect("read a source file");
            let m = module_path(src, &p);
            let (lines, test_children) = production(&strip_comments(&text));
            for child in test_children {
                let mut t = m.clone();
                t.push(child);
                test_only.insert(t);
            }
            c.lines.insert(p.clone(), lines);
            c.files.insert(m, p);
        }
        // Files of test-only modules (`#[cfg(test)] mod x;`) are tests.
        c.files
            .retain(|m, _| !test_only.iter().any(|t| m.starts_with(t)));
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
            for l in &c.lines[p] {
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

fn layer_of(layers: &[&[&str]], component: &str) -> Option<usize> {
    layers.iter().position(|l| l.contains(&component))
}

/// Imports against the layers of one crate made of components.
fn component_problems(dir: &str, layers: &[&[&str]]) -> Vec<String> {
    let src = workspace().join(dir).join("src");
    let c = Crate::load(&src);
    let components: BTreeSet<String> = c.files.keys().filter_map(|m| m.first().cloned()).collect();
    let unplaced: Vec<&String> = components
        .iter()
        .filter(|m| layer_of(layers, m).is_none())
        .collect();
    if !unplaced.is_empty() {
        return vec![format!(
            "{dir}: components without a layer (add them to COMPONENT_LAYERS in {} and to lib.rs's direction line): {unplaced:?}",
            file!()
        )];
    }
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
            let (la, lb) = (layer_of(layers, &a).unwrap(), layer_of(layers, &b).unwrap());
            if lb >= la {
                problems.push(format!(
                    "{}:{line}: `{path}`: {a} (layer {la}) may not import {b} (layer {lb}); see COMPONENT_LAYERS",
                    c.rel(&from)
                ));
            }
        }
    }
    problems
}

#[test]
fn components_import_only_lower_layers() {
    let problems: Vec<String> = COMPONENT_LAYERS
        .iter()
        .flat_map(|(dir, layers)| component_problems(dir, layers))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn lib_rs_states_the_direction_in_the_layers_order() {
    for (dir, layers) in COMPONENT_LAYERS {
        let lib = std::fs::read_to_string(workspace().join(dir).join("src/lib.rs")).unwrap();
        // The paragraph that starts with "Direction".
        let line: String = lib
            .lines()
            .skip_while(|l| !l.contains("Direction"))
            .take_while(|l| l.trim() != "//!")
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            !line.is_empty(),
            "{dir}/src/lib.rs states the direction in a paragraph starting with \"Direction\""
        );
        let mut last = 0;
        for layer in layers.iter().rev() {
            for c in *layer {
                let at = line.find(&format!("`{c}`")).unwrap_or_else(|| {
                    panic!("{dir}/src/lib.rs's direction line does not name `{c}`")
                });
                assert!(
                    at >= last || layer.len() > 1,
                    "{dir}/src/lib.rs's direction line lists `{c}` out of order"
                );
                last = last.max(at);
            }
        }
    }
}

#[test]
fn no_source_file_has_over_700_lines_of_production_code() {
    let mut problems = Vec::new();
    for src in crate_sources() {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for f in files {
            let n = production_lines(&std::fs::read_to_string(&f).unwrap());
            if n > MAX_LINES_BEFORE_TESTS {
                problems.push(format!(
                    "{}: {n} lines of production code (at most {MAX_LINES_BEFORE_TESTS}): split it by responsibility",
                    f.strip_prefix(workspace()).unwrap_or(&f).display()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A workspace package as `cargo metadata` describes it: its name, whether it is a
/// plugin (`plugins/*`), and its dependencies on other workspace packages with their kind
/// (`None`: normal, `Some("dev")`, `Some("build")`).
struct Package {
    name: String,
    plugin: bool,
    deps: Vec<(String, Option<String>)>,
}

/// Every workspace package, from `cargo metadata --no-deps`.
fn packages() -> Vec<Package> {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(workspace())
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let names: BTreeSet<String> = doc["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    doc["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let manifest = Path::new(p["manifest_path"].as_str().unwrap());
            Package {
                name: p["name"].as_str().unwrap().to_string(),
                plugin: manifest
                    .strip_prefix(workspace())
                    .is_ok_and(|r| r.starts_with("plugins")),
                deps: p["dependencies"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|d| names.contains(d["name"].as_str().unwrap()))
                    .map(|d| {
                        (
                            d["name"].as_str().unwrap().to_string(),
                            d["kind"].as_str().map(str::to_string),
                        )
                    })
                    .collect(),
            }
        })
        .collect()
}

/// What is wrong with the crate graph: a dependency against `CRATE_LAYERS`, a plugin
/// depending on a plugin or above the readers, a crate other than the agent depending on a
/// plugin (dev-dependencies of tests aside), a crate without a layer.
fn crate_graph_problems(packages: &[Package]) -> Vec<String> {
    let layer = |n: &str| CRATE_LAYERS.iter().position(|l| l.contains(&n));
    let plugins: BTreeSet<&str> = packages
        .iter()
        .filter(|p| p.plugin)
        .map(|p| p.name.as_str())
        .collect();
    let mut problems = Vec::new();
    for p in packages {
        let tests_only = p.name.starts_with("rocewatch-integration-tests")
            || matches!(p.name.as_str(), "fault-plugin" | "fake-probe");
        if tests_only {
            continue;
        }
        if !p.plugin && layer(&p.name).is_none() {
            problems.push(format!("{}: not in CRATE_LAYERS ({})", p.name, file!()));
            continue;
        }
        for (d, kind) in &p.deps {
            let dev = kind.as_deref() == Some("dev");
            if plugins.contains(d.as_str()) {
                if p.plugin {
                    problems.push(format!("{} depends on {d}: a plugin never depends on another plugin; shared reading lives in a core crate", p.name));
                } else if p.name != "rocewatch" && !dev {
                    problems.push(format!(
                        "{} depends on the plugin {d}: only the agent does, to list it in BUILTINS",
                        p.name
                    ));
                }
                continue;
            }
            if dev {
                continue;
            }
            let Some(ld) = layer(d) else { continue };
            if p.plugin {
                if ld > PLUGIN_MAX_LAYER {
                    problems.push(format!("the plugin {} depends on {d} (layer {ld}): plugins build on the contract and the readers only (layers 0 to {PLUGIN_MAX_LAYER})", p.name));
                }
            } else if let Some(lp) = layer(&p.name) {
                if ld >= lp {
                    problems.push(format!("{} (layer {lp}) depends on {d} (layer {ld}): a crate depends on lower layers only; see CRATE_LAYERS", p.name));
                }
            }
        }
    }
    problems
}

/// Rust files of the agent that name a plugin crate, other than `builtins.rs`.
fn agent_files_naming_plugins(plugins: &BTreeSet<String>) -> Vec<String> {
    let src = workspace().join("core/agent/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut problems = Vec::new();
    for f in files.iter().filter(|f| !f.ends_with("builtins.rs")) {
        let text = std::fs::read_to_string(f).unwrap();
        for p in plugins {
            let ident = p.replace('-', "_");
            if let Some(at) = text.find(&format!("{ident}::")) {
                let line = text[..at].lines().count();
                problems.push(format!(
                    "{}:{line}: names the plugin crate {ident}: the agent names plugins in builtins.rs only",
                    f.strip_prefix(workspace()).unwrap_or(f).display()
                ));
            }
        }
    }
    problems
}

#[test]
fn crates_depend_only_downwards_and_plugins_on_no_plugin() {
    let packages = packages();
    let mut problems = crate_graph_problems(&packages);
    let plugins: BTreeSet<String> = packages
        .iter()
        .filter(|p| p.plugin)
        .map(|p| p.name.clone())
        .collect();
    problems.extend(agent_files_naming_plugins(&plugins));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The layer table of docs/ARCHITECTURE.md's section "The layers" (`| layer | crates |
/// ... |`): every crate named in backticks in a row's second column, with the layer in its
/// first.
fn layer_table(doc: &str) -> Result<Vec<(String, usize)>, String> {
    let section = doc
        .split("\n## The layers\n")
        .nth(1)
        .ok_or("no section \"## The layers\"")?;
    let section = section.split("\n## ").next().unwrap_or(section);
    let rows: Vec<&str> = section
        .lines()
        .map(str::trim)
        .skip_while(|l| !l.starts_with("| layer |"))
        .take_while(|l| l.starts_with('|'))
        .collect();
    if rows.len() < 3 {
        return Err("no table headed `| layer | crates | ...` in \"The layers\"".into());
    }
    let mut out = Vec::new();
    // The header and the `|---|` line.
    for row in &rows[2..] {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let layer: usize = cells
            .get(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("row {row:?}: the first column is not a layer number"))?;
        let crates: Vec<&str> = cells
            .get(2)
            .map(|c| c.split('`').skip(1).step_by(2).collect())
            .unwrap_or_default();
        if crates.is_empty() {
            return Err(format!(
                "row {row:?}: no crate in backticks in the second column"
            ));
        }
        out.extend(crates.into_iter().map(|c| (c.to_string(), layer)));
    }
    Ok(out)
}

/// Where the documented layers (`table`) and `layers` (`CRATE_LAYERS`) differ, both ways:
/// a crate missing from either, or at another layer.
fn layer_table_problems(table: &[(String, usize)], layers: &[&[&str]]) -> Vec<String> {
    let in_code: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.iter().map(move |c| (*c, i)))
        .collect();
    let mut problems = Vec::new();
    let mut in_doc: BTreeMap<&str, usize> = BTreeMap::new();
    for (c, l) in table {
        if let Some(other) = in_doc.insert(c, *l) {
            problems.push(format!("{c}: twice in the table (layers {other} and {l})"));
        }
    }
    for (c, l) in &in_code {
        match in_doc.get(c) {
            None => problems.push(format!(
                "{c}: layer {l} in CRATE_LAYERS, missing from the table"
            )),
            Some(d) if d != l => problems.push(format!(
                "{c}: layer {d} in the table, layer {l} in CRATE_LAYERS"
            )),
            Some(_) => {}
        }
    }
    for (c, d) in &in_doc {
        if !in_code.contains_key(c) {
            problems.push(format!("{c}: layer {d} in the table, not in CRATE_LAYERS"));
        }
    }
    problems
}

#[test]
fn the_layer_table_in_architecture_md_is_crate_layers() {
    let path = workspace().join("docs/ARCHITECTURE.md");
    let doc = std::fs::read_to_string(&path).expect("read docs/ARCHITECTURE.md");
    let table = layer_table(&doc).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let problems = layer_table_problems(&table, CRATE_LAYERS);
    assert!(
        problems.is_empty(),
        "docs/ARCHITECTURE.md's layer table and CRATE_LAYERS ({}) differ:\n{}",
        file!(),
        problems.join("\n")
    );
}

#[test]
fn the_layer_table_check_sees_a_missing_a_moved_and_an_unknown_crate() {
    let doc = "# A\n\n## The layers\n\nProse.\n\n| layer | crates | what |\n|---|---|---|\n\
               | 1 | `b`, `x` | the top |\n| 0 | `a` | the contract, `not-a-crate` |\n\n## Next\n";
    let table = layer_table(doc).unwrap();
    assert_eq!(
        table,
        [
            ("b".to_string(), 1),
            ("x".to_string(), 1),
            ("a".to_string(), 0)
        ]
    );
    assert_eq!(
        layer_table_problems(&table, &[&["a", "b"], &["c"]]),
        [
            "b: layer 1 in the table, layer 0 in CRATE_LAYERS",
            "c: layer 1 in CRATE_LAYERS, missing from the table",
            "x: layer 1 in the table, not in CRATE_LAYERS",
        ]
    );
    assert!(layer_table_problems(&table, &[&["a"], &["b", "x"]]).is_empty());
    assert!(layer_table("## The layers\n\nno table\n").is_err());
    assert!(layer_table("## The layers\n| layer | crates |\n|---|---|\n| top | `a` |\n").is_err());
}

#[test]
fn the_crate_graph_check_sees_each_kind_of_violation() {
    let pkg = |name: &str, plugin: bool, deps: &[(&str, Option<&str>)]| Package {
        name: name.into(),
        plugin,
        deps: deps
            .iter()
            .map(|(d, k)| (d.to_string(), k.map(str::to_string)))
            .collect(),
    };
    let planted = [
        pkg(
            "rocewatch-counters-sysfs",
            true,
            &[("rocewatch-discovery-sysfs", None)],
        ),
        pkg(
            "rocewatch-discovery-sysfs",
            true,
            &[("rocewatch-runtime", None)],
        ),
        pkg("rocewatch-runtime", false, &[("rocewatch-resources", None)]),
        pkg("rocewatch-resources", true, &[]),
        pkg(
            "rocewatch-export",
            false,
            &[("rocewatch-remediation", None)],
        ),
        pkg(
            "rocewatch-doctor",
            false,
            &[("rocewatch-resources", Some("dev"))],
        ),
        pkg("rocewatch-unplaced", false, &[]),
    ];
    let problems = crate_graph_problems(&planted);
    for want in [
        "rocewatch-counters-sysfs depends on rocewatch-discovery-sysfs: a plugin never depends on another plugin",
        "the plugin rocewatch-discovery-sysfs depends on rocewatch-runtime (layer 3)",
        "rocewatch-runtime depends on the plugin rocewatch-resources",
        "rocewatch-export (layer 5) depends on rocewatch-remediation (layer 6)",
        "rocewatch-unplaced: not in CRATE_LAYERS",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(want)),
            "{want}\nnot in {problems:#?}"
        );
    }
    assert_eq!(
        problems.len(),
        5,
        "a test's dev-dependency is no violation: {problems:#?}"
    );
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

/// The file where metric names are spelt: every other production line names a metric
/// through `rocewatch_metrics::names`, so a rename breaks the build rather than a run.
const NAMES_HOME: &str = "core/metrics/src/names.rs";

/// Each production line of `text` (comments and test modules left out) that spells one of
/// `names` as a string literal: `(line number, name)`.
fn metric_literals(text: &str, names: &[&str]) -> Vec<(usize, String)> {
    let (prod, _) = production(&strip_comments(text));
    let mut out = Vec::new();
    for (i, line) in prod.iter().enumerate() {
        for lit in line.split('"').skip(1).step_by(2) {
            if names.contains(&lit) {
                out.push((i + 1, lit.to_string()));
            }
        }
    }
    out
}

#[test]
fn no_metric_name_is_a_string_outside_the_catalog() {
    let names = rocewatch_metrics::names::ALL;
    let mut problems = Vec::new();
    for src in crate_sources() {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for f in files {
            let rel = f.strip_prefix(workspace()).unwrap_or(&f).to_path_buf();
            if rel == Path::new(NAMES_HOME) {
                continue;
            }
            for (line, name) in metric_literals(&std::fs::read_to_string(&f).unwrap(), names) {
                problems.push(format!(
                    "{}:{line}: \"{name}\" spelt as a string: use rocewatch_metrics::names",
                    rel.display()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn production_code_is_every_line_but_test_items_even_after_the_test_module() {
    let text = "use a;\n#[cfg(test)]\nuse b;\nfn f() {}\n#[cfg(test)]\nmod tests {\n    fn t() {}\n}\nfn g() {}\n";
    assert_eq!(production_lines(text), 3, "use a, fn f and fn g");
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let (prod, _) = production(&lines);
    assert_eq!(prod[8], "fn g() {}", "code after the test module is read");
}

#[test]
fn the_metric_literal_check_sees_a_planted_name_and_nothing_else() {
    let text = r#"use rocewatch_metrics::names;
// "rdma.port.io" in a comment is fine
fn f(name: &str) -> bool {
    name == names::PORT_IO || name == "rdma.port.io" // planted
}
const OTHER: &str = "rdma.port.iox";

#[cfg(test)]
mod tests {
    const IN_TEST: &str = "rdma.port.io";
}
"#;
    assert_eq!(
        metric_literals(text, rocewatch_metrics::names::ALL),
        vec![(4, "rdma.port.io".to_string())]
    );
}

/// One home per concept: in `dir`, only the files under `home` (a folder of `dir`; `None`:
/// no file of `dir`) name `marker` in production code (comments and tests left out).
const CONCEPT_HOMES: &[(&str, &str, Option<&str>)] = &[
    // Fleet probing is core/probes/src/fleet/, the map refresh included.
    ("core/probes/src", "rocewatch_fleet", Some("fleet/")),
    ("core/agent/src", "FleetView", None),
    // The quarantine (the file, the watcher, the operator's hand) is
    // core/runtime/src/quarantine/; the agent and its CLI make none themselves.
    ("core/runtime/src", "QuarantineFile", Some("quarantine/")),
    ("core/agent/src", "Quarantine::now", None),
    // The preflight runner is rocewatch_preflight::verbs; the CLI supplies none.
    ("core/agent/src", "PairRunner", None),
];

/// The files of `files` (path relative to their crate's `src`, text) that name `marker`
/// in production code outside `home`: `path:line`.
fn concept_home_problems(
    files: &[(String, String)],
    marker: &str,
    home: Option<&str>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (rel, text) in files {
        if home.is_some_and(|h| rel.starts_with(h)) {
            continue;
        }
        let (prod, _) = production(&strip_comments(text));
        if let Some(i) = prod.iter().position(|l| l.contains(marker)) {
            out.push(format!("{rel}:{}", i + 1));
        }
    }
    out
}

#[test]
fn each_concept_lives_in_its_home() {
    let mut problems = Vec::new();
    for (dir, marker, home) in CONCEPT_HOMES {
        let src = workspace().join(dir);
        let mut paths = Vec::new();
        rust_files(&src, &mut paths);
        let files: Vec<(String, String)> = paths
            .iter()
            .map(|p| {
                let rel = p.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
                (rel, std::fs::read_to_string(p).unwrap())
            })
            .collect();
        for at in concept_home_problems(&files, marker, *home) {
            problems.push(format!(
                "{dir}/{at}: names `{marker}`, whose home is {} (CONCEPT_HOMES)",
                home.map_or("another crate".to_string(), |h| format!("{dir}/{h}"))
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_concept_home_check_sees_a_stray_file_and_not_comments_or_tests() {
    let files = vec![
        (
            "fleet/rounds.rs".to_string(),
            "use rocewatch_fleet::Nic;\n".to_string(),
        ),
        (
            "noise.rs".to_string(),
            "fn f() {}\nuse rocewatch_fleet::score;\n".to_string(),
        ),
        (
            "doc.rs".to_string(),
            "//! rocewatch_fleet is below\nfn g() {}\n".to_string(),
        ),
        (
            "test.rs".to_string(),
            "fn h() {}\n#[cfg(test)]\nmod tests {\n    use rocewatch_fleet::Nic;\n}\n".to_string(),
        ),
    ];
    assert_eq!(
        concept_home_problems(&files, "rocewatch_fleet", Some("fleet/")),
        ["noise.rs:2"]
    );
    assert_eq!(
        concept_home_problems(&files, "rocewatch_fleet", None),
        ["fleet/rounds.rs:1", "noise.rs:2"]
    );
}
