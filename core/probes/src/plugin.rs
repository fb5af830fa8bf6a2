//! The verbs probe plugin (`librocewatch_probe_verbs.so`): where it is found, and its
//! settings as an external plugin (one builder for `rocewatch probe`, doctor and the
//! agent's `[probes]`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rocewatch_runtime::host::settings::ExternalPluginConfig;

/// The probe plugin's file was found nowhere.
#[derive(Debug, thiserror::Error)]
#[error("the verbs probe plugin {file} was not found (looked at {tried}); install the rocewatch-probe-verbs package, build it with `cargo build -p rocewatch-probe-verbs`, or set ROCEWATCH_PLUGIN_DIR")]
pub struct PluginNotFound {
    pub file: &'static str,
    pub tried: String,
}

/// Where the packages install plugins (`rocewatch-probe-verbs`), looked at last.
pub const PACKAGED_PLUGIN_DIR: &str = "/usr/lib/rocewatch";

/// The probe plugin's file: `ROCEWATCH_PLUGIN_DIR`, else next to this binary (a source
/// build), else [`PACKAGED_PLUGIN_DIR`].
pub fn plugin_path() -> Result<PathBuf, PluginNotFound> {
    const FILE: &str = "librocewatch_probe_verbs.so";
    let mut tried = Vec::new();
    if let Some(d) = std::env::var_os("ROCEWATCH_PLUGIN_DIR") {
        let p = PathBuf::from(d).join(FILE);
        if p.is_file() {
            return Ok(p);
        }
        tried.push(p);
    }
    if let Some(d) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(PathBuf::from))
    {
        let p = d.join(FILE);
        if p.is_file() {
            return Ok(p);
        }
        tried.push(p);
    }
    let p = PathBuf::from(PACKAGED_PLUGIN_DIR).join(FILE);
    if p.is_file() {
        return Ok(p);
    }
    tried.push(p);
    Err(PluginNotFound {
        file: FILE,
        tried: tried
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// The RoCE ports of the host at `sysfs_root`, in rail order (`rocewatch env`'s), as
/// `device:port`: with `[fleet]` the agent starts a probe plugin instance on each (empty
/// when the tree cannot be read). Whether a port has an address yet does not matter: the
/// fleet's map gives each rail the port its address is on, at every refresh and when the
/// ports' addresses change between refreshes, so a rail whose address comes after the
/// agent started is probed within seconds of the agent's discovery seeing it.
pub fn rail_ports(sysfs_root: &Path) -> Vec<String> {
    let root = rocewatch_sysfs::SysRoot::new(sysfs_root);
    let filter = rocewatch_sysfs::inventory::DeviceFilter::new(&Default::default())
        .expect("no globs to refuse");
    let Ok((inv, _)) = rocewatch_sysfs::inventory::read_inventory(&root, &filter) else {
        return Vec::new();
    };
    rocewatch_sysfs::rails::ports(&inv, &[], None)
        .into_iter()
        .filter(rocewatch_sysfs::rails::PortEnv::roce)
        .map(|p| p.name())
        .collect()
}

/// Whether the device or port `spec` (`mlx5_1`, `mlx5_1:2`) is on the host at
/// `sysfs_root`; what is missing when it is not, with what there is.
pub fn check_port(sysfs_root: &Path, spec: &str) -> Result<(), String> {
    let root = rocewatch_sysfs::SysRoot::new(sysfs_root);
    let Some((device, port)) = crate::config::parse_port(spec) else {
        return Err(format!("{spec:?} is not a device or DEVICE:PORT"));
    };
    let devices = root.devices().unwrap_or_default();
    if !devices.iter().any(|d| d == device) {
        let has = if devices.is_empty() {
            "none".to_string()
        } else {
            devices.join(", ")
        };
        return Err(format!(
            "no RDMA device {device} on this host ({} has: {has})",
            root.ib_class().display()
        ));
    }
    let ports = root.ports(device).unwrap_or_default();
    match port {
        Some(n) if !ports.contains(&u32::from(n)) => Err(format!(
            "{device} has no port {n} (its ports: {})",
            ports
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
        _ => Ok(()),
    }
}

/// The port a probe plugin instance probes from, from its options: `device:port`,
/// `device` (no port given: the plugin's own default), or `None` (no device: the first).
pub fn instance_port(options: &serde_json::Value) -> Option<String> {
    let device = options.get("device")?.as_str()?;
    Some(
        match options.get("port").and_then(serde_json::Value::as_u64) {
            Some(port) => format!("{device}:{port}"),
            None => device.to_string(),
        },
    )
}

/// A port name (`mlx5_3:1`) as the plugin's `device` and `port` options.
pub fn set_port(options: &mut serde_json::Value, port: &str) {
    match port
        .rsplit_once(':')
        .and_then(|(d, p)| Some((d, p.parse::<u8>().ok()?)))
    {
        Some((device, n)) => {
            options["device"] = device.into();
            options["port"] = n.into();
        }
        None => options["device"] = port.into(),
    }
}

/// The probe-verbs plugin as an external plugin: its call timeout leaves five seconds
/// beyond the probe's own.
pub fn plugin_config(
    path: PathBuf,
    timeout: Duration,
    device: &Option<String>,
    tcp_port: u16,
    serve: bool,
    busy_poll: bool,
    reconnect_backoff: Duration,
) -> ExternalPluginConfig {
    ExternalPluginConfig {
        path,
        enabled: true,
        interval: None,
        timeout: Some(timeout + Duration::from_secs(5)),
        options: serde_json::json!({
            "device": device, "tcp_port": tcp_port, "serve": serve, "busy_poll": busy_poll,
            "reconnect_backoff": humantime::format_duration(reconnect_backoff).to_string(),
        }),
        allow_insecure_path: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_port_round_trips_through_its_options() {
        let mut o = serde_json::json!({"device": null});
        assert_eq!(instance_port(&o), None);
        set_port(&mut o, "mlx5_3:1");
        assert_eq!(
            (o["device"].as_str(), o["port"].as_u64()),
            (Some("mlx5_3"), Some(1))
        );
        assert_eq!(instance_port(&o).as_deref(), Some("mlx5_3:1"));
        let mut d = serde_json::json!({});
        set_port(&mut d, "rxe0");
        assert_eq!(instance_port(&d).as_deref(), Some("rxe0"));
    }

    /// The fixture's two mlx5 devices each carry one RoCE v2 IPv4 address: two rails.
    #[test]
    fn the_rail_ports_of_a_tree_in_rail_order() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../integration-tests/fixtures/mlx5-roce-dual-port/sys");
        assert_eq!(rail_ports(&root), ["mlx5_0:1", "mlx5_1:1"]);
        assert!(rail_ports(Path::new("/nonexistent")).is_empty());
        assert_eq!(check_port(&root, "mlx5_1"), Ok(()));
        assert_eq!(check_port(&root, "mlx5_1:1"), Ok(()));
        let e = check_port(&root, "mlx5_9").unwrap_err();
        assert!(e.starts_with("no RDMA device mlx5_9 on this host"), "{e}");
        assert!(e.ends_with("has: mlx5_0, mlx5_1)"), "{e}");
        let e = check_port(&root, "mlx5_1:2").unwrap_err();
        assert_eq!(e, "mlx5_1 has no port 2 (its ports: 1)");
    }
}
