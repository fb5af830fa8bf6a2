//! The host side: load a plugin `.so`, check its ABI, and use its instances as plugins.
//!
//! Libraries are never unloaded: thread-local destructors and leaked threads of a plugin
//! may outlive any point at which unloading would look safe.

use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocewatch_plugin_api::*;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::abi::{self, method, PluginTableV1, RwBuf};
use crate::ffi::{ApplyRequest, ErrorWire};

/// Why a plugin library could not be loaded. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("plugin {path}: cannot open library: {message}")]
    Open { path: PathBuf, message: String },
    #[error("plugin {path}: missing entry symbol `rocewatch_plugin_entry` (not a rocewatch plugin, or built without export_plugin!): {message}")]
    MissingSymbol { path: PathBuf, message: String },
    #[error("plugin {path}: entry point returned a null table")]
    NullTable { path: PathBuf },
    #[error("plugin {path}: ABI version {found_major}.{found_minor} is not supported by this rocewatch (ABI {expected_major}.{expected_minor}); rebuild the plugin against rocewatch-plugin-sdk with ABI major {expected_major}")]
    AbiMismatch {
        path: PathBuf,
        found_major: u32,
        found_minor: u32,
        expected_major: u32,
        expected_minor: u32,
    },
    #[error("plugin {path}: function table is {found} bytes, smaller than the {expected} bytes ABI {major}.0 requires")]
    TableTooSmall {
        path: PathBuf,
        found: usize,
        expected: usize,
        major: u32,
    },
    #[error("plugin {path}: name or version is not valid UTF-8")]
    BadName { path: PathBuf },
    #[error("plugin {path}: the function table's `{field}` is a null pointer (a broken or hand-made table; rebuild the plugin with export_plugin!)")]
    NullFunction { path: PathBuf, field: &'static str },
    #[error("plugin {path}: refused: {why}; a library others can replace runs as the agent (fix the permissions, or set allow_insecure_path = true for this plugin)")]
    InsecurePath { path: PathBuf, why: String },
}

/// Why loading `path` would let someone other than root and the agent's user run code in
/// the agent, in the spirit of sshd's StrictModes (which also refuses group-writable
/// paths; here only others' write permission and foreign owners are refused): the file or a directory above it writable by
/// others (a root-owned sticky directory such as /tmp excepted), or owned by someone other
/// than root or the agent's user. `None`: safe.
pub fn insecure_path(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let check = |p: &Path, what: &str| -> Option<String> {
        let m = match std::fs::metadata(p) {
            Ok(m) => m,
            Err(e) => return Some(format!("{what} {} cannot be checked ({e})", p.display())),
        };
        if m.mode() & 0o002 != 0 && !(m.is_dir() && m.mode() & 0o1000 != 0 && m.uid() == 0) {
            return Some(format!(
                "{what} {} is writable by others (mode {:o})",
                p.display(),
                m.mode() & 0o7777
            ));
        }
        if m.uid() != 0 && m.uid() != me {
            return Some(format!(
                "{what} {} belongs to uid {}, neither root nor the agent's user",
                p.display(),
                m.uid()
            ));
        }
        None
    };
    // The directories of the path as configured (a symlink in a directory others can
    // write is as replaceable as the file), then the file and directories it resolves to.
    if let Some(why) = path
        .ancestors()
        .skip(1)
        .filter(|d| !d.as_os_str().is_empty())
        .find_map(|dir| check(dir, "the directory"))
    {
        return Some(why);
    }
    let full = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    if let Some(why) = check(&full, "the file") {
        return Some(why);
    }
    full.ancestors()
        .skip(1)
        .find_map(|dir| check(dir, "the directory"))
}

/// The dynamic loader's own reason (`dlerror`), with libloading's wrapper text removed.
fn dl_reason(e: &libloading::Error) -> String {
    use std::error::Error;
    match e.source() {
        Some(inner) => inner.to_string(),
        None => e.to_string(),
    }
}

/// A loaded plugin library.
pub struct PluginLibrary {
    pub path: PathBuf,
    pub name: String,
    pub version: String,
    pub abi_major: u32,
    pub abi_minor: u32,
    kinds: u32,
    table: &'static PluginTableV1,
}

impl std::fmt::Debug for PluginLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginLibrary")
            .field("path", &self.path)
            .field("name", &self.name)
            .field("version", &self.version)
            .field(
                "abi",
                &format_args!("{}.{}", self.abi_major, self.abi_minor),
            )
            .field("kinds", &self.kinds())
            .finish()
    }
}

impl PluginLibrary {
    /// Load `path` and check its ABI. The library stays mapped for the life of the process.
    pub fn load(path: &Path) -> Result<Arc<PluginLibrary>, LoadError> {
        let path_buf = path.to_path_buf();
        // SAFETY: loading a library runs its initializers; plugins are trusted code that the
        // operator configured explicitly.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| LoadError::Open {
            path: path_buf.clone(),
            message: dl_reason(&e),
        })?;
        let table_ptr = {
            // SAFETY: the symbol's type is fixed by the ABI.
            let entry: libloading::Symbol<'_, unsafe extern "C" fn() -> *const PluginTableV1> =
                unsafe { lib.get(abi::ENTRY_SYMBOL) }.map_err(|e| LoadError::MissingSymbol {
                    path: path_buf.clone(),
                    message: dl_reason(&e),
                })?;
            // SAFETY: the entry point takes no arguments and returns a static table.
            unsafe { entry() }
        };
        // Never unload (see the module doc).
        std::mem::forget(lib);
        // SAFETY: the table comes from a library that is never unloaded.
        unsafe { Self::from_table(path, table_ptr) }
    }

    /// Check and wrap a plugin table. `path` is only used to name the plugin in errors
    /// and status. This is what [`PluginLibrary::load`] does after `dlsym`; tests use it
    /// directly on tables built in-process with [`crate::abi::PluginTableV1::of`].
    ///
    /// # Safety
    /// `table_ptr` must be null or point at a table that starts with the ABI header and
    /// that lives for the rest of the process.
    pub unsafe fn from_table(
        path: &Path,
        table_ptr: *const PluginTableV1,
    ) -> Result<Arc<PluginLibrary>, LoadError> {
        let path_buf = path.to_path_buf();
        if table_ptr.is_null() {
            return Err(LoadError::NullTable { path: path_buf });
        }
        // Read the three leading fields first: they are stable across every ABI version.
        // SAFETY: every ABI version starts with (u32, u32, usize).
        let (major, minor, size) = unsafe {
            let head = table_ptr as *const u32;
            let major = head.read();
            let minor = head.add(1).read();
            let size = (table_ptr as *const u8)
                .add(std::mem::offset_of!(PluginTableV1, size))
                .cast::<usize>()
                .read();
            (major, minor, size)
        };
        if major != abi::ABI_MAJOR {
            return Err(LoadError::AbiMismatch {
                path: path_buf,
                found_major: major,
                found_minor: minor,
                expected_major: abi::ABI_MAJOR,
                expected_minor: abi::ABI_MINOR,
            });
        }
        if size < abi::TABLE_V1_0_SIZE {
            return Err(LoadError::TableTooSmall {
                path: path_buf,
                found: size,
                expected: abi::TABLE_V1_0_SIZE,
                major,
            });
        }
        // The function pointers are read as raw addresses first: a null one in a Rust
        // `fn` type would be undefined behaviour, and calling it a crash of the agent.
        for (field, offset) in [
            ("create", std::mem::offset_of!(PluginTableV1, create)),
            ("call", std::mem::offset_of!(PluginTableV1, call)),
            ("free_buf", std::mem::offset_of!(PluginTableV1, free_buf)),
            ("destroy", std::mem::offset_of!(PluginTableV1, destroy)),
        ] {
            // SAFETY: `size` covers the V1.0 table, which holds these fields.
            let f = unsafe {
                (table_ptr as *const u8)
                    .add(offset)
                    .cast::<*const c_void>()
                    .read()
            };
            if f.is_null() {
                return Err(LoadError::NullFunction {
                    path: path_buf,
                    field,
                });
            }
        }
        // SAFETY: the major version and size say the table has the V1 layout, its function
        // pointers are not null; the library is never unloaded, so 'static holds.
        let table: &'static PluginTableV1 = unsafe { &*table_ptr };
        let name = unsafe { str_from(table.name_ptr, table.name_len) };
        let version = unsafe { str_from(table.version_ptr, table.version_len) };
        let (Some(name), Some(version)) = (name, version) else {
            return Err(LoadError::BadName { path: path_buf });
        };
        Ok(Arc::new(PluginLibrary {
            path: path_buf,
            name,
            version,
            abi_major: major,
            abi_minor: minor,
            kinds: table.kinds,
            table,
        }))
    }

    /// The kinds this library implements.
    pub fn kinds(&self) -> Vec<PluginKind> {
        PluginKind::ALL
            .into_iter()
            .filter(|k| self.kinds & k.bit() != 0)
            .collect()
    }

    pub fn implements(&self, kind: PluginKind) -> bool {
        self.kinds & kind.bit() != 0
    }

    /// A new instance of the plugin, to be used in the role `kind`.
    pub fn instantiate(self: &Arc<Self>, kind: PluginKind) -> Result<ExternalPlugin, PluginError> {
        if !self.implements(kind) {
            return Err(PluginError::Unsupported(format!(
                "plugin {} ({}) does not implement the {kind} kind",
                self.name,
                self.path.display()
            )));
        }
        let mut handle: *mut c_void = std::ptr::null_mut();
        let mut out = RwBuf::empty();
        // SAFETY: both out-pointers are valid for writes.
        let status = unsafe { (self.table.create)(&mut handle, &mut out) };
        let bytes = self.take(out);
        match status {
            abi::STATUS_OK if !handle.is_null() => Ok(ExternalPlugin {
                library: Arc::clone(self),
                handle,
                kind,
                descriptors: Vec::new(),
            }),
            abi::STATUS_PANIC => Err(PluginError::Panicked(
                String::from_utf8_lossy(&bytes).into(),
            )),
            _ => Err(PluginError::Failed(format!(
                "create failed: {}",
                String::from_utf8_lossy(&bytes)
            ))),
        }
    }

    /// Copy a plugin-owned buffer and give it back.
    fn take(&self, buf: RwBuf) -> Vec<u8> {
        if buf.ptr.is_null() {
            return Vec::new();
        }
        // SAFETY: the plugin returned ptr/len describing an initialized buffer.
        let copy = unsafe { std::slice::from_raw_parts(buf.ptr, buf.len) }.to_vec();
        // SAFETY: the buffer came from this library.
        unsafe { (self.table.free_buf)(buf) };
        copy
    }
}

unsafe fn str_from(ptr: *const u8, len: usize) -> Option<String> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the plugin's table points at 'static string data of that length.
    let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
    std::str::from_utf8(bytes).ok().map(str::to_owned)
}

/// One instance of an external plugin, used in one role. It implements every plugin
/// trait; the calls of a kind it was not created for return `Unsupported`.
#[derive(Debug)]
pub struct ExternalPlugin {
    library: Arc<PluginLibrary>,
    handle: *mut c_void,
    kind: PluginKind,
    descriptors: Vec<MetricDescriptor>,
}

// SAFETY: the handle is only used through &mut self, so never from two threads at once;
// plugins are required (by the ABI rules) not to tie instances to a thread.
unsafe impl Send for ExternalPlugin {}

impl ExternalPlugin {
    /// An RDMA CM target (ABI 1.4) to an older plugin would be probed over the side
    /// channel without a word: refused, naming the plugin's ABI.
    fn refuse_cm(&self, targets: &[ProbeTarget]) -> Result<(), PluginError> {
        let lib = &self.library;
        if lib.abi_minor < 4 && targets.iter().any(|t| t.cm_port != 0 || t.tos.is_some()) {
            return Err(PluginError::Unsupported(format!(
                "the probe plugin {} ({}) speaks ABI {}.{}, which has no RDMA CM probes (they came with ABI 1.4): rebuild or upgrade the plugin",
                lib.name,
                lib.path.display(),
                lib.abi_major,
                lib.abi_minor
            )));
        }
        Ok(())
    }

    pub fn library(&self) -> &Arc<PluginLibrary> {
        &self.library
    }

    pub fn kind(&self) -> PluginKind {
        self.kind
    }

    fn call<Q: Serialize, R: DeserializeOwned>(
        &mut self,
        m: u32,
        req: &Q,
    ) -> Result<R, PluginError> {
        let req = serde_json::to_vec(req)
            .map_err(|e| PluginError::Failed(format!("cannot encode request: {e}")))?;
        let mut out = RwBuf::empty();
        // SAFETY: handle is live (destroyed only in Drop); req and out are valid.
        let status =
            unsafe { (self.library.table.call)(self.handle, m, req.as_ptr(), req.len(), &mut out) };
        let bytes = self.library.take(out);
        match status {
            abi::STATUS_OK => serde_json::from_slice(&bytes).map_err(|e| {
                PluginError::Failed(format!("cannot decode response of method {m}: {e}"))
            }),
            abi::STATUS_ERROR => Err(serde_json::from_slice::<ErrorWire>(&bytes)
                .map(PluginError::from)
                .unwrap_or_else(|_| PluginError::Failed(String::from_utf8_lossy(&bytes).into()))),
            abi::STATUS_PANIC => Err(PluginError::Panicked(
                String::from_utf8_lossy(&bytes).into(),
            )),
            abi::STATUS_UNSUPPORTED => Err(PluginError::Unsupported(format!(
                "method {m} is not implemented by this plugin"
            ))),
            other => Err(PluginError::Failed(format!(
                "unknown status {other} from method {m}"
            ))),
        }
    }
}

impl Drop for ExternalPlugin {
    fn drop(&mut self) {
        // SAFETY: the handle came from create and is destroyed once.
        unsafe { (self.library.table.destroy)(self.handle) };
    }
}

impl Plugin for ExternalPlugin {
    fn name(&self) -> &str {
        &self.library.name
    }

    fn start(&mut self, ctx: &PluginContext) -> Result<(), PluginError> {
        self.call::<_, ()>(method::START, ctx)?;
        if self.kind == PluginKind::Collector {
            // Asked once: the descriptors of a library do not change while it is loaded.
            self.descriptors = self.call(method::DESCRIPTORS, &())?;
        }
        Ok(())
    }

    fn stop(&mut self) {
        let _: Result<(), _> = self.call(method::STOP, &());
    }
}

impl DiscoveryPlugin for ExternalPlugin {
    fn discover(&mut self) -> Result<Inventory, PluginError> {
        self.call(method::DISCOVER, &())
    }
}

impl CollectorPlugin for ExternalPlugin {
    fn descriptors(&self) -> Vec<MetricDescriptor> {
        self.descriptors.clone()
    }

    fn collect(&mut self) -> Result<ScrapeResult, PluginError> {
        self.call(method::COLLECT, &())
    }
}

impl ConfigurationPlugin for ExternalPlugin {
    fn observe(&mut self) -> Result<Vec<QosState>, PluginError> {
        self.call(method::OBSERVE, &())
    }

    fn apply(&mut self, change: &QosChange, dry_run: bool) -> Result<ApplyOutcome, PluginError> {
        self.call(
            method::APPLY,
            &ApplyRequest {
                change: change.clone(),
                dry_run,
            },
        )
    }
}

impl ProbePlugin for ExternalPlugin {
    fn probe(&mut self, target: &ProbeTarget) -> Result<ProbeResult, PluginError> {
        self.refuse_cm(std::slice::from_ref(target))?;
        self.call(method::PROBE, target)
    }

    fn probe_many(&mut self, targets: &[ProbeTarget]) -> Result<Vec<ProbeResult>, PluginError> {
        self.refuse_cm(targets)?;
        let lib = &self.library;
        if lib.abi_minor < 3 && targets.iter().any(|t| t.path != 0 || t.flow_label != 0) {
            // It would take every flow of a peer for the first and answer for it twice.
            return Err(PluginError::Unsupported(format!(
                "the probe plugin {} ({}) speaks ABI {}.{}, which has one flow per peer (several flows with their own source ports came with ABI 1.3): rebuild or upgrade the plugin, or set fleet.paths = 1 and fleet.path_rotation = \"0s\"",
                lib.name,
                lib.path.display(),
                lib.abi_major,
                lib.abi_minor
            )));
        }
        if self.library.abi_minor >= 1 {
            match self.call::<_, Vec<ProbeResult>>(method::PROBE_MANY, &targets) {
                Err(PluginError::Unsupported(_)) => {}
                Ok(r) if r.len() != targets.len() => {
                    return Err(PluginError::Failed(format!(
                        "{}: probe_many returned {} results for {} targets",
                        self.library.name,
                        r.len(),
                        targets.len()
                    )))
                }
                other => return other,
            }
        }
        targets.iter().map(|t| self.probe(t)).collect()
    }

    fn bandwidth(&mut self, request: &BandwidthRequest) -> Result<BandwidthResult, PluginError> {
        let lib = Arc::clone(&self.library);
        if lib.abi_minor < 2 {
            return Err(PluginError::Unsupported(format!(
                "the probe plugin {} ({}) speaks ABI {}.{}, which has no bandwidth tests (they came with ABI 1.2): rebuild or upgrade the plugin",
                lib.name,
                lib.path.display(),
                lib.abi_major,
                lib.abi_minor
            )));
        }
        match self.call(method::BANDWIDTH, request) {
            Err(PluginError::Unsupported(_)) => Err(PluginError::Unsupported(format!(
                "the probe plugin {} ({}) does not run bandwidth tests",
                lib.name,
                lib.path.display()
            ))),
            other => other,
        }
    }
}

impl RemediationPlugin for ExternalPlugin {
    fn remediate(
        &mut self,
        request: &RemediationRequest,
    ) -> Result<RemediationOutcome, PluginError> {
        self.call(method::REMEDIATE, request)
    }
}
