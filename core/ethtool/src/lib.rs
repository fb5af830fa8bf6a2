//! Driver statistics through the ethtool ioctls (what `ethtool -S IF` prints), without
//! shelling out: `ETHTOOL_GSSET_INFO` for the number of statistics, `ETHTOOL_GSTRINGS`
//! for their names, `ETHTOOL_GSTATS` for their values. Ethtool netlink does not carry
//! driver-private statistics, hence the ioctl. [`module`]: a transceiver module's EEPROM
//! through `ETHTOOL_GMODULEINFO`/`ETHTOOL_GMODULEEEPROM`, where ethtool netlink cannot.

pub mod module;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETH_SS_STATS: u32 = 1;
const ETH_SS_FEATURES: u32 = 4;
const ETHTOOL_GFEATURES: u32 = 0x3a;
const ETHTOOL_SFEATURES: u32 = 0x3b;
const ETHTOOL_GTUNABLE: u32 = 0x48;
const ETHTOOL_STUNABLE: u32 = 0x49;
/// `ETHTOOL_PFC_PREVENTION_TOUT`: how long (ms) a priority may stay paused before the
/// NIC stops honouring pauses on it (PFC storm prevention); 0 is off, 0xffff "auto".
pub const TUNABLE_PFC_PREVENTION_TOUT: u32 = 3;
const ETHTOOL_TUNABLE_U16: u32 = 2;
/// `PFC_STORM_PREVENTION_AUTO`.
pub const PFC_PREVENTION_AUTO: u16 = 0xffff;
const ETH_GSTRING_LEN: usize = 32;
/// Drivers report a few hundred statistics; refuse absurd counts from a broken driver.
const MAX_STATS: usize = 1 << 16;

#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

/// A netdev feature's state (`ethtool -k`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feature {
    /// In effect now.
    pub active: bool,
    /// What was asked for (`ethtool -K`): what a restore puts back.
    pub requested: bool,
    /// The driver lets it change (not `[fixed]`).
    pub changeable: bool,
}

/// A socket for ethtool requests, opened once per collector.
pub struct EthtoolSocket {
    fd: OwnedFd,
}

impl EthtoolSocket {
    pub fn open() -> io::Result<Self> {
        // SAFETY: plain socket(2); the result is checked.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh, owned descriptor.
        Ok(EthtoolSocket {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn call(&self, ifname: &str, data: *mut libc::c_void) -> io::Result<()> {
        let bytes = ifname.as_bytes();
        if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad interface name {ifname:?}"),
            ));
        }
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            data,
            _pad: [0; 16],
        };
        for (d, s) in req.name.iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        // SAFETY: req is a valid ifreq whose data points at a buffer sized for the command.
        let r = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                SIOCETHTOOL as _,
                &mut req as *mut IfReq,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Number of driver statistics of `ifname`.
    pub fn stats_count(&self, ifname: &str) -> io::Result<usize> {
        self.set_count(ifname, ETH_SS_STATS)
    }

    /// Number of strings in string set `set` of `ifname` (0 when the driver has none).
    fn set_count(&self, ifname: &str, set: u32) -> io::Result<usize> {
        // struct ethtool_sset_info { u32 cmd; u32 reserved; u64 sset_mask; u32 data[]; }
        let mut buf = [0u64; 3];
        let head = buf.as_mut_ptr() as *mut u32;
        // SAFETY: buf holds 24 bytes: cmd, reserved, sset_mask and one u32 of data.
        unsafe {
            head.write(ETHTOOL_GSSET_INFO);
        }
        buf[1] = 1 << set;
        self.call(ifname, buf.as_mut_ptr() as *mut libc::c_void)?;
        if buf[1] & (1 << set) == 0 {
            return Ok(0); // the driver has no such set
        }
        // SAFETY: data[0] sits right after the 16-byte header.
        let n = unsafe { (buf.as_ptr() as *const u32).add(4).read() } as usize;
        if n > MAX_STATS {
            return Err(io::Error::other(format!(
                "{ifname}: driver reports {n} statistics"
            )));
        }
        Ok(n)
    }

    /// The names of `ifname`'s features (`ethtool -k` shows their friendlier names:
    /// `rx-vlan-offload` is `rx-vlan-hw-parse`), in bit order.
    pub fn feature_names(&self, ifname: &str) -> io::Result<Vec<String>> {
        let n = self.set_count(ifname, ETH_SS_FEATURES)?;
        let mut strings = vec![0u8; 12 + (n + 16) * ETH_GSTRING_LEN];
        strings[0..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
        strings[4..8].copy_from_slice(&ETH_SS_FEATURES.to_ne_bytes());
        strings[8..12].copy_from_slice(&(n as u32).to_ne_bytes());
        self.call(ifname, strings.as_mut_ptr() as *mut libc::c_void)?;
        let got = (u32::from_ne_bytes(strings[8..12].try_into().expect("4 bytes")) as usize).min(n);
        Ok(strings[12..]
            .chunks_exact(ETH_GSTRING_LEN)
            .take(got)
            .map(|raw| {
                let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
                String::from_utf8_lossy(&raw[..end]).into_owned()
            })
            .collect())
    }

    /// Feature `name` of `ifname`, `None` when it has no such feature.
    pub fn feature(&self, ifname: &str, name: &str) -> io::Result<Option<Feature>> {
        let names = self.feature_names(ifname)?;
        let Some(bit) = names.iter().position(|n| n == name) else {
            return Ok(None);
        };
        let blocks = names.len().div_ceil(32);
        // struct ethtool_gfeatures { u32 cmd; u32 size; { u32 available, requested,
        // active, never_changed; } features[size]; }
        let mut buf = vec![0u32; 2 + 4 * blocks];
        buf[0] = ETHTOOL_GFEATURES;
        buf[1] = blocks as u32;
        self.call(ifname, buf.as_mut_ptr() as *mut libc::c_void)?;
        let block = &buf[2 + 4 * (bit / 32)..2 + 4 * (bit / 32) + 4];
        let mask = 1u32 << (bit % 32);
        Ok(Some(Feature {
            active: block[2] & mask != 0,
            requested: block[1] & mask != 0,
            changeable: block[0] & mask != 0 && block[3] & mask == 0,
        }))
    }

    /// Turn feature `name` of `ifname` on or off (`ethtool -K`).
    pub fn set_feature(&self, ifname: &str, name: &str, on: bool) -> io::Result<()> {
        let names = self.feature_names(ifname)?;
        let Some(bit) = names.iter().position(|n| n == name) else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{ifname} has no feature {name}"),
            ));
        };
        let blocks = names.len().div_ceil(32);
        // struct ethtool_sfeatures { u32 cmd; u32 size; { u32 valid, requested; }
        // features[size]; }
        let mut buf = vec![0u32; 2 + 2 * blocks];
        buf[0] = ETHTOOL_SFEATURES;
        buf[1] = blocks as u32;
        let mask = 1u32 << (bit % 32);
        buf[2 + 2 * (bit / 32)] = mask;
        if on {
            buf[3 + 2 * (bit / 32)] = mask;
        }
        self.call(ifname, buf.as_mut_ptr() as *mut libc::c_void)?;
        // A driver that does not apply the change answers with a positive flag, not an
        // error: read it back.
        match self.feature(ifname, name)? {
            Some(f) if f.requested == on && f.active == on => Ok(()),
            _ => Err(io::Error::other(format!(
                "{ifname}: the driver did not turn {name} {}",
                if on { "on" } else { "off" }
            ))),
        }
    }

    /// `struct ethtool_tunable { u32 cmd, id, type_id, len; void *data[]; }` carrying
    /// one u16: the request bytes (the value at offset 16, where `data` starts).
    pub fn tunable_u16_request(cmd_set: bool, id: u32, value: u16) -> [u8; 24] {
        let mut b = [0u8; 24];
        let cmd = if cmd_set {
            ETHTOOL_STUNABLE
        } else {
            ETHTOOL_GTUNABLE
        };
        b[0..4].copy_from_slice(&cmd.to_ne_bytes());
        b[4..8].copy_from_slice(&id.to_ne_bytes());
        b[8..12].copy_from_slice(&ETHTOOL_TUNABLE_U16.to_ne_bytes());
        b[12..16].copy_from_slice(&2u32.to_ne_bytes());
        b[16..18].copy_from_slice(&value.to_ne_bytes());
        b
    }

    /// A u16 tunable of `ifname` (`ethtool --get-tunable`); `EOPNOTSUPP` when the
    /// driver has none.
    pub fn get_tunable_u16(&self, ifname: &str, id: u32) -> io::Result<u16> {
        // u64 storage: the kernel's struct is 8-byte aligned (data is an array of pointers).
        let mut buf = [0u64; 3];
        let req = Self::tunable_u16_request(false, id, 0);
        // SAFETY: buf is 24 bytes, as req.
        unsafe { std::ptr::copy_nonoverlapping(req.as_ptr(), buf.as_mut_ptr() as *mut u8, 24) };
        self.call(ifname, buf.as_mut_ptr() as *mut libc::c_void)?;
        // SAFETY: reading 2 bytes at offset 16 of the 24-byte buffer.
        let v = unsafe {
            (buf.as_ptr() as *const u8)
                .add(16)
                .cast::<u16>()
                .read_unaligned()
        };
        Ok(v)
    }

    /// Set a u16 tunable of `ifname` (`ethtool --set-tunable`).
    pub fn set_tunable_u16(&self, ifname: &str, id: u32, value: u16) -> io::Result<()> {
        let mut buf = [0u64; 3];
        let req = Self::tunable_u16_request(true, id, value);
        // SAFETY: buf is 24 bytes, as req.
        unsafe { std::ptr::copy_nonoverlapping(req.as_ptr(), buf.as_mut_ptr() as *mut u8, 24) };
        self.call(ifname, buf.as_mut_ptr() as *mut libc::c_void)
    }

    /// Names and values of every driver statistic of `ifname`, in driver order.
    pub fn driver_stats(&self, ifname: &str) -> io::Result<Vec<(String, u64)>> {
        let n = self.stats_count(ifname)?;
        if n == 0 {
            return Ok(Vec::new());
        }
        // struct ethtool_gstrings { u32 cmd; u32 string_set; u32 len; u8 data[]; }
        // The kernel writes as many strings and values as the driver has when it answers,
        // whatever length is asked: room for the set to grow between the calls.
        let room = n + n / 2 + 16;
        let mut strings = vec![0u8; 12 + room * ETH_GSTRING_LEN];
        strings[0..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
        strings[4..8].copy_from_slice(&ETH_SS_STATS.to_ne_bytes());
        strings[8..12].copy_from_slice(&(n as u32).to_ne_bytes());
        self.call(ifname, strings.as_mut_ptr() as *mut libc::c_void)?;
        // struct ethtool_stats { u32 cmd; u32 n_stats; u64 data[]; }
        let mut stats = vec![0u64; 1 + room];
        let head = stats.as_mut_ptr() as *mut u32;
        // SAFETY: the first 8 bytes are cmd and n_stats.
        unsafe {
            head.write(ETHTOOL_GSTATS);
            head.add(1).write(n as u32);
        }
        self.call(ifname, stats.as_mut_ptr() as *mut libc::c_void)?;
        // The driver may have returned fewer strings than asked (stats changed meanwhile).
        let got_strings = u32::from_ne_bytes(strings[8..12].try_into().expect("4 bytes")) as usize;
        // SAFETY: n_stats was written back by the kernel in the same header.
        let got_stats = unsafe { (stats.as_ptr() as *const u32).add(1).read() } as usize;
        Ok(pair_strings(
            &strings[12..],
            &stats[1..],
            n.min(got_strings).min(got_stats),
        ))
    }
}

/// The first `count` names of an `ETH_SS_STATS` string set (`ETH_GSTRING_LEN` bytes each,
/// NUL-padded, not necessarily NUL-terminated or UTF-8) paired with their values; a
/// count beyond what the buffers hold is cut to what they hold.
pub fn pair_strings(names: &[u8], values: &[u64], count: usize) -> Vec<(String, u64)> {
    names
        .chunks_exact(ETH_GSTRING_LEN)
        .zip(values)
        .take(count)
        .map(|(raw, v)| {
            let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
            (String::from_utf8_lossy(&raw[..end]).into_owned(), *v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Laid out as `ethtool --get-tunable IF pfc-prevention-tout` sends it (ethtool.h:
    /// ETHTOOL_GTUNABLE 0x48, ETHTOOL_PFC_PREVENTION_TOUT 3, ETHTOOL_TUNABLE_U16 2).
    #[test]
    fn pfc_prevention_tunable_request_bytes() {
        let ne = |v: u32| v.to_ne_bytes();
        let get = EthtoolSocket::tunable_u16_request(false, TUNABLE_PFC_PREVENTION_TOUT, 0);
        assert_eq!(&get[0..4], &ne(0x48));
        assert_eq!(&get[4..8], &ne(3));
        assert_eq!(&get[8..12], &ne(2));
        assert_eq!(&get[12..16], &ne(2));
        assert_eq!(&get[16..], &[0; 8]);
        let set = EthtoolSocket::tunable_u16_request(true, TUNABLE_PFC_PREVENTION_TOUT, 500);
        assert_eq!(&set[0..4], &ne(0x49));
        assert_eq!(&set[16..18], &500u16.to_ne_bytes());
    }

    /// A driver without the tunable (lo here) answers EOPNOTSUPP: what the plugin
    /// reports as unsupported.
    #[test]
    fn pfc_prevention_tunable_unsupported_on_lo() {
        let s = EthtoolSocket::open().unwrap();
        let e = s
            .get_tunable_u16("lo", TUNABLE_PFC_PREVENTION_TOUT)
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}");
    }

    #[test]
    fn loopback_has_no_driver_statistics_and_bad_names_are_refused() {
        let s = EthtoolSocket::open().unwrap();
        // lo implements no ethtool statistics: EOPNOTSUPP, or an empty set.
        match s.driver_stats("lo") {
            Ok(v) => assert!(v.is_empty()),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}"),
        }
        assert_eq!(
            s.driver_stats("no-such-if0").unwrap_err().raw_os_error(),
            Some(libc::ENODEV)
        );
        assert_eq!(
            s.driver_stats("a-name-much-too-long-for-ifnamsiz")
                .unwrap_err()
                .kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
