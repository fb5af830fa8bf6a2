//! The simulated fabric: a sysfs tree of two mlx5 RoCE ports (counters, hw_counters, and
//! `ethtool -S` statistics) advanced on every tick, with an error burst and a PFC storm.

use clap::ValueEnum;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

/// One simulated port.
#[derive(Debug, Clone)]
pub(super) struct SimPort {
    device: &'static str,
    netdev: &'static str,
    guid: &'static str,
    ip_gid: &'static str,
    /// Mean transmit throughput in bytes per second.
    tx_bps: f64,
    counters: BTreeMap<&'static str, u64>,
    hw: BTreeMap<&'static str, u64>,
    /// `ethtool -S` statistics (mlx5 names).
    ethtool: BTreeMap<String, u64>,
}

/// A simulated host with RDMA ports whose counters move.
#[derive(Debug)]
pub struct Fabric {
    root: PathBuf,
    ports: Vec<SimPort>,
    tick: u64,
    /// First tick of the error burst.
    pub burst_at: u64,
    /// Length of the error burst in ticks.
    pub burst_len: u64,
    /// The PFC pause storm (first tick, length in ticks), when the scenario has one.
    pub storm: Option<(u64, u64)>,
    /// A congestion pattern on priority 3 of the first port (first tick, length in
    /// ticks), when the scenario has one.
    pub congestion: Option<(Scenario, u64, u64)>,
}

/// What happens on the simulated fabric.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Scenario {
    /// Steady traffic, then an error burst on one port.
    Default,
    /// A PFC pause storm on priority 3 of one port: the default `pfc-pause-storm` rule
    /// fires after 30 s, a dry-run remediation is decided and audited, the storm ends and
    /// the rule clears.
    PfcStorm,
    /// From 2 s on, priority 3 of mlx5_0 congested as DCQCN handles it: ECN marks and
    /// CNPs, few pauses (state ecn_controlled; docs/CONGESTION.md).
    Ecn,
    /// ... with pauses outnumbering ECN marks (pfc_dominated).
    Pfc,
    /// ... losing packets without pauses (lossy).
    Lossy,
    /// ... paused 98 % of the time while sending nothing (storm).
    Storm,
    /// mlx5_0 receiving at 95 % of line rate while it sends many CNPs (an incast).
    Incast,
    /// ens1f0np0 sending 802.3x (global) pause: the global-pause rule fires.
    GlobalPause,
}

impl Scenario {
    /// What the live view says while its congestion pattern is on (the congestion
    /// scenarios: priority 3 of the first port).
    pub fn event(self) -> &'static str {
        match self {
            Scenario::Ecn => "ECN-CONTROLLED congestion on mlx5_0 port 1 priority 3 (40k ECN marks/s, CNPs, few pauses)",
            Scenario::Pfc => "PFC-DOMINATED congestion on mlx5_0 port 1 priority 3 (30k pauses/s, few ECN marks)",
            Scenario::Lossy => "LOSSES WITHOUT PAUSES on mlx5_0 port 1 priority 3 (500 out-of-sequence/s, no PFC)",
            Scenario::Storm => "PAUSE STORM on mlx5_0 port 1 priority 3 (paused 98% of the time, not draining)",
            Scenario::Incast => "INCAST into mlx5_0 port 1 (receiving at 95% of line rate, 20k CNPs/s sent)",
            Scenario::GlobalPause => "802.3x GLOBAL PAUSE sent by ens1f0np0 (10k frames/s, pausing its peer 40% of the time)",
            Scenario::Default | Scenario::PfcStorm => "steady traffic",
        }
    }
}

pub(super) const COUNTERS: &[&str] = &[
    "port_xmit_data",
    "port_rcv_data",
    "port_xmit_packets",
    "port_rcv_packets",
    "unicast_xmit_packets",
    "unicast_rcv_packets",
    "multicast_xmit_packets",
    "multicast_rcv_packets",
    "symbol_error",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "link_downed",
    "link_error_recovery",
    "VL15_dropped",
    "port_xmit_wait",
];

pub(super) const HW: &[&str] = &[
    "out_of_buffer",
    "out_of_sequence",
    "duplicate_request",
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "rnr_nak_retry_err",
    "req_cqe_error",
    "resp_cqe_error",
    "rx_read_requests",
    "rx_write_requests",
    "rx_atomic_requests",
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
    "rp_cnp_handled",
    "rp_cnp_ignored",
    "np_cnp_sent",
    "np_ecn_marked_roce_packets",
];

/// Write a file atomically (write a sibling, rename), so a reader never sees it half-written.
pub(super) fn put(path: &Path, contents: impl AsRef<[u8]>) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("rocewatch-tmp");
    std::fs::write(&tmp, contents)?;
    std::fs::rename(tmp, path)
}

impl Fabric {
    /// Create the tree under `root` (which should be empty).
    pub fn create(root: &Path) -> io::Result<Fabric> {
        let mk = |device, netdev, guid, ip_gid, gbps: f64| SimPort {
            device,
            netdev,
            guid,
            ip_gid,
            tx_bps: gbps * 1e9 / 8.0,
            counters: COUNTERS.iter().map(|c| (*c, 0)).collect(),
            hw: HW.iter().map(|c| (*c, 0)).collect(),
            ethtool: (0..8)
                .flat_map(|p| {
                    ["rx", "tx"].into_iter().flat_map(move |d| {
                        [
                            "pause",
                            "pause_duration",
                            "pause_transition",
                            "bytes",
                            "packets",
                        ]
                        .into_iter()
                        .map(move |s| (format!("{d}_prio{p}_{s}"), 0))
                    })
                })
                .chain(
                    [
                        "rx_pause_ctrl_phy",
                        "tx_pause_ctrl_phy",
                        "rx_global_pause_duration",
                        "tx_global_pause_duration",
                    ]
                    .map(|s| (s.to_string(), 0)),
                )
                .collect(),
        };
        let f = Fabric {
            root: root.to_path_buf(),
            ports: vec![
                mk(
                    "mlx5_0",
                    "ens1f0np0",
                    "b859:9f03:00c1:2a40",
                    "0000:0000:0000:0000:0000:ffff:0a00:0001",
                    62.0,
                ),
                mk(
                    "mlx5_1",
                    "ens1f1np1",
                    "b859:9f03:00c1:2a41",
                    "0000:0000:0000:0000:0000:ffff:0a00:0101",
                    38.0,
                ),
            ],
            tick: 0,
            burst_at: 8,
            burst_len: 6,
            storm: None,
            congestion: None,
        };
        for p in f.ports.clone() {
            let dev = root.join("class/infiniband").join(p.device);
            put(&dev.join("node_guid"), format!("{}\n", p.guid))?;
            put(&dev.join("fw_ver"), "22.39.1002\n")?;
            put(&dev.join("hca_type"), "MT4125\n")?;
            put(&dev.join("node_type"), "1: CA\n")?;
            put(&dev.join("board_id"), "MT_0000000359\n")?;
            std::fs::create_dir_all(dev.join("device/net").join(p.netdev))?;
            let port = dev.join("ports/1");
            put(&port.join("state"), "4: ACTIVE\n")?;
            put(&port.join("phys_state"), "5: LinkUp\n")?;
            put(&port.join("link_layer"), "Ethernet\n")?;
            put(&port.join("rate"), "100 Gb/sec (4X EDR)\n")?;
            put(&port.join("hw_counters/lifespan"), "10\n")?;
            let gids = [
                ("fe80:0000:0000:0000:ba59:9fff:fec1:2a40", "IB/RoCE v1"),
                ("fe80:0000:0000:0000:ba59:9fff:fec1:2a40", "RoCE v2"),
                (p.ip_gid, "IB/RoCE v1"),
                (p.ip_gid, "RoCE v2"),
            ];
            for (i, (gid, ty)) in gids.iter().enumerate() {
                put(&port.join("gids").join(i.to_string()), format!("{gid}\n"))?;
                put(
                    &port.join("gid_attrs/types").join(i.to_string()),
                    format!("{ty}\n"),
                )?;
                put(
                    &port.join("gid_attrs/ndevs").join(i.to_string()),
                    format!("{}\n", p.netdev),
                )?;
            }
            put(
                &port.join("gids/4"),
                "0000:0000:0000:0000:0000:0000:0000:0000\n",
            )?;
            let net = root.join("class/net").join(p.netdev);
            put(&net.join("mtu"), "9000\n")?;
            put(&net.join("operstate"), "up\n")?;
        }
        f.write_counters()?;
        Ok(f)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn tick_count(&self) -> u64 {
        self.tick
    }

    /// Whether the PFC storm is on now.
    pub fn in_storm(&self) -> bool {
        self.storm
            .is_some_and(|(at, len)| self.tick >= at && self.tick < at + len)
    }

    /// The congestion pattern on now, if any.
    pub fn congestion_now(&self) -> Option<Scenario> {
        self.congestion
            .filter(|(_, at, len)| self.tick >= *at && self.tick < at.saturating_add(*len))
            .map(|(p, _, _)| p)
    }

    /// Whether the error burst is on now.
    pub fn in_burst(&self) -> bool {
        self.tick >= self.burst_at && self.tick < self.burst_at + self.burst_len
    }

    fn write_counters(&self) -> io::Result<()> {
        for p in &self.ports {
            let port = self
                .root
                .join("class/infiniband")
                .join(p.device)
                .join("ports/1");
            for (name, v) in &p.counters {
                put(&port.join("counters").join(name), format!("{v}\n"))?;
            }
            for (name, v) in &p.hw {
                put(&port.join("hw_counters").join(name), format!("{v}\n"))?;
            }
            let mut text = String::from("NIC statistics:\n");
            for (name, v) in &p.ethtool {
                let _ = writeln!(text, "     {name}: {v}");
            }
            put(&self.root.join("ethtool").join(p.netdev), text)?;
        }
        Ok(())
    }

    /// Advance every counter by `dt_secs` of simulated traffic.
    pub fn advance(&mut self, dt_secs: f64) -> io::Result<()> {
        self.tick += 1;
        let burst = self.in_burst();
        let storm = self.in_storm();
        let pattern = self.congestion_now();
        let t = self.tick as f64;
        for (i, p) in self.ports.iter_mut().enumerate() {
            let pattern = pattern.filter(|_| i == 0);
            // A slow wave on top of the mean, different per port, so numbers visibly move.
            let wave = 1.0 + 0.25 * (t / 3.0 + i as f64 * 1.7).sin();
            let tx_bytes = match pattern {
                // Paused nearly all the time: next to nothing leaves.
                Some(Scenario::Storm) => (10.0 * dt_secs) as u64,
                _ => (p.tx_bps * wave * dt_secs) as u64,
            };
            let rx_bytes = match pattern {
                // 95 % of the 100 Gb/s line rate.
                Some(Scenario::Incast) => (0.95 * 100e9 / 8.0 * dt_secs) as u64,
                _ => (p.tx_bps * (2.0 - wave) * 0.9 * dt_secs) as u64,
            };
            let c = &mut p.counters;
            // port_*_data count 4-octet words.
            *c.get_mut("port_xmit_data").unwrap() += tx_bytes / 4;
            *c.get_mut("port_rcv_data").unwrap() += rx_bytes / 4;
            *c.get_mut("port_xmit_packets").unwrap() += tx_bytes / 4096;
            *c.get_mut("port_rcv_packets").unwrap() += rx_bytes / 4096;
            *c.get_mut("unicast_xmit_packets").unwrap() += tx_bytes / 4096;
            *c.get_mut("unicast_rcv_packets").unwrap() += rx_bytes / 4096;
            let h = &mut p.hw;
            *h.get_mut("rx_write_requests").unwrap() += rx_bytes / 65536;
            *h.get_mut("rx_read_requests").unwrap() += rx_bytes / 262144;
            *h.get_mut("np_ecn_marked_roce_packets").unwrap() += (20.0 * dt_secs) as u64;
            *h.get_mut("np_cnp_sent").unwrap() += (20.0 * dt_secs) as u64;
            *h.get_mut("rp_cnp_handled").unwrap() += (15.0 * dt_secs) as u64;
            // RoCE on priority 3, lossless: a few short pauses (1 ms per second).
            let e = &mut p.ethtool;
            let mut add = |k: &str, v: f64| *e.get_mut(k).expect("simulated stat") += v as u64;
            add("tx_prio3_bytes", tx_bytes as f64);
            add("rx_prio3_bytes", rx_bytes as f64);
            add("tx_prio3_packets", tx_bytes as f64 / 4096.0);
            add("rx_prio3_packets", rx_bytes as f64 / 4096.0);
            // (Not while the priority is shown losing without pauses.)
            if pattern != Some(Scenario::Lossy) {
                add("rx_prio3_pause", 20.0 * dt_secs);
                add("rx_prio3_pause_duration", 1_000.0 * dt_secs);
            }
            match pattern {
                Some(Scenario::Pfc) => {
                    add("rx_prio3_pause", 30_000.0 * dt_secs);
                    add("rx_prio3_pause_duration", 300_000.0 * dt_secs);
                }
                Some(Scenario::Storm) => {
                    add("rx_prio3_pause", 15_000.0 * dt_secs);
                    add("rx_prio3_pause_duration", 979_000.0 * dt_secs);
                }
                Some(Scenario::GlobalPause) => {
                    add("tx_pause_ctrl_phy", 10_000.0 * dt_secs);
                    add("tx_global_pause_duration", 400_000.0 * dt_secs);
                }
                _ => {}
            }
            let h = &mut p.hw;
            let mut hw = |k: &str, v: f64| *h.get_mut(k).expect("simulated counter") += v as u64;
            match pattern {
                Some(Scenario::Ecn) => {
                    hw("np_ecn_marked_roce_packets", 40_000.0 * dt_secs);
                    hw("np_cnp_sent", 40_000.0 * dt_secs);
                    hw("rp_cnp_handled", 30_000.0 * dt_secs);
                }
                Some(Scenario::Incast) => {
                    hw("np_ecn_marked_roce_packets", 20_000.0 * dt_secs);
                    hw("np_cnp_sent", 20_000.0 * dt_secs);
                }
                Some(Scenario::Lossy) => hw("out_of_sequence", 500.0 * dt_secs),
                _ => {}
            }
            if storm && i == 0 {
                // Paused 60 % of the time (µs per second), tens of thousands of XOFFs.
                add("rx_prio3_pause", 30_000.0 * dt_secs);
                add("rx_prio3_pause_duration", 600_000.0 * dt_secs);
                add("rx_prio3_pause_transition", 2_000.0 * dt_secs);
            }
            if burst && i == 1 {
                let c = &mut p.counters;
                *c.get_mut("symbol_error").unwrap() += (40.0 * dt_secs) as u64;
                *c.get_mut("port_rcv_errors").unwrap() += (25.0 * dt_secs) as u64;
                *c.get_mut("port_xmit_wait").unwrap() += (2_000_000.0 * dt_secs) as u64;
                let h = &mut p.hw;
                *h.get_mut("out_of_buffer").unwrap() += (5_000.0 * dt_secs) as u64;
                *h.get_mut("out_of_sequence").unwrap() += (800.0 * dt_secs) as u64;
                *h.get_mut("local_ack_timeout_err").unwrap() += (30.0 * dt_secs) as u64;
                *h.get_mut("np_cnp_sent").unwrap() += (40_000.0 * dt_secs) as u64;
                *h.get_mut("np_ecn_marked_roce_packets").unwrap() += (40_000.0 * dt_secs) as u64;
                *h.get_mut("roce_adp_retrans").unwrap() += (120.0 * dt_secs) as u64;
            }
        }
        self.write_counters()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fabric_counters_advance_and_burst() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = Fabric::create(dir.path()).unwrap();
        let read = |f: &Fabric, dev: &str, file: &str| -> u64 {
            std::fs::read_to_string(
                f.root()
                    .join("class/infiniband")
                    .join(dev)
                    .join("ports/1")
                    .join(file),
            )
            .unwrap()
            .trim()
            .parse()
            .unwrap()
        };
        f.advance(1.0).unwrap();
        let a = read(&f, "mlx5_0", "counters/port_xmit_data");
        f.advance(1.0).unwrap();
        assert!(read(&f, "mlx5_0", "counters/port_xmit_data") > a);
        assert_eq!(read(&f, "mlx5_1", "hw_counters/out_of_buffer"), 0);
        while !f.in_burst() {
            f.advance(1.0).unwrap();
        }
        assert!(read(&f, "mlx5_1", "hw_counters/out_of_buffer") > 0);
        assert_eq!(read(&f, "mlx5_0", "hw_counters/out_of_buffer"), 0);
    }
}
