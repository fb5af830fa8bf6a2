//! Built-in collector plugin: NIC driver statistics (`ethtool -S`) through the ethtool
//! ioctls, normalized across mlx5, ice and bnxt into per-priority PFC pause frames, pause
//! duration and transitions, per-priority bytes/packets/discards, pause-storm events and
//! physical-layer discards and errors.
//!
//! Options (`[plugins.builtin.counters-ethtool.options]`):
//! - `interfaces`: netdevs to read; default: the netdevs of the RDMA ports found under the
//!   sysfs root (the `ibdev2netdev` mapping).
//! - `raw_include`: a regex; driver statistics whose name matches it and that have no
//!   normalized metric are exported as `rdma.netdev.driver_stat{stat=NAME}`. Off by
//!   default: a NIC has hundreds of statistics, and peers' users were hurt by that many
//!   series per NIC.
//! - `stats_dir`: read `DIR/<ifname>` files in `ethtool -S` format instead of the ioctls
//!   (a simulation, as `rocewatch demo --scenario pfc-storm` writes them, or outputs
//!   recorded on a host to replay).
//!
//! Layout: `rocewatch_ethtool` reads (the ioctls, Linux only), [`normalize`] maps names, this file plans and
//! scrapes behind the [`StatsSource`] seam so recorded outputs can stand in for NICs this
//! machine does not have; [`vf`] adds the SR-IOV VFs of the netdevs that are PFs
//! (rtnetlink, live `/sys` only, behind its own seam); [`link`] adds the link's history
//! (carrier transitions, the down reason, FEC) and its transceiver module (ethtool netlink
//! on the live `/sys` only, behind the [`link::LinkSource`] seam).
//! - `module_interval_secs`: how often a port's module EEPROM is read (default 300, 10 to
//!   86400; the last reading is repeated in between).

pub mod link;
#[cfg(target_os = "linux")]
pub mod normalize;
pub mod vf;

use rocewatch_metrics::names;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rocewatch_metrics::{ATTR_DEVICE, ATTR_DIRECTION, ATTR_NETDEV, ATTR_PORT};
use rocewatch_plugin_api::*;
use rocewatch_sysfs::inventory::{read_inventory, DeviceFilter, DeviceSelection};
use rocewatch_sysfs::SysRoot;

/// Attribute naming the IEEE 802.1p priority (`0`..`7`), and that of raw passthrough
/// samples (the driver's own statistic name): the catalog's.
pub use rocewatch_metrics::{ATTR_DRIVER_STAT as ATTR_STAT, ATTR_PRIORITY};

/// Where driver statistics come from: the ioctls on a host, recorded outputs in tests.
pub trait StatsSource: Send {
    /// `Ok(None)` when the interface has no driver statistics or does not exist; an error
    /// of kind `NotFound` when it does not exist and that is known (the ioctls' ENODEV):
    /// it is then asked again only after [`ABSENT_RECHECK`].
    fn stats(&mut self, ifname: &str) -> std::io::Result<Option<Vec<(String, u64)>>>;
}

/// The ioctl source.
#[cfg(target_os = "linux")]
pub struct IoctlSource(rocewatch_ethtool::EthtoolSocket);

#[cfg(target_os = "linux")]
impl StatsSource for IoctlSource {
    fn stats(&mut self, ifname: &str) -> std::io::Result<Option<Vec<(String, u64)>>> {
        match self.0.driver_stats(ifname) {
            Ok(v) => Ok(Some(v)),
            // net/ethtool/ioctl.c: no netdev of that name, or one its driver detached
            // (`netif_device_present`).
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
                Err(std::io::Error::new(std::io::ErrorKind::NotFound, e))
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::ENXIO)) => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// Options of the plugin.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    #[serde(default)]
    pub interfaces: Vec<String>,
    #[serde(default)]
    pub raw_include: Option<String>,
    /// Device globs (shared with the sysfs plugins through `[devices]`).
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
    #[serde(default)]
    pub stats_dir: Option<std::path::PathBuf>,
    /// Seconds between two reads of a port's module EEPROM (default 300; 10 to 86400).
    #[serde(default)]
    pub module_interval_secs: Option<u64>,
}

/// How long a netdev that did not exist goes unasked for its statistics, VFs and link
/// (state, FEC, module): asking costs a failed ioctl and two failed ethtool netlink
/// requests per netdev and collection (fifteen a second at 5 Hz), for a netdev that was
/// renamed or removed, or that its driver detached while it resets and brings back in
/// seconds (hence not the minute the PCIe link files wait).
pub const ABSENT_RECHECK: Duration = Duration::from_secs(10);

/// Default seconds between module EEPROM reads.
pub const MODULE_INTERVAL_SECS: u64 = 300;
/// The `module_interval_secs` allowed: at least 10 s (a CMIS module is up to 8 page
/// reads, each milliseconds, more through firmware), at most a day.
pub const MODULE_INTERVAL_RANGE: std::ops::RangeInclusive<u64> = 10..=86_400;

impl Options {
    /// Decode and check `options`; errors name the key.
    pub fn from_json(options: &serde_json::Value) -> Result<Options, PluginError> {
        let o: Options = rocewatch_plugin_api::options::decode(options)?;
        o.raw_regex()?;
        if let Some(secs) = o.module_interval_secs {
            if !MODULE_INTERVAL_RANGE.contains(&secs) {
                return Err(PluginError::InvalidOptions(format!(
                    "module_interval_secs = {secs}: must be {} to {} seconds (a module read is an I2C transaction a page, through the NIC's firmware on some drivers: not every collection)",
                    MODULE_INTERVAL_RANGE.start(),
                    MODULE_INTERVAL_RANGE.end()
                )));
            }
        }
        DeviceFilter::new(&DeviceSelection {
            include: o.include.clone(),
            exclude: o.exclude.clone(),
        })?;
        Ok(o)
    }

    fn raw_regex(&self) -> Result<Option<regex::Regex>, PluginError> {
        self.raw_include
            .as_deref()
            .map(|r| {
                regex::Regex::new(r)
                    .map_err(|e| PluginError::InvalidOptions(format!("raw_include: {e}")))
            })
            .transpose()
    }
}

/// `ethtool -S` text files, one per interface (`DIR/<ifname>`).
pub struct FileSource(pub std::path::PathBuf);

impl StatsSource for FileSource {
    fn stats(&mut self, ifname: &str) -> std::io::Result<Option<Vec<(String, u64)>>> {
        match std::fs::read_to_string(self.0.join(ifname)) {
            Ok(text) => Ok(Some(normalize::parse_ethtool_s(&text))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

struct Target {
    ifname: String,
    base: BTreeMap<String, String>,
    /// A netdev that did not exist is asked nothing (statistics, VFs, link) before this.
    recheck_at: Option<Instant>,
    /// A netdev whose statistics answer (recorded files) but that the kernel's ethtool
    /// netlink does not have: its VFs and link are not asked before this.
    link_recheck_at: Option<Instant>,
}

/// The built-in ethtool collector.
pub struct EthtoolCounters {
    source: Option<Box<dyn StatsSource>>,
    targets: Vec<Target>,
    raw: Option<regex::Regex>,
    /// The VFs of PF netdevs: rtnetlink where the sysfs root is the live `/sys`.
    vfs: Option<(SysRoot, Box<dyn vf::VfSource>)>,
    vf_source: Option<Box<dyn vf::VfSource>>,
    /// The link history and modules, with the sysfs root for the carrier files.
    link: Option<(SysRoot, link::LinkReader)>,
    link_source: Option<Box<dyn link::LinkSource>>,
}

impl Default for EthtoolCounters {
    fn default() -> Self {
        Self::new()
    }
}

impl EthtoolCounters {
    pub const NAME: &'static str = "counters-ethtool";

    pub fn new() -> Self {
        EthtoolCounters {
            source: None,
            targets: Vec::new(),
            raw: None,
            vfs: None,
            vf_source: None,
            link: None,
            link_source: None,
        }
    }

    /// A collector reading from `source` instead of the ioctls (tests, recorded outputs).
    pub fn with_source(source: Box<dyn StatsSource>) -> Self {
        EthtoolCounters {
            source: Some(source),
            targets: Vec::new(),
            raw: None,
            vfs: None,
            vf_source: None,
            link: None,
            link_source: None,
        }
    }

    /// Read the link state, FEC and modules from `source` instead of the kernel, whatever
    /// the sysfs root (tests: replies built as the kernel lays them out).
    pub fn with_link_source(mut self, source: Box<dyn link::LinkSource>) -> Self {
        self.link_source = Some(source);
        self
    }

    /// Read the VFs of PF netdevs from `source` instead of rtnetlink, whatever the sysfs
    /// root (tests: replies built as the kernel lays them out).
    pub fn with_vf_source(mut self, source: Box<dyn vf::VfSource>) -> Self {
        self.vf_source = Some(source);
        self
    }
}

/// Turn one interface's statistics into samples.
pub fn samples_of(
    stats: &[(String, u64)],
    base: &BTreeMap<String, String>,
    raw: Option<&regex::Regex>,
) -> Vec<Sample> {
    let mut out = Vec::new();
    for (name, value) in stats {
        let (metric, attrs) = match normalize::normalize(name) {
            Some(n) => {
                let mut a = base.clone();
                if let Some(p) = n.priority {
                    a.insert(ATTR_PRIORITY.into(), p.to_string());
                }
                if let Some(d) = n.direction {
                    a.insert(ATTR_DIRECTION.into(), d.into());
                }
                if let Some((k, v)) = n.extra {
                    a.insert(k.into(), v.into());
                }
                (n.metric, a)
            }
            None if raw.is_some_and(|r| r.is_match(name)) => {
                let mut a = base.clone();
                a.insert(ATTR_STAT.into(), name.clone());
                (names::NETDEV_DRIVER_STAT, a)
            }
            None => continue,
        };
        let e =
            rocewatch_metrics::ethtool_entry(metric).expect("normalized metrics are catalogued");
        out.push(Sample {
            name: metric.into(),
            unit: e.unit.into(),
            value: Value::U64(*value),
            attributes: Attributes::new(attrs.into()),
            source: format!("ethtool:{name}").into(),
            kind: e.kind,
        });
    }
    out
}

impl Plugin for EthtoolCounters {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn start(&mut self, ctx: &PluginContext) -> Result<(), PluginError> {
        let opts = Options::from_json(&ctx.options)?;
        self.raw = opts.raw_regex()?;
        self.targets.clear();
        if opts.interfaces.is_empty() {
            let filter = DeviceFilter::new(&DeviceSelection {
                include: opts.include.clone(),
                exclude: opts.exclude.clone(),
            })?;
            let root = SysRoot::new(&ctx.sysfs_root);
            if root.ib_class().is_dir() {
                let (inv, _) = read_inventory(&root, &filter)?;
                for d in &inv.devices {
                    for p in &d.ports {
                        let Some(nd) = &p.netdev else { continue };
                        if self.targets.iter().any(|t| &t.ifname == nd) {
                            continue;
                        }
                        let mut base = BTreeMap::new();
                        base.insert(ATTR_NETDEV.to_string(), nd.clone());
                        base.insert(ATTR_DEVICE.to_string(), d.name.clone());
                        base.insert(ATTR_PORT.to_string(), p.port.to_string());
                        self.targets.push(Target {
                            ifname: nd.clone(),
                            base,
                            recheck_at: None,
                            link_recheck_at: None,
                        });
                    }
                }
            }
        } else {
            for i in opts.interfaces {
                let mut base = BTreeMap::new();
                base.insert(ATTR_NETDEV.to_string(), i.clone());
                self.targets.push(Target {
                    ifname: i,
                    base,
                    recheck_at: None,
                    link_recheck_at: None,
                });
            }
        }
        let root = SysRoot::new(&ctx.sysfs_root);
        self.vfs = match self.vf_source.take() {
            Some(s) => Some((root, s)),
            None if rocewatch_sysfs::read::is_sysfs(&ctx.sysfs_root) => {
                Some((root, Box::new(vf::NetlinkVfSource::default())))
            }
            None => None,
        };
        let link_source: Box<dyn link::LinkSource> = match self.link_source.take() {
            Some(s) => s,
            None if rocewatch_sysfs::read::is_sysfs(&ctx.sysfs_root) => {
                Box::new(link::KernelLinkSource::default())
            }
            None => Box::new(link::NoLinkSource),
        };
        let every = opts.module_interval_secs.unwrap_or(MODULE_INTERVAL_SECS);
        self.link = Some((
            SysRoot::new(&ctx.sysfs_root),
            link::LinkReader::new(link_source, std::time::Duration::from_secs(every)),
        ));
        if let Some(dir) = &opts.stats_dir {
            self.source = Some(Box::new(FileSource(dir.clone())));
        }
        if self.source.is_none() {
            #[cfg(target_os = "linux")]
            {
                let s = rocewatch_ethtool::EthtoolSocket::open()
                    .map_err(|e| PluginError::failed(format!("ethtool socket: {e}")))?;
                self.source = Some(Box::new(IoctlSource(s)));
            }
            #[cfg(not(target_os = "linux"))]
            return Err(PluginError::Unsupported(
                "ethtool statistics are Linux-only".into(),
            ));
        }
        Ok(())
    }
}

impl CollectorPlugin for EthtoolCounters {
    fn descriptors(&self) -> Vec<MetricDescriptor> {
        let mut d = rocewatch_metrics::ethtool_descriptors();
        d.extend(rocewatch_metrics::vf_descriptors());
        d.extend(rocewatch_metrics::link_health_descriptors());
        d
    }

    fn collect(&mut self) -> Result<ScrapeResult, PluginError> {
        let source = self
            .source
            .as_mut()
            .ok_or_else(|| PluginError::failed("collect called before start"))?;
        if self.targets.is_empty() {
            return Err(PluginError::Unsupported(
                "no netdevs to read (no RDMA port has a netdev; set options.interfaces)".into(),
            ));
        }
        let mut out = ScrapeResult::default();
        let mut present = 0;
        let now = Instant::now();
        for t in &mut self.targets {
            if t.recheck_at.is_some_and(|at| now < at) {
                continue;
            }
            t.recheck_at = None;
            let has_stats = match source.stats(&t.ifname) {
                Ok(Some(stats)) => {
                    present += 1;
                    out.samples
                        .extend(samples_of(&stats, &t.base, self.raw.as_ref()));
                    true
                }
                Ok(None) => false,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    t.recheck_at = Some(now + ABSENT_RECHECK);
                    continue;
                }
                Err(e) => {
                    out.errors.push(PartialError {
                        target: format!("ethtool -S {}", t.ifname),
                        message: e.to_string(),
                    });
                    false
                }
            };
            if t.link_recheck_at.is_some_and(|at| now < at) {
                continue;
            }
            t.link_recheck_at = None;
            if let Some((sys, reader)) = self.link.as_mut() {
                if reader.collect(sys, &t.ifname, &t.base, &mut out) == link::Presence::NoDevice {
                    // Statistics that answered come from elsewhere (files): they go on.
                    let at = if has_stats {
                        &mut t.link_recheck_at
                    } else {
                        &mut t.recheck_at
                    };
                    *at = Some(now + ABSENT_RECHECK);
                    continue;
                }
            }
            if let Some((sys, vfs)) = self.vfs.as_mut() {
                vf::collect(sys, vfs.as_mut(), &t.ifname, &t.base, &mut out);
            }
        }
        if present == 0 && out.errors.is_empty() {
            let names: Vec<&str> = self.targets.iter().map(|t| t.ifname.as_str()).collect();
            return Err(PluginError::Unsupported(format!(
                "none of the netdevs {} exists here or has driver statistics",
                names.join(", ")
            )));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// `eth0` always there; `gone0` only once `back` is set; every call counted.
    struct Counted {
        calls: Calls,
        back: Arc<Mutex<bool>>,
    }

    impl StatsSource for Counted {
        fn stats(&mut self, ifname: &str) -> std::io::Result<Option<Vec<(String, u64)>>> {
            *self.calls.lock().unwrap().entry(ifname.into()).or_default() += 1;
            if ifname == "eth0" || *self.back.lock().unwrap() {
                return Ok(Some(vec![("rx_prio3_pause".into(), 7)]));
            }
            Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{ifname}: no such device"),
            ))
        }
    }

    fn read(c: &mut EthtoolCounters, ifname: &str) -> bool {
        let r = c.collect().unwrap();
        assert!(
            r.errors.is_empty(),
            "absent is not an error: {:?}",
            r.errors
        );
        r.samples
            .iter()
            .any(|s| s.attributes.get(ATTR_NETDEV) == Some(ifname))
    }

    type Calls = Arc<Mutex<BTreeMap<String, usize>>>;

    /// A started collector of `interfaces`: statistics from [`Counted`], the link from
    /// [`KernelLink`] where `link_back` is given, every request counted in `calls`.
    fn collector(
        calls: &Calls,
        stats_back: &Arc<Mutex<bool>>,
        link_back: Option<&Arc<Mutex<bool>>>,
        interfaces: &[&str],
    ) -> EthtoolCounters {
        let mut c = EthtoolCounters::with_source(Box::new(Counted {
            calls: Arc::clone(calls),
            back: Arc::clone(stats_back),
        }));
        if let Some(back) = link_back {
            c = c.with_link_source(Box::new(KernelLink {
                calls: Arc::clone(calls),
                back: Arc::clone(back),
            }));
        }
        let mut ctx = PluginContext::new("/nonexistent");
        ctx.options = serde_json::json!({ "interfaces": interfaces });
        c.start(&ctx).unwrap();
        c
    }

    fn count(calls: &Calls, name: &str) -> usize {
        calls.lock().unwrap().get(name).copied().unwrap_or(0)
    }

    /// A netdev that does not exist (the ioctls' ENODEV) is not asked on every
    /// collection, but is again after the recheck time, and read once it is back.
    #[test]
    fn absent_netdevs_are_asked_again_only_after_a_while() {
        let calls = Calls::default();
        let back = Arc::new(Mutex::new(false));
        let mut c = collector(&calls, &back, None, &["eth0", "gone0"]);
        let count = |n: &str| count(&calls, n);
        for _ in 0..5 {
            assert!(read(&mut c, "eth0"));
            assert!(!read(&mut c, "gone0"));
        }
        assert_eq!(count("eth0"), 10);
        assert_eq!(count("gone0"), 1, "an absent netdev asked every collection");
        let wait = c.targets[1]
            .recheck_at
            .expect("absent: a recheck set")
            .saturating_duration_since(Instant::now());
        assert!(
            wait > ABSENT_RECHECK / 2 && wait <= ABSENT_RECHECK,
            "{wait:?}"
        );
        // It comes back: read at the recheck, and every collection after.
        *back.lock().unwrap() = true;
        assert!(!read(&mut c, "gone0"), "asked before the recheck");
        c.targets[1].recheck_at = Some(Instant::now());
        assert!(read(&mut c, "gone0"), "not read again once it is time");
        assert!(c.targets[1].recheck_at.is_none());
        assert!(read(&mut c, "gone0"));
        assert_eq!(count("gone0"), 3);
    }

    /// As the kernel's ethtool netlink answers for `gone0` until `back` is set
    /// (`ENODEV`: `EthtoolError::NoDevice`), and for `eth0` (no down reason, no FEC);
    /// every request counted.
    struct KernelLink {
        calls: Calls,
        back: Arc<Mutex<bool>>,
    }

    impl KernelLink {
        fn answer<T>(&mut self, what: &str, ifname: &str) -> link::Answer<T> {
            *self
                .calls
                .lock()
                .unwrap()
                .entry(format!("{what} {ifname}"))
                .or_default() += 1;
            if ifname == "eth0" || *self.back.lock().unwrap() {
                return Ok(None);
            }
            Err(link::LinkError::NoDevice(ifname.into()))
        }
    }

    impl link::LinkSource for KernelLink {
        fn link_state(
            &mut self,
            ifname: &str,
        ) -> link::Answer<rocewatch_netlink::ethtool::LinkState> {
            self.answer("link_state", ifname)
        }
        fn fec(&mut self, ifname: &str) -> link::Answer<rocewatch_netlink::ethtool::Fec> {
            self.answer("fec", ifname)
        }
        fn module(
            &mut self,
            ifname: &str,
        ) -> link::Answer<(rocewatch_optics::Eeprom, Vec<String>)> {
            self.answer("module", ifname)
        }
    }

    /// While a netdev is absent nothing of it is asked: not its statistics, not its link
    /// state, FEC or module (ethtool netlink answers ENODEV too, which is no error); a
    /// netdev that comes back is read again at the recheck, its link too.
    #[test]
    fn an_absent_netdev_costs_no_request_until_the_recheck() {
        let calls = Calls::default();
        let back = Arc::new(Mutex::new(false));
        let mut c = collector(&calls, &back, Some(&back), &["eth0", "gone0"]);
        let count = |n: &str| count(&calls, n);
        for _ in 0..5 {
            assert!(read(&mut c, "eth0"));
            assert!(!read(&mut c, "gone0"));
        }
        assert_eq!((count("eth0"), count("link_state eth0")), (10, 10));
        assert_eq!(count("gone0"), 1);
        assert_eq!(
            (
                count("link_state gone0"),
                count("fec gone0"),
                count("module gone0")
            ),
            (0, 0, 0),
            "an absent netdev's link asked: {:?}",
            calls.lock().unwrap()
        );
        *back.lock().unwrap() = true;
        c.targets[1].recheck_at = Some(Instant::now());
        assert!(read(&mut c, "gone0"));
        assert_eq!(
            (
                count("gone0"),
                count("link_state gone0"),
                count("fec gone0")
            ),
            (2, 1, 1)
        );
    }

    /// Statistics that answer (recorded files) for a netdev the kernel does not have:
    /// still read every collection, while its link is asked only at the recheck.
    #[test]
    fn statistics_from_elsewhere_are_read_while_the_kernel_has_no_such_netdev() {
        let calls = Calls::default();
        let (files, kernel) = (Arc::new(Mutex::new(true)), Arc::new(Mutex::new(false)));
        let mut c = collector(&calls, &files, Some(&kernel), &["gone0"]);
        let count = |n: &str| count(&calls, n);
        for _ in 0..5 {
            assert!(read(&mut c, "gone0"));
        }
        assert_eq!(count("gone0"), 5);
        assert_eq!((count("link_state gone0"), count("fec gone0")), (1, 0));
        c.targets[0].link_recheck_at = Some(Instant::now());
        assert!(read(&mut c, "gone0"));
        assert_eq!((count("gone0"), count("link_state gone0")), (6, 2));
    }
}
