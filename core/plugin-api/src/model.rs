//! The data model shared by the host and every plugin.
//!
//! Absent and zero are different values: anything the kernel may not expose is an
//! `Option`, never a defaulted number.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The five plugin kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginKind {
    /// Finds RDMA devices and ports.
    Discovery,
    /// Reads (and later applies) RoCE/PFC/ECN configuration.
    Configuration,
    /// Measures reachability and latency to peers.
    Probe,
    /// Produces metric samples.
    Collector,
    /// Acts when a rule fires or clears.
    Remediation,
}

impl PluginKind {
    pub const ALL: [PluginKind; 5] = [
        PluginKind::Discovery,
        PluginKind::Configuration,
        PluginKind::Probe,
        PluginKind::Collector,
        PluginKind::Remediation,
    ];

    /// The bit of this kind in the C ABI's `kinds` mask.
    pub const fn bit(self) -> u32 {
        match self {
            PluginKind::Discovery => 1,
            PluginKind::Configuration => 2,
            PluginKind::Probe => 4,
            PluginKind::Collector => 8,
            PluginKind::Remediation => 16,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PluginKind::Discovery => "discovery",
            PluginKind::Configuration => "configuration",
            PluginKind::Probe => "probe",
            PluginKind::Collector => "collector",
            PluginKind::Remediation => "remediation",
        }
    }
}

impl fmt::Display for PluginKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What every plugin is started with.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PluginContext {
    /// Root of the sysfs tree to read (`/sys` on a real host, a fixture in tests).
    pub sysfs_root: PathBuf,
    /// Host name as the agent reports it.
    pub host_name: String,
    /// Plugin-specific options from the config file (a JSON object, possibly empty).
    #[serde(default)]
    pub options: serde_json::Value,
    /// The host's timeout for each call of this plugin, in milliseconds (`timeout` of its
    /// configuration). A call that outlasts it delivers nothing, so a collector that reads
    /// much stops a little before it and returns what it read with a partial error.
    /// Absent from hosts before it was added (the context crosses as JSON: old plugins
    /// ignore it, new plugins see `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_timeout_ms: Option<u64>,
}

impl PluginContext {
    pub fn new(sysfs_root: impl Into<PathBuf>) -> Self {
        PluginContext {
            sysfs_root: sysfs_root.into(),
            host_name: String::new(),
            options: serde_json::Value::Object(Default::default()),
            call_timeout_ms: None,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Discovery

/// Everything discovery found on the host.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Inventory {
    pub devices: Vec<Device>,
}

/// An RDMA device (`/sys/class/infiniband/<name>`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Device {
    pub name: String,
    pub node_guid: Option<String>,
    pub fw_ver: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hca_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board_id: Option<String>,
    /// Kernel driver behind the device, when sysfs tells (`mlx5_core`, `rdma_rxe`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// The kernel module serving the device (`module/<name>/`): which build of the
    /// driver runs. Absent when the discovery plugin does not read it (an older or a
    /// third-party one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_module: Option<DriverModule>,
    pub ports: Vec<Port>,
}

/// The module behind a device's driver, as `module/<name>/` tells it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DriverModule {
    /// `mlx5_core`, `irdma`, `bnxt_en`, `rdma_rxe`.
    pub name: String,
    /// `module/<name>/version`: declared by vendor packages (MLNX_OFED/DOCA-OFED), not
    /// by most of the kernel's own RDMA drivers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `module/<name>/srcversion`: the digest of the module's sources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub srcversion: Option<String>,
    /// `in-tree` (the distribution kernel's module), `out-of-tree` (taint `O`: a vendor
    /// package or DKMS) or `unknown`.
    pub origin: String,
}

/// A port of an RDMA device.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Port {
    pub port: u32,
    /// Logical state name, e.g. `ACTIVE`, `DOWN` (from `4: ACTIVE`).
    pub state: Option<String>,
    /// Physical state name, e.g. `LinkUp`, `Disabled` (from `5: LinkUp`).
    pub phys_state: Option<String>,
    /// `Ethernet` (RoCE) or `InfiniBand`.
    pub link_layer: Option<String>,
    /// The rate as the kernel prints it, e.g. `100 Gb/sec (4X EDR)`.
    pub rate: Option<String>,
    /// The rate in bits per second, parsed from `rate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_bps: Option<u64>,
    /// The netdev of this port (what `ibdev2netdev` shows).
    pub netdev: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netdev_mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netdev_operstate: Option<String>,
    pub gids: Vec<Gid>,
}

impl Port {
    /// `true` when the port is `ACTIVE` and `LinkUp`.
    pub fn is_up(&self) -> bool {
        self.state.as_deref() == Some("ACTIVE") && self.phys_state.as_deref() == Some("LinkUp")
    }
}

/// One non-empty slot of a port's GID table.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Gid {
    pub index: u32,
    pub gid: String,
    /// `RoCE v2`, `IB/RoCE v1`, or absent when the kernel does not say.
    #[serde(rename = "type")]
    pub gid_type: Option<String>,
    pub netdev: Option<String>,
}

// ---------------------------------------------------------------------------------------
// Collection

/// How a metric behaves over time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricKind {
    /// Cumulative, monotonic (a reset starts a new series).
    Counter,
    /// A value that can go up and down.
    Gauge,
    /// A distribution (agent self-metrics, probe round-trip times).
    Histogram,
}

impl MetricKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// What a collector declares it may emit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct MetricDescriptor {
    pub name: String,
    /// UCUM unit: `By`, `s`, `{packet}`...
    pub unit: String,
    pub kind: MetricKind,
    pub description: String,
}

/// A sample value: integers stay exact, everything else is a float.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    U64(u64),
    F64(f64),
}

impl Value {
    pub fn as_f64(self) -> f64 {
        match self {
            Value::U64(v) => v as f64,
            Value::F64(v) => v,
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::U64(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
        }
    }
}

/// A sample's attributes, shared: a collector builds them once per series and every
/// collection hands out a reference, not a copy (`Arc::make_mut` to change one). Compact
/// ([`crate::AttrSet`]): sorted pairs of strings shared across sets, serialized as a map.
pub type Attributes = std::sync::Arc<crate::AttrSet>;

/// A metric name or unit: usually a catalog constant, borrowed for free.
pub type Name = std::borrow::Cow<'static, str>;

/// One observation of one series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub name: Name,
    pub unit: Name,
    /// Normalized value (bytes for data counters).
    pub value: Value,
    pub attributes: Attributes,
    /// Where the value came from, relative to the port directory
    /// (e.g. `counters/port_xmit_data`), or a plugin-defined origin. Shared: a collector
    /// that reads the same file every time hands out one `Arc` for it (at 2000 ports a
    /// `String` per sample was 104 000 allocations per collection and 5 MB of the store).
    pub source: Arc<str>,
    #[serde(default = "default_kind")]
    pub kind: MetricKind,
}

fn default_kind() -> MetricKind {
    MetricKind::Gauge
}

impl Sample {
    /// A stable identity of the series: name plus sorted attributes.
    pub fn series_key(&self) -> String {
        let mut key = String::new();
        self.write_series_key(&mut key);
        key
    }

    /// [`Sample::series_key`] into a reused buffer (cleared first): no allocation once
    /// the buffer has grown.
    pub fn write_series_key(&self, key: &mut String) {
        key.clear();
        key.push_str(&self.name);
        for (k, v) in self.attributes.iter() {
            key.push('|');
            key.push_str(k);
            key.push('=');
            key.push_str(v);
        }
    }
}

/// A problem with one part of a scrape; the rest of the scrape still counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartialError {
    /// What failed: a file, a device, a port.
    pub target: String,
    pub message: String,
}

/// The result of one collection: what could be read, plus what could not.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScrapeResult {
    pub samples: Vec<Sample>,
    #[serde(default)]
    pub errors: Vec<PartialError>,
}

// ---------------------------------------------------------------------------------------
// Configuration (RoCE / PFC / ECN)

/// One configuration setting as observed on a port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", content = "value", rename_all = "lowercase")]
pub enum Setting {
    /// The effective value.
    Value(String),
    /// The device does not have this capability (not an error).
    Unsupported,
    /// It could not be read; the reason (configfs not mounted, not the live kernel...).
    Unknown(String),
}

/// The observed RoCE/PFC/ECN state of one port.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosState {
    pub device: String,
    pub port: u32,
    pub netdev: Option<String>,
    /// Setting name (`roce_mode`, `pfc_enabled`, `trust`, `mtu`...) to value.
    pub settings: BTreeMap<String, Setting>,
    /// Settings reported `unknown` that the plugin can nevertheless set (the RoCE
    /// defaults of a device whose configfs directory is not created yet: setting them
    /// creates it). A plan treats them as changes from "unknown" instead of blocking.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub settable_unread: Vec<String>,
}

/// One change a configuration plugin is asked to make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosChange {
    pub device: String,
    pub port: u32,
    pub setting: String,
    pub from: Option<String>,
    pub to: String,
}

/// What applying a change did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyOutcome {
    pub applied: bool,
    pub message: String,
    /// The value the setting had just before the change, when the plugin read it then
    /// (a rollback restores this rather than what the plan saw).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
}

// ---------------------------------------------------------------------------------------
// Probes

/// A peer to probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeTarget {
    /// Peer address (IP or name).
    pub peer: String,
    /// Message size in bytes.
    pub size: u32,
    /// Per-probe timeout.
    pub timeout_ms: u64,
    /// Which of the flows to the peer (each its own queue pair, so its own UDP source
    /// port): 0 for the first. Absent (0) from hosts before ABI 1.3.
    #[serde(default, skip_serializing_if = "is_zero_u16")]
    pub path: u16,
    /// The IPv6 flow label of the flow's address vector (20 bits), from which the kernel
    /// derives a RoCE v2 queue pair's UDP source port where the driver uses it (rxe:
    /// `rdma_get_udp_sport`, the low 14 bits with the high 6 folded in, in
    /// 0xC000..=0xFFFF); 0 leaves the port to the driver. A flow whose label changes keeps its queue pair and takes the new port.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub flow_label: u32,
    /// Connect through the RDMA connection manager to a listener on this port (the path
    /// CM applications take, as `rping -c` does) instead of the TCP side channel; 0: the
    /// side channel. ABI 1.4.
    #[serde(default, skip_serializing_if = "is_zero_u16")]
    pub cm_port: u16,
    /// The type of service (the whole IP ToS byte) a CM connection asks for
    /// (`RDMA_OPTION_ID_TOS`); absent: the device's configfs default. ABI 1.4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tos: Option<u8>,
}

fn is_zero_u16(v: &u16) -> bool {
    *v == 0
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

impl ProbeTarget {
    /// The first flow to `peer`, its source port left to the driver.
    pub fn new(peer: impl Into<String>, size: u32, timeout_ms: u64) -> Self {
        ProbeTarget {
            peer: peer.into(),
            size,
            timeout_ms,
            path: 0,
            flow_label: 0,
            cm_port: 0,
            tos: None,
        }
    }
}

/// How one probe ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ProbeOutcome {
    /// A reply came back after `rtt_seconds`.
    Ok { rtt_seconds: f64 },
    /// No reply within the timeout.
    Timeout,
    /// No connection could be made; `cause` names the step that failed.
    ConnectFailed { cause: String },
}

/// The result of one probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeResult {
    pub peer: String,
    #[serde(flatten)]
    pub outcome: ProbeOutcome,
    /// NIC completion timestamps: the RTT split measured by the device, or why there is
    /// none. Absent from plugins that do not say (ABI 1.0); a plugin may say why there
    /// is none on the first result of a round only (it is the same for every peer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_timestamps: Option<NicTimestamps>,
    /// A CM probe's connection as the CM set it up, once its route was resolved: absent
    /// for side-channel probes, for CM probes that stopped before a route, and from
    /// plugins that do not report it (optional in ABI 1.4: the verbs plugin reports it
    /// since rocewatch 0.1.0's CM probes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cm: Option<CmConnection>,
}

/// The TCP port of the verbs plugin's side channel, where a responder listens and a
/// prober connects to exchange queue-pair details, unless configured otherwise
/// (`tcp_port`); not rping's 7174, which an `rping -s` on the host would hold.
pub const DEFAULT_PROBE_TCP_PORT: u16 = 18516;

/// How many RDMA CM probes of one `probe_many` call the verbs plugin runs at once (fewer
/// when the locked-memory limit could not hold that many buffers): the host sizes the
/// call's time limit by it.
pub const CM_PROBES_AT_ONCE: usize = 16;

/// Where the RDMA CM put a probe's connection: the local device and port it bound the
/// connection to, and the type of service the connection carries (the route's traffic
/// class: the probe's own `tos`, else the port's configfs `default_roce_tos`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmConnection {
    /// The RDMA device the CM chose for the source address (`mlx5_0`).
    pub device: String,
    /// Its port.
    pub port: u8,
    /// The whole IP ToS byte: DSCP in the high 6 bits, ECN in the low 2.
    pub tos: u8,
    /// True when the probe asked for `tos` (`RDMA_OPTION_ID_TOS`), false when it is the
    /// port's configfs default.
    pub tos_set: bool,
}

/// What the device's completion timestamps tell about a probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NicTimestamps {
    /// The device cannot timestamp completions (rxe, older firmware): `reason` says what
    /// it reported.
    Unsupported { reason: String },
    /// The RTT split by the device's clock: time on the wire and the peer's NIC
    /// (`network_seconds`), and the rest (`host_seconds`: posting, polling, the peer's
    /// software).
    Measured {
        network_seconds: f64,
        host_seconds: f64,
    },
}

// ---------------------------------------------------------------------------------------
// Remediation

/// Why a remediation is invoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RemediationEvent {
    Firing,
    Clearing,
}

/// What a remediation plugin is asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemediationRequest {
    /// The configured action name.
    pub action: String,
    /// The rule (or alert) that triggered it.
    pub rule: String,
    pub event: RemediationEvent,
    /// Labels of the breaching series (device, port, priority...).
    pub labels: BTreeMap<String, String>,
    /// The recent samples that made the rule fire.
    pub samples: Vec<Sample>,
    /// When true the plugin must only describe what it would do.
    pub dry_run: bool,
}

/// What a remediation did (or would have done, in dry-run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemediationOutcome {
    pub executed: bool,
    pub message: String,
}
