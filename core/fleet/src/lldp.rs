//! LLDP neighbours as `lldpd` reports them: `lldpcli -f json0 show neighbors details`.
//!
//! `json0` is lldpcli's JSON whose shape does not depend on how many of a thing there are
//! (every value is a list of objects; `-f json` turns a list of one into an object keyed
//! by name, which a reader would have to guess). The shape, from lldpd's own integration
//! tests (`tests/integration/test_lldpcli.py`, `test_json0_output`):
//!
//! ```text
//! {"lldp": [{"interface": [{"name": "eth0", "via": "LLDP", "rid": "1", "age": "...",
//!   "chassis": [{"id": [{"type": "mac", "value": "00:00:00:00:00:02"}],
//!                "name": [{"value": "ns-2.example.com"}], "descr": [...], "mgmt-ip": [...],
//!                "capability": [...]}],
//!   "port": [{"id": [{"type": "mac", "value": "00:00:00:00:00:02"}],
//!             "descr": [{"value": "eth1"}], "ttl": [{"value": "120"}]}]}]}]}
//! ```
//!
//! With no neighbour, `{"lldp": [{}]}`. Fields rocewatch does not use are ignored; one
//! that it uses but of the wrong type is an error naming it. A switch is named by its
//! system name (`chassis.name`), else its chassis ID; its port by the port ID when that
//! is an interface name (`type` `ifname`), else the port description, else the port ID.

use serde::Serialize;
use serde_json::Value;

/// One neighbour seen on a local interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Neighbour {
    /// The local interface (netdev) it was seen on.
    pub netdev: String,
    /// The switch: its system name, else its chassis ID.
    pub switch: String,
    /// The switch's port, when it says one.
    pub port: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("lldpcli -f json0 output: {0}")]
pub struct LldpError(pub String);

/// The first `value` of a json0 list of objects (`[{"value": "x"}]`), or of `key` in
/// its first object.
fn first<'a>(v: Option<&'a Value>, key: &str, path: &str) -> Result<Option<&'a str>, LldpError> {
    let Some(v) = v else { return Ok(None) };
    let list = v
        .as_array()
        .ok_or_else(|| LldpError(format!("{path} is not a list")))?;
    let Some(obj) = list.first() else {
        return Ok(None);
    };
    match obj.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(other) => Err(LldpError(format!(
            "{path}[0].{key} is {other}, not a string"
        ))),
    }
}

/// The neighbours in `text`, in the order lldpcli lists them.
pub fn parse(text: &str) -> Result<Vec<Neighbour>, LldpError> {
    let v: Value = serde_json::from_str(text).map_err(|e| LldpError(format!("not JSON: {e}")))?;
    let lldp = v
        .get("lldp")
        .ok_or_else(|| LldpError("no \"lldp\" key (was it -f json0?)".into()))?
        .as_array()
        .ok_or_else(|| LldpError("\"lldp\" is not a list (-f json, not json0?)".into()))?;
    let mut out = Vec::new();
    for (i, section) in lldp.iter().enumerate() {
        let Some(ifaces) = section.get("interface") else {
            continue;
        };
        let ifaces = ifaces
            .as_array()
            .ok_or_else(|| LldpError(format!("lldp[{i}].interface is not a list")))?;
        for (j, iface) in ifaces.iter().enumerate() {
            let path = format!("lldp[{i}].interface[{j}]");
            out.push(neighbour(iface, &path)?);
        }
    }
    Ok(out)
}

fn neighbour(iface: &Value, path: &str) -> Result<Neighbour, LldpError> {
    let netdev = iface
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| LldpError(format!("{path} has no name")))?
        .to_string();
    let chassis = iface
        .get("chassis")
        .and_then(Value::as_array)
        .and_then(|c| c.first());
    let chassis_path = format!("{path}.chassis[0]");
    let name = first(
        chassis.and_then(|c| c.get("name")),
        "value",
        &format!("{chassis_path}.name"),
    )?;
    let id = first(
        chassis.and_then(|c| c.get("id")),
        "value",
        &format!("{chassis_path}.id"),
    )?;
    let switch = name
        .or(id)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            LldpError(format!(
                "{path} ({netdev}): the neighbour has no chassis name or ID"
            ))
        })?
        .to_string();
    let port = iface
        .get("port")
        .and_then(Value::as_array)
        .and_then(|p| p.first());
    let port_path = format!("{path}.port[0]");
    let port_id = first(
        port.and_then(|p| p.get("id")),
        "value",
        &format!("{port_path}.id"),
    )?;
    let port_type = first(
        port.and_then(|p| p.get("id")),
        "type",
        &format!("{port_path}.id"),
    )?;
    let descr = first(
        port.and_then(|p| p.get("descr")),
        "value",
        &format!("{port_path}.descr"),
    )?;
    let port = match port_type {
        Some("ifname") => port_id,
        _ => descr.or(port_id),
    }
    .filter(|p| !p.is_empty())
    .map(str::to_string);
    Ok(Neighbour {
        netdev,
        switch,
        port,
    })
}

/// One of this host's RDMA ports at its rank (what LLDP is joined with).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalPort {
    /// `device:port`, for messages.
    pub name: String,
    pub netdev: Option<String>,
    /// The address its RoCE v2 GID carries.
    pub addr: Option<std::net::IpAddr>,
}

/// A port left out of the rows, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    pub rail: usize,
    pub name: String,
    pub why: String,
}

/// This host's topology rows: each port at its rank (the rail) with its address and the
/// switch and port its netdev sees over LLDP. A port without an address or a neighbour,
/// or past [`crate::topology::MAX_RAIL`], is left out saying why; a netdev with several
/// neighbours takes the first (said too).
pub fn rows(
    host: &str,
    ports: &[LocalPort],
    neighbours: &[Neighbour],
) -> (Vec<crate::Nic>, Vec<LeftOut>) {
    rows_at(host, ports.iter().enumerate(), neighbours)
}

/// The same with each port's rail given (the host's rail map: a rail is the port's
/// identity, not its rank, so that a NIC that is gone leaves the others' rails as they
/// were).
pub fn rows_at<'a>(
    host: &str,
    ports: impl IntoIterator<Item = (usize, &'a LocalPort)>,
    neighbours: &[Neighbour],
) -> (Vec<crate::Nic>, Vec<LeftOut>) {
    use crate::topology::{name, MAX_RAIL};
    let mut nics = Vec::new();
    let mut left = Vec::new();
    for (rank, p) in ports {
        let netdev = p.netdev.as_deref().unwrap_or("");
        let seen: Vec<&Neighbour> = neighbours.iter().filter(|n| n.netdev == netdev).collect();
        let checked = |n: &Neighbour| -> Result<(String, Option<String>), String> {
            let sw = name(&n.switch, "the LLDP switch name", true)?;
            let port = n
                .port
                .as_deref()
                .map(|p| name(p, "the LLDP port", true))
                .transpose()?;
            Ok((sw, port))
        };
        let why = match (p.addr, seen.first()) {
            _ if rank > usize::from(MAX_RAIL) => {
                format!("rank {rank} is past the topology's {MAX_RAIL}")
            }
            (None, _) => format!("{netdev} has no IPv4 address with a RoCE v2 GID"),
            (_, None) => format!("no LLDP neighbour on {netdev:?}"),
            (Some(addr), Some(n)) => match checked(n) {
                Err(e) => e,
                Ok((tor, tor_port)) => {
                    if seen.len() > 1 {
                        left.push(LeftOut {
                            rail: rank,
                            name: p.name.clone(),
                            why: format!(
                                "{} LLDP neighbours on {netdev}; the first, {tor}, is taken",
                                seen.len()
                            ),
                        });
                    }
                    nics.push(crate::Nic {
                        host: host.to_string(),
                        rail: rank as u8,
                        addr,
                        tor,
                        tor_port,
                    });
                    continue;
                }
            },
        };
        left.push(LeftOut {
            rail: rank,
            name: p.name.clone(),
            why,
        });
    }
    (nics, left)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// lldpd's own expected json0 output for two namespaces (test_json0_output), with a
    /// second interface whose neighbour is a switch naming its port by ifname.
    const TWO: &str = r#"{"lldp": [{"interface": [
        {"name": "eth0", "via": "LLDP", "rid": "1", "age": "0 day, 00:00:05",
         "chassis": [{"id": [{"type": "mac", "value": "00:00:00:00:00:02"}],
                      "name": [{"value": "ns-2.example.com"}],
                      "descr": [{"value": "Spectacular GNU/Linux 2016"}],
                      "mgmt-ip": [{"value": "fe80::200:ff:fe00:2"}],
                      "capability": [{"type": "Bridge", "enabled": false}]}],
         "port": [{"id": [{"type": "mac", "value": "00:00:00:00:00:02"}],
                   "descr": [{"value": "eth1"}], "ttl": [{"value": "120"}]}]},
        {"name": "ens1f0np0", "via": "LLDP", "rid": "2",
         "chassis": [{"id": [{"type": "mac", "value": "0c:42:a1:00:00:01"}]}],
         "port": [{"id": [{"type": "ifname", "value": "Ethernet1/7"}],
                   "descr": [{"value": "to gpu017"}]}]}
    ]}]}"#;

    #[test]
    fn lldpds_json0_gives_the_switch_and_port_per_netdev() {
        let n = parse(TWO).unwrap();
        assert_eq!(
            n,
            [
                Neighbour {
                    netdev: "eth0".into(),
                    switch: "ns-2.example.com".into(),
                    port: Some("eth1".into()),
                },
                Neighbour {
                    netdev: "ens1f0np0".into(),
                    switch: "0c:42:a1:00:00:01".into(),
                    port: Some("Ethernet1/7".into()),
                },
            ]
        );
    }

    /// A real capture (testdata/SOURCE.md): lldpd 1.0.16 on Debian bookworm.
    #[test]
    fn a_real_bookworm_capture_gives_the_peer_guest() {
        let text = include_str!("../testdata/lldpcli-json0-bookworm.json");
        assert_eq!(
            parse(text).unwrap(),
            [Neighbour {
                netdev: "eth0".into(),
                switch: "lab-b".into(),
                port: Some("eth0".into()),
            }]
        );
    }

    #[test]
    fn no_neighbour_is_an_empty_list() {
        assert_eq!(parse(r#"{"lldp": [{}]}"#).unwrap(), []);
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let e = |t: &str| parse(t).unwrap_err().to_string();
        assert!(e("").contains("not JSON"));
        assert!(e(r#"{"lldp": {"interface": {}}}"#).contains("-f json, not json0?"));
        assert!(e(r#"{"x": 1}"#).contains("no \"lldp\" key"));
        assert!(e(r#"{"lldp": [{"interface": [{"via": "LLDP"}]}]}"#)
            .contains("lldp[0].interface[0] has no name"));
        assert!(e(r#"{"lldp": [{"interface": [{"name": "eth0"}]}]}"#)
            .contains("(eth0): the neighbour has no chassis name or ID"));
        assert!(
            e(r#"{"lldp": [{"interface": [{"name": "eth0", "chassis": [{"name": [{"value": 3}]}]}]}]}"#)
                .contains("lldp[0].interface[0].chassis[0].name[0].value is 3, not a string")
        );
    }

    proptest! {
        /// Any JSON-ish text: neighbours or an error, never a panic.
        #[test]
        fn any_text_never_panics(text in "[\\[\\]{}\":,a-z0-9 ]{0,200}") {
            let _ = parse(&text);
        }

        /// Valid documents with arbitrary names and values round-trip their names.
        #[test]
        fn names_come_back(netdev in "[a-z][a-z0-9]{0,12}", switch in "[A-Za-z0-9.-]{1,20}", port in "[A-Za-z0-9/]{1,12}") {
            let doc = serde_json::json!({"lldp": [{"interface": [{"name": netdev,
                "chassis": [{"name": [{"value": switch}]}],
                "port": [{"id": [{"type": "ifname", "value": port}]}]}]}]});
            let n = parse(&doc.to_string()).unwrap();
            prop_assert_eq!(&n[0].netdev, &netdev);
            prop_assert_eq!(&n[0].switch, &switch);
            prop_assert_eq!(n[0].port.as_deref(), Some(port.as_str()));
        }
    }

    #[test]
    fn rows_join_ports_with_their_neighbours_and_say_what_is_left_out() {
        let n = |netdev: &str, switch: &str, port: Option<&str>| Neighbour {
            netdev: netdev.into(),
            switch: switch.into(),
            port: port.map(str::to_string),
        };
        let p = |name: &str, netdev: Option<&str>, addr: Option<&str>| LocalPort {
            name: name.into(),
            netdev: netdev.map(str::to_string),
            addr: addr.map(|a| a.parse().unwrap()),
        };
        let ports = [
            p("mlx5_0:1", Some("eth0"), Some("10.0.0.1")),
            p("mlx5_1:1", Some("eth1"), None),
            p("mlx5_2:1", Some("eth2"), Some("10.2.0.1")),
            p("mlx5_3:1", Some("eth3"), Some("10.3.0.1")),
            p("mlx5_4:1", Some("eth4"), Some("10.4.0.1")),
        ];
        let seen = [
            n("eth0", "tor-a1", Some("Ethernet12")),
            n("eth0", "tor-a1-twin", None),
            n("eth3", "tor\u{7}a3", None),
            n("eth4", "tor-a4", None),
        ];
        let (nics, left) = rows("node1", &ports, &seen);
        let got: Vec<_> = nics
            .iter()
            .map(|n| {
                (
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
                (0, "10.0.0.1".to_string(), "tor-a1", Some("Ethernet12")),
                (4, "10.4.0.1".to_string(), "tor-a4", None),
            ]
        );
        let why: Vec<_> = left.iter().map(|l| (l.rail, l.why.as_str())).collect();
        assert_eq!(
            why[0],
            (0, "2 LLDP neighbours on eth0; the first, tor-a1, is taken")
        );
        assert_eq!(why[1], (1, "eth1 has no IPv4 address with a RoCE v2 GID"));
        assert_eq!(why[2], (2, "no LLDP neighbour on \"eth2\""));
        assert!(why[3].1.contains("the LLDP switch name"), "{why:?}");
        assert_eq!(left.len(), 4);
    }
}
