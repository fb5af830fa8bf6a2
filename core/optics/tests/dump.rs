//! The dump formats: the fixtures (tests/fixtures, made from the builders, see SOURCE.md)
//! read back to the builders' bytes; xxd and raw bytes; errors name the line or offset.

mod build;

use std::path::PathBuf;

use build::{Cmis, Qsfp, Sfp};
use rocewatch_optics::dump::{parse, DumpError};
use rocewatch_optics::{decode, Problem};

/// `ethtool -m DEV hex on`: the "Offset Values" table, lines of 16 bytes; `None` bytes
/// (pages not read) leave their lines out.
fn ethtool_hex(bytes: &[Option<u8>]) -> String {
    let mut out = String::from("Offset\t\tValues\n------\t\t------\n");
    for (line, chunk) in bytes.chunks(16).enumerate() {
        if chunk.iter().all(Option::is_some) {
            let values: Vec<String> = chunk
                .iter()
                .map(|b| format!("{:02x}", b.unwrap()))
                .collect();
            out.push_str(&format!("0x{:04x}:\t\t{}\n", line * 16, values.join(" ")));
        }
    }
    out
}

/// `hexdump -C`: `*` for lines equal to the one before, the length last.
fn hexdump_c(bytes: &[u8]) -> String {
    let mut out = String::new();
    let mut previous: Option<&[u8]> = None;
    let mut starred = false;
    for (line, chunk) in bytes.chunks(16).enumerate() {
        if previous == Some(chunk) {
            if !starred {
                out.push_str("*\n");
                starred = true;
            }
            continue;
        }
        starred = false;
        previous = Some(chunk);
        let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
        let text: String = chunk
            .iter()
            .map(|&b| {
                if (0x20..0x7f).contains(&b) {
                    b as char
                } else {
                    '.'
                }
            })
            .collect();
        out.push_str(&format!(
            "{:08x}  {}  {}  |{}|\n",
            line * 16,
            hex[..8].join(" "),
            hex[8..].join(" "),
            text
        ));
    }
    out.push_str(&format!("{:08x}\n", bytes.len()));
    out
}

/// The CMIS builder in the linear layout: upper page N at 0x80 * (N + 1), bank 0.
fn cmis_linear() -> Vec<Option<u8>> {
    let e = Cmis::new(1).eeprom();
    let mut bytes = vec![None; 0x80 * 0x13];
    let mut put = |at: usize, page: &[u8; 128]| {
        for (i, b) in page.iter().enumerate() {
            bytes[at + i] = Some(*b);
        }
    };
    put(0, e.lower());
    for page in [0x00u8, 0x01, 0x02, 0x11] {
        put(0x80 * (usize::from(page) + 1), e.page(0, page).unwrap());
    }
    bytes
}

fn fixtures() -> Vec<(&'static str, Vec<u8>)> {
    let mut flagged = Sfp::new();
    flagged.a2[104..106].copy_from_slice(&100u16.to_be_bytes()); // 0.0100 mW
    flagged.a2[113] = 0x40;
    flagged.a2[117] = 0x40;
    let sfp: Vec<Option<u8>> = flagged.linear().into_iter().map(Some).collect();
    let mut zero = Sfp::new();
    zero.a2[96..106].fill(0);
    vec![
        ("sfp-10g-sr-rx-low.hex", ethtool_hex(&sfp).into_bytes()),
        (
            "qsfp28-sr4.hexdump",
            hexdump_c(&Qsfp::new().linear()).into_bytes(),
        ),
        ("qsfp-dd-dr4.hex", ethtool_hex(&cmis_linear()).into_bytes()),
        ("sfp-zero-dom.bin", zero.linear()),
    ]
}

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The fixture files are the builders' modules, rendered as the tools print them
/// (`SNAPSHOTS=overwrite` rewrites them after a deliberate change to a builder).
#[test]
fn fixtures_are_the_builders_modules() {
    for (name, content) in fixtures() {
        let path = fixture_dir().join(name);
        if std::env::var("SNAPSHOTS").as_deref() == Ok("overwrite") {
            std::fs::write(&path, &content).unwrap();
        }
        let on_disk = std::fs::read(&path).unwrap_or_default();
        assert!(
            on_disk == content,
            "{name} differs from its builder (SNAPSHOTS=overwrite)"
        );
    }
}

#[test]
fn every_fixture_format_reads_back_to_its_bytes() {
    let sfp = parse(&std::fs::read(fixture_dir().join("sfp-10g-sr-rx-low.hex")).unwrap()).unwrap();
    assert_eq!(sfp.a2().unwrap()[113], 0x40);
    let qsfp = parse(&std::fs::read(fixture_dir().join("qsfp28-sr4.hexdump")).unwrap()).unwrap();
    let built = Qsfp::new().linear();
    assert_eq!(&qsfp.page(0, 3).unwrap()[..], &built[0x200..0x280]);
    assert_eq!(&qsfp.lower()[..], &built[..128]);
    let cmis = parse(&std::fs::read(fixture_dir().join("qsfp-dd-dr4.hex")).unwrap()).unwrap();
    assert!(cmis.page(0, 0x11).is_some() && cmis.page(0, 0x03).is_none());
    let zero = parse(&std::fs::read(fixture_dir().join("sfp-zero-dom.bin")).unwrap()).unwrap();
    let m = decode(&zero).unwrap();
    assert!(m.problems.contains(&Problem::DiagnosticsAllZero));
}

#[test]
fn xxd_lines_and_short_last_lines() {
    let bytes = Qsfp::new().linear();
    let mut text = String::new();
    for (line, chunk) in bytes[..256].chunks(16).enumerate() {
        let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
        text.push_str(&format!("{:08x}: {}  ab cd\n", line * 16, hex.join(" ")));
    }
    let e = parse(text.as_bytes()).unwrap();
    assert_eq!(&e.page(0, 0).unwrap()[..], &bytes[128..256]);
}

/// xxd's text column shows byte 0x7c as `|`: such a line is xxd's, not hexdump -C's
/// (whose text column is framed by `|` at both ends), including a text column that ends in
/// `|`.
#[test]
fn xxd_text_column_with_a_bar() {
    let mut bytes = Qsfp::new().linear();
    bytes[0x10] = 0x7c;
    bytes[0x2f] = 0x7c;
    let mut text = String::new();
    for (line, chunk) in bytes[..256].chunks(16).enumerate() {
        let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
        let shown: String = chunk
            .iter()
            .map(|&b| {
                if (0x20..0x7f).contains(&b) {
                    b as char
                } else {
                    '.'
                }
            })
            .collect();
        text.push_str(&format!("{:08x}: {}  {shown}\n", line * 16, hex.join(" ")));
    }
    assert!(text.contains("|"), "{text}");
    let e = parse(text.as_bytes()).unwrap();
    assert_eq!(&e.lower()[..], &bytes[..128]);
    assert_eq!(&e.page(0, 0).unwrap()[..], &bytes[128..256]);
}

#[test]
fn errors_name_the_line_or_the_offset() {
    let bad = "Offset\t\tValues\n------\t\t------\n0x0000:\t\t03 04 zz 00\n";
    assert_eq!(
        parse(bad.as_bytes()),
        Err(DumpError::Line {
            line: 3,
            detail: "\"zz\" is not a byte (two hexadecimal digits)".to_string()
        })
        .map(|_: ()| unreachable!())
    );
    let twice = "0x0000: 03 04\n0x0001: 05\n";
    assert!(matches!(
        parse(twice.as_bytes()),
        Err(DumpError::Line { line: 2, .. })
    ));
    let short = "0x0000: 03 04 07 10\n";
    assert!(matches!(
        parse(short.as_bytes()),
        Err(DumpError::Offset { offset: 4, .. })
    ));
    let prose = "Identifier : 0x03 (SFP)\nVendor name : ACME\n";
    assert!(matches!(
        parse(prose.as_bytes()),
        Err(DumpError::Line { line: 1, .. })
    ));
}
