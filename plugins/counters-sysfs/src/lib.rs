//! Built-in collector plugin: `counters/`, `counters_ext/` and `hw_counters/` of every
//! RDMA port, plus port state, rate, netdev MTU and the PCIe link of the device's PCI
//! function (`pcie.rs`) and the module serving the device (`driver.rs`), named by the
//! metric catalog.
//!
//! The list of files to read (the "plan") is built once and rebuilt only when the set of
//! devices changes or a device vanishes; a scrape is then one `open+read` per file.
//!
//! Quirks handled at parse time (see ROCE-NOTES and `rocewatch-sysfs`):
//! - data counters count 4-octet words: the catalog's `scale` converts them to bytes;
//! - `N/A (no PMA)`, EINVAL, EACCES, EOPNOTSUPP and missing files are absent (no sample),
//!   never zero;
//! - `hw_counters/lifespan` is a setting, not a counter;
//! - when `counters_ext/` has the 64-bit twin of a `counters/` file, only the 64-bit one
//!   is read (one series, not two);
//! - a device vanishing mid-scrape yields no samples for it and a plan rebuild, not errors.
//!
//! `hw_counters/` has a second source: RDMA netlink (`RDMA_NLDEV_CMD_STAT_GET`, what
//! `rdma statistic show` prints), one request per port instead of one file per counter.
//! Option `hw_counters_source`: `auto` (default: netlink when the sysfs root is the live
//! `/sys` and the kernel answers for the port, else sysfs), `netlink` (required: a port it
//! cannot serve is reported, and read from sysfs that time), or `sysfs`. Netlink samples
//! carry `source = "netlink:hw_counters/<name>"`; names, units and values are the same.

use rocewatch_metrics::names;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use rocewatch_metrics::{self as catalog, CatalogEntry};
use rocewatch_netlink::rdma::RdmaNetlink;
use rocewatch_plugin_api::*;
use rocewatch_sysfs::inventory::{rdma_root, DeviceFilter, DeviceSelection};
use rocewatch_sysfs::{parse, read, SysRoot};

mod budget;
mod driver;
mod pcie;
mod plan;
use budget::{Budget, Clock, Slow};
use plan::{attach_netlink, build_plan, hw_file_plan, Plan, PortPlan};

/// Whether counter files stay open between collections: one `pread` per counter instead
/// of open, read, read, close. Only sysfs regenerates a file's text on every read of an
/// open descriptor; a regular file replaced by a rename (a test tree updated atomically)
/// would be read stale, hence `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeepOpen {
    /// Keep them open when the tree is on sysfs.
    #[default]
    Auto,
    Always,
    Never,
}

/// How many files may stay open: a quarter of the descriptor limit left after 256 for
/// everything else (sockets, plugins), so a host with hundreds of ports never runs the
/// agent out of descriptors; files beyond it are opened per read.
fn open_file_budget() -> usize {
    // SAFETY: an all-zero rlimit is a valid out-buffer.
    let mut rl: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: rl is valid for the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return 0;
    }
    (rl.rlim_cur as usize).saturating_sub(256) * 3 / 4
}

/// Where a port's hw_counters/ are read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HwCountersSource {
    #[default]
    Auto,
    Netlink,
    Sysfs,
}

/// Options of the plugin (`[plugins.builtin.counters-sysfs.options]`), decoded strictly:
/// a misspelt key is refused with its name.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    /// Device globs (`[devices]`, shared by the plugins).
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
    /// `auto` (netlink on the live /sys), `netlink` (required) or `sysfs`.
    #[serde(default)]
    pub hw_counters_source: HwCountersSource,
    /// `auto` (on sysfs), `always` or `never`.
    #[serde(default)]
    pub keep_files_open: KeepOpen,
    /// How long one device may take before the others are read first (`"1s"`).
    #[serde(default, deserialize_with = "budget::de_device_timeout")]
    pub device_timeout: Option<std::time::Duration>,
}

impl Options {
    /// Decode and check `options`; errors name the key.
    pub fn from_json(options: &serde_json::Value) -> Result<Options, PluginError> {
        let o: Options = rocewatch_plugin_api::options::decode(options)?;
        DeviceFilter::new(&DeviceSelection {
            include: o.include.clone(),
            exclude: o.exclude.clone(),
        })?;
        Ok(o)
    }
}

/// The catalog entries of the per-port gauges, looked up once.
struct Gauges {
    up: &'static CatalogEntry,
    rate: &'static CatalogEntry,
    mtu: &'static CatalogEntry,
}

fn gauges() -> &'static Gauges {
    static G: std::sync::OnceLock<Gauges> = std::sync::OnceLock::new();
    G.get_or_init(|| {
        let get = |n| catalog::by_name(n).expect("gauge in the catalog");
        Gauges {
            up: get(names::PORT_UP),
            rate: get(names::PORT_RATE),
            mtu: get(names::NETDEV_MTU),
        }
    })
}

/// The sources of the port's `state` and `rate` gauges, one `Arc` each for every sample.
fn port_sources() -> &'static (Arc<str>, Arc<str>) {
    static SOURCES: std::sync::OnceLock<(Arc<str>, Arc<str>)> = std::sync::OnceLock::new();
    SOURCES.get_or_init(|| ("state".into(), "rate".into()))
}

fn gauge(e: &'static CatalogEntry, value: Value, attrs: &Attributes, source: Arc<str>) -> Sample {
    Sample {
        name: e.name.into(),
        unit: e.unit.into(),
        value,
        attributes: attrs.clone(),
        source,
        kind: e.kind,
    }
}

/// The devices of `order` (indexes into the plan's ports), each once, in order.
fn unreached<'p>(plan: &'p Plan, order: &[usize]) -> Vec<&'p str> {
    let mut left: Vec<&str> = order
        .iter()
        .map(|&i| plan.ports[i].device.as_str())
        .collect();
    left.dedup();
    left
}

/// The built-in counter collector.
#[derive(Debug, Default)]
pub struct SysfsCounters {
    root: Option<SysRoot>,
    filter: DeviceFilter,
    plan: Option<Plan>,
    hw_source: HwCountersSource,
    netlink: Option<RdmaNetlink>,
    /// Files kept open, at most this many (0: none).
    keep_open: usize,
    budget: Budget,
    /// Devices cut short by their deadline in the last collection (and slow ones the
    /// budget did not reach since).
    slow: Slow,
    /// The first device the last collection's budget did not reach: the next one starts
    /// there, so a host always over budget still has every device read in turn.
    resume: Option<String>,
}

/// How reading a port ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PortEnd {
    Read,
    /// The port's directory is gone: re-plan.
    Vanished,
    /// The deadline came after `read` of its `total` files.
    Stopped {
        read: usize,
        total: usize,
    },
}

#[cfg(test)]
thread_local! {
    /// A test's slow driver: reading each counter file of this device (of every device
    /// when the name is empty) takes this long.
    static SLOW_DRIVER: std::cell::RefCell<Option<(String, std::time::Duration)>> =
        const { std::cell::RefCell::new(None) };
}

impl SysfsCounters {
    pub const NAME: &'static str = "counters-sysfs";

    pub fn new() -> Self {
        Self::default()
    }

    /// Reads a netlink port's hw counters into `out`; false when the request failed (the
    /// caller then reads the files).
    fn scrape_netlink(nl: &mut RdmaNetlink, p: &mut PortPlan, out: &mut ScrapeResult) -> bool {
        let Some(index) = p.netlink else {
            return false;
        };
        let mut unknown: Vec<(String, u64)> = Vec::new();
        let samples = &mut out.samples;
        let r = nl.hw_counters(index, p.port, |name, raw| match p.hw_index.get(name) {
            Some(&i) => {
                let f = &p.files[i];
                samples.push(Sample {
                    name: f.entry.name.into(),
                    unit: f.entry.unit.into(),
                    value: Value::U64(raw.saturating_mul(f.entry.scale)),
                    attributes: f.attributes.clone(),
                    source: f.netlink_source(),
                    kind: f.entry.kind,
                });
            }
            None => unknown.push((name.to_string(), raw)),
        });
        if let Err(e) = r {
            out.errors.push(PartialError {
                target: format!("{}/{} over RDMA netlink", p.device, p.port),
                message: format!("{e}; read from sysfs this time"),
            });
            return false;
        }
        for (name, raw) in unknown {
            let Some(f) = hw_file_plan(&p.base, &name) else {
                continue;
            };
            out.samples.push(Sample {
                name: f.entry.name.into(),
                unit: f.entry.unit.into(),
                value: Value::U64(raw.saturating_mul(f.entry.scale)),
                attributes: f.attributes.clone(),
                source: f.netlink_source(),
                kind: f.entry.kind,
            });
            p.hw_index.insert(name, p.files.len());
            p.files.push(f);
        }
        true
    }

    fn scrape_port(
        p: &mut PortPlan,
        hw_over_netlink: bool,
        open: (&mut usize, usize),
        deadline: Instant,
        out: &mut ScrapeResult,
    ) -> PortEnd {
        let (open_files, max_open) = open;
        if Instant::now() >= deadline {
            let total = p.files.len() + 3;
            return PortEnd::Stopped { read: 0, total };
        }
        let enum_is = |want: &'static str| move |t: &str| parse::parse_enum(t).1 == want;
        let active = p.state.read(open_files, max_open, enum_is("ACTIVE"));
        let link_up = p.phys_state.read(open_files, max_open, enum_is("LinkUp"));
        match (active, link_up) {
            (Ok(Some(a)), Ok(Some(l))) => {
                let up = Value::U64((a && l) as u64);
                out.samples
                    .push(gauge(gauges().up, up, &p.base, port_sources().0.clone()));
            }
            (Ok(None), _) if !p.port_dir.exists() => return PortEnd::Vanished,
            _ => {}
        }
        if let Ok(Some(Some(bps))) = p.rate.read(open_files, max_open, parse::parse_rate_bps) {
            out.samples.push(gauge(
                gauges().rate,
                Value::U64(bps),
                &p.base,
                port_sources().1.clone(),
            ));
        }
        if let Some((mtu, source)) = &mut p.mtu {
            if let Ok(Some(Ok(v))) = mtu.read(open_files, max_open, |t| t.parse::<u64>()) {
                out.samples
                    .push(gauge(gauges().mtu, Value::U64(v), &p.base, source.clone()));
            }
        }
        let total = p.files.len() + 3;
        // One path buffer for the port's files, refilled per file.
        let mut path = PathBuf::with_capacity(p.port_dir.as_os_str().len() + 64);
        for (i, f) in p.files.iter_mut().enumerate() {
            if hw_over_netlink && f.hw {
                continue;
            }
            if Instant::now() >= deadline {
                return PortEnd::Stopped { read: i + 3, total };
            }
            #[cfg(test)]
            SLOW_DRIVER.with_borrow(|slow| match slow {
                Some((dev, d)) if dev.is_empty() || *dev == p.device => std::thread::sleep(*d),
                _ => {}
            });
            // Parse in place: the text is only copied out when it is garbage to report.
            path.as_mut_os_string().clear();
            path.push(&p.port_dir);
            path.push(&*f.source);
            let read = f.kept.read(
                &path,
                open_files,
                max_open,
                |text| match parse::parse_counter(text) {
                    parse::CounterText::Value(raw) => Ok(Some(raw)),
                    parse::CounterText::Absent => Ok(None),
                    parse::CounterText::Garbage => Err(text.to_string()),
                },
            );
            match read {
                Ok(Some(Ok(Some(raw)))) => match raw.checked_mul(f.entry.scale) {
                    Some(v) => out.samples.push(Sample {
                        name: f.entry.name.into(),
                        unit: f.entry.unit.into(),
                        value: Value::U64(v),
                        attributes: f.attributes.clone(),
                        source: f.source.clone(),
                        kind: f.entry.kind,
                    }),
                    // A saturated value would look like a real one that stopped moving.
                    None => out.errors.push(PartialError {
                        target: path.display().to_string(),
                        message: format!(
                            "{raw} does not fit in 64 bits once converted (×{})",
                            f.entry.scale
                        ),
                    }),
                },
                Ok(Some(Ok(None))) => {}
                Ok(Some(Err(text))) => out.errors.push(PartialError {
                    target: path.display().to_string(),
                    message: format!("not a counter value: {text:?}"),
                }),
                Ok(None) => {
                    if !p.port_dir.exists() {
                        return PortEnd::Vanished;
                    }
                }
                Err(e) => out.errors.push(PartialError {
                    target: path.display().to_string(),
                    message: e.cause(),
                }),
            }
        }
        PortEnd::Read
    }
}

impl Plugin for SysfsCounters {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn start(&mut self, ctx: &PluginContext) -> Result<(), PluginError> {
        let opts = Options::from_json(&ctx.options)?;
        self.filter = DeviceFilter::new(&DeviceSelection {
            include: opts.include,
            exclude: opts.exclude,
        })?;
        self.hw_source = opts.hw_counters_source;
        self.keep_open = match opts.keep_files_open {
            KeepOpen::Never => 0,
            KeepOpen::Always => open_file_budget(),
            KeepOpen::Auto if read::is_sysfs(&ctx.sysfs_root) => open_file_budget(),
            KeepOpen::Auto => 0,
        };
        self.budget = Budget::new(ctx, opts.device_timeout);
        self.slow.clear();
        self.resume = None;
        self.root = Some(SysRoot::new(&ctx.sysfs_root));
        self.plan = None;
        self.netlink = None;
        if self.hw_source == HwCountersSource::Sysfs {
            return Ok(());
        }
        // Netlink tells about the live kernel: it only stands in for the live /sys.
        let live = std::fs::canonicalize(&ctx.sysfs_root).is_ok_and(|p| p == Path::new("/sys"));
        let required = self.hw_source == HwCountersSource::Netlink;
        if !live {
            if required {
                return Err(PluginError::InvalidOptions(format!(
                    "hw_counters_source = \"netlink\" reads the live kernel, but the sysfs root is {}; use \"auto\" or \"sysfs\" with another tree",
                    ctx.sysfs_root.display()
                )));
            }
            return Ok(());
        }
        match RdmaNetlink::open() {
            Ok(mut nl) => {
                if let Some(dir) = std::env::var_os("ROCEWATCH_NETLINK_CAPTURE") {
                    nl.capture_to(PathBuf::from(dir));
                }
                self.netlink = Some(nl);
            }
            Err(e) if required => {
                return Err(PluginError::Unsupported(format!(
                    "hw_counters_source = \"netlink\": {e}"
                )))
            }
            Err(e) => {
                tracing::debug!(error = %e, "RDMA netlink unavailable, hw_counters/ from sysfs")
            }
        }
        Ok(())
    }

    fn stop(&mut self) {
        self.root = None;
        self.plan = None;
        self.netlink = None;
    }
}

impl CollectorPlugin for SysfsCounters {
    fn descriptors(&self) -> Vec<MetricDescriptor> {
        let mut d = catalog::descriptors();
        d.extend(catalog::pcie_descriptors());
        d.extend(catalog::driver_descriptors());
        d
    }

    fn collect(&mut self) -> Result<ScrapeResult, PluginError> {
        let started = Instant::now();
        let root = rdma_root(self.root.as_ref(), "collect")?;
        let devices = root
            .devices()
            .map_err(|e| PluginError::Failed(e.to_string()))?;
        let mut out = ScrapeResult::default();
        if self.plan.as_ref().is_none_or(|p| p.devices != devices) {
            let (mut plan, mut errors) = build_plan(root, &self.filter, devices);
            if let Some(nl) = self.netlink.as_mut() {
                let required = self.hw_source == HwCountersSource::Netlink;
                attach_netlink(&mut plan, nl, required, &mut errors);
            }
            out.errors.extend(errors);
            self.plan = Some(plan);
        }
        let plan = self.plan.as_mut().expect("plan built above");
        out.samples
            .reserve(plan.ports.iter().map(|p| p.files.len() + 3).sum());
        let mut stale = false;
        // Devices cut short last time go last; ports of a device stay together.
        let n = plan.ports.len();
        let is_slow = |i: &usize| self.slow.contains(&plan.ports[*i].device);
        let mut first: Vec<usize> = (0..n).filter(|i| !is_slow(i)).collect();
        if let Some(dev) = &self.resume {
            if let Some(at) = first.iter().position(|&i| plan.ports[i].device == *dev) {
                first.rotate_left(at);
            }
        }
        let order: Vec<usize> = first.into_iter().chain((0..n).filter(is_slow)).collect();
        let mut stopped_at: Option<Vec<&str>> = None;
        let mut clock = Clock::start(&self.budget, started);
        let mut slow = Slow::new();
        let (mut devices_done, mut ports_done) = (0, 0);
        // The device being read ran out of its own time: its other ports are skipped.
        let mut cut = false;
        for (k, &i) in order.iter().enumerate() {
            let new_device = k == 0 || plan.ports[order[k - 1]].device != plan.ports[i].device;
            if new_device {
                if clock.spent() {
                    let left = unreached(plan, &order[k..]);
                    out.errors
                        .push(clock.stopped(devices_done, ports_done, &left, n));
                    stopped_at = Some(left);
                    break;
                }
                devices_done += 1;
                cut = false;
                clock.device_starts();
            }
            if cut {
                continue;
            }
            let port = &mut plan.ports[i];
            let over_netlink = match self.netlink.as_mut() {
                Some(nl) => Self::scrape_netlink(nl, port, &mut out),
                None => false,
            };
            let open = (&mut plan.open_files, self.keep_open);
            match Self::scrape_port(port, over_netlink, open, clock.device_deadline(), &mut out) {
                PortEnd::Read => {
                    ports_done += 1;
                    pcie::scrape_pcie(plan, i, self.keep_open, &mut out);
                    if let Some(a) = &plan.ports[i].driver {
                        out.samples.push(driver::driver_sample(a));
                    }
                }
                PortEnd::Vanished => stale = true,
                PortEnd::Stopped { read, total } if clock.device_deadline_is_its_own() => {
                    let target = format!("{} port {}", port.device, port.port);
                    out.errors.push(clock.device_stopped(&target, read, total));
                    slow.insert(port.device.clone());
                    cut = true;
                }
                PortEnd::Stopped { .. } => {
                    // The budget ran out inside this device: it counts as not read.
                    let left = unreached(plan, &order[k..]);
                    out.errors
                        .push(clock.stopped(devices_done - 1, ports_done, &left, n));
                    stopped_at = Some(left);
                    break;
                }
            }
        }
        // Where the next collection starts, and the slow devices it did not reach.
        self.resume = None;
        if let Some(left) = stopped_at {
            self.resume = left.first().map(|d| d.to_string());
            for d in left.iter().filter(|d| self.slow.contains(**d)) {
                slow.insert(d.to_string());
            }
        }
        self.slow = slow;
        if stale {
            self.plan = None; // a device vanished: re-plan on the next scrape
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocewatch_metrics::{ATTR_COUNTER, ATTR_DEVICE};
    use std::fs;

    fn port(root: &std::path::Path, dev: &str) -> PathBuf {
        let p = root.join("class/infiniband").join(dev).join("ports/1");
        fs::create_dir_all(p.join("counters")).unwrap();
        fs::create_dir_all(p.join("hw_counters")).unwrap();
        fs::write(p.join("state"), "4: ACTIVE\n").unwrap();
        fs::write(p.join("phys_state"), "5: LinkUp\n").unwrap();
        fs::write(p.join("rate"), "100 Gb/sec (4X EDR)\n").unwrap();
        p
    }

    fn collect(root: &std::path::Path) -> ScrapeResult {
        let mut c = SysfsCounters::new();
        c.start(&PluginContext::new(root)).unwrap();
        c.collect().unwrap()
    }

    fn value(r: &ScrapeResult, source: &str) -> Option<Value> {
        r.samples
            .iter()
            .find(|s| &*s.source == source)
            .map(|s| s.value)
    }

    #[test]
    fn data_words_become_bytes_and_no_pma_is_absent() {
        let dir = tempfile::tempdir().unwrap();
        let p = port(dir.path(), "mlx5_0");
        fs::write(p.join("counters/port_xmit_data"), "1000\n").unwrap();
        fs::write(p.join("counters/port_rcv_data"), "N/A (no PMA)\n").unwrap();
        fs::write(p.join("counters/symbol_error"), "0\n").unwrap();
        fs::write(p.join("hw_counters/lifespan"), "10\n").unwrap();
        fs::write(p.join("hw_counters/vendor_thing"), "7\n").unwrap();
        let r = collect(dir.path());
        assert_eq!(value(&r, "counters/port_xmit_data"), Some(Value::U64(4000)));
        assert_eq!(
            value(&r, "counters/port_rcv_data"),
            None,
            "N/A must be absent, not zero"
        );
        assert_eq!(value(&r, "counters/symbol_error"), Some(Value::U64(0)));
        assert_eq!(
            value(&r, "hw_counters/lifespan"),
            None,
            "lifespan is a setting"
        );
        let unknown = r
            .samples
            .iter()
            .find(|s| &*s.source == "hw_counters/vendor_thing")
            .unwrap();
        assert_eq!(unknown.name, "rdma.port.hw_counter");
        assert_eq!(&unknown.attributes[ATTR_COUNTER], "vendor_thing");
        assert_eq!(value(&r, "state"), Some(Value::U64(1)));
        assert_eq!(value(&r, "rate"), Some(Value::U64(100_000_000_000)));
        assert!(r.errors.is_empty(), "{:?}", r.errors);
    }

    #[test]
    fn bnxt_re_names_old_and_new_map_to_the_same_metrics() {
        let dir = tempfile::tempdir().unwrap();
        let old = port(dir.path(), "bnxt_re0");
        std::fs::write(old.join("hw_counters/tx_cnp_pkts"), "11\n").unwrap();
        std::fs::write(old.join("hw_counters/rx_ecn_marked_pkts"), "12\n").unwrap();
        let new = port(dir.path(), "bnxt_re1");
        std::fs::write(new.join("hw_counters/np_cnp_pkts"), "21\n").unwrap();
        std::fs::write(new.join("hw_counters/np_ecn_marked_roce_packets"), "22\n").unwrap();
        let r = collect(dir.path());
        let get = |dev: &str, name: &str| {
            r.samples
                .iter()
                .find(|s| s.name == name && &s.attributes[ATTR_DEVICE] == dev)
                .map(|s| s.value)
        };
        assert_eq!(get("bnxt_re0", "rdma.port.cnp.sent"), Some(Value::U64(11)));
        assert_eq!(get("bnxt_re1", "rdma.port.cnp.sent"), Some(Value::U64(21)));
        assert_eq!(
            get("bnxt_re0", "rdma.port.ecn_marked_packets"),
            Some(Value::U64(12))
        );
        assert_eq!(
            get("bnxt_re1", "rdma.port.ecn_marked_packets"),
            Some(Value::U64(22))
        );
    }

    #[test]
    fn efa_traffic_from_hw_counters_and_counters_win_when_both_exist() {
        let dir = tempfile::tempdir().unwrap();
        let efa = port(dir.path(), "rdmap16s27");
        std::fs::write(efa.join("hw_counters/tx_bytes"), "1000\n").unwrap();
        std::fs::write(efa.join("hw_counters/retrans_timeout_events"), "3\n").unwrap();
        let both = port(dir.path(), "bnxt_re0");
        std::fs::write(both.join("counters/port_xmit_data"), "10\n").unwrap();
        std::fs::write(both.join("hw_counters/tx_bytes"), "999\n").unwrap();
        let r = collect(dir.path());
        let io = |dev: &str| -> Vec<(&str, Value)> {
            r.samples
                .iter()
                .filter(|s| s.name == "rdma.port.io" && &s.attributes[ATTR_DEVICE] == dev)
                .map(|s| (&*s.source, s.value))
                .collect()
        };
        assert_eq!(
            io("rdmap16s27"),
            vec![("hw_counters/tx_bytes", Value::U64(1000))],
            "bytes, not words"
        );
        assert_eq!(
            io("bnxt_re0"),
            vec![("counters/port_xmit_data", Value::U64(40))],
            "one series per direction"
        );
        assert!(r
            .samples
            .iter()
            .any(|s| s.name == "rdma.port.retransmissions.timeouts" && s.value == Value::U64(3)));
    }

    #[test]
    fn irdma_congestion_and_per_ip_version_traffic() {
        let dir = tempfile::tempdir().unwrap();
        let p = port(dir.path(), "irdma0");
        for (f, v) in [
            ("cnpSent", "5"),
            ("cnpHandled", "6"),
            ("RxECNMrkd", "7"),
            ("ip4InOctets", "1000"),
            ("ip6InOctets", "24"),
            ("ip4InDiscards", "2"),
            ("RNR sent", "9"),
        ] {
            std::fs::write(p.join("hw_counters").join(f), format!("{v}\n")).unwrap();
        }
        let r = collect(dir.path());
        let find = |name: &str, extra: Option<(&str, &str)>| -> Vec<Value> {
            r.samples
                .iter()
                .filter(|s| s.name == name)
                .filter(|s| extra.is_none_or(|(k, v)| s.attributes.get(k) == Some(v)))
                .map(|s| s.value)
                .collect()
        };
        assert_eq!(find("rdma.port.cnp.sent", None), vec![Value::U64(5)]);
        assert_eq!(find("rdma.port.cnp.handled", None), vec![Value::U64(6)]);
        assert_eq!(
            find("rdma.port.ecn_marked_packets", None),
            vec![Value::U64(7)]
        );
        assert_eq!(
            find("rdma.port.io", Some(("network.type", "ipv4"))),
            vec![Value::U64(1000)]
        );
        assert_eq!(
            find("rdma.port.io", Some(("network.type", "ipv6"))),
            vec![Value::U64(24)]
        );
        assert_eq!(find("rdma.port.drops", None), vec![Value::U64(2)]);
        // A newer driver's counter without an entry (spaces in the file name) is kept raw.
        assert_eq!(
            find("rdma.port.hw_counter", Some((ATTR_COUNTER, "RNR sent"))),
            vec![Value::U64(9)]
        );
    }

    #[test]
    fn hw_counters_source_option() {
        let dir = tempfile::tempdir().unwrap();
        let p = port(dir.path(), "mlx5_0");
        fs::write(p.join("hw_counters/out_of_buffer"), "3\n").unwrap();
        let start = |opts: serde_json::Value| {
            let mut c = SysfsCounters::new();
            let mut ctx = PluginContext::new(dir.path());
            ctx.options = opts;
            c.start(&ctx).map(|_| c)
        };
        let e = start(serde_json::json!({"hw_counters_source": "nl"})).unwrap_err();
        assert!(e.to_string().contains("hw_counters_source"), "{e}");
        // Netlink describes the live kernel: required on a fixture tree, it is refused.
        let e = start(serde_json::json!({"hw_counters_source": "netlink"})).unwrap_err();
        assert!(
            e.to_string().contains("live kernel")
                && e.to_string().contains(&dir.path().display().to_string()),
            "{e}"
        );
        // auto on a fixture tree reads the files.
        for opt in ["auto", "sysfs"] {
            let mut c = start(serde_json::json!({"hw_counters_source": opt})).unwrap();
            let r = c.collect().unwrap();
            assert_eq!(
                value(&r, "hw_counters/out_of_buffer"),
                Some(Value::U64(3)),
                "{opt}"
            );
        }
    }

    #[test]
    fn files_kept_open_see_rewrites_and_auto_reopens_off_sysfs() {
        let dir = tempfile::tempdir().unwrap();
        let p = port(dir.path(), "mlx5_0");
        let f = p.join("hw_counters/out_of_buffer");
        fs::write(&f, "1\n").unwrap();
        let start = |keep: &str| {
            let mut c = SysfsCounters::new();
            let mut ctx = PluginContext::new(dir.path());
            ctx.options = serde_json::json!({ "keep_files_open": keep });
            c.start(&ctx).unwrap();
            c
        };
        let mut kept = start("always");
        let mut auto = start("auto");
        assert!(
            kept.keep_open > 0 && auto.keep_open == 0,
            "a temp dir is not sysfs"
        );
        let oob = |c: &mut SysfsCounters| value(&c.collect().unwrap(), "hw_counters/out_of_buffer");
        assert_eq!(oob(&mut kept), Some(Value::U64(1)));
        assert_eq!(oob(&mut auto), Some(Value::U64(1)));
        assert_eq!(
            kept.plan.as_ref().unwrap().open_files,
            4,
            "state, phys_state, rate, the counter"
        );
        // Rewritten in place (as sysfs regenerates a value): the open file sees it.
        fs::write(&f, "2\n").unwrap();
        assert_eq!(oob(&mut kept), Some(Value::U64(2)));
        // Replaced by a rename: only a reopening reader sees it, hence "auto" off sysfs.
        let tmp = p.join("hw_counters/.tmp");
        fs::write(&tmp, "3\n").unwrap();
        fs::rename(&tmp, &f).unwrap();
        assert_eq!(oob(&mut auto), Some(Value::U64(3)));
        assert_eq!(
            oob(&mut kept),
            Some(Value::U64(2)),
            "the documented limit of always"
        );
        let e = SysfsCounters::new()
            .start(&{
                let mut ctx = PluginContext::new(dir.path());
                ctx.options = serde_json::json!({ "keep_files_open": "yes" });
                ctx
            })
            .unwrap_err();
        assert!(e.to_string().contains("keep_files_open"), "{e}");
    }

    #[test]
    fn counters_ext_wins_over_counters() {
        let dir = tempfile::tempdir().unwrap();
        let p = port(dir.path(), "mlx4_0");
        fs::create_dir_all(p.join("counters_ext")).unwrap();
        fs::write(p.join("counters/port_xmit_data"), "4294967295\n").unwrap();
        fs::write(p.join("counters_ext/port_xmit_data_64"), "5000000000\n").unwrap();
        let r = collect(dir.path());
        let io: Vec<_> = r
            .samples
            .iter()
            .filter(|s| s.name == "rdma.port.io")
            .collect();
        assert_eq!(io.len(), 1, "{io:?}");
        assert_eq!(io[0].value, Value::U64(20_000_000_000));
        assert_eq!(&*io[0].source, "counters_ext/port_xmit_data_64");
    }

    #[test]
    fn unreadable_and_garbage_files_are_partial() {
        let dir = tempfile::tempdir().unwrap();
        let p = port(dir.path(), "mlx5_0");
        fs::write(p.join("counters/port_xmit_packets"), "12\n").unwrap();
        fs::create_dir_all(p.join("counters/port_rcv_packets")).unwrap(); // EISDIR on read
        fs::write(p.join("counters/symbol_error"), "garbage\n").unwrap();
        let r = collect(dir.path());
        assert_eq!(
            value(&r, "counters/port_xmit_packets"),
            Some(Value::U64(12))
        );
        assert_eq!(r.errors.len(), 2, "{:?}", r.errors);
        assert!(r
            .errors
            .iter()
            .any(|e| e.target.ends_with("counters/port_rcv_packets")));
        assert!(r
            .errors
            .iter()
            .any(|e| e.target.ends_with("counters/symbol_error")));
    }

    #[test]
    fn an_empty_file_and_a_data_counter_past_u64_are_errors_not_values() {
        let dir = tempfile::tempdir().unwrap();
        let p = port(dir.path(), "mlx5_0");
        fs::write(p.join("counters/port_xmit_packets"), "12\n").unwrap();
        fs::write(p.join("counters/port_rcv_packets"), "").unwrap();
        // 2^63 words are 2^65 bytes: the ×4 does not fit.
        fs::write(
            p.join("counters/port_xmit_data"),
            format!("{}\n", 1u64 << 63),
        )
        .unwrap();
        let r = collect(dir.path());
        assert_eq!(
            value(&r, "counters/port_xmit_packets"),
            Some(Value::U64(12))
        );
        assert_eq!(value(&r, "counters/port_rcv_packets"), None);
        assert_eq!(
            value(&r, "counters/port_xmit_data"),
            None,
            "not a saturated value"
        );
        let said = |file: &str, what: &str| {
            r.errors
                .iter()
                .any(|e| e.target.ends_with(file) && e.message.contains(what))
        };
        assert!(
            said("counters/port_rcv_packets", "not a counter value"),
            "{:?}",
            r.errors
        );
        assert!(
            said("counters/port_xmit_data", "does not fit in 64 bits"),
            "{:?}",
            r.errors
        );
    }

    #[test]
    fn a_fifo_in_place_of_a_counter_costs_only_its_own_value() {
        let dir = tempfile::tempdir().unwrap();
        let p = port(dir.path(), "mlx5_0");
        fs::write(p.join("counters/port_xmit_packets"), "12\n").unwrap();
        fs::write(p.join("counters/port_rcv_packets"), "34\n").unwrap();
        let fifo = p.join("counters/symbol_error");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a plain mkfifo on a path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let started = std::time::Instant::now();
        let r = collect(dir.path());
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "a FIFO with no writer stalled the collection"
        );
        assert_eq!(
            value(&r, "counters/port_xmit_packets"),
            Some(Value::U64(12))
        );
        assert_eq!(value(&r, "counters/port_rcv_packets"), Some(Value::U64(34)));
        assert!(
            r.errors
                .iter()
                .any(|e| e.target.ends_with("counters/symbol_error") && e.message.contains("FIFO")),
            "{:?}",
            r.errors
        );
    }

    #[test]
    fn vanished_device_yields_nothing_and_replans() {
        let dir = tempfile::tempdir().unwrap();
        let p = port(dir.path(), "mlx5_0");
        fs::write(p.join("counters/port_xmit_packets"), "12\n").unwrap();
        let mut c = SysfsCounters::new();
        c.start(&PluginContext::new(dir.path())).unwrap();
        assert!(!c.collect().unwrap().samples.is_empty());
        // Keep the class entry but remove the port directory under it: what a hot-unplug
        // looks like between listing and reading.
        fs::remove_dir_all(dir.path().join("class/infiniband/mlx5_0/ports")).unwrap();
        let r = c.collect().unwrap();
        assert!(r.samples.is_empty() && r.errors.is_empty(), "{r:?}");
        assert!(c.plan.is_none());
    }

    #[test]
    fn empty_root_is_unsupported() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = SysfsCounters::new();
        c.start(&PluginContext::new(dir.path())).unwrap();
        assert!(matches!(c.collect(), Err(PluginError::Unsupported(_))));
    }

    /// `n` devices of one port with ten hw counters each.
    fn devices(root: &std::path::Path, n: usize) {
        for d in 0..n {
            let p = port(root, &format!("mlx5_{d}"));
            for c in 0..10 {
                fs::write(p.join(format!("hw_counters/c{c}")), format!("{c}\n")).unwrap();
            }
        }
    }

    fn devices_in(r: &ScrapeResult) -> Vec<String> {
        let mut d: Vec<String> = r
            .samples
            .iter()
            .map(|s| s.attributes[ATTR_DEVICE].to_string())
            .collect();
        d.dedup();
        d
    }

    #[test]
    fn a_collection_over_its_budget_delivers_what_it_read() {
        let dir = tempfile::tempdir().unwrap();
        devices(dir.path(), 30);
        // 10 ms per file: 3 s for the whole host, against a 1 s call timeout.
        SLOW_DRIVER.set(Some((String::new(), std::time::Duration::from_millis(10))));
        let mut c = SysfsCounters::new();
        let mut ctx = PluginContext::new(dir.path());
        ctx.call_timeout_ms = Some(1000);
        c.start(&ctx).unwrap();
        let started = Instant::now();
        let r = c.collect().unwrap();
        // The next collection starts where this one stopped: a host always over budget
        // still has every device read in turn.
        let r2 = c.collect().unwrap();
        SLOW_DRIVER.set(None);
        assert!(started.elapsed() < std::time::Duration::from_millis(2000));
        let read = devices_in(&r);
        let read2 = devices_in(&r2);
        // (The device the budget ran out in counts as not read: the next starts there.)
        let union: std::collections::BTreeSet<&String> = read.iter().chain(&read2).collect();
        assert!(
            read2.first() == read.last() && union.len() > read.len(),
            "second collection starts where the first stopped: {read:?} then {read2:?}"
        );
        assert!(read.first().is_some_and(|d| d == "mlx5_0"), "{read:?}");
        assert!(read.len() < 30, "{read:?}");
        let e = r
            .errors
            .iter()
            .find(|e| e.target == "collection budget")
            .unwrap_or_else(|| panic!("{:?}", r.errors));
        assert!(
            e.message.starts_with("stopped after ")
                && e.message.contains(" of 30 devices")
                && e.message
                    .contains("collection budget 800ms of the 1s call timeout spent")
                && e.message.contains("; not read: mlx5_"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_slow_device_costs_only_its_own_counters_and_is_read_last() {
        let dir = tempfile::tempdir().unwrap();
        devices(dir.path(), 4);
        SLOW_DRIVER.set(Some((
            "mlx5_1".into(),
            std::time::Duration::from_millis(50),
        )));
        let mut c = SysfsCounters::new();
        let mut ctx = PluginContext::new(dir.path());
        ctx.options = serde_json::json!({"device_timeout": "120ms"});
        c.start(&ctx).unwrap();
        let r = c.collect().unwrap();
        let per_device = |r: &ScrapeResult, d: &str| {
            r.samples
                .iter()
                .filter(|s| &s.attributes[ATTR_DEVICE] == d)
                .count()
        };
        for d in ["mlx5_0", "mlx5_2", "mlx5_3"] {
            assert_eq!(per_device(&r, d), 12, "{d}: up, rate and ten counters");
        }
        assert!(per_device(&r, "mlx5_1") < 12);
        assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
        assert_eq!(r.errors[0].target, "mlx5_1 port 1");
        assert!(
            r.errors[0].message.contains("device deadline 120ms spent"),
            "{}",
            r.errors[0].message
        );
        let r = c.collect().unwrap();
        SLOW_DRIVER.set(None);
        assert_eq!(devices_in(&r), ["mlx5_0", "mlx5_2", "mlx5_3", "mlx5_1"]);
        ctx.options = serde_json::json!({"device_timeout": "soon"});
        assert!(matches!(c.start(&ctx), Err(PluginError::InvalidOptions(_))));
    }
}
