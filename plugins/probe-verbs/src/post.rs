//! Posting one work request on a queue pair, whoever owns it: the probe's own queue
//! pairs ([`crate::verbs`]) and those librdmacm creates on a CM id ([`crate::cm`]).

use std::ptr;

use rdma_sys::*;

/// Post one receive of `sge` as `wr_id` on `qp` (the verbs probe's or a CM id's).
///
/// # Safety
/// `qp` is a live queue pair and `sge` names memory registered on its device.
pub(crate) unsafe fn post_recv_raw(
    qp: *mut ibv_qp,
    mut sge: ibv_sge,
    wr_id: u64,
) -> Result<(), std::io::Error> {
    // SAFETY: an all-zero work request is valid; fields set below.
    let mut wr: ibv_recv_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = wr_id;
    wr.sg_list = &mut sge;
    wr.num_sge = 1;
    let mut bad = ptr::null_mut();
    // SAFETY: the caller's qp and sge; wr lives for the call.
    match unsafe { ibv_post_recv(qp, &mut wr, &mut bad) } {
        0 => Ok(()),
        r => Err(std::io::Error::from_raw_os_error(r)),
    }
}

/// Post one signaled SEND of `sge` as `wr_id` on `qp`.
///
/// # Safety
/// As [`post_recv_raw`].
pub(crate) unsafe fn post_send_raw(
    qp: *mut ibv_qp,
    mut sge: ibv_sge,
    wr_id: u64,
) -> Result<(), std::io::Error> {
    // SAFETY: an all-zero work request is valid; fields set below.
    let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = wr_id;
    wr.sg_list = &mut sge;
    wr.num_sge = 1;
    wr.opcode = ibv_wr_opcode::IBV_WR_SEND;
    wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
    let mut bad = ptr::null_mut();
    // SAFETY: the caller's qp and sge; wr lives for the call.
    match unsafe { ibv_post_send(qp, &mut wr, &mut bad) } {
        0 => Ok(()),
        r => Err(std::io::Error::from_raw_os_error(r)),
    }
}
