//! Every plugin kind through the real C ABI entry points, in-process: the host side
//! (`ExternalPlugin`) calls the plugin side (`ffi::*`) through a `PluginTableV1` exactly as
//! it does across a `.so`, with JSON on the wire.

use std::path::Path;

use rocewatch_plugin_api::*;
use rocewatch_plugin_sdk::abi::{PluginTableV1, ABI_MAJOR};
use rocewatch_plugin_sdk::host::{LoadError, PluginLibrary};
use rocewatch_plugin_sdk::ExportPlugin;

#[derive(Default)]
struct All {
    started_with: Option<String>,
}

impl Plugin for All {
    fn name(&self) -> &str {
        "all"
    }
    fn start(&mut self, ctx: &PluginContext) -> Result<(), PluginError> {
        if ctx.options.get("fail").is_some() {
            return Err(PluginError::InvalidOptions("fail: not allowed".into()));
        }
        self.started_with = Some(ctx.sysfs_root.display().to_string());
        Ok(())
    }
}

impl DiscoveryPlugin for All {
    fn discover(&mut self) -> Result<Inventory, PluginError> {
        Ok(Inventory {
            devices: vec![Device {
                name: self.started_with.clone().unwrap_or_default(),
                ..Default::default()
            }],
        })
    }
}

impl CollectorPlugin for All {
    fn descriptors(&self) -> Vec<MetricDescriptor> {
        vec![MetricDescriptor {
            name: "all.x".into(),
            unit: "1".into(),
            kind: MetricKind::Gauge,
            description: "x".into(),
        }]
    }
    fn collect(&mut self) -> Result<ScrapeResult, PluginError> {
        Ok(ScrapeResult {
            samples: vec![],
            errors: vec![PartialError {
                target: "t".into(),
                message: "m".into(),
            }],
        })
    }
}

impl ConfigurationPlugin for All {
    fn observe(&mut self) -> Result<Vec<QosState>, PluginError> {
        let mut settings = std::collections::BTreeMap::new();
        settings.insert("roce_mode".to_string(), Setting::Value("RoCE v2".into()));
        settings.insert("pfc_enabled".to_string(), Setting::Unsupported);
        Ok(vec![QosState {
            device: "d".into(),
            port: 1,
            netdev: None,
            settings,
            settable_unread: vec!["roce_tos".into()],
        }])
    }
    fn apply(&mut self, change: &QosChange, dry_run: bool) -> Result<ApplyOutcome, PluginError> {
        Ok(ApplyOutcome {
            applied: !dry_run,
            message: format!("{} -> {}", change.setting, change.to),
            previous: change.from.clone(),
        })
    }
}

impl ProbePlugin for All {
    fn probe(&mut self, target: &ProbeTarget) -> Result<ProbeResult, PluginError> {
        if target.peer == "unreachable" {
            return Ok(ProbeResult {
                peer: target.peer.clone(),
                outcome: ProbeOutcome::ConnectFailed {
                    cause: "route".into(),
                },
                nic_timestamps: None,
                cm: None,
            });
        }
        // A CM target: where the CM put the connection crosses the ABI.
        if target.cm_port != 0 {
            return Ok(ProbeResult {
                peer: target.peer.clone(),
                outcome: ProbeOutcome::Ok { rtt_seconds: 2e-5 },
                nic_timestamps: None,
                cm: Some(CmConnection {
                    device: "mlx5_0".into(),
                    port: 1,
                    tos: target.tos.unwrap_or(106),
                    tos_set: target.tos.is_some(),
                }),
            });
        }
        // The flow crosses the ABI: its label comes back as the RTT's microseconds.
        if target.path != 0 {
            return Ok(ProbeResult {
                peer: target.peer.clone(),
                outcome: ProbeOutcome::Ok {
                    rtt_seconds: f64::from(target.flow_label) * 1e-6,
                },
                nic_timestamps: None,
                cm: None,
            });
        }
        Ok(ProbeResult {
            peer: target.peer.clone(),
            outcome: ProbeOutcome::Ok {
                rtt_seconds: 1.5e-5,
            },
            nic_timestamps: None,
            cm: None,
        })
    }
}

impl RemediationPlugin for All {
    fn remediate(
        &mut self,
        request: &RemediationRequest,
    ) -> Result<RemediationOutcome, PluginError> {
        if request.action == "boom" {
            panic!("remediation exploded");
        }
        Ok(RemediationOutcome {
            executed: !request.dry_run,
            message: request.rule.clone(),
        })
    }
}

impl ExportPlugin for All {
    const NAME: &'static str = "all";
    const VERSION: &'static str = "1.2.3";
    const KINDS: &'static [PluginKind] = &[
        PluginKind::Discovery,
        PluginKind::Configuration,
        PluginKind::Probe,
        PluginKind::Collector,
        PluginKind::Remediation,
    ];
    fn create() -> Self {
        All::default()
    }
    fn as_discovery(&mut self) -> Option<&mut dyn DiscoveryPlugin> {
        Some(self)
    }
    fn as_configuration(&mut self) -> Option<&mut dyn ConfigurationPlugin> {
        Some(self)
    }
    fn as_probe(&mut self) -> Option<&mut dyn ProbePlugin> {
        Some(self)
    }
    fn as_collector(&mut self) -> Option<&mut dyn CollectorPlugin> {
        Some(self)
    }
    fn as_remediation(&mut self) -> Option<&mut dyn RemediationPlugin> {
        Some(self)
    }
}

/// Only a collector: the other kinds must be refused.
#[derive(Default)]
struct OnlyCollector;
impl Plugin for OnlyCollector {
    fn name(&self) -> &str {
        "only"
    }
}
impl CollectorPlugin for OnlyCollector {
    fn descriptors(&self) -> Vec<MetricDescriptor> {
        vec![]
    }
    fn collect(&mut self) -> Result<ScrapeResult, PluginError> {
        Ok(ScrapeResult::default())
    }
}
impl ExportPlugin for OnlyCollector {
    const NAME: &'static str = "only";
    const VERSION: &'static str = "0";
    const KINDS: &'static [PluginKind] = &[PluginKind::Collector];
    fn create() -> Self {
        OnlyCollector
    }
    fn as_collector(&mut self) -> Option<&mut dyn CollectorPlugin> {
        Some(self)
    }
}

static ALL: PluginTableV1 = PluginTableV1::of::<All>();
static ONLY: PluginTableV1 = PluginTableV1::of::<OnlyCollector>();

fn lib() -> std::sync::Arc<PluginLibrary> {
    // SAFETY: a static table.
    unsafe { PluginLibrary::from_table(Path::new("in-process/all"), &ALL) }.unwrap()
}

fn ctx() -> PluginContext {
    PluginContext::new("/fixture/root")
}

#[test]
fn header_and_kinds() {
    let l = lib();
    assert_eq!(
        (l.name.as_str(), l.version.as_str(), l.abi_major),
        ("all", "1.2.3", ABI_MAJOR)
    );
    assert_eq!(l.kinds().len(), 5);
}

#[test]
fn discovery_and_collector() {
    let l = lib();
    let mut d = l.instantiate(PluginKind::Discovery).unwrap();
    d.start(&ctx()).unwrap();
    assert_eq!(
        DiscoveryPlugin::discover(&mut d).unwrap().devices[0].name,
        "/fixture/root"
    );
    let mut c = l.instantiate(PluginKind::Collector).unwrap();
    c.start(&ctx()).unwrap();
    assert_eq!(CollectorPlugin::descriptors(&c)[0].name, "all.x");
    let r = CollectorPlugin::collect(&mut c).unwrap();
    assert_eq!(r.errors[0].message, "m");
    // start/stop twice, as the contract requires.
    c.stop();
    c.start(&ctx()).unwrap();
    c.stop();
}

#[test]
fn configuration_kind() {
    let mut c = lib().instantiate(PluginKind::Configuration).unwrap();
    c.start(&ctx()).unwrap();
    let states = c.observe().unwrap();
    assert_eq!(
        states[0].settings["roce_mode"],
        Setting::Value("RoCE v2".into())
    );
    assert_eq!(states[0].settings["pfc_enabled"], Setting::Unsupported);
    assert_eq!(states[0].settable_unread, ["roce_tos"]);
    let change = QosChange {
        device: "d".into(),
        port: 1,
        setting: "trust".into(),
        from: Some("pcp".into()),
        to: "dscp".into(),
    };
    let out = c.apply(&change, true).unwrap();
    assert!(!out.applied);
    assert_eq!(out.message, "trust -> dscp");
    assert_eq!(out.previous.as_deref(), Some("pcp"));
}

#[test]
fn probe_kind() {
    let mut p = lib().instantiate(PluginKind::Probe).unwrap();
    p.start(&ctx()).unwrap();
    let ok = p.probe(&ProbeTarget::new("10.0.0.2", 64, 100)).unwrap();
    assert_eq!(
        ok.outcome,
        ProbeOutcome::Ok {
            rtt_seconds: 1.5e-5
        }
    );
    let bad = p.probe(&ProbeTarget::new("unreachable", 64, 100)).unwrap();
    assert_eq!(
        bad.outcome,
        ProbeOutcome::ConnectFailed {
            cause: "route".into()
        }
    );
}

static ALL_1_0: PluginTableV1 = {
    let mut t = PluginTableV1::of::<All>();
    t.abi_minor = 0;
    t
};

#[test]
fn probe_many_in_order_and_from_a_1_0_plugin() {
    let targets: Vec<ProbeTarget> = ["10.0.0.2", "unreachable", "10.0.0.3"]
        .iter()
        .map(|p| ProbeTarget::new(*p, 64, 100))
        .collect();
    // SAFETY: a static table.
    let old = unsafe { PluginLibrary::from_table(Path::new("in-process/all-1.0"), &ALL_1_0) };
    for l in [lib(), old.unwrap()] {
        let mut p = l.instantiate(PluginKind::Probe).unwrap();
        p.start(&ctx()).unwrap();
        let r = p.probe_many(&targets).unwrap();
        let peers: Vec<&str> = r.iter().map(|r| r.peer.as_str()).collect();
        assert_eq!(
            peers,
            ["10.0.0.2", "unreachable", "10.0.0.3"],
            "abi 1.{}",
            l.abi_minor
        );
        assert!(matches!(r[1].outcome, ProbeOutcome::ConnectFailed { .. }));
        assert!(matches!(r[2].outcome, ProbeOutcome::Ok { .. }));
    }
}

#[test]
fn remediation_kind_and_panic_is_caught() {
    let mut r = lib().instantiate(PluginKind::Remediation).unwrap();
    r.start(&ctx()).unwrap();
    let mut req = RemediationRequest {
        action: "log".into(),
        rule: "pfc-storm".into(),
        event: RemediationEvent::Firing,
        labels: Default::default(),
        samples: vec![],
        dry_run: true,
    };
    let out = r.remediate(&req).unwrap();
    assert_eq!((out.executed, out.message.as_str()), (false, "pfc-storm"));
    req.action = "boom".into();
    match r.remediate(&req) {
        Err(PluginError::Panicked(m)) => assert!(m.contains("remediation exploded"), "{m}"),
        other => panic!("expected a caught panic, got {other:?}"),
    }
    // The instance is still usable after a caught panic.
    req.action = "log".into();
    assert!(r.remediate(&req).is_ok());
}

#[test]
fn plugin_errors_cross_typed() {
    let mut c = lib().instantiate(PluginKind::Collector).unwrap();
    let mut bad = ctx();
    bad.options = serde_json::json!({"fail": true});
    assert_eq!(
        c.start(&bad),
        Err(PluginError::InvalidOptions("fail: not allowed".into()))
    );
}

#[test]
fn kinds_not_implemented_are_refused() {
    // SAFETY: a static table.
    let l = unsafe { PluginLibrary::from_table(Path::new("in-process/only"), &ONLY) }.unwrap();
    let err = l.instantiate(PluginKind::Probe).unwrap_err();
    assert!(
        err.to_string()
            .contains("does not implement the probe kind"),
        "{err}"
    );
    // Even an instance created for another kind cannot be driven as one.
    let mut c = l.instantiate(PluginKind::Collector).unwrap();
    assert!(matches!(c.observe(), Err(PluginError::Unsupported(_))));
}

#[test]
fn wrong_major_is_refused_naming_the_file() {
    #[repr(C)]
    struct Head {
        major: u32,
        minor: u32,
        size: usize,
    }
    static FUTURE: Head = Head {
        major: 2,
        minor: 0,
        size: std::mem::size_of::<Head>(),
    };
    // SAFETY: a static header; the host reads only the header before refusing.
    let err = unsafe {
        PluginLibrary::from_table(
            Path::new("/plugins/libfuture.so"),
            &FUTURE as *const Head as *const PluginTableV1,
        )
    }
    .unwrap_err();
    assert!(matches!(err, LoadError::AbiMismatch { found_major: 2, .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("/plugins/libfuture.so") && msg.contains("2.0"),
        "{msg}"
    );
}

static ALL_1_2: PluginTableV1 = {
    let mut t = PluginTableV1::of::<All>();
    t.abi_minor = 2;
    t
};

/// A flow's `path` and `flow_label` cross the ABI (1.3); a 1.2 plugin, which would answer
/// every flow of a peer with the first one's result, is not sent them.
#[test]
fn flows_cross_to_a_1_3_plugin_and_are_refused_for_a_1_2_one() {
    let mut flow = ProbeTarget::new("10.0.0.2", 64, 100);
    flow.path = 3;
    flow.flow_label = 0x3a7;
    let targets = [ProbeTarget::new("10.0.0.2", 64, 100), flow];
    let mut p = lib().instantiate(PluginKind::Probe).unwrap();
    p.start(&ctx()).unwrap();
    let r = p.probe_many(&targets).unwrap();
    assert_eq!(
        r[1].outcome,
        ProbeOutcome::Ok {
            rtt_seconds: f64::from(0x3a7u32) * 1e-6
        }
    );
    assert_ne!(r[0].outcome, r[1].outcome);
    // SAFETY: a static table.
    let old = unsafe { PluginLibrary::from_table(Path::new("in-process/all-1.2"), &ALL_1_2) };
    let mut p = old.unwrap().instantiate(PluginKind::Probe).unwrap();
    p.start(&ctx()).unwrap();
    let e = p.probe_many(&targets).unwrap_err();
    assert!(
        matches!(&e, PluginError::Unsupported(m) if m.contains("ABI 1.2, which has one flow per peer") && m.contains("all-1.2")),
        "{e}"
    );
    // One flow per peer still goes through.
    assert!(p.probe_many(&targets[..1]).is_ok());
}

static ALL_1_3: PluginTableV1 = {
    let mut t = PluginTableV1::of::<All>();
    t.abi_minor = 3;
    t
};

/// An RDMA CM target (`cm_port`, `tos`: ABI 1.4) is refused for a 1.3 plugin, which
/// would probe it over its side channel without a word, naming the plugin's ABI; a
/// side-channel target still goes through.
#[test]
fn cm_targets_are_refused_for_a_1_3_plugin() {
    let mut cm = ProbeTarget::new("10.0.0.2", 64, 100);
    cm.cm_port = 18517;
    // SAFETY: a static table.
    let old = unsafe { PluginLibrary::from_table(Path::new("in-process/all-1.3"), &ALL_1_3) };
    let mut p = old.unwrap().instantiate(PluginKind::Probe).unwrap();
    p.start(&ctx()).unwrap();
    for e in [
        p.probe_many(std::slice::from_ref(&cm)).unwrap_err(),
        p.probe(&cm).unwrap_err(),
    ] {
        assert!(
            matches!(&e, PluginError::Unsupported(m) if m.contains("ABI 1.3, which has no RDMA CM probes") && m.contains("all-1.3")),
            "{e}"
        );
    }
    assert!(p.probe(&ProbeTarget::new("10.0.0.2", 64, 100)).is_ok());
    // Both fields cross to a 1.4 plugin as JSON.
    cm.tos = Some(104);
    let j = serde_json::to_value(&cm).unwrap();
    assert_eq!(
        (j["cm_port"].as_u64(), j["tos"].as_u64()),
        (Some(18517), Some(104))
    );
    let back: ProbeTarget = serde_json::from_value(j).unwrap();
    assert_eq!(back, cm);
}

/// A 1.4 plugin's CM result says where the CM put the connection and which ToS it
/// carried (asked for, or the port's default); a side-channel result carries none.
#[test]
fn a_cm_probe_result_says_where_the_connection_went() {
    let mut p = lib().instantiate(PluginKind::Probe).unwrap();
    p.start(&ctx()).unwrap();
    let mut cm = ProbeTarget::new("10.0.0.2", 64, 100);
    cm.cm_port = 18517;
    let default = p.probe(&cm).unwrap();
    cm.tos = Some(96);
    let asked = p.probe_many(std::slice::from_ref(&cm)).unwrap();
    let side = p.probe(&ProbeTarget::new("10.0.0.2", 64, 100)).unwrap();
    let c = |r: &ProbeResult| r.cm.clone().map(|c| (c.device, c.port, c.tos, c.tos_set));
    assert_eq!(c(&default), Some(("mlx5_0".into(), 1, 106, false)));
    assert_eq!(c(&asked[0]), Some(("mlx5_0".into(), 1, 96, true)));
    assert_eq!(c(&side), None);
}

static ALL_1_1: PluginTableV1 = {
    let mut t = PluginTableV1::of::<All>();
    t.abi_minor = 1;
    t
};

/// `bandwidth` crosses the ABI as method 11 (1.2): a probe plugin that keeps the trait's
/// default answers unsupported, and the host says the plugin does not run bandwidth
/// tests; a 1.1 plugin is not asked, and the host says its ABI is too old.
#[test]
fn bandwidth_is_unsupported_by_default_and_for_a_1_1_plugin() {
    let req = BandwidthRequest {
        peer: "10.0.0.2".into(),
        op: BandwidthOp::Write,
        size: 65536,
        qps: 4,
        duration_ms: 1000,
        bidirectional: false,
        timeout_ms: 1000,
    };
    let mut p = lib().instantiate(PluginKind::Probe).unwrap();
    p.start(&ctx()).unwrap();
    let e = p.bandwidth(&req).unwrap_err();
    assert!(
        matches!(&e, PluginError::Unsupported(m) if m.contains("does not run bandwidth tests")),
        "{e}"
    );
    // SAFETY: a static table.
    let old = unsafe { PluginLibrary::from_table(Path::new("in-process/all-1.1"), &ALL_1_1) };
    let mut p = old.unwrap().instantiate(PluginKind::Probe).unwrap();
    p.start(&ctx()).unwrap();
    let e = p.bandwidth(&req).unwrap_err();
    assert!(
        matches!(&e, PluginError::Unsupported(m) if m.contains("ABI 1.1, which has no bandwidth tests")),
        "{e}"
    );
}
