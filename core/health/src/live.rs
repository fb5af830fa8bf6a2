//! What a fixture tree does not have: the kernel log (the doctor's check), the queue pairs
//! (RDMA netlink) and a running agent's rules (its `/rules`).

use std::collections::BTreeMap;

use rocewatch_plugin_api::Inventory;
use serde::Deserialize;

use super::config::HealthConfig;
use super::finding::{Finding, Status};
use super::options::Options;

/// The doctor's kernel-log check over `[health] kernel_log_window`: a failing message
/// (firmware command timeout, health compromised, PCIe slot power) is unhealthy, the
/// others warn; a log that could not be read is skipped with why.
pub fn kernel_log(opts: &Options, cfg: &HealthConfig) -> Vec<Finding> {
    rocewatch_doctor::kernel_log_checks(
        &opts.sysfs_root,
        &opts.kernel_log,
        cfg.kernel_log_window,
        rocewatch_klog::text::Clock::of_procfs(&opts.procfs_root),
    )
    .into_iter()
    .map(|c| finding_of("kernel-log", c.evidence.clone(), c))
    .collect()
}

/// What the kernel-log check reads: the kernel-log plugin's `path`, else the kernel's.
pub fn kernel_log_source(opts: &Options) -> String {
    match opts.kernel_log.get("path").and_then(|p| p.as_str()) {
        Some(p) => format!("the kernel log {p}"),
        None => "the kernel log (/dev/kmsg, or as [plugins.builtin.kernel-log] says)".into(),
    }
}

/// The userspace verbs stack (the doctor's checks): rdma-core and each device's
/// provider, its uverbs device file openable by every user (the kernel makes it 0666), the
/// RDMA CM device. A missing provider or device file keeps jobs off the host; a missing
/// RDMA CM device warns (only CM applications need it). The workload's locked-memory
/// limit is the job's, set by the scheduler: `rocewatch doctor --pid` checks it.
///
/// `/` (the default `rootfs`) is taken to go only with this file system's own `/sys`: a
/// sysfs elsewhere (a fixture tree, or the host's bound at `/host/sys` in a pod) with `/`
/// would judge one system's devices by another's files (a pod's image has no rdma-core),
/// so the check says skipped and asks for the root that goes with it.
pub fn userspace(opts: &Options, cfg: &HealthConfig, inv: &Inventory) -> Vec<Finding> {
    let own_sys = opts.live
        && std::fs::canonicalize(&opts.sysfs_root).is_ok_and(|p| p == std::path::Path::new("/sys"));
    if cfg.rootfs == std::path::Path::new("/") && !own_sys {
        return vec![Finding::host(
            "userspace",
            Status::Skipped,
            format!(
                "{} is not this file system's /sys: give --rootfs or [health] rootfs, the file system that goes with it (/host in a pod that mounts the host's / there)",
                opts.sysfs_root.display()
            ),
        )];
    }
    if inv.devices.is_empty() {
        return vec![Finding::host(
            "userspace",
            Status::Skipped,
            "no RDMA device",
        )];
    }
    use rocewatch_doctor::userspace as us;
    let roots = us::Roots {
        sys: &opts.sysfs_root,
        rootfs: &cfg.rootfs,
        proc: &opts.procfs_root,
    };
    // Nobody in particular: the device files must be open to every user.
    let everyone = us::User {
        name: "every user".into(),
        uid: u32::MAX - 1,
        gids: Vec::new(),
    };
    us::provider_checks(&roots, inv)
        .into_iter()
        .chain(us::device_file_checks(&roots, inv, &everyone))
        .map(|c| finding_of("userspace", format!("{}: {}", c.check, c.evidence), c))
        .collect()
}

/// A doctor check as a finding of `check` saying `what`: a failure keeps jobs off the
/// host, a warning weighs nothing, a skip or an information is skipped.
fn finding_of(check: &'static str, what: String, c: rocewatch_doctor::Check) -> Finding {
    use rocewatch_doctor::Status as D;
    let status = match c.status {
        D::Pass => Status::Ok,
        D::Warn => Status::Warning,
        D::Fail => Status::Unhealthy,
        D::Skip | D::Info => Status::Skipped,
    };
    let mut f = Finding::host(check, status, what);
    f.device = (!c.subject.is_empty()).then_some(c.subject);
    f
}

/// The state the kernel names ERR (`enum ib_qp_state`: IB_QPS_ERR = 6).
const QPS_ERR: u8 = 6;

/// Queue pairs left in the error state, per device and port, with the processes holding
/// them. A QP in ERR moves no data: every rank of a job using it waits.
pub fn qps(opts: &Options, inv: &Inventory) -> Vec<Finding> {
    if !opts.live {
        return vec![Finding::host(
            "qps",
            Status::Skipped,
            "queue pairs are read over RDMA netlink, on the live host only",
        )];
    }
    if inv.devices.is_empty() {
        return vec![Finding::host("qps", Status::Skipped, "no RDMA device")];
    }
    let unknown = |what: String| vec![Finding::host("qps", Status::Unknown, what)];
    let mut nl = match rocewatch_netlink::rdma::RdmaNetlink::open() {
        Ok(n) => n,
        Err(e) => return unknown(format!("RDMA netlink: {e}")),
    };
    let devices = match nl.devices() {
        Ok(d) => d,
        Err(e) => return unknown(format!("RDMA netlink devices: {e}")),
    };
    let ours: Vec<(u32, String)> = devices
        .iter()
        .filter(|d| inv.devices.iter().any(|i| i.name == d.name))
        .map(|d| (d.index, d.name.clone()))
        .collect();
    let dumped = left_in_err(
        &ours,
        &mut |dev| nl.res_qps(dev).map_err(|e| e.to_string()),
        &|| std::thread::sleep(ERR_GRACE),
    );
    let mut out = Vec::new();
    for ((_, name), dumped) in ours.iter().zip(dumped) {
        let (all, left) = match dumped {
            Ok(q) => q,
            Err(e) => {
                let what = format!("QP dump: {e}");
                out.push(Finding::at("qps", Status::Unknown, name, None, None, what));
                continue;
            }
        };
        if left.is_empty() {
            let what = format!("{all} QPs, none left in ERR");
            out.push(Finding::at("qps", Status::Ok, name, None, None, what));
        }
        let mut by_port: BTreeMap<Option<u32>, Vec<String>> = BTreeMap::new();
        for q in &left {
            let holder = match (&q.pid, &q.kern_name) {
                (Some(p), _) => format!("QP {} pid {p}", q.lqpn),
                (None, Some(k)) => format!("QP {} {k}", q.lqpn),
                (None, None) => format!("QP {}", q.lqpn),
            };
            by_port.entry(q.port).or_default().push(holder);
        }
        for (port, holders) in by_port {
            let n = holders.len();
            let what = format!(
                "{n} QP{} left in ERR: {}",
                if n == 1 { "" } else { "s" },
                holders.join(", ")
            );
            out.push(Finding::at(
                "qps",
                Status::Unhealthy,
                name,
                port,
                None,
                what,
            ));
        }
    }
    out
}

/// The host's quarantine (the state directory's `quarantine.json`): unhealthy while in
/// force, whatever the rest says. Read to judge, not to act on, so also in a state
/// directory the agent's own user owns; a file there that cannot be read or is no
/// quarantine record counts as one (fail closed).
pub fn quarantine(opts: &Options) -> Vec<Finding> {
    let file = rocewatch_runtime::quarantine::QuarantineFile::in_dir(&opts.state_dir);
    vec![match file.read_status() {
        Ok(None) => Finding::host("quarantine", Status::Ok, "not in quarantine"),
        Ok(Some(q)) => Finding::host(
            "quarantine",
            Status::Unhealthy,
            format!("{} ({} since {})", q.reason, q.origin, q.since),
        ),
        Err(e) => Finding::host(
            "quarantine",
            Status::Unhealthy,
            format!("{e}: treated as in quarantine"),
        ),
    }]
}

/// How long a QP seen in ERR is given to leave it (a job's teardown flushes its QPs
/// through ERR on their way to being destroyed).
const ERR_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

type Qps = Vec<rocewatch_netlink::rdma_res::ResQp>;

/// Each device's QP count and its QPs in ERR both now and after `grace` (the same QP
/// numbers): only those were left there. Every device is dumped, then one grace for
/// them all, then the devices with a QP in ERR dumped again (a grace each would be
/// 500 ms per device: ten past node-problem-detector's 5 s).
fn left_in_err(
    devices: &[(u32, String)],
    dump: &mut dyn FnMut(u32) -> Result<Qps, String>,
    grace: &dyn Fn(),
) -> Vec<Result<(usize, Qps), String>> {
    let first: Vec<Result<(usize, Vec<u32>), String>> = devices
        .iter()
        .map(|(dev, _)| {
            let qps = dump(*dev)?;
            let err = qps
                .iter()
                .filter(|q| q.state.0 == QPS_ERR)
                .map(|q| q.lqpn)
                .collect();
            Ok((qps.len(), err))
        })
        .collect();
    if first
        .iter()
        .any(|f| f.as_ref().is_ok_and(|(_, err)| !err.is_empty()))
    {
        grace();
    }
    devices
        .iter()
        .zip(first)
        .map(|((dev, _), first)| {
            let (all, err) = first?;
            if err.is_empty() {
                return Ok((all, Vec::new()));
            }
            let left = dump(*dev)?
                .into_iter()
                .filter(|q| q.state.0 == QPS_ERR && err.contains(&q.lqpn))
                .collect();
            Ok((all, left))
        })
        .collect()
}

/// One rule of the agent's `/rules`.
#[derive(Debug, Deserialize)]
struct RuleState {
    rule: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    phase: String,
    #[serde(default)]
    value: Option<f64>,
    /// `critical`, `warning` or `info` (the rule's `severity`); an older agent's rows have
    /// none, and count as critical.
    #[serde(default)]
    severity: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Rules {
    rules: Vec<RuleState>,
}

/// A running agent's firing rules, from its `/rules`: a critical one is unhealthy unless
/// `ignore_rules` names it, a warning or info one warns ([`rule_status`]). An agent that
/// does not answer is said and weighs nothing.
pub async fn agent(cfg: &HealthConfig) -> Vec<Finding> {
    let Some(base) = &cfg.agent else {
        return vec![Finding::host(
            "agent",
            Status::Skipped,
            "no [health] agent: a running agent's rules are not read",
        )];
    };
    let url = format!("{}/rules", base.trim_end_matches('/'));
    match fetch(&url, cfg.agent_timeout).await {
        Ok(rules) => judge_rules(&url, &rules, cfg),
        Err(why) => vec![Finding::host(
            "agent",
            Status::Warning,
            format!("{url}: {why} (its rules are not read; health goes on without them)"),
        )],
    }
}

/// The most of a `/rules` body read: an agent's rules with thousands of firing series
/// fit many times over; whatever answers on the agent's port cannot make `health` hold
/// more (node-problem-detector's pod is limited to 128 Mi).
const RULES_MAX: usize = 4 << 20;

/// The agent's `/rules`, within `timeout` (the whole exchange, body included) and
/// [`RULES_MAX`] bytes.
async fn fetch(url: &str, timeout: std::time::Duration) -> Result<Rules, String> {
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .map_err(|e| e.to_string())?;
    let mut resp = client.get(url).send().await.map_err(|e| e.to_string())?;
    if !resp.status().is_success() {
        return Err(format!("answered {}", resp.status()));
    }
    let too_big = || {
        format!(
            "a body of more than {} MiB: not the agent's /rules",
            RULES_MAX >> 20
        )
    };
    if resp.content_length().is_some_and(|n| n > RULES_MAX as u64) {
        return Err(too_big());
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > RULES_MAX {
            return Err(too_big());
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| format!("not the agent's /rules: {e}"))
}

/// The default rule on `carrier_changes`: it also fires for an administrator's two `ip
/// link set down/up` and a driver's reconfiguration (`ethtool -L/-G` on mlx5), on every
/// port, mlx5's included (configs/rules.toml).
const CARRIER_RULE: &str = "link-carrier-flapping";

/// How a firing rule weighs, and why when it is not its severity's weight: a rule
/// `ignore_rules` names, and one of severity `warning` or `info`, warn; a critical one is
/// unhealthy, but for [`CARRIER_RULE`] where health's own `link` check runs: that check
/// is the gate for flaps (mlx5's PHY counter where the port has it, an InfiniBand port's
/// `link_downed`, else the same carrier changes, over `flap_window` against
/// `max_flaps`), and the rule would drain a node for a toggle that check sees through.
fn rule_status(r: &RuleState, cfg: &HealthConfig) -> (Status, Option<String>) {
    if cfg.ignore_rules.contains(&r.rule) {
        return (Status::Warning, None);
    }
    match r.severity.as_deref() {
        Some(s @ ("warning" | "info")) => return (Status::Warning, Some(format!("severity {s}"))),
        _ if r.rule == CARRIER_RULE && cfg.runs(super::config::CheckName::Link) => {
            let why = "a warning here: health's link check judges the flaps";
            return (Status::Warning, Some(why.into()));
        }
        _ => {}
    }
    (Status::Unhealthy, None)
}

/// Findings of the rules an agent reported.
fn judge_rules(url: &str, rules: &Rules, cfg: &HealthConfig) -> Vec<Finding> {
    let firing: Vec<&RuleState> = rules.rules.iter().filter(|r| r.phase == "firing").collect();
    if firing.is_empty() {
        return vec![Finding::host(
            "agent",
            Status::Ok,
            format!("{url}: {} rule series, none firing", rules.rules.len()),
        )];
    }
    firing
        .into_iter()
        .map(|r| {
            let (status, why) = rule_status(r, cfg);
            let mut others: Vec<String> = r
                .labels
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "rdma.device" | "rdma.port" | "rdma.netdev"))
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            others.extend(why);
            let value = r.value.map(|v| format!(" at {v}")).unwrap_or_default();
            let what = match others.is_empty() {
                true => format!("rule {} firing{value}", r.rule),
                false => format!("rule {} firing{value} ({})", r.rule, others.join(",")),
            };
            let mut f = Finding::host("agent", status, what);
            f.device = r.labels.get("rdma.device").cloned();
            f.port = r.labels.get("rdma.port").and_then(|p| p.parse().ok());
            f.netdev = r.labels.get("rdma.netdev").cloned();
            f
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's sysfs bound into a pod (`/host/sys`, live) with `[health] rootfs` left
    /// at `/`: `/` is the container's, not the host's; its rdma-core says nothing of the
    /// host (node-problem-detector judged its own image so).
    #[test]
    fn a_host_sysfs_elsewhere_is_not_judged_with_this_root() {
        let inv = Inventory {
            devices: vec![rocewatch_plugin_api::Device {
                name: "mlx5_0".into(),
                ..Default::default()
            }],
        };
        let opts = |sysfs: &str| Options {
            sysfs_root: sysfs.into(),
            live: true,
            kernel_log: serde_json::json!({}),
            devices: Default::default(),
            state_dir: "/nonexistent".into(),
            procfs_root: "/proc".into(),
            rail_rows: Ok(None),
        };
        let f = userspace(&opts("/host/sys"), &HealthConfig::default(), &inv);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].status, Status::Skipped, "{f:?}");
        assert!(f[0].what.contains("[health] rootfs"), "{f:?}");
        // Given the root that goes with it, it is judged.
        let cfg = HealthConfig {
            rootfs: "/nonexistent/host".into(),
            ..Default::default()
        };
        let f = userspace(&opts("/host/sys"), &cfg, &inv);
        assert!(f.iter().any(|f| f.status == Status::Unhealthy), "{f:?}");
    }

    fn qp(dev: u32, lqpn: u32, state: u8) -> rocewatch_netlink::rdma_res::ResQp {
        use rocewatch_netlink::rdma_res::{QpState, QpType, ResQp};
        ResQp {
            dev_index: dev,
            dev_name: format!("mlx5_{dev}"),
            port: Some(1),
            lqpn,
            rqpn: None,
            qp_type: QpType::RC,
            state: QpState(state),
            pdn: None,
            sq_psn: None,
            rq_psn: None,
            pid: Some(100 + lqpn),
            kern_name: None,
        }
    }

    /// Ten devices with a QP in ERR: one grace for them all, not one each (ten times
    /// 500 ms is past node-problem-detector's 5 s).
    #[test]
    fn ten_devices_with_qps_in_err_wait_one_grace_together() {
        let devices: Vec<(u32, String)> = (0..10).map(|d| (d, format!("mlx5_{d}"))).collect();
        let graces = std::cell::Cell::new(0);
        let dumps = std::cell::Cell::new(0);
        let mut dump = |dev: u32| {
            dumps.set(dumps.get() + 1);
            // QP 1 stays in ERR, QP 2 leaves it (a job's teardown), QP 3 is RTS.
            let second = dumps.get() > 10;
            Ok(vec![
                qp(dev, 1, QPS_ERR),
                qp(dev, 2, if second { 0 } else { QPS_ERR }),
                qp(dev, 3, 3),
            ])
        };
        let got = left_in_err(&devices, &mut dump, &|| graces.set(graces.get() + 1));
        assert_eq!(graces.get(), 1, "one grace for every device");
        assert_eq!(dumps.get(), 20);
        for r in got {
            let (all, left) = r.unwrap();
            assert_eq!(all, 3);
            assert_eq!(left.iter().map(|q| q.lqpn).collect::<Vec<_>>(), vec![1]);
        }
    }

    /// Whatever answers on the agent's port may send a body without end (a 400 MB one
    /// took 446 MB of memory; node-problem-detector's pod has 128 Mi): it is read up to
    /// [`RULES_MAX`] and no further.
    #[tokio::test(flavor = "multi_thread")]
    async fn an_endless_rules_body_is_cut_at_its_bound() {
        use std::io::Write;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let served = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut req = Vec::new();
            let mut b = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = std::io::Read::read(&mut s, &mut b).unwrap();
                assert!(n > 0, "no request");
                req.extend_from_slice(&b[..n]);
            }
            let mut sent = 0usize;
            let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{\"rules\":[],\"x\":\"";
            s.write_all(head.as_bytes()).unwrap();
            let chunk = vec![b'A'; 1 << 16];
            while sent < 64 << 20 {
                match s.write_all(&chunk) {
                    Ok(()) => sent += chunk.len(),
                    Err(_) => return sent,
                }
            }
            let _ = s.write_all(b"\"}");
            sent
        });
        let cfg = HealthConfig {
            agent: Some(url),
            agent_timeout: std::time::Duration::from_millis(1500),
            ..Default::default()
        };
        let f = agent(&cfg).await;
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].status, Status::Warning, "{f:?}");
        assert!(f[0].what.contains("more than 4 MiB"), "{f:?}");
        let sent = served.join().unwrap();
        assert!(sent < 64 << 20, "the whole body was read: {sent} bytes");
    }

    #[test]
    fn firing_rules_are_unhealthy_unless_ignored_and_name_their_port() {
        let body = r#"{"rules":[
            {"rule":"pfc_storm","metric":"rdma.pfc.storm_events","condition":"rate > 0","labels":{"rdma.device":"mlx5_0","rdma.port":"1","rdma.priority":"3"},"phase":"firing","value":12.5,"for_seconds":40,"severity":"critical"},
            {"rule":"noisy","labels":{},"phase":"firing","value":1},
            {"rule":"quiet","labels":{"rdma.device":"mlx5_1"},"phase":"inactive"}]}"#;
        let rules: Rules = serde_json::from_str(body).unwrap();
        let cfg = HealthConfig {
            ignore_rules: vec!["noisy".into()],
            ..Default::default()
        };
        let f = judge_rules("http://127.0.0.1:9464/rules", &rules, &cfg);
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].status, Status::Unhealthy);
        assert_eq!(f[0].subject(), "mlx5_0/1");
        assert_eq!(f[0].what, "rule pfc_storm firing at 12.5 (rdma.priority=3)");
        assert_eq!(f[1].status, Status::Warning);
        let none = Rules { rules: vec![] };
        assert_eq!(judge_rules("u", &none, &cfg)[0].status, Status::Ok);
    }

    /// A rule's severity weighs: a warning rule (the optics rules) warns, a critical one
    /// drains; link-carrier-flapping (an administrator's two ip link set down/up fire it)
    /// warns where health's own link check judges the flaps.
    #[test]
    fn a_warning_rule_and_link_carrier_flapping_warn_a_critical_rule_drains() {
        let body = r#"{"rules":[
            {"rule":"optics-dark-lane","labels":{"rdma.device":"mlx5_0"},"phase":"firing","severity":"warning"},
            {"rule":"qp-errors","labels":{},"phase":"firing","severity":"info"},
            {"rule":"link-carrier-flapping","labels":{"rdma.device":"mlx5_0"},"phase":"firing","severity":"critical"},
            {"rule":"link-flapping","labels":{"rdma.device":"mlx5_0"},"phase":"firing","severity":"critical"}]}"#;
        let rules: Rules = serde_json::from_str(body).unwrap();
        let f = judge_rules("u", &rules, &HealthConfig::default());
        let status: Vec<Status> = f.iter().map(|f| f.status).collect();
        assert_eq!(
            status,
            [
                Status::Warning,
                Status::Warning,
                Status::Warning,
                Status::Unhealthy
            ],
            "{f:?}"
        );
        assert!(f[0].what.contains("severity warning"), "{f:?}");
        assert!(f[2].what.contains("health's link check"), "{f:?}");
        // Without health's own link check, the rule is the gate.
        let cfg = HealthConfig {
            checks: Some(vec![crate::CheckName::Agent]),
            ..Default::default()
        };
        assert_eq!(judge_rules("u", &rules, &cfg)[2].status, Status::Unhealthy);
    }
}
