//! The link's own history and its transceiver module, on the netdevs this collector
//! reads `ethtool -S` of: carrier transitions from sysfs, why the link is down and the
//! FEC mode and statistics from ethtool netlink, the module's diagnostics from its EEPROM
//! (ethtool netlink by page, the ioctls where netlink cannot) decoded by
//! `rocewatch_optics`, as the catalog's `LINK_HEALTH_CATALOG` and `OPTICS_CATALOG` say.
//!
//! Here because these are the same netdevs and the same ethtool interface as the driver
//! statistics (mlx5's `link_down_events_phy` and `rx_corrected_bits_phy` already come
//! from `ethtool -S`), at the same cadence, except the module: an EEPROM read is an I2C
//! transaction per page (a few ms each, more where the driver asks the firmware: mlx5's
//! MCIA register), up to 8 pages for a CMIS module, so modules are read every
//! `module_interval_secs` (300 s by default) and their last samples repeated in between.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rocewatch_metrics::names;
use rocewatch_metrics::{
    link_health_entry, optics_entry, CatalogEntry, ATTR_DOWN_DETAIL, ATTR_DOWN_REASON,
    ATTR_FEC_BIN, ATTR_FEC_MODE, ATTR_LANE, ATTR_MODULE_IDENTIFIER, ATTR_MODULE_LEVEL,
    ATTR_MODULE_MEASURE, ATTR_MODULE_PART, ATTR_MODULE_SERIAL, ATTR_MODULE_VENDOR,
    LINK_HEALTH_CATALOG,
};
use rocewatch_netlink::ethtool::{
    ext_state_name, ext_substate_name, EthtoolError, EthtoolNetlink, Fec, FecCounter, LinkState,
};
use rocewatch_optics::{Eeprom, Module};
use rocewatch_plugin_api::{Attributes, PartialError, Sample, ScrapeResult, Value};
use rocewatch_sysfs::SysRoot;

/// `Ok(None)`: the driver (or kernel) does not report it; no series, no error.
pub type Answer<T> = Result<Option<T>, LinkError>;

/// Why a link request has no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// The kernel has no netdev of that name (ethtool netlink's `ENODEV`): not an error
    /// of the collection, the netdev is absent (the collector asks again later).
    #[error("{0}: no such interface")]
    NoDevice(String),
    /// Any other failure, as the kernel or the decoder said it.
    #[error("{0}")]
    Failed(String),
}

impl From<String> for LinkError {
    fn from(message: String) -> Self {
        LinkError::Failed(message)
    }
}

fn gone<T>(r: &Answer<T>) -> bool {
    matches!(r, Err(LinkError::NoDevice(_)))
}

/// What [`LinkReader::collect`] found of a netdev.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    /// Read (its errors, if any, are in the scrape).
    Read,
    /// The kernel has no such netdev: nothing of it was added.
    NoDevice,
}

/// Where the link state, FEC and module come from: the kernel on a host, replies built
/// as the kernel lays them out in tests.
pub trait LinkSource: Send {
    fn link_state(&mut self, ifname: &str) -> Answer<LinkState>;
    fn fec(&mut self, ifname: &str) -> Answer<Fec>;
    /// The module's memory as read (and what could not be read).
    fn module(&mut self, ifname: &str) -> Answer<(Eeprom, Vec<String>)>;
}

fn answer<T>(r: Result<T, EthtoolError>) -> Answer<T> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_unsupported() => Ok(None),
        Err(EthtoolError::NoDevice { ifname }) => Err(LinkError::NoDevice(ifname)),
        Err(e) => Err(LinkError::Failed(e.to_string())),
    }
}

/// No kernel to ask (a sysfs root that is not the live `/sys`): only the carrier files.
pub struct NoLinkSource;

impl LinkSource for NoLinkSource {
    fn link_state(&mut self, _: &str) -> Answer<LinkState> {
        Ok(None)
    }

    fn fec(&mut self, _: &str) -> Answer<Fec> {
        Ok(None)
    }

    fn module(&mut self, _: &str) -> Answer<(Eeprom, Vec<String>)> {
        Ok(None)
    }
}

/// This network namespace's ethtool netlink (opened at the first request) and the
/// ioctls for modules where netlink cannot read them.
#[derive(Default)]
pub struct KernelLinkSource {
    nl: Option<Result<EthtoolNetlink, String>>,
}

impl KernelLinkSource {
    fn nl(&mut self) -> Result<&mut EthtoolNetlink, EthtoolError> {
        if self.nl.is_none() {
            self.nl = Some(match EthtoolNetlink::open(Duration::from_secs(2)) {
                Ok(n) => Ok(n),
                Err(EthtoolError::NoFamily) => Err(String::new()),
                Err(e) => Err(e.to_string()),
            });
        }
        match self.nl.as_mut().expect("set above") {
            Ok(n) => Ok(n),
            Err(e) if e.is_empty() => Err(EthtoolError::NoFamily),
            Err(e) => Err(EthtoolError::Netlink(
                rocewatch_netlink::NetlinkError::Malformed {
                    request: "ethtool netlink".into(),
                    detail: e.clone(),
                },
            )),
        }
    }
}

impl LinkSource for KernelLinkSource {
    fn link_state(&mut self, ifname: &str) -> Answer<LinkState> {
        answer(self.nl().and_then(|n| n.link_state(ifname)))
    }

    fn fec(&mut self, ifname: &str) -> Answer<Fec> {
        answer(self.nl().and_then(|n| n.fec(ifname)))
    }

    fn module(&mut self, ifname: &str) -> Answer<(Eeprom, Vec<String>)> {
        let nl = match self.nl() {
            Ok(n) => Some(n),
            Err(e) if e.is_unsupported() => None,
            Err(e) => return answer(Err(e)),
        };
        rocewatch_netlink::module_eeprom::read_port_module(
            nl,
            ifname,
            rocewatch_ethtool::module::module_dump,
        )
        .map(|m| m.map(|m| (m.eeprom, m.problems)))
        .map_err(LinkError::Failed)
    }
}

fn sample(e: &CatalogEntry, value: Value, attrs: BTreeMap<String, String>, via: &str) -> Sample {
    Sample {
        name: e.name.into(),
        unit: e.unit.into(),
        value,
        attributes: Attributes::new(attrs.into()),
        source: format!("{via}:{}", e.source).into(),
        kind: e.kind,
    }
}

fn with(base: &BTreeMap<String, String>, extra: &[(&str, String)]) -> BTreeMap<String, String> {
    let mut a = base.clone();
    for (k, v) in extra {
        a.insert((*k).into(), v.clone());
    }
    a
}

/// The carrier counters of `ifname` under the sysfs root (absent files: no sample).
pub fn carrier_samples(
    root: &SysRoot,
    ifname: &str,
    base: &BTreeMap<String, String>,
) -> Vec<Sample> {
    let mut out = Vec::new();
    for file in ["carrier_changes", "carrier_up_count", "carrier_down_count"] {
        let v = root
            .netdev_attr(ifname, file)
            .ok()
            .flatten()
            .and_then(|s| s.trim().parse::<u64>().ok());
        if let (Some(v), Some(e)) = (v, link_health_entry(file)) {
            out.push(sample(e, Value::U64(v), base.clone(), "sysfs"));
        }
    }
    out
}

/// The down reason info series (only while the driver says why the link is down).
pub fn link_state_samples(s: &LinkState, base: &BTreeMap<String, String>) -> Vec<Sample> {
    let Some(state) = s.ext_state else {
        return Vec::new();
    };
    if s.link == Some(true) {
        return Vec::new();
    }
    let detail = s
        .ext_substate
        .map(|sub| ext_substate_name(state, sub))
        .unwrap_or_default();
    let attrs = with(
        base,
        &[
            (ATTR_DOWN_REASON, ext_state_name(state)),
            (ATTR_DOWN_DETAIL, detail),
        ],
    );
    let e = link_health_entry("ETHTOOL_A_LINKSTATE_EXT_STATE").expect("catalogued");
    vec![sample(e, Value::U64(1), attrs, "ethtool-netlink")]
}

fn named(name: &str) -> &'static CatalogEntry {
    LINK_HEALTH_CATALOG
        .iter()
        .find(|e| e.name == name)
        .expect("catalogued link metric")
}

/// FEC mode, totals, per-lane counters and histogram bins.
pub fn fec_samples(f: &Fec, base: &BTreeMap<String, String>) -> Vec<Sample> {
    let mut out = Vec::new();
    let via = "ethtool-netlink";
    if let Some(m) = f.active {
        let attrs = with(base, &[(ATTR_FEC_MODE, m.name())]);
        out.push(sample(
            named(names::LINK_FEC_MODE),
            Value::U64(1),
            attrs,
            via,
        ));
    }
    let groups: [(&Option<FecCounter>, &str, &str); 3] = [
        (
            &f.corrected,
            names::LINK_FEC_CORRECTED_BLOCKS,
            names::LINK_FEC_LANE_CORRECTED_BLOCKS,
        ),
        (
            &f.uncorrectable,
            names::LINK_FEC_UNCORRECTABLE_BLOCKS,
            names::LINK_FEC_LANE_UNCORRECTABLE_BLOCKS,
        ),
        (
            &f.corrected_bits,
            names::LINK_FEC_CORRECTED_BITS,
            names::LINK_FEC_LANE_CORRECTED_BITS,
        ),
    ];
    for (c, total, lane) in groups {
        let Some(c) = c else { continue };
        out.push(sample(named(total), Value::U64(c.total), base.clone(), via));
        for (i, v) in c.lanes.iter().enumerate() {
            let attrs = with(base, &[(ATTR_LANE, i.to_string())]);
            out.push(sample(named(lane), Value::U64(*v), attrs, via));
        }
    }
    for bin in &f.histogram {
        let (Some(v), range) = (bin.value, bin_name(bin.low, bin.high)) else {
            continue;
        };
        let attrs = with(base, &[(ATTR_FEC_BIN, range)]);
        out.push(sample(
            named(names::LINK_FEC_CODEWORDS),
            Value::U64(v),
            attrs,
            via,
        ));
    }
    out
}

fn bin_name(low: u32, high: u32) -> String {
    if low == high {
        low.to_string()
    } else {
        format!("{low}-{high}")
    }
}

/// A decoded module's samples: its inventory series, readings and set flags. A reading
/// the decoder left out (absent, or withheld for a bad checksum or zero answers) is no
/// sample.
pub fn module_samples(m: &Module, base: &BTreeMap<String, String>) -> Vec<Sample> {
    let via = "module-eeprom";
    let e = |n: &str| optics_entry(n).expect("catalogued module metric");
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let info = with(
        base,
        &[
            (ATTR_MODULE_IDENTIFIER, m.identifier.clone()),
            (ATTR_MODULE_VENDOR, text(&m.vendor)),
            (ATTR_MODULE_PART, text(&m.part_number)),
            (ATTR_MODULE_SERIAL, text(&m.serial_number)),
        ],
    );
    let mut out = vec![sample(e(names::OPTICS_INFO), Value::U64(1), info, via)];
    for (name, v) in [
        (names::OPTICS_TEMPERATURE, m.temperature_c),
        (names::OPTICS_VOLTAGE, m.voltage_v),
    ] {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            out.push(sample(e(name), Value::F64(v), base.clone(), via));
        }
    }
    for l in &m.lanes {
        let attrs = with(base, &[(ATTR_LANE, l.lane.to_string())]);
        for (name, v) in [
            (names::OPTICS_LANE_BIAS, l.bias_ma),
            (names::OPTICS_LANE_TX_POWER, l.tx_power_mw),
            (names::OPTICS_LANE_RX_POWER, l.rx_power_mw),
        ] {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                out.push(sample(e(name), Value::F64(v), attrs.clone(), via));
            }
        }
    }
    for a in &m.alarms {
        let mut extra = vec![
            (ATTR_MODULE_MEASURE, a.measure.name().to_string()),
            (ATTR_MODULE_LEVEL, a.level.name().to_string()),
        ];
        if let Some(l) = a.lane {
            extra.push((ATTR_LANE, l.to_string()));
        }
        out.push(sample(
            e(names::OPTICS_FLAG),
            Value::U64(1),
            with(base, &extra),
            via,
        ));
    }
    out
}

/// The link reader of the collector: the source and each netdev's last module reading.
pub struct LinkReader {
    pub source: Box<dyn LinkSource>,
    pub module_interval: Duration,
    modules: BTreeMap<String, (Instant, Vec<Sample>)>,
}

impl LinkReader {
    pub fn new(source: Box<dyn LinkSource>, module_interval: Duration) -> Self {
        LinkReader {
            source,
            module_interval,
            modules: BTreeMap::new(),
        }
    }

    /// Everything of one netdev into `out`; `root` for the carrier files. A netdev the
    /// kernel does not have (its link state or FEC request answered `ENODEV`) adds
    /// nothing, no error either, and its module is read afresh once it is back.
    pub fn collect(
        &mut self,
        root: &SysRoot,
        ifname: &str,
        base: &BTreeMap<String, String>,
        out: &mut ScrapeResult,
    ) -> Presence {
        let state = self.source.link_state(ifname);
        if !gone(&state) {
            let fec = self.source.fec(ifname);
            if !gone(&fec) {
                self.read(root, ifname, base, state, fec, out);
                return Presence::Read;
            }
        }
        self.modules.remove(ifname);
        Presence::NoDevice
    }

    fn read(
        &mut self,
        root: &SysRoot,
        ifname: &str,
        base: &BTreeMap<String, String>,
        state: Answer<LinkState>,
        fec: Answer<Fec>,
        out: &mut ScrapeResult,
    ) {
        out.samples.extend(carrier_samples(root, ifname, base));
        let mut fail = |what: &str, message: String| {
            out.errors.push(PartialError {
                target: format!("{what} {ifname}"),
                message,
            })
        };
        match state {
            Ok(Some(s)) => out.samples.extend(link_state_samples(&s, base)),
            Ok(None) => {}
            Err(e) => fail("link state", e.to_string()),
        }
        match fec {
            Ok(Some(f)) => out.samples.extend(fec_samples(&f, base)),
            Ok(None) => {}
            Err(e) => fail("FEC", e.to_string()),
        }
        let now = Instant::now();
        let due = self
            .modules
            .get(ifname)
            .is_none_or(|(at, _)| now.duration_since(*at) >= self.module_interval);
        if due {
            let samples = match self.source.module(ifname) {
                Ok(Some((eeprom, problems))) => {
                    for p in problems {
                        fail("module EEPROM", p);
                    }
                    match rocewatch_optics::decode(&eeprom) {
                        Ok(m) => module_samples(&m, base),
                        Err(e) => {
                            fail("module EEPROM", e.to_string());
                            Vec::new()
                        }
                    }
                }
                Ok(None) => Vec::new(),
                Err(e) => {
                    fail("module EEPROM", e.to_string());
                    Vec::new()
                }
            };
            self.modules.insert(ifname.to_string(), (now, samples));
        }
        if let Some((_, s)) = self.modules.get(ifname) {
            out.samples.extend(s.iter().cloned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's ENODEV is the netdev's absence, apart from the other failures, and
    /// EOPNOTSUPP no answer at all.
    #[test]
    fn no_such_interface_is_told_apart() {
        let gone = EthtoolError::NoDevice {
            ifname: "gone0".into(),
        };
        assert_eq!(
            answer::<()>(Err(gone)),
            Err(LinkError::NoDevice("gone0".into()))
        );
        let other = EthtoolError::Netlink(rocewatch_netlink::NetlinkError::Malformed {
            request: "FEC of eth0".into(),
            detail: "short".into(),
        });
        let text = other.to_string();
        assert_eq!(answer::<()>(Err(other)), Err(LinkError::Failed(text)));
        let unsupported = EthtoolError::Unsupported {
            ifname: "eth0".into(),
            what: "FEC settings",
        };
        assert_eq!(answer::<()>(Err(unsupported)), Ok(None));
        assert_eq!(
            LinkError::NoDevice("gone0".into()).to_string(),
            "gone0: no such interface"
        );
    }
}
