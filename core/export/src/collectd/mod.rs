//! collectd: the binary network protocol (with `SecurityLevel Sign`, HMAC-SHA-256), and
//! the plain-text `PUTVAL` lines of the Exec plugin.
//!
//! Identifiers (see docs/METRICS.md): `HOST/rdma-DEVICE-PORT/TYPE-INSTANCE` for port
//! metrics, `HOST/rocewatch-WHO/TYPE-INSTANCE` for self-metrics; metrics outside the
//! catalog (external plugins) use collectd's own `derive` / `gauge` types with the metric
//! name as type instance, so collectd accepts them without our types.db.
//!
//! Wire format (collectd `src/network.c`): parts of `u16 type, u16 length` (header
//! included), big-endian; strings NUL-terminated; times in 2^-30 s; DERIVE values
//! big-endian i64, GAUGE values little-endian f64. A signed packet starts with a part
//! 0x0200 holding HMAC-SHA-256(password, username ‖ rest of packet) and the username.

pub mod config;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hmac::{Hmac, Mac};
use rocewatch_metrics::naming::{collectd_type, COLLECTD_PLUGIN, COLLECTD_SELF_PLUGIN};
use rocewatch_metrics::{ATTR_DEVICE, ATTR_NETDEV, ATTR_PORT};
use rocewatch_plugin_api::{MetricKind, Sample, Value};
use sha2::Sha256;
use tokio::sync::watch;

use self::config::{CollectdConfig, SecurityLevel};
use rocewatch_runtime::selfmetrics::SelfMetrics;
use rocewatch_runtime::store::{Reading, Store};

const PART_HOST: u16 = 0x0000;
const PART_PLUGIN: u16 = 0x0002;
const PART_PLUGIN_INSTANCE: u16 = 0x0003;
const PART_TYPE: u16 = 0x0004;
const PART_TYPE_INSTANCE: u16 = 0x0005;
const PART_VALUES: u16 = 0x0006;
const PART_TIME_HR: u16 = 0x0008;
const PART_INTERVAL_HR: u16 = 0x0009;
const PART_SIGN_SHA256: u16 = 0x0200;
const DS_GAUGE: u8 = 1;
const DS_DERIVE: u8 = 2;
/// collectd's default network buffer size.
pub const MAX_PACKET: usize = 1452;

/// One collectd value list (a single value: every rocewatch type has one data source).
#[derive(Debug, Clone, PartialEq)]
pub struct ValueList {
    pub host: String,
    pub plugin: String,
    pub plugin_instance: String,
    pub type_: String,
    pub type_instance: String,
    pub time: SystemTime,
    pub interval: Duration,
    pub value: CollectdValue,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CollectdValue {
    Derive(i64),
    Gauge(f64),
}

/// collectd identifier parts may not contain `/`, `"` or control characters, and are at
/// most 63 bytes.
fn part(s: &str) -> String {
    let mut p: String = s
        .chars()
        .map(|c| {
            if c == '/' || c == '"' || c.is_control() || c == ' ' {
                '_'
            } else {
                c
            }
        })
        .collect();
    while p.len() > 63 {
        p.pop();
    }
    p
}

fn is_catalogued(name: &str) -> bool {
    rocewatch_metrics::all_entries().any(|e| e.name == name)
}

/// Map one sample to a value list.
pub fn value_list(s: &Sample, host: &str, time: SystemTime, interval: Duration) -> ValueList {
    reading_list(&Reading::from(s), host, time, interval)
}

/// [`value_list`] of a store series' reading.
fn reading_list(s: &Reading, host: &str, time: SystemTime, interval: Duration) -> ValueList {
    let value = match (s.kind, s.value) {
        (MetricKind::Counter, Value::U64(v)) => {
            CollectdValue::Derive(v.min(i64::MAX as u64) as i64)
        }
        (MetricKind::Counter, Value::F64(f)) => CollectdValue::Derive(f as i64),
        (_, v) => CollectdValue::Gauge(v.as_f64()),
    };
    let mut rest: BTreeMap<&str, &str> = s.attributes.iter().collect();
    let (plugin, plugin_instance) =
        if let (Some(dev), Some(port)) = (rest.remove(ATTR_DEVICE), rest.remove(ATTR_PORT)) {
            rest.remove(ATTR_NETDEV);
            (COLLECTD_PLUGIN.to_string(), format!("{dev}-{port}"))
        } else if s.name.starts_with("rocewatch.") {
            let who = ["plugin", "exporter", "name"]
                .iter()
                .find_map(|k| rest.remove(k))
                .unwrap_or("agent");
            (COLLECTD_SELF_PLUGIN.to_string(), who.to_string())
        } else {
            (COLLECTD_SELF_PLUGIN.to_string(), "external".to_string())
        };
    let mut instance: Vec<String> = Vec::new();
    let type_ = if is_catalogued(&s.name) {
        collectd_type(&s.name)
    } else {
        instance.push(collectd_type(&s.name));
        if s.kind == MetricKind::Counter {
            "derive"
        } else {
            "gauge"
        }
        .to_string()
    };
    instance.extend(rest.values().map(|v| v.to_string()));
    ValueList {
        host: part(host),
        plugin: part(&plugin),
        plugin_instance: part(&plugin_instance),
        type_: part(&type_),
        type_instance: part(&instance.join("-")),
        time,
        interval,
        value,
    }
}

fn hr(d: Duration) -> u64 {
    // 2^-30 s units.
    (d.as_secs() << 30) | (((d.subsec_nanos() as u64) << 30) / 1_000_000_000)
}

fn unix(t: SystemTime) -> Duration {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default()
}

/// One `PUTVAL` line (Exec plugin protocol).
pub fn putval(v: &ValueList) -> String {
    let mut id = format!("{}/{}", v.host, v.plugin);
    if !v.plugin_instance.is_empty() {
        let _ = write!(id, "-{}", v.plugin_instance);
    }
    let _ = write!(id, "/{}", v.type_);
    if !v.type_instance.is_empty() {
        let _ = write!(id, "-{}", v.type_instance);
    }
    let value = match v.value {
        CollectdValue::Derive(d) => d.to_string(),
        CollectdValue::Gauge(g) if g.is_finite() => format!("{g}"),
        CollectdValue::Gauge(_) => "U".to_string(),
    };
    format!(
        "PUTVAL \"{id}\" interval={:.3} {}:{value}",
        v.interval.as_secs_f64(),
        unix(v.time).as_secs()
    )
}

fn put_str(buf: &mut Vec<u8>, t: u16, s: &str) {
    buf.extend_from_slice(&t.to_be_bytes());
    buf.extend_from_slice(&((4 + s.len() + 1) as u16).to_be_bytes());
    buf.extend_from_slice(s.as_bytes());
    buf.push(0);
}

fn put_u64(buf: &mut Vec<u8>, t: u16, v: u64) {
    buf.extend_from_slice(&t.to_be_bytes());
    buf.extend_from_slice(&12u16.to_be_bytes());
    buf.extend_from_slice(&v.to_be_bytes());
}

fn put_value(buf: &mut Vec<u8>, v: CollectdValue) {
    buf.extend_from_slice(&PART_VALUES.to_be_bytes());
    buf.extend_from_slice(&15u16.to_be_bytes()); // 4 header + 2 count + 1 type + 8 value
    buf.extend_from_slice(&1u16.to_be_bytes());
    match v {
        CollectdValue::Derive(d) => {
            buf.push(DS_DERIVE);
            buf.extend_from_slice(&d.to_be_bytes());
        }
        CollectdValue::Gauge(g) => {
            buf.push(DS_GAUGE);
            buf.extend_from_slice(&g.to_le_bytes());
        }
    }
}

/// Encode value lists into packets of at most [`MAX_PACKET`] bytes, signed when asked.
pub fn encode(values: &[ValueList], security: &Security) -> Vec<Vec<u8>> {
    let overhead = match security {
        Security::None => 0,
        Security::Sign { username, .. } => 4 + 32 + username.len(),
    };
    let budget = MAX_PACKET - overhead;
    let mut packets = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut last: Option<&ValueList> = None;
    for v in values {
        let mut chunk = Vec::new();
        let same = |f: fn(&ValueList) -> &str| last.is_some_and(|l| f(l) == f(v));
        if !same(|x| &x.host) {
            put_str(&mut chunk, PART_HOST, &v.host);
        }
        if last.is_none_or(|l| l.time != v.time) {
            put_u64(&mut chunk, PART_TIME_HR, hr(unix(v.time)));
        }
        if last.is_none_or(|l| l.interval != v.interval) {
            put_u64(&mut chunk, PART_INTERVAL_HR, hr(v.interval));
        }
        if !same(|x| &x.plugin) {
            put_str(&mut chunk, PART_PLUGIN, &v.plugin);
        }
        if !same(|x| &x.plugin_instance) {
            put_str(&mut chunk, PART_PLUGIN_INSTANCE, &v.plugin_instance);
        }
        if !same(|x| &x.type_) {
            put_str(&mut chunk, PART_TYPE, &v.type_);
        }
        if !same(|x| &x.type_instance) {
            put_str(&mut chunk, PART_TYPE_INSTANCE, &v.type_instance);
        }
        put_value(&mut chunk, v.value);
        if buf.len() + chunk.len() > budget && !buf.is_empty() {
            packets.push(std::mem::take(&mut buf));
            // A new packet starts with a fresh parser state on the server: restate it all.
            restate(&mut buf, v);
            last = Some(v);
            continue;
        }
        buf.extend_from_slice(&chunk);
        last = Some(v);
    }
    if !buf.is_empty() {
        packets.push(buf);
    }
    packets.into_iter().map(|p| sign(p, security)).collect()
}

/// Start a fresh packet with the full state of `v`.
fn restate(buf: &mut Vec<u8>, v: &ValueList) {
    put_str(buf, PART_HOST, &v.host);
    put_u64(buf, PART_TIME_HR, hr(unix(v.time)));
    put_u64(buf, PART_INTERVAL_HR, hr(v.interval));
    put_str(buf, PART_PLUGIN, &v.plugin);
    put_str(buf, PART_PLUGIN_INSTANCE, &v.plugin_instance);
    put_str(buf, PART_TYPE, &v.type_);
    put_str(buf, PART_TYPE_INSTANCE, &v.type_instance);
    put_value(buf, v.value);
}

/// How packets are protected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Security {
    None,
    Sign { username: String, password: String },
}

fn sign(payload: Vec<u8>, security: &Security) -> Vec<u8> {
    let Security::Sign { username, password } = security else {
        return payload;
    };
    let mut mac =
        Hmac::<Sha256>::new_from_slice(password.as_bytes()).expect("HMAC takes any key length");
    mac.update(username.as_bytes());
    mac.update(&payload);
    let hash = mac.finalize().into_bytes();
    let mut out = Vec::with_capacity(payload.len() + 36 + username.len());
    out.extend_from_slice(&PART_SIGN_SHA256.to_be_bytes());
    out.extend_from_slice(&((4 + 32 + username.len()) as u16).to_be_bytes());
    out.extend_from_slice(&hash);
    out.extend_from_slice(username.as_bytes());
    out.extend_from_slice(&payload);
    out
}

impl Security {
    pub fn from_config(cfg: &CollectdConfig) -> Security {
        match cfg.security_level {
            SecurityLevel::None => Security::None,
            SecurityLevel::Sign => Security::Sign {
                username: cfg.username.clone(),
                password: cfg.password.clone(),
            },
        }
    }
}

/// Value lists of every series the store ingested after its ingest count `since` (each
/// at the time it was read: collectd refuses a value no newer than the last one it has)
/// plus the self-metrics, and the count to pass next time: what every other exporter sees,
/// histograms aside (collectd has no type for a distribution).
pub fn store_value_lists(
    store: &Store,
    metrics: &SelfMetrics,
    host: &str,
    interval: Duration,
    since: u64,
) -> (Vec<ValueList>, u64) {
    let (mut lists, seen) = store.with_series_since(since, |series, _| {
        series
            .map(|s| reading_list(&s.sample, host, s.time(), interval))
            .collect::<Vec<_>>()
    });
    let now = SystemTime::now();
    lists.extend(
        metrics
            .samples()
            .iter()
            .map(|s| value_list(s, host, now, interval)),
    );
    (lists, seen)
}

/// Send every series in the store to the collectd server every `interval` until `shutdown`
/// turns true. Failures are logged and counted; they never reach the collectors.
pub async fn run(
    cfg: CollectdConfig,
    host: String,
    interval: Duration,
    store: Arc<Store>,
    metrics: Arc<SelfMetrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let security = Security::from_config(&cfg);
    let host = cfg.host_name.clone().unwrap_or(host);
    let mut socket: Option<tokio::net::UdpSocket> = None;
    let mut sent_until = 0;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        if socket.is_none() {
            socket = match connect(&cfg.server).await {
                Ok(s) => Some(s),
                Err(e) => {
                    metrics.exporter_error("collectd");
                    tracing::warn!("collectd exporter: {e}");
                    continue;
                }
            };
        }
        let sock = socket.as_ref().expect("connected above");
        let (lists, seen) = store_value_lists(&store, &metrics, &host, interval, sent_until);
        sent_until = seen;
        for packet in encode(&lists, &security) {
            if let Err(e) = sock.send(&packet).await {
                metrics.exporter_error("collectd");
                tracing::warn!("collectd exporter: sending to {}: {e}", cfg.server);
                socket = None; // resolve and connect again next time
                break;
            }
        }
    }
}

/// collectd's Exec plugin: `PUTVAL` lines of every series in the store on standard output
/// every `interval`, until `shutdown` turns true or collectd closes the pipe (then it
/// returns: collectd is stopping us).
pub async fn run_exec(
    host: String,
    interval: Duration,
    store: Arc<Store>,
    metrics: Arc<SelfMetrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    use std::io::Write;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    // The first tick is at once, before anything was collected: wait one interval.
    tick.tick().await;
    let mut sent_until = 0;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        let (lists, seen) = store_value_lists(&store, &metrics, &host, interval, sent_until);
        sent_until = seen;
        let mut out = std::io::stdout().lock();
        for v in &lists {
            if writeln!(out, "{}", putval(v)).is_err() {
                return;
            }
        }
        if out.flush().is_err() {
            return;
        }
    }
}

async fn connect(server: &str) -> Result<tokio::net::UdpSocket, String> {
    let addr = tokio::net::lookup_host(server)
        .await
        .map_err(|e| format!("resolving {server}: {e}"))?
        .next()
        .ok_or_else(|| format!("resolving {server}: no address"))?;
    let bind = if addr.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let s = tokio::net::UdpSocket::bind(bind)
        .await
        .map_err(|e| format!("binding a UDP socket: {e}"))?;
    s.connect(addr)
        .await
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port_sample() -> Sample {
        Sample {
            name: "rdma.port.io".into(),
            unit: "By".into(),
            value: Value::U64(400_000),
            attributes: [
                ("rdma.device", "mlx5_0"),
                ("rdma.port", "1"),
                ("network.interface.name", "ens1f0np0"),
                ("network.io.direction", "transmit"),
            ]
            .into_iter()
            .collect::<rocewatch_plugin_api::AttrSet>()
            .into(),
            source: "counters/port_xmit_data".into(),
            kind: MetricKind::Counter,
        }
    }

    fn t() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    #[test]
    fn identifiers_and_putval() {
        let v = value_list(&port_sample(), "node1", t(), Duration::from_secs(10));
        assert_eq!(putval(&v), "PUTVAL \"node1/rdma-mlx5_0-1/rdma_port_io-transmit\" interval=10.000 1700000000:400000");
        let mut ext = port_sample();
        ext.name = "example.heartbeat".into();
        std::sync::Arc::make_mut(&mut ext.attributes).clear();
        let v = value_list(&ext, "node1", t(), Duration::from_secs(10));
        assert_eq!(
            (
                v.plugin.as_str(),
                v.type_.as_str(),
                v.type_instance.as_str()
            ),
            ("rocewatch", "derive", "example_heartbeat")
        );
    }

    #[test]
    fn wire_format_byte_for_byte() {
        let v = value_list(&port_sample(), "h", t(), Duration::from_secs(1));
        let p = &encode(std::slice::from_ref(&v), &Security::None)[0];
        let mut want: Vec<u8> = vec![0, 0, 0, 6, b'h', 0]; // host "h"
        want.extend([0, 8, 0, 12]);
        want.extend((1_700_000_000u64 << 30).to_be_bytes());
        want.extend([0, 9, 0, 12]);
        want.extend((1u64 << 30).to_be_bytes());
        want.extend([0, 2, 0, 9]);
        want.extend(b"rdma\0");
        want.extend([0, 3, 0, 13]);
        want.extend(b"mlx5_0-1\0");
        want.extend([0, 4, 0, 17]);
        want.extend(b"rdma_port_io\0");
        want.extend([0, 5, 0, 13]);
        want.extend(b"transmit\0");
        want.extend([0, 6, 0, 15, 0, 1, 2]);
        want.extend(400_000i64.to_be_bytes());
        assert_eq!(p, &want);
    }

    #[test]
    fn signed_packets_carry_the_hmac_of_username_and_payload() {
        let v = value_list(&port_sample(), "h", t(), Duration::from_secs(1));
        let plain = encode(std::slice::from_ref(&v), &Security::None).remove(0);
        let sec = Security::Sign {
            username: "rocewatch".into(),
            password: "s3cret".into(),
        };
        let signed = encode(&[v], &sec).remove(0);
        assert_eq!(&signed[0..4], &[0x02, 0x00, 0, 36 + 9]);
        assert_eq!(&signed[36..45], b"rocewatch");
        assert_eq!(&signed[45..], &plain[..]);
        let mut mac = Hmac::<Sha256>::new_from_slice(b"s3cret").unwrap();
        mac.update(b"rocewatch");
        mac.update(&plain);
        assert_eq!(&signed[4..36], &mac.finalize().into_bytes()[..]);
    }

    #[test]
    fn large_batches_split_and_every_packet_restates_the_identifier() {
        let many: Vec<ValueList> = (0..200)
            .map(|i| {
                let mut s = port_sample();
                std::sync::Arc::make_mut(&mut s.attributes).insert("rdma.port", i.to_string());
                value_list(&s, "host", t(), Duration::from_secs(10))
            })
            .collect();
        let packets = encode(&many, &Security::None);
        assert!(packets.len() > 1);
        for p in &packets {
            assert!(p.len() <= MAX_PACKET);
            assert_eq!(&p[0..2], &[0, 0], "each packet starts with the host part");
        }
        let values: usize = packets
            .iter()
            .map(|p| p.windows(4).filter(|w| w == &[0, 6, 0, 15]).count())
            .sum();
        assert_eq!(values, 200);
    }
}
