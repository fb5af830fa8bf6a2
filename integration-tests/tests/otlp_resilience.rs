//! OTLP that survives outages: a VictoriaMetrics stopped for 60 s gets the queued data
//! when it returns; a tiny queue drops and counts; a gRPC receiver that starts late gets
//! the backlog in batches; a receiver that answers 413 to more than one snapshot a
//! request still gets every one after an outage, and one that refuses even one has it
//! dropped, counted and said; TLS (custom CA, client certificate), headers and gzip work
//! on both transports.

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
        metric(&base, "rocewatch_exporter_dropped_total{exporter=\"otlp\"}").unwrap_or(0.0),
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
    let dropped =
        metric(&base, "rocewatch_exporter_dropped_total{exporter=\"otlp\"}").unwrap_or(0.0);
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
/// carrying more `ResourceMetrics` (an agent's snapshot is one), 200 to others. It keeps
/// the body of each request it took and counts the 413s.
mod single_snapshot_receiver {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::{Arc, Mutex};

    #[derive(Default)]
    pub struct Seen {
        pub taken: Vec<Vec<u8>>,
        pub too_large: usize,
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

    fn serve(sock: std::net::TcpStream, max: usize, seen: &Mutex<Seen>) -> std::io::Result<()> {
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
            if n > max {
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
        let seen = Arc::new(Mutex::new(Seen::default()));
        let s = seen.clone();
        std::thread::spawn(move || {
            for sock in listener.incoming().flatten() {
                let s = s.clone();
                std::thread::spawn(move || {
                    let _ = serve(sock, max, &s);
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
    assert_eq!(
        metric(&base, "rocewatch_exporter_dropped_total{exporter=\"otlp\"}").unwrap_or(0.0),
        0.0
    );
}

/// A single snapshot the receiver still finds too large is the only thing dropped: counted
/// in rocewatch_exporter_dropped_total, and said with its size.
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
    let deadline = Instant::now() + Duration::from_secs(20);
    let dropped =
        || metric(&base, "rocewatch_exporter_dropped_total{exporter=\"otlp\"}").unwrap_or(0.0);
    while Instant::now() < deadline && dropped() < 3.0 {
        std::thread::sleep(Duration::from_millis(100));
    }
    let n = dropped();
    let (status, log, _) = rw.proc.stop();
    assert!(n >= 3.0, "{n}\n{log}");
    assert!(
        log.contains("OTLP export: one snapshot of ")
            && log.contains("uncompressed) is too large for the receiver, dropped"),
        "{log}"
    );
    assert!(seen.lock().unwrap().taken.is_empty());
    assert!(status.success(), "{log}");
}
