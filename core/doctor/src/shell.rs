//! Text that lands in a shell: a POSIX `sh` word that expands to exactly the string it
//! was made from, and one-line text for comments and messages that a name cannot break
//! out of.
//!
//! Names come from outside: a netdev may be called `$(touch${IFS}P)` (net/core/dev.c
//! `dev_valid_name` forbids only `/`, `:` and white space), an RDMA device may be renamed
//! to anything `device_rename` takes (drivers/infiniband/core/device.c
//! `ib_device_rename`), a host name may hold any byte but NUL, and a sysfs tree given
//! with `--sysfs-root` may hold anything at all. Every place that prints such a name for
//! a shell goes through here.

/// Characters that mean nothing to `sh` anywhere in an argument word.
fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || "=,:^_./-+@%".contains(c)
}

/// `s` as one POSIX `sh` word that expands to exactly `s`: bare when every character
/// means nothing to the shell, else in single quotes (inside which nothing is special;
/// a quote is written `'\''`). Line breaks and other control characters stay literal
/// inside the quotes: exact in a script; text shown on one line takes [`word_on_one_line`].
pub fn quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(plain) {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Whether `s` holds a control character (a line break, a carriage return, an escape...).
pub fn has_control(s: &str) -> bool {
    s.chars().any(char::is_control)
}

/// `s` on one line: each control character as an escape (`\n`, `\r`, `\t`, `\x1b`), so a
/// name in a `#` comment, a warning or a terminal line cannot end it or start another.
/// Text without control characters is returned as it is.
pub fn one_line(s: &str) -> String {
    if !has_control(s) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str(r"\n"),
            '\r' => out.push_str(r"\r"),
            '\t' => out.push_str(r"\t"),
            c if c.is_control() => out.push_str(&format!(r"\x{:02x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

/// `s` as a word for a command shown on one line to be copied (a doctor fix): [`quote`]
/// of `s`, or, when `s` holds control characters, of its [`one_line`] form. POSIX `sh`
/// cannot write a line break inside a word on one line without running a command, so
/// such a name is shown escaped: the command then names no device and fails, rather than
/// running anything else.
pub fn word_on_one_line(s: &str) -> String {
    quote(&one_line(s))
}

/// Test support: whether `needle` occurs in `text` and every occurrence lies inside
/// single quotes as `sh` reads the text (backslashes and double quotes outside single
/// quotes understood). Text for people mixes prose with commands: an apostrophe between
/// two letters (`vendor's`) is taken as prose, not a quote.
#[cfg(test)]
pub(crate) fn only_single_quoted(text: &str, needle: &str) -> bool {
    let b = text.as_bytes();
    let mut inside = vec![false; b.len()];
    let (mut single, mut double) = (false, false);
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let letter = |j: Option<usize>| {
            j.and_then(|j| b.get(j))
                .is_some_and(u8::is_ascii_alphabetic)
        };
        if single {
            if c == b'\'' {
                single = false;
            } else {
                inside[i] = true;
            }
        } else if c == b'\\' {
            i += 2;
            continue;
        } else if c == b'"' {
            double = !double;
        } else if c == b'\'' && !double && !(letter(i.checked_sub(1)) && letter(Some(i + 1))) {
            single = true;
        }
        i += 1;
    }
    let mut hits = text.match_indices(needle).peekable();
    hits.peek().is_some() && hits.all(|(at, n)| (at..at + n.len()).all(|j| inside[j]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What `sh` makes of `word`: `printf %s WORD` run by `sh -c`.
    fn sh_expands(word: &str) -> Vec<u8> {
        let o = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("printf %s {word}"))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .output()
            .expect("sh runs");
        assert!(
            o.status.success(),
            "sh -c 'printf %s {word}': {}",
            String::from_utf8_lossy(&o.stderr)
        );
        o.stdout
    }

    #[test]
    fn words() {
        assert_eq!(quote("=mlx5_0:1,mlx5_1:1"), "=mlx5_0:1,mlx5_1:1");
        assert_eq!(quote("^openib"), "^openib");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("$(touch${IFS}P)"), "'$(touch${IFS}P)'");
        assert_eq!(quote("~root"), "'~root'");
        assert_eq!(quote("a\nb"), "'a\nb'");
        assert_eq!(
            sh_expands(&quote("a'b\"c`d`$(e)\\f\ng")),
            b"a'b\"c`d`$(e)\\f\ng"
        );
    }

    #[test]
    fn the_test_helper_reads_quotes_as_sh_does() {
        assert!(only_single_quoted("ip link set '$(touch P)' up", "touch"));
        assert!(!only_single_quoted("ip link set $(touch P) up", "touch"));
        assert!(!only_single_quoted(
            "the vendor's tool: x $(touch P)",
            "touch"
        ));
        assert!(!only_single_quoted("echo \"'$(touch P)'\"", "touch"));
        assert!(!only_single_quoted("ip link set eth0 up", "touch"));
        assert!(only_single_quoted(&quote("a'b$(touch P)"), "touch"));
    }

    #[test]
    fn one_line_text() {
        assert_eq!(one_line("eth0"), "eth0");
        assert_eq!(one_line("a\nb\r\t\u{1b}[2J"), r"a\nb\r\t\x1b[2J");
        assert_eq!(one_line("\u{9b}"), r"\x9b");
        assert_eq!(word_on_one_line("x\n; touch P"), r"'x\n; touch P'");
        assert_eq!(word_on_one_line("ens1f0np0"), "ens1f0np0");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Any string but one with NUL (no file name, sysfs value or argument holds one)
        /// comes back from `sh` byte for byte.
        #[test]
        fn sh_expands_a_quoted_word_to_the_string(s in "[^\u{0}]*") {
            prop_assert_eq!(sh_expands(&quote(&s)), s.as_bytes());
        }

        #[test]
        fn one_line_has_no_control_character(s in any::<String>()) {
            let l = one_line(&s);
            prop_assert!(!has_control(&l), "{:?}", l);
            prop_assert!(!word_on_one_line(&s).contains('\n'));
        }
    }
}
