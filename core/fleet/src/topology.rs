//! The topology file: where each NIC of the fleet hangs, as a CMDB exports it.
//!
//! CSV with a header naming at least `host,rail,addr,tor` (any order; `tor_port` is read
//! when present; other columns are ignored), one line per NIC:
//!
//! ```text
//! host,rail,addr,tor,tor_port
//! gpu001,0,10.0.0.1,leaf-r01-a,Ethernet1/1
//! gpu001,1,10.0.1.1,leaf-r01-b,Ethernet1/1
//! ```
//!
//! - `host`: the host's name as the fleet knows it (its Slurm or Kubernetes node name);
//! - `rail`: the NIC's rank on its host (0 to 63; `rocewatch env` order: 0..7 on an
//!   eight-NIC host);
//! - `addr`: the IP address its probes go to (the RoCE v2 GID's address);
//! - `tor`: the name of the switch (top of rack, or leaf) its port is cabled to.
//!
//! Fields follow RFC 4180: a field may be quoted (`"a,b"`, `""` for a quote inside);
//! a quoted field may not run past its line. Blank lines and lines starting with `#` are
//! skipped; a UTF-8 byte-order mark and `\r\n` line ends (spreadsheet exports) are taken.
//! Every error names the source and line (and the column where it is a field's): a
//! missing column, a rail that is not a number, an address that is not one, a NIC given
//! twice (the same host and rail, or the same address, with both lines named).

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Serialize;

/// The highest rail number accepted.
pub const MAX_RAIL: u8 = 63;

/// One NIC of the fleet.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Nic {
    pub host: String,
    pub rail: u8,
    pub addr: IpAddr,
    pub tor: String,
    /// The switch port, when the source says it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tor_port: Option<String>,
}

/// The fleet's NICs, sorted by host and rail.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    nics: Vec<Nic>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name} line {line}: {why}")]
pub struct TopologyError {
    pub source_name: String,
    pub line: usize,
    pub why: String,
}

/// The columns rocewatch reads, by index in the header.
struct Columns {
    host: usize,
    rail: usize,
    addr: usize,
    tor: usize,
    tor_port: Option<usize>,
}

impl Topology {
    /// The NICs, in host and rail order.
    pub fn nics(&self) -> &[Nic] {
        &self.nics
    }

    /// From NICs another source gave (LLDP, the metrics backend): sorted; a second NIC
    /// with the same host and rail, or the same address, is an error naming both.
    pub fn from_nics(mut nics: Vec<Nic>) -> Result<Topology, String> {
        nics.sort();
        let mut by_addr: BTreeMap<IpAddr, &Nic> = BTreeMap::new();
        for w in nics.windows(2) {
            if w[0].host == w[1].host && w[0].rail == w[1].rail {
                return Err(format!("{} rail {} is given twice", w[0].host, w[0].rail));
            }
        }
        for n in &nics {
            if let Some(first) = by_addr.insert(n.addr, n) {
                return Err(format!(
                    "address {} is both {} rail {} and {} rail {}",
                    n.addr, first.host, first.rail, n.host, n.rail
                ));
            }
        }
        Ok(Topology { nics })
    }

    /// The hosts, sorted, each once.
    pub fn hosts(&self) -> Vec<&str> {
        let mut h: Vec<&str> = self.nics.iter().map(|n| n.host.as_str()).collect();
        h.dedup();
        h
    }

    /// The NICs of `host`, by rail.
    pub fn nics_of<'a>(&'a self, host: &'a str) -> impl Iterator<Item = &'a Nic> + 'a {
        let start = self.nics.partition_point(|n| n.host.as_str() < host);
        self.nics[start..]
            .iter()
            .take_while(move |n| n.host == host)
    }

    /// The hosts on each (ToR, rail), sorted, with their NIC.
    pub fn groups(&self) -> BTreeMap<(&str, u8), Vec<&Nic>> {
        let mut g: BTreeMap<(&str, u8), Vec<&Nic>> = BTreeMap::new();
        for n in &self.nics {
            g.entry((n.tor.as_str(), n.rail)).or_default().push(n);
        }
        g
    }

    /// Read a topology CSV; `source_name` names it in errors.
    pub fn parse(source_name: &str, text: &str) -> Result<Topology, TopologyError> {
        let err = |line: usize, why: String| TopologyError {
            source_name: source_name.to_string(),
            line,
            why,
        };
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.strip_suffix('\r').unwrap_or(l)))
            .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'));
        let Some((hline, header)) = lines.next() else {
            return Err(err(
                1,
                "empty: a header `host,rail,addr,tor` is needed".into(),
            ));
        };
        let cols = columns(&split(header).map_err(|why| err(hline, why))?)
            .map_err(|why| err(hline, why))?;
        let mut nics = Vec::new();
        let mut seen: BTreeMap<(String, u8), usize> = BTreeMap::new();
        let mut addrs: BTreeMap<IpAddr, usize> = BTreeMap::new();
        for (n, line) in lines {
            let fields = split(line).map_err(|why| err(n, why))?;
            let nic = nic(&fields, &cols).map_err(|why| err(n, why))?;
            if let Some(first) = seen.insert((nic.host.clone(), nic.rail), n) {
                return Err(err(
                    n,
                    format!(
                        "{} rail {} is given twice (first on line {first})",
                        nic.host, nic.rail
                    ),
                ));
            }
            if let Some(first) = addrs.insert(nic.addr, n) {
                return Err(err(
                    n,
                    format!(
                        "address {} is given twice (first on line {first})",
                        nic.addr
                    ),
                ));
            }
            nics.push(nic);
        }
        nics.sort();
        Ok(Topology { nics })
    }
}

/// The header's columns; a missing one is named.
fn columns(header: &[String]) -> Result<Columns, String> {
    let find = |name: &str| header.iter().position(|h| h.trim() == name);
    let need = |name: &str| {
        find(name).ok_or_else(|| {
            format!(
                "the header has no column {name:?} (it needs host,rail,addr,tor; it has {})",
                header.join(",")
            )
        })
    };
    Ok(Columns {
        host: need("host")?,
        rail: need("rail")?,
        addr: need("addr")?,
        tor: need("tor")?,
        tor_port: find("tor_port"),
    })
}

/// One NIC's line.
fn nic(fields: &[String], c: &Columns) -> Result<Nic, String> {
    let get = |i: usize, name: &str| {
        fields.get(i).map(|f| f.trim()).ok_or_else(|| {
            format!(
                "no {name} (column {}): the line has {} fields",
                i + 1,
                fields.len()
            )
        })
    };
    let host = name(get(c.host, "host")?, "host", false)?;
    let rail_text = get(c.rail, "rail")?;
    let rail = rail_text
        .parse::<u8>()
        .ok()
        .filter(|r| *r <= MAX_RAIL)
        .ok_or_else(|| format!("rail {rail_text:?} is not a number from 0 to {MAX_RAIL}"))?;
    let addr_text = get(c.addr, "addr")?;
    let addr = addr_text
        .parse::<IpAddr>()
        .map_err(|_| format!("addr {addr_text:?} is not an IP address"))?;
    let tor = name(get(c.tor, "tor")?, "tor", true)?;
    let tor_port = match c.tor_port {
        Some(i) => Some(get(i, "tor_port")?)
            .filter(|p| !p.is_empty())
            .map(|p| name(p, "tor_port", true))
            .transpose()?,
        None => None,
    };
    Ok(Nic {
        host,
        rail,
        addr,
        tor,
        tor_port,
    })
}

/// A host, switch or port name: not empty, no control characters (they end up in metric
/// labels and in lines operators read), and for a host no whitespace (a switch's LLDP
/// system name may have spaces).
pub fn name(text: &str, what: &str, spaces: bool) -> Result<String, String> {
    if text.is_empty() {
        return Err(format!("{what} is empty"));
    }
    if text
        .chars()
        .any(|c| c.is_control() || (!spaces && c.is_whitespace()))
    {
        let which = if spaces {
            "control"
        } else {
            "whitespace or control"
        };
        return Err(format!("{what} {text:?} has {which} characters"));
    }
    Ok(text.to_string())
}

/// `field` as a CSV field this module reads back: quoted (quotes doubled) when it holds a
/// comma or a quote, or starts with `#` (a line starting so is a comment). A field with a
/// line break cannot be read back: check it with [`name`] first.
pub fn csv_field(field: &str) -> String {
    if field.contains([',', '"']) || field.starts_with('#') {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

/// The fields of one CSV line (RFC 4180 quoting).
fn split(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut was_quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.trim().is_empty() && !was_quoted => {
                field.clear();
                quoted = true;
                was_quoted = true;
            }
            (false, '"') => {
                return Err(format!(
                    "field {}: a quote inside an unquoted field (quote the whole field)",
                    out.len() + 1
                ))
            }
            (false, ',') => {
                out.push(std::mem::take(&mut field));
                was_quoted = false;
            }
            (false, c) if was_quoted && !c.is_whitespace() => {
                return Err(format!(
                    "field {}: text after the closing quote",
                    out.len() + 1
                ))
            }
            // Spaces after the closing quote.
            (false, _) if was_quoted => {}
            (false, c) => field.push(c),
        }
    }
    if quoted {
        return Err(format!(
            "field {}: a quoted field runs past the end of the line",
            out.len() + 1
        ));
    }
    out.push(field);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SAMPLE: &str = "\u{feff}host,rail,addr,tor,tor_port,rack\r\n\
        # a CMDB export\r\n\
        gpu002,0,10.0.0.2,leaf-r01-a,Ethernet1/2,r01\r\n\
        gpu001,1,10.0.1.1,leaf-r01-b,\"Ethernet1/1\",r01\r\n\
        \r\n\
        gpu001,0,10.0.0.1,leaf-r01-a,,r01\r\n";

    #[test]
    fn a_cmdb_export_is_read_sorted_with_extra_columns_ignored() {
        let t = Topology::parse("topo.csv", SAMPLE).unwrap();
        let got: Vec<(&str, u8, String, &str, Option<&str>)> = t
            .nics()
            .iter()
            .map(|n| {
                (
                    n.host.as_str(),
                    n.rail,
                    n.addr.to_string(),
                    n.tor.as_str(),
                    n.tor_port.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("gpu001", 0, "10.0.0.1".into(), "leaf-r01-a", None),
                (
                    "gpu001",
                    1,
                    "10.0.1.1".into(),
                    "leaf-r01-b",
                    Some("Ethernet1/1")
                ),
                (
                    "gpu002",
                    0,
                    "10.0.0.2".into(),
                    "leaf-r01-a",
                    Some("Ethernet1/2")
                ),
            ]
        );
        assert_eq!(t.hosts(), ["gpu001", "gpu002"]);
        assert_eq!(t.nics_of("gpu001").count(), 2);
        assert_eq!(t.nics_of("gpu003").count(), 0);
        let g = t.groups();
        assert_eq!(g[&("leaf-r01-a", 0)].len(), 2);
    }

    #[test]
    fn errors_name_the_line_and_what_is_wrong() {
        let e = |text: &str| Topology::parse("t.csv", text).unwrap_err().to_string();
        assert_eq!(
            e(""),
            "t.csv line 1: empty: a header `host,rail,addr,tor` is needed"
        );
        assert!(e("host,rail,addr\n").contains("no column \"tor\""));
        assert_eq!(
            e("host,rail,addr,tor\nh,8x,10.0.0.1,t\n"),
            "t.csv line 2: rail \"8x\" is not a number from 0 to 63"
        );
        assert_eq!(
            e("host,rail,addr,tor\nh,0,10.0.0.256,t\n"),
            "t.csv line 2: addr \"10.0.0.256\" is not an IP address"
        );
        assert_eq!(
            e("host,rail,addr,tor\nh,0,10.0.0.1,t\n\nh,0,10.0.0.2,t\n"),
            "t.csv line 4: h rail 0 is given twice (first on line 2)"
        );
        assert_eq!(
            e("host,rail,addr,tor\nh,0,10.0.0.1,t\ng,0,10.0.0.1,t\n"),
            "t.csv line 3: address 10.0.0.1 is given twice (first on line 2)"
        );
        assert!(e("host,rail,addr,tor\nh,0,10.0.0.1\n").contains("no tor (column 4)"));
        assert!(e("host,rail,addr,tor\n\"h,0,10.0.0.1,t\n").contains("runs past the end"));
        assert!(e("host,rail,addr,tor\nh\"x,0,10.0.0.1,t\n").contains("a quote inside"));
        assert!(e("host,rail,addr,tor\n\"h\"x,0,10.0.0.1,t\n").contains("after the closing"));
        assert!(e("host,rail,addr,tor\n\"h 1\",0,10.0.0.1,t\n").contains("whitespace"));
    }

    #[test]
    fn fields_written_with_csv_field_read_back() {
        for f in ["leaf 1", "a,b", "say \"hi\"", "#7", "Ethernet1/1"] {
            let text = format!(
                "host,rail,addr,tor,tor_port\n{},0,10.0.0.1,{},{}\n",
                csv_field("#h"),
                csv_field(f),
                csv_field(f)
            );
            let t = Topology::parse("t.csv", &text).unwrap();
            assert_eq!(t.nics()[0].host, "#h", "{text}");
            assert_eq!(t.nics()[0].tor, f, "{text}");
            assert_eq!(t.nics()[0].tor_port.as_deref(), Some(f), "{text}");
        }
        assert_eq!(csv_field("plain"), "plain");
    }

    #[test]
    fn quoted_fields_keep_commas_and_quotes() {
        assert_eq!(
            split(r#"a,"b,c","d""e",  "f"  ,"#).unwrap(),
            ["a", "b,c", "d\"e", "f", ""]
        );
    }

    #[test]
    fn from_nics_refuses_a_nic_given_twice() {
        let n = |h: &str, r: u8, a: &str| Nic {
            host: h.into(),
            rail: r,
            addr: a.parse().unwrap(),
            tor: "t".into(),
            tor_port: None,
        };
        assert!(
            Topology::from_nics(vec![n("a", 0, "10.0.0.1"), n("a", 0, "10.0.0.2")])
                .unwrap_err()
                .contains("a rail 0 is given twice")
        );
        assert!(
            Topology::from_nics(vec![n("a", 0, "10.0.0.1"), n("b", 0, "10.0.0.1")])
                .unwrap_err()
                .contains("address 10.0.0.1 is both a rail 0 and b rail 0")
        );
    }

    proptest! {
        /// Any text: a topology or an error naming a line of it, never a panic.
        #[test]
        fn any_text_is_read_or_refused_naming_a_line(text in "(?s).{0,400}") {
            match Topology::parse("p.csv", &text) {
                Ok(t) => prop_assert!(t.nics().windows(2).all(|w| w[0] < w[1])),
                Err(e) => prop_assert!(e.line >= 1 && e.line <= text.lines().count().max(1)),
            }
        }

        /// Lines made of the right pieces, shuffled with junk fields: never a panic.
        #[test]
        fn near_valid_lines_never_panic(
            rows in proptest::collection::vec(
                ("[a-z\" ,]{0,6}", "[0-9x]{0,3}", "10\\.0\\.[0-9]{1,3}\\.[0-9]{1,3}|::1|junk", "[a-z\",]{0,5}"),
                0..20,
            )
        ) {
            let mut text = String::from("host,rail,addr,tor\n");
            for (h, r, a, t) in &rows {
                text.push_str(&format!("{h},{r},{a},{t}\n"));
            }
            let _ = Topology::parse("p.csv", &text);
        }
    }
}
