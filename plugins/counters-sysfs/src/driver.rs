//! `rdma.driver.info`: the module serving each device, read once when the device is
//! planned (a module is not replaced under a live device: reloading the driver removes
//! and recreates it, and a new plan follows) and emitted with the device's first port.

use std::collections::BTreeMap;
use std::sync::Arc;

use rocewatch_metrics::{self as catalog, CatalogEntry};
use rocewatch_plugin_api::*;
use rocewatch_sysfs::SysRoot;

/// The catalog entry and its source, looked up once.
fn entry() -> (&'static CatalogEntry, Arc<str>) {
    static E: std::sync::OnceLock<(&'static CatalogEntry, Arc<str>)> = std::sync::OnceLock::new();
    E.get_or_init(|| {
        let e = &catalog::DRIVER_CATALOG[0];
        (e, Arc::from(e.source))
    })
    .clone()
}

/// The attributes of `device`'s info sample, or `None` when sysfs names no module.
pub(crate) fn driver_attributes(root: &SysRoot, device: &str) -> Option<Attributes> {
    let m = root.module(&root.device_module(device)?)?;
    let mut a = BTreeMap::new();
    a.insert(catalog::ATTR_DEVICE.to_string(), device.to_string());
    a.insert(
        catalog::ATTR_DRIVER_ORIGIN.to_string(),
        m.origin().to_string(),
    );
    a.insert(catalog::ATTR_DRIVER.to_string(), m.name);
    a.insert(
        catalog::ATTR_DRIVER_VERSION.to_string(),
        m.version.unwrap_or_default(),
    );
    a.insert(
        catalog::ATTR_DRIVER_SRCVERSION.to_string(),
        m.srcversion.unwrap_or_default(),
    );
    Some(Attributes::new(a.into()))
}

/// The info sample of a device.
pub(crate) fn driver_sample(attributes: &Attributes) -> Sample {
    let (e, source) = entry();
    Sample {
        name: e.name.into(),
        unit: e.unit.into(),
        value: Value::U64(1),
        attributes: attributes.clone(),
        source,
        kind: e.kind,
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use rocewatch_metrics::*;
    use rocewatch_plugin_api::*;

    use crate::SysfsCounters;

    fn infos(case: &str) -> Vec<Sample> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../integration-tests/fixtures")
            .join(case)
            .join("sys");
        let mut c = SysfsCounters::new();
        c.start(&PluginContext::new(&root)).unwrap();
        let r = c.collect().unwrap();
        r.samples
            .into_iter()
            .filter(|s| s.name.as_ref() == "rdma.driver.info")
            .collect()
    }

    fn attr<'a>(s: &'a Sample, k: &str) -> &'a str {
        s.attributes.get(k).unwrap_or("<absent>")
    }

    #[test]
    fn one_info_sample_per_device_naming_the_module_build() {
        // The vendor stack of the two-socket fixture: four devices, one per port.
        let s = infos("gpu-two-socket");
        let devices: Vec<&str> = s.iter().map(|s| attr(s, ATTR_DEVICE)).collect();
        assert_eq!(devices, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);
        for i in &s {
            assert_eq!(i.value, Value::U64(1));
            assert_eq!(attr(i, ATTR_DRIVER), "mlx5_core");
            assert_eq!(attr(i, ATTR_DRIVER_VERSION), "24.10-1.1.4");
            assert_eq!(attr(i, ATTR_DRIVER_SRCVERSION), "5C1D2E3F4A5B6C7D8E9F0A1");
            assert_eq!(attr(i, ATTR_DRIVER_ORIGIN), "out-of-tree");
            assert!(
                i.attributes.get(ATTR_PORT).is_none(),
                "per device, not port"
            );
        }
        // Soft-RoCE: the kernel's rdma_rxe, no version.
        let s = infos("rxe-soft-roce");
        assert_eq!(s.len(), 1);
        assert_eq!(
            (
                attr(&s[0], ATTR_DRIVER),
                attr(&s[0], ATTR_DRIVER_VERSION),
                attr(&s[0], ATTR_DRIVER_ORIGIN)
            ),
            ("rdma_rxe", "", "in-tree")
        );
        // An old kernel's tree without module/: no sample rather than a guess.
        assert!(infos("ib-hca").is_empty());
    }
}
