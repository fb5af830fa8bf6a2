//! The dumps operators paste, into an [`Eeprom`]:
//!
//! - `ethtool -m DEV hex on`: an `Offset  Values` table, lines `0x0000:  03 04 07 ...`;
//! - `hexdump -C` (of `ethtool -m DEV raw on`): `00000000  03 04 07 ... |....|`, a `*`
//!   line for repeats of the line before it, a last line with only the length;
//! - `xxd -g1`: `00000000: 03 04 07 ...  ....`;
//! - `ethtool -m DEV raw on` itself: the bytes (anything that is not text).
//!
//! Offsets are those of ethtool's linear layout (see [`Eeprom::from_linear`]). A page is
//! kept only when all its 128 bytes are in the dump; the lower page must be.

use crate::Eeprom;

/// What is wrong with a dump, and where (1-based line, or byte offset).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DumpError {
    #[error("line {line}: {detail}")]
    Line { line: usize, detail: String },
    #[error("offset 0x{offset:04x}: {detail}")]
    Offset { offset: usize, detail: String },
    #[error("{0}")]
    Layout(#[from] crate::Error),
}

/// The largest dump taken: ethtool's linear layout reaches page 0xff at 0x8000 at most.
const MAX_LEN: usize = 0x80 * 257;

/// Reads a dump in any of the formats above.
pub fn parse(bytes: &[u8]) -> Result<Eeprom, DumpError> {
    match std::str::from_utf8(bytes) {
        Ok(text) if is_text(text) => parse_text(text),
        _ => Ok(Eeprom::from_linear(bytes)?),
    }
}

/// Text is what a terminal shows: printable characters and whitespace. A binary dump
/// starts with the identifier byte, a control character for every module family.
fn is_text(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| !c.is_control() || c == '\n' || c == '\r' || c == '\t')
}

fn parse_text(text: &str) -> Result<Eeprom, DumpError> {
    let mut bytes: Vec<Option<u8>> = Vec::new();
    let mut previous: Option<Vec<u8>> = None;
    let mut repeat_from: Option<usize> = None;
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim();
        if trimmed == "*" {
            repeat_from = Some(line);
            continue;
        }
        let Some((offset, values)) = split_offset(trimmed) else {
            continue;
        };
        let offset = usize::from_str_radix(offset, 16).map_err(|_| DumpError::Line {
            line,
            detail: format!("offset {offset:?} is not hexadecimal"),
        })?;
        if offset > MAX_LEN {
            return Err(DumpError::Line {
                line,
                detail: format!("offset 0x{offset:x} is past any module's memory"),
            });
        }
        if let (Some(star_line), Some(prev)) = (repeat_from.take(), previous.as_ref()) {
            fill_repeat(&mut bytes, prev, offset, star_line)?;
        }
        let values = hex_values(values, line)?;
        if offset + values.len() > MAX_LEN {
            return Err(DumpError::Line {
                line,
                detail: "bytes past any module's memory".to_string(),
            });
        }
        store(&mut bytes, offset, &values, line)?;
        if !values.is_empty() {
            previous = Some(values);
        }
    }
    if bytes.is_empty() {
        return Err(DumpError::Line {
            line: 1,
            detail: "no dump lines (expected `0x0000: 03 04 ...` as `ethtool -m DEV hex on` \
                     prints, or `hexdump -C` / `xxd` lines)"
                .to_string(),
        });
    }
    Eeprom::from_sparse(&bytes).map_err(|e| match e {
        crate::Error::TooShort { .. } => DumpError::Offset {
            offset: bytes
                .iter()
                .position(Option::is_none)
                .unwrap_or(bytes.len()),
            detail: "the lower page (0x0000-0x007f) is incomplete".to_string(),
        },
        other => DumpError::Layout(other),
    })
}

/// The offset and the rest of a dump line: `0x0010:`, `00000010:` (xxd), `00000010`
/// followed by two spaces (hexdump -C). Other lines (headers, blank) are `None`.
fn split_offset(line: &str) -> Option<(&str, &str)> {
    let (head, rest) = match line.split_once(':') {
        Some((head, rest)) if !head.contains(char::is_whitespace) => (head, rest),
        _ => line.split_once(char::is_whitespace).unwrap_or((line, "")),
    };
    let digits = head.strip_prefix("0x").unwrap_or(head);
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    // A word like "Offset" or "------" is not a dump line; a hexadecimal word without
    // "0x" or ':' counts only when it is a hexdump offset (at least 7 digits).
    if !line.contains(':') && !head.starts_with("0x") && digits.len() < 7 {
        return None;
    }
    Some((digits, rest))
}

/// The byte columns of a line: hexdump -C's, up to its text column framed by `|` at both
/// ends (the columns split by two spaces in the middle); else xxd's and ethtool's, up to
/// the first run of two spaces or a tab after the bytes (xxd's text column, which shows
/// byte 0x7c as `|` anywhere, the end included). Every token there must be a byte.
fn hex_values(rest: &str, line: usize) -> Result<Vec<u8>, DumpError> {
    let is_byte = |token: &str| token.len() == 2 && token.chars().all(|c| c.is_ascii_hexdigit());
    let hexdump = rest
        .trim_end()
        .strip_suffix('|')
        .and_then(|framed| framed.split_once('|'))
        .map(|(columns, _)| columns)
        // The frame opens the text column: after the bytes' whitespace, not inside xxd's
        // text (an xxd text column opening with `|` reads the same either way).
        .filter(|columns| columns.ends_with(char::is_whitespace));
    let columns = hexdump.unwrap_or_else(|| {
        let rest = rest.trim_start();
        let end = [rest.find("  "), rest.find('\t')]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(rest.len());
        &rest[..end]
    });
    let mut values = Vec::new();
    for token in columns.split_whitespace() {
        if !is_byte(token) {
            return Err(DumpError::Line {
                line,
                detail: format!("{token:?} is not a byte (two hexadecimal digits)"),
            });
        }
        values.push(u8::from_str_radix(token, 16).expect("checked hex"));
    }
    if values.len() > 16 {
        return Err(DumpError::Line {
            line,
            detail: format!("{} bytes on one line (at most 16)", values.len()),
        });
    }
    Ok(values)
}

fn store(
    bytes: &mut Vec<Option<u8>>,
    offset: usize,
    values: &[u8],
    line: usize,
) -> Result<(), DumpError> {
    if bytes.len() < offset + values.len() {
        bytes.resize(offset + values.len(), None);
    }
    for (i, value) in values.iter().enumerate() {
        if bytes[offset + i].is_some_and(|old| old != *value) {
            return Err(DumpError::Line {
                line,
                detail: format!("offset 0x{:04x} given twice, differently", offset + i),
            });
        }
        bytes[offset + i] = Some(*value);
    }
    Ok(())
}

/// hexdump's `*`: the line before it repeats until the next offset.
fn fill_repeat(
    bytes: &mut Vec<Option<u8>>,
    previous: &[u8],
    until: usize,
    line: usize,
) -> Result<(), DumpError> {
    let mut at = bytes.len();
    while at + previous.len() <= until {
        store(bytes, at, previous, line)?;
        at += previous.len();
    }
    if at != until {
        return Err(DumpError::Line {
            line,
            detail: format!("`*` repeats do not reach offset 0x{until:x}"),
        });
    }
    Ok(())
}
