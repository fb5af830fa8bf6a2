//! The PCIe link of each device's PCI function (`device/current_link_speed`,
//! `current_link_width`, `max_link_speed`, `max_link_width`): read once per device and
//! collection, from its first port's plan, and emitted with every port's attributes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rocewatch_metrics::{self as catalog, CatalogEntry};
use rocewatch_plugin_api::*;
use rocewatch_sysfs::pci::parse_link_speed;

use crate::plan::Plan;

/// The catalog entries and their sources, looked up once.
fn entries() -> [(&'static CatalogEntry, Arc<str>); 4] {
    static E: std::sync::OnceLock<[(&'static CatalogEntry, Arc<str>); 4]> =
        std::sync::OnceLock::new();
    E.get_or_init(|| {
        let t = catalog::PCIE_CATALOG;
        std::array::from_fn(|i| (&t[i], Arc::from(t[i].source)))
    })
    .clone()
}

/// How long a device whose four link files are all absent goes unasked: a device with no
/// PCI parent (soft-RoCE, a virtual function's view on some kernels) would otherwise cost
/// eight failed opens per collection, for a link that does not come later.
const ABSENT_RECHECK: Duration = Duration::from_secs(60);

/// Reads the link of the device whose first port is `plan.ports[first]` and emits it for
/// each of the device's ports. A file that is absent (no PCI parent: soft-RoCE; an old
/// kernel) or reads `Unknown` (link down) yields no sample; a failed read is partial.
/// When none of the four files is there, they are looked for again after
/// [`ABSENT_RECHECK`].
pub(crate) fn scrape_pcie(plan: &mut Plan, first: usize, max_open: usize, out: &mut ScrapeResult) {
    let Some(pcie) = plan.ports[first].pcie.as_mut() else {
        return;
    };
    if pcie.recheck_at.is_some_and(|t| Instant::now() < t) {
        return;
    }
    let mut values: [Option<f64>; 4] = [None; 4];
    let mut absent = 0;
    for (i, f) in pcie.files.iter_mut().enumerate() {
        let speed = i % 2 == 0;
        let parse = |t: &str| {
            if speed {
                parse_link_speed(t)
            } else {
                t.parse::<u32>().ok().map(f64::from)
            }
        };
        match f.read(&mut plan.open_files, max_open, parse) {
            Ok(None) => absent += 1,
            Ok(Some(v)) => values[i] = v,
            Err(e) => out.errors.push(PartialError {
                target: e.path().display().to_string(),
                message: e.cause(),
            }),
        }
    }
    // Absent as in not there (a file that answers EINVAL, as a failed config-space read
    // did on some kernels, is there and asked again next time).
    let gone = absent == pcie.files.len()
        && pcie.files.iter().all(|f| {
            std::fs::symlink_metadata(&f.path)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        });
    pcie.recheck_at = gone.then(|| Instant::now() + ABSENT_RECHECK);
    let device = plan.ports[first].device.clone();
    let table = entries();
    for p in plan.ports[first..]
        .iter()
        .take_while(|p| p.device == device)
    {
        for ((e, source), v) in table.iter().zip(values) {
            let Some(v) = v else { continue };
            out.samples.push(Sample {
                name: e.name.into(),
                unit: e.unit.into(),
                // Speeds are fractional in GT/s (2.5, 8.0...), scaled to transfers/s.
                value: if e.scale == 1 {
                    Value::U64(v as u64)
                } else {
                    Value::F64(v * e.scale as f64)
                },
                attributes: p.base.clone(),
                source: source.clone(),
                kind: e.kind,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use rocewatch_metrics::{ATTR_DEVICE, ATTR_PORT};
    use rocewatch_plugin_api::*;

    use crate::SysfsCounters;

    fn port(dev_dir: &std::path::Path, n: u32) {
        let p = dev_dir.join("ports").join(n.to_string());
        fs::create_dir_all(&p).unwrap();
        fs::write(p.join("state"), "4: ACTIVE\n").unwrap();
        fs::write(p.join("phys_state"), "5: LinkUp\n").unwrap();
        fs::write(p.join("rate"), "200 Gb/sec (4X HDR)\n").unwrap();
    }

    #[test]
    fn link_of_the_function_for_every_port_and_absent_when_down_or_missing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // mlx4-style: two ports on one function, trained x8 of x16; a second device whose
        // link is down (`Unknown`); a third with no PCI parent.
        for (dev, speed) in [("mlx4_0", "16.0 GT/s PCIe"), ("mlx5_1", "Unknown")] {
            let d = root.join("class/infiniband").join(dev);
            port(&d, 1);
            if dev == "mlx4_0" {
                port(&d, 2);
            }
            let pci = d.join("device");
            fs::create_dir_all(&pci).unwrap();
            fs::write(pci.join("current_link_speed"), format!("{speed}\n")).unwrap();
            fs::write(pci.join("current_link_width"), "8\n").unwrap();
            fs::write(pci.join("max_link_speed"), "16.0 GT/s PCIe\n").unwrap();
            fs::write(pci.join("max_link_width"), "16\n").unwrap();
        }
        port(&root.join("class/infiniband/rxe0"), 1);
        let mut c = SysfsCounters::new();
        c.start(&PluginContext::new(root)).unwrap();
        let r = c.collect().unwrap();
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        let get = |dev: &str, port: &str, name: &str| {
            r.samples
                .iter()
                .find(|s| {
                    s.name == name
                        && s.attributes.get(ATTR_DEVICE) == Some(dev)
                        && s.attributes.get(ATTR_PORT) == Some(port)
                })
                .map(|s| (s.value, s.unit.to_string(), s.source.to_string()))
        };
        for port in ["1", "2"] {
            // 16 GT/s as transfers per second, in a valid UCUM unit (`GT/s` is
            // gigatesla per second there).
            assert_eq!(
                get("mlx4_0", port, "rdma.pcie.link.speed"),
                Some((
                    Value::F64(16e9),
                    "{transfer}/s".into(),
                    "device/current_link_speed".into()
                ))
            );
            assert_eq!(
                get("mlx4_0", port, "rdma.pcie.link.width").unwrap().0,
                Value::U64(8)
            );
            assert_eq!(
                get("mlx4_0", port, "rdma.pcie.link.max_width").unwrap().0,
                Value::U64(16)
            );
            assert_eq!(
                get("mlx4_0", port, "rdma.pcie.link.max_speed").unwrap().0,
                Value::F64(16e9)
            );
        }
        assert_eq!(get("mlx5_1", "1", "rdma.pcie.link.speed"), None);
        assert_eq!(
            get("mlx5_1", "1", "rdma.pcie.link.width").unwrap().0,
            Value::U64(8)
        );
        assert!(r
            .samples
            .iter()
            .all(|s| !(s.name.starts_with("rdma.pcie")
                && s.attributes.get(ATTR_DEVICE) == Some("rxe0"))));
        // Every sample is declared.
        let declared = CollectorPlugin::descriptors(&c);
        for s in &r.samples {
            assert!(
                declared
                    .iter()
                    .any(|d| d.name == *s.name && d.unit == *s.unit),
                "{}",
                s.name
            );
        }
    }

    /// A device with no link files is not asked again on every collection (eight failed
    /// opens each time), but is after the recheck time; a link reading `Unknown` is
    /// present, and read every time.
    #[test]
    fn absent_link_files_are_looked_for_again_only_after_a_while() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let d = root.join("class/infiniband/rxe0");
        port(&d, 1);
        let mut c = SysfsCounters::new();
        c.start(&PluginContext::new(root)).unwrap();
        let speed = |c: &mut SysfsCounters| {
            c.collect()
                .unwrap()
                .samples
                .iter()
                .any(|s| s.name == "rdma.pcie.link.width")
        };
        assert!(!speed(&mut c));
        let pci = d.join("device");
        fs::create_dir_all(&pci).unwrap();
        let link = |speed: &str, width: &str| {
            for (file, text) in [
                ("current_link_speed", speed),
                ("current_link_width", width),
                ("max_link_speed", speed),
                ("max_link_width", width),
            ] {
                fs::write(pci.join(file), format!("{text}\n")).unwrap();
            }
        };
        let recheck_at = |c: &SysfsCounters| {
            c.plan.as_ref().unwrap().ports[0]
                .pcie
                .as_ref()
                .unwrap()
                .recheck_at
        };
        link("16.0 GT/s PCIe", "16");
        assert!(!speed(&mut c), "not looked for before the recheck");
        let recheck = recheck_at(&c).expect("absent: a recheck set");
        let wait = recheck.saturating_duration_since(std::time::Instant::now());
        assert!(
            wait > super::ABSENT_RECHECK / 2 && wait <= super::ABSENT_RECHECK,
            "{wait:?}"
        );
        c.plan.as_mut().unwrap().ports[0]
            .pcie
            .as_mut()
            .unwrap()
            .recheck_at = None;
        assert!(speed(&mut c), "read once it is time");
        assert!(recheck_at(&c).is_none());
        // A link that is down reads `Unknown`: present, no recheck wait.
        link("Unknown", "Unknown");
        assert!(!speed(&mut c));
        assert!(recheck_at(&c).is_none());
    }
}
