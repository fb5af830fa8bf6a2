//! The receive buffers of a lossless priority (DCB's `prio2buffer` and buffer sizes, as
//! the configuration plugin reads them): a lossless priority alone in its buffer, and a
//! buffer large enough for the headroom PFC needs at the port's speed over the cable.
//!
//! The headroom is mlx5's (`drivers/net/ethernet/mellanox/mlx5/core/en/port_buffer.c`,
//! `calculate_xoff` and `update_xoff_threshold`), the one driver in Linux that reports
//! its buffers over DCB netlink: once the NIC sends XOFF, everything already on the
//! wire and in the sender's pipeline still arrives, which is
//! `xoff = (301 + 2.16 × cable metres) × Gb/s + 2.72 × MTU` bytes (speed at least
//! 40 Gb/s), and the driver refuses a lossless buffer smaller than
//! `xoff + max MTU (at least 9216) + one 128-byte cell`, and keeps sizes in 128-byte
//! cells. The netdev's maximum MTU is not in sysfs: the figure here is a lower bound.

use rocewatch_plugin_api::{QosState, Setting};

use super::qos::setting;
use crate::check::{check, Check, Status};
use crate::shell::word_on_one_line as word;

/// mlx5's default cable length, metres (`MLX5E_DEFAULT_CABLE_LEN`).
pub const DEFAULT_CABLE_M: u32 = 7;
/// mlx5's floor for the maximum MTU in the threshold (`MINIMUM_MAX_MTU`).
const MIN_MAX_MTU: u64 = 9216;
/// mlx5's buffer cell, bytes (`1 << MLX5E_BUFFER_CELL_SHIFT`).
const CELL: u64 = 128;

/// Bytes that arrive after XOFF (mlx5's `calculate_xoff`, integer arithmetic as there):
/// `speed_mbps` in Mb/s (at least 40,000), `cable_m` metres, `mtu` bytes.
pub fn xoff_bytes(speed_mbps: u64, cable_m: u32, mtu: u32) -> u64 {
    let speed = speed_mbps.max(40_000);
    (301 + 216 * cable_m as u64 / 100) * speed / 1000 + 272 * mtu as u64 / 100
}

/// The smallest lossless buffer mlx5 accepts for that port, in whole cells (the driver
/// keeps sizes in 128-byte cells). A lower bound: mlx5 adds the netdev's maximum MTU
/// (at least 9216), which sysfs does not show; the current MTU stands in when larger.
pub fn lossless_buffer_min(speed_mbps: u64, cable_m: u32, mtu: u32) -> u64 {
    let need = xoff_bytes(speed_mbps, cable_m, mtu) + (mtu as u64).max(MIN_MAX_MTU) + CELL;
    need.div_ceil(CELL) * CELL
}

fn list(s: &str) -> Vec<u64> {
    s.split(',').filter_map(|x| x.trim().parse().ok()).collect()
}

/// What the port runs at, for the headroom.
pub(crate) struct Link {
    pub speed_mbps: Option<u64>,
    pub mtu: Option<u32>,
    /// Told on the command line (`--cable-length`).
    pub cable_m: Option<u32>,
}

/// The buffer of each priority, each buffer's size (bytes), the lossless priorities.
type Buffers = (Vec<u64>, Vec<u64>, Vec<u8>);

/// The port's buffer map, sizes and lossless priorities; else the check saying why not.
fn read_buffers(qos: &[QosState], dev: &str, port: u32, nd: &str) -> Result<Buffers, Check> {
    let subject = format!("{dev}/{port}");
    let get = |k: &str| setting(qos, dev, port, k);
    let skip = |why: String| check("buffers", &subject, Status::Skip, why, None);
    let (p2b, sizes) = match (get("prio2buffer"), get("buffer_size")) {
        (Some(Setting::Value(a)), Some(Setting::Value(b))) => (list(a), list(b)),
        (Some(Setting::Unknown(why)), _) | (_, Some(Setting::Unknown(why))) => {
            return Err(skip(format!("the receive buffers are unknown: {why}")))
        }
        _ => {
            return Err(skip(format!(
                "{nd}'s driver reports no receive buffers (`dcb buffer show` has none; mlx5 is the driver that does)"
            )))
        }
    };
    let lossless: Vec<u8> = match get("pfc_enabled") {
        Some(Setting::Value(v)) => v.split(',').filter_map(|p| p.trim().parse().ok()).collect(),
        _ => {
            return Err(skip(
                "PFC unknown: which buffers are lossless cannot be told".into(),
            ))
        }
    };
    if let Some(bad) = lossless.iter().find(|p| **p > 7) {
        return Err(check(
            "buffers",
            &subject,
            Status::Warn,
            format!("pfc_enabled names priority {bad}: priorities are 0-7"),
            None,
        ));
    }
    if let Some(bad) = p2b.iter().find(|b| **b > 7) {
        return Err(check(
            "buffers",
            &subject,
            Status::Warn,
            format!("prio2buffer names buffer {bad}: buffers are 0-7"),
            None,
        ));
    }
    if p2b.len() != 8 || sizes.len() != 8 {
        return Err(check(
            "buffers",
            &subject,
            Status::Warn,
            format!(
                "prio2buffer {} entries, buffer_size {}: 8 each expected",
                p2b.len(),
                sizes.len()
            ),
            None,
        ));
    }
    Ok((p2b, sizes, lossless))
}

/// The `buffers` check of one port, for the lossless priorities (PFC on).
pub(crate) fn buffer_check(qos: &[QosState], dev: &str, port: u32, nd: &str, link: &Link) -> Check {
    let subject = format!("{dev}/{port}");
    let (p2b, sizes, lossless) = match read_buffers(qos, dev, port, nd) {
        Ok(r) => r,
        Err(c) => return c,
    };
    let evidence = format!(
        "prio2buffer {}; buffer sizes {} bytes",
        p2b.iter().map(u64::to_string).collect::<Vec<_>>().join(","),
        sizes
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    if lossless.is_empty() {
        return check(
            "buffers",
            &subject,
            Status::Info,
            format!("no lossless priority; {evidence}"),
            None,
        );
    }
    let (cable, cable_from) = match (link.cable_m, setting(qos, dev, port, "cable_length")) {
        (Some(m), _) => (m, "told"),
        (None, Some(Setting::Value(v))) if v.parse::<u32>().is_ok() => {
            (v.parse().expect("checked"), "the driver's cable_length")
        }
        _ => (DEFAULT_CABLE_M, "mlx5's default; give --cable-length"),
    };
    let mut wrong = Vec::new();
    let mut fixes = Vec::new();
    let w = word(nd);
    for &p in &lossless {
        let b = p2b[p as usize];
        let lossy: Vec<String> = (0..8u8)
            .filter(|q| !lossless.contains(q) && p2b[*q as usize] == b)
            .map(|q| q.to_string())
            .collect();
        if !lossy.is_empty() {
            wrong.push(format!(
                "lossless priority {p} shares buffer {b} with lossy priorities {} (their bursts fill the buffer PFC protects: RoCE is paused for them and their frames take its headroom)",
                lossy.join(",")
            ));
            fixes.push(format!(
                "dcb buffer set dev {w} prio-buffer {p}:N with N a buffer no lossy priority uses (or mlnx_qos -i {w} --prio2buffer ...; [[qos.desired]] prio2buffer)"
            ));
        }
        if let (Some(speed), Some(mtu)) = (link.speed_mbps, link.mtu) {
            let need = lossless_buffer_min(speed, cable, mtu);
            let have = sizes[b as usize];
            if have < need {
                wrong.push(format!(
                    "buffer {b} (priority {p}) holds {have} bytes, less than the at least {need} a lossless buffer needs at {} Gb/s over {cable} m of cable ({cable_from}) with MTU {mtu} (xoff {} bytes + a {} byte frame + a 128-byte cell, in whole cells; mlx5's port_buffer.c)",
                    speed / 1000,
                    xoff_bytes(speed, cable, mtu),
                    (mtu as u64).max(MIN_MAX_MTU)
                ));
                fixes.push(format!(
                    "dcb buffer set dev {w} buffer-size {b}:{need} (or [[qos.desired]] buffer_size), taking the bytes from a lossy buffer"
                ));
            }
        }
    }
    if !wrong.is_empty() {
        fixes.dedup();
        return check(
            "buffers",
            &subject,
            Status::Warn,
            format!("{}; {evidence}", wrong.join("; ")),
            Some(fixes.join("\n")),
        );
    }
    let headroom = match (link.speed_mbps, link.mtu) {
        (Some(s), Some(m)) => format!(
            "; each lossless buffer holds the {} bytes of headroom {} Gb/s over {cable} m ({cable_from}) needs",
            lossless_buffer_min(s, cable, m),
            s / 1000
        ),
        _ => "; headroom not judged (the port's speed or MTU is unknown)".into(),
    };
    check(
        "buffers",
        &subject,
        Status::Pass,
        format!(
            "lossless priorities {} in buffers of their own{headroom}; {evidence}",
            lossless
                .iter()
                .map(u8::to_string)
                .collect::<Vec<_>>()
                .join(",")
        ),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::qos::port_with as port;

    const LINK_100G: Link = Link {
        speed_mbps: Some(100_000),
        mtu: Some(1500),
        cable_m: None,
    };

    #[test]
    fn the_formula_matches_the_drivers_figures() {
        // Worked from port_buffer.c's expression: 7 m, MTU 1500.
        assert_eq!(xoff_bytes(100_000, 7, 1500), 35_680);
        assert_eq!(xoff_bytes(25_000, 7, 1500), 16_720); // the 40 Gb/s floor
        assert_eq!(xoff_bytes(400_000, 7, 9000), 150_880);
        assert_eq!(xoff_bytes(100_000, 100, 1500), 55_780);
        // 35,680 + 9,216 + 128 = 45,024 bytes: 351.75 cells, so 352 cells.
        assert_eq!(lossless_buffer_min(100_000, 7, 1500), 45_056);
        assert_eq!(lossless_buffer_min(100_000, 7, 1500) % 128, 0);
    }

    #[test]
    fn a_lossless_priority_alone_in_a_large_buffer_passes() {
        let q = port(&[
            ("pfc_enabled", "3"),
            ("prio2buffer", "0,0,0,1,0,0,0,0"),
            ("buffer_size", "130944,130944,0,0,0,0,0,0"),
        ]);
        let c = buffer_check(&q, "mlx5_0", 1, "eth0", &LINK_100G);
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert!(
            c.evidence
                .contains("45056 bytes of headroom 100 Gb/s over 7 m (mlx5's default"),
            "{}",
            c.evidence
        );
    }

    #[test]
    fn sharing_with_lossy_priorities_is_a_warning() {
        let q = port(&[
            ("pfc_enabled", "3"),
            ("prio2buffer", "0,0,0,0,0,0,0,0"),
            ("buffer_size", "262016,0,0,0,0,0,0,0"),
        ]);
        let c = buffer_check(&q, "mlx5_0", 1, "eth0", &LINK_100G);
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.evidence.contains(
                "lossless priority 3 shares buffer 0 with lossy priorities 0,1,2,4,5,6,7"
            ),
            "{}",
            c.evidence
        );
        assert!(c.fix.unwrap().contains("prio-buffer 3:N"));
    }

    #[test]
    fn a_buffer_short_of_headroom_names_the_figures() {
        // 400 Gb/s over 30 m, MTU 9000: xoff (301 + 64) * 400 + 24480 = 170480; + 9216
        // + 128 = 179824, 1404.875 cells: 1405 cells, 179840 bytes.
        let q = port(&[
            ("pfc_enabled", "3"),
            ("prio2buffer", "0,0,0,1,0,0,0,0"),
            ("buffer_size", "130944,130944,0,0,0,0,0,0"),
            ("cable_length", "7"),
        ]);
        let link = Link {
            speed_mbps: Some(400_000),
            mtu: Some(9000),
            cable_m: Some(30),
        };
        let c = buffer_check(&q, "mlx5_0", 1, "eth0", &link);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(
            c.evidence.contains("buffer 1 (priority 3) holds 130944 bytes, less than the at least 179840 a lossless buffer needs at 400 Gb/s over 30 m of cable (told) with MTU 9000"),
            "{}",
            c.evidence
        );
        assert!(c.fix.unwrap().contains("buffer-size 1:179840"));
        // The driver's cable length is used when none is told.
        let c = buffer_check(
            &q,
            "mlx5_0",
            1,
            "eth0",
            &Link {
                cable_m: None,
                ..link
            },
        );
        assert!(
            c.evidence
                .contains("over 7 m of cable (the driver's cable_length)"),
            "{}",
            c.evidence
        );
    }

    #[test]
    fn odd_values_from_a_plugin_are_warnings_not_panics() {
        for (pfc, map) in [("9", "0,0,0,1,0,0,0,0"), ("3", "0,0,0,12,0,0,0,0")] {
            let q = port(&[
                ("pfc_enabled", pfc),
                ("prio2buffer", map),
                ("buffer_size", "1,1,0,0,0,0,0,0"),
            ]);
            let c = buffer_check(&q, "mlx5_0", 1, "eth0", &LINK_100G);
            assert_eq!(c.status, Status::Warn, "{c:?}");
        }
    }

    #[test]
    fn no_buffers_reported_is_a_skip_saying_why() {
        let mut q = port(&[("pfc_enabled", "3")]);
        q[0].settings
            .insert("prio2buffer".into(), Setting::Unsupported);
        q[0].settings
            .insert("buffer_size".into(), Setting::Unsupported);
        let c = buffer_check(&q, "mlx5_0", 1, "eth0", &LINK_100G);
        assert_eq!(c.status, Status::Skip);
        assert!(
            c.evidence.contains("reports no receive buffers"),
            "{}",
            c.evidence
        );
    }
}
