//! Records the RDMA resource and QP statistic-counter requests and their replies, for
//! the fixtures in `testdata/` (see testdata/README.md and testdata/record-res.sh).
//!
//! `rdma-res-dump CAPTURE_DIR`: lists the devices, then for each device dumps its QPs,
//! CQs, MRs and PDs, and for each port reads the QP counter mode, asks for auto mode by
//! QP type and process, dumps the QP counters, and puts the mode back as it was (auto
//! off unless it was auto). Every
//! request and reply goes to CAPTURE_DIR (`NNNN-request.bin`, `NNNN-reply-K.bin`); the
//! standard output says which request each number was and what was decoded.

use std::path::PathBuf;

use rocewatch_netlink::rdma::RdmaNetlink;
use rocewatch_netlink::rdma_stat::{COUNTER_MASK_PID, COUNTER_MASK_QP_TYPE};
use rocewatch_netlink::NetlinkError;

/// Numbers the requests as the capture does (one per call).
struct Log(u32);

impl Log {
    fn req<T: std::fmt::Debug>(&mut self, what: &str, r: &Result<T, NetlinkError>) {
        self.0 += 1;
        match r {
            Ok(v) => println!("{:04} {what}: {v:#?}", self.0),
            Err(NetlinkError::Kernel { errno, .. }) => println!(
                "{:04} {what}: kernel errno {errno} ({})",
                self.0,
                std::io::Error::from_raw_os_error(*errno)
            ),
            Err(e) => println!("{:04} {what}: error: {e}", self.0),
        }
    }
}

fn main() {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: rdma-res-dump CAPTURE_DIR");
        std::process::exit(2);
    };
    let mut nl = match RdmaNetlink::open() {
        Ok(nl) => nl,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    nl.capture_to(PathBuf::from(dir));
    let mut log = Log(0);
    let devices = nl.devices();
    log.req("devices", &devices);
    let Ok(devices) = devices else {
        std::process::exit(1);
    };
    for d in &devices {
        let (i, name) = (d.index, &d.name);
        log.req(&format!("res qp {name}"), &nl.res_qps(i));
        log.req(&format!("res cq {name}"), &nl.res_cqs(i));
        log.req(&format!("res mr {name}"), &nl.res_mrs(i));
        log.req(&format!("res pd {name}"), &nl.res_pds(i));
        for port in 1..=d.ports {
            let link = format!("{name}/{port}");
            let saved = nl.qp_counter_mode(i, port);
            log.req(&format!("qp counter mode {link}"), &saved);
            let mask = COUNTER_MASK_QP_TYPE | COUNTER_MASK_PID;
            let set = nl.set_qp_counter_auto(i, port, mask);
            log.req(&format!("qp counter auto type,pid on {link}"), &set);
            log.req(
                &format!("qp counter mode {link}"),
                &nl.qp_counter_mode(i, port),
            );
            log.req(
                &format!("qp counters {link}"),
                &nl.qp_counters(i, Some(port)),
            );
            // Put back what was found (auto off unless it was auto): also when the
            // kernel refused auto mode, to record its answer to "off".
            if let Ok(saved) = &saved {
                log.req(
                    &format!("qp counter mode restore {link}"),
                    &nl.restore_qp_counter_mode(saved),
                );
                log.req(
                    &format!("qp counter mode {link}"),
                    &nl.qp_counter_mode(i, port),
                );
            }
        }
    }
}
