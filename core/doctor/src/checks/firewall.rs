//! Firewall rules that drop RoCE v2 (UDP 4791): nftables' JSON rule set and
//! iptables-save output, parsed, never guessed.

use std::collections::BTreeMap;

use crate::check::{check, Check, Status, ROCE_PORT};
use crate::shell::word_on_one_line as word;
use crate::tool::run_tool;

/// A rule (or policy) that drops RoCE v2 traffic, as found in a rule set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocking {
    /// Where: `nft inet filter input handle 7`, `iptables INPUT`.
    pub place: String,
    /// The rule as read.
    pub rule: String,
    /// The command that removes or bypasses it.
    pub fix: String,
}

pub(crate) fn port_matches(right: &serde_json::Value, port: u16) -> bool {
    match right {
        serde_json::Value::Number(n) => n.as_u64() == Some(port as u64),
        serde_json::Value::Object(o) => {
            if let Some(set) = o.get("set").and_then(|s| s.as_array()) {
                set.iter().any(|e| port_matches(e, port))
            } else if let Some(r) = o.get("range").and_then(|r| r.as_array()) {
                let lo = r.first().and_then(|v| v.as_u64()).unwrap_or(u64::MAX);
                let hi = r.get(1).and_then(|v| v.as_u64()).unwrap_or(0);
                (lo..=hi).contains(&(port as u64))
            } else {
                false
            }
        }
        serde_json::Value::Array(a) => a.iter().any(|e| port_matches(e, port)),
        _ => false,
    }
}

/// Rules of `nft -j list ruleset` that drop or reject UDP to `port` on input, and input
/// chains whose policy drops with no rule accepting it first.
pub fn nft_blocking(json: &str, port: u16) -> Result<Vec<Blocking>, String> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("nft -j list ruleset: {e}"))?;
    let items = v["nftables"]
        .as_array()
        .ok_or("nft -j list ruleset: no \"nftables\" array")?;
    // (family, table, chain) of input hooks, with their policy.
    let mut inputs: BTreeMap<(String, String, String), String> = BTreeMap::new();
    for it in items {
        if let Some(c) = it.get("chain") {
            if c["hook"] == "input" {
                let key = (
                    c["family"].as_str().unwrap_or("").to_string(),
                    c["table"].as_str().unwrap_or("").to_string(),
                    c["name"].as_str().unwrap_or("").to_string(),
                );
                inputs.insert(key, c["policy"].as_str().unwrap_or("accept").to_string());
            }
        }
    }
    let mut out = Vec::new();
    let mut accepted: std::collections::BTreeSet<(String, String, String)> = Default::default();
    for it in items {
        let Some(r) = it.get("rule") else { continue };
        let key = (
            r["family"].as_str().unwrap_or("").to_string(),
            r["table"].as_str().unwrap_or("").to_string(),
            r["chain"].as_str().unwrap_or("").to_string(),
        );
        if !inputs.contains_key(&key) {
            continue;
        }
        let exprs = r["expr"].as_array().cloned().unwrap_or_default();
        let mut udp_port = false;
        let mut other_match = false;
        let mut verdict = None;
        for e in &exprs {
            if let Some(m) = e.get("match") {
                let left = &m["left"]["payload"];
                if left["protocol"] == "udp" && left["field"] == "dport" {
                    let hit = port_matches(&m["right"], port);
                    let negated = m["op"] == "!=";
                    if hit != negated {
                        udp_port = true;
                    } else {
                        other_match = true;
                    }
                } else {
                    other_match = true;
                }
            }
            for v in ["drop", "reject", "accept"] {
                if e.get(v).is_some() {
                    verdict = Some(v);
                }
            }
        }
        let handle = r["handle"].as_u64().unwrap_or(0);
        let (fam, table, chain) = &key;
        match verdict {
            Some("drop") | Some("reject") if udp_port => out.push(Blocking {
                place: format!("nft {fam} {table} {chain} handle {handle}"),
                rule: nft_rule_text(&exprs, verdict.unwrap_or_default()),
                fix: format!(
                    "nft delete rule {} {} {} handle {handle}",
                    word(fam),
                    word(table),
                    word(chain)
                ),
            }),
            Some("accept") if udp_port || !other_match => {
                accepted.insert(key.clone());
            }
            _ => {}
        }
    }
    for ((fam, table, chain), policy) in &inputs {
        let key = (fam.clone(), table.clone(), chain.clone());
        if policy == "drop" && !accepted.contains(&key) {
            out.push(Blocking {
                place: format!("nft {fam} {table} {chain}"),
                rule: "policy drop, and no rule accepts udp dport 4791".into(),
                fix: format!(
                    "nft insert rule {} {} {} udp dport {port} accept",
                    word(fam),
                    word(table),
                    word(chain)
                ),
            });
        }
    }
    Ok(out)
}

/// A match's value as `nft list ruleset` writes it: `4791`, `{ 4791, 4792 }`,
/// `4000-5000`, `10.0.0.0/8`, a quoted interface name.
fn nft_value(v: &serde_json::Value, quote: bool) -> String {
    match v {
        serde_json::Value::String(s) if quote => format!("{s:?}"),
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(o) => {
            if let Some(set) = o.get("set").and_then(|s| s.as_array()) {
                let items: Vec<String> = set.iter().map(|e| nft_value(e, quote)).collect();
                format!("{{ {} }}", items.join(", "))
            } else if let Some([lo, hi]) =
                o.get("range").and_then(|r| r.as_array()).map(Vec::as_slice)
            {
                format!("{}-{}", nft_value(lo, quote), nft_value(hi, quote))
            } else if let Some(p) = o.get("prefix") {
                format!("{}/{}", nft_value(&p["addr"], false), p["len"])
            } else {
                v.to_string()
            }
        }
        other => other.to_string(),
    }
}

/// A rule's matches and verdict, in nft's words (`udp dport 4791 @th,104,24 1 drop`),
/// with a match on the BTH's destination queue pair said for what it lets through.
fn nft_rule_text(exprs: &[serde_json::Value], verdict: &str) -> String {
    let mut words: Vec<String> = Vec::new();
    let mut notes: Vec<&str> = Vec::new();
    for m in exprs.iter().filter_map(|e| e.get("match")) {
        let left = &m["left"];
        let p = &left["payload"];
        let op = m["op"].as_str().unwrap_or("==");
        let negated = op == "!=";
        let mut quote = false;
        let what = if let (Some(proto), Some(field)) = (p["protocol"].as_str(), p["field"].as_str())
        {
            format!("{proto} {field}")
        } else if let (Some(base), Some(off), Some(len)) =
            (p["base"].as_str(), p["offset"].as_u64(), p["len"].as_u64())
        {
            // UDP's header is 8 bytes; the BTH's destination QP is its bytes 5-7.
            if (base, off, len) == ("th", 104, 24) {
                let qp1 = m["right"].as_u64() == Some(1);
                notes.push(match (qp1, negated) {
                    (true, false) => "only the RDMA CM's messages, to the BTH's destination queue pair 1: CM applications fail, traffic on connected queue pairs passes",
                    (true, true) => "every RoCE packet but the RDMA CM's messages (queue pair 1): CM connections are set up, then their traffic is dropped",
                    _ => "only part of RoCE traffic: a match on the BTH's destination queue pair",
                });
            }
            format!("@{base},{off},{len}")
        } else if let Some(key) = left["meta"]["key"].as_str() {
            quote = key.ends_with("name");
            if matches!(key, "iifname" | "oifname" | "iif" | "oif") {
                key.to_string()
            } else {
                format!("meta {key}")
            }
        } else {
            left.to_string()
        };
        let value = nft_value(&m["right"], quote);
        words.push(match op {
            "==" | "in" => format!("{what} {value}"),
            op => format!("{what} {op} {value}"),
        });
    }
    words.push(verdict.to_string());
    let mut text = words.join(" ");
    for n in notes {
        text.push_str(&format!(" ({n})"));
    }
    text
}

/// The words of an `iptables-save` rule as iptables takes them: libxtables
/// `xtables_save_string` writes a value with anything but `[A-Za-z0-9_-]` in double
/// quotes, `"`, `\` and `'` escaped with a backslash.
fn save_words(rule: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = rule.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let Some(first) = chars.next() else {
            return out;
        };
        let mut w = String::new();
        if first == '"' {
            while let Some(c) = chars.next() {
                match c {
                    '\\' => w.extend(chars.next()),
                    '"' => break,
                    c => w.push(c),
                }
            }
        } else {
            w.push(first);
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                w.push(c);
            }
        }
        out.push(w);
    }
}

/// Rules of `iptables-save` (or `ip6tables-save`) that drop or reject UDP to `port` on
/// INPUT, and an INPUT policy of DROP with no rule accepting it.
pub fn iptables_blocking(save: &str, port: u16, tool: &str) -> Vec<Blocking> {
    let mut out = Vec::new();
    let mut table = String::new();
    let mut policy_drop = false;
    let mut accepted = false;
    for line in save.lines() {
        let line = line.trim();
        if let Some(t) = line.strip_prefix('*') {
            table = t.to_string();
            continue;
        }
        if table != "filter" {
            continue;
        }
        if let Some(rest) = line.strip_prefix(":INPUT ") {
            policy_drop = rest.starts_with("DROP");
            continue;
        }
        let Some(rule) = line.strip_prefix("-A INPUT ") else {
            continue;
        };
        let words: Vec<&str> = rule.split_whitespace().collect();
        let arg = |flag: &str| {
            words
                .iter()
                .position(|w| *w == flag)
                .and_then(|i| words.get(i + 1))
                .copied()
        };
        let udp = arg("-p") == Some("udp");
        let ports = arg("--dport").or(arg("--dports"));
        let hits = ports.is_some_and(|p| {
            p.split(',').any(|p| match p.split_once(':') {
                Some((lo, hi)) => {
                    let (lo, hi) = (lo.parse().unwrap_or(0u16), hi.parse().unwrap_or(u16::MAX));
                    (lo..=hi).contains(&port)
                }
                None => p.parse() == Ok(port),
            })
        });
        let target = arg("-j");
        match target {
            Some("DROP") | Some("REJECT") if udp && hits => out.push(Blocking {
                place: format!("{tool} filter INPUT"),
                rule: format!("-A INPUT {rule}"),
                fix: format!(
                    "{tool} -D INPUT {}",
                    save_words(rule)
                        .iter()
                        .map(|w| word(w))
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
            }),
            Some("ACCEPT") if (udp && hits) || words.len() == 2 => accepted = true,
            _ => {}
        }
    }
    if policy_drop && !accepted {
        out.push(Blocking {
            place: format!("{tool} filter INPUT"),
            rule: "policy DROP, and no rule accepts udp dport 4791".into(),
            fix: format!("{tool} -I INPUT -p udp --dport {port} -j ACCEPT"),
        });
    }
    out
}

pub(crate) fn firewall_checks() -> Vec<Check> {
    firewall_verdict(vec![
        ("nft", run_tool("nft", &["-j", "list", "ruleset"])),
        ("iptables-save", run_tool("iptables-save", &[])),
        ("ip6tables-save", run_tool("ip6tables-save", &[])),
    ])
}

/// The verdict over what each tool printed (`None`: not installed). Nothing read is a
/// skip; a rule set read (an empty one too: nothing filters) is the evidence of a pass.
pub(crate) fn firewall_verdict(reads: Vec<(&str, Option<Result<String, String>>)>) -> Vec<Check> {
    let mut out = Vec::new();
    let mut read = Vec::new();
    let mut blocking = Vec::new();
    for (tool, r) in reads {
        let Some(r) = r else { continue };
        let r = if tool == "nft" {
            r.and_then(|j| nft_blocking(&j, ROCE_PORT).map(|b| (j, b)))
        } else {
            r.map(|save| {
                let b = iptables_blocking(&save, ROCE_PORT, tool.trim_end_matches("-save"));
                (save, b)
            })
        };
        match r {
            Ok((_, b)) => {
                read.push(tool);
                blocking.extend(b);
            }
            Err(e) => out.push(check("firewall", tool, Status::Warn, e, None)),
        }
    }
    if read.is_empty() && out.is_empty() {
        out.push(check(
            "firewall",
            "",
            Status::Skip,
            "neither nft nor iptables-save is installed: no rule set could be read",
            None,
        ));
        return out;
    }
    // A rule set read, even an empty one, is evidence: nothing in it drops RoCE.
    if blocking.is_empty() && !read.is_empty() {
        out.push(check(
            "firewall",
            "",
            Status::Pass,
            format!(
                "no rule drops UDP {ROCE_PORT} on input ({} read)",
                read.join(", ")
            ),
            None,
        ));
    }
    for b in blocking {
        out.push(check(
            "firewall",
            &b.place,
            Status::Fail,
            format!("drops RoCE v2 (UDP {ROCE_PORT}): {}", b.rule),
            Some(b.fix),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `nft -j list ruleset` of a host with a drop rule, one with a set including 4791,
    /// a drop policy with and without an accept, and an unrelated rule.
    #[test]
    fn nft_rules_that_drop_roce_are_found() {
        let ruleset = |rules: &str, policy: &str| {
            format!(
                r#"{{"nftables": [{{"metainfo": {{"json_schema_version": 1}}}},
                {{"table": {{"family": "inet", "name": "filter", "handle": 1}}}},
                {{"chain": {{"family": "inet", "table": "filter", "name": "input", "handle": 1, "type": "filter", "hook": "input", "prio": 0, "policy": "{policy}"}}}},
                {{"chain": {{"family": "inet", "table": "filter", "name": "output", "handle": 2, "type": "filter", "hook": "output", "prio": 0, "policy": "accept"}}}}
                {rules}]}}"#
            )
        };
        let rule = |chain: &str, handle: u32, right: &str, verdict: &str| {
            format!(
                r#",{{"rule": {{"family": "inet", "table": "filter", "chain": "{chain}", "handle": {handle}, "expr": [{{"match": {{"op": "==", "left": {{"payload": {{"protocol": "udp", "field": "dport"}}}}, "right": {right}}}}}, {{"{verdict}": null}}]}}}}"#
            )
        };
        let b = nft_blocking(&ruleset(&rule("input", 7, "4791", "drop"), "accept"), 4791).unwrap();
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].place, "nft inet filter input handle 7");
        assert_eq!(b[0].fix, "nft delete rule inet filter input handle 7");
        let set = r#"{"set": [53, {"range": [4000, 5000]}]}"#;
        assert_eq!(
            nft_blocking(&ruleset(&rule("input", 8, set, "reject"), "accept"), 4791)
                .unwrap()
                .len(),
            1
        );
        // Another port, or the output chain: not blocking.
        assert!(
            nft_blocking(&ruleset(&rule("input", 9, "53", "drop"), "accept"), 4791)
                .unwrap()
                .is_empty()
        );
        assert!(
            nft_blocking(&ruleset(&rule("output", 9, "4791", "drop"), "accept"), 4791)
                .unwrap()
                .is_empty()
        );
        // A drop policy without an accept for 4791 blocks; with one it does not.
        let b = nft_blocking(&ruleset("", "drop"), 4791).unwrap();
        assert_eq!(
            b[0].fix,
            "nft insert rule inet filter input udp dport 4791 accept"
        );
        assert!(
            nft_blocking(&ruleset(&rule("input", 3, "4791", "accept"), "drop"), 4791)
                .unwrap()
                .is_empty()
        );
        assert!(nft_blocking("{}", 4791).is_err());
    }

    /// A drop of UDP 4791 to queue pair 1 only (the CM's messages), as `nft -j` lists
    /// `udp dport 4791 @th,104,24 1 drop`: found, and said to be the CM's alone.
    #[test]
    fn an_nft_drop_of_the_cms_queue_pair_is_named() {
        let json = r#"{"nftables": [
            {"chain": {"family": "inet", "table": "cmtest", "name": "input", "handle": 1, "type": "filter", "hook": "input", "prio": 0, "policy": "accept"}},
            {"rule": {"family": "inet", "table": "cmtest", "chain": "input", "handle": 2, "expr": [
                {"match": {"op": "==", "left": {"payload": {"protocol": "udp", "field": "dport"}}, "right": 4791}},
                {"match": {"op": "==", "left": {"payload": {"base": "th", "offset": 104, "len": 24}}, "right": 1}},
                {"drop": null}]}}]}"#;
        let b = nft_blocking(json, 4791).unwrap();
        assert_eq!(b.len(), 1, "{b:?}");
        assert!(
            b[0].rule
                .starts_with("udp dport 4791 @th,104,24 1 drop (only the RDMA CM's messages"),
            "{}",
            b[0].rule
        );
        // Another queue pair, an interface and a negated match keep their words.
        let other = json
            .replace(r#""right": 1}"#, r#""right": 17}"#)
            .replace(
                r#"{"drop": null}"#,
                r#"{"match": {"op": "!=", "left": {"meta": {"key": "iifname"}}, "right": "lo"}}, {"drop": null}"#,
            );
        let b = nft_blocking(&other, 4791).unwrap();
        assert_eq!(
            b[0].rule,
            "udp dport 4791 @th,104,24 17 iifname != \"lo\" drop (only part of RoCE traffic: a match on the BTH's destination queue pair)"
        );
        // Everything but queue pair 1, to a set of ports: the opposite of the CM alone.
        let negated = json
            .replace(
                r#""op": "==", "left": {"payload": {"base""#,
                r#""op": "!=", "left": {"payload": {"base""#,
            )
            .replace(
                r#""right": 4791}"#,
                r#""right": {"set": [4791, {"range": [5000, 5010]}]}}"#,
            );
        let b = nft_blocking(&negated, 4791).unwrap();
        assert_eq!(
            b[0].rule,
            "udp dport { 4791, 5000-5010 } @th,104,24 != 1 drop (every RoCE packet but the RDMA CM's messages (queue pair 1): CM connections are set up, then their traffic is dropped)"
        );
    }

    #[test]
    fn iptables_rules_that_drop_roce_are_found() {
        let save = "*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -p udp --dport 4791 -j DROP\nCOMMIT\n*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n-A INPUT -p udp -m udp --dport 4791 -j DROP\nCOMMIT\n";
        let b = iptables_blocking(save, 4791, "iptables");
        assert_eq!(b.len(), 1, "{b:?}");
        assert_eq!(
            b[0].fix,
            "iptables -D INPUT -p udp -m udp --dport 4791 -j DROP"
        );
        let range = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p udp -m multiport --dports 4000:5000 -j REJECT --reject-with icmp-port-unreachable\nCOMMIT\n";
        assert_eq!(iptables_blocking(range, 4791, "iptables").len(), 1);
        let policy = "*filter\n:INPUT DROP [0:0]\n-A INPUT -p tcp --dport 22 -j ACCEPT\nCOMMIT\n";
        let b = iptables_blocking(policy, 4791, "iptables");
        assert_eq!(b[0].fix, "iptables -I INPUT -p udp --dport 4791 -j ACCEPT");
        let open = "*filter\n:INPUT DROP [0:0]\n-A INPUT -p udp --dport 4791 -j ACCEPT\nCOMMIT\n";
        assert!(iptables_blocking(open, 4791, "iptables").is_empty());
    }
}
