//! OTLP that survives outages: a VictoriaMetrics stopped for 60 s gets the queued data
//! when it returns; a tiny queue drops and counts; a gRPC receiver that starts late gets
//! the backlog in batches; a receiver that answers 413 to more than one snapshot a
//! request still gets every one after an outage, one whose limit is below a snapshot's
//! request gets it cut until it fits and the next exports under the limit learnt, and
//! one that refuses everything gets a few requests a snapshot, dropped, counted and said; TLS (custom CA, client certificate), headers and gzip work
//! on both transports. Delivery as the OTLP specification says: HTTP 429/502/503/504 and
//! the retryable gRPC codes retried, `Retry-After` and `RetryInfo` honoured however much
//! new data comes meanwhile, other failures (gRPC UNKNOWN, RESOURCE_EXHAUSTED without
//! RetryInfo, HTTP 400/500) dropped and counted; `partial_success` said once and its
//! points counted; a 600-port host's exports split under a gRPC receiver's 4 MiB limit.

use std::time::{Duration, Instant, SystemTime};

use crate::otlp::{start_vm, vm_bin};
use crate::support::*;

/// The agent with `config`, once its listeners are bound (port 0 in the configuration:
/// [`RunningAgent::prometheus_url`] says where).
fn agent(config: &str) -> (RunningAgent, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("rw.toml");
    std::fs::write(&cfg, config).unwrap();
    (
        RunningAgent::start(&["--config", cfg.to_str().unwrap()]),
        dir,
    )
}

fn metric(base: &str, line_prefix: &str) -> Option<f64> {
    let body = reqwest::blocking::get(format!("{base}/metrics"))
        .ok()?
        .text()
        .ok()?;
    body.lines()
        .find(|l| l.starts_with(line_prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// `rocewatch_exporter_dropped_total` of the OTLP exporter, whatever the reason.
fn otlp_dropped(base: &str) -> f64 {
    let Some(body) = reqwest::blocking::get(format!("{base}/metrics"))
        .ok()
        .and_then(|r| r.text().ok())
    else {
        return 0.0;
    };
    body.lines()
        .filter(|l| l.starts_with("rocewatch_exporter_dropped_total{exporter=\"otlp\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn victoriametrics_down_for_60s_gets_the_queued_data() {
    let Some(bin) = vm_bin() else { return };
    let data = tempfile::tempdir().unwrap();
    let vm = start_vm(&bin, "127.0.0.1:0", data.path(), &[]);
    let port = vm.port();
    let (mut rw, _cfg) = agent(&format!(
        "[agent]\nsysfs_root = {:?}\ninterval = \"500ms\"\n\n[exporters.prometheus]\nlisten = \"127.0.0.1:0\"\n\n\
         [exporters.otlp]\nendpoint = \"http://127.0.0.1:{port}/opentelemetry/v1/metrics\"\ninterval = \"1s\"\nretry_initial = \"500ms\"\nretry_max = \"4s\"\n",
        fixture("mlx5-roce-dual-port")
    ));
    let base = rw.prometheus_url();
    // A few exports arrive before the outage.
    std::thread::sleep(Duration::from_secs(3));
    // The outage.
    drop(vm);
    let down = SystemTime::now();
    std::thread::sleep(Duration::from_secs(60));
    assert!(rw.proc.alive(), "the agent must survive the outage");
    let errors = metric(&base, "rocewatch_exporter_errors_total{exporter=\"otlp\"}").unwrap_or(0.0);
    assert!(errors > 0.0, "failed exports are counted");
    let up = SystemTime::now();
    // The same port again: the agent's endpoint (taken in the minute between, it fails
    // here, saying so).
    let _vm = start_vm(&bin, &format!("127.0.0.1:{port}"), data.path(), &[]);
    // Snapshots taken during the outage arrive after the restart.
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut in_outage = 0;
    while Instant::now() < deadline {
        let body = reqwest::blocking::Client::new()
            .post(format!("http://127.0.0.1:{port}/api/v1/export"))
            .form(&[
                ("match[]", "rdma_port_io_bytes_total{rdma_device=\"mlx5_0\",network_io_direction=\"transmit\"}"),
                ("start", &format!("{}", unix(down) + 2.0)),
                ("end", &format!("{}", unix(up) - 2.0)),
            ])
            .send()
            .unwrap()
            .text()
            .unwrap();
        in_outage = body
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|v| v["timestamps"].as_array().map_or(0, |t| t.len()))
            .sum();
        if in_outage >= 40 {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(
        in_outage >= 40,
        "about one point per second of the 56 s window, got {in_outage}"
    );
    assert_eq!(
        otlp_dropped(&base),
        0.0,
        "the default queue holds 10 minutes"
    );
    let (status, log, took) = rw.proc.stop();
    assert!(status.success(), "{log}");
    assert!(log.contains("OTLP export recovered"), "{log}");
    assert!(took < Duration::from_secs(10), "shutdown took {took:?}");
}

#[test]
fn a_tiny_queue_drops_the_oldest_and_counts_it() {
    let closed = HeldPort::new(); // bound, nothing listens there
    let (mut rw, _cfg) = agent(&format!(
        "[agent]\nsysfs_root = {:?}\ninterval = \"200ms\"\n\n[exporters.prometheus]\nlisten = \"127.0.0.1:0\"\n\n\
         [exporters.otlp]\nendpoint = \"http://127.0.0.1:{}/v1/metrics\"\ninterval = \"200ms\"\nqueue_size = 2\nretry_initial = \"1s\"\nretry_max = \"1s\"\n",
        fixture("mlx5-roce-dual-port"),
        closed.port
    ));
    let base = rw.prometheus_url();
    std::thread::sleep(Duration::from_secs(3));
    let dropped = otlp_dropped(&base);
    assert!(
        dropped >= 5.0,
        "about 5 snapshots a second, 2 kept: {dropped}"
    );
    // Collection goes on regardless.
    let a = metric(
        &base,
        "rocewatch_samples_emitted_total{plugin=\"counters-sysfs\"}",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let b = metric(
        &base,
        "rocewatch_samples_emitted_total{plugin=\"counters-sysfs\"}",
    )
    .unwrap();
    assert!(b > a, "collection is never blocked by export");
    let (status, log, took) = rw.proc.stop();
    assert!(status.success(), "{log}");
    assert!(
        took < Duration::from_secs(5),
        "an unreachable endpoint must not hold the exit: {took:?}"
    );
}

#[test]
fn a_late_grpc_receiver_gets_the_backlog_in_batches() {
    let rt = runtime();
    // The receiver's port is held (connections refused) until it starts.
    let held = HeldPort::new();
    let (mut rw, _cfg) = agent(&format!(
        "[agent]\nsysfs_root = {:?}\ninterval = \"200ms\"\n\n[exporters.otlp]\nendpoint = \"http://127.0.0.1:{}\"\nprotocol = \"grpc\"\n\
         interval = \"300ms\"\nretry_initial = \"2s\"\nretry_max = \"2s\"\n",
        fixture("mlx5-roce-dual-port"),
        held.port
    ));
    // Snapshots pile up while nobody listens.
    std::thread::sleep(Duration::from_secs(3));
    let (_, received) = grpc_receiver::start_on(&rt, held.listen(), None);
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline
        && received
            .lock()
            .unwrap()
            .iter()
            .map(|(_, r)| r.resource_metrics.len())
            .sum::<usize>()
            < 8
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    let got = received.lock().unwrap().clone();
    let snapshots: usize = got.iter().map(|(_, r)| r.resource_metrics.len()).sum();
    assert!(
        snapshots >= 8,
        "the ~10 snapshots queued while the receiver was down: {snapshots}"
    );
    assert!(
        got.iter().any(|(_, r)| r.resource_metrics.len() > 1),
        "the backlog goes in batches"
    );
    let (status, log, _) = rw.proc.stop();
    assert!(status.success(), "{log}");
    rt.shutdown_background();
}

#[test]
fn grpc_over_mutual_tls_with_headers_and_gzip() {
    let rt = runtime();
    let pki = pki();
    let (port, received) =
        grpc_receiver::start(&rt, 0, Some((&pki.ca, &pki.server_cert, &pki.server_key)));
    let (mut rw, _cfg) = agent(&format!(
        "[agent]\nsysfs_root = {:?}\ninterval = \"200ms\"\n\n[exporters.otlp]\nendpoint = \"https://127.0.0.1:{port}\"\nprotocol = \"grpc\"\n\
         interval = \"300ms\"\ncompression = \"gzip\"\nheaders = {{ authorization = \"Bearer t0ken\" }}\n\n[exporters.otlp.tls]\n\
         ca_file = {:?}\ncert_file = {:?}\nkey_file = {:?}\n",
        fixture("mlx5-roce-dual-port"),
        pki.ca,
        pki.client_cert,
        pki.client_key
    ));
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline && received.lock().unwrap().is_empty() {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, log, _) = rw.proc.stop();
    let got = received.lock().unwrap().clone();
    assert!(!got.is_empty(), "nothing arrived over mTLS: {log}");
    assert!(
        got.iter()
            .all(|(auth, _)| auth.as_deref() == Some("Bearer t0ken")),
        "the header rides along"
    );
    assert!(status.success(), "{log}");
    rt.shutdown_background();
}

#[test]
fn https_with_custom_ca_basic_auth_and_gzip_to_victoriametrics() {
    let Some(bin) = vm_bin() else { return };
    let pki = pki();
    let data = tempfile::tempdir().unwrap();
    let vm = start_vm(
        &bin,
        "127.0.0.1:0",
        data.path(),
        &[
            "-tls".into(),
            format!("-tlsCertFile={}", pki.server_cert.display()),
            format!("-tlsKeyFile={}", pki.server_key.display()),
            "-httpAuth.username=agent".into(),
            "-httpAuth.password=s3cret".into(),
        ],
    );
    let port = vm.port();
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&pki.ca).unwrap()).unwrap();
    let client = reqwest::blocking::Client::builder()
        .add_root_certificate(ca)
        .build()
        .unwrap();
    // "agent:s3cret" in base64.
    let (mut rw, _cfg) = agent(&format!(
        "[agent]\nsysfs_root = {:?}\ninterval = \"200ms\"\n\n[exporters.otlp]\nendpoint = \"https://127.0.0.1:{port}/opentelemetry/v1/metrics\"\n\
         interval = \"300ms\"\ncompression = \"gzip\"\nheaders = {{ authorization = \"Basic YWdlbnQ6czNjcmV0\" }}\n\n[exporters.otlp.tls]\nca_file = {:?}\n",
        fixture("mlx5-roce-dual-port"),
        pki.ca
    ));
    let raw: f64 = std::fs::read_to_string(
        fixture("mlx5-roce-dual-port")
            .join("class/infiniband/mlx5_0/ports/1/counters/port_xmit_data"),
    )
    .unwrap()
    .trim()
    .parse()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut value = None;
    while Instant::now() < deadline && value.is_none() {
        let body = client
            .get(format!("https://127.0.0.1:{port}/api/v1/query"))
            .basic_auth("agent", Some("s3cret"))
            .query(&[("query", "rdma_port_io_bytes_total{rdma_device=\"mlx5_0\",network_io_direction=\"transmit\"}")])
            .send()
            .and_then(|r| r.text())
            .unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        value = v["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|s| s.parse::<f64>().ok());
        std::thread::sleep(Duration::from_millis(300));
    }
    let (status, log, _) = rw.proc.stop();
    assert_eq!(value, Some(4.0 * raw), "{log}");
    assert!(status.success(), "{log}");
}

#[test]
fn a_missing_tls_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("c.toml");
    std::fs::write(
        &f,
        "[exporters.otlp]\nendpoint = \"https://127.0.0.1:1/v1/metrics\"\n[exporters.otlp.tls]\nca_file = \"/nonexistent/ca.pem\"\n",
    )
    .unwrap();
    let o = rocewatch(
        &[
            "run",
            "--config",
            f.to_str().unwrap(),
            "--sysfs-root",
            fixture("no-devices").to_str().unwrap(),
            "--duration",
            "1s",
        ],
        &[],
    );
    assert!(
        stderr(&o).contains("exporters.otlp.tls.ca_file: cannot read /nonexistent/ca.pem"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn slow_and_failing_exporters_stall_neither_each_other_nor_collection() {
    // A receiver that accepts connections and never answers (slow), and a collectd port
    // where nothing listens (failing), while Prometheus is scraped.
    let slow = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let slow_port = slow.local_addr().unwrap().port();
    // Nothing listens there a moment ago (if something took it since, sends may not fail
    // and the assertion below says so).
    let closed_udp = free_udp_port();
    let (mut rw, _cfg) = agent(&format!(
        "[agent]\nsysfs_root = {:?}\ninterval = \"200ms\"\n\n[exporters.prometheus]\nlisten = \"127.0.0.1:0\"\n\n\
         [exporters.collectd]\nserver = \"127.0.0.1:{closed_udp}\"\n\n\
         [exporters.otlp]\nendpoint = \"http://127.0.0.1:{slow_port}/v1/metrics\"\ninterval = \"200ms\"\ntimeout = \"2s\"\n",
        fixture("mlx5-roce-dual-port")
    ));
    let base = rw.prometheus_url();
    let a = metric(
        &base,
        "rocewatch_samples_emitted_total{plugin=\"counters-sysfs\"}",
    )
    .unwrap_or(0.0);
    std::thread::sleep(Duration::from_secs(3));
    let b = metric(
        &base,
        "rocewatch_samples_emitted_total{plugin=\"counters-sysfs\"}",
    )
    .unwrap();
    // 3 s at 200 ms: ~15 collections of ~130 samples each.
    assert!(b - a > 10.0 * 100.0, "collection kept its pace: {a} -> {b}");
    assert!(
        metric(&base, "rocewatch_exporter_errors_total{exporter=\"otlp\"}").unwrap_or(0.0) >= 1.0,
        "the slow OTLP endpoint timed out"
    );
    assert!(
        metric(
            &base,
            "rocewatch_exporter_errors_total{exporter=\"collectd\"}"
        )
        .unwrap_or(0.0)
            >= 1.0,
        "collectd sends failed"
    );
    let (status, log, took) = rw.proc.stop();
    assert!(status.success(), "{log}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    drop(slow);
}

/// An OTLP/HTTP receiver that takes `max` snapshots a request: 413 to a request
/// carrying more `ResourceMetrics` (an agent's snapshot is one), or more than its byte
/// limit, 200 to others. It keeps the body of each request it took, counts the 413s, and
/// keeps every request's size and whether it was taken, in order.
mod single_snapshot_receiver {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::{Arc, Mutex};

    #[derive(Default)]
    pub struct Seen {
        pub taken: Vec<Vec<u8>>,
        pub too_large: usize,
        /// Every request: its size, and whether it was taken.
        pub requests: Vec<(usize, bool)>,
    }

    fn varint(b: &[u8]) -> Option<(u64, usize)> {
        let mut v = 0u64;
        for (i, byte) in b.iter().enumerate().take(10) {
            v |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Some((v, i + 1));
            }
        }
        None
    }

    /// The `resource_metrics` (field 1) of an encoded `ExportMetricsServiceRequest`.
    pub fn snapshots_in(body: &[u8]) -> Option<usize> {
        let (mut i, mut n) = (0, 0);
        while i < body.len() {
            let (key, k) = varint(&body[i..])?;
            i += k;
            if key & 7 != 2 {
                return None;
            }
            let (len, k) = varint(&body[i..])?;
            i += k + usize::try_from(len).ok()?;
            n += usize::from(key >> 3 == 1);
        }
        (i == body.len()).then_some(n)
    }

    fn serve(
        sock: std::net::TcpStream,
        (max, max_bytes): (usize, usize),
        seen: &Mutex<Seen>,
    ) -> std::io::Result<()> {
        let mut r = BufReader::new(sock.try_clone()?);
        let mut w = sock;
        loop {
            let mut len = None;
            let mut first = true;
            loop {
                let mut line = String::new();
                if r.read_line(&mut line)? == 0 {
                    return Ok(()); // the client closed its connection
                }
                if line == "\r\n" && !first {
                    break;
                }
                first = false;
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    len = v.trim().parse::<usize>().ok();
                }
                assert!(
                    !lower.starts_with("content-encoding:"),
                    "the test asks for uncompressed requests: {line}"
                );
            }
            let mut body = vec![0; len.expect("a content-length")];
            r.read_exact(&mut body)?;
            let n = snapshots_in(&body).expect("an ExportMetricsServiceRequest");
            let mut s = seen.lock().unwrap();
            let refused = n > max || body.len() > max_bytes;
            s.requests.push((body.len(), !refused));
            if refused {
                s.too_large += 1;
                drop(s);
                let msg = "one snapshot a request";
                write!(
                    w,
                    "HTTP/1.1 413 Payload Too Large\r\ncontent-length: {}\r\n\r\n{msg}",
                    msg.len()
                )?;
            } else {
                s.taken.push(body);
                drop(s);
                w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")?;
            }
        }
    }

    pub fn start(listener: std::net::TcpListener, max: usize) -> Arc<Mutex<Seen>> {
        start_limited(listener, max, usize::MAX)
    }

    /// [`start`], refusing as well a request over `max_bytes`.
    pub fn start_limited(
        listener: std::net::TcpListener,
        max: usize,
        max_bytes: usize,
    ) -> Arc<Mutex<Seen>> {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let s = seen.clone();
        std::thread::spawn(move || {
            for sock in listener.incoming().flatten() {
                let s = s.clone();
                std::thread::spawn(move || {
                    let _ = serve(sock, (max, max_bytes), &s);
                });
            }
        });
        seen
    }
}

/// After an outage the backlog goes merged; a receiver that answers 413 to more than one
/// snapshot a request gets every one of them still, in smaller requests down to one
/// each: nothing dropped that a smaller request delivers.
#[test]
fn a_413_splits_the_backlog_and_every_snapshot_arrives() {
    let held = HeldPort::new();
    let (mut rw, _cfg) = agent(&format!(
        "[agent]\nsysfs_root = {:?}\ninterval = \"200ms\"\n\n[exporters.prometheus]\nlisten = \"127.0.0.1:0\"\n\n\
         [exporters.otlp]\nendpoint = \"http://127.0.0.1:{}/v1/metrics\"\ninterval = \"300ms\"\ncompression = \"none\"\n\
         retry_initial = \"1s\"\nretry_max = \"1s\"\n",
        fixture("mlx5-roce-dual-port"),
        held.port
    ));
    let base = rw.prometheus_url();
    // The outage: about 13 snapshots queued.
    std::thread::sleep(Duration::from_secs(4));
    let seen = single_snapshot_receiver::start(held.listen(), 1);
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && seen.lock().unwrap().taken.len() < 20 {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, log, _) = rw.proc.stop();
    let s = seen.lock().unwrap();
    assert!(
        s.too_large >= 1,
        "the backlog was never sent merged: {} taken\n{log}",
        s.taken.len()
    );
    assert!(!log.contains("dropped"), "{log}");
    let distinct: std::collections::BTreeSet<&Vec<u8>> = s.taken.iter().collect();
    assert_eq!(distinct.len(), s.taken.len(), "each snapshot taken once");
    // The outage's snapshots and those since: 4 s + the wait at 300 ms each.
    assert!(s.taken.len() >= 20, "{} taken\n{log}", s.taken.len());
    assert!(status.success(), "{log}");
    drop(s);
    assert_eq!(otlp_dropped(&base), 0.0);
}

/// A receiver that refuses every request: a snapshot is cut only while what is refused
/// is over 16 KiB, then dropped, each snapshot counted once in
/// rocewatch_exporter_dropped_total, and said once with its size.
#[test]
fn a_single_snapshot_too_large_is_dropped_counted_and_said() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = single_snapshot_receiver::start(listener, 0);
    let (mut rw, _cfg) = agent(&format!(
        "[agent]\nsysfs_root = {:?}\ninterval = \"200ms\"\n\n[exporters.prometheus]\nlisten = \"127.0.0.1:0\"\n\n\
         [exporters.otlp]\nendpoint = \"http://127.0.0.1:{port}/v1/metrics\"\ninterval = \"300ms\"\ncompression = \"none\"\n",
        fixture("mlx5-roce-dual-port")
    ));
    let base = rw.prometheus_url();
    // Each snapshot is cut while what is refused is over 16 KiB, then dropped: a few
    // requests a snapshot.
    let deadline = Instant::now() + Duration::from_secs(10);
    let dropped = || otlp_dropped(&base);
    while Instant::now() < deadline && dropped() < 1.0 {
        std::thread::sleep(Duration::from_millis(100));
    }
    let n = dropped();
    let (status, log, _) = rw.proc.stop();
    assert!(n >= 1.0, "{n}\n{log}");
    assert!(
        log.contains("OTLP export: one request of ")
            && log.contains("uncompressed) is too large for the receiver, dropped"),
        "{log}"
    );
    assert_eq!(
        log.matches("is too large for the receiver, dropped")
            .count(),
        1,
        "said once\n{log}"
    );
    assert!(seen.lock().unwrap().taken.is_empty());
    assert!(status.success(), "{log}");
}

/// The agent on `tree` (exports every 300 ms, uncompressed) to a
/// [`single_snapshot_receiver`] taking `max` snapshots and `max_bytes` a request; the
/// receiver's port.
fn agent_to_limited(
    tree: &std::path::Path,
    max: usize,
    max_bytes: usize,
) -> (
    RunningAgent,
    tempfile::TempDir,
    std::sync::Arc<std::sync::Mutex<single_snapshot_receiver::Seen>>,
    u16,
) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = single_snapshot_receiver::start_limited(listener, max, max_bytes);
    let (rw, cfg) = agent(&format!(
        "[agent]\nsysfs_root = {:?}\ninterval = \"200ms\"\n\n[exporters.prometheus]\nlisten = \"127.0.0.1:0\"\n\n\
         [exporters.otlp]\nendpoint = \"http://127.0.0.1:{port}/v1/metrics\"\ninterval = \"300ms\"\ncompression = \"none\"\n",
        tree.join("sys")
    ));
    (rw, cfg, seen, port)
}

/// A receiver whose limit (20 KiB, over the 16 KiB under which nothing is cut) is below
/// `max_request_bytes` (4 MiB) answers 413 to a snapshot's request, which holds one
/// snapshot and cannot be split by snapshots: it is cut in two again and again (by
/// metric, then by series) until every part fits, and nothing is dropped; every port's
/// series arrives.
#[test]
fn a_413_on_one_snapshot_cuts_it_until_it_fits() {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    use prost::Message;
    let Some(tree) = scale_tree(8, 2) else {
        return;
    };
    let limit = 20 << 10;
    let (mut rw, _cfg, seen, _) = agent_to_limited(tree.path(), usize::MAX, limit);
    let base = rw.prometheus_url();
    // The port's up gauge of each port, as the receiver took them.
    let ports_up = || -> std::collections::BTreeSet<String> {
        let s = seen.lock().unwrap();
        let mut out = std::collections::BTreeSet::new();
        for body in &s.taken {
            let r = ExportMetricsServiceRequest::decode(body.as_slice()).expect("a request");
            for m in r
                .resource_metrics
                .iter()
                .flat_map(|rm| &rm.scope_metrics)
                .flat_map(|sm| &sm.metrics)
                .filter(|m| m.name == "rdma.port.up")
            {
                if let Some(Data::Gauge(g)) = &m.data {
                    out.extend(g.data_points.iter().map(|p| format!("{:?}", p.attributes)));
                }
            }
        }
        out
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline
        && (ports_up().len() < 16 || seen.lock().unwrap().taken.len() < 20)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let dropped = otlp_dropped(&base);
    let (status, log, _) = rw.proc.stop();
    let s = seen.lock().unwrap();
    assert!(
        s.too_large >= 1,
        "no request over the receiver's limit: the test proves nothing\n{log}"
    );
    assert!(log.contains("sent again in two"), "the cut is said\n{log}");
    for body in &s.taken {
        assert!(body.len() <= limit, "a request of {} taken", body.len());
    }
    drop(s);
    assert_eq!(ports_up().len(), 16, "every port's series\n{log}");
    assert_eq!(dropped, 0.0, "nothing dropped\n{log}");
    assert!(!log.contains("dropped"), "{log}");
    assert!(status.success(), "{log}");
}

/// `rocewatch_exporter_dropped_total{exporter="otlp",reason="too_large"}`.
fn dropped_too_large(base: &str) -> f64 {
    metric(
        base,
        "rocewatch_exporter_dropped_total{exporter=\"otlp\",reason=\"too_large\"}",
    )
    .unwrap_or(0.0)
}

/// `rocewatch_exporter_sent_total{exporter="otlp"}`: snapshots delivered.
fn otlp_sent(base: &str) -> f64 {
    metric(base, "rocewatch_exporter_sent_total{exporter=\"otlp\"}").unwrap_or(0.0)
}

/// Waits until `done` (polled every 50 ms) or `secs` have passed.
fn until(secs: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline && !done() {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The size (uncompressed) at or under which a request refused as too large is not cut
/// again (docs/EXPORTERS.md, "Too large anyway").
const CUT_FLOOR: usize = 16 << 10;

/// A receiver that refuses every request (a proxy with a tiny limit, a misconfigured
/// one): a snapshot is cut only while what is refused is over 16 KiB (no real receiver
/// refuses less), then dropped with all that is left of it and counted once: a few
/// requests a snapshot (its first piece halved down to 16 KiB), not two a data point;
/// said once, with the endpoint and the receiver's setting to raise.
#[test]
fn a_receiver_refusing_everything_gets_a_few_requests_a_snapshot() {
    let Some(tree) = scale_tree(8, 2) else {
        return;
    };
    let (mut rw, _cfg, seen, port) = agent_to_limited(tree.path(), 0, usize::MAX);
    let base = rw.prometheus_url();
    until(20, || dropped_too_large(&base) >= 3.0);
    // The requests first: a snapshot dropped after they are counted only adds to the
    // count of snapshots.
    let (requests, largest) = {
        let s = seen.lock().unwrap();
        let largest = s.requests.iter().map(|r| r.0).max().unwrap_or(0);
        (s.requests.len(), largest)
    };
    let dropped = dropped_too_large(&base);
    let (status, log, _) = rw.proc.stop();
    assert!(dropped >= 3.0, "{dropped} snapshots dropped in 20 s\n{log}");
    assert!(
        largest > 4 * CUT_FLOOR,
        "a snapshot of {largest} bytes is hardly cut: the test proves nothing\n{log}"
    );
    // A snapshot's first request, then its first half, and so on while over the floor:
    // halves are cut near the middle of their bytes.
    let halvings = (largest as f64 / CUT_FLOOR as f64).log2().ceil() as usize;
    let per_snapshot = 2 + halvings;
    assert!(
        requests <= (dropped as usize + 1) * per_snapshot,
        "{requests} requests for {dropped} snapshots dropped (and one being cut), over {per_snapshot} a snapshot\n{log}"
    );
    assert!(seen.lock().unwrap().taken.is_empty());
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("dropped with the rest of its snapshot"))
        .collect();
    assert_eq!(said.len(), 1, "said once, not once a snapshot\n{log}");
    for what in [
        &format!("127.0.0.1:{port}") as &str,
        "max_request_body_size",
        "is too large for the receiver",
    ] {
        assert!(said[0].contains(what), "{what} in {}", said[0]);
    }
    assert!(status.success(), "{log}");
}

/// A receiver whose limit (96 KiB: a bound is never learnt below 64 KiB) is below
/// `max_request_bytes` refuses the first export
/// it gets, which is cut until it fits; the largest piece it took becomes the bound of the
/// exports after it (their encoding, any merge), so that the next exports arrive with no
/// 413 at all. Said once, with the setting that makes it so from the start.
#[test]
fn the_limit_learnt_from_a_413_spares_the_next_exports_a_refusal() {
    let Some(tree) = scale_tree(24, 2) else {
        return;
    };
    let limit = 96 << 10;
    let (mut rw, _cfg, seen, _) = agent_to_limited(tree.path(), usize::MAX, limit);
    let base = rw.prometheus_url();
    let refused = || seen.lock().unwrap().too_large;
    // An export refused, then delivered cut: every refusal of its cutting is done.
    until(20, || refused() >= 1);
    let before = otlp_sent(&base);
    until(20, || otlp_sent(&base) > before);
    let first = refused();
    let delivered = otlp_sent(&base);
    // Four exports more.
    until(20, || otlp_sent(&base) >= delivered + 4.0);
    let (later, sent) = (refused(), otlp_sent(&base));
    let dropped = otlp_dropped(&base);
    let (status, log, _) = rw.proc.stop();
    let s = seen.lock().unwrap();
    let largest = s.requests.iter().map(|r| r.0).max().unwrap_or(0);
    assert!(
        first >= 1 && largest > limit,
        "no request over the receiver's limit: the test proves nothing\n{log}"
    );
    assert!(sent >= delivered + 4.0, "{sent} exports delivered\n{log}");
    assert_eq!(
        later,
        first,
        "the exports after the first cut are refused again ({} requests)\n{log}",
        s.requests.len()
    );
    for body in &s.taken {
        assert!(body.len() <= limit, "a request of {} taken", body.len());
    }
    assert_eq!(dropped, 0.0, "nothing dropped\n{log}");
    let said: Vec<&str> = log.lines().filter(|l| l.contains("kept under")).collect();
    assert_eq!(said.len(), 1, "the bound learnt said once\n{log}");
    for what in ["max_request_bytes", "max_request_body_size", "step by step"] {
        assert!(said[0].contains(what), "{what} in {}", said[0]);
    }
    assert!(status.success(), "{log}");
}

/// An OTLP/HTTP receiver that answers each request as its script says: `answer(n)` gives
/// the n-th request's (from 0) status line, extra header lines and body. It keeps every
/// request's body with when it came. Requests must come uncompressed.
mod scripted_http {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    pub type Seen = Arc<Mutex<Vec<(Instant, Vec<u8>)>>>;
    pub type Answer = (&'static str, String, Vec<u8>);

    fn serve(
        sock: std::net::TcpStream,
        seen: &Seen,
        answer: &(dyn Fn(usize) -> Answer + Send + Sync),
    ) -> std::io::Result<()> {
        let mut r = BufReader::new(sock.try_clone()?);
        let mut w = sock;
        loop {
            let mut len = None;
            let mut first = true;
            loop {
                let mut line = String::new();
                if r.read_line(&mut line)? == 0 {
                    return Ok(());
                }
                if line == "\r\n" && !first {
                    break;
                }
                first = false;
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    len = v.trim().parse::<usize>().ok();
                }
            }
            let mut body = vec![0; len.expect("a content-length")];
            r.read_exact(&mut body)?;
            let n = {
                let mut s = seen.lock().unwrap();
                s.push((Instant::now(), body));
                s.len() - 1
            };
            let (status, headers, body) = answer(n);
            write!(
                w,
                "HTTP/1.1 {status}\r\ncontent-type: application/x-protobuf\r\n{headers}content-length: {}\r\n\r\n",
                body.len()
            )?;
            w.write_all(&body)?;
        }
    }

    pub fn start(
        listener: std::net::TcpListener,
        answer: impl Fn(usize) -> Answer + Send + Sync + 'static,
    ) -> Seen {
        let seen = Seen::default();
        let answer: Arc<dyn Fn(usize) -> Answer + Send + Sync> = Arc::new(answer);
        let s = seen.clone();
        std::thread::spawn(move || {
            for sock in listener.incoming().flatten() {
                let (s, a) = (s.clone(), answer.clone());
                std::thread::spawn(move || {
                    let _ = serve(sock, &s, &*a);
                });
            }
        });
        seen
    }
}

/// An OTLP/gRPC receiver (tonic's, with its default 4 MiB message limit) that answers
/// each request as its script says; it keeps every request with when it came.
mod scripted_grpc {
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
        MetricsService, MetricsServiceServer,
    };
    use opentelemetry_proto::tonic::collector::metrics::v1::{
        ExportMetricsServiceRequest, ExportMetricsServiceResponse,
    };

    pub type Seen = Arc<Mutex<Vec<(Instant, ExportMetricsServiceRequest)>>>;
    type Script =
        Arc<dyn Fn(usize) -> Result<ExportMetricsServiceResponse, tonic::Status> + Send + Sync>;

    struct Receiver(Seen, Script);

    #[tonic::async_trait]
    impl MetricsService for Receiver {
        async fn export(
            &self,
            request: tonic::Request<ExportMetricsServiceRequest>,
        ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
            let n = {
                let mut s = self.0.lock().unwrap();
                s.push((Instant::now(), request.into_inner()));
                s.len() - 1
            };
            (self.1)(n).map(tonic::Response::new)
        }
    }

    /// `google.rpc.Status`, `google.protobuf.Any`, `google.rpc.RetryInfo` and
    /// `google.protobuf.Duration`, as googleapis defines them: what a server puts in
    /// `grpc-status-details-bin`.
    #[derive(Clone, PartialEq, prost::Message)]
    struct RpcStatus {
        #[prost(int32, tag = "1")]
        code: i32,
        #[prost(string, tag = "2")]
        message: String,
        #[prost(message, repeated, tag = "3")]
        details: Vec<Any>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct Any {
        #[prost(string, tag = "1")]
        type_url: String,
        #[prost(bytes = "vec", tag = "2")]
        value: Vec<u8>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct RetryInfo {
        #[prost(message, optional, tag = "1")]
        retry_delay: Option<ProtoDuration>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct ProtoDuration {
        #[prost(int64, tag = "1")]
        seconds: i64,
        #[prost(int32, tag = "2")]
        nanos: i32,
    }

    /// A status of `code` whose details carry a RetryInfo of `delay`.
    pub fn with_retry_info(
        code: tonic::Code,
        message: &str,
        delay: std::time::Duration,
    ) -> tonic::Status {
        use prost::Message;
        let info = RetryInfo {
            retry_delay: Some(ProtoDuration {
                seconds: delay.as_secs() as i64,
                nanos: delay.subsec_nanos() as i32,
            }),
        };
        let status = RpcStatus {
            code: code as i32,
            message: message.into(),
            details: vec![Any {
                type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
                value: info.encode_to_vec(),
            }],
        };
        tonic::Status::with_details(code, message, status.encode_to_vec().into())
    }

    pub fn start(
        rt: &tokio::runtime::Runtime,
        script: impl Fn(usize) -> Result<ExportMetricsServiceResponse, tonic::Status>
            + Send
            + Sync
            + 'static,
    ) -> (u16, Seen) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let listener = {
            let _guard = rt.enter();
            tokio::net::TcpListener::from_std(listener).unwrap()
        };
        let port = listener.local_addr().unwrap().port();
        let seen = Seen::default();
        let svc = MetricsServiceServer::new(Receiver(seen.clone(), Arc::new(script)))
            .accept_compressed(tonic::codec::CompressionEncoding::Gzip);
        rt.spawn(async move {
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(
                    tonic::codegen::tokio_stream::wrappers::TcpListenerStream::new(listener),
                )
                .await
                .unwrap();
        });
        (port, seen)
    }
}

/// Wait until `seen` holds `n` requests or `secs` pass.
fn wait_for<T>(seen: &std::sync::Mutex<Vec<T>>, n: usize, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline && seen.lock().unwrap().len() < n {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The agent exporting to `endpoint` every 300 ms (collecting every 200 ms), retrying
/// after 300 ms at first, with a Prometheus listener for its self-metrics.
fn exporting_agent(endpoint: &str, protocol: &str) -> (RunningAgent, tempfile::TempDir) {
    agent(&format!(
        "[agent]\nsysfs_root = {:?}\ninterval = \"200ms\"\n\n[exporters.prometheus]\nlisten = \"127.0.0.1:0\"\n\n\
         [exporters.otlp]\nendpoint = \"{endpoint}\"\nprotocol = \"{protocol}\"\ninterval = \"300ms\"\ncompression = \"none\"\n\
         retry_initial = \"300ms\"\nretry_max = \"10s\"\n",
        fixture("mlx5-roce-dual-port")
    ))
}

/// A receiver that answers 503 or 429 with `Retry-After` (delta-seconds, or an HTTP-date)
/// gets the same request again no earlier than it said, however many snapshots the agent
/// queues meanwhile (each used to wake the sender's backoff and retry at once: 13 retries
/// a second apart against `Retry-After: 20`); one that answers 502 gets it again after
/// the backoff; one that answers 400 or 500 never gets it again (the specification:
/// only 429, 502, 503 and 504 are retried), and the drop is counted with its reason.
#[test]
fn http_failures_are_retried_as_the_otlp_specification_says() {
    fn http_date(secs: u64) -> String {
        // IMF-fixdate, as httpdate writes it, `secs` from now (whole seconds: the wait
        // is at least secs - 1).
        let t = SystemTime::now() + Duration::from_secs(secs);
        let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        let (days, rem) = (d / 86400, d % 86400);
        // Civil from days (Howard Hinnant's algorithm).
        let z = days as i64 + 719468;
        let era = z.div_euclid(146097);
        let doe = z - era * 146097;
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        let wd = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
        let mon = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ][(month - 1) as usize];
        format!(
            "{wd}, {day:02} {mon} {year} {:02}:{:02}:{:02} GMT",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60
        )
    }
    // (first answer, its header as the answer goes, retried?, the least wait before the
    // retry)
    type Header = fn() -> String;
    let cases: Vec<(&'static str, Header, bool, Duration)> = vec![
        (
            "503 Service Unavailable",
            || "retry-after: 3\r\n".into(),
            true,
            Duration::from_millis(2900),
        ),
        // Whole seconds: 4 s from now is 3 s at least.
        (
            "429 Too Many Requests",
            || format!("retry-after: {}\r\n", http_date(4)),
            true,
            Duration::from_millis(2900),
        ),
        (
            "502 Bad Gateway",
            String::new,
            true,
            Duration::from_millis(200),
        ),
        ("400 Bad Request", String::new, false, Duration::ZERO),
        (
            "500 Internal Server Error",
            String::new,
            false,
            Duration::ZERO,
        ),
    ];
    for (status, header, retried, least) in cases {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = scripted_http::start(listener, move |n| {
            if n == 0 {
                (status, header(), b"go away".to_vec())
            } else {
                ("200 OK", String::new(), Vec::new())
            }
        });
        let (mut rw, _cfg) = exporting_agent(
            &format!("http://127.0.0.1:{port}/v1/metrics"),
            "http/protobuf",
        );
        let base = rw.prometheus_url();
        wait_for(&seen, 4, 20);
        // A retry, if any, is the first one's bytes again.
        let first_again = || {
            let s = seen.lock().unwrap();
            s.iter()
                .skip(1)
                .find(|(_, b)| *b == s[0].1)
                .map(|(t, _)| t.duration_since(s[0].0))
        };
        if retried {
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && first_again().is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let again = first_again();
        let dropped = metric(
            &base,
            "rocewatch_exporter_dropped_total{exporter=\"otlp\",reason=\"rejected\"}",
        )
        .unwrap_or(0.0);
        let (_, log, _) = rw.proc.stop();
        let n = seen.lock().unwrap().len();
        if retried {
            let again =
                again.unwrap_or_else(|| panic!("{status}: never retried ({n} requests)\n{log}"));
            assert!(
                again >= least,
                "{status} {header:?}: retried after {again:?}\n{log}"
            );
            // Nothing but the retry between: the snapshots queued meanwhile wait.
            let s = seen.lock().unwrap();
            assert!(
                s[1].1 == s[0].1,
                "{status}: the request after the refused one is its retry\n{log}"
            );
        } else {
            assert_eq!(again, None, "{status} must not be retried\n{log}");
            assert_eq!(
                dropped, 1.0,
                "{status}: the drop is counted as rejected\n{log}"
            );
            assert!(n >= 4, "{status}: later exports go on: {n}\n{log}");
        }
    }
}

/// `ExportMetricsServiceResponse { partial_success { rejected_data_points, error_message } }`,
/// encoded.
fn partial_success(rejected: i64, message: &str) -> Vec<u8> {
    use opentelemetry_proto::tonic::collector::metrics::v1::{
        ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
    };
    use prost::Message;
    ExportMetricsServiceResponse {
        partial_success: Some(ExportMetricsPartialSuccess {
            rejected_data_points: rejected,
            error_message: message.into(),
        }),
    }
    .encode_to_vec()
}

/// A receiver that takes part of each request (`partial_success`, over HTTP 200 and gRPC
/// OK): its message is logged once, not once per export; the rejected points are counted
/// in `rocewatch.exporter.rejected_points`; the request is not sent again.
#[test]
fn partial_success_is_said_once_and_its_points_counted() {
    let rt = runtime();
    for protocol in ["http/protobuf", "grpc"] {
        let (endpoint, seen_count): (String, Box<dyn Fn() -> usize>) = if protocol == "grpc" {
            let (port, seen) = scripted_grpc::start(&rt, |_| {
                use opentelemetry_proto::tonic::collector::metrics::v1::{
                    ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
                };
                Ok(ExportMetricsServiceResponse {
                    partial_success: Some(ExportMetricsPartialSuccess {
                        rejected_data_points: 7,
                        error_message: "7 points out of order (grpc)".into(),
                    }),
                })
            });
            (
                format!("http://127.0.0.1:{port}"),
                Box::new(move || {
                    let s = seen.lock().unwrap();
                    let distinct: std::collections::BTreeSet<Vec<u8>> = s
                        .iter()
                        .map(|(_, r)| prost::Message::encode_to_vec(r))
                        .collect();
                    assert_eq!(distinct.len(), s.len(), "no request sent twice");
                    s.len()
                }),
            )
        } else {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            let seen = scripted_http::start(listener, |_| {
                (
                    "200 OK",
                    String::new(),
                    partial_success(7, "7 points out of order (http)"),
                )
            });
            (
                format!("http://127.0.0.1:{port}/v1/metrics"),
                Box::new(move || {
                    let s = seen.lock().unwrap();
                    let distinct: std::collections::BTreeSet<&Vec<u8>> =
                        s.iter().map(|(_, b)| b).collect();
                    assert_eq!(distinct.len(), s.len(), "no request sent twice");
                    s.len()
                }),
            )
        };
        let (mut rw, _cfg) = exporting_agent(&endpoint, protocol);
        let base = rw.prometheus_url();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline && seen_count() < 5 {
            std::thread::sleep(Duration::from_millis(100));
        }
        let rejected = metric(
            &base,
            "rocewatch_exporter_rejected_points_total{exporter=\"otlp\"}",
        )
        .unwrap_or(0.0);
        let (_, log, _) = rw.proc.stop();
        let n = seen_count();
        assert!(n >= 5, "{protocol}: {n} requests\n{log}");
        assert!(
            rejected >= 7.0 * 4.0,
            "{protocol}: {rejected} counted of {n} requests\n{log}"
        );
        let said = log.matches("7 points out of order").count();
        assert_eq!(said, 1, "{protocol}: said once, not per export\n{log}");
    }
    rt.shutdown_background();
}

/// gRPC codes as the specification's table says: UNKNOWN and RESOURCE_EXHAUSTED without
/// RetryInfo are not retried (dropped, counted as rejected); RESOURCE_EXHAUSTED and
/// UNAVAILABLE with RetryInfo are retried no earlier than it says; UNAVAILABLE alone is
/// retried after the backoff.
#[test]
fn grpc_failures_are_retried_as_the_otlp_specification_says() {
    use tonic::Code;
    let rt = runtime();
    type Make = fn() -> tonic::Status;
    // (first answer, retried?, the least wait before the retry)
    let cases: [(&str, Make, bool, Duration); 5] = [
        (
            "UNKNOWN",
            || tonic::Status::unknown("boom"),
            false,
            Duration::ZERO,
        ),
        (
            "RESOURCE_EXHAUSTED",
            || tonic::Status::resource_exhausted("quota exceeded"),
            false,
            Duration::ZERO,
        ),
        (
            "RESOURCE_EXHAUSTED with RetryInfo 3s",
            || {
                scripted_grpc::with_retry_info(
                    Code::ResourceExhausted,
                    "slow down",
                    Duration::from_secs(3),
                )
            },
            true,
            Duration::from_millis(2900),
        ),
        (
            "UNAVAILABLE with RetryInfo 3s",
            || scripted_grpc::with_retry_info(Code::Unavailable, "busy", Duration::from_secs(3)),
            true,
            Duration::from_millis(2900),
        ),
        (
            "UNAVAILABLE",
            || tonic::Status::unavailable("down"),
            true,
            Duration::from_millis(200),
        ),
    ];
    for (what, make, retried, least) in cases {
        let (port, seen) = scripted_grpc::start(&rt, move |n| {
            if n == 0 {
                Err(make())
            } else {
                Ok(Default::default())
            }
        });
        let (mut rw, _cfg) = exporting_agent(&format!("http://127.0.0.1:{port}"), "grpc");
        let base = rw.prometheus_url();
        wait_for(&seen, 4, 20);
        let first_again = || {
            let s = seen.lock().unwrap();
            s.iter()
                .skip(1)
                .find(|(_, r)| *r == s[0].1)
                .map(|(t, _)| t.duration_since(s[0].0))
        };
        if retried {
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && first_again().is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let again = first_again();
        let dropped = metric(
            &base,
            "rocewatch_exporter_dropped_total{exporter=\"otlp\",reason=\"rejected\"}",
        )
        .unwrap_or(0.0);
        let (_, log, _) = rw.proc.stop();
        let n = seen.lock().unwrap().len();
        if retried {
            let again =
                again.unwrap_or_else(|| panic!("{what}: never retried ({n} requests)\n{log}"));
            assert!(again >= least, "{what}: retried after {again:?}\n{log}");
        } else {
            assert_eq!(again, None, "{what} must not be retried\n{log}");
            assert_eq!(
                dropped, 1.0,
                "{what}: the drop is counted as rejected\n{log}"
            );
            assert!(n >= 4, "{what}: later exports go on: {n}\n{log}");
        }
    }
    rt.shutdown_background();
}

/// A host of 600 ports (a generated tree: 300 dual-port mlx5 devices) exports about 7.6 MiB
/// a full export: to a gRPC receiver with the default 4 MiB message limit (tonic's, as
/// grpc-go's and the Collector's) every export arrives, split by metric and series into
/// requests under the bound (`max_request_bytes`, 4 MiB by default): each port's counters
/// arrive, none twice, and no request is refused.
#[test]
fn a_600_port_host_over_grpc_fits_a_4_mib_receiver() {
    let Some(tree) = scale_tree(300, 2) else {
        return;
    };
    let rt = runtime();
    let (port, seen) = scripted_grpc::start(&rt, |_| Ok(Default::default()));
    let (mut rw, _cfg) = agent(&format!(
        "[agent]\nsysfs_root = {:?}\ninterval = \"2s\"\n\n[exporters.prometheus]\nlisten = \"127.0.0.1:0\"\n\n\
         [exporters.otlp]\nendpoint = \"http://127.0.0.1:{port}\"\nprotocol = \"grpc\"\ninterval = \"3s\"\n",
        tree.path().join("sys")
    ));
    let base = rw.prometheus_url();
    // The devices whose transmitted bytes arrived, from the first full export on.
    let devices = || {
        let s = seen.lock().unwrap();
        let mut set = std::collections::BTreeSet::new();
        for (_, r) in s.iter() {
            for m in r
                .resource_metrics
                .iter()
                .flat_map(|rm| &rm.scope_metrics)
                .flat_map(|sm| &sm.metrics)
                .filter(|m| m.name == "rdma.port.io")
            {
                use opentelemetry_proto::tonic::metrics::v1::metric::Data;
                let Some(Data::Sum(sum)) = &m.data else {
                    continue;
                };
                for p in &sum.data_points {
                    if let Some(d) = p.attributes.iter().find(|a| a.key == "rdma.device") {
                        set.insert(format!("{:?}", d.value));
                    }
                }
            }
        }
        set.len()
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    while Instant::now() < deadline && devices() < 300 {
        std::thread::sleep(Duration::from_millis(500));
    }
    let got = devices();
    let errors = metric(&base, "rocewatch_exporter_errors_total{exporter=\"otlp\"}").unwrap_or(0.0);
    let (_, log, _) = rw.proc.stop();
    let s = seen.lock().unwrap();
    let largest = s
        .iter()
        .map(|(_, r)| prost::Message::encoded_len(r))
        .max()
        .unwrap_or(0);
    assert_eq!(
        got,
        300,
        "devices whose counters arrived ({} requests)\n{log}",
        s.len()
    );
    assert!(largest <= 4 << 20, "a request of {largest} bytes");
    assert_eq!(errors, 0.0, "no request refused\n{log}");
    assert!(!log.contains("too large"), "{log}");
    rt.shutdown_background();
}

/// A generated tree of `devices` mlx5 devices of `ports` ports each
/// (`integration-tests/fixtures/generate.py --scale`), or `None` after saying python3 is
/// missing.
fn scale_tree(devices: u32, ports: u32) -> Option<tempfile::TempDir> {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("python3")
        .arg(root().join("integration-tests/fixtures/generate.py"))
        .arg("--scale")
        .arg(dir.path())
        .arg(devices.to_string())
        .arg(ports.to_string())
        .output();
    match out {
        Ok(o) if o.status.success() => Some(dir),
        Ok(o) => panic!(
            "generate.py --scale failed: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(_) => {
            missing("python3", "install python3 (the tree generator needs it)");
            None
        }
    }
}
