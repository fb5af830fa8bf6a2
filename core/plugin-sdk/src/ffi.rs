//! The plugin side of the C ABI. Every `extern "C"` function here catches panics.
//! [`PluginTableV1::of`], the table of a plugin type, is defined here too.

use std::any::Any;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use rocewatch_plugin_api::{
    BandwidthRequest, PluginContext, PluginError, PluginKind, ProbeTarget, QosChange,
    RemediationRequest,
};
use serde::{Deserialize, Serialize};

use crate::abi::{
    method, PluginTableV1, RwBuf, ABI_MAJOR, ABI_MINOR, STATUS_ERROR, STATUS_OK, STATUS_PANIC,
    STATUS_UNSUPPORTED,
};
use crate::export::ExportPlugin;

/// The request of [`method::APPLY`].
#[derive(Debug, Serialize, Deserialize)]
pub struct ApplyRequest {
    pub change: QosChange,
    pub dry_run: bool,
}

/// The message of a caught panic payload.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

unsafe fn write_out(out: *mut RwBuf, bytes: Vec<u8>) {
    if !out.is_null() {
        // SAFETY: the host passes a valid, writable RwBuf.
        unsafe { out.write(RwBuf::from_vec(bytes)) };
    }
}

/// # Safety
/// `out_handle` and `out` must be valid for writes (the host guarantees it).
pub unsafe extern "C" fn create<T: ExportPlugin>(
    out_handle: *mut *mut c_void,
    out: *mut RwBuf,
) -> i32 {
    match catch_unwind(|| Box::new(T::create())) {
        Ok(instance) => {
            // SAFETY: see the function's contract.
            unsafe { out_handle.write(Box::into_raw(instance) as *mut c_void) };
            STATUS_OK
        }
        Err(p) => {
            // SAFETY: see the function's contract.
            unsafe { write_out(out, panic_message(&*p).into_bytes()) };
            STATUS_PANIC
        }
    }
}

/// # Safety
/// `handle` must come from [`create`] of the same `T` and not be destroyed yet.
pub unsafe extern "C" fn destroy<T: ExportPlugin>(handle: *mut c_void) {
    if handle.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: see the function's contract.
        drop(unsafe { Box::from_raw(handle as *mut T) });
    }));
}

/// # Safety
/// `buf` must have been returned by this library.
pub unsafe extern "C" fn free_buf(buf: RwBuf) {
    if buf.ptr.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the buffer was made by RwBuf::from_vec in this library.
        drop(unsafe { Vec::from_raw_parts(buf.ptr, buf.len, buf.cap) });
    }));
}

enum Outcome {
    Ok(Vec<u8>),
    Err(PluginError),
    Unsupported,
}

fn respond<R: Serialize>(r: Result<R, PluginError>) -> Outcome {
    match r {
        Ok(v) => match serde_json::to_vec(&v) {
            Ok(bytes) => Outcome::Ok(bytes),
            Err(e) => Outcome::Err(PluginError::Failed(format!("cannot encode response: {e}"))),
        },
        Err(e) => Outcome::Err(e),
    }
}

fn decode<'a, Q: Deserialize<'a>>(req: &'a [u8]) -> Result<Q, PluginError> {
    serde_json::from_slice(req)
        .map_err(|e| PluginError::InvalidOptions(format!("cannot decode request: {e}")))
}

fn dispatch<T: ExportPlugin>(plugin: &mut T, m: u32, req: &[u8]) -> Outcome {
    match m {
        method::START => respond(decode::<PluginContext>(req).and_then(|ctx| plugin.start(&ctx))),
        method::STOP => {
            plugin.stop();
            respond(Ok(()))
        }
        method::DESCRIPTORS => match plugin.as_collector() {
            Some(c) => respond(Ok(c.descriptors())),
            None => Outcome::Unsupported,
        },
        method::DISCOVER => match plugin.as_discovery() {
            Some(p) => respond(p.discover()),
            None => Outcome::Unsupported,
        },
        method::COLLECT => match plugin.as_collector() {
            Some(p) => respond(p.collect()),
            None => Outcome::Unsupported,
        },
        method::OBSERVE => match plugin.as_configuration() {
            Some(p) => respond(p.observe()),
            None => Outcome::Unsupported,
        },
        method::APPLY => match plugin.as_configuration() {
            Some(p) => {
                respond(decode::<ApplyRequest>(req).and_then(|r| p.apply(&r.change, r.dry_run)))
            }
            None => Outcome::Unsupported,
        },
        method::PROBE => match plugin.as_probe() {
            Some(p) => respond(decode::<ProbeTarget>(req).and_then(|t| p.probe(&t))),
            None => Outcome::Unsupported,
        },
        method::PROBE_MANY => match plugin.as_probe() {
            Some(p) => respond(decode::<Vec<ProbeTarget>>(req).and_then(|t| {
                p.probe_many(&t).and_then(|r| {
                    if r.len() == t.len() {
                        Ok(r)
                    } else {
                        Err(PluginError::failed(format!(
                            "probe_many returned {} results for {} targets",
                            r.len(),
                            t.len()
                        )))
                    }
                })
            })),
            None => Outcome::Unsupported,
        },
        method::BANDWIDTH => match plugin.as_probe() {
            Some(p) => respond(decode::<BandwidthRequest>(req).and_then(|r| p.bandwidth(&r))),
            None => Outcome::Unsupported,
        },
        method::REMEDIATE => match plugin.as_remediation() {
            Some(p) => respond(decode::<RemediationRequest>(req).and_then(|r| p.remediate(&r))),
            None => Outcome::Unsupported,
        },
        _ => Outcome::Unsupported,
    }
}

/// # Safety
/// `handle` must come from [`create`] of the same `T`; `req_ptr`/`req_len` must describe a
/// readable buffer (or be null/0); `out` must be valid for writes. The host never calls
/// one handle from two threads at once.
pub unsafe extern "C" fn call<T: ExportPlugin>(
    handle: *mut c_void,
    m: u32,
    req_ptr: *const u8,
    req_len: usize,
    out: *mut RwBuf,
) -> i32 {
    if handle.is_null() {
        // SAFETY: see the function's contract.
        unsafe {
            write_out(
                out,
                br#"{"kind":"failed","message":"null plugin handle"}"#.to_vec(),
            )
        };
        return STATUS_ERROR;
    }
    let req: &[u8] = if req_ptr.is_null() || req_len == 0 {
        &[]
    } else {
        // SAFETY: see the function's contract.
        unsafe { std::slice::from_raw_parts(req_ptr, req_len) }
    };
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: see the function's contract.
        let plugin = unsafe { &mut *(handle as *mut T) };
        dispatch(plugin, m, req)
    }));
    // SAFETY (all writes below): see the function's contract.
    match result {
        Ok(Outcome::Ok(bytes)) => {
            unsafe { write_out(out, bytes) };
            STATUS_OK
        }
        Ok(Outcome::Err(e)) => {
            let bytes = serde_json::to_vec(&ErrorWire::from(&e)).unwrap_or_default();
            unsafe { write_out(out, bytes) };
            STATUS_ERROR
        }
        Ok(Outcome::Unsupported) => STATUS_UNSUPPORTED,
        Err(p) => {
            unsafe { write_out(out, panic_message(&*p).into_bytes()) };
            STATUS_PANIC
        }
    }
}

/// How a `PluginError` crosses the boundary.
#[derive(Debug, Serialize, Deserialize)]
pub struct ErrorWire {
    pub kind: String,
    pub message: String,
}

impl From<&PluginError> for ErrorWire {
    fn from(e: &PluginError) -> Self {
        let (kind, message) = match e {
            PluginError::Unsupported(m) => ("unsupported", m),
            PluginError::InvalidOptions(m) => ("invalid_options", m),
            PluginError::Failed(m) => ("failed", m),
            PluginError::Panicked(m) => ("panicked", m),
        };
        ErrorWire {
            kind: kind.to_string(),
            message: message.clone(),
        }
    }
}

impl From<ErrorWire> for PluginError {
    fn from(w: ErrorWire) -> Self {
        match w.kind.as_str() {
            "unsupported" => PluginError::Unsupported(w.message),
            "invalid_options" => PluginError::InvalidOptions(w.message),
            "panicked" => PluginError::Panicked(w.message),
            _ => PluginError::Failed(w.message),
        }
    }
}

const fn kinds_mask(kinds: &[PluginKind]) -> u32 {
    let mut mask = 0;
    let mut i = 0;
    while i < kinds.len() {
        mask |= kinds[i].bit();
        i += 1;
    }
    mask
}

impl PluginTableV1 {
    /// The table for plugin type `T` (used by [`crate::export_plugin!`]). Defined here,
    /// beside the entry points it points to, so that `abi` does not depend on `ffi`.
    pub const fn of<T: ExportPlugin>() -> Self {
        PluginTableV1 {
            abi_major: ABI_MAJOR,
            abi_minor: ABI_MINOR,
            size: std::mem::size_of::<PluginTableV1>(),
            name_ptr: T::NAME.as_ptr(),
            name_len: T::NAME.len(),
            version_ptr: T::VERSION.as_ptr(),
            version_len: T::VERSION.len(),
            kinds: kinds_mask(T::KINDS),
            create: create::<T>,
            call: call::<T>,
            free_buf,
            destroy: destroy::<T>,
        }
    }
}
