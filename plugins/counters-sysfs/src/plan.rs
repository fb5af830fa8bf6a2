//! The plan: which files of which port are read, with their catalog entry and attributes,
//! built when the set of devices changes; the files kept open between collections; and
//! which ports' hw_counters/ come over RDMA netlink.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocewatch_metrics::{
    self as catalog, CatalogEntry, ATTR_COUNTER, ATTR_DEVICE, ATTR_NETDEV, ATTR_PORT,
};
use rocewatch_netlink::rdma::RdmaNetlink;
use rocewatch_plugin_api::*;
use rocewatch_sysfs::inventory::DeviceFilter;
use rocewatch_sysfs::{read, SysRoot};

pub(crate) const GROUPS: [&str; 3] = ["counters_ext", "counters", "hw_counters"];

/// A file read on every collection, kept open between collections when allowed. Its path
/// is the caller's: at 2000 ports a path per counter file was 10 MB of the plan, and a
/// counter file's path is its port directory joined with its source.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    pub(crate) file: Option<std::fs::File>,
}

impl Kept {
    /// Reads the trimmed text of `path` into `f`. Opens and keeps the file while
    /// `*open < max`; a kept file that stops answering (a device re-created under the
    /// same name leaves old descriptors dead) is closed and reopened by path next time.
    pub(crate) fn read<T>(
        &mut self,
        path: &Path,
        open: &mut usize,
        max: usize,
        f: impl FnOnce(&str) -> T,
    ) -> Result<Option<T>, rocewatch_sysfs::read::SysfsError> {
        if self.file.is_none() && *open < max {
            if let Ok(h) = read::open_attr(path) {
                self.file = Some(h);
                *open += 1;
            }
        }
        let r = match &self.file {
            Some(h) => read::pread_attr_with(h, path, f),
            None => read::read_attr_with(path, f),
        };
        if self.file.is_some() && !matches!(r, Ok(Some(_))) {
            self.file = None;
            *open -= 1;
        }
        r
    }
}

/// A port-level file (`state`, `rate`, the netdev's `mtu`): a few per port, so it keeps
/// its own path.
#[derive(Debug)]
pub(crate) struct KeptAt {
    pub(crate) path: PathBuf,
    pub(crate) kept: Kept,
}

impl KeptAt {
    pub(crate) fn new(path: PathBuf) -> Self {
        KeptAt {
            path,
            kept: Kept::default(),
        }
    }

    pub(crate) fn read<T>(
        &mut self,
        open: &mut usize,
        max: usize,
        f: impl FnOnce(&str) -> T,
    ) -> Result<Option<T>, rocewatch_sysfs::read::SysfsError> {
        self.kept.read(&self.path, open, max, f)
    }
}

/// The four files of a device's PCIe link, in the order of [`catalog::PCIE_CATALOG`]
/// (read by `pcie.rs`).
#[derive(Debug)]
pub(crate) struct PcieFiles {
    pub(crate) files: [KeptAt; 4],
    /// All four were absent last time: not looked for again before this (see
    /// `pcie::scrape_pcie`).
    pub(crate) recheck_at: Option<std::time::Instant>,
}

impl PcieFiles {
    /// The files of the RDMA device in `device_dir` (`class/infiniband/<dev>`): their
    /// catalog sources are relative to it (`device/current_link_speed`).
    pub(crate) fn new(device_dir: &Path) -> Self {
        let t = catalog::PCIE_CATALOG;
        PcieFiles {
            files: std::array::from_fn(|i| KeptAt::new(device_dir.join(t[i].source))),
            recheck_at: None,
        }
    }
}

#[derive(Debug)]
pub(crate) struct FilePlan {
    /// Relative to the port directory (`counters/port_xmit_data`); every sample of the
    /// file shares it.
    pub(crate) source: Arc<str>,
    pub(crate) entry: &'static CatalogEntry,
    /// Shared by the files of a port that carry the same attributes (at 2000 ports a
    /// map per file was 60 MB of the plan).
    pub(crate) attributes: Attributes,
    /// A file of hw_counters/ (which RDMA netlink can stand in for).
    pub(crate) hw: bool,
    /// `netlink:hw_counters/<name>`, for a hw counter of a port read over netlink (set by
    /// [`attach_netlink`], shared across ports like `source`).
    pub(crate) netlink_source: Option<Arc<str>>,
    /// The file, kept open between collections when allowed (see [`KeepOpen`]).
    pub(crate) kept: Kept,
}

impl FilePlan {
    /// `netlink:hw_counters/<name>`: the source of a value read over RDMA netlink.
    pub(crate) fn netlink_source(&self) -> Arc<str> {
        match &self.netlink_source {
            Some(s) => Arc::clone(s),
            None => format!("netlink:{}", self.source).into(),
        }
    }
}

#[derive(Debug)]
pub(crate) struct PortPlan {
    pub(crate) device: String,
    pub(crate) port: u32,
    pub(crate) port_dir: PathBuf,
    pub(crate) state: KeptAt,
    pub(crate) phys_state: KeptAt,
    pub(crate) rate: KeptAt,
    /// The netdev's `mtu` file and the sample source naming it.
    pub(crate) mtu: Option<(KeptAt, Arc<str>)>,
    /// The PCIe link files of the device, on its first port only.
    pub(crate) pcie: Option<PcieFiles>,
    /// The attributes of the device's `rdma.driver.info`, on its first port only.
    pub(crate) driver: Option<Attributes>,
    pub(crate) base: Attributes,
    pub(crate) files: Vec<FilePlan>,
    /// The kernel's device index when hw_counters/ come over netlink.
    pub(crate) netlink: Option<u32>,
    /// hw counter name -> index in `files`, for the ports whose hw counters come over
    /// netlink (built by [`attach_netlink`]; empty otherwise: at 2000 ports the map was
    /// 6 MB that reading the files never looks at).
    pub(crate) hw_index: HashMap<String, usize>,
}

#[derive(Debug, Default)]
pub(crate) struct Plan {
    pub(crate) devices: Vec<String>,
    pub(crate) ports: Vec<PortPlan>,
    /// Files of this plan kept open.
    pub(crate) open_files: usize,
}

pub(crate) fn base_attributes(
    device: &str,
    port: u32,
    netdev: Option<&str>,
) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    m.insert(ATTR_DEVICE.to_string(), device.to_string());
    m.insert(ATTR_PORT.to_string(), port.to_string());
    if let Some(nd) = netdev {
        m.insert(ATTR_NETDEV.to_string(), nd.to_string());
    }
    m
}

pub(crate) fn build_plan(
    root: &SysRoot,
    filter: &DeviceFilter,
    devices: Vec<String>,
) -> (Plan, Vec<PartialError>) {
    let mut errors = Vec::new();
    let mut plan = Plan {
        devices: devices.clone(),
        ports: Vec::new(),
        open_files: 0,
    };
    // One `Arc` per distinct source across ports (2000 ports read the same 52 names).
    let mut sources: HashMap<String, Arc<str>> = HashMap::new();
    for device in devices.iter().filter(|d| filter.allows(d)) {
        let ports = root.ports(device).unwrap_or_else(|e| {
            errors.push(PartialError {
                target: e.path().display().to_string(),
                message: e.cause(),
            });
            Vec::new()
        });
        for (k, port) in ports.into_iter().enumerate() {
            let gids = root.gids(device, port).unwrap_or_default();
            let netdev = root.port_netdev(device, port, &gids);
            let base = base_attributes(device, port, netdev.as_deref());
            let port_dir = root.port_dir(device, port);
            let mut files: Vec<FilePlan> = Vec::new();
            // The series planned so far (name, attributes by value).
            let mut planned: HashSet<(&'static str, Attributes)> = HashSet::new();
            let mut shared: HashMap<&'static [(&'static str, &'static str)], Attributes> =
                HashMap::new();
            for group in GROUPS {
                let names = root.counter_files(device, port, group).unwrap_or_else(|e| {
                    errors.push(PartialError {
                        target: e.path().display().to_string(),
                        message: e.cause(),
                    });
                    Vec::new()
                });
                for file in names {
                    let source = format!("{group}/{file}");
                    if catalog::NOT_COUNTERS.contains(&source.as_str()) {
                        continue;
                    }
                    let (entry, extra) = match catalog::lookup(group, &file) {
                        Some(e) => (e, None),
                        None if group == "hw_counters" => {
                            (catalog::unknown_hw_counter(), Some(file.clone()))
                        }
                        // Unknown files of counters/ and counters_ext/ are not guessed at.
                        None => continue,
                    };
                    let with = |extra: Option<String>| {
                        let mut attributes = base.clone();
                        for (k, v) in entry.attributes {
                            attributes.insert(k.to_string(), v.to_string());
                        }
                        if let Some(name) = extra {
                            attributes.insert(ATTR_COUNTER.to_string(), name);
                        }
                        Attributes::new(attributes.into())
                    };
                    let attributes = match extra {
                        Some(name) => with(Some(name)),
                        None => Attributes::clone(
                            shared.entry(entry.attributes).or_insert_with(|| with(None)),
                        ),
                    };
                    // counters_ext/ is planned first: its 64-bit series wins over counters/.
                    if !planned.insert((entry.name, Attributes::clone(&attributes))) {
                        continue;
                    }
                    files.push(FilePlan {
                        netlink_source: None,
                        kept: Kept::default(),
                        hw: group == "hw_counters",
                        source: Arc::clone(
                            sources
                                .entry(source)
                                .or_insert_with_key(|s| Arc::from(s.as_str())),
                        ),
                        entry,
                        attributes,
                    });
                }
            }
            plan.ports.push(PortPlan {
                device: device.clone(),
                port,
                state: KeptAt::new(port_dir.join("state")),
                phys_state: KeptAt::new(port_dir.join("phys_state")),
                rate: KeptAt::new(port_dir.join("rate")),
                mtu: netdev.as_ref().map(|nd| {
                    (
                        KeptAt::new(root.netdev_dir(nd).join("mtu")),
                        format!("class/net/{nd}/mtu").into(),
                    )
                }),
                pcie: (k == 0).then(|| PcieFiles::new(&root.device_dir(device))),
                driver: if k == 0 {
                    crate::driver::driver_attributes(root, device)
                } else {
                    None
                },
                port_dir,
                base: Attributes::new(base.into()),
                files,
                netlink: None,
                hw_index: HashMap::new(),
            });
        }
    }
    (plan, errors)
}

/// A catalog entry and attributes for a hw counter first seen in a netlink reply.
pub(crate) fn hw_file_plan(base: &Attributes, name: &str) -> Option<FilePlan> {
    let source = format!("hw_counters/{name}");
    if catalog::NOT_COUNTERS.contains(&source.as_str()) {
        return None;
    }
    let mut attributes = (**base).clone();
    let entry = match catalog::lookup("hw_counters", name) {
        Some(e) => e,
        None => {
            attributes.insert(ATTR_COUNTER, name);
            catalog::unknown_hw_counter()
        }
    };
    for (k, v) in entry.attributes {
        attributes.insert(k, v);
    }
    Some(FilePlan {
        netlink_source: Some(format!("netlink:{source}").into()),
        kept: Kept::default(),
        hw: true,
        source: source.into(),
        entry,
        attributes: Attributes::new(attributes),
    })
}

/// Decides, port by port, whether hw_counters/ come over netlink: the device must be
/// visible to netlink (same network namespace) and the kernel must answer for the port.
pub(crate) fn attach_netlink(
    plan: &mut Plan,
    nl: &mut RdmaNetlink,
    required: bool,
    errors: &mut Vec<PartialError>,
) {
    let devices = match nl.devices() {
        Ok(d) => d,
        Err(e) => {
            if required {
                errors.push(PartialError {
                    target: "RDMA netlink".into(),
                    message: format!("{e}; reading hw_counters/ from sysfs"),
                });
            }
            return;
        }
    };
    // One `netlink:hw_counters/<name>` per name across ports.
    let mut netlink_sources: HashMap<Arc<str>, Arc<str>> = HashMap::new();
    for p in &mut plan.ports {
        let Some(d) = devices.iter().find(|d| d.name == p.device) else {
            if required {
                errors.push(PartialError {
                    target: format!("{}/{}", p.device, p.port),
                    message: "not visible over RDMA netlink (another network namespace?); reading hw_counters/ from sysfs".into(),
                });
            }
            continue;
        };
        match nl.hw_counters(d.index, p.port, |_, _| {}) {
            Ok(_) => {
                p.netlink = Some(d.index);
                p.hw_index = p
                    .files
                    .iter()
                    .enumerate()
                    .filter(|(_, f)| f.hw)
                    .filter_map(|(i, f)| {
                        Some((f.source.strip_prefix("hw_counters/")?.to_string(), i))
                    })
                    .collect();
                for f in p.files.iter_mut().filter(|f| f.hw) {
                    let s = netlink_sources
                        .entry(Arc::clone(&f.source))
                        .or_insert_with(|| format!("netlink:{}", f.source).into());
                    f.netlink_source = Some(Arc::clone(s));
                }
            }
            Err(e) if required => errors.push(PartialError {
                target: format!("{}/{}", p.device, p.port),
                message: format!("{e}; reading hw_counters/ from sysfs"),
            }),
            Err(e) => {
                tracing::debug!(device = %p.device, port = p.port, error = %e, "hw counters not available over netlink, using sysfs")
            }
        }
    }
    let n = plan.ports.iter().filter(|p| p.netlink.is_some()).count();
    tracing::info!(
        netlink_ports = n,
        ports = plan.ports.len(),
        "hw_counters/ read over RDMA netlink where available"
    );
}
