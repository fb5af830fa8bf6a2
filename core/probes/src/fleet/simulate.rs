//! The fleet simulator: every host of a topology probes its pinglist through the agent's
//! own round code ([`targets`], [`count_round`], [`FleetStats`]) with outcomes drawn from
//! a model of the fabric and the faults injected, and the series each host would export
//! are written at each scrape, timestamped, in the Prometheus text format VictoriaMetrics
//! imports (`/api/v1/import/prometheus`).
//!
//! The model, per probe (a request and its reply): a NIC that is down, or on a ToR that
//! is down, answers nothing and sends nothing; a ToR uplink with loss drops a cross-ToR
//! probe to or from its ToR with twice the loss (it crosses the uplink twice); a
//! black-holed equal-cost path drops the cross-ToR probes whose 5-tuple hashes onto it
//! (the switch's hash of the addresses and the UDP source port, over `ecmp_paths`); a
//! lossy link drops probes to or from its host with twice its loss; an overloaded host's
//! own probes time out at random, and its load check says so; and everywhere a small
//! background loss (the fabric is lossless, not perfect). Random draws come from one
//! seeded generator: the same arguments give the same series.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::str::FromStr;

use rocewatch_fleet::pinglist::{fnv1a, Plan, FNV_OFFSET};
use rocewatch_fleet::Topology;
use rocewatch_metrics::names;
use rocewatch_metrics::naming::{prometheus_sample_name, write_prometheus_labels};
use rocewatch_plugin_api::{ProbeOutcome, Sample, Value};

use super::config::{view_of_list, FleetConfig, FleetView};
use super::flows::udp_sport;
use super::rounds::{count_round, FlowSet, RttAttrs};
use super::stats::FleetStats;

/// A fault injected into the simulated fabric.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// `nic_down:HOST` or `nic_down:HOST/RAIL`.
    NicDown { host: String, rail: Option<u8> },
    /// `host_overloaded:HOST`: its own probes time out at random (30 %).
    HostOverloaded { host: String },
    /// `tor_down:TOR`.
    TorDown { tor: String },
    /// `uplink_loss:TOR`: 1 % loss on the ToR's uplinks.
    UplinkLoss { tor: String },
    /// `ecmp_blackhole:N`: equal-cost path N (0-based) drops everything.
    EcmpBlackhole { path: u32 },
    /// `link_loss:HOST` or `link_loss:HOST/RAIL`: 0.1 % loss on the host's link.
    LinkLoss { host: String, rail: Option<u8> },
}

/// What a fault's suspect is: the kind the rules should name, and its name.
impl Fault {
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::NicDown { .. } => "nic_down",
            Fault::HostOverloaded { .. } => "host_overloaded",
            Fault::TorDown { .. } => "tor_down",
            Fault::UplinkLoss { .. } => "uplink_loss",
            Fault::EcmpBlackhole { .. } => "ecmp_blackhole",
            Fault::LinkLoss { .. } => "link_loss",
        }
    }

    /// The rails on which the rules should name the suspect: a NIC's or link's rail
    /// (every rail of its host when none is given), the rails a ToR carries; none for a
    /// prober (its host, all rails) or the spine (the fleet).
    pub fn suspect_rails(&self, topo: &Topology) -> Vec<u8> {
        let rails: BTreeSet<u8> = match self {
            Fault::NicDown { host, rail } | Fault::LinkLoss { host, rail } => match rail {
                Some(r) => [*r].into(),
                None => topo.nics_of(host).map(|n| n.rail).collect(),
            },
            Fault::TorDown { tor } | Fault::UplinkLoss { tor } => topo
                .nics()
                .iter()
                .filter(|n| n.tor == *tor)
                .map(|n| n.rail)
                .collect(),
            Fault::HostOverloaded { .. } | Fault::EcmpBlackhole { .. } => BTreeSet::new(),
        };
        rails.into_iter().collect()
    }

    /// The suspect the localization rules should name: (kind, target).
    pub fn suspect(&self) -> (&'static str, String) {
        match self {
            Fault::NicDown { host, .. } => ("nic", host.clone()),
            Fault::LinkLoss { host, .. } => ("link", host.clone()),
            Fault::HostOverloaded { host } => ("prober", host.clone()),
            Fault::TorDown { tor } => ("tor", tor.clone()),
            Fault::UplinkLoss { tor } => ("uplink", tor.clone()),
            Fault::EcmpBlackhole { .. } => ("spine", "fleet".into()),
        }
    }
}

fn host_rail(s: &str) -> Result<(String, Option<u8>), String> {
    match s.split_once('/') {
        None => Ok((s.to_string(), None)),
        Some((h, r)) => Ok((
            h.to_string(),
            Some(
                r.parse()
                    .map_err(|_| format!("rail {r:?} is not a number"))?,
            ),
        )),
    }
}

/// Every fault kind with its target, as `--fault` takes them.
const FAULT_KINDS: &str = "nic_down:HOST[/RAIL], host_overloaded:HOST, tor_down:TOR, \
     uplink_loss:TOR, ecmp_blackhole:N, link_loss:HOST[/RAIL]";

impl FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Fault, String> {
        let (kind, target) = s
            .split_once(':')
            .ok_or_else(|| format!("{s:?}: give KIND:TARGET ({FAULT_KINDS})"))?;
        if target.is_empty() {
            return Err(format!("{s:?}: no target"));
        }
        let t = target.to_string();
        Ok(match kind {
            "nic_down" => {
                let (host, rail) = host_rail(target)?;
                Fault::NicDown { host, rail }
            }
            "link_loss" => {
                let (host, rail) = host_rail(target)?;
                Fault::LinkLoss { host, rail }
            }
            "host_overloaded" => Fault::HostOverloaded { host: t },
            "tor_down" => Fault::TorDown { tor: t },
            "uplink_loss" => Fault::UplinkLoss { tor: t },
            "ecmp_blackhole" => Fault::EcmpBlackhole {
                path: target
                    .parse()
                    .map_err(|_| format!("{s:?}: the path is a number"))?,
            },
            other => {
                return Err(format!(
                    "{s:?}: unknown fault kind {other:?}; the kinds: {FAULT_KINDS}"
                ))
            }
        })
    }
}

/// How the simulation runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Unix seconds of the first round.
    pub start_s: u64,
    pub duration_s: u64,
    /// Simulated seconds between two rounds (the agent's interval).
    pub round_s: u64,
    /// Seconds between two scrapes (what is written).
    pub scrape_s: u64,
    /// When the faults start, seconds after `start_s`.
    pub fault_after_s: u64,
    /// Equal-cost paths between two ToRs.
    pub ecmp_paths: u32,
    /// Probe loss without any fault.
    pub background_loss: f64,
    pub seed: u64,
}

/// SplitMix64: small, seeded, the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One host's side of the simulation.
struct Host {
    view: FleetView,
    flows: FlowSet,
    /// This host's address on each rail.
    addrs: Vec<(u8, IpAddr)>,
    stats: FleetStats,
    rtt: RttAttrs,
}

/// A NIC as the fault model sees it.
struct End<'a> {
    host: &'a str,
    rail: u8,
    tor: &'a str,
    addr: IpAddr,
}

/// The switch's hash of a probe's 5-tuple (addresses and source port; the protocol and
/// destination port are the same for every RoCE v2 packet).
fn ecmp_hash(addrs: (IpAddr, IpAddr), sport: u16) -> u64 {
    let bytes = |a: IpAddr| match a {
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        IpAddr::V6(v) => v.octets(),
    };
    let mut h = fnv1a(FNV_OFFSET, &bytes(addrs.0));
    h = fnv1a(h, &bytes(addrs.1));
    h = fnv1a(h, &sport.to_be_bytes());
    // SplitMix64's finalizer, as the pinglists' score: FNV's low bits mix poorly.
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Whether `faults` make a probe from `a` to `b` on source port `sport` fail (and the
/// random draw for the partial ones).
fn lost(faults: &[Fault], a: &End, b: &End, sport: u16, opts: &Options, rng: &mut Rng) -> bool {
    let cross = a.tor != b.tor;
    let is =
        |e: &End, host: &str, rail: Option<u8>| e.host == host && rail.is_none_or(|r| r == e.rail);
    for f in faults {
        let hit = match f {
            Fault::NicDown { host, rail } => is(a, host, *rail) || is(b, host, *rail),
            Fault::TorDown { tor } => a.tor == tor || b.tor == tor,
            Fault::UplinkLoss { tor } => {
                cross && (a.tor == tor || b.tor == tor) && rng.next() < 0.02
            }
            Fault::EcmpBlackhole { path } => {
                cross
                    && (ecmp_hash((a.addr, b.addr), sport) % u64::from(opts.ecmp_paths)) as u32
                        == *path
            }
            Fault::LinkLoss { host, rail } => {
                (is(a, host, *rail) || is(b, host, *rail)) && rng.next() < 0.002
            }
            Fault::HostOverloaded { host } => a.host == host && rng.next() < 0.3,
        };
        if hit {
            return true;
        }
    }
    rng.next() < opts.background_loss
}

/// The most fleet series one host exported at any scrape of a simulation, by metric.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeriesPerHost {
    /// `rdma_probe_fleet_results_total`.
    pub results: usize,
    /// `rdma_probe_fleet_rtt_seconds` histograms (each `buckets + 3` series in the
    /// Prometheus format: the buckets, `+Inf`, `_sum` and `_count`).
    pub rtt_histograms: usize,
    /// `rdma_probe_fleet_failing_ratio`.
    pub failing: usize,
}

impl SeriesPerHost {
    /// Every series in the Prometheus format, with the default RTT buckets
    /// (`[probes] rtt_buckets`).
    pub fn total(&self) -> usize {
        let bounds = crate::config::default_rtt_buckets().len();
        self.results + self.rtt_histograms * (bounds + 3) + self.failing
    }

    fn most(&mut self, other: SeriesPerHost) {
        self.results = self.results.max(other.results);
        self.rtt_histograms = self.rtt_histograms.max(other.rtt_histograms);
        self.failing = self.failing.max(other.failing);
    }
}

/// Simulate `topo` with `faults`; `write` gets each scrape's text (every host's series,
/// timestamped in milliseconds). Returns the most series a host exported (the RTT
/// histograms are counted, not written).
pub fn run(
    topo: &Topology,
    faults: &[Fault],
    fleet: &FleetConfig,
    opts: &Options,
    mut write: impl FnMut(&str) -> std::io::Result<()>,
) -> std::io::Result<SeriesPerHost> {
    let plan = Plan::new(topo, fleet.options());
    let none = BTreeSet::new();
    let mut hosts: Vec<Host> = plan
        .all()
        .into_iter()
        .map(|list| {
            let view = view_of_list(topo, list, &none);
            let addrs = topo.nics_of(&view.host).map(|n| (n.rail, n.addr)).collect();
            let stats = FleetStats::new(
                &view.host,
                view.tors.clone(),
                fleet.failing_window.as_secs(),
                fleet.top_failing,
            );
            Host {
                flows: FlowSet::new(&view, fleet),
                view,
                addrs,
                stats,
                rtt: RttAttrs::new(),
            }
        })
        .collect();
    let mut rng = Rng(opts.seed);
    let mut most = SeriesPerHost::default();
    let info = info_text(topo);
    let ok = ProbeOutcome::Ok { rtt_seconds: 12e-6 };
    let timeout = ProbeOutcome::Timeout;
    let end_s = opts.start_s + opts.duration_s;
    let mut t = opts.start_s;
    while t < end_s {
        let active: &[Fault] = if t >= opts.start_s + opts.fault_after_s {
            faults
        } else {
            &[]
        };
        for h in &mut hosts {
            h.flows.rotate(t);
            let overloaded = active
                .iter()
                .any(|f| matches!(f, Fault::HostOverloaded { host } if *host == h.view.host));
            let outcomes: Vec<Option<Result<&ProbeOutcome, ()>>> = h
                .flows
                .iter()
                .map(|(peer, _, label)| {
                    let peer = &h.view.peers[peer];
                    let src = h
                        .addrs
                        .iter()
                        .find(|(r, _)| *r == peer.rail)
                        .map_or(peer.addr, |(_, a)| *a);
                    let a = End {
                        host: &h.view.host,
                        rail: peer.rail,
                        tor: h.view.tors.get(&peer.rail).map_or("", String::as_str),
                        addr: src,
                    };
                    let b = End {
                        host: &peer.host,
                        rail: peer.rail,
                        tor: &peer.tor,
                        addr: peer.addr,
                    };
                    let gone = lost(active, &a, &b, udp_sport(label), opts, &mut rng);
                    Some(Ok(if gone { &timeout } else { &ok }))
                })
                .collect();
            count_round(
                &mut h.stats,
                &h.view,
                &h.flows,
                &outcomes,
                overloaded,
                t,
                &mut h.rtt,
            );
        }
        if (t - opts.start_s).is_multiple_of(opts.scrape_s) {
            let mut out = info.replace("@TS@", &(t * 1000).to_string());
            for h in &hosts {
                let samples = h.stats.samples(t);
                let count = |name: &str| samples.iter().filter(|s| s.name == name).count();
                most.most(SeriesPerHost {
                    results: count(names::PROBE_FLEET_RESULTS),
                    rtt_histograms: h.rtt.len(),
                    failing: count(names::PROBE_FLEET_FAILING),
                });
                write_samples(&mut out, &samples, t * 1000);
            }
            write(&out)?;
        }
        t += opts.round_s;
    }
    Ok(most)
}

/// Every NIC's info series, with `@TS@` for the timestamp.
fn info_text(topo: &Topology) -> String {
    let samples = topo.nics().iter().map(|n| {
        let mut a = rocewatch_plugin_api::AttrSet::new();
        a.insert("host", &n.host);
        a.insert("rail", n.rail.to_string());
        a.insert("address", n.addr.to_string());
        a.insert("tor", &n.tor);
        a.insert("tor_port", n.tor_port.as_deref().unwrap_or(""));
        a
    });
    let mut out = String::new();
    for a in samples {
        out.push_str("rdma_fleet_nic_info");
        write_prometheus_labels(&mut out, &a);
        out.push_str(" 1 @TS@\n");
    }
    out
}

/// Samples as timestamped exposition lines.
fn write_samples(out: &mut String, samples: &[Sample], ts_ms: u64) {
    for s in samples {
        out.push_str(&prometheus_sample_name(&s.name, &s.unit, s.kind));
        write_prometheus_labels(out, &s.attributes);
        let _ = match s.value {
            Value::U64(v) => writeln!(out, " {v} {ts_ms}"),
            Value::F64(v) => writeln!(out, " {v} {ts_ms}"),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_and_name_their_suspect() {
        assert_eq!(
            "nic_down:gpu001/3".parse::<Fault>().unwrap(),
            Fault::NicDown {
                host: "gpu001".into(),
                rail: Some(3)
            }
        );
        assert_eq!(
            "tor_down:leaf-7".parse::<Fault>().unwrap().suspect(),
            ("tor", "leaf-7".into())
        );
        assert_eq!(
            "ecmp_blackhole:5".parse::<Fault>().unwrap(),
            Fault::EcmpBlackhole { path: 5 }
        );
        for bad in [
            "nic_down",
            "nic_down:",
            "ecmp_blackhole:x",
            "flood:a",
            "link_loss:a/b",
        ] {
            assert!(bad.parse::<Fault>().is_err(), "{bad}");
        }
    }

    /// `racks` racks of 4 hosts on `rails` rails, each rail on its own ToRs (rail 0's
    /// ToR of rack 2 is `t2`, rail 5's `t2-5`).
    fn fleet(racks: usize, rails: u8) -> Topology {
        let mut csv = String::from("host,rail,addr,tor\n");
        for r in 0..racks {
            for h in 0..4 {
                for rail in 0..rails {
                    let tor = match rail {
                        0 => format!("t{r}"),
                        _ => format!("t{r}-{rail}"),
                    };
                    let _ = writeln!(csv, "h{r}{h},{rail},10.{rail}.{r}.{},{tor}", h + 1);
                }
            }
        }
        Topology::parse("t", &csv).unwrap()
    }

    fn sim_on(topo: &Topology, faults: &[Fault]) -> (String, SeriesPerHost) {
        let fleet: FleetConfig =
            serde_json::from_value(serde_json::json!({"topology": "t"})).unwrap();
        let opts = Options {
            start_s: 1_000_000,
            duration_s: 120,
            round_s: 5,
            scrape_s: 60,
            fault_after_s: 60,
            ecmp_paths: 16,
            background_loss: 0.0,
            seed: 7,
        };
        let mut text = String::new();
        let most = run(topo, faults, &fleet, &opts, |s| {
            text.push_str(s);
            Ok(())
        })
        .unwrap();
        (text, most)
    }

    fn sim(faults: &[Fault]) -> String {
        sim_on(&fleet(6, 1), faults).0
    }

    #[test]
    fn a_clean_fleet_fails_nothing_and_a_down_nic_fails_only_its_flows() {
        let clean = sim(&[]);
        assert!(!clean.contains("rdma_probe_fleet_failing_ratio"), "{clean}");
        assert!(clean.contains("rdma_fleet_nic_info{address=\"10.0.0.1\",host=\"h00\",rail=\"0\",tor=\"t0\",tor_port=\"\"} 1 1000000000"));
        assert!(clean.contains("rdma_probe_fleet_results_total{class=\"cross_tor\",host=\"h00\",outcome=\"ok\",path=\"0\",rail=\"0\"}"));
        let down = sim(&["nic_down:h21".parse().unwrap()]);
        let failing: Vec<&str> = down
            .lines()
            .filter(|l| l.starts_with("rdma_probe_fleet_failing_ratio"))
            .collect();
        assert!(!failing.is_empty());
        // Every failing flow is to or from h21, and only after the fault started.
        assert!(
            failing
                .iter()
                .all(|l| l.contains("peer_host=\"h21\"") || l.contains("host=\"h21\"")),
            "{failing:?}"
        );
        assert!(
            failing.iter().all(|l| l.ends_with(" 1000060000")),
            "{failing:?}"
        );
        // Deterministic.
        assert_eq!(down, sim(&["nic_down:h21".parse().unwrap()]));
    }

    /// Eight rails, a NIC down on rail 5: only rail 5's flows fail, and the series a host
    /// exports are bounded by the rails, classes, paths and `top_failing`, not by the
    /// fleet: twice the racks give the same count.
    #[test]
    fn a_nic_down_on_rail_5_fails_rail_5_only_and_series_per_host_stay_bounded() {
        let fault: Fault = "nic_down:h21/5".parse().unwrap();
        let small = fleet(6, 8);
        assert_eq!(fault.suspect_rails(&small), [5]);
        assert_eq!(
            "tor_down:t3-2"
                .parse::<Fault>()
                .unwrap()
                .suspect_rails(&small),
            [2]
        );
        assert_eq!(
            "nic_down:h21"
                .parse::<Fault>()
                .unwrap()
                .suspect_rails(&small),
            (0..8).collect::<Vec<u8>>()
        );
        let (text, most) = sim_on(&small, std::slice::from_ref(&fault));
        let failing: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("rdma_probe_fleet_failing_ratio"))
            .collect();
        assert!(!failing.is_empty());
        for l in &failing {
            assert!(l.contains("rail=\"5\""), "{l}");
            assert!(l.contains("tor=\"t") && l.contains("-5\""), "{l}");
            assert!(
                l.contains("peer_host=\"h21\"") || l.contains("host=\"h21\""),
                "{l}"
            );
        }
        // Every rail's results are there, apart.
        for rail in 0..8 {
            let want = format!("outcome=\"ok\",path=\"3\",rail=\"{rail}\"");
            assert!(text.contains(&want), "rail {rail}");
        }
        // Results: 8 rails x 2 classes x 4 paths of `ok`, and `timeout` on rail 5's
        // flows of the hosts that probe h21 (or h21 itself): at most 8 x 2 x 4 x 2.
        // RTT: one histogram per rail and class. Failing: the default top 32.
        assert!(
            (8 * 2 * 4..=8 * 2 * 4 * 2).contains(&most.results),
            "{most:?}"
        );
        assert_eq!(most.rtt_histograms, 8 * 2, "{most:?}");
        assert!((1..=32).contains(&most.failing), "{most:?}");
        eprintln!(
            "series a host exports, 8 rails: {most:?}, {} in all",
            most.total()
        );
        let (_, big) = sim_on(&fleet(12, 8), std::slice::from_ref(&fault));
        assert_eq!(big.results, most.results, "{big:?} {most:?}");
        assert_eq!(big.rtt_histograms, most.rtt_histograms);
        // Default buckets (16 bounds): 19 series a histogram.
        assert_eq!(
            most.total(),
            most.results + 16 * 19 + most.failing,
            "{most:?}"
        );
    }
}
