//! The verbs probe plugin (`librocewatch_probe_verbs.so`): where it is found, and its
//! settings as an external plugin (one builder for `rocewatch probe`, doctor and the
//! agent's `[probes]`).

use std::path::PathBuf;
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
