//! The PCI side of an RDMA device: its function under `devices/pci<domain>:<bus>/...`, the
//! PCIe link it negotiated, its NUMA node, the GPUs on the bus, how far apart two
//! functions are (the terms of `nvidia-smi topo -m`), and the ACS control register of a
//! bridge read from its config space.
//!
//! Files (Documentation/ABI/testing/sysfs-bus-pci, drivers/pci/pci-sysfs.c):
//! `current_link_speed` / `max_link_speed` (`16.0 GT/s PCIe` since 5.18, `8 GT/s` or
//! `2.5 GT/s` before, `Unknown` when the link is down), `current_link_width` /
//! `max_link_width` (lanes), `numa_node` (`-1` when the platform says none), `class`
//! (`0x030200`), `vendor` (`0x10de`), and `config`, the binary config space: 4096 bytes
//! for root, only the first 64 (256 on some kernels) for anyone else.

use std::path::{Path, PathBuf};

use crate::read::{self, Attr, SysfsError};
use crate::SysRoot;

/// One PCI function as sysfs places it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciFunction {
    /// `0000:3b:00.0`
    pub address: String,
    /// Its directory (the real one, links resolved).
    pub dir: PathBuf,
    /// From the host bridge down: `pci0000:3a`, `0000:3a:00.0` (root port), ..., then
    /// the function itself.
    pub chain: Vec<String>,
}

impl PciFunction {
    /// The host bridge (`pci0000:3a`): one per root bus.
    pub fn host_bridge(&self) -> &str {
        &self.chain[0]
    }

    /// The bridges above the function, nearest first (root port last).
    pub fn bridges(&self) -> impl Iterator<Item = &str> {
        self.chain[1..self.chain.len() - 1]
            .iter()
            .rev()
            .map(String::as_str)
    }
}

/// The PCIe link of a function: what it runs at and the most it can.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PcieLink {
    /// GT/s per lane.
    pub speed: Option<f64>,
    pub width: Option<u32>,
    pub max_speed: Option<f64>,
    pub max_width: Option<u32>,
}

/// `16.0 GT/s PCIe`, `8 GT/s`, `2.5 GT/s` → GT/s; `Unknown` (link down) → `None`.
pub fn parse_link_speed(text: &str) -> Option<f64> {
    let mut it = text.split_whitespace();
    let n: f64 = it.next()?.parse().ok()?;
    (it.next()? == "GT/s" && n.is_finite() && n > 0.0).then_some(n)
}

/// The data rate one lane carries at `gts`, in Gb/s, after line encoding: 8b/10b up to
/// 5 GT/s, 128b/130b for 8 to 32 GT/s; 64 GT/s (PCIe 6, PAM4 with FLIT mode) is taken as
/// 1 bit per transfer, an approximation (FLIT framing and FEC take a few percent).
pub fn lane_gbps(gts: f64) -> f64 {
    if gts < 8.0 {
        gts * 0.8
    } else if gts < 64.0 {
        gts * 128.0 / 130.0
    } else {
        gts
    }
}

/// The bandwidth a link caps traffic at, in Gb/s.
pub fn link_gbps(gts: f64, width: u32) -> f64 {
    lane_gbps(gts) * f64::from(width)
}

/// A function whose class is a display controller: VGA (`0x0300xx`) or 3D (`0x0302xx`),
/// which is what data-centre GPUs report.
pub fn is_gpu_class(class: &str) -> bool {
    let c = class.trim().trim_start_matches("0x");
    c.len() == 6 && (c.starts_with("0300") || c.starts_with("0302"))
}

/// The vendor's name for a PCI vendor ID (`0x10de`), for the few that make GPUs and NICs.
pub fn vendor_name(vendor: &str) -> &'static str {
    match vendor.trim() {
        "0x10de" => "NVIDIA",
        "0x1002" => "AMD",
        "0x8086" => "Intel",
        "0x15b3" => "Mellanox/NVIDIA",
        "0x14e4" => "Broadcom",
        _ => "unknown vendor",
    }
}

/// How two functions reach each other, in the words of `nvidia-smi topo -m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum Proximity {
    /// Through at most one PCIe bridge (one switch).
    #[serde(rename = "PIX")]
    Pix,
    /// Through several PCIe bridges, without crossing the host bridge.
    #[serde(rename = "PXB")]
    Pxb,
    /// Through a PCIe host bridge (the same root complex).
    #[serde(rename = "PHB")]
    Phb,
    /// Across the interconnect between host bridges of one NUMA node.
    #[serde(rename = "NODE")]
    Node,
    /// Across the interconnect between NUMA nodes (QPI/UPI, Infinity Fabric).
    #[serde(rename = "SYS")]
    Sys,
}

impl Proximity {
    pub fn as_str(self) -> &'static str {
        match self {
            Proximity::Pix => "PIX",
            Proximity::Pxb => "PXB",
            Proximity::Phb => "PHB",
            Proximity::Node => "NODE",
            Proximity::Sys => "SYS",
        }
    }

    /// Whether peer-to-peer traffic between the two stays below the root complex (and
    /// so is what ACS redirection would send up to it).
    pub fn below_root_complex(self) -> bool {
        matches!(self, Proximity::Pix | Proximity::Pxb)
    }
}

/// How far apart two functions are, from their places in the hierarchy and their NUMA
/// nodes (`None`: the platform reports none, as single-socket hosts do; two such count
/// as one node).
pub fn proximity(
    a: &PciFunction,
    a_node: Option<u32>,
    b: &PciFunction,
    b_node: Option<u32>,
) -> Proximity {
    if a.host_bridge() != b.host_bridge() {
        return if a_node == b_node {
            Proximity::Node
        } else {
            Proximity::Sys
        };
    }
    let common = common_ancestors(a, b);
    if common <= 1 {
        return Proximity::Phb;
    }
    // Devices strictly between the common ancestor and each end: a switch's downstream
    // port is one (PIX), a second switch below it makes more (PXB).
    let between = |f: &PciFunction| f.chain.len().saturating_sub(common + 1);
    if between(a).max(between(b)) <= 1 {
        Proximity::Pix
    } else {
        Proximity::Pxb
    }
}

/// How many devices the two functions' chains from the host bridge have in common.
fn common_ancestors(a: &PciFunction, b: &PciFunction) -> usize {
    a.chain
        .iter()
        .zip(&b.chain)
        .take_while(|(x, y)| x == y)
        .count()
}

/// The bridges traffic between two functions passes without going up to the host bridge:
/// those of both chains from the common ancestor down, ends excluded. Empty when the path
/// crosses the host bridge.
pub fn bridges_between<'a>(a: &'a PciFunction, b: &'a PciFunction) -> Vec<&'a str> {
    if a.host_bridge() != b.host_bridge() {
        return Vec::new();
    }
    let common = common_ancestors(a, b);
    if common <= 1 {
        return Vec::new();
    }
    let mut out: Vec<&str> = vec![a.chain[common - 1].as_str()];
    for f in [a, b] {
        for c in &f.chain[common..f.chain.len() - 1] {
            if !out.contains(&c.as_str()) {
                out.push(c);
            }
        }
    }
    out
}

/// Why a config space could not be walked. Offsets are where the walk was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigSpaceError {
    #[error("config space is {len} bytes: the extended capabilities (from 0x100) are readable by root only")]
    Short { len: usize },
    #[error(
        "extended capability at {offset:#05x} runs past the end of the config space ({len} bytes)"
    )]
    Truncated { offset: usize, len: usize },
    #[error(
        "extended capability at {offset:#05x} points to {next:#05x}, inside the standard header"
    )]
    BadNext { offset: usize, next: usize },
    #[error("extended capability list does not end (at {offset:#05x} after {steps} steps)")]
    Loop { offset: usize, steps: usize },
}

/// PCIe extended capability ID of Access Control Services.
pub const EXT_CAP_ACS: u16 = 0x000d;

/// The offset of extended capability `id` in `config`, walking the list from 0x100
/// (header: ID in bits 0-15, version 16-19, next offset 20-31). `Ok(None)` when the list
/// is empty or does not hold it.
pub fn find_ext_capability(config: &[u8], id: u16) -> Result<Option<usize>, ConfigSpaceError> {
    const START: usize = 0x100;
    if config.len() < START + 4 {
        return Err(ConfigSpaceError::Short { len: config.len() });
    }
    // Each capability is at least 4 bytes: more steps than that means a loop.
    let max_steps = (config.len() - START) / 4;
    let mut offset = START;
    for steps in 0..=max_steps {
        let Some(h) = config.get(offset..offset + 4) else {
            return Err(ConfigSpaceError::Truncated {
                offset,
                len: config.len(),
            });
        };
        let header = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        // All zeros: no extended capabilities; all ones: the device did not answer.
        if header == 0 || header == u32::MAX {
            return Ok(None);
        }
        if (header & 0xffff) as u16 == id {
            return Ok(Some(offset));
        }
        // As the kernel's PCI_EXT_CAP_NEXT: the low two bits are reserved.
        let next = ((header >> 20) & 0xffc) as usize;
        if next == 0 {
            return Ok(None);
        }
        if next < START {
            return Err(ConfigSpaceError::BadNext { offset, next });
        }
        if steps == max_steps {
            return Err(ConfigSpaceError::Loop { offset, steps });
        }
        offset = next;
    }
    Err(ConfigSpaceError::Loop {
        offset,
        steps: max_steps,
    })
}

/// The ACS control register (PCIe base specification, ACS Extended Capability, offset
/// 06h of the capability).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcsControl(pub u16);

impl AcsControl {
    const BITS: [&'static str; 7] = [
        "Source Validation",
        "Translation Blocking",
        "P2P Request Redirect",
        "P2P Completion Redirect",
        "Upstream Forwarding",
        "P2P Egress Control",
        "Direct Translated P2P",
    ];

    /// Peer-to-peer requests are sent up to the root complex instead of across.
    pub fn p2p_request_redirect(self) -> bool {
        self.0 & (1 << 2) != 0
    }

    /// The names of the bits that are set.
    pub fn enabled(self) -> Vec<&'static str> {
        (0..Self::BITS.len())
            .filter(|b| self.0 & (1 << b) != 0)
            .map(|b| Self::BITS[b])
            .collect()
    }
}

/// The ACS capability's offset and control register, `Ok(None)` when the function has
/// no ACS capability.
pub fn acs_control(config: &[u8]) -> Result<Option<(usize, AcsControl)>, ConfigSpaceError> {
    let Some(cap) = find_ext_capability(config, EXT_CAP_ACS)? else {
        return Ok(None);
    };
    match config.get(cap + 6..cap + 8) {
        Some(c) => Ok(Some((cap, AcsControl(u16::from_le_bytes([c[0], c[1]]))))),
        None => Err(ConfigSpaceError::Truncated {
            offset: cap,
            len: config.len(),
        }),
    }
}

impl SysRoot {
    /// The PCI function a link (`class/infiniband/<dev>/device`, `bus/pci/devices/<bdf>`)
    /// resolves to, with its place in the hierarchy; `None` for a device without one
    /// (soft-RoCE) or a link outside `devices/pci*`.
    pub fn pci_function_at(&self, link: &Path) -> Option<PciFunction> {
        let dir = std::fs::canonicalize(link).ok()?;
        let devices = std::fs::canonicalize(self.root().join("devices")).ok()?;
        let rel = dir.strip_prefix(&devices).ok()?;
        let chain: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if chain.len() < 2 || !chain[0].starts_with("pci") {
            return None;
        }
        Some(PciFunction {
            address: chain.last()?.clone(),
            dir,
            chain,
        })
    }

    /// The PCI function of an RDMA device.
    pub fn rdma_pci_function(&self, dev: &str) -> Option<PciFunction> {
        self.pci_function_at(&self.device_dir(dev).join("device"))
    }

    /// Every function of `bus/pci/devices`, sorted by address.
    pub fn pci_functions(&self) -> Result<Vec<PciFunction>, SysfsError> {
        let bus = self.root().join("bus/pci/devices");
        Ok(read::list_dir(&bus)?
            .iter()
            .filter_map(|a| self.pci_function_at(&bus.join(a)))
            .collect())
    }

    /// The function's bridge `address` above it (or itself): its directory.
    pub fn pci_dir_in_chain(&self, f: &PciFunction, address: &str) -> Option<PathBuf> {
        let at = f.chain.iter().position(|c| c == address)?;
        let up = f.chain.len() - 1 - at;
        let mut d = f.dir.clone();
        for _ in 0..up {
            d.pop();
        }
        Some(d)
    }

    /// The PCIe link of the function in `dir`.
    pub fn pcie_link(&self, dir: &Path) -> Result<PcieLink, SysfsError> {
        let text = |f: &str| read::read_attr(&dir.join(f)).map(Attr::into_option);
        let speed = |f: &str| text(f).map(|t| t.as_deref().and_then(parse_link_speed));
        let width = |f: &str| text(f).map(|t| t.and_then(|t| t.parse::<u32>().ok()));
        Ok(PcieLink {
            speed: speed("current_link_speed")?,
            width: width("current_link_width")?,
            max_speed: speed("max_link_speed")?,
            max_width: width("max_link_width")?,
        })
    }

    /// The NUMA node of the function in `dir`; `None` when the platform reports none
    /// (`-1`) or the file is absent.
    pub fn pci_numa_node(&self, dir: &Path) -> Option<u32> {
        match read::read_attr(&dir.join("numa_node")) {
            Ok(Attr::Value(v)) => v.parse().ok(),
            _ => None,
        }
    }

    /// A text attribute of the function in `dir` (`class`, `vendor`, `device`).
    pub fn pci_attr(&self, dir: &Path, attr: &str) -> Option<String> {
        read::read_attr(&dir.join(attr)).ok()?.into_option()
    }

    /// The config space of the function in `dir`, as much as this user may read.
    pub fn pci_config(&self, dir: &Path) -> Result<Option<Vec<u8>>, SysfsError> {
        read::read_bytes(&dir.join("config"), 4096)
    }

    /// The CPUs of a NUMA node (`devices/system/node/node<N>/cpulist`, `0-15,32-47`).
    pub fn node_cpulist(&self, node: u32) -> Option<String> {
        read::read_attr(
            &self
                .root()
                .join(format!("devices/system/node/node{node}/cpulist")),
        )
        .ok()?
        .into_option()
    }

    /// Whether a kernel module is loaded (`module/<name>` exists).
    pub fn module_loaded(&self, name: &str) -> bool {
        self.root().join("module").join(name).is_dir()
    }
}

/// `0-3,8,10-11` → the CPUs; `None` when it is not a CPU list.
pub fn parse_cpulist(text: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                // A range wider than any machine's CPU count is not a CPU list.
                if b < a || b - a > 65_536 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(path: &str) -> PciFunction {
        let chain: Vec<String> = path.split('/').map(str::to_string).collect();
        PciFunction {
            address: chain.last().unwrap().clone(),
            dir: PathBuf::from(path),
            chain,
        }
    }

    #[test]
    fn link_speeds_as_kernels_print_them() {
        assert_eq!(parse_link_speed("16.0 GT/s PCIe"), Some(16.0));
        assert_eq!(parse_link_speed("8 GT/s"), Some(8.0));
        assert_eq!(parse_link_speed("2.5 GT/s"), Some(2.5));
        assert_eq!(parse_link_speed("32.0 GT/s PCIe\n"), Some(32.0));
        assert_eq!(parse_link_speed("Unknown"), None);
        assert_eq!(parse_link_speed("Unknown speed"), None);
        assert_eq!(parse_link_speed("NaN GT/s"), None);
        assert_eq!(parse_link_speed(""), None);
    }

    #[test]
    fn bandwidth_after_encoding() {
        // x8 at 16 GT/s: 126 Gb/s, below a 200 Gb/s port.
        assert_eq!(link_gbps(16.0, 8).round(), 126.0);
        assert_eq!(link_gbps(16.0, 16).round(), 252.0);
        assert_eq!(link_gbps(2.5, 1), 2.0);
        assert_eq!(link_gbps(5.0, 4), 16.0);
        assert_eq!(link_gbps(64.0, 16), 1024.0);
    }

    #[test]
    fn gpu_classes() {
        assert!(is_gpu_class("0x030200"));
        assert!(is_gpu_class("0x030000\n"));
        assert!(!is_gpu_class("0x020000")); // Ethernet controller
        assert!(!is_gpu_class("0x020700")); // InfiniBand controller
        assert!(!is_gpu_class("0x0302"));
    }

    #[test]
    fn proximity_in_the_words_of_nvidia_smi() {
        let gpu = f("pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:00.0/0000:1a:00.0");
        let nic = f("pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:02.0/0000:1c:00.0");
        assert_eq!(proximity(&gpu, Some(0), &nic, Some(0)), Proximity::Pix);
        assert_eq!(
            bridges_between(&gpu, &nic),
            ["0000:18:00.0", "0000:19:00.0", "0000:19:02.0"]
        );
        let deep = f("pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:01.0/0000:1d:00.0/0000:1e:00.0/0000:1f:00.0");
        assert_eq!(proximity(&deep, Some(0), &nic, Some(0)), Proximity::Pxb);
        let other_port = f("pci0000:17/0000:17:02.0/0000:20:00.0");
        assert_eq!(
            proximity(&other_port, Some(0), &nic, Some(0)),
            Proximity::Phb
        );
        assert!(bridges_between(&other_port, &nic).is_empty());
        let other_bridge = f("pci0000:3a/0000:3a:00.0/0000:3b:00.0");
        assert_eq!(
            proximity(&other_bridge, Some(0), &nic, Some(0)),
            Proximity::Node
        );
        assert_eq!(
            proximity(&other_bridge, Some(1), &nic, Some(0)),
            Proximity::Sys
        );
        assert_eq!(proximity(&other_bridge, None, &nic, None), Proximity::Node);
        // Two functions of one device under a root port.
        let f0 = f("pci0000:00/0000:00:01.0/0000:01:00.0");
        let f1 = f("pci0000:00/0000:00:01.0/0000:01:00.1");
        assert_eq!(proximity(&f0, None, &f1, None), Proximity::Pix);
        assert_eq!(
            gpu.bridges().collect::<Vec<_>>(),
            ["0000:19:00.0", "0000:18:00.0", "0000:17:00.0"]
        );
    }

    /// A 4096-byte config space with extended capabilities at the given offsets, each
    /// `(offset, id, next)`; the ACS one gets control `acs`.
    fn config(caps: &[(usize, u16, usize)], acs: u16) -> Vec<u8> {
        let mut c = vec![0u8; 4096];
        for &(off, id, next) in caps {
            let h = u32::from(id) | (1 << 16) | ((next as u32) << 20);
            c[off..off + 4].copy_from_slice(&h.to_le_bytes());
            if id == EXT_CAP_ACS {
                c[off + 4..off + 6].copy_from_slice(&0x007fu16.to_le_bytes());
                c[off + 6..off + 8].copy_from_slice(&acs.to_le_bytes());
            }
        }
        c
    }

    #[test]
    fn acs_found_by_walking_the_list() {
        // AER at 0x100, then ACS at 0x148, then a vendor capability at 0x200.
        let c = config(
            &[
                (0x100, 0x0001, 0x148),
                (0x148, 0x000d, 0x200),
                (0x200, 0x000b, 0),
            ],
            0x001d,
        );
        let (at, ctl) = acs_control(&c).unwrap().unwrap();
        assert_eq!(at, 0x148);
        assert!(ctl.p2p_request_redirect());
        assert_eq!(
            ctl.enabled(),
            [
                "Source Validation",
                "P2P Request Redirect",
                "P2P Completion Redirect",
                "Upstream Forwarding"
            ]
        );
        let off = config(&[(0x100, 0x000d, 0)], 0x0000);
        assert!(!acs_control(&off).unwrap().unwrap().1.p2p_request_redirect());
        // No ACS in the list, an empty list, a device that did not answer.
        assert_eq!(
            acs_control(&config(&[(0x100, 0x0001, 0)], 0)).unwrap(),
            None
        );
        assert_eq!(acs_control(&vec![0u8; 4096]).unwrap(), None);
        assert_eq!(acs_control(&vec![0xffu8; 4096]).unwrap(), None);
    }

    #[test]
    fn config_space_errors_name_the_offset() {
        // What a user who is not root reads: 64 bytes.
        assert_eq!(
            acs_control(&[0u8; 64]),
            Err(ConfigSpaceError::Short { len: 64 })
        );
        let back = config(&[(0x100, 0x0001, 0x40)], 0);
        assert_eq!(
            acs_control(&back),
            Err(ConfigSpaceError::BadNext {
                offset: 0x100,
                next: 0x40
            })
        );
        let looped = config(&[(0x100, 0x0001, 0x140), (0x140, 0x0002, 0x100)], 0);
        assert!(matches!(
            acs_control(&looped),
            Err(ConfigSpaceError::Loop { .. })
        ));
        let mut cut = config(&[(0x100, 0x0001, 0x1fc), (0x1fc, 0x000d, 0)], 0x4);
        cut.truncate(0x200);
        assert_eq!(
            acs_control(&cut),
            Err(ConfigSpaceError::Truncated {
                offset: 0x1fc,
                len: 0x200
            })
        );
        assert!(acs_control(&looped)
            .unwrap_err()
            .to_string()
            .contains("0x1"));
    }

    #[test]
    fn cpulists() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpulist("5"), Some(vec![5]));
        assert_eq!(parse_cpulist(""), Some(vec![]));
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("x"), None);
        assert_eq!(parse_cpulist("0-4294967295"), None);
    }

    proptest::proptest! {
        /// Any bytes: the walk ends, never panics, and an error names an offset inside
        /// the buffer (or says it is short).
        #[test]
        fn config_walk_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..4200)) {
            match acs_control(&bytes) {
                Ok(Some((at, _))) => proptest::prop_assert!(at + 8 <= bytes.len()),
                Ok(None) => {}
                Err(ConfigSpaceError::Short { len }) => proptest::prop_assert_eq!(len, bytes.len()),
                // A next pointer may point past a short buffer: still inside config space.
                Err(ConfigSpaceError::Truncated { offset, len }) => {
                    proptest::prop_assert!(offset < 0x1000 && offset + 8 > len);
                }
                Err(ConfigSpaceError::BadNext { offset, .. } | ConfigSpaceError::Loop { offset, .. }) => {
                    proptest::prop_assert!(offset < bytes.len());
                }
            }
        }

        /// A list of capabilities chained at random places: ACS is found where it is put.
        #[test]
        fn acs_found_wherever_it_is(slots in proptest::collection::btree_set(0x20usize..0x1ff, 1..12), pick in 0usize..12, ctl in proptest::num::u16::ANY) {
            let offs: Vec<usize> = std::iter::once(0x100).chain(slots.iter().map(|s| s * 8)).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
            let acs_at = offs[pick % offs.len()];
            let caps: Vec<(usize, u16, usize)> = offs.iter().enumerate().map(|(i, &o)| {
                (o, if o == acs_at { EXT_CAP_ACS } else { 0x0001 }, offs.get(i + 1).copied().unwrap_or(0))
            }).collect();
            let c = config(&caps, ctl);
            let (at, got) = acs_control(&c).unwrap().unwrap();
            proptest::prop_assert_eq!(at, acs_at);
            proptest::prop_assert_eq!(got, AcsControl(ctl));
        }
    }
}
