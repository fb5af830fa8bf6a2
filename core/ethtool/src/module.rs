//! A transceiver module's EEPROM through the ioctls (`ethtool -m` on kernels without
//! ethtool netlink's `ETHTOOL_MSG_MODULE_EEPROM_GET`, before 5.13): `ETHTOOL_GMODULEINFO`
//! says the map (`ETH_MODULE_SFF_*`) and its length, `ETHTOOL_GMODULEEEPROM` reads it as
//! one linear dump (SFF-8079: A0h's 256 bytes; SFF-8472: A0h then A2h, 512; SFF-8636:
//! the lower page then the upper pages 00h-03h, up to 640). Numbers and structs from
//! `include/uapi/linux/ethtool.h` (`struct ethtool_modinfo`, `struct ethtool_eeprom`).

use std::io;

use crate::EthtoolSocket;

const ETHTOOL_GMODULEINFO: u32 = 0x42;
const ETHTOOL_GMODULEEEPROM: u32 = 0x43;
/// `sizeof(struct ethtool_modinfo)`: cmd, type, eeprom_len, reserved[8].
const MODINFO_LEN: usize = 44;
/// `sizeof(struct ethtool_eeprom)` without its data: cmd, magic, offset, len.
const EEPROM_HDR_LEN: usize = 16;
/// No module map is longer than a few pages; refuse what a broken driver might claim.
const MAX_EEPROM_LEN: u32 = 64 * 1024;

/// The memory map a module's EEPROM follows (`ETH_MODULE_SFF_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleMap {
    /// `ETH_MODULE_SFF_8079` (1): an SFP without diagnostics, A0h only.
    Sff8079,
    /// `ETH_MODULE_SFF_8472` (2): an SFP with diagnostics, A0h and A2h.
    Sff8472,
    /// `ETH_MODULE_SFF_8636` (3): QSFP+/QSFP28 (and CMIS modules through drivers that
    /// report them so).
    Sff8636,
    /// `ETH_MODULE_SFF_8436` (4): QSFP.
    Sff8436,
    Other(u32),
}

impl ModuleMap {
    fn from_u32(v: u32) -> Self {
        match v {
            1 => ModuleMap::Sff8079,
            2 => ModuleMap::Sff8472,
            3 => ModuleMap::Sff8636,
            4 => ModuleMap::Sff8436,
            v => ModuleMap::Other(v),
        }
    }
}

/// What `ETHTOOL_GMODULEINFO` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleInfo {
    pub map: ModuleMap,
    pub eeprom_len: u32,
}

/// The `ETHTOOL_GMODULEINFO` request bytes.
pub fn modinfo_request() -> [u8; MODINFO_LEN] {
    let mut b = [0u8; MODINFO_LEN];
    b[0..4].copy_from_slice(&ETHTOOL_GMODULEINFO.to_ne_bytes());
    b
}

/// The answer in a `struct ethtool_modinfo`.
pub fn decode_modinfo(b: &[u8]) -> io::Result<ModuleInfo> {
    let u = |o: usize| {
        b.get(o..o + 4)
            .map(|s| u32::from_ne_bytes(s.try_into().expect("4 bytes")))
    };
    match (u(4), u(8)) {
        (Some(t), Some(len)) if len <= MAX_EEPROM_LEN => Ok(ModuleInfo {
            map: ModuleMap::from_u32(t),
            eeprom_len: len,
        }),
        (Some(_), Some(len)) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the driver reports a module EEPROM of {len} bytes"),
        )),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "struct ethtool_modinfo cut short",
        )),
    }
}

/// The `ETHTOOL_GMODULEEEPROM` request of `len` bytes from `offset`, with room for them.
pub fn eeprom_request(offset: u32, len: u32) -> Vec<u8> {
    let mut b = vec![0u8; EEPROM_HDR_LEN + len as usize];
    b[0..4].copy_from_slice(&ETHTOOL_GMODULEEEPROM.to_ne_bytes());
    b[8..12].copy_from_slice(&offset.to_ne_bytes());
    b[12..16].copy_from_slice(&len.to_ne_bytes());
    b
}

/// The bytes read, from an answered `eeprom_request` buffer (`len` as the kernel wrote
/// it back, cut to what the buffer holds).
pub fn decode_eeprom(b: &[u8]) -> Vec<u8> {
    let len = b
        .get(12..16)
        .map(|s| u32::from_ne_bytes(s.try_into().expect("4 bytes")) as usize)
        .unwrap_or(0);
    let data = b.get(EEPROM_HDR_LEN..).unwrap_or(&[]);
    data[..len.min(data.len())].to_vec()
}

/// `ifname`'s module as one linear dump (a socket of its own), for the reader that
/// falls back to the ioctls where ethtool netlink cannot
/// (`rocewatch_netlink::module_eeprom::read_port_module`): `Ok(None)` when the driver
/// reads no module (`EOPNOTSUPP`: no `get_module_info`).
pub fn module_dump(ifname: &str) -> io::Result<Option<Vec<u8>>> {
    let sock = EthtoolSocket::open()?;
    match sock.module_eeprom(ifname) {
        Ok((_, bytes)) => Ok(Some(bytes)),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(None),
        Err(e) => Err(e),
    }
}

impl EthtoolSocket {
    /// `ETHTOOL_GMODULEINFO` of `ifname`: `EOPNOTSUPP` when the driver reads no modules,
    /// an error (often `EIO`) when the cage is empty.
    pub fn module_info(&self, ifname: &str) -> io::Result<ModuleInfo> {
        // u32 storage: the kernel's struct is 4-byte aligned.
        let mut buf = [0u32; MODINFO_LEN / 4];
        let req = modinfo_request();
        // SAFETY: buf is MODINFO_LEN bytes, as req.
        unsafe {
            std::ptr::copy_nonoverlapping(req.as_ptr(), buf.as_mut_ptr() as *mut u8, MODINFO_LEN)
        };
        self.call(ifname, buf.as_mut_ptr() as *mut libc::c_void)?;
        // SAFETY: viewing the MODINFO_LEN bytes of buf as bytes.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr() as *const u8, MODINFO_LEN) };
        decode_modinfo(bytes)
    }

    /// The module's whole EEPROM as `ethtool -m IF raw on` dumps it, with its map.
    pub fn module_eeprom(&self, ifname: &str) -> io::Result<(ModuleInfo, Vec<u8>)> {
        let info = self.module_info(ifname)?;
        let req = eeprom_request(0, info.eeprom_len);
        let mut buf = vec![0u32; req.len().div_ceil(4)];
        // SAFETY: buf holds at least req.len() bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(req.as_ptr(), buf.as_mut_ptr() as *mut u8, req.len())
        };
        self.call(ifname, buf.as_mut_ptr() as *mut libc::c_void)?;
        // SAFETY: viewing req.len() bytes of buf as bytes.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr() as *const u8, req.len()) };
        Ok((info, decode_eeprom(bytes)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_bytes_and_answers() {
        let r = modinfo_request();
        assert_eq!(&r[0..4], &0x42u32.to_ne_bytes());
        assert!(r[4..].iter().all(|b| *b == 0));
        let mut answer = r;
        answer[4..8].copy_from_slice(&2u32.to_ne_bytes());
        answer[8..12].copy_from_slice(&512u32.to_ne_bytes());
        assert_eq!(
            decode_modinfo(&answer).unwrap(),
            ModuleInfo {
                map: ModuleMap::Sff8472,
                eeprom_len: 512
            }
        );
        answer[8..12].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(decode_modinfo(&answer).is_err());
        assert!(decode_modinfo(&answer[..6]).is_err());

        let mut e = eeprom_request(0, 256);
        assert_eq!(e.len(), 16 + 256);
        assert_eq!(&e[0..4], &0x43u32.to_ne_bytes());
        assert_eq!(&e[12..16], &256u32.to_ne_bytes());
        e[16] = 0x03;
        // The kernel wrote back fewer bytes than asked.
        e[12..16].copy_from_slice(&128u32.to_ne_bytes());
        let d = decode_eeprom(&e);
        assert_eq!((d.len(), d[0]), (128, 0x03));
        // A length beyond the buffer is cut to it; a cut header is empty.
        e[12..16].copy_from_slice(&9999u32.to_ne_bytes());
        assert_eq!(decode_eeprom(&e).len(), 256);
        assert!(decode_eeprom(&e[..10]).is_empty());
    }

    proptest::proptest! {
        /// Any answer a driver writes back: a value or an error, never a panic.
        #[test]
        fn any_answer_decodes_without_panicking(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..700)) {
            let _ = decode_modinfo(&b);
            let d = decode_eeprom(&b);
            proptest::prop_assert!(d.len() <= b.len().saturating_sub(16));
        }
    }

    /// lo reads no modules: EOPNOTSUPP, what the netlink reader's fallback sees on a
    /// NIC without a cage too.
    #[test]
    fn lo_has_no_module() {
        let s = EthtoolSocket::open().unwrap();
        let e = s.module_info("lo").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}");
        assert_eq!(
            s.module_eeprom("rw-none0").unwrap_err().raw_os_error(),
            Some(libc::ENODEV)
        );
    }
}
