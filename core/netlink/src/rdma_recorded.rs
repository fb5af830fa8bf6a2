//! Tests against what a real kernel answered: the resource and QP-counter requests of
//! `examples/rdma-res-dump.rs` and their replies, recorded in the soft-RoCE lab while
//! `ib_write_bw` ran (testdata/README.md, testdata/record-res.sh), played back in the
//! recorded order through a socketpair standing in for the kernel. The decoded values are
//! checked against what `rdma -j resource show qp|cq|mr|pd` and `rdma statistic qp`
//! printed in the same guest at the same time, and against ib_write_bw's own report.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::msg::{self, messages};
use crate::rdma::{nldev_type, RdmaDevice, RdmaNetlink, ATTR_DEV_NAME, ATTR_PORT_INDEX};
use crate::rdma_res::{decode_res_qps, ResCq, ResMr, ResPd, ResQp};
use crate::rdma_stat::{CounterMode, QpCounter, QpCounterMode, CMD_STAT_SET};
use crate::rdma_stat::{COUNTER_MASK_PID, COUNTER_MASK_QP_TYPE};
use crate::replay::{rdma_pair, FakeKernel};
use crate::NetlinkError;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/rxe-6.1/");

fn read(dir: &str, name: &str) -> Option<Vec<u8>> {
    std::fs::read(format!("{DIR}{dir}/{name}")).ok()
}

fn text(dir: &str, name: &str) -> String {
    String::from_utf8(read(dir, name).unwrap_or_else(|| panic!("{dir}/{name}"))).unwrap()
}

/// What `rdma -j` printed: an array of objects.
fn rdma_json(dir: &str, name: &str) -> Vec<Map<String, Value>> {
    let v: Value = serde_json::from_str(&text(dir, name)).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_object().unwrap().clone())
        .collect()
}

/// pid -> /proc/PID/comm of the ib_write_bw that ran (perf-comm.txt).
fn comms(dir: &str) -> BTreeMap<u32, String> {
    text(dir, "perf-comm.txt")
        .lines()
        .filter_map(|l| {
            let (pid, comm) = l.split_once(' ')?;
            Some((pid.parse().ok()?, comm.to_string()))
        })
        .collect()
}

/// One recorded request: queues its replies, makes the call, checks that the request
/// sent is byte for byte the recorded one.
fn step<T>(
    nl: &mut RdmaNetlink,
    kernel: &FakeKernel,
    dir: &str,
    n: u32,
    call: impl FnOnce(&mut RdmaNetlink) -> T,
) -> T {
    for k in 1.. {
        match read(dir, &format!("{n:04}-reply-{k}.bin")) {
            Some(d) => kernel.reply(&d),
            None => break,
        }
    }
    let out = call(nl);
    let sent = kernel.request();
    assert_eq!(
        sent,
        read(dir, &format!("{n:04}-request.bin")).unwrap(),
        "{dir}: request {n}"
    );
    out
}

/// What each call of the example decoded, in its order.
struct Recording {
    devices: Vec<RdmaDevice>,
    qps: Vec<ResQp>,
    cqs: Vec<ResCq>,
    mrs: Vec<ResMr>,
    pds: Vec<ResPd>,
    mode_found: QpCounterMode,
    auto_on: Result<(), NetlinkError>,
    mode_auto: QpCounterMode,
    counters: Vec<QpCounter>,
    restore: Result<(), NetlinkError>,
    mode_after: QpCounterMode,
}

fn replay(dir: &str) -> Recording {
    let (mut nl, k) = rdma_pair();
    let devices = step(&mut nl, &k, dir, 1, |nl| nl.devices()).unwrap();
    assert_eq!(devices.len(), 1);
    let (i, port) = (devices[0].index, 1);
    let qps = step(&mut nl, &k, dir, 2, |nl| nl.res_qps(i)).unwrap();
    let cqs = step(&mut nl, &k, dir, 3, |nl| nl.res_cqs(i)).unwrap();
    let mrs = step(&mut nl, &k, dir, 4, |nl| nl.res_mrs(i)).unwrap();
    let pds = step(&mut nl, &k, dir, 5, |nl| nl.res_pds(i)).unwrap();
    let mode_found = step(&mut nl, &k, dir, 6, |nl| nl.qp_counter_mode(i, port)).unwrap();
    let mask = COUNTER_MASK_QP_TYPE | COUNTER_MASK_PID;
    let auto_on = step(&mut nl, &k, dir, 7, |nl| {
        nl.set_qp_counter_auto(i, port, mask)
    });
    let mode_auto = step(&mut nl, &k, dir, 8, |nl| nl.qp_counter_mode(i, port)).unwrap();
    let counters = step(&mut nl, &k, dir, 9, |nl| nl.qp_counters(i, Some(port))).unwrap();
    let restore = step(&mut nl, &k, dir, 10, |nl| {
        nl.restore_qp_counter_mode(&mode_found)
    });
    let mode_after = step(&mut nl, &k, dir, 11, |nl| nl.qp_counter_mode(i, port)).unwrap();
    assert!(
        read(dir, "0012-request.bin").is_none(),
        "every request replayed"
    );
    Recording {
        devices,
        qps,
        cqs,
        mrs,
        pds,
        mode_found,
        auto_on,
        mode_auto,
        counters,
        restore,
        mode_after,
    }
}

/// An object as `rdma -j` prints it, from the fields given (absent ones left out).
fn object(fields: Vec<(&str, Option<Value>)>) -> Map<String, Value> {
    fields
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_string(), v?)))
        .collect()
}

/// `rdma` prints keys in hex, as strings without `0x` (print_key(), rdma/res.c).
fn key(v: Option<u32>) -> Option<Value> {
    v.map(|v| Value::from(format!("{v:x}")))
}

/// "comm": the kernel owner's name, or /proc/PID/comm of a user object's process.
fn comm(pid: Option<u32>, kern: &Option<String>, comms: &BTreeMap<u32, String>) -> Value {
    match (pid, kern) {
        (_, Some(k)) => Value::from(k.as_str()),
        (Some(p), None) => Value::from(comms[&p].as_str()),
        (None, None) => Value::Null,
    }
}

fn qp_as_rdma(q: &ResQp, comms: &BTreeMap<u32, String>) -> Map<String, Value> {
    object(vec![
        ("ifindex", Some(q.dev_index.into())),
        ("ifname", Some(q.dev_name.as_str().into())),
        ("port", q.port.map(Value::from)),
        ("lqpn", Some(q.lqpn.into())),
        ("rqpn", q.rqpn.map(Value::from)),
        ("type", Some(q.qp_type.name().into())),
        ("state", Some(q.state.name().into())),
        ("pdn", q.pdn.map(Value::from)),
        ("pid", q.pid.map(Value::from)),
        ("comm", Some(comm(q.pid, &q.kern_name, comms))),
    ])
}

fn cq_as_rdma(c: &ResCq, comms: &BTreeMap<u32, String>) -> Map<String, Value> {
    // poll_ctx_to_str() of iproute2's rdma/res-cq.c (enum ib_poll_context).
    let poll = ["DIRECT", "SOFTIRQ", "WORKQUEUE", "UNBOUND_WORKQUEUE"];
    object(vec![
        ("ifindex", Some(c.dev_index.into())),
        ("ifname", Some(c.dev_name.as_str().into())),
        ("cqn", c.cqn.map(Value::from)),
        ("cqe", Some(c.cqe.into())),
        ("users", Some(c.users.into())),
        ("poll-ctx", c.poll_ctx.map(|p| poll[usize::from(p)].into())),
        (
            "adaptive-moderation",
            c.adaptive_moderation.map(Value::from),
        ),
        ("ctxn", c.ctxn.map(Value::from)),
        ("pid", c.pid.map(Value::from)),
        ("comm", Some(comm(c.pid, &c.kern_name, comms))),
    ])
}

fn mr_as_rdma(m: &ResMr, comms: &BTreeMap<u32, String>) -> Map<String, Value> {
    object(vec![
        ("ifindex", Some(m.dev_index.into())),
        ("ifname", Some(m.dev_name.as_str().into())),
        ("mrn", m.mrn.map(Value::from)),
        ("rkey", key(m.rkey)),
        ("lkey", key(m.lkey)),
        ("iova", m.iova.map(|v| format!("{v:x}").into())),
        ("mrlen", Some(m.mrlen.into())),
        ("pdn", m.pdn.map(Value::from)),
        ("pid", m.pid.map(Value::from)),
        ("comm", Some(comm(m.pid, &m.kern_name, comms))),
    ])
}

fn pd_as_rdma(p: &ResPd, comms: &BTreeMap<u32, String>) -> Map<String, Value> {
    object(vec![
        ("ifindex", Some(p.dev_index.into())),
        ("ifname", Some(p.dev_name.as_str().into())),
        ("pdn", p.pdn.map(Value::from)),
        ("local_dma_lkey", key(p.local_dma_lkey)),
        ("unsafe_global_rkey", key(p.unsafe_global_rkey)),
        ("users", Some(p.users.into())),
        ("ctxn", p.ctxn.map(Value::from)),
        ("pid", p.pid.map(Value::from)),
        ("comm", Some(comm(p.pid, &p.kern_name, comms))),
    ])
}

/// `rdma -j resource show qp` without the fields that move while the test runs (the
/// PSNs, checked separately) and the one not decoded (path-mig-state).
fn rdma_qps(dir: &str, name: &str) -> Vec<Map<String, Value>> {
    let mut v = rdma_json(dir, name);
    for o in &mut v {
        for k in ["sq-psn", "rq-psn", "path-mig-state"] {
            o.remove(k);
        }
    }
    v
}

/// Our PSNs lie between (or on) what rdma printed just before and just after.
fn psns_between(dir: &str, qps: &[ResQp]) {
    let (before, after) = (
        rdma_json(dir, "rdma-resource-show-qp-before.json"),
        rdma_json(dir, "rdma-resource-show-qp.json"),
    );
    for (i, q) in qps.iter().enumerate() {
        for (ours, name) in [(q.sq_psn, "sq-psn"), (q.rq_psn, "rq-psn")] {
            let (b, a) = (before[i].get(name), after[i].get(name));
            let Some(ours) = ours else {
                assert_eq!((b, a), (None, None), "{dir}: QP {} {name}", q.lqpn);
                continue;
            };
            let (b, a) = (b.unwrap().as_u64().unwrap(), a.unwrap().as_u64().unwrap());
            assert!(
                b <= u64::from(ours) && u64::from(ours) <= a,
                "{dir}: QP {} {name} {b} <= {ours} <= {a}",
                q.lqpn
            );
        }
    }
}

/// The mode as `rdma statistic qp mode` words it (prepare_auto_mode_str(), rdma/stat.c).
fn mode_words(m: &QpCounterMode) -> String {
    if m.mode != CounterMode::Auto {
        return "qp auto off".to_string();
    }
    let names: Vec<_> = [(COUNTER_MASK_QP_TYPE, "type"), (COUNTER_MASK_PID, "pid")]
        .into_iter()
        .filter(|(bit, _)| m.auto_mask & bit != 0)
        .map(|(_, n)| n)
        .collect();
    format!("qp auto {} on", names.join(","))
}

/// The JSON lines iproute2 printed after `$ rdma -j statistic qp CMD` in
/// rdma-statistic.txt.
fn iproute2_answers(dir: &str, cmd: &str) -> Vec<Value> {
    let text = text(dir, "rdma-statistic.txt");
    let mut lines = text.lines();
    let mut out = Vec::new();
    while let Some(l) = lines.next() {
        if l == format!("$ rdma -j statistic qp {cmd}") {
            out.push(serde_json::from_str(lines.next().unwrap()).unwrap());
        }
    }
    out
}

/// ib_write_bw's "local address" and "remote address" lines: QPN, PSN, RKey.
fn perftest_addresses(dir: &str) -> [(u32, u32, u32); 2] {
    let text = text(dir, "perftest.txt");
    let field = |l: &str, name: &str| {
        let v = l
            .split(name)
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap();
        u32::from_str_radix(v.trim_start_matches("0x"), 16).unwrap()
    };
    let find = |which: &str| {
        let l = text.lines().find(|l| l.contains(which)).unwrap();
        (field(l, "QPN"), field(l, "PSN"), field(l, "RKey"))
    };
    [find("local address"), find("remote address")]
}

fn check_resources(dir: &str, r: &Recording) {
    let comms = comms(dir);
    let ours: Vec<_> = r.qps.iter().map(|q| qp_as_rdma(q, &comms)).collect();
    assert_eq!(
        ours,
        rdma_qps(dir, "rdma-resource-show-qp-before.json"),
        "{dir}"
    );
    assert_eq!(ours, rdma_qps(dir, "rdma-resource-show-qp.json"), "{dir}");
    psns_between(dir, &r.qps);
    let ours: Vec<_> = r.cqs.iter().map(|c| cq_as_rdma(c, &comms)).collect();
    assert_eq!(ours, rdma_json(dir, "rdma-resource-show-cq.json"), "{dir}");
    assert_eq!(ours, rdma_json(dir, "rdma-resource-show-cq-before.json"));
    let ours: Vec<_> = r.mrs.iter().map(|m| mr_as_rdma(m, &comms)).collect();
    assert_eq!(ours, rdma_json(dir, "rdma-resource-show-mr.json"), "{dir}");
    assert_eq!(ours, rdma_json(dir, "rdma-resource-show-mr-before.json"));
    let ours: Vec<_> = r.pds.iter().map(|p| pd_as_rdma(p, &comms)).collect();
    assert_eq!(ours, rdma_json(dir, "rdma-resource-show-pd.json"), "{dir}");
    assert_eq!(ours, rdma_json(dir, "rdma-resource-show-pd-before.json"));
}

#[test]
fn client_resources_match_rdma_resource_show_and_perftest() {
    let r = replay("res-client");
    check_resources("res-client", &r);
    assert_eq!(
        (r.devices[0].index, r.devices[0].name.as_str()),
        (0, "rxe0")
    );
    // ib_write_bw's RC QP, connected (RTS), of the pid that ran it; the kernel's GSI QP
    // (QP1 of ib_core's MAD layer) without a pid.
    let (rc, gsi) = (&r.qps[0], &r.qps[1]);
    assert_eq!((rc.qp_type.name(), rc.state.name()), ("RC", "RTS"));
    assert_eq!(
        (rc.port, rc.pid, rc.kern_name.as_deref()),
        (Some(1), Some(124), None)
    );
    assert_eq!((gsi.lqpn, gsi.qp_type.name(), gsi.pid), (1, "GSI", None));
    assert_eq!(gsi.kern_name.as_deref(), Some("ib_core"));
    // The same numbers ib_write_bw reported: its QPN, the peer's QPN, its buffer's rkey;
    // and, as the writer receives no requests, the PSN it expects is the peer's first.
    let [(local_qpn, _, local_rkey), (remote_qpn, remote_psn, _)] =
        perftest_addresses("res-client");
    assert_eq!((rc.lqpn, rc.rqpn), (local_qpn, Some(remote_qpn)));
    assert_eq!(rc.rq_psn, Some(remote_psn));
    assert_eq!(r.mrs.len(), 1);
    assert_eq!(
        (r.mrs[0].rkey, r.mrs[0].mrlen),
        (Some(local_rkey), 2 * 65536)
    );
}

#[test]
fn server_resources_match_rdma_resource_show_and_perftest() {
    // perftest's RDMA-write server leaves its QP in RTR (it never sends).
    let r = replay("res-server");
    check_resources("res-server", &r);
    let rc = &r.qps[0];
    assert_eq!(
        (rc.qp_type.name(), rc.state.name(), rc.sq_psn),
        ("RC", "RTR", Some(0))
    );
    let [(local_qpn, _, local_rkey), (remote_qpn, ..)] = perftest_addresses("res-server");
    assert_eq!((rc.lqpn, rc.rqpn), (local_qpn, Some(remote_qpn)));
    assert_eq!(r.mrs[0].rkey, Some(local_rkey));
}

#[test]
fn rxe_accepts_auto_mode_but_binds_no_qp_to_a_counter() {
    // Phase 1 (mode none at boot): auto mode by type and pid is accepted (rxe has port
    // hw stats), reads back as such, the dump has no counter, and "off" restores none.
    let r = replay("res-client");
    assert_eq!(
        (r.mode_found.mode, r.mode_found.auto_mask),
        (CounterMode::None, 0)
    );
    assert!(r.auto_on.is_ok() && r.restore.is_ok());
    assert_eq!(
        (r.mode_auto.mode, r.mode_auto.auto_mask),
        (CounterMode::Auto, 3)
    );
    assert_eq!(
        (r.mode_auto.dev_name.as_str(), r.mode_auto.port),
        ("rxe0", 1)
    );
    assert!(r.counters.is_empty());
    assert_eq!(r.mode_after, r.mode_found);
    // iproute2, right after: "qp auto off", no counters.
    let modes = iproute2_answers("res-client", "mode");
    assert_eq!(modes[0][0]["mode"], mode_words(&r.mode_after).as_str());
    assert_eq!(
        iproute2_answers("res-client", "show"),
        [Value::Array(vec![])]
    );
    // The auto-mode reply names the device and port (nldev_stat_set_doit()).
    let reply = read("res-client", "0007-reply-1.bin").unwrap();
    let m = messages(&reply).next().unwrap().unwrap();
    assert_eq!(m.ty, nldev_type(CMD_STAT_SET));
    let a: Vec<_> = msg::attrs(m.payload).collect::<Result<_, _>>().unwrap();
    assert!(a
        .iter()
        .any(|a| a.ty == ATTR_DEV_NAME && a.str() == Some("rxe0")));
    assert!(a
        .iter()
        .any(|a| a.ty == ATTR_PORT_INDEX && a.u32() == Some(1)));

    // Phase 2: auto mode on before ib_write_bw made its QP; the QP is there, and still
    // no counter (rxe cannot allocate one: a manual bind fails with ENOMEM, see
    // res-client/rdma-statistic.txt). Restoring what was found keeps auto mode on.
    let r = replay("res-auto");
    check_resources("res-auto", &r);
    assert_eq!(
        (r.mode_found.mode, r.mode_found.auto_mask),
        (CounterMode::Auto, 3)
    );
    assert!(r.auto_on.is_ok() && r.restore.is_ok());
    assert!(r
        .qps
        .iter()
        .any(|q| q.qp_type.name() == "RC" && q.pid.is_some()));
    assert!(r.counters.is_empty());
    assert_eq!(r.mode_after, r.mode_found);
    let modes = iproute2_answers("res-auto", "mode");
    assert_eq!(modes[0][0]["mode"], mode_words(&r.mode_after).as_str());
    assert_eq!(modes[0][0]["mode"], "qp auto type,pid on");
    assert_eq!(iproute2_answers("res-auto", "show"), [Value::Array(vec![])]);
}

#[test]
fn a_cut_recorded_qp_reply_loses_entries_or_errors_never_panics() {
    let reply = read("res-client", "0002-reply-1.bin").unwrap();
    let m = messages(&reply).next().unwrap().unwrap();
    let mut all = Vec::new();
    assert_eq!(decode_res_qps(m.payload, &mut all), Ok(2));
    for cut in 0..m.payload.len() {
        let mut out = Vec::new();
        match decode_res_qps(&m.payload[..cut], &mut out) {
            Ok(n) => assert!(n <= 2 && out == all[..n], "cut at {cut}"),
            Err(e) => assert!(!e.is_empty()),
        }
    }
}
