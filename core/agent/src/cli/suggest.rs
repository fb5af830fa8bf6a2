//! Parsing the command line, with typo suggestions nearest first.
//!
//! clap lists the subcommands like a mistyped one ordered by Jaro similarity, most
//! similar last (`colect`: fleet, completions, collectd-types, collectd-exec, collect).
//! Here they are ranked by edit distance, the nearest first (`collect`), clap's order
//! breaking ties.

use clap::error::{ContextKind, ContextValue};
use clap::{CommandFactory, FromArgMatches};

use super::Cli;

/// The parsed command line; on an error, clap's message (with the suggestions re-ranked)
/// and its exit status, as `Cli::parse` does.
pub fn parse() -> Cli {
    parse_from(std::env::args_os()).unwrap_or_else(|e| e.exit())
}

/// [`parse`] over the given arguments (the first is the program's name).
pub fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let mut cmd = Cli::command();
    cmd.try_get_matches_from_mut(args)
        .and_then(|mut m| Cli::from_arg_matches_mut(&mut m))
        .map_err(|e| e.format(&mut cmd))
        .map_err(nearest_first)
}

/// The error with its suggested subcommands ordered by edit distance to what was typed.
fn nearest_first(mut e: clap::Error) -> clap::Error {
    let typed = match e.get(ContextKind::InvalidSubcommand) {
        Some(ContextValue::String(s)) => s.clone(),
        _ => return e,
    };
    if let Some(ContextValue::Strings(names)) = e.get(ContextKind::SuggestedSubcommand) {
        let ranked = rank(&typed, names);
        e.insert(
            ContextKind::SuggestedSubcommand,
            ContextValue::Strings(ranked),
        );
    }
    e
}

/// `names` nearest to `typed` first (Levenshtein distance); on equal distance, the one
/// clap found more similar (later in its list) first.
pub(crate) fn rank(typed: &str, names: &[String]) -> Vec<String> {
    let mut scored: Vec<(usize, usize, &String)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (edit_distance(typed, n), names.len() - i, n))
        .collect();
    scored.sort();
    scored.into_iter().map(|(_, _, n)| n.clone()).collect()
}

/// Levenshtein distance over characters: insertions, deletions, substitutions.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_each_change() {
        assert_eq!(edit_distance("colect", "collect"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }

    #[test]
    fn a_typo_of_collect_suggests_collect_first() {
        let e = parse_from(["rocewatch", "colect"]).unwrap_err();
        let Some(ContextValue::Strings(names)) = e.get(ContextKind::SuggestedSubcommand) else {
            panic!("no suggestions in {e}");
        };
        assert_eq!(
            names.first().map(String::as_str),
            Some("collect"),
            "{names:?}"
        );
        let text = e.render().to_string();
        let first = text.find("'collect'").expect("collect suggested");
        let fleet = text.find("'fleet'").unwrap_or(usize::MAX);
        assert!(first < fleet, "{text}");
    }

    #[test]
    fn ties_keep_clap_s_most_similar_first() {
        let names = vec!["ab".to_string(), "ba".to_string()];
        // Both are 2 edits from "xy"; clap put "ba" last (most similar).
        assert_eq!(rank("xy", &names), vec!["ba", "ab"]);
    }

    proptest::proptest! {
        #[test]
        fn edit_distance_is_a_distance(a in "[a-z-]{0,12}", b in "[a-z-]{0,12}") {
            let d = edit_distance(&a, &b);
            proptest::prop_assert_eq!(d, edit_distance(&b, &a));
            proptest::prop_assert_eq!(d == 0, a == b);
            proptest::prop_assert!(d <= a.len().max(b.len()));
            proptest::prop_assert!(d >= a.len().abs_diff(b.len()));
        }
    }
}
