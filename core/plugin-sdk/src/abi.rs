//! The C ABI between the rocewatch host and a plugin library.
//!
//! Rules (append-only evolution):
//! - `abi_major` changes only when the layout of existing fields changes; the host refuses
//!   a different major.
//! - `abi_minor` grows when fields are appended; `size` is the size of the table the
//!   plugin was built with, and the host reads a field only if `size` covers it.
//! - The ABI version is not the product version.

use std::ffi::c_void;

/// The ABI major version this crate implements.
pub const ABI_MAJOR: u32 = 1;
/// The ABI minor version this crate implements.
pub const ABI_MINOR: u32 = 4;
/// The one symbol a plugin library exports (NUL-terminated for `dlsym`).
pub const ENTRY_SYMBOL: &[u8] = b"rocewatch_plugin_entry\0";

/// The call completed; the output buffer holds the JSON response.
pub const STATUS_OK: i32 = 0;
/// The plugin returned an error; the output buffer holds a JSON `PluginError`.
pub const STATUS_ERROR: i32 = 1;
/// The plugin panicked; the output buffer holds the panic message (UTF-8).
pub const STATUS_PANIC: i32 = 2;
/// The method is not implemented by this plugin; the output buffer is empty.
pub const STATUS_UNSUPPORTED: i32 = 3;

/// Methods of [`PluginTableV1::call`]. Requests and responses are JSON.
pub mod method {
    /// Request: `PluginContext`. Response: `null`.
    pub const START: u32 = 1;
    /// Request: empty. Response: `null`.
    pub const STOP: u32 = 2;
    /// Request: empty. Response: `Vec<MetricDescriptor>`.
    pub const DESCRIPTORS: u32 = 3;
    /// Request: empty. Response: `Inventory`.
    pub const DISCOVER: u32 = 4;
    /// Request: empty. Response: `ScrapeResult`.
    pub const COLLECT: u32 = 5;
    /// Request: empty. Response: `Vec<QosState>`.
    pub const OBSERVE: u32 = 6;
    /// Request: `{"change": QosChange, "dry_run": bool}`. Response: `ApplyOutcome`.
    pub const APPLY: u32 = 7;
    /// Request: `ProbeTarget`. Response: `ProbeResult`.
    pub const PROBE: u32 = 8;
    /// Request: `RemediationRequest`. Response: `RemediationOutcome`.
    pub const REMEDIATE: u32 = 9;
    /// Since 1.1. Request: `Vec<ProbeTarget>`. Response: `Vec<ProbeResult>`, one per
    /// target, in order. A 1.0 plugin answers unsupported and the host falls back to
    /// [`PROBE`] one target at a time.
    pub const PROBE_MANY: u32 = 10;
    /// Since 1.2. Request: `BandwidthRequest`. Response: `BandwidthResult`. A probe
    /// plugin that does not measure bandwidth (every 1.0 and 1.1 plugin) answers
    /// unsupported; the host says the plugin's ABI is too old for bandwidth tests.
    pub const BANDWIDTH: u32 = 11;
    // 1.3 added no method: `ProbeTarget` gained `path` and `flow_label` (several flows
    // per peer, each with its own UDP source port). The host sends them only to 1.3
    // plugins; an older plugin would answer every flow of a peer with the first one's.
    // 1.4 added no method either: `ProbeTarget` gained `cm_port` and `tos` (a probe
    // through the RDMA connection manager). The host sends them only to 1.4 plugins; an
    // older one would probe over its side channel and say nothing. `ProbeResult` gained
    // `cm` (where the CM put the connection), optional.
}

/// A byte buffer allocated by the plugin. The host copies it, then hands it back to the
/// plugin's `free_buf`.
#[repr(C)]
#[derive(Debug)]
pub struct RwBuf {
    pub ptr: *mut u8,
    pub len: usize,
    pub cap: usize,
}

impl RwBuf {
    pub const fn empty() -> Self {
        RwBuf {
            ptr: std::ptr::null_mut(),
            len: 0,
            cap: 0,
        }
    }

    /// Hand a Vec's allocation over to the other side.
    pub fn from_vec(v: Vec<u8>) -> Self {
        let mut v = std::mem::ManuallyDrop::new(v);
        RwBuf {
            ptr: v.as_mut_ptr(),
            len: v.len(),
            cap: v.capacity(),
        }
    }
}

/// Creates an instance. On success writes the handle and returns `STATUS_OK`; otherwise
/// writes a message into `out` and returns `STATUS_ERROR` or `STATUS_PANIC`.
pub type CreateFn = unsafe extern "C" fn(out_handle: *mut *mut c_void, out: *mut RwBuf) -> i32;
/// Calls `method` on an instance with a JSON request; writes the response into `out`.
pub type CallFn = unsafe extern "C" fn(
    handle: *mut c_void,
    method: u32,
    req_ptr: *const u8,
    req_len: usize,
    out: *mut RwBuf,
) -> i32;
/// Frees a buffer the plugin returned.
pub type FreeBufFn = unsafe extern "C" fn(buf: RwBuf);
/// Destroys an instance.
pub type DestroyFn = unsafe extern "C" fn(handle: *mut c_void);

/// The table a plugin library exports, version 1.
#[repr(C)]
pub struct PluginTableV1 {
    pub abi_major: u32,
    pub abi_minor: u32,
    /// `size_of::<PluginTableV1>()` as the plugin was built.
    pub size: usize,
    pub name_ptr: *const u8,
    pub name_len: usize,
    pub version_ptr: *const u8,
    pub version_len: usize,
    /// Bit mask of [`rocewatch_plugin_api::PluginKind::bit`].
    pub kinds: u32,
    pub create: CreateFn,
    pub call: CallFn,
    pub free_buf: FreeBufFn,
    pub destroy: DestroyFn,
}

// SAFETY: the table only holds pointers to 'static string data and functions.
unsafe impl Sync for PluginTableV1 {}

/// The smallest table a host of this major version accepts.
pub const TABLE_V1_0_SIZE: usize = std::mem::size_of::<PluginTableV1>();
