//! GPUs against RDMA NICs: the GPU×NIC matrix in the terms of `nvidia-smi topo -m`
//! (PIX, PXB, PHB, NODE, SYS) computed from the sysfs PCI hierarchy, each GPU's nearest
//! RDMA port (one across the socket warns), and whether GPUDirect RDMA can work
//! (`nvidia_peermem` loaded). ACS on the bridges between them is `acs.rs`.

use rocewatch_plugin_api::Inventory;
use rocewatch_sysfs::pci::{is_gpu_class, proximity, vendor_name, PciFunction, Proximity};
use rocewatch_sysfs::SysRoot;

use crate::check::{check, Check, Status};
use crate::shell::one_line;

/// A GPU or an RDMA device on the bus: its label, PCI function and NUMA node.
#[derive(Debug, Clone)]
pub(crate) struct Placed {
    /// `GPU0`, or the RDMA device's name (`mlx5_0`).
    pub name: String,
    pub function: PciFunction,
    pub node: Option<u32>,
    /// PCI vendor ID (`0x10de`).
    pub vendor: Option<String>,
}

/// The GPUs of the bus, in address order, named GPU0, GPU1... as `nvidia-smi` numbers
/// them by default (PCI bus order).
pub(crate) fn gpus(root: &SysRoot) -> Vec<Placed> {
    root.pci_functions()
        .unwrap_or_default()
        .into_iter()
        .filter(|f| {
            root.pci_attr(&f.dir, "class")
                .is_some_and(|c| is_gpu_class(&c))
        })
        .enumerate()
        .map(|(i, f)| Placed {
            name: format!("GPU{i}"),
            node: root.pci_numa_node(&f.dir),
            vendor: root.pci_attr(&f.dir, "vendor"),
            function: f,
        })
        .collect()
}

/// The RDMA devices that sit on the PCI bus, in inventory order.
pub(crate) fn nics(root: &SysRoot, inv: &Inventory) -> Vec<Placed> {
    inv.devices
        .iter()
        .filter_map(|d| {
            let f = root.rdma_pci_function(&d.name)?;
            Some(Placed {
                name: d.name.clone(),
                node: root.pci_numa_node(&f.dir),
                vendor: root.pci_attr(&f.dir, "vendor"),
                function: f,
            })
        })
        .collect()
}

/// `matrix[g][n]`: how GPU `g` reaches NIC `n`.
pub(crate) fn matrix(gpus: &[Placed], nics: &[Placed]) -> Vec<Vec<Proximity>> {
    gpus.iter()
        .map(|g| {
            nics.iter()
                .map(|n| proximity(&g.function, g.node, &n.function, n.node))
                .collect()
        })
        .collect()
}

/// The matrix as `nvidia-smi topo -m` prints it, NICs as NIC0.. with a legend.
pub(crate) fn render(gpus: &[Placed], nics: &[Placed], m: &[Vec<Proximity>]) -> String {
    use std::fmt::Write;
    let mut s = String::from("     ");
    for i in 0..nics.len() {
        let _ = write!(s, " {:<5}", format!("NIC{i}"));
    }
    for (g, row) in gpus.iter().zip(m) {
        let _ = write!(s, "\n{:<5}", one_line(&g.name));
        for p in row {
            let _ = write!(s, " {:<5}", p.as_str());
        }
    }
    s = s.lines().map(str::trim_end).collect::<Vec<_>>().join("\n");
    s.push_str("\nNIC legend:");
    for (i, n) in nics.iter().enumerate() {
        let _ = write!(s, " NIC{i}={} ({})", one_line(&n.name), n.function.address);
    }
    s
}

/// The matrix, each GPU's nearest NIC, and GPUDirect RDMA.
pub(crate) fn gpu_checks(root: &SysRoot, gpus: &[Placed], nics: &[Placed]) -> Vec<Check> {
    if gpus.is_empty() {
        return vec![check(
            "gpu-topology",
            "",
            Status::Skip,
            "no GPU on the PCI bus (class 0x0300/0x0302 under bus/pci/devices)",
            None,
        )];
    }
    if nics.is_empty() {
        return vec![check(
            "gpu-topology",
            "",
            Status::Skip,
            format!("{} GPUs but no RDMA device on the PCI bus", gpus.len()),
            None,
        )];
    }
    let m = matrix(gpus, nics);
    let mut out = vec![check(
        "gpu-topology",
        "",
        Status::Info,
        format!(
            "GPU×NIC, as nvidia-smi topo -m (PIX one PCIe switch, PXB several, PHB through the host bridge, NODE across host bridges of a node, SYS across sockets):\n{}",
            render(gpus, nics, &m)
        ),
        None,
    )];
    for (g, row) in gpus.iter().zip(&m) {
        out.push(nearest_check(g, row, nics));
    }
    out.push(peer_memory_check(root, gpus));
    out
}

/// A GPU's nearest RDMA devices (`row`: its line of the matrix); all across the socket
/// interconnect warns.
pub(crate) fn nearest_check(g: &Placed, row: &[Proximity], nics: &[Placed]) -> Check {
    let best = *row.iter().min().expect("nics is not empty");
    let nearest: Vec<&str> = nics
        .iter()
        .zip(row)
        .filter(|(_, p)| **p == best)
        .map(|(n, _)| n.name.as_str())
        .collect();
    let subject = format!("{} {}", g.name, g.function.address);
    let evidence = format!(
        "nearest RDMA device{} {} ({})",
        if nearest.len() > 1 { "s" } else { "" },
        nearest.join(", "),
        best.as_str()
    );
    if best == Proximity::Sys {
        check(
            "gpu-nic",
            &subject,
            Status::Warn,
            format!("{evidence}: every NIC is across the socket interconnect from this GPU"),
            Some(format!(
                "GPUDirect traffic of {} crosses sockets: put a NIC on its socket (ideally on its PCIe switch), or keep the jobs that need the network off this GPU; NCCL picks the nearest NIC itself (NCCL_IB_HCA only narrows the choice)",
                g.name
            )),
        )
    } else {
        check("gpu-nic", &subject, Status::Pass, evidence, None)
    }
}

/// GPUDirect RDMA needs the GPU driver's peer-memory module (or dma-buf).
fn peer_memory_check(root: &SysRoot, gpus: &[Placed]) -> Check {
    let nvidia = gpus.iter().any(|g| g.vendor.as_deref() == Some("0x10de"));
    if !nvidia {
        let vendor = gpus
            .first()
            .and_then(|g| g.vendor.as_deref())
            .map_or("unknown vendor", vendor_name);
        return check(
            "gpudirect",
            "",
            Status::Skip,
            format!("{vendor} GPUs: peer memory goes through dma-buf (ROCm, oneAPI), which sysfs does not show"),
            None,
        );
    }
    match ["nvidia_peermem", "nv_peer_mem"]
        .into_iter()
        .find(|m| root.module_loaded(m))
    {
        Some(m) => check(
            "gpudirect",
            "",
            Status::Pass,
            format!("{m} is loaded: RDMA NICs can read and write GPU memory"),
            None,
        ),
        None => check(
            "gpudirect",
            "",
            Status::Warn,
            "NVIDIA GPUs and RDMA devices, but neither nvidia_peermem nor nv_peer_mem is loaded: GPUDirect RDMA works only through dma-buf (open GPU kernel modules, kernel 5.12 or later), else traffic is staged through host memory",
            Some("modprobe nvidia_peermem, and keep it: echo nvidia_peermem > /etc/modules-load.d/nvidia-peermem.conf; or use dma-buf (NCCL_DMABUF_ENABLE=1 with the open kernel modules)".into()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn placed(name: &str, path: &str, node: u32) -> Placed {
        let chain: Vec<String> = path.split('/').map(str::to_string).collect();
        Placed {
            name: name.into(),
            function: PciFunction {
                address: chain.last().unwrap().clone(),
                dir: PathBuf::from(path),
                chain,
            },
            node: Some(node),
            vendor: Some("0x10de".into()),
        }
    }

    #[test]
    fn rendered_as_nvidia_smi_does() {
        let g = [
            placed(
                "GPU0",
                "pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:00.0/0000:1a:00.0",
                0,
            ),
            placed("GPU1", "pci0000:98/0000:98:00.0/0000:9b:00.0", 1),
        ];
        let n = [placed(
            "mlx5_0",
            "pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:02.0/0000:1c:00.0",
            0,
        )];
        let m = matrix(&g, &n);
        assert_eq!(m, [[Proximity::Pix], [Proximity::Sys]]);
        assert_eq!(
            render(&g, &n, &m),
            "      NIC0\nGPU0  PIX\nGPU1  SYS\nNIC legend: NIC0=mlx5_0 (0000:1c:00.0)"
        );
        // A NIC renamed with a line break (item 2 of issue 27) cannot start a row.
        let odd = [placed(
            "mlx5_1\n# $(touch Q)",
            "pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:02.0/0000:1c:00.0",
            0,
        )];
        let r = render(&g, &odd, &m);
        assert_eq!(r.lines().count(), 4, "{r}");
        assert!(
            r.ends_with("NIC0=mlx5_1\\n# $(touch Q) (0000:1c:00.0)"),
            "{r}"
        );
        assert_eq!(nearest_check(&g[0], &m[0], &n).status, Status::Pass);
        let far = nearest_check(&g[1], &m[1], &n);
        assert_eq!(far.status, Status::Warn);
        assert_eq!(
            far.evidence,
            "nearest RDMA device mlx5_0 (SYS): every NIC is across the socket interconnect from this GPU"
        );
        // Ties are listed.
        let two = [
            n[0].clone(),
            placed("mlx5_1", "pci0000:3a/0000:3a:00.0/0000:3b:00.0", 0),
        ];
        let row = &matrix(&g[..1], &two)[0];
        assert_eq!(row, &[Proximity::Pix, Proximity::Node]);
        let tie = nearest_check(&g[1], &[Proximity::Sys, Proximity::Sys], &two);
        assert!(
            tie.evidence
                .starts_with("nearest RDMA devices mlx5_0, mlx5_1 (SYS)"),
            "{}",
            tie.evidence
        );
    }
}
