//! Pure parsers of the strings the kernel prints in sysfs.

/// A counter file's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterText {
    Value(u64),
    /// `N/A (no PMA)` and similar: the device has no performance management agent, the
    /// counter does not exist (it is not zero).
    Absent,
    /// Not a number at all.
    Garbage,
}

/// Parse a counter file. Values are decimal; some kernels print hex with `0x`.
pub fn parse_counter(text: &str) -> CounterText {
    let t = text.trim();
    if t.starts_with("N/A") {
        return CounterText::Absent;
    }
    // An empty counter file is broken, not absent: `parse::<u64>` makes it Garbage.
    let parsed = match t.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => t.parse::<u64>().ok(),
    };
    parsed.map_or(CounterText::Garbage, CounterText::Value)
}

/// `4: ACTIVE` → `(Some(4), "ACTIVE")`; a bare `ACTIVE` → `(None, "ACTIVE")`.
pub fn parse_enum(text: &str) -> (Option<u8>, String) {
    let t = text.trim();
    match t.split_once(':') {
        Some((code, name)) => (code.trim().parse().ok(), name.trim().to_string()),
        None => (None, t.to_string()),
    }
}

/// `100 Gb/sec (4X EDR)` → 100e9 bits per second. Also `2.5 Gb/sec (1X SDR)`,
/// `10 Gb/sec (1X QDR)`, `400 Gb/sec (4X NDR)`.
pub fn parse_rate_bps(text: &str) -> Option<u64> {
    let mut it = text.split_whitespace();
    let number: f64 = it.next()?.parse().ok().filter(|n: &f64| *n >= 0.0)?;
    let unit = it.next()?;
    let scale = match unit {
        "Gb/sec" => 1e9,
        "Mb/sec" => 1e6,
        "Tb/sec" => 1e12,
        _ => return None,
    };
    let bps = (number * scale).round();
    // Not a rate: negative, NaN, infinite, or beyond u64 (a cast would saturate silently).
    (bps.is_finite() && (0.0..u64::MAX as f64).contains(&bps)).then_some(bps as u64)
}

/// An all-zero GID marks an empty slot of the table.
pub fn is_empty_gid(gid: &str) -> bool {
    gid.chars().all(|c| c == '0' || c == ':')
}

/// The RoCE MTU a netdev MTU allows: the largest IB MTU that fits after the RoCE v2
/// headers (GRH 40, UDP 8, BTH 12, extended headers 32, ICRC 4: 96 bytes, as the
/// kernel's `iboe_get_mtu` counts them).
pub fn rdma_mtu_for(netdev_mtu: u32) -> Option<u32> {
    let room = netdev_mtu.checked_sub(96)?;
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| *m <= room)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdma_mtu_from_netdev_mtu() {
        assert_eq!(rdma_mtu_for(9000), Some(4096));
        assert_eq!(rdma_mtu_for(4200), Some(4096));
        assert_eq!(rdma_mtu_for(4191), Some(2048));
        assert_eq!(rdma_mtu_for(1500), Some(1024));
        assert_eq!(rdma_mtu_for(300), None);
    }

    #[test]
    fn counters() {
        for (text, want) in [
            ("12345\n", CounterText::Value(12345)),
            ("4294967295", CounterText::Value(4294967295)),
            ("18446744073709551615", CounterText::Value(u64::MAX)),
            ("0x10", CounterText::Value(16)),
            ("0", CounterText::Value(0)),
            ("N/A (no PMA)\n", CounterText::Absent),
            ("", CounterText::Garbage),
            ("abc", CounterText::Garbage),
            ("-1", CounterText::Garbage),
        ] {
            assert_eq!(parse_counter(text), want, "{text:?}");
        }
    }

    #[test]
    fn enums() {
        assert_eq!(parse_enum("4: ACTIVE\n"), (Some(4), "ACTIVE".into()));
        assert_eq!(parse_enum("5: LinkUp"), (Some(5), "LinkUp".into()));
        assert_eq!(parse_enum("3: Disabled"), (Some(3), "Disabled".into()));
        assert_eq!(parse_enum("Ethernet"), (None, "Ethernet".into()));
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate_bps("100 Gb/sec (4X EDR)"), Some(100_000_000_000));
        assert_eq!(parse_rate_bps("25 Gb/sec (1X EDR)"), Some(25_000_000_000));
        assert_eq!(parse_rate_bps("2.5 Gb/sec (1X SDR)"), Some(2_500_000_000));
        assert_eq!(parse_rate_bps("10 Gb/sec (1X QDR)"), Some(10_000_000_000));
        assert_eq!(parse_rate_bps("garbage"), None);
        assert_eq!(parse_rate_bps(""), None);
    }

    #[test]
    fn empty_gids() {
        assert!(is_empty_gid("0000:0000:0000:0000:0000:0000:0000:0000"));
        assert!(!is_empty_gid("fe80:0000:0000:0000:5054:00ff:fe12:3456"));
        assert!(!is_empty_gid("0000:0000:0000:0000:0000:ffff:0a00:0002"));
    }
}
