//! Slurm's compressed host lists (`node[01-04,07]`, `SLURM_JOB_NODELIST`), expanded in
//! the order `scontrol show hostnames` prints them.
//!
//! The rules follow Slurm's `src/common/hostlist.c` (`_hostlist_create_bracketed`,
//! `_next_tok`, `_parse_range_list`, `_parse_single_range`, `_push_range_list`), checked
//! against `scontrol show hostnames` of Slurm 22.05 (the test `hostlist_agrees_with_scontrol`
//! in `core/slurm/tests/real_slurm.rs`):
//! - Hosts are separated by `,`, space or tab outside brackets; empty entries are skipped.
//! - Inside brackets, a comma-separated list of `N` or `LO-HI`; each number is printed
//!   with at least as many digits as `LO` was written with (`[008-11]` gives `008` to
//!   `011`, `[9-010]` gives `9`, `10`): the width is the length of `LO`'s text.
//!   `LO-` alone means `LO` (as `strtoul` of an empty `HI` is taken to be `LO`).
//! - A host may have several bracket groups (`a[1-2]-b[3-4]`), but nothing may follow the
//!   last `]`. The last group varies fastest; the others, from the right-most to the
//!   left-most, vary from slowest to faster (`a[1-2]b[3-4]c[5-6]` gives `a1b3c5 a1b3c6
//!   a2b3c5 a2b3c6 a1b4c5 ...`), as `_push_range_list` recurses.
//! - One range holds at most 65536 hosts (`MAX_RANGE`); `HI` below `LO` is an error.
//! - Duplicates are kept, order is kept (no sorting).
//!
//! Where Slurm guesses at malformed input, this module refuses it with an error naming the
//! offset and the text: an unclosed `[` (Slurm appends a `]` to the text before it), a `]`
//! without `[`, a `[` inside brackets, a sign or a space inside a number (which `strtoul`
//! skips), and a number over `u64`. The whole expansion is bounded by [`MAX_HOSTS`] (or
//! the limit given to [`expand_with_limit`]).

use std::fmt;

/// The most hosts [`expand`] returns: Slurm's own bound on one range (`MAX_RANGE`, 64 Ki
/// hosts in `hostlist.c`), applied here to the whole list.
pub const MAX_HOSTS: usize = 64 * 1024;

/// Slurm's bound on one range (`MAX_RANGE` in `src/common/hostlist.c`).
const MAX_RANGE: u64 = 64 * 1024;

/// A host list that could not be expanded: what was wrong, where (a byte offset into the
/// list) and the entry it was in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("host list {list:?}: {kind} at offset {offset} (in {entry:?})")]
pub struct HostlistError {
    /// The list as given, cut to 200 bytes.
    pub list: String,
    /// The byte offset of the fault in the list.
    pub offset: usize,
    /// The entry (one host or bracketed expression) holding the fault.
    pub entry: String,
    /// What was wrong.
    pub kind: HostlistErrorKind,
}

/// What was wrong in a host list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostlistErrorKind {
    /// A `[` without its `]`.
    UnclosedBracket,
    /// A `]` without a `[` before it.
    UnopenedBracket,
    /// A `[` inside brackets.
    NestedBracket,
    /// Text after the last `]` of a host (Slurm refuses `a[1-3]b`).
    TextAfterBracket,
    /// A range that is not `N` or `LO-HI` with decimal digits (the text).
    BadRange(String),
    /// `HI` below `LO` (the text).
    Descending(String),
    /// One range of more than Slurm's 65536 hosts (the text).
    RangeTooLarge(String),
    /// The whole list expands past the limit (the limit).
    TooManyHosts(usize),
}

impl fmt::Display for HostlistErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnclosedBracket => write!(f, "'[' is never closed"),
            Self::UnopenedBracket => write!(f, "']' without '['"),
            Self::NestedBracket => write!(f, "'[' inside brackets"),
            Self::TextAfterBracket => write!(f, "text after the last ']' of a host"),
            Self::BadRange(r) => write!(f, "range {r:?} is not N or LO-HI in decimal digits"),
            Self::Descending(r) => write!(f, "range {r:?} goes down"),
            Self::RangeTooLarge(r) => {
                write!(f, "range {r:?} holds more than Slurm's {MAX_RANGE} hosts")
            }
            Self::TooManyHosts(n) => write!(f, "the list expands to more than {n} hosts"),
        }
    }
}

/// One numeric range of a bracket group: `lo..=hi`, printed at least `width` digits wide.
#[derive(Debug, Clone, Copy)]
struct Range {
    lo: u64,
    hi: u64,
    width: usize,
}

impl Range {
    fn len(self) -> u64 {
        self.hi - self.lo + 1
    }
}

/// A piece of one host expression: literal text, or a bracket group.
#[derive(Debug)]
enum Piece<'a> {
    Text(&'a str),
    Group(Vec<Range>),
}

/// Expand `list` as `scontrol show hostnames` does, up to [`MAX_HOSTS`] hosts.
pub fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    expand_with_limit(list, MAX_HOSTS)
}

/// Expand `list`, refusing one that would give more than `limit` hosts (before any of
/// them is built).
pub fn expand_with_limit(list: &str, limit: usize) -> Result<Vec<String>, HostlistError> {
    let entries = split_entries(list)?;
    let mut parsed = Vec::with_capacity(entries.len());
    let mut total: u64 = 0;
    for (start, entry) in entries {
        let pieces = parse_entry(list, start, entry)?;
        let count = pieces.iter().fold(1u64, |n, p| match p {
            Piece::Text(_) => n,
            Piece::Group(ranges) => {
                n.saturating_mul(ranges.iter().map(|r| r.len()).fold(0, u64::saturating_add))
            }
        });
        total = total.saturating_add(count);
        if total > limit as u64 {
            return Err(error(
                list,
                start,
                entry,
                HostlistErrorKind::TooManyHosts(limit),
            ));
        }
        parsed.push(pieces);
    }
    let mut hosts = Vec::with_capacity(usize::try_from(total).unwrap_or(limit));
    for pieces in &parsed {
        push_expanded(&mut hosts, pieces);
    }
    Ok(hosts)
}

fn error(list: &str, offset: usize, entry: &str, kind: HostlistErrorKind) -> HostlistError {
    HostlistError {
        list: cut(list, 200),
        offset,
        entry: cut(entry, 200),
        kind,
    }
}

fn cut(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

fn is_separator(c: char) -> bool {
    matches!(c, ',' | ' ' | '\t')
}

/// The entries of `list` with their byte offsets: split at separators outside brackets
/// (Slurm's `_next_tok` with the separators `"\t, "`).
fn split_entries(list: &str) -> Result<Vec<(usize, &str)>, HostlistError> {
    let mut entries = Vec::new();
    let mut depth_open: Option<usize> = None;
    let mut start: Option<usize> = None;
    for (i, c) in list.char_indices() {
        match c {
            '[' => {
                if depth_open.is_some() {
                    let s = start.unwrap_or(i);
                    return Err(error(list, i, &list[s..], HostlistErrorKind::NestedBracket));
                }
                depth_open = Some(i);
                start.get_or_insert(i);
            }
            ']' => {
                if depth_open.take().is_none() {
                    let s = start.unwrap_or(i);
                    return Err(error(
                        list,
                        i,
                        &list[s..=i],
                        HostlistErrorKind::UnopenedBracket,
                    ));
                }
            }
            c if is_separator(c) && depth_open.is_none() => {
                if let Some(s) = start.take() {
                    entries.push((s, &list[s..i]));
                }
            }
            _ => {
                start.get_or_insert(i);
            }
        }
    }
    if let Some(open) = depth_open {
        let s = start.unwrap_or(open);
        return Err(error(
            list,
            open,
            &list[s..],
            HostlistErrorKind::UnclosedBracket,
        ));
    }
    if let Some(s) = start {
        entries.push((s, &list[s..]));
    }
    Ok(entries)
}

/// The pieces of one entry (brackets balanced and not nested: [`split_entries`] checked).
fn parse_entry<'a>(
    list: &str,
    start: usize,
    entry: &'a str,
) -> Result<Vec<Piece<'a>>, HostlistError> {
    let mut pieces = Vec::new();
    let mut rest = entry;
    let mut at = start;
    while let Some(open) = rest.find('[') {
        let close = open + rest[open..].find(']').unwrap_or(rest.len() - open - 1);
        if open > 0 {
            pieces.push(Piece::Text(&rest[..open]));
        }
        let inner = &rest[open + 1..close];
        let ranges = parse_ranges(inner)
            .map_err(|(rel, kind)| error(list, at + open + 1 + rel, entry, kind))?;
        pieces.push(Piece::Group(ranges));
        at += close + 1;
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        if pieces.is_empty() {
            pieces.push(Piece::Text(rest));
        } else {
            return Err(error(list, at, entry, HostlistErrorKind::TextAfterBracket));
        }
    }
    Ok(pieces)
}

/// `1-3,7,010-12` as ranges; on error the offset in `inner` and what was wrong.
fn parse_ranges(inner: &str) -> Result<Vec<Range>, (usize, HostlistErrorKind)> {
    let mut ranges = Vec::new();
    let mut at = 0;
    for part in inner.split(',') {
        ranges.push(parse_range(part).map_err(|kind| (at, kind))?);
        at += part.len() + 1;
    }
    Ok(ranges)
}

fn parse_range(part: &str) -> Result<Range, HostlistErrorKind> {
    let bad = || HostlistErrorKind::BadRange(part.to_string());
    let (lo_text, hi_text) = match part.split_once('-') {
        Some((lo, hi)) => (lo, hi),
        None => (part, ""),
    };
    let number = |t: &str| -> Result<u64, HostlistErrorKind> {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        t.parse::<u64>().map_err(|_| bad())
    };
    let lo = number(lo_text)?;
    // `LO-` is `LO`, as `_parse_single_range` reads an empty HI.
    let hi = if hi_text.is_empty() {
        lo
    } else {
        number(hi_text)?
    };
    if hi < lo {
        return Err(HostlistErrorKind::Descending(part.to_string()));
    }
    if hi - lo >= MAX_RANGE {
        return Err(HostlistErrorKind::RangeTooLarge(part.to_string()));
    }
    Ok(Range {
        lo,
        hi,
        width: lo_text.len(),
    })
}

/// Push every host of one entry, in `_push_range_list`'s order (see the module doc).
fn push_expanded(hosts: &mut Vec<String>, pieces: &[Piece<'_>]) {
    let Some(last_group) = pieces.iter().rposition(|p| matches!(p, Piece::Group(_))) else {
        hosts.push(
            pieces
                .iter()
                .map(|p| match p {
                    Piece::Text(t) => *t,
                    Piece::Group(_) => "",
                })
                .collect(),
        );
        return;
    };
    let Piece::Group(final_ranges) = &pieces[last_group] else {
        return;
    };
    let mut prefix: Vec<String> = Vec::new();
    let mut prefixes = Vec::new();
    expand_prefix(&pieces[..last_group], &mut prefix, &mut prefixes);
    for p in prefixes {
        for r in final_ranges {
            for n in r.lo..=r.hi {
                hosts.push(format!("{p}{n:0w$}", w = r.width));
            }
        }
    }
}

/// The prefixes of `pieces` (all but the final group): the right-most group varies
/// slowest, as `_push_range_list` takes the last `[` of the prefix first and recurses.
fn expand_prefix(pieces: &[Piece<'_>], suffix: &mut Vec<String>, out: &mut Vec<String>) {
    match pieces.iter().rposition(|p| matches!(p, Piece::Group(_))) {
        None => {
            let mut s: String = pieces
                .iter()
                .map(|p| match p {
                    Piece::Text(t) => *t,
                    Piece::Group(_) => "",
                })
                .collect();
            for part in suffix.iter().rev() {
                s.push_str(part);
            }
            out.push(s);
        }
        Some(g) => {
            let Piece::Group(ranges) = &pieces[g] else {
                return;
            };
            let after: String = pieces[g + 1..]
                .iter()
                .map(|p| match p {
                    Piece::Text(t) => *t,
                    Piece::Group(_) => "",
                })
                .collect();
            for r in ranges {
                for n in r.lo..=r.hi {
                    suffix.push(format!("{n:0w$}{after}", w = r.width));
                    expand_prefix(&pieces[..g], suffix, out);
                    suffix.pop();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(list: &str) -> Vec<String> {
        expand(list).unwrap_or_else(|e| panic!("{list}: {e}"))
    }

    #[test]
    fn the_forms_scontrol_expands() {
        // Each expected list was printed by `scontrol show hostnames` of Slurm 22.05.8.
        let cases: &[(&str, &str)] = &[
            ("node[01-04,07]", "node01 node02 node03 node04 node07"),
            ("a[1-2]-b[3-4]", "a1-b3 a1-b4 a2-b3 a2-b4"),
            ("x[8-11]", "x8 x9 x10 x11"),
            ("y[008-11]", "y008 y009 y010 y011"),
            ("z[9-010]", "z9 z10"),
            ("a,b", "a b"),
            ("a[1,2],c", "a1 a2 c"),
            ("[1-2]", "1 2"),
            ("a[1-2][3-4]", "a13 a14 a23 a24"),
            ("a[1-2]b[3]", "a1b3 a2b3"),
            ("a[01-2]", "a01 a02"),
            ("a[1-02]", "a1 a2"),
            ("a[0-0]", "a0"),
            ("a [1-2]", "a 1 2"),
            ("a[1-2],,b", "a1 a2 b"),
            ("a[00-01]", "a00 a01"),
            ("a1,a1", "a1 a1"),
            ("node1[1-2]", "node11 node12"),
            (
                "a[1-2]b[3-4]c[5-6]",
                "a1b3c5 a1b3c6 a2b3c5 a2b3c6 a1b4c5 a1b4c6 a2b4c5 a2b4c6",
            ),
            ("a[1-]", "a1"),
            ("b[3,1-2],a[1-2]", "b3 b1 b2 a1 a2"),
            ("", ""),
            (" \t,", ""),
        ];
        for (list, want) in cases {
            assert_eq!(ok(list).join(" "), *want, "{list}");
        }
    }

    #[test]
    fn malformed_lists_name_offset_and_text() {
        let cases: &[(&str, usize, &str)] = &[
            ("z[010-9]", 2, "goes down"),
            ("a[]", 2, "is not N or LO-HI"),
            ("a[x-y]", 2, "is not N or LO-HI"),
            ("a[1-2,]", 6, "is not N or LO-HI"),
            ("a[-2]", 2, "is not N or LO-HI"),
            ("a[1--2]", 2, "is not N or LO-HI"),
            ("a[+1]", 2, "is not N or LO-HI"),
            ("a[ 1]", 2, "is not N or LO-HI"),
            ("a[1-3]b", 6, "text after the last ']'"),
            ("ok,z[1-3", 4, "never closed"),
            ("z1-3]", 4, "without '['"),
            ("a[1[2]]", 3, "inside brackets"),
            ("a[1-100000]", 2, "more than Slurm's 65536"),
            ("a[99999999999999999999]", 2, "is not N or LO-HI"),
        ];
        for (list, offset, what) in cases {
            let e = expand(list).expect_err(list);
            let text = e.to_string();
            assert_eq!(e.offset, *offset, "{list}: {text}");
            assert!(text.contains(what), "{list}: {text}");
            assert!(text.contains(&format!("{list:?}")), "{list}: {text}");
        }
    }

    #[test]
    fn the_bound_is_checked_before_building() {
        assert_eq!(ok("n[1-65536]").len(), 65536);
        let e = expand("n[1-65536],m").unwrap_err();
        assert_eq!(e.kind, HostlistErrorKind::TooManyHosts(MAX_HOSTS), "{e}");
        // A product of groups past any memory is refused, not built.
        let e = expand("a[0-65535]b[0-65535]c[0-65535]").unwrap_err();
        assert_eq!(e.kind, HostlistErrorKind::TooManyHosts(MAX_HOSTS), "{e}");
        let e = expand_with_limit("a[1-3]", 2).unwrap_err();
        assert!(e.to_string().contains("more than 2 hosts"), "{e}");
    }

    /// A compressed form of `(prefix, numbers, width)` groups, and the hosts it stands for.
    fn compress(groups: &[(String, Vec<u64>, usize)]) -> (String, Vec<String>) {
        let mut parts = Vec::new();
        let mut hosts = Vec::new();
        for (prefix, numbers, width) in groups {
            let ranges: Vec<String> = numbers.iter().map(|n| format!("{n:0width$}")).collect();
            parts.push(format!("{prefix}[{}]", ranges.join(",")));
            hosts.extend(ranges.iter().map(|r| format!("{prefix}{r}")));
        }
        (parts.join(","), hosts)
    }

    proptest! {
        #[test]
        fn never_panics(list in ".{0,64}") {
            let _ = expand(&list);
        }

        #[test]
        fn never_panics_on_bracket_soup(list in "[a-c0-9\\[\\],\\- ]{0,40}") {
            if let Err(e) = expand(&list) {
                prop_assert!(e.offset <= list.len());
                prop_assert!(!e.to_string().is_empty());
            }
        }

        #[test]
        fn compressed_known_hosts_come_back(
            groups in proptest::collection::vec(
                ("[a-z][a-z0-9-]{0,8}[a-z-]", proptest::collection::vec(0u64..5000, 1..6), 1usize..5),
                1..5,
            ),
            plain in proptest::collection::vec("[a-z][a-z0-9.-]{0,10}", 0..4),
        ) {
            let (mut list, mut want) = compress(&groups);
            for p in &plain {
                list.push(',');
                list.push_str(p);
                want.push(p.clone());
            }
            prop_assert_eq!(expand(&list).unwrap(), want);
        }

        #[test]
        fn ranges_equal_their_listed_numbers(prefix in "[a-z]{1,5}", lo in 0u64..1000, len in 0u64..50, width in 1usize..5) {
            let hi = lo + len;
            let list = format!("{prefix}[{lo:0width$}-{hi}]");
            let (_, want) = compress(&[(prefix, (lo..=hi).collect(), width)]);
            prop_assert_eq!(expand(&list).unwrap(), want);
        }
    }
}
