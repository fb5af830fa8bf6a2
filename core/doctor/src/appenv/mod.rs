//! What an application (NCCL, UCX, Open MPI) must be told on this host to take the RDMA
//! path, computed from discovery and the QoS state: the ACTIVE ports, the GID index that
//! holds the RoCE v2 GID of the netdev's IPv4 address, the traffic class that puts RDMA on
//! the lossless priority, the interface for sockets. `rocewatch env` prints it;
//! `rocewatch doctor --env` compares an application's settings with it (`check.rs`).

use std::collections::BTreeMap;
use std::net::IpAddr;

use rocewatch_plugin_api::QosState;
use rocewatch_sysfs::rails::PortEnv;
use serde::Serialize;

use crate::shell::{has_control, one_line, quote};

pub(crate) mod check;
mod select;

/// Which application's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum For {
    Nccl,
    Ucx,
    Openmpi,
    All,
}

/// What this host needs, with what could not be decided.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HostEnv {
    pub ports: Vec<PortEnv>,
    /// Name → value, in the order printed.
    pub variables: Vec<(String, String)>,
    pub warnings: Vec<String>,
}

/// Why a device or netdev name cannot go into a variable's list, if it cannot. NCCL and
/// UCX split the lists at commas and a device entry at its colon (`mlx5_0:1`); a name
/// that was not UTF-8 was read with U+FFFD for its bytes (the sysfs readers decode names
/// lossily) and is not the kernel's name; control characters are no name a tool takes.
fn unusable(name: &str, device: bool) -> Option<&'static str> {
    if name.is_empty() {
        Some("is empty")
    } else if name.contains('\u{fffd}') {
        Some("is not valid UTF-8 (it was read with U+FFFD in place of its bytes), so it cannot be printed exactly")
    } else if has_control(name) {
        Some("holds control characters")
    } else if name.contains(',') {
        Some("holds a comma, which separates the list's entries")
    } else if device && name.contains(':') {
        Some("holds a colon, which separates a device from its port")
    } else {
        None
    }
}

/// The RoCE ToS the QoS configuration's `[[qos.desired]]` asks of any of these ports.
pub fn desired_tos(cfg: &rocewatch_qos::QosConfig, qos: &[QosState]) -> Option<u8> {
    qos.iter().find_map(|st| {
        rocewatch_qos::desired_for(cfg, st)
            .get("roce_tos")
            .and_then(|v| v.trim().parse().ok())
    })
}

/// The most common value among `values` (ties: the smallest), and whether they differ.
fn consensus<T: Ord + Copy>(values: impl Iterator<Item = T>) -> Option<(T, bool)> {
    let mut counts: BTreeMap<T, usize> = BTreeMap::new();
    for v in values {
        *counts.entry(v).or_default() += 1;
    }
    let differ = counts.len() > 1;
    let best = counts
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(v, _)| *v)?;
    Some((best, differ))
}

/// What an application on this host needs. `desired_tos` is the RoCE ToS the QoS
/// configuration asks for, used when no port's ToS could be read.
pub fn compute(
    ports: Vec<PortEnv>,
    desired_tos: Option<u8>,
    target: For,
    addrs: Option<&BTreeMap<String, Vec<IpAddr>>>,
) -> HostEnv {
    let mut warnings = Vec::new();
    for p in ports.iter().filter(|p| !p.up) {
        warnings.push(format!(
            "{}: port is {} (not ACTIVE/LinkUp): left out",
            p.name(),
            p.state
        ));
    }
    // A name that cannot be printed exactly, or that would split the list it goes in,
    // is left out, saying why: never a wrong name in a variable.
    let mut active: Vec<&PortEnv> = Vec::new();
    for p in ports.iter().filter(|p| p.up) {
        match unusable(&p.device, true) {
            Some(why) => warnings.push(format!("{}: left out: the device name {why}", p.name())),
            None => active.push(p),
        }
    }
    if active.is_empty() {
        warnings.push("no ACTIVE RDMA port: applications would fall back to TCP".into());
    }
    let roce: Vec<&PortEnv> = active.iter().copied().filter(|p| p.roce()).collect();
    for p in roce.iter().filter(|p| p.gid_index.is_none()) {
        warnings.push(format!(
            "{}: no RoCE v2 GID with an IPv4 address{}: configure an address on the netdev (the kernel adds the GID)",
            p.name(),
            p.netdev.as_deref().map(|n| format!(" on {n}")).unwrap_or_default()
        ));
    }
    let gid_index = consensus(roce.iter().filter_map(|p| p.gid_index));
    if let Some((index, true)) = gid_index {
        for p in roce
            .iter()
            .filter(|p| p.gid_index.is_some_and(|i| i != index))
        {
            warnings.push(format!(
                "{}: its RoCE v2 IPv4 GID is at index {}, not {index} like the other ports: one NCCL_IB_GID_INDEX cannot fit both; with NCCL 2.21 or later leave it unset and set NCCL_IB_ROCE_VERSION_NUM=2 and NCCL_IB_ADDR_FAMILY=AF_INET (it then picks per port), or add the same address layout on every port",
                p.name(),
                p.gid_index.unwrap_or_default()
            ));
        }
    }
    let read_tos = consensus(roce.iter().filter_map(|p| p.tos));
    if let Some((tos, true)) = read_tos {
        for p in roce.iter().filter(|p| p.tos.is_some_and(|t| t != tos)) {
            warnings.push(format!(
                "{}: RoCE ToS {} differs from the other ports' {tos}",
                p.name(),
                p.tos.unwrap_or_default()
            ));
        }
    }
    // A ToS of 0 read from configfs is the kernel's default, not a choice: the desired
    // state says what is meant, when there is one.
    let tc = match (read_tos.map(|t| t.0), desired_tos) {
        (Some(t), _) if t != 0 => Some(t),
        (_, Some(d)) => Some(d),
        (t, None) => t,
    };
    if !roce.is_empty() && tc.unwrap_or(0) == 0 {
        warnings.push("no RoCE traffic class configured (ToS 0): RDMA traffic goes out on priority 0, usually not the lossless one; set the RDMA CM default ToS (rocewatch qos apply with roce_tos, e.g. 106 for DSCP 26) and the same NCCL_IB_TC".into());
    }
    let socket_ifs = socket_interfaces(&active, addrs, &mut warnings);
    if active.iter().any(|p| p.roce()) && active.iter().any(|p| !p.roce()) {
        warnings.push("both InfiniBand and RoCE ports are ACTIVE: the GID index and traffic class apply to the RoCE ports only; give each job the ports of one fabric (--device)".into());
    }
    for p in active.iter().filter(|p| !p.roce()) {
        if let (Some(nd), Some(a)) = (&p.netdev, addrs) {
            if a.get(nd).is_none_or(|ips| ips.is_empty()) {
                warnings.push(format!(
                    "{}: its IPoIB netdev {nd} has no address: NCCL's sockets cannot use it",
                    p.name()
                ));
            }
        }
    }
    let vars = variables(
        target,
        &active,
        gid_index.map(|g| g.0),
        tc.filter(|t| *t != 0 && !roce.is_empty()),
        &socket_ifs,
    );
    HostEnv {
        ports,
        variables: vars,
        warnings,
    }
}

/// The netdevs for NCCL_SOCKET_IFNAME, those left out said in `warnings`.
fn socket_interfaces(
    active: &[&PortEnv],
    addrs: Option<&BTreeMap<String, Vec<IpAddr>>>,
    warnings: &mut Vec<String>,
) -> Vec<String> {
    // Sockets: the netdevs with an address. RoCE: the GID table tells (the VLAN netdev
    // when the address is on one); InfiniBand: the IPoIB netdev, whose address the GID
    // table does not carry: on the live host its addresses say, on a tree it is assumed.
    active
        .iter()
        .filter_map(|p| {
            if p.roce() {
                p.ipv4.and(p.ip_netdev.clone())
            } else {
                let nd = p.netdev.clone()?;
                match addrs {
                    Some(a) if a.get(&nd).is_none_or(|ips| ips.is_empty()) => None,
                    _ => Some(nd),
                }
            }
        })
        .filter(|nd| match unusable(nd, false) {
            Some(why) => {
                warnings.push(format!(
                    "the netdev {nd} is left out of NCCL_SOCKET_IFNAME: its name {why}"
                ));
                false
            }
            None => true,
        })
        .collect()
}

/// The variables for `target`: the ports' list, the GID index, the traffic class (`tc`,
/// when RoCE ports need one) and the socket interfaces.
fn variables(
    target: For,
    active: &[&PortEnv],
    gid_index: Option<u32>,
    tc: Option<u8>,
    socket_ifs: &[String],
) -> Vec<(String, String)> {
    let hca = active
        .iter()
        .map(|p| p.name())
        .collect::<Vec<_>>()
        .join(",");
    let mut vars: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: String| vars.push((k.to_string(), v));
    let nccl = matches!(target, For::Nccl | For::All);
    let ucx = matches!(target, For::Ucx | For::Openmpi | For::All);
    if !active.is_empty() {
        if nccl {
            set("NCCL_IB_HCA", format!("={hca}"));
            if let Some(i) = gid_index {
                set("NCCL_IB_GID_INDEX", i.to_string());
            }
            if let Some(t) = tc {
                set("NCCL_IB_TC", t.to_string());
            }
            if !socket_ifs.is_empty() {
                set("NCCL_SOCKET_IFNAME", format!("={}", socket_ifs.join(",")));
            }
        }
        if ucx {
            set("UCX_NET_DEVICES", hca.clone());
            if let Some(i) = gid_index {
                set("UCX_IB_GID_INDEX", i.to_string());
            }
            if let Some(t) = tc {
                set("UCX_IB_TRAFFIC_CLASS", t.to_string());
            }
        }
        if matches!(target, For::Openmpi | For::All) {
            set("OMPI_MCA_pml", "ucx".into());
            set("OMPI_MCA_btl", "^openib".into());
        }
    }
    vars
}

/// `export NAME=value` lines for `sh` (`eval "$(rocewatch env)"`, `. file`): each value
/// one POSIX word that expands to exactly the value.
pub fn shell(env: &HostEnv) -> String {
    env.variables
        .iter()
        .map(|(k, v)| format!("export {k}={}\n", quote(v)))
        .collect()
}

/// The longest line slurmstepd reads whole: Slurm releases that read the prolog's output
/// with `fgets` into `char buf[4096]` (src/slurmd/slurmstepd/task.c,
/// `_run_script_and_set_env`, size `sizeof(buf) - 1`) split longer lines, and the rest
/// would be read as a line of its own.
const SLURM_LINE_MAX: usize = 4094;

/// A Slurm TaskProlog. slurmstepd reads what it prints line by line
/// (src/slurmd/slurmstepd/task.c, `_proc_stdout`): `export NAME=value` sets NAME to the
/// rest of the line as it is, no quotes removed, so each line is printed whole by
/// `printf '%s\n'` from one single-quoted word (`echo` would expand backslashes under
/// dash), and a value that would not stay on one line is left out, saying why. Names in
/// comments are escaped to one line.
pub fn slurm(env: &HostEnv, host: &str) -> String {
    let mut s = format!(
        "#!/bin/sh\n# Slurm TaskProlog (slurm.conf: TaskProlog=/etc/slurm/rdma-env.sh): each line it prints\n# as \"export NAME=value\" is set in the task's environment.\n# Values of {}, from `rocewatch env --format slurm`. Nodes that differ (other devices,\n# GID layout) need their own; or let the prolog ask each node itself:\n#   rocewatch env --format shell 2>/dev/null\n",
        one_line(host)
    );
    let mut warnings = env.warnings.clone();
    let mut lines = String::new();
    for (k, v) in &env.variables {
        let line = format!("export {k}={v}");
        if v.contains(['\n', '\0']) {
            warnings.push(format!(
                "{k} is left out: its value holds a line break, which would end the line slurmstepd reads"
            ));
        } else if line.len() + 1 > SLURM_LINE_MAX {
            warnings.push(format!(
                "{k} is left out: its line is {} bytes, longer than slurmstepd reads whole ({SLURM_LINE_MAX})",
                line.len() + 1
            ));
        } else {
            lines.push_str(&format!("printf '%s\\n' {}\n", quote(&line)));
        }
    }
    for w in &warnings {
        s.push_str(&format!("# warning: {}\n", one_line(w)));
    }
    s.push_str(&lines);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn port(name: &str, up: bool, gid: Option<u32>, tos: Option<u8>) -> PortEnv {
        let (device, port) = name.split_once(':').unwrap();
        PortEnv {
            device: device.into(),
            port: port.parse().unwrap(),
            link_layer: "Ethernet".into(),
            state: if up { "ACTIVE" } else { "DOWN" }.into(),
            up,
            netdev: Some(format!("eth-{device}")),
            ip_netdev: Some(format!("eth-{device}")),
            gid_index: gid,
            gid: gid.map(|_| "::ffff:10.0.0.1".into()),
            ipv4: gid.map(|_| Ipv4Addr::new(10, 0, 0, 1)),
            tos,
        }
    }

    fn var<'a>(e: &'a HostEnv, k: &str) -> Option<&'a str> {
        e.variables
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn active_ports_their_gid_index_and_traffic_class() {
        let e = compute(
            vec![
                port("mlx5_0:1", true, Some(3), Some(106)),
                port("mlx5_1:1", true, Some(3), None),
                port("mlx5_2:1", false, None, None),
            ],
            None,
            For::All,
            None,
        );
        assert_eq!(var(&e, "NCCL_IB_HCA"), Some("=mlx5_0:1,mlx5_1:1"));
        assert_eq!(var(&e, "NCCL_IB_GID_INDEX"), Some("3"));
        assert_eq!(var(&e, "NCCL_IB_TC"), Some("106"));
        assert_eq!(var(&e, "UCX_IB_TRAFFIC_CLASS"), Some("106"));
        assert_eq!(
            var(&e, "NCCL_SOCKET_IFNAME"),
            Some("=eth-mlx5_0,eth-mlx5_1")
        );
        assert_eq!(var(&e, "OMPI_MCA_btl"), Some("^openib"));
        assert!(
            e.warnings
                .iter()
                .any(|w| w.starts_with("mlx5_2:1: port is DOWN")),
            "{:?}",
            e.warnings
        );
        assert!(shell(&e).contains("export OMPI_MCA_btl=^openib\n"));
        assert!(slurm(&e, "h").contains("printf '%s\\n' 'export NCCL_IB_GID_INDEX=3'\n"));
    }

    #[test]
    fn a_port_with_another_gid_index_is_named() {
        let e = compute(
            vec![
                port("a:1", true, Some(3), Some(106)),
                port("b:1", true, Some(3), Some(106)),
                port("c:1", true, Some(5), Some(106)),
            ],
            None,
            For::Nccl,
            None,
        );
        assert_eq!(var(&e, "NCCL_IB_GID_INDEX"), Some("3"));
        assert!(
            e.warnings
                .iter()
                .any(|w| w.starts_with("c:1: its RoCE v2 IPv4 GID is at index 5, not 3")),
            "{:?}",
            e.warnings
        );
        assert_eq!(var(&e, "UCX_NET_DEVICES"), None, "NCCL only");
    }

    #[test]
    fn no_traffic_class_is_a_warning_and_the_desired_one_is_used() {
        let e = compute(
            vec![port("a:1", true, Some(1), Some(0))],
            None,
            For::Nccl,
            None,
        );
        assert_eq!(var(&e, "NCCL_IB_TC"), None);
        assert!(e
            .warnings
            .iter()
            .any(|w| w.contains("no RoCE traffic class")));
        let e = compute(
            vec![port("a:1", true, Some(1), Some(0))],
            Some(106),
            For::Nccl,
            None,
        );
        assert_eq!(var(&e, "NCCL_IB_TC"), Some("106"));
    }

    /// What running `script` with `sh` in an empty directory did: (its standard output,
    /// the files it left there). The script sits in another directory; the environment
    /// is empty but for PATH, so a command a name smuggled in would find `touch`.
    pub(crate) fn run_sh(script: &str, args: &[&str]) -> (String, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let cwd = tempfile::tempdir().unwrap();
        let file = dir.path().join("script.sh");
        std::fs::write(&file, script).unwrap();
        let check = std::process::Command::new("sh")
            .arg("-n")
            .arg(&file)
            .output()
            .expect("sh runs");
        assert!(
            check.status.success(),
            "sh -n: {}\n{script}",
            String::from_utf8_lossy(&check.stderr)
        );
        let o = std::process::Command::new("sh")
            .args(args)
            .arg(&file)
            .current_dir(cwd.path())
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .output()
            .expect("sh runs");
        assert!(
            o.status.success(),
            "sh: {}\n{script}",
            String::from_utf8_lossy(&o.stderr)
        );
        let left: Vec<String> = std::fs::read_dir(cwd.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        (String::from_utf8_lossy(&o.stdout).into_owned(), left)
    }

    /// The `export NAME=value` lines of a TaskProlog's output as slurmstepd reads them
    /// (`_proc_stdout` in src/slurmd/slurmstepd/task.c: one line each, the value is the
    /// rest of the line, taken literally).
    pub(crate) fn slurmstepd_exports(out: &str) -> Vec<(String, String)> {
        out.lines()
            .filter_map(|l| l.strip_prefix("export "))
            .filter_map(|l| l.trim_start().split_once('='))
            .map(|(k, v)| (k.trim_end().to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_slurm_prolog_runs_nothing_a_name_or_the_host_name_holds() {
        // A valid 15-byte netdev name (net/core/dev.c dev_valid_name forbids only '/',
        // ':' and white space) and a host name with a line break (sethostname takes any
        // bytes).
        let mut p = port("mlx5_0:1", true, Some(3), Some(106));
        p.netdev = Some("$(touch${IFS}P)".into());
        p.ip_netdev = p.netdev.clone();
        let mut down = port("`touch Q`:1", false, None, None);
        down.state = "DOWN\ntouch W".into();
        let e = compute(vec![p, down], None, For::Nccl, None);
        let (out, left) = run_sh(&slurm(&e, "node1\ntouch H"), &[]);
        assert!(left.is_empty(), "the prolog ran a command: {left:?}");
        assert_eq!(slurmstepd_exports(&out), e.variables, "{out}");
        assert_eq!(
            var(&e, "NCCL_SOCKET_IFNAME"),
            Some("=$(touch${IFS}P)"),
            "the name, exactly"
        );
        assert!(out.lines().all(|l| l.starts_with("export ")), "{out}");
    }

    /// Pieces that mean something to a shell or to slurmstepd.
    const NASTY: &[&str] = &[
        "$(touch P)",
        "`touch Q`",
        "$(touch${IFS}R)",
        "'",
        "\"",
        "\\",
        "\n",
        "\r",
        ";",
        "&",
        "|",
        "$IFS",
        "${X:-y}",
        "*",
        "~",
        "#",
        "\nexport EVIL=1",
        "\nprint x",
        "%s",
        "\u{1b}[2J",
        ",",
        ":",
        "mlx5_0",
        "eth0",
        "\u{0}",
        " ",
        "\t",
        "=",
    ];

    /// Names as the kernel or a sysfs tree could hold them: any bytes, or shell pieces,
    /// decoded as the sysfs readers decode them (lossily).
    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 1..16)
                .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
            proptest::collection::vec(proptest::sample::select(NASTY), 1..4)
                .prop_map(|p| p.concat()),
        ]
    }

    /// The environment `env -0` shows at the end of `script`, by name.
    fn exported(script: &str) -> (BTreeMap<String, String>, Vec<String>) {
        let (out, left) = run_sh(&format!("{script}env -0\n"), &[]);
        let vars = out
            .split('\0')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        (vars, left)
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Whatever the names, the shell output sets exactly the variables computed, to
        /// exactly their values, and the TaskProlog prints exactly their export lines;
        /// neither runs anything else (no file appears where they run).
        #[test]
        fn generated_shell_sets_the_variables_and_runs_nothing_else(
            names in proptest::collection::vec((name(), name(), name()), 1..3),
            host in name(),
        ) {
            let ports: Vec<PortEnv> = names
                .iter()
                .enumerate()
                .map(|(i, (dev, nd, state))| PortEnv {
                    device: dev.clone(),
                    port: 1,
                    link_layer: "Ethernet".into(),
                    state: if i == 0 { "ACTIVE".into() } else { state.clone() },
                    up: i == 0 || state.len() % 2 == 0,
                    netdev: Some(nd.clone()),
                    ip_netdev: Some(nd.clone()),
                    gid_index: Some(3),
                    gid: Some("::ffff:10.0.0.1".into()),
                    ipv4: Some(Ipv4Addr::new(10, 0, 0, 1)),
                    tos: Some(106),
                })
                .collect();
            let e = compute(ports, None, For::All, None);
            for (k, v) in &e.variables {
                prop_assert!(!has_control(v) && !v.contains('\u{fffd}'), "{k}={v:?}");
            }
            let (base, _) = exported("");
            let (after, left) = exported(&shell(&e));
            prop_assert!(left.is_empty(), "the shell output ran a command: {:?}", left);
            let set: Vec<(String, String)> = after
                .iter()
                // PWD is each run's own empty directory.
                .filter(|(k, v)| *k != "PWD" && base.get(*k) != Some(*v))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let mut want = e.variables.clone();
            want.sort();
            prop_assert_eq!(set, want);
            let (out, left) = run_sh(&slurm(&e, &host), &[]);
            prop_assert!(left.is_empty(), "the prolog ran a command: {:?}", left);
            prop_assert!(out.lines().all(|l| l.starts_with("export ")), "{}", out);
            prop_assert_eq!(slurmstepd_exports(&out), e.variables.clone());
        }
    }

    #[test]
    fn names_that_cannot_be_printed_exactly_are_left_out_saying_why() {
        let mut lossy = port("mlx5_0:1", true, Some(3), None);
        lossy.device = String::from_utf8_lossy(b"mlx\xff5").into_owned();
        let mut comma = port("mlx5_1:1", true, Some(3), None);
        comma.netdev = Some("eth1,eth2".into());
        comma.ip_netdev = comma.netdev.clone();
        let e = compute(vec![lossy, comma], None, For::Nccl, None);
        assert_eq!(var(&e, "NCCL_IB_HCA"), Some("=mlx5_1:1"));
        assert_eq!(var(&e, "NCCL_SOCKET_IFNAME"), None);
        assert!(
            e.warnings.iter().any(|w| w.contains("is not valid UTF-8")),
            "{:?}",
            e.warnings
        );
        assert!(
            e.warnings
                .iter()
                .any(|w| w.starts_with("the netdev eth1,eth2 is left out")),
            "{:?}",
            e.warnings
        );
        // A value slurmstepd cannot read on one line is left out of the prolog, said.
        let long = HostEnv {
            variables: vec![("A".into(), "x\ny".into()), ("B".into(), "z".repeat(5000))],
            ..HostEnv::default()
        };
        let p = slurm(&long, "h");
        assert!(
            p.contains("# warning: A is left out: its value holds a line break"),
            "{p}"
        );
        assert!(
            p.contains("# warning: B is left out: its line is 5010 bytes"),
            "{p}"
        );
        assert!(!p.contains("printf"), "{p}");
    }

    #[test]
    fn quoting() {
        assert_eq!(quote("=a:1,b:1"), "=a:1,b:1");
        assert_eq!(quote("it's"), r"'it'\''s'");
    }
}
