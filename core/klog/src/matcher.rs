//! Which records count: the driver filter, the patterns, and the device a message is
//! about.
//!
//! Driver messages start with the driver and the PCI function (`dev_err` prints
//! `DRIVER BDF: ...`; the mlx5 netdev messages `netdev_err` print `DRIVER BDF NETDEV: ...`).
//! The function maps to the RDMA device through sysfs: `class/net/<netdev>/device` →
//! the function, and the RDMA ports' netdevs (the `ibdev2netdev` mapping); else the
//! function's own `infiniband/` directory; else the PCI address is kept.

use std::collections::BTreeMap;

use regex::Regex;

use crate::kmsg::Record;

/// One compiled pattern.
#[derive(Debug, Clone)]
pub struct Pattern {
    pub name: String,
    pub regex: Regex,
}

/// Why a pattern could not be used.
#[derive(Debug, thiserror::Error)]
#[error("pattern {name}: {source}")]
pub struct PatternError {
    pub name: String,
    #[source]
    pub source: regex::Error,
}

/// The default patterns of the catalog, plus `extra` (a name already there replaces the
/// default), unless `defaults` is false.
pub fn compile(
    defaults: bool,
    extra: &BTreeMap<String, String>,
) -> Result<Vec<Pattern>, PatternError> {
    let mut out: Vec<(String, String)> = Vec::new();
    if defaults {
        for p in rocewatch_metrics::KERNEL_LOG_PATTERNS {
            out.push((p.name.into(), p.regex.into()));
        }
    }
    for (name, re) in extra {
        match out.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = re.clone(),
            None => out.push((name.clone(), re.clone())),
        }
    }
    out.into_iter()
        .map(|(name, re)| match Regex::new(&re) {
            Ok(regex) => Ok(Pattern { name, regex }),
            Err(source) => Err(PatternError { name, source }),
        })
        .collect()
}

/// The drivers whose messages count by default: the RDMA/RoCE NIC drivers and their
/// Ethernet halves.
pub const DEFAULT_DRIVERS: &[&str] = &[
    "mlx5_core",
    "mlx5_ib",
    "mlx4_core",
    "mlx4_en",
    "mlx4_ib",
    "irdma",
    "ice",
    "i40e",
    "bnxt_en",
    "bnxt_re",
    "efa",
    "rdma_rxe",
    "siw",
    "ib_core",
];

/// What a driver message names: the driver, the PCI function and the netdev.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub driver: String,
    pub pci: Option<String>,
    pub netdev: Option<String>,
}

/// `mlx5_core 0000:03:00.0 ens1f0np0: Link down` → driver, function, netdev; a message
/// without a PCI function (`rdma_rxe: ...`) gives only the driver.
pub fn origin(message: &str) -> Origin {
    let head = message.split(": ").next().unwrap_or_default();
    let mut words = head.split_whitespace();
    let first = words.next().unwrap_or_default();
    let driver = first.trim_end_matches(':').to_string();
    let second = words.next();
    let pci = second.filter(|w| is_pci_address(w)).map(str::to_string);
    // `DRIVER BDF NETDEV`, or `DRIVER NETDEV` where the function is not printed.
    let netdev = match pci {
        Some(_) => words.next(),
        None => second.filter(|_| words.next().is_none()),
    }
    .map(|w| w.trim_end_matches(':').to_string());
    Origin {
        driver,
        pci,
        netdev,
    }
}

/// `0000:03:00.0` (domain:bus:device.function, hexadecimal).
pub fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && b.iter()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

/// PCI functions and netdevs to RDMA device names.
#[derive(Debug, Clone, Default)]
pub struct DeviceMap {
    pub by_pci: BTreeMap<String, String>,
    pub by_netdev: BTreeMap<String, String>,
}

impl DeviceMap {
    /// Read through the sysfs root: every RDMA device's function (its `device` link) and
    /// its ports' netdevs with theirs.
    pub fn read(root: &rocewatch_sysfs::SysRoot) -> Self {
        let mut m = DeviceMap::default();
        let filter = rocewatch_sysfs::inventory::DeviceFilter::default();
        let Ok((inv, _)) = rocewatch_sysfs::inventory::read_inventory(root, &filter) else {
            return m;
        };
        // The PCI function of a `device` link: the link's target or the nearest PCI
        // function above it (virtio-net's netdev hangs off `0000:00:04.0/virtio0`).
        let function = |link: std::path::PathBuf| {
            let target = std::fs::canonicalize(link).ok()?;
            target
                .ancestors()
                .filter_map(|a| a.file_name())
                .map(|f| f.to_string_lossy().into_owned())
                .find(|f| is_pci_address(f))
        };
        for d in &inv.devices {
            if let Some(pci) = function(root.device_dir(&d.name).join("device")) {
                m.by_pci.entry(pci).or_insert_with(|| d.name.clone());
            }
            for p in &d.ports {
                let Some(nd) = &p.netdev else { continue };
                m.by_netdev.insert(nd.clone(), d.name.clone());
                if let Some(pci) = function(root.netdev_dir(nd).join("device")) {
                    m.by_pci.entry(pci).or_insert_with(|| d.name.clone());
                }
            }
        }
        m
    }

    /// The RDMA device a message is about, else its PCI function, else empty.
    pub fn device(&self, o: &Origin) -> String {
        o.netdev
            .as_ref()
            .and_then(|n| self.by_netdev.get(n))
            .or_else(|| o.pci.as_ref().and_then(|p| self.by_pci.get(p)))
            .cloned()
            .or_else(|| o.pci.clone())
            .unwrap_or_default()
    }
}

/// Counts and last message per (pattern, device).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    pub counts: BTreeMap<(String, String), Hit>,
    /// Records read (of any driver).
    pub records: u64,
}

impl Tally {
    /// Add `later`'s counts (of records read after these) to these: its last messages
    /// replace theirs.
    pub fn absorb(&mut self, later: Tally) {
        self.records += later.records;
        for (key, hit) in later.counts {
            let h = self.counts.entry(key).or_default();
            h.count += hit.count;
            h.last_message = hit.last_message;
            h.last_timestamp_us = hit.last_timestamp_us;
            h.last_stamp = hit.last_stamp;
        }
    }
}

/// One (pattern, device)'s count and its last message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hit {
    pub count: u64,
    pub last_message: String,
    /// Microseconds since boot of the last message (0 when its source keeps another
    /// clock: see `last_stamp`).
    pub last_timestamp_us: u64,
    /// When the last message was logged, on its source's clock.
    pub last_stamp: crate::kmsg::Stamp,
}

/// What is matched against what.
#[derive(Debug, Clone)]
pub struct Matcher {
    pub patterns: Vec<Pattern>,
    pub drivers: Vec<String>,
    pub devices: DeviceMap,
}

impl Matcher {
    /// Count `r` in `tally` under every pattern it matches; a message of a driver not in
    /// the list is read but not counted. Returns whether it counted.
    pub fn count(&self, r: &Record, tally: &mut Tally) -> bool {
        tally.records += 1;
        let o = origin(&r.message);
        if !self.drivers.contains(&o.driver) {
            return false;
        }
        let mut counted = false;
        for p in &self.patterns {
            if !p.regex.is_match(&r.message) {
                continue;
            }
            let hit = tally
                .counts
                .entry((p.name.clone(), self.devices.device(&o)))
                .or_default();
            hit.count += 1;
            hit.last_message = r.message.clone();
            hit.last_timestamp_us = r.timestamp_us;
            hit.last_stamp = r.stamp;
            counted = true;
        }
        counted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kmsg::parse_record;

    fn matcher() -> Matcher {
        let mut devices = DeviceMap::default();
        devices
            .by_pci
            .insert("0000:03:00.0".into(), "mlx5_0".into());
        devices
            .by_netdev
            .insert("ens1f1np1".into(), "mlx5_1".into());
        Matcher {
            patterns: compile(true, &BTreeMap::new()).unwrap(),
            drivers: DEFAULT_DRIVERS.iter().map(|d| d.to_string()).collect(),
            devices,
        }
    }

    /// Records in the mlx5 driver's formats: messages as hosts logged them (the format
    /// strings of drivers/net/ethernet/mellanox/mlx5/core/{cmd.c,health.c,events.c,
    /// en_main.c}), in the kmsg record framing.
    const RECORDED: &str = "\
3,2001,1000,-;mlx5_core 0000:03:00.0: wait_func_handle_exec_timeout:1159:(pid 72061): cmd[0]: ACCESS_REG(0x805) No done completion\n\
3,2002,2000,-;mlx5_core 0000:03:00.0: wait_func:1189:(pid 72061): ACCESS_REG(0x805) timeout. Will cause a leak of a command resource\n\
3,2003,3000,-;mlx5_core 0000:03:00.0: poll_health:852:(pid 0): device's health compromised - reached miss count\n\
3,2004,4000,-;mlx5_core 0000:03:00.0: mlx5_cmd_out_err:838:(pid 1441871): ACCESS_REG(0x805) op_mod(0x1) failed, status bad operation(0x2), syndrome (0x6c4d4c), err(-22)\n\
4,2005,5000,-;mlx5_core 0000:04:00.0: mlx5_pcie_event:326:(pid 165): Detected insufficient power on the PCIe slot (27W).\n\
4,2006,6000,-;mlx5_core 0000:03:00.0: temp_warn:170:(pid 0): High temperature on sensors with bit set 0 1\n\
3,2007,6500,-;mlx5_core 0000:03:00.0: Port module event[error]: module 0, Cable error, High Temperature\n\
6,2008,7000,-;mlx5_core 0000:03:00.1 ens1f1np1: Link down\n\
6,2009,8000,-;mlx5_core 0000:03:00.1 ens1f1np1: Link up\n\
6,2010,9000,-;thermal thermal_zone0: critical temperature reached\n\
6,2011,9500,-;EXT4-fs (sda1): mounted filesystem\n";

    #[test]
    fn counts_the_recorded_mlx5_messages() {
        let m = matcher();
        let mut t = Tally::default();
        for line in RECORDED.lines() {
            m.count(&parse_record(line).unwrap(), &mut t);
        }
        let get = |p: &str, d: &str| t.counts.get(&(p.into(), d.into())).map(|h| h.count);
        assert_eq!(get("cmd_timeout", "mlx5_0"), Some(2));
        assert_eq!(get("access_reg", "mlx5_0"), Some(3));
        assert_eq!(get("health_compromised", "mlx5_0"), Some(1));
        assert_eq!(get("fw_syndrome", "mlx5_0"), Some(1));
        // A function with no RDMA device keeps its address.
        assert_eq!(get("pcie_power", "0000:04:00.0"), Some(1));
        assert_eq!(get("module_temperature", "mlx5_0"), Some(2));
        let flap = &t.counts[&("link_flap".into(), "mlx5_1".into())];
        assert_eq!(
            (flap.count, flap.last_message.as_str()),
            (2, "mlx5_core 0000:03:00.1 ens1f1np1: Link up")
        );
        assert_eq!(flap.last_timestamp_us, 8000);
        // The CPU's thermal zone is not a NIC driver.
        assert!(!t.counts.keys().any(|(_, d)| d.is_empty()));
        assert_eq!(t.records, 11);
    }

    #[test]
    fn origins() {
        assert_eq!(
            origin("mlx5_core 0000:03:00.1 ens1f1np1: Link down"),
            Origin {
                driver: "mlx5_core".into(),
                pci: Some("0000:03:00.1".into()),
                netdev: Some("ens1f1np1".into())
            }
        );
        assert_eq!(origin("mlx5_core 0000:03:00.0: x").netdev, None);
        assert_eq!(
            origin("mlx5_core enp1s0f0np0: Link down").netdev.as_deref(),
            Some("enp1s0f0np0")
        );
        assert_eq!(
            origin("rdma_rxe: loaded"),
            Origin {
                driver: "rdma_rxe".into(),
                pci: None,
                netdev: None
            }
        );
        assert!(!is_pci_address("0000:03:00"));
        assert!(!is_pci_address("000g:03:00.0"));
    }

    #[test]
    fn patterns_are_added_replaced_and_checked() {
        let mut extra = BTreeMap::new();
        extra.insert("link_flap".to_string(), "carrier lost".to_string());
        extra.insert("pci_aer".to_string(), "AER:".to_string());
        let p = compile(true, &extra).unwrap();
        assert_eq!(
            p.iter()
                .find(|p| p.name == "link_flap")
                .unwrap()
                .regex
                .as_str(),
            "carrier lost"
        );
        assert!(p.iter().any(|p| p.name == "pci_aer"));
        assert_eq!(compile(false, &extra).unwrap().len(), 2);
        extra.insert("bad".to_string(), "(".to_string());
        let e = compile(true, &extra).unwrap_err().to_string();
        assert!(e.starts_with("pattern bad: "), "{e}");
    }

    #[test]
    fn device_map_follows_links_to_the_pci_function() {
        // class/infiniband/mlx5_0/device -> the function; class/net/eth0/device -> a
        // virtio device under a function (as virtio-net has it), the port's netdev.
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        let f = r.join("devices/pci0000:00/0000:03:00.0");
        let v = r.join("devices/pci0000:00/0000:00:04.0/virtio0");
        std::fs::create_dir_all(&f).unwrap();
        std::fs::create_dir_all(&v).unwrap();
        let port = r.join("class/infiniband/rxe0/ports/1");
        std::fs::create_dir_all(port.join("gid_attrs/ndevs")).unwrap();
        std::fs::create_dir_all(port.join("gids")).unwrap();
        std::fs::write(
            port.join("gids/0"),
            "fe80:0000:0000:0000:0000:0000:0000:0001\n",
        )
        .unwrap();
        std::fs::write(port.join("gid_attrs/ndevs/0"), "eth0\n").unwrap();
        std::fs::write(port.join("link_layer"), "Ethernet\n").unwrap();
        std::fs::create_dir_all(r.join("class/infiniband/mlx5_0/ports")).unwrap();
        std::os::unix::fs::symlink(&f, r.join("class/infiniband/mlx5_0/device")).unwrap();
        std::fs::create_dir_all(r.join("class/net/eth0")).unwrap();
        std::os::unix::fs::symlink(&v, r.join("class/net/eth0/device")).unwrap();
        let m = DeviceMap::read(&rocewatch_sysfs::SysRoot::new(r));
        assert_eq!(
            m.by_pci.get("0000:03:00.0").map(String::as_str),
            Some("mlx5_0"),
            "{m:?}"
        );
        assert_eq!(
            m.by_pci.get("0000:00:04.0").map(String::as_str),
            Some("rxe0"),
            "{m:?}"
        );
        assert_eq!(m.device(&origin("mlx5_core 0000:00:04.0: x")), "rxe0");
    }

    proptest::proptest! {
        #[test]
        fn origin_never_panics(s in ".*") {
            let _ = origin(&s);
            let _ = is_pci_address(&s);
        }
    }
}
