//! `scontrol show node NAME` output: the node's state and the reason it was drained.
//!
//! The layout is Slurm's `slurm_sprint_node_table` (`src/api/node_info.c`): records are
//! separated by a blank line; each record's lines start with three spaces (the first,
//! `NodeName=`, with none) and hold `Key=Value` pairs separated by spaces, except the
//! free-text lines that hold one key each to the end of the line: `OS=`, `Reason=`,
//! `Comment=`, `Extra=`, `ReservationName=`. A reason of several lines continues on
//! lines indented by ten spaces; its first line ends with ` [USER@TIME]` (who set it and
//! when). The multi-line layout is parsed rather than `--oneliner`, where a reason with
//! spaces runs into the keys after it, and rather than `--json`, which the Slurm of
//! Debian 12 (22.05) does not have for `scontrol`.
//!
//! The state is `node_state_string_complete` (`src/common/slurm_protocol_defs.c`): a
//! base state (`IDLE`, `ALLOCATED`, `MIXED`, `DOWN`, `ERROR`, `FUTURE`, `UNKNOWN`) and
//! `+FLAG`s (`IDLE+DRAIN`, `MIXED+DRAIN`, `DOWN+DRAIN+NOT_RESPONDING`). The short forms
//! of `node_state_string` (`DRAINED`, `DRAINING`, `IDLE*`) are read too.

use std::collections::BTreeMap;
use std::fmt;

/// A node's base state (`NODE_STATE_BASE` in `slurm.h`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BaseState {
    Idle,
    Allocated,
    Mixed,
    Down,
    Error,
    Future,
    Unknown,
    /// A base state this parser does not know, as printed.
    Other(String),
}

/// A node's state: the base state and its flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    pub base: BaseState,
    /// The flags as printed (`DRAIN`, `COMPLETING`, `NOT_RESPONDING`, `MAINTENANCE`, ...).
    pub flags: Vec<String>,
}

impl NodeState {
    /// Parse `IDLE+DRAIN`, `MIXED+DRAIN+COMPLETING`, or a short form (`DRAINED`, `DOWN*`).
    pub fn parse(text: &str) -> Result<Self, NodeParseError> {
        let text = text.trim();
        let mut parts = text.split('+');
        let first = parts.next().unwrap_or_default();
        // `node_state_string` marks flags with a trailing symbol (`IDLE*`: not responding).
        let base_text = first.trim_end_matches(['*', '$', '^', '@', '#', '%', '~', '!', '-']);
        if base_text.is_empty()
            || !base_text
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b == b'_')
        {
            return Err(NodeParseError::BadState(text.to_string()));
        }
        let mut flags = Vec::new();
        let base = match base_text {
            "IDLE" => BaseState::Idle,
            "ALLOCATED" | "ALLOC" => BaseState::Allocated,
            "MIXED" | "MIX" => BaseState::Mixed,
            "DOWN" => BaseState::Down,
            "ERROR" => BaseState::Error,
            "FUTURE" => BaseState::Future,
            "UNKNOWN" => BaseState::Unknown,
            // The short forms fold base and DRAIN into one word.
            "DRAINED" | "DRAIN" => {
                flags.push("DRAIN".to_string());
                BaseState::Idle
            }
            "DRAINING" | "DRNG" => {
                flags.push("DRAIN".to_string());
                BaseState::Allocated
            }
            other => BaseState::Other(other.to_string()),
        };
        for flag in parts {
            if flag.is_empty() || !flag.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') {
                return Err(NodeParseError::BadState(text.to_string()));
            }
            flags.push(flag.to_string());
        }
        Ok(Self { base, flags })
    }

    /// Whether the DRAIN flag is set (draining or drained).
    pub fn is_drain(&self) -> bool {
        self.flags.iter().any(|f| f == "DRAIN")
    }

    /// Drained: DRAIN and no job left on it (`node_state_string`'s DRAINED).
    pub fn is_drained(&self) -> bool {
        self.is_drain() && !self.is_draining()
    }

    /// Draining: DRAIN with jobs still on it or completing (`node_state_string`'s DRAINING).
    pub fn is_draining(&self) -> bool {
        self.is_drain()
            && (matches!(self.base, BaseState::Allocated | BaseState::Mixed)
                || self.flags.iter().any(|f| f == "COMPLETING"))
    }

    /// IDLE with no DRAIN: ready for jobs.
    pub fn is_idle(&self) -> bool {
        self.base == BaseState::Idle && !self.is_drain()
    }
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let base = match &self.base {
            BaseState::Idle => "IDLE",
            BaseState::Allocated => "ALLOCATED",
            BaseState::Mixed => "MIXED",
            BaseState::Down => "DOWN",
            BaseState::Error => "ERROR",
            BaseState::Future => "FUTURE",
            BaseState::Unknown => "UNKNOWN",
            BaseState::Other(s) => s,
        };
        f.write_str(base)?;
        for flag in &self.flags {
            write!(f, "+{flag}")?;
        }
        Ok(())
    }
}

/// Why a node is drained or down, as `scontrol show node` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeReason {
    /// The reason text (lines joined with `\n`), without the ` [USER@TIME]` stamp.
    pub text: String,
    /// Who set it, from the stamp.
    pub user: Option<String>,
    /// When, from the stamp (Slurm's time format, `2026-12-05T10:00:00` by default).
    pub time: Option<String>,
}

/// One node of `scontrol show node`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub state: NodeState,
    pub reason: Option<NodeReason>,
    /// Every `Key=Value` of the record, as printed (`Reason` without its stamp).
    pub fields: BTreeMap<String, String>,
}

/// `scontrol show node` output that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeParseError {
    #[error("scontrol show node: record {record} has no {key}= (first line {first_line:?})")]
    Missing {
        record: usize,
        key: &'static str,
        first_line: String,
    },
    #[error("scontrol show node: state {0:?} is not BASE[+FLAG...] in capitals")]
    BadState(String),
    #[error("scontrol show node: no node record in the output")]
    Empty,
}

/// The keys whose value runs to the end of its line (free text, may hold spaces).
const LINE_KEYS: &[&str] = &["OS", "Reason", "Comment", "Extra", "ReservationName"];

/// Parse every node record of `scontrol show node` output.
pub fn parse_show_node(text: &str) -> Result<Vec<Node>, NodeParseError> {
    let mut nodes = Vec::new();
    let mut record: Vec<&str> = Vec::new();
    for line in text.lines().chain(std::iter::once("")) {
        if line.trim().is_empty() {
            if !record.is_empty() {
                nodes.push(parse_record(nodes.len(), &record)?);
                record.clear();
            }
        } else {
            record.push(line);
        }
    }
    if nodes.is_empty() {
        return Err(NodeParseError::Empty);
    }
    Ok(nodes)
}

/// Parse the output of `scontrol show node NAME`: its one record.
pub fn parse_one_node(text: &str) -> Result<Node, NodeParseError> {
    parse_show_node(text).map(|mut v| v.swap_remove(0))
}

fn parse_record(index: usize, lines: &[&str]) -> Result<Node, NodeParseError> {
    let mut fields = BTreeMap::new();
    let mut reason_lines: Vec<&str> = Vec::new();
    let mut in_reason = false;
    for line in lines {
        // Reason continuation lines: `line_end` (three spaces) plus seven.
        if in_reason && line.starts_with("          ") {
            reason_lines.push(line.trim_start());
            continue;
        }
        in_reason = false;
        let trimmed = line.trim_start();
        if let Some((key, value)) = line_key(trimmed) {
            if key == "Reason" {
                in_reason = true;
                reason_lines.push(value);
            } else {
                fields.insert(key.to_string(), value.trim_end().to_string());
            }
            continue;
        }
        for (key, value) in pairs(trimmed) {
            fields.insert(key.to_string(), value.to_string());
        }
    }
    let missing = |key| NodeParseError::Missing {
        record: index,
        key,
        first_line: lines
            .first()
            .map(|l| l.chars().take(120).collect())
            .unwrap_or_default(),
    };
    let name = fields
        .get("NodeName")
        .cloned()
        .ok_or_else(|| missing("NodeName"))?;
    let state = NodeState::parse(fields.get("State").ok_or_else(|| missing("State"))?)?;
    let reason = (!reason_lines.is_empty()).then(|| split_stamp(&reason_lines));
    if let Some(r) = &reason {
        fields.insert("Reason".to_string(), r.text.clone());
    }
    Ok(Node {
        name,
        state,
        reason,
        fields,
    })
}

/// `Key=rest of line` for the free-text keys.
fn line_key(line: &str) -> Option<(&str, &str)> {
    let (key, value) = line.split_once('=')?;
    LINE_KEYS.contains(&key).then_some((key, value))
}

/// `Key=Value Key=Value`: a new pair starts at a word of `Key=` (letters, digits, `_`,
/// `:`, `/`); a word without `=` belongs to the value before it.
fn pairs(line: &str) -> Vec<(&str, String)> {
    let mut out: Vec<(&str, String)> = Vec::new();
    for word in line.split(' ').filter(|w| !w.is_empty()) {
        match word.split_once('=') {
            Some((key, value))
                if !key.is_empty()
                    && key
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'/')) =>
            {
                out.push((key, value.to_string()));
            }
            _ => {
                if let Some((_, value)) = out.last_mut() {
                    value.push(' ');
                    value.push_str(word);
                }
            }
        }
    }
    out
}

/// Split ` [USER@TIME]` off the first reason line (`slurm_sprint_node_table` adds it
/// there when the reason has a time).
fn split_stamp(lines: &[&str]) -> NodeReason {
    let first = lines[0].trim_end();
    let mut user = None;
    let mut time = None;
    let mut head = first;
    if let Some(open) = first.rfind(" [") {
        let stamp = &first[open + 2..];
        if let Some(inner) = stamp.strip_suffix(']') {
            if let Some((u, t)) = inner.split_once('@') {
                if !u.is_empty() && !t.is_empty() && !inner.contains(['[', ']']) {
                    user = Some(u.to_string());
                    time = Some(t.to_string());
                    head = &first[..open];
                }
            }
        }
    }
    let mut text = head.to_string();
    for l in &lines[1..] {
        text.push('\n');
        text.push_str(l.trim_end());
    }
    NodeReason { text, user, time }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `scontrol show node vm` of Slurm 22.05.8 (Debian 12), after
    /// `scontrol update nodename=vm state=drain "reason=rocewatch: mlx5_0 port 1 down"`.
    const DRAINED: &str = "NodeName=vm Arch=x86_64 CoresPerSocket=1 
   CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.88
   AvailableFeatures=(null)
   ActiveFeatures=(null)
   Gres=(null)
   NodeAddr=127.0.0.1 NodeHostName=vm Version=22.05.8
   OS=Linux 6.18.44-fc-v1272 #1 SMP PREEMPT_DYNAMIC @0 
   RealMemory=1 AllocMem=0 FreeMem=3189 Sockets=2 Boards=1
   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=debug 
   BootTime=2026-12-05T08:12:19 SlurmdStartTime=2026-12-05T17:04:01
   LastBusyTime=2026-12-05T17:04:02
   CfgTRES=cpu=2,mem=1M,billing=2
   AllocTRES=
   CapWatts=n/a
   CurrentWatts=0 AveWatts=0
   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s
   Reason=rocewatch: mlx5_0 port 1 down [root@2026-12-05T17:04:08]

";

    #[test]
    fn a_drained_node_with_its_reason() {
        let n = parse_one_node(DRAINED).unwrap();
        assert_eq!(n.name, "vm");
        assert_eq!(n.state.to_string(), "IDLE+DRAIN");
        assert!(n.state.is_drain() && n.state.is_drained() && !n.state.is_draining());
        let r = n.reason.unwrap();
        assert_eq!(r.text, "rocewatch: mlx5_0 port 1 down");
        assert_eq!(r.user.as_deref(), Some("root"));
        assert_eq!(r.time.as_deref(), Some("2026-12-05T17:04:08"));
        assert_eq!(
            n.fields["OS"],
            "Linux 6.18.44-fc-v1272 #1 SMP PREEMPT_DYNAMIC @0"
        );
        assert_eq!(n.fields["CfgTRES"], "cpu=2,mem=1M,billing=2");
        assert_eq!(n.fields["AllocTRES"], "");
        assert_eq!(n.fields["MCS_label"], "N/A");
    }

    #[test]
    fn reasons_of_several_lines_with_keys_in_them_and_records_after() {
        let text = "NodeName=a State=MIXED+DRAIN
   Reason=maint: x=1 y=2 [admin@2026-01-01T00:00:00]
          second line [not a stamp]
   Comment=free text here

NodeName=b State=IDLE
";
        let nodes = parse_show_node(text).unwrap();
        assert_eq!(nodes.len(), 2);
        let a = &nodes[0];
        assert!(a.state.is_draining() && !a.state.is_drained());
        let r = a.reason.as_ref().unwrap();
        assert_eq!(r.text, "maint: x=1 y=2\nsecond line [not a stamp]");
        assert_eq!(r.user.as_deref(), Some("admin"));
        assert_eq!(a.fields["Comment"], "free text here");
        assert!(!a.fields.contains_key("x"));
        assert!(nodes[1].state.is_idle() && nodes[1].reason.is_none());
    }

    #[test]
    fn states_long_and_short() {
        for (text, drain, drained, idle) in [
            ("IDLE", false, false, true),
            ("IDLE+DRAIN", true, true, false),
            ("ALLOCATED+DRAIN", true, false, false),
            ("IDLE+DRAIN+COMPLETING", true, false, false),
            ("DOWN+DRAIN+NOT_RESPONDING", true, true, false),
            ("DRAINED", true, true, false),
            ("DRAINING", true, false, false),
            ("DRAINED*", true, true, false),
            ("IDLE*", false, false, true),
            ("MIXED", false, false, false),
            ("IDLE+CLOUD+POWERED_DOWN", false, false, true),
        ] {
            let s = NodeState::parse(text).unwrap();
            assert_eq!(
                (s.is_drain(), s.is_drained(), s.is_idle()),
                (drain, drained, idle),
                "{text}"
            );
        }
        for bad in ["", "idle", "IDLE+", "+DRAIN", "IDLE+dr ain", "IDLE DRAIN"] {
            let e = NodeState::parse(bad).unwrap_err();
            assert!(e.to_string().contains("state"), "{bad}: {e}");
        }
    }

    #[test]
    fn missing_keys_and_empty_output_are_named() {
        let e = parse_show_node("NodeName=a CPUs=2\n").unwrap_err();
        assert!(e.to_string().contains("no State="), "{e}");
        let e = parse_show_node("   State=IDLE\n").unwrap_err();
        assert!(e.to_string().contains("no NodeName="), "{e}");
        assert_eq!(parse_show_node("\n\n").unwrap_err(), NodeParseError::Empty);
    }

    proptest! {
        #[test]
        fn never_panics(text in "(.{0,40}\n){0,8}") {
            let _ = parse_show_node(&text);
        }

        #[test]
        fn a_reason_comes_back_as_set(reason in "[!-~][ -~]{0,80}", user in "[a-z]{1,8}") {
            prop_assume!(!reason.ends_with(' '));
            let text = format!(
                "NodeName=n1 Arch=x86_64\n   State=IDLE+DRAIN ThreadsPerCore=1\n   Reason={reason} [{user}@2026-12-05T10:00:00]\n\n"
            );
            let n = parse_one_node(&text).unwrap();
            let r = n.reason.unwrap();
            prop_assert_eq!(r.text, reason);
            prop_assert_eq!(r.user, Some(user));
            prop_assert!(n.state.is_drained());
        }
    }
}
