//! The README's and docs' examples that run on the fixture trees are run, and their
//! output compared with what the page shows, so the pages cannot drift from the binary.
//!
//! An example is a ```` ```console ```` block: `$ ` lines are commands, the lines after one
//! (up to the next `$ `) are what it prints (standard output, then standard error). In the
//! shown output a line `...` stands for any lines (none included) and `...` inside a line
//! for any text. A command with no lines after it is run and must succeed. `$ NAME=VALUE`
//! sets a variable for the later commands of the block (`$NAME`). A command runs when it
//! is `rocewatch ...` and reads nothing of this host: every path it names is in the
//! repository (a `--sysfs-root`, `--procfs-root`, `--rootfs` or `-c/--config` under it).
//! Commands that read this host, a lab guest or a network are skipped; the test prints
//! what it ran and what it skipped (and why), and fails if it ran fewer than it did when
//! it was written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How many examples ran when the test was written: a page losing its runnable examples
/// (a fixture renamed, a flag dropped from the example) fails here instead of going quiet.
const AT_LEAST: usize = 9;

struct Example {
    page: String,
    line: usize,
    vars: BTreeMap<String, String>,
    command: String,
    shown: Vec<String>,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

fn pages() -> Vec<PathBuf> {
    let root = root();
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// Every command of every console block of `text`, with the output shown after it.
fn examples_of(page: &str, text: &str) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    let mut in_console = false;
    let mut vars = BTreeMap::new();
    let mut current: Option<Example> = None;
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            out.extend(current.take());
            in_console = !in_console && line.trim() == "```console";
            vars.clear();
            continue;
        }
        if !in_console {
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ ") {
            out.extend(current.take());
            if let Some((name, value)) = assignment(cmd) {
                vars.insert(name, value);
                continue;
            }
            current = Some(Example {
                page: page.to_string(),
                line: i + 1,
                vars: vars.clone(),
                command: cmd.to_string(),
                shown: Vec::new(),
            });
        } else if let Some(ex) = current.as_mut() {
            ex.shown.push(line.to_string());
        }
    }
    out.extend(current);
    out
}

/// `NAME=VALUE` alone on a command line.
fn assignment(cmd: &str) -> Option<(String, String)> {
    let (name, value) = cmd.trim().split_once('=')?;
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        && !value.contains(char::is_whitespace);
    ok.then(|| (name.to_string(), value.to_string()))
}

/// The words of a command that runs on the repository's files alone, or why it is skipped.
fn runnable(ex: &Example) -> Result<Vec<String>, String> {
    // A `# comment` says where the command runs or what it does: the command is before it.
    let cmd = ex
        .command
        .split_once(" #")
        .map_or(ex.command.as_str(), |(c, _)| c);
    if cmd.trim_end().ends_with('\\') || cmd.contains(['|', '>', '<', ';', '&']) {
        return Err("a shell construct".into());
    }
    let mut words = Vec::new();
    for w in cmd.split_whitespace() {
        let mut w = w.to_string();
        for (name, value) in &ex.vars {
            w = w.replace(&format!("${name}"), value);
        }
        if w.contains('$') || w.contains(['\'', '"']) {
            return Err(format!("an unset variable or quoting in {w:?}"));
        }
        words.push(w);
    }
    if words.first().map(String::as_str) != Some("rocewatch") {
        return Err("not a rocewatch command".into());
    }
    let reads_repo = |flag: &str| {
        words
            .iter()
            .position(|w| w == flag)
            .and_then(|i| words.get(i + 1))
            .is_some_and(|p| root().join(p).exists())
    };
    let host_flags = ["--sysfs-root", "--procfs-root", "--rootfs"];
    let given: Vec<&str> = host_flags
        .iter()
        .copied()
        .filter(|f| words.iter().any(|w| w == f))
        .collect();
    if given.is_empty() && !(reads_repo("-c") || reads_repo("--config")) {
        return Err("reads this host".into());
    }
    if let Some(f) = given.iter().find(|f| !reads_repo(f)) {
        return Err(format!("{f} is not a path in the repository"));
    }
    Ok(words)
}

/// `line` against one shown line: `...` inside it stands for any text.
fn line_matches(shown: &str, line: &str) -> bool {
    let parts: Vec<&str> = shown.split("...").collect();
    if parts.len() == 1 {
        return shown == line;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !line.starts_with(first) || line.len() < first.len() + last.len() || !line.ends_with(last) {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// Whether `lines` is what `shown` shows (`...` lines standing for any lines).
fn matches(shown: &[String], lines: &[&str]) -> bool {
    match shown.split_first() {
        None => lines.is_empty(),
        Some((s, rest)) if s.trim() == "..." => {
            (0..=lines.len()).any(|skip| matches(rest, &lines[skip..]))
        }
        Some((s, rest)) => lines.split_first().is_some_and(|(l, more)| {
            line_matches(s.trim_end(), l.trim_end()) && matches(rest, more)
        }),
    }
}

#[test]
fn the_docs_examples_print_what_the_pages_show() {
    let root = root();
    let (mut ran, mut skipped, mut failures) = (Vec::new(), Vec::new(), Vec::new());
    for page in pages() {
        let name = page.strip_prefix(&root).unwrap().display().to_string();
        let text = std::fs::read_to_string(&page).unwrap();
        for ex in examples_of(&name, &text) {
            let at = format!("{}:{}: $ {}", ex.page, ex.line, ex.command);
            let words = match runnable(&ex) {
                Ok(w) => w,
                Err(why) => {
                    skipped.push(format!("{at}  ({why})"));
                    continue;
                }
            };
            let out = Command::new(env!("CARGO_BIN_EXE_rocewatch"))
                .args(&words[1..])
                .current_dir(&root)
                .env_remove("RUST_LOG")
                .env("NO_COLOR", "1")
                .env("HOME", std::env::temp_dir())
                .output()
                .unwrap();
            let printed = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let lines: Vec<&str> = printed.lines().collect();
            ran.push(at.clone());
            if ex.shown.is_empty() {
                if !out.status.success() {
                    failures.push(format!("{at}\nexited {}:\n{printed}", out.status));
                }
            } else if !matches(&ex.shown, &lines) {
                failures.push(format!(
                    "{at}\nthe page shows:\n{}\nit printed (exit {}):\n{printed}",
                    ex.shown.join("\n"),
                    out.status
                ));
            }
        }
    }
    eprintln!("ran {} examples:\n  {}", ran.len(), ran.join("\n  "));
    eprintln!("skipped {}:\n  {}", skipped.len(), skipped.join("\n  "));
    assert!(
        failures.is_empty(),
        "{} of {} examples print something else than their page shows:\n\n{}",
        failures.len(),
        ran.len(),
        failures.join("\n\n")
    );
    assert!(
        ran.len() >= AT_LEAST,
        "only {} examples ran, {AT_LEAST} when this test was written: a page lost its runnable examples",
        ran.len()
    );
}

#[test]
fn the_matcher_takes_elisions_and_nothing_else() {
    let shown = |s: &str| s.lines().map(String::from).collect::<Vec<_>>();
    assert!(matches(&shown("a\n...\nd"), &["a", "b", "c", "d"]));
    assert!(matches(&shown("a\n...\nd"), &["a", "d"]));
    assert!(!matches(&shown("a\n...\nd"), &["a", "b"]));
    assert!(!matches(&shown("a\nb"), &["a", "c"]));
    assert!(!matches(&shown("a"), &["a", "extra"]));
    assert!(matches(&shown("FAIL x: y; ..."), &["FAIL x: y; and more"]));
    assert!(matches(
        &shown("WARN a (...), b: ..."),
        &["WARN a (c d), b: e"]
    ));
    assert!(!matches(&shown("WARN a (...), b"), &["WARN a (c d), c"]));
    let ex = examples_of(
        "p.md",
        "```console\n$ F=x/y\n$ rocewatch a --sysfs-root $F/sys\nout\n```\n",
    );
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].shown, vec!["out"]);
    assert_eq!(ex[0].vars["F"], "x/y");
}
