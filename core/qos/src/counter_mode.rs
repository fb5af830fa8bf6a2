//! Per-QP counters for the resources collector (`[plugins.builtin.resources.options]
//! qp_counters = true`): each port's QP counter mode set to auto per QP type and process
//! while `rocewatch run` runs, and put back as found when it ends. It changes the
//! device's state, so it is audited like a QoS change: the record announcing a change is
//! on disk before the change, and a change that cannot be audited is not made.
//!
//! What was found is also written to the state directory (`qp-counter-modes.json`)
//! before anything changes: an agent killed before it could put the modes back (SIGKILL,
//! OOM, a stop timeout) leaves it behind, and the next one puts back what the first found,
//! not the auto mode the first one set (or, if `qp_counters` is off by then, puts them
//! back at its start). A reload (SIGHUP) keeps the modes set; turning `qp_counters` off in
//! the reloaded file puts them back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::qp_mode;
use rocewatch_netlink::rdma::RdmaNetlink;
use rocewatch_netlink::rdma_stat::{CounterMode, QpCounterMode};
use rocewatch_netlink::NetlinkError;
use rocewatch_sysfs::inventory::{DeviceFilter, DeviceSelection};
use serde::{Deserialize, Serialize};

use rocewatch_runtime::audit::{ActionOutcome, AuditKind, AuditLog, AuditRecord, Decision};

/// What the audit records name as their origin.
const ORIGIN: &str = "resources.qp_counters";
/// ... and as their action.
const ACTION: &str = "qp_counter_mode";
/// The file, in the state directory, of the modes found before the agent changed them.
const STATE_FILE: &str = "qp-counter-modes.json";

/// Whether the resources collector's options ask for per-QP counters.
pub fn wanted(options: Option<&serde_json::Value>) -> bool {
    options.is_some_and(|o| o.get("qp_counters") == Some(&serde_json::Value::Bool(true)))
}

/// A port's mode as found, as written to the state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Found {
    device: String,
    port: u32,
    /// Auto mode with `mask`, or not auto (put back as "auto off").
    auto: bool,
    mask: u32,
}

impl Found {
    fn of(m: &QpCounterMode) -> Found {
        Found {
            device: m.dev_name.clone(),
            port: m.port,
            auto: m.mode == CounterMode::Auto,
            mask: m.auto_mask,
        }
    }

    /// Whether this is a mode rocewatch may put a port back to: auto with a mask of the
    /// kernel's criteria only (`enum rdma_nl_counter_mask` in
    /// `include/uapi/rdma/rdma_netlink.h`: QP type, PID), or auto off (mask 0).
    fn is_valid_mode(&self) -> bool {
        if self.auto {
            self.mask != 0 && self.mask & !qp_mode::MASK == 0
        } else {
            self.mask == 0
        }
    }

    fn describe(&self) -> String {
        if self.auto {
            qp_mode::describe(&QpCounterMode {
                dev_index: 0,
                dev_name: self.device.clone(),
                port: self.port,
                mode: CounterMode::Auto,
                auto_mask: self.mask,
            })
        } else {
            "auto off".into()
        }
    }
}

/// The ports changed, to put back.
pub struct CounterModes {
    found: Vec<Found>,
    audit: AuditLog,
    state: PathBuf,
}

/// The changes not put back yet: taken by [`restore_pending`] when `run` ends, or on the
/// way out when a second signal ends the process at once.
static PENDING: std::sync::Mutex<Option<CounterModes>> = std::sync::Mutex::new(None);

fn decision(device: &str, port: u32) -> Decision {
    Decision::new(BTreeMap::from([
        (
            rocewatch_metrics::ATTR_DEVICE.to_string(),
            device.to_string(),
        ),
        (rocewatch_metrics::ATTR_PORT.to_string(), port.to_string()),
    ]))
}

fn record(
    kind: AuditKind,
    detail: String,
    outcome: Option<ActionOutcome>,
    started: Option<Instant>,
) -> AuditRecord {
    AuditRecord::change(kind, ORIGIN, ACTION, detail, outcome, started)
}

/// `EBUSY`: counters are still bound to QPs (the kernel refuses a new auto mode then).
fn busy(e: &NetlinkError) -> bool {
    matches!(e, NetlinkError::Kernel { errno, .. } if *errno == libc::EBUSY)
}

/// Sets per-QP counters as the resources collector's settings ask (`options`: `None` when
/// it is disabled), for `rocewatch run` (blocking: netlink and the audit log's fsync).
/// Wanted and not set yet: every port of the devices `devices` selects goes to auto mode
/// (type,pid). Wanted and already set (a reload): nothing. Not wanted (any more), or
/// `sysfs_root` is not this host's: what was set is put back.
pub fn apply(
    options: Option<&serde_json::Value>,
    sysfs_root: &std::path::Path,
    devices: &DeviceSelection,
    audit: AuditLog,
) {
    let live = rocewatch_sysfs::read::is_sysfs(sysfs_root);
    let state = rocewatch_runtime::audit::state_dir().join(STATE_FILE);
    if !(live && wanted(options)) {
        restore_pending();
        // A killed agent's changes, when per-QP counters are no longer asked for.
        let found = if live {
            left_behind(&state)
        } else {
            Vec::new()
        };
        if !found.is_empty() {
            tracing::warn!(
                "resources: {} lists QP counter modes an agent changed and did not put back: putting them back",
                state.display()
            );
            CounterModes {
                found,
                audit,
                state,
            }
            .restore();
        }
        return;
    }
    if PENDING.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
        return;
    }
    let filter = match DeviceFilter::new(devices) {
        Ok(f) => f,
        Err(e) => {
            tracing::error!("resources: qp_counters: {e}; the QP counter modes are not changed");
            return;
        }
    };
    keep_pending(enable(audit, &filter, state));
}

/// Keeps `m` to be put back by [`restore_pending`], also on a fast exit.
fn keep_pending(m: CounterModes) {
    if m.found.is_empty() {
        return;
    }
    *PENDING.lock().unwrap_or_else(|p| p.into_inner()) = Some(m);
    rocewatch_runtime::util::signals::before_fast_exit(restore_pending);
}

/// Puts back what was set, once (the first caller does it; a second one waits until it
/// is done, so a fast exit does not cut a putting back short). Blocking.
pub fn restore_pending() {
    let mut pending = PENDING.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = pending.take() {
        m.restore();
    }
}

/// The modes a previous agent found and did not put back, from the state file: never
/// through a link, as root only from a file root wrote in a directory only root can
/// write, and only modes rocewatch sets (anything else is refused, said with the file).
/// Which ports they are for is checked against the devices when they are put back.
fn left_behind(state: &Path) -> Vec<Found> {
    let bytes = match rocewatch_runtime::util::fs::read_trusted(state) {
        Ok(b) => b,
        Err(e) if e.is_not_found() => return Vec::new(),
        Err(e) => {
            tracing::error!("resources: {e}; the QP counter modes it lists are not put back");
            return Vec::new();
        }
    };
    let found: Vec<Found> = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        tracing::error!("resources: {}: {e}; ignored", state.display());
        Vec::new()
    });
    found
        .into_iter()
        .filter(|f| {
            let ok = f.is_valid_mode();
            if !ok {
                tracing::error!(
                    "resources: {}: {}/{}: auto={} mask={:#x} is not a QP counter mode rocewatch sets: refused, not put back",
                    state.display(),
                    f.device,
                    f.port,
                    f.auto,
                    f.mask
                );
            }
            ok
        })
        .collect()
}

/// The state file as created (mode, less the umask): root's, for root to read back.
const STATE_MODE: u32 = 0o600;

fn write_state(state: &Path, found: &[Found]) -> std::io::Result<()> {
    if found.is_empty() {
        // unlink removes a link itself, never what it points at.
        return match std::fs::remove_file(state) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    rocewatch_runtime::util::fs::write_atomic(
        state,
        &serde_json::to_vec(found).expect("plain data"),
        STATE_MODE,
    )?;
    Ok(())
}

/// The netlink index of the port `f` names when it is a port of this host's RDMA
/// devices (`devices`: name to index and port count); else why it is refused.
fn port_of(f: &Found, devices: &BTreeMap<String, (u32, u32)>) -> Result<u32, String> {
    match devices.get(&f.device) {
        None => Err(format!("{} is not an RDMA device of this host", f.device)),
        Some(&(_, ports)) if f.port == 0 || f.port > ports => Err(format!(
            "{} has no port {} (ports 1 to {ports})",
            f.device, f.port
        )),
        Some(&(index, _)) => Ok(index),
    }
}

/// Sets every port of the selected devices to auto mode (type,pid), audited.
fn enable(audit: AuditLog, filter: &DeviceFilter, state: PathBuf) -> CounterModes {
    let mut out = CounterModes {
        found: Vec::new(),
        audit,
        state,
    };
    let fail = |e: &dyn std::fmt::Display| {
        tracing::error!("resources: qp_counters: {e}; the QP counter modes are not changed");
    };
    if let Err(e) = out.audit.prepare() {
        fail(&e);
        return out;
    }
    let mut nl = match RdmaNetlink::open() {
        Ok(nl) => nl,
        Err(e) => return (fail(&e), out).1,
    };
    let devices = match nl.devices() {
        Ok(d) => d,
        Err(e) => return (fail(&e), out).1,
    };
    let earlier = left_behind(&out.state);
    // Read every port's mode first: what to put back, on disk before any change.
    let mut plan: Vec<(u32, Found, Option<Found>)> = Vec::new();
    for d in devices.iter().filter(|d| filter.allows(&d.name)) {
        for port in 1..=d.ports {
            match nl.qp_counter_mode(d.index, port) {
                Ok(m) => {
                    let before = earlier
                        .iter()
                        .find(|f| f.device == d.name && f.port == port)
                        .cloned();
                    plan.push((d.index, Found::of(&m), before));
                }
                Err(e) => tracing::warn!(
                    "resources: {}/{port}: the QP counter mode cannot be read ({e}); no per-QP counters there",
                    d.name
                ),
            }
        }
    }
    // A port a previous agent left in auto mode goes back to what that agent found.
    let to_restore: Vec<Found> = plan
        .iter()
        .map(|(_, now, before)| before.clone().unwrap_or_else(|| now.clone()))
        .collect();
    if let Err(e) = write_state(&out.state, &to_restore) {
        fail(&format!("{}: {e}", out.state.display()));
        return out;
    }
    for ((index, now, before), found) in plan.into_iter().zip(to_restore) {
        let dec = decision(&now.device, now.port);
        let link = format!("{}/{}", now.device, now.port);
        if now.auto && now.mask & qp_mode::MASK == qp_mode::MASK {
            if let Some(b) = before {
                // Ours, from an agent that stopped without putting it back.
                let _ = out.audit.append_to(
                    &dec,
                    record(
                        AuditKind::Result,
                        format!("{link}: auto type,pid was left by an agent that stopped without putting it back; it goes back to {} at stop", b.describe()),
                        Some(ActionOutcome::Ok),
                        None,
                    ),
                    true,
                );
                out.found.push(found);
            } else {
                tracing::info!("resources: {link}: QP counters already in auto mode (type,pid)");
            }
            continue;
        }
        let was = now.describe();
        let detail = format!(
            "rdma statistic qp set link {link} auto type,pid on (was {was}; put back when the agent stops)"
        );
        if let Err(e) =
            out.audit
                .append_to(&dec, record(AuditKind::Executing, detail, None, None), true)
        {
            tracing::error!(
                "resources: {link}: the audit log {} cannot be written ({e}): the QP counter mode is not changed",
                out.audit.path().display()
            );
            continue;
        }
        let t = Instant::now();
        let r = nl.set_qp_counter_auto(index, now.port, qp_mode::MASK);
        let msg = match &r {
            Ok(()) => {
                tracing::warn!("resources: {link}: QP counter mode set to auto type,pid (was {was}); it is put back when the agent stops");
                format!("auto type,pid (was {was})")
            }
            Err(e) if busy(e) => {
                tracing::warn!("resources: {link}: the QP counter mode cannot change while counters are bound to QPs ({e}); per-QP counters as they are");
                format!("busy: counters are bound to QPs ({e})")
            }
            Err(e) => {
                tracing::warn!("resources: {link}: the driver refuses per-QP counters ({e}); the resource counts go on without them");
                format!("refused: {e}")
            }
        };
        let outcome = if r.is_ok() {
            ActionOutcome::Ok
        } else {
            ActionOutcome::Error
        };
        let _ = out.audit.append_to(
            &dec,
            record(AuditKind::Result, msg, Some(outcome), Some(t)),
            false,
        );
        if r.is_ok() {
            out.found.push(found);
        }
    }
    // Only the ports changed are left to put back.
    if let Err(e) = write_state(&out.state, &out.found) {
        tracing::error!("resources: {}: {e}", out.state.display());
    }
    out
}

impl CounterModes {
    /// Puts every changed port back as it was found, audited with the mode the kernel
    /// then reports (auto off with counters still bound is `manual` until their QPs
    /// close). Blocking.
    fn restore(self) {
        let mut nl = match RdmaNetlink::open() {
            Ok(nl) => nl,
            Err(e) => {
                tracing::error!("resources: the QP counter modes cannot be put back: {e}; {} keeps them for the next start", self.state.display());
                return;
            }
        };
        let devices: BTreeMap<String, (u32, u32)> = nl
            .devices()
            .map(|d| {
                d.into_iter()
                    .map(|d| (d.name, (d.index, d.ports)))
                    .collect()
            })
            .unwrap_or_default();
        let mut left = Vec::new();
        for f in self.found {
            let dec = decision(&f.device, f.port);
            let link = format!("{}/{}", f.device, f.port);
            let dev_index = match port_of(&f, &devices) {
                Ok(i) => i,
                Err(why) => {
                    // Gone (driver reloaded, hot-unplugged: its new self starts as booted),
                    // or never a port of this host: nothing to put back.
                    let _ = self.audit.append_to(
                        &dec,
                        record(
                            AuditKind::Result,
                            format!("{link}: {why}: nothing to put back"),
                            Some(ActionOutcome::Ok),
                            None,
                        ),
                        false,
                    );
                    continue;
                }
            };
            let saved = QpCounterMode {
                dev_index,
                dev_name: f.device.clone(),
                port: f.port,
                mode: if f.auto {
                    CounterMode::Auto
                } else {
                    CounterMode::None
                },
                auto_mask: f.mask,
            };
            let was = f.describe();
            // Putting back what the agent changed goes ahead even if it cannot be
            // audited: leaving the change in place would be the surprise.
            let _ = self.audit.append_to(
                &dec,
                record(
                    AuditKind::Executing,
                    format!("put the QP counter mode of {link} back to {was}"),
                    None,
                    None,
                ),
                true,
            );
            let t = Instant::now();
            let r = nl.restore_qp_counter_mode(&saved);
            let (outcome, msg) = match (&r, nl.qp_counter_mode(dev_index, f.port)) {
                (Ok(()), Ok(now)) if now.mode == CounterMode::Manual => (
                    ActionOutcome::Ok,
                    "auto off; the kernel reports manual: counters are still bound to QPs, which keep them until they close".to_string(),
                ),
                (Ok(()), Ok(now)) => (ActionOutcome::Ok, format!("back to {}", qp_mode::describe(&now))),
                (Ok(()), Err(_)) => (ActionOutcome::Ok, format!("back to {was}")),
                (Err(e), _) => (ActionOutcome::Error, e.to_string()),
            };
            if let Err(e) = &r {
                tracing::error!(
                    "resources: {link}: the QP counter mode could not be put back to {was}: {e}"
                );
                left.push(f);
            }
            let _ = self.audit.append_to(
                &dec,
                record(AuditKind::Result, msg, Some(outcome), Some(t)),
                false,
            );
        }
        if let Err(e) = write_state(&self.state, &left) {
            tracing::error!("resources: {}: {e}", self.state.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_explicit_true_asks_for_per_qp_counters() {
        assert!(wanted(Some(&serde_json::json!({"qp_counters": true}))));
        for o in [
            serde_json::json!({}),
            serde_json::json!({"qp_counters": false}),
            serde_json::json!({"qp_counters": "yes"}),
        ] {
            assert!(!wanted(Some(&o)), "{o}");
        }
        assert!(!wanted(None));
    }

    fn found(device: &str) -> Vec<Found> {
        vec![Found {
            device: device.into(),
            port: 1,
            auto: false,
            mask: 0,
        }]
    }

    #[test]
    fn the_state_file_is_never_written_through_a_link_planted_at_a_temporary_name() {
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let state = t.path().join(STATE_FILE);
        std::os::unix::fs::symlink(&victim, t.path().join("qp-counter-modes.tmp")).unwrap();
        write_state(&state, &found("mlx5_0")).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    }

    #[test]
    fn a_state_file_root_did_not_write_is_not_acted_on() {
        assert!(
            rocewatch_runtime::util::fs::strict(),
            "this test checks what root refuses: it needs root (CI runs as root)"
        );
        let t = tempfile::tempdir().unwrap();
        let state = t.path().join(STATE_FILE);
        // A link to a well-formed file elsewhere.
        let elsewhere = t.path().join("elsewhere.json");
        std::fs::write(&elsewhere, serde_json::to_vec(&found("mlx5_0")).unwrap()).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &state).unwrap();
        assert!(left_behind(&state).is_empty(), "followed a link");
        // A file another user owns.
        std::fs::remove_file(&state).unwrap();
        std::fs::copy(&elsewhere, &state).unwrap();
        let c = std::ffi::CString::new(state.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: chown of a file in our temporary directory; the result is checked.
        assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);
        assert!(left_behind(&state).is_empty(), "trusted user nobody's file");
    }

    #[test]
    fn only_modes_rocewatch_sets_and_ports_of_this_host_are_put_back() {
        let t = tempfile::tempdir().unwrap();
        let state = t.path().join(STATE_FILE);
        let f = |device: &str, port: u32, auto: bool, mask: u32| Found {
            device: device.into(),
            port,
            auto,
            mask,
        };
        let listed = vec![
            f("mlx5_0", 1, false, 0),
            f("mlx5_0", 2, true, qp_mode::MASK),
            f("mlx5_1", 1, true, 1),
            f("mlx5_1", 1, true, 0),
            f("mlx5_1", 1, true, 1 << 2),
            f("mlx5_1", 1, false, 2),
        ];
        std::fs::write(&state, serde_json::to_vec(&listed).unwrap()).unwrap();
        assert_eq!(left_behind(&state), listed[..3].to_vec());
        let devices = BTreeMap::from([("mlx5_0".to_string(), (3, 2))]);
        assert_eq!(port_of(&listed[0], &devices), Ok(3));
        assert_eq!(port_of(&listed[1], &devices), Ok(3));
        assert_eq!(
            port_of(&f("mlx5_0", 3, false, 0), &devices).unwrap_err(),
            "mlx5_0 has no port 3 (ports 1 to 2)"
        );
        assert_eq!(
            port_of(&f("mlx5_0", 0, false, 0), &devices).unwrap_err(),
            "mlx5_0 has no port 0 (ports 1 to 2)"
        );
        assert_eq!(
            port_of(&listed[2], &devices).unwrap_err(),
            "mlx5_1 is not an RDMA device of this host"
        );
    }

    proptest::proptest! {
        /// Whatever the state file holds: no panic, and only valid modes come back.
        #[test]
        fn any_state_file_reads_without_panic_and_yields_only_valid_modes(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256),
            listed in proptest::collection::vec(
                ("[a-z0-9_]{0,8}", proptest::num::u32::ANY, proptest::bool::ANY, proptest::num::u32::ANY),
                0..8,
            ),
        ) {
            let t = tempfile::tempdir().unwrap();
            let state = t.path().join(STATE_FILE);
            std::fs::write(&state, &bytes).unwrap();
            proptest::prop_assert!(left_behind(&state).iter().all(Found::is_valid_mode));
            let found: Vec<Found> = listed
                .into_iter()
                .map(|(device, port, auto, mask)| Found { device, port, auto, mask })
                .collect();
            std::fs::write(&state, serde_json::to_vec(&found).unwrap()).unwrap();
            let back = left_behind(&state);
            proptest::prop_assert!(back.iter().all(Found::is_valid_mode));
            proptest::prop_assert_eq!(
                back.len(),
                found.iter().filter(|f| f.is_valid_mode()).count()
            );
        }
    }

    #[test]
    fn the_state_file_keeps_what_was_found_and_goes_when_nothing_is_left() {
        let t = tempfile::tempdir().unwrap();
        let state = t.path().join(STATE_FILE);
        assert!(left_behind(&state).is_empty());
        let found = vec![
            Found {
                device: "mlx5_0".into(),
                port: 1,
                auto: false,
                mask: 0,
            },
            Found {
                device: "mlx5_1".into(),
                port: 1,
                auto: true,
                mask: 1,
            },
        ];
        write_state(&state, &found).unwrap();
        assert_eq!(left_behind(&state), found);
        assert_eq!(found[0].describe(), "auto off");
        assert_eq!(found[1].describe(), "auto type");
        write_state(&state, &[]).unwrap();
        assert!(!state.exists());
        // A file that does not parse is ignored (said), not a reason to change nothing.
        std::fs::write(&state, b"{").unwrap();
        assert!(left_behind(&state).is_empty());
    }
}
