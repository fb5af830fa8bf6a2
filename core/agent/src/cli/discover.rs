//! `rocewatch discover`: RDMA devices and ports, like ibdev2netdev; on an SR-IOV host the
//! PF→VF tree (like `ip link show`'s VF lines and `ibdev2netdev -v` together).
//!
//! The SR-IOV role of each device is read here, from the sysfs root, at discover time
//! (`rocewatch_sysfs::sriov`), not carried in the plugin model: it belongs to the PCI
//! function rather than to the RDMA device (a VF handed to a VM has no RDMA device on the
//! host at all), and a field in `Device` would cross the plugins' C ABI for something no
//! plugin but the sysfs one could fill.

use std::fmt::Write as _;

use anyhow::{bail, Result};
use clap::Args;
use serde_json::{json, Value};

use super::output::print_json;
use super::show;
use super::source::SourceArgs;
use crate::app::App;
use rocewatch_plugin_api::{Inventory, PluginKind};
use rocewatch_sysfs::sriov::{PhysFn, Sriov, VirtFn};
use rocewatch_sysfs::SysRoot;

/// `rocewatch discover`'s arguments.
#[derive(Debug, Args)]
pub struct DiscoverArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Print JSON: {"devices":[{"name","node_guid","fw_ver","ports":[...],"sriov"}]}.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(a: DiscoverArgs) -> Result<i32> {
    let DiscoverArgs { source, json } = a;
    let cfg = source.load()?;
    let root = cfg.agent.sysfs_root.clone();
    let agent = App::start(cfg, Some(&[PluginKind::Discovery])).await;
    let inv = match agent.discover().await {
        Ok(inv) => inv,
        Err(e) if e.is_unsupported() => {
            eprintln!("rocewatch: no RDMA devices under {}", root.display());
            Default::default()
        }
        Err(e) => bail!("discovery failed: {e}"),
    };
    let roles = sriov_roles(&SysRoot::new(&root), &inv);
    if json {
        let mut doc = show::inventory_json(&inv);
        add_sriov_json(&mut doc, &roles);
        print_json(&doc)?;
    } else {
        print!("{}", show::inventory_text(&inv));
        print!("{}", sriov_text(&roles));
    }
    Ok(0)
}

/// One device's PCI function and its SR-IOV role.
struct Role {
    device: String,
    address: String,
    netdevs: Vec<String>,
    sriov: Sriov,
}

/// The SR-IOV role of every device of the inventory that has one, in its order. A file
/// that cannot be read costs that device's role only, said on standard error.
fn sriov_roles(sys: &SysRoot, inv: &Inventory) -> Vec<Role> {
    let mut out = Vec::new();
    for d in &inv.devices {
        let Some(f) = sys.rdma_pci_function(&d.name) else {
            continue;
        };
        match sys.sriov_at(&f.dir) {
            Ok(Some(sriov)) => out.push(Role {
                device: d.name.clone(),
                address: f.address,
                netdevs: sys.device_netdevs(&d.name),
                sriov,
            }),
            Ok(None) => {}
            Err(e) => eprintln!("rocewatch: {}: SR-IOV role unknown: {e}", d.name),
        }
    }
    out
}

fn pf_json(pf: &PhysFn) -> Value {
    json!({
        "role": "pf",
        "totalvfs": pf.totalvfs,
        "numvfs": pf.numvfs,
        "vf_device": pf.vf_device,
        "vfs": pf.vfs.iter().map(|v| v.address.as_str()).collect::<Vec<_>>(),
        "vf_functions": pf.vfs.iter().map(|v| json!({
            "index": v.index,
            "pci": v.address,
            "driver": v.driver,
            "assigned_to_vm": v.assigned_to_vm(),
            "netdevs": v.netdevs,
            "rdma_devices": v.rdma_devices,
        })).collect::<Vec<_>>(),
    })
}

fn vf_json(vf: &VirtFn) -> Value {
    let mut v = json!({ "role": "vf", "pf": vf.pf });
    if let Some(i) = vf.index {
        v["index"] = json!(i);
    }
    if let Some(m) = vf.model {
        v["model"] = json!(m);
    }
    v
}

/// Each device of `doc` with a role gets `"sriov"`: `{"role":"pf","totalvfs","numvfs",
/// "vfs":[addresses],...}` or `{"role":"vf","pf":address or null}`.
fn add_sriov_json(doc: &mut Value, roles: &[Role]) {
    let Some(devices) = doc.get_mut("devices").and_then(Value::as_array_mut) else {
        return;
    };
    for d in devices {
        let Some(r) = roles.iter().find(|r| d["name"] == r.device.as_str()) else {
            continue;
        };
        d["sriov"] = match &r.sriov {
            Sriov::Pf(pf) => pf_json(pf),
            Sriov::Vf(vf) => vf_json(vf),
        };
    }
}

fn or_dash(v: &[String]) -> String {
    if v.is_empty() {
        "-".into()
    } else {
        v.join(",")
    }
}

/// The PF→VF tree: each PF, then each VF with its PCI address, host driver, netdev and
/// RDMA device; VFs handed to a VM (vfio-pci) have neither on the host. A VF whose PF is
/// listed is shown under it; one whose PF is not visible (a guest) on its own line.
fn sriov_text(roles: &[Role]) -> String {
    let mut s = String::new();
    if roles.is_empty() {
        return s;
    }
    s.push_str("\nSR-IOV\n");
    for r in roles {
        let head = format!("{} {} {}", r.device, r.address, or_dash(&r.netdevs));
        match &r.sriov {
            Sriov::Pf(pf) => {
                let _ = write!(s, "{head}: PF, {} of {} VFs", pf.numvfs, pf.totalvfs);
                if let Some(d) = &pf.vf_device {
                    let _ = write!(s, " (VF device {d})");
                }
                s.push('\n');
                for v in &pf.vfs {
                    let _ = write!(
                        s,
                        "  vf {:<3} {}  {:<10} {:<12} {:<8}",
                        v.index,
                        v.address,
                        v.driver.as_deref().unwrap_or("(none)"),
                        or_dash(&v.netdevs),
                        or_dash(&v.rdma_devices),
                    );
                    if v.assigned_to_vm() {
                        let _ = write!(
                            s,
                            " ({}: assigned to a VM)",
                            v.driver.as_deref().unwrap_or_default()
                        );
                    }
                    s.truncate(s.trim_end().len());
                    s.push('\n');
                }
            }
            Sriov::Vf(vf) => match &vf.pf {
                Some(pf) if roles.iter().any(|o| &o.address == pf) => {}
                Some(pf) => {
                    let index = vf.index.map(|i| format!(" {i}")).unwrap_or_default();
                    let _ = writeln!(s, "{head}: VF{index} of PF {pf}");
                }
                None => {
                    let _ = writeln!(
                        s,
                        "{head}: VF ({}), its PF not visible here (a function passed through to this guest)",
                        vf.model.unwrap_or("by its PCI id")
                    );
                }
            },
        }
    }
    s
}
