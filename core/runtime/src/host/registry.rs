//! Plugin registry: the built-in plugins it is handed, the loading of external `.so`
//! plugins, and each plugin's status (what `rocewatch plugins` shows).

use rocewatch_metrics::labels::PluginErrorReason;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rocewatch_plugin_api::*;
use rocewatch_plugin_sdk::abi;
use rocewatch_plugin_sdk::host::{LoadError, PluginLibrary};
use serde::Serialize;

use rocewatch_sysfs::inventory::DeviceSelection;

use crate::host::settings::{PluginSettings, PluginsConfig};
use crate::selfmetrics::SelfMetrics;

/// How a built-in plugin is made.
pub type Factory = fn() -> Instance;

/// A built-in plugin: its name, its constructor and its options' check. The agent hands
/// the registry its explicit list (`BUILTINS` in the agent crate); this crate knows no
/// plugin.
#[derive(Clone, Copy)]
pub struct Builtin {
    pub name: &'static str,
    pub make: Factory,
    /// Decodes and checks the plugin's options (its `Options`, `deny_unknown_fields`):
    /// `config check` asks it, and names the key at fault.
    pub check_options: fn(&serde_json::Value) -> Result<(), PluginError>,
}

/// A plugin instance in the role it plays.
pub enum Instance {
    Discovery(Box<dyn DiscoveryPlugin>),
    Configuration(Box<dyn ConfigurationPlugin>),
    Probe(Box<dyn ProbePlugin>),
    Collector(Box<dyn CollectorPlugin>),
    Remediation(Box<dyn RemediationPlugin>),
}

impl Instance {
    pub fn kind(&self) -> PluginKind {
        match self {
            Instance::Discovery(_) => PluginKind::Discovery,
            Instance::Configuration(_) => PluginKind::Configuration,
            Instance::Probe(_) => PluginKind::Probe,
            Instance::Collector(_) => PluginKind::Collector,
            Instance::Remediation(_) => PluginKind::Remediation,
        }
    }

    pub fn plugin(&mut self) -> &mut dyn Plugin {
        match self {
            Instance::Discovery(p) => p.as_mut(),
            Instance::Configuration(p) => p.as_mut(),
            Instance::Probe(p) => p.as_mut(),
            Instance::Collector(p) => p.as_mut(),
            Instance::Remediation(p) => p.as_mut(),
        }
    }
}

/// Where a plugin comes from.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(tag = "type", content = "path", rename_all = "lowercase")]
pub enum Origin {
    Builtin,
    File(PathBuf),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Builtin => f.write_str("built-in"),
            Origin::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Lifecycle: Declared → Loaded → Started, or Failed / Unsupported.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Declared,
    Loaded,
    Started,
    /// The last call failed (the plugin is still called on its schedule).
    Failed,
    /// The plugin cannot run on this host (e.g. no RDMA devices).
    Unsupported,
    Disabled,
}

/// What `rocewatch plugins` shows for one plugin.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub name: String,
    pub kind: Option<PluginKind>,
    pub origin: Origin,
    pub abi: String,
    pub state: State,
    pub last_error: Option<String>,
    pub calls: u64,
    pub errors: u64,
}

/// A registered plugin: its instance (absent when loading failed) and its status.
#[derive(Clone)]
pub struct Entry {
    pub name: String,
    pub kind: Option<PluginKind>,
    pub origin: Origin,
    pub settings: PluginSettings,
    /// Its collection interval: its own setting, else the agent's.
    pub interval: Duration,
    /// Its per-call timeout: its own setting, else the agent's.
    pub timeout: Duration,
    pub instance: Option<Arc<Mutex<Instance>>>,
    /// Set while a call runs on a blocking thread; a call that outlived its timeout keeps
    /// it set until it returns, and the plugin is not called again meanwhile.
    pub busy: Arc<AtomicBool>,
    pub status: Arc<Mutex<Status>>,
}

impl Entry {
    pub fn label(&self) -> String {
        match &self.origin {
            Origin::Builtin => format!("plugin {} (built-in)", self.name),
            Origin::File(p) => format!("plugin {} ({})", self.name, p.display()),
        }
    }

    pub fn status(&self) -> Status {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn set_state(&self, state: State, error: Option<String>) {
        let mut s = self.status.lock().unwrap_or_else(|p| p.into_inner());
        s.state = state;
        if error.is_some() {
            s.last_error = error;
        }
    }
}

fn abi_string() -> String {
    format!("{}.{}", abi::ABI_MAJOR, abi::ABI_MINOR)
}

impl Entry {
    /// A declared plugin without an instance yet.
    fn declared(
        name: &str,
        kind: Option<PluginKind>,
        origin: Origin,
        abi: String,
        settings: PluginSettings,
        defaults: &Defaults,
    ) -> Entry {
        Entry {
            name: name.to_string(),
            kind,
            origin: origin.clone(),
            interval: settings.interval.unwrap_or(defaults.interval),
            timeout: settings.timeout.unwrap_or(defaults.timeout),
            settings,
            instance: None,
            busy: Arc::new(AtomicBool::new(false)),
            status: Arc::new(Mutex::new(Status {
                name: name.to_string(),
                kind,
                origin,
                abi,
                state: State::Declared,
                last_error: None,
                calls: 0,
                errors: 0,
            })),
        }
    }

    fn loaded(mut self, instance: Instance) -> Entry {
        self.instance = Some(Arc::new(Mutex::new(instance)));
        self.set_state(State::Loaded, None);
        self
    }

    fn failed(self, error: String) -> Entry {
        self.set_state(State::Failed, Some(error));
        self
    }

    fn disabled(self) -> Entry {
        self.set_state(State::Disabled, None);
        self
    }
}

/// What the registry is built from: the `[plugins]` section, the `[devices]` selection for
/// the built-in sysfs plugins, the agent-wide interval and timeout, and the kinds of plugin
/// the command needs (a one-shot command starts only those).
pub struct HostSettings<'a> {
    /// The built-in plugins, in the order they are registered.
    pub builtins: &'a [Builtin],
    pub plugins: &'a PluginsConfig,
    pub devices: &'a DeviceSelection,
    pub defaults: Defaults,
    /// Kinds to instantiate; `None`: every kind. Plugins of other kinds are listed as
    /// disabled ("not needed by this command").
    pub kinds: Option<&'a [PluginKind]>,
}

/// The agent-wide defaults a plugin's own settings override.
#[derive(Debug, Clone, Copy)]
pub struct Defaults {
    pub interval: Duration,
    pub timeout: Duration,
}

/// All plugins of a configuration.
pub struct Registry {
    pub entries: Vec<Entry>,
}

impl Registry {
    /// Build the registry: built-ins, then every external library (one entry per kind it
    /// implements). Load failures become `Failed` entries and self-metric counts; they
    /// never stop the agent.
    pub fn build(host: &HostSettings<'_>, metrics: &SelfMetrics) -> Registry {
        let wanted = |k: PluginKind| host.kinds.is_none_or(|ks| ks.contains(&k));
        let mut entries = Vec::new();
        for &Builtin { name, make, .. } in host.builtins {
            let mut settings = host.plugins.builtin.get(name).cloned().unwrap_or_default();
            merge_device_selection(&mut settings.options, host.devices);
            let instance = make();
            let enabled = settings.enabled && wanted(instance.kind());
            let e = Entry::declared(
                name,
                Some(instance.kind()),
                Origin::Builtin,
                abi_string(),
                settings,
                &host.defaults,
            );
            entries.push(if enabled {
                e.loaded(instance)
            } else {
                e.disabled()
            });
        }
        for ext in &host.plugins.external {
            let settings = ext.settings();
            let origin = Origin::File(ext.path.clone());
            let fallback_name = ext
                .path
                .file_stem()
                .map(|s| s.to_string_lossy().trim_start_matches("lib").to_string())
                .unwrap_or_else(|| ext.path.display().to_string());
            let declared = |name: &str, kind: Option<PluginKind>, abi: &str| {
                Entry::declared(
                    name,
                    kind,
                    origin.clone(),
                    abi.to_string(),
                    settings.clone(),
                    &host.defaults,
                )
            };
            if !ext.enabled {
                entries.push(declared(&fallback_name, None, "-").disabled());
                continue;
            }
            let insecure = (!ext.allow_insecure_path)
                .then(|| rocewatch_plugin_sdk::host::insecure_path(&ext.path))
                .flatten();
            let loaded = match insecure {
                Some(why) => Err(LoadError::InsecurePath {
                    path: ext.path.clone(),
                    why,
                }),
                // Load what was checked: the resolved path, not a symlink that could
                // change between the check and the load.
                None => PluginLibrary::load(
                    &std::fs::canonicalize(&ext.path).unwrap_or_else(|_| ext.path.clone()),
                ),
            };
            let lib = match loaded {
                Ok(lib) => lib,
                Err(e) => {
                    let reason = match e {
                        LoadError::AbiMismatch { .. } | LoadError::TableTooSmall { .. } => {
                            PluginErrorReason::Abi
                        }
                        LoadError::InsecurePath { .. } => PluginErrorReason::Insecure,
                        _ => PluginErrorReason::Load,
                    };
                    tracing::error!("{e}");
                    metrics.plugin_error(&fallback_name, reason);
                    entries.push(declared(&fallback_name, None, "-").failed(e.to_string()));
                    continue;
                }
            };
            let abi = format!("{}.{}", lib.abi_major, lib.abi_minor);
            for kind in lib.kinds() {
                let e = declared(&lib.name, Some(kind), &abi);
                if !wanted(kind) {
                    entries.push(e.disabled());
                    continue;
                }
                match lib.instantiate(kind) {
                    Ok(inst) => entries.push(e.loaded(match kind {
                        PluginKind::Discovery => Instance::Discovery(Box::new(inst)),
                        PluginKind::Configuration => Instance::Configuration(Box::new(inst)),
                        PluginKind::Probe => Instance::Probe(Box::new(inst)),
                        PluginKind::Collector => Instance::Collector(Box::new(inst)),
                        PluginKind::Remediation => Instance::Remediation(Box::new(inst)),
                    })),
                    Err(err) => {
                        let reason = if matches!(err, PluginError::Panicked(_)) {
                            PluginErrorReason::Panic
                        } else {
                            PluginErrorReason::Load
                        };
                        let msg = format!("{}: cannot create {kind} instance: {err}", e.label());
                        tracing::error!("{msg}");
                        metrics.plugin_error(&lib.name, reason);
                        entries.push(e.failed(msg));
                    }
                }
            }
        }
        Registry { entries }
    }

    pub fn statuses(&self) -> Vec<Status> {
        self.entries.iter().map(Entry::status).collect()
    }

    /// Entries with a live instance of `kind`.
    pub fn of_kind(&self, kind: PluginKind) -> impl Iterator<Item = &Entry> {
        self.entries
            .iter()
            .filter(move |e| e.kind == Some(kind) && e.instance.is_some())
    }
}

/// The top-level `[devices]` selection applies to the built-in sysfs plugins unless their
/// own options set `include`/`exclude`.
fn merge_device_selection(options: &mut serde_json::Value, devices: &DeviceSelection) {
    let Some(obj) = options.as_object_mut() else {
        return;
    };
    if !devices.include.is_empty() {
        obj.entry("include")
            .or_insert_with(|| serde_json::json!(devices.include));
    }
    if !devices.exclude.is_empty() {
        obj.entry("exclude")
            .or_insert_with(|| serde_json::json!(devices.exclude));
    }
}

/// `true` while a call of this entry is running.
pub fn is_busy(e: &Entry) -> bool {
    e.busy.load(Ordering::SeqCst)
}
