//! A whole transceiver module read over ethtool netlink, page by page, the pages its
//! family needs as ethtool's own `-m` asks for them (`sfpid.c`, `qsfp.c`, `cmis.c`
//! `*_memory_map_init_pages`), into a [`rocewatch_optics::Eeprom`]:
//!
//! - the lower page (I2C address 0x50, page 0, offset 0, 128 bytes) always: its byte 0
//!   (the SFF-8024 identifier) says the family;
//! - SFF-8472 (SFP, identifier 0x02/0x03): A2h's first 128 bytes (I2C address 0x51:
//!   thresholds, calibration, readings, flags) when byte 92 bit 6 says the module has
//!   diagnostics, with A0h's upper half (to tell the kernel's fallback answering A0h's
//!   bytes for A2h); A2h's upper half (vendor and user memory) is not read, and left zero;
//! - SFF-8636 (QSFP+/QSFP28, 0x0C/0x0D/0x11): upper page 00h, and page 03h (thresholds)
//!   unless byte 2 bit 2 says flat memory; a failing page 03h read is a problem, not a
//!   failure (some drivers refuse it; ethtool goes on without it too);
//! - CMIS (QSFP-DD/OSFP/...): upper page 00h; unless byte 2 bit 7 says flat memory,
//!   pages 01h and 02h, then page 11h (lane flags and monitors) of each bank page 01h
//!   byte 0x8E bits 0-1 advertise (1, 2 or 4 banks).
//!
//! Each read is one I2C transaction on the module's bus: about 128 bytes at 100 kHz, a
//! few milliseconds, more where the driver goes through firmware (mlx5's MCIA register).
//! A CMIS module with 4 banks costs 8 reads; callers read modules at a slow interval.

use std::path::Path;

use rocewatch_optics::Eeprom;

use crate::ethtool::{EthtoolError, EthtoolNetlink, PageRequest};

/// The I2C address of the module's main memory (A0h).
pub const I2C_ADDRESS_LOW: u8 = 0x50;
/// SFF-8472's diagnostics address (A2h).
pub const I2C_ADDRESS_A2: u8 = 0x51;
const PAGE: u32 = 128;

/// A module's memory as read, and what could not be read (pages the decoder then lacks).
#[derive(Debug, Clone)]
pub struct ModuleRead {
    pub eeprom: Eeprom,
    /// Optional pages whose read failed, each said as "page 03h: ...".
    pub problems: Vec<String>,
}

fn page_of(bytes: Vec<u8>, what: &str) -> Result<[u8; 128], EthtoolError> {
    <[u8; 128]>::try_from(bytes.as_slice()).map_err(|_| {
        EthtoolError::Netlink(crate::NetlinkError::Malformed {
            request: format!("module EEPROM {what}"),
            detail: format!("{} bytes, want 128", bytes.len()),
        })
    })
}

fn lower() -> PageRequest {
    PageRequest {
        i2c_address: I2C_ADDRESS_LOW,
        bank: 0,
        page: 0,
        offset: 0,
        length: PAGE,
    }
}

fn upper(bank: u8, page: u8) -> PageRequest {
    PageRequest {
        i2c_address: I2C_ADDRESS_LOW,
        bank,
        page,
        offset: PAGE,
        length: PAGE,
    }
}

/// SFF-8024 identifiers, as `rocewatch_optics` splits them.
fn family_of(id: u8) -> Family {
    match id {
        0x02 | 0x03 => Family::Sff8472,
        0x0c | 0x0d | 0x11 => Family::Sff8636,
        0x18 | 0x19 | 0x1b | 0x1e | 0x1f | 0x20 => Family::Cmis,
        _ => Family::Unknown,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Sff8472,
    Sff8636,
    Cmis,
    Unknown,
}

/// What an A2h read that came back as A0h's first bytes is: the kernel's answer for a
/// driver without `get_module_eeprom_by_page` that reports the module as SFF-8079
/// (`fallback_set_params` in net/ethtool/eeprom.c moves an I2C 0x51 request to A2h only
/// for `ETH_MODULE_SFF_8472`), not the module's diagnostics.
const FALLBACK_A2: &str = "A2h (diagnostics): the kernel answered with A0h's bytes (its fallback for a driver without page reads, which reports this module as SFF-8079: no diagnostics to read), not read; not a fault of the module";

/// An A2h answer that is A0h's lower page, or its upper half (one that is not a run
/// of one byte, as a blank page is): `fallback_set_params` (net/ethtool/eeprom.c) serves
/// I2C 0x51 from A0h's offset 0 for a driver that calls the module SFF-8079 (Linux 5.19
/// on) or SFF-8472 (before: the map test was the wrong way round, fixed by
/// a3bb7b63813f), and from A0h's offset 128 for SFF-8079 before 5.19.
fn is_a0_again(a2: &[u8; 128], low: &[u8; 128], a0_upper: Option<&[u8; 128]>) -> bool {
    let blank = a2.iter().all(|b| *b == a2[0]);
    a2 == low || (!blank && a0_upper == Some(a2))
}

/// Bank 1 and up of page 11h identical to bank 0's, byte for byte: the kernel's
/// fallback for a driver without page reads does not look at the bank
/// (`fallback_set_params`), so those are bank 0's bytes again. They are dropped (the
/// decoder then says those lanes' page is missing) and said as a read the kernel could
/// not make. Two banks of live readings (powers, biases, flags) are not equal by chance.
fn refuse_banks_read_as_bank_0(eeprom: &mut Eeprom, problems: &mut Vec<String>, banks: u8) {
    let Some(bank0) = eeprom.page(0, 0x11).copied() else {
        return;
    };
    for bank in 1..banks {
        if eeprom.page(bank, 0x11) == Some(&bank0) {
            eeprom.remove_page(bank, 0x11);
            problems.push(format!(
                "bank {bank} page 11h: byte for byte bank 0's (the kernel's fallback for a driver without page reads ignores the bank), not read; not a fault of the module"
            ));
        }
    }
}

/// Reads a module through `read` (one [`PageRequest`] at a time: ethtool netlink, or a
/// test's pages). The lower page must read; what fails after it is a problem.
pub fn read_module(
    mut read: impl FnMut(&PageRequest) -> Result<Vec<u8>, EthtoolError>,
) -> Result<ModuleRead, EthtoolError> {
    let low = page_of(read(&lower())?, "lower page")?;
    let mut eeprom = Eeprom::new(low);
    let mut problems = Vec::new();
    let mut upper_page = |eeprom: &mut Eeprom, problems: &mut Vec<String>, bank, page| {
        let what = format!("bank {bank} page {page:02x}h");
        match read(&upper(bank, page)).and_then(|b| page_of(b, &what)) {
            Ok(p) => {
                eeprom.insert_page(bank, page, p);
                true
            }
            Err(e) => {
                problems.push(format!("{what}: {e}"));
                false
            }
        }
    };
    match family_of(low[0]) {
        Family::Sff8472 => {
            if low[92] & 0x40 != 0 {
                // A0h's upper half, to know the kernel's fallback by its A2h answer
                // (below); not needed otherwise, so a refusal is no problem.
                let a0_upper = read(&upper(0, 0))
                    .and_then(|b| page_of(b, "A0h upper half"))
                    .ok();
                if let Some(p) = a0_upper {
                    eeprom.insert_page(0, 0, p);
                }
                let a2 = PageRequest {
                    i2c_address: I2C_ADDRESS_A2,
                    ..lower()
                };
                match read(&a2).and_then(|b| page_of(b, "A2h")) {
                    Ok(p) if is_a0_again(&p, &low, a0_upper.as_ref()) => {
                        problems.push(FALLBACK_A2.to_string())
                    }
                    Ok(p) => {
                        let mut full = [0u8; 256];
                        full[..128].copy_from_slice(&p);
                        eeprom.set_a2(full);
                    }
                    Err(e) => problems.push(format!("A2h (diagnostics): {e}")),
                }
            }
        }
        Family::Sff8636 => {
            upper_page(&mut eeprom, &mut problems, 0, 0);
            if low[2] & 0x04 == 0 {
                upper_page(&mut eeprom, &mut problems, 0, 3);
            }
        }
        Family::Cmis => {
            upper_page(&mut eeprom, &mut problems, 0, 0);
            if low[2] & 0x80 == 0 {
                let have_01 = upper_page(&mut eeprom, &mut problems, 0, 1);
                upper_page(&mut eeprom, &mut problems, 0, 2);
                let banks = match eeprom.page(0, 1).map(|p| p[0x8e - 0x80] & 0x03) {
                    Some(0) => 1,
                    Some(1) => 2,
                    Some(2) => 4,
                    Some(v) => {
                        problems.push(format!(
                            "page 01h byte 0x8e: banks field {v} is reserved; bank 0 only"
                        ));
                        1
                    }
                    None => {
                        debug_assert!(!have_01);
                        1
                    }
                };
                for bank in 0..banks {
                    upper_page(&mut eeprom, &mut problems, bank, 0x11);
                }
                refuse_banks_read_as_bank_0(&mut eeprom, &mut problems, banks);
            }
        }
        Family::Unknown => {}
    }
    Ok(ModuleRead { eeprom, problems })
}

/// One port's module on this host: its netdev and the memory read, or `None` where the
/// driver reads no module (no cage, a virtual NIC: `EOPNOTSUPP` from netlink and the
/// ioctl), or what failed.
pub type HostModule = (String, Result<Option<ModuleRead>, String>);

/// The netdevs of `sysfs_root` backed by a device (`class/net/IF/device` exists: a PCI
/// or platform NIC, not `lo`, a bridge or a veth), sorted.
pub fn physical_netdevs(sysfs_root: &Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(sysfs_root.join("class/net"))? {
        let e = e?;
        if e.path().join("device").exists() {
            out.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    out.sort();
    Ok(out)
}

/// One port's module on this host, the one live reader doctor, `rocewatch optics`, the
/// collector and health share: over ethtool netlink by page and bank (`nl`; `None` where
/// the kernel has no ethtool family) and, where netlink cannot
/// ([`EthtoolError::is_unsupported`]), through `linear` (the ioctls' linear dump,
/// `rocewatch_ethtool::module::module_dump`; `Ok(None)` when the driver reads no module
/// either). `Ok(None)`: no module to read; `Err`: the read failed, said with the port.
pub fn read_port_module(
    nl: Option<&mut EthtoolNetlink>,
    ifname: &str,
    linear: impl FnOnce(&str) -> std::io::Result<Option<Vec<u8>>>,
) -> Result<Option<ModuleRead>, String> {
    let by_netlink = match nl {
        Some(n) => read_module(|r| n.module_eeprom(ifname, r)),
        None => Err(EthtoolError::NoFamily),
    };
    match by_netlink {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.is_unsupported() => match linear(ifname) {
            Ok(Some(bytes)) => Eeprom::from_linear(&bytes)
                .map(|eeprom| {
                    Some(ModuleRead {
                        eeprom,
                        problems: Vec::new(),
                    })
                })
                .map_err(|e| format!("{ifname}: module EEPROM (ioctl): {e}")),
            Ok(None) => Ok(None),
            Err(e) => Err(format!("{ifname}: module EEPROM (ioctl): {e}")),
        },
        Err(e) => Err(e.to_string()),
    }
}

/// Every module of this host (`rocewatch optics` without a file): the physical netdevs
/// under `sysfs_root`, each read by [`read_port_module`] (netlink opened once by the
/// caller, `None` where the family is missing).
pub fn host_modules(
    sysfs_root: &Path,
    mut nl: Option<&mut EthtoolNetlink>,
    mut linear: impl FnMut(&str) -> std::io::Result<Option<Vec<u8>>>,
) -> std::io::Result<Vec<HostModule>> {
    let mut out = Vec::new();
    for ifname in physical_netdevs(sysfs_root)? {
        let r = read_port_module(nl.as_deref_mut(), &ifname, &mut linear);
        out.push((ifname, r));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    type Pages = BTreeMap<(u8, u8, u8, u32), [u8; 128]>;

    /// A module answering from `pages` (I2C address, bank, page, offset), recording the
    /// requests; anything else answers EINVAL as the kernel does for a page the module
    /// lacks.
    type Log = std::rc::Rc<std::cell::RefCell<Vec<PageRequest>>>;

    fn module(
        pages: Pages,
    ) -> (
        impl FnMut(&PageRequest) -> Result<Vec<u8>, EthtoolError>,
        Log,
    ) {
        let log = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let l = log.clone();
        let f = move |r: &PageRequest| {
            l.borrow_mut().push(*r);
            pages
                .get(&(r.i2c_address, r.bank, r.page, r.offset))
                .map(|p| p[..r.length as usize].to_vec())
                .ok_or(EthtoolError::Netlink(crate::NetlinkError::Kernel {
                    request: "module EEPROM".into(),
                    errno: libc::EINVAL,
                }))
        };
        (f, log)
    }

    fn page(fill: u8) -> [u8; 128] {
        [fill; 128]
    }

    #[test]
    fn sfp_with_diagnostics_reads_a0_and_a2() {
        let mut a0 = page(0);
        a0[0] = 0x03;
        a0[92] = 0x40 | 0x20;
        let mut pages = Pages::new();
        pages.insert((0x50, 0, 0, 0), a0);
        pages.insert((0x51, 0, 0, 0), page(7));
        pages.insert((0x50, 0, 0, 128), page(9));
        let (f, log) = module(pages.clone());
        let m = read_module(f).unwrap();
        assert!(m.problems.is_empty(), "{:?}", m.problems);
        let a2 = m.eeprom.a2().unwrap();
        assert_eq!((a2[0], a2[127], a2[128]), (7, 7, 0));
        let addrs: Vec<_> = log.borrow().iter().map(|r| r.i2c_address).collect();
        assert_eq!(addrs, vec![0x50, 0x50, 0x51]);
        // A0h's upper half refused: no matter, A2h still read.
        pages.remove(&(0x50, 0, 0, 128));
        let (f, _) = module(pages);
        let m = read_module(f).unwrap();
        assert!(m.problems.is_empty() && m.eeprom.a2().is_some(), "{m:?}");
    }

    #[test]
    fn sfp_without_diagnostics_reads_only_a0() {
        let mut a0 = page(0);
        a0[0] = 0x03;
        let (f, log) = module(Pages::from([((0x50, 0, 0, 0), a0)]));
        let m = read_module(f).unwrap();
        assert!(m.eeprom.a2().is_none());
        assert_eq!(log.borrow().len(), 1);
    }

    #[test]
    fn qsfp28_paged_reads_page_03_and_a_refused_page_03_is_a_problem() {
        let mut low = page(0);
        low[0] = 0x11;
        let mut pages = Pages::from([((0x50, 0, 0, 0), low), ((0x50, 0, 0, 128), page(1))]);
        let (f, log) = module(pages.clone());
        let m = read_module(f).unwrap();
        assert!(m.eeprom.page(0, 0).is_some());
        assert!(m.eeprom.page(0, 3).is_none());
        assert_eq!(m.problems.len(), 1, "{:?}", m.problems);
        assert!(
            m.problems[0].starts_with("bank 0 page 03h"),
            "{:?}",
            m.problems
        );
        assert_eq!(log.borrow().last().unwrap().page, 3);
        pages.insert((0x50, 0, 3, 128), page(3));
        let (f, _) = module(pages);
        let m = read_module(f).unwrap();
        assert_eq!(m.eeprom.page(0, 3).unwrap()[0], 3);
        assert!(m.problems.is_empty());
    }

    #[test]
    fn qsfp_flat_memory_reads_no_page_03() {
        let mut low = page(0);
        low[0] = 0x0d;
        low[2] = 0x04;
        let (f, log) = module(Pages::from([
            ((0x50, 0, 0, 0), low),
            ((0x50, 0, 0, 128), page(1)),
        ]));
        let m = read_module(f).unwrap();
        assert!(m.problems.is_empty());
        assert_eq!(log.borrow().len(), 2);
    }

    #[test]
    fn cmis_reads_page_11h_of_each_advertised_bank() {
        let mut low = page(0);
        low[0] = 0x18;
        let mut p1 = page(0);
        p1[0x8e - 0x80] = 0x02; // banks 0-3
        let mut pages = Pages::from([
            ((0x50, 0, 0, 0), low),
            ((0x50, 0, 0, 128), page(0)),
            ((0x50, 0, 1, 128), p1),
            ((0x50, 0, 2, 128), page(2)),
        ]);
        for bank in 0..4 {
            pages.insert((0x50, bank, 0x11, 128), page(0x11 + bank));
        }
        let (f, log) = module(pages);
        let m = read_module(f).unwrap();
        assert!(m.problems.is_empty(), "{:?}", m.problems);
        for bank in 0..4 {
            assert_eq!(m.eeprom.page(bank, 0x11).unwrap()[0], 0x11 + bank);
        }
        assert_eq!(log.borrow().len(), 8);
    }

    #[test]
    fn cmis_flat_memory_reads_lower_and_page_00_only() {
        let mut low = page(0);
        low[0] = 0x19;
        low[2] = 0x80;
        let (f, log) = module(Pages::from([
            ((0x50, 0, 0, 0), low),
            ((0x50, 0, 0, 128), page(0)),
        ]));
        read_module(f).unwrap();
        assert_eq!(log.borrow().len(), 2);
    }

    #[test]
    fn a_lower_page_that_fails_or_is_short_fails_the_read() {
        let (f, _) = module(Pages::new());
        assert!(read_module(f).is_err());
        let short = |_: &PageRequest| Ok(vec![3u8; 20]);
        let e = read_module(short).unwrap_err().to_string();
        assert!(e.contains("20 bytes, want 128"), "{e}");
    }

    /// A driver without `get_module_eeprom_by_page`: the kernel serves each page request
    /// from the driver's linear dump as `fallback_set_params` (net/ethtool/eeprom.c)
    /// computes it: a page's offset is `page * 128 + offset`, A2h (0x51) moves on by
    /// `a2_shift` (256 where the driver calls the map SFF-8472 since a3bb7b63813f, Linux
    /// 5.19; before it, 128 where the driver calls it SFF-8079 and 0 for SFF-8472), the
    /// bank is not looked at, and what lies past the dump is EINVAL.
    fn kernel_fallback(
        dump: Vec<u8>,
        a2_shift: usize,
    ) -> impl FnMut(&PageRequest) -> Result<Vec<u8>, EthtoolError> {
        move |r: &PageRequest| {
            let einval = || {
                EthtoolError::Netlink(crate::NetlinkError::Kernel {
                    request: "module EEPROM".into(),
                    errno: libc::EINVAL,
                })
            };
            let mut offset = r.offset as usize;
            if r.page != 0 {
                if offset < 128 || offset + r.length as usize > 256 {
                    return Err(einval());
                }
                offset += usize::from(r.page) * 128;
            }
            if r.i2c_address == I2C_ADDRESS_A2 {
                offset += a2_shift;
            }
            if offset >= dump.len() {
                return Err(einval());
            }
            let end = (offset + r.length as usize).min(dump.len());
            Ok(dump[offset..end].to_vec())
        }
    }

    /// An SFP whose A0h byte 92 claims diagnostics, behind a driver that reports the map
    /// as SFF-8079 (A0h only, 256 bytes): the kernel answers the A2h request with A0h's
    /// first bytes. That is said as a read the kernel could not make, and no A2h is kept
    /// (its checksum would fail: a module fault that is not one).
    #[test]
    fn an_a2h_answered_with_a0h_bytes_is_refused_as_the_kernel_fallback() {
        let mut a0 = vec![0u8; 256];
        a0[0] = 0x03;
        a0[92] = 0x68;
        a0[200..216].copy_from_slice(b"vendor specific."); // A0h's upper half
        let mut both = a0.clone();
        both.extend((0..256).map(|i| i as u8));
        // SFF-8079 map (A0h only), Linux 5.19 on: A2h answered from A0h byte 0; before
        // 5.19, from A0h byte 128; an SFF-8472 map before 5.19: from A0h byte 0.
        for (dump, shift) in [(a0.clone(), 0), (a0, 128), (both.clone(), 0)] {
            let m = read_module(kernel_fallback(dump, shift)).unwrap();
            assert!(
                m.eeprom.a2().is_none(),
                "shift {shift}: A0h's bytes kept as A2h"
            );
            assert_eq!(m.problems.len(), 1, "{:?}", m.problems);
            assert!(
                m.problems[0].contains("A0h's bytes")
                    && m.problems[0].contains("not a fault of the module"),
                "{:?}",
                m.problems
            );
        }
        // The same module behind a driver that gives A2h: read.
        let m = read_module(kernel_fallback(both, 256)).unwrap();
        assert!(m.problems.is_empty(), "{:?}", m.problems);
        assert_eq!(m.eeprom.a2().unwrap()[5], 5);
    }

    /// A CMIS module of two banks behind the fallback: the bank is ignored, so bank 1's
    /// page 11h comes back as bank 0's, byte for byte: refused, bank 0 kept.
    #[test]
    fn a_bank_page_identical_to_bank_0_is_refused_as_the_kernel_fallback() {
        let mut dump = vec![0u8; 128 * 19];
        dump[0] = 0x18;
        dump[0x100 + (0x8e - 0x80)] = 0x01; // page 01h: banks 0 and 1
        for (i, b) in dump[0x80 * 0x12..0x80 * 0x13].iter_mut().enumerate() {
            *b = i as u8; // page 11h
        }
        let m = read_module(kernel_fallback(dump, 0)).unwrap();
        assert!(m.eeprom.page(0, 0x11).is_some());
        assert!(
            m.eeprom.page(1, 0x11).is_none(),
            "bank 0's page kept as bank 1's"
        );
        assert!(
            m.problems
                .iter()
                .any(|p| p.starts_with("bank 1 page 11h") && p.contains("bank 0's")),
            "{:?}",
            m.problems
        );
    }

    proptest::proptest! {
        /// Any module memory (any identifier, memory model and bank bits; pages of any
        /// length): a read or an error, never a panic, and never more than 8 reads.
        #[test]
        fn any_module_reads_without_panicking(
            low in proptest::collection::vec(proptest::prelude::any::<u8>(), 128),
            len in 0usize..200,
            fill in proptest::prelude::any::<u8>(),
        ) {
            let mut n = 0;
            let r = read_module(|req| {
                n += 1;
                Ok(if req.offset == 0 && req.i2c_address == I2C_ADDRESS_LOW {
                    low.clone()
                } else {
                    vec![fill; len]
                })
            });
            proptest::prop_assert!(r.is_ok());
            proptest::prop_assert!(n <= 8, "{n} reads");
        }
    }

    #[test]
    fn host_modules_read_physical_netdevs_and_fall_back_where_netlink_cannot() {
        let d = tempfile_dir();
        for (name, physical) in [("eth0", true), ("lo", false), ("eth1", true)] {
            let dir = d.join("class/net").join(name);
            std::fs::create_dir_all(&dir).unwrap();
            if physical {
                std::fs::create_dir_all(dir.join("device")).unwrap();
            }
        }
        assert_eq!(physical_netdevs(&d).unwrap(), vec!["eth0", "eth1"]);
        // No netlink: eth0's driver gives a linear SFP dump through the ioctl, eth1's none.
        let mut asked = Vec::new();
        let got = host_modules(&d, None, |ifname| {
            asked.push(ifname.to_string());
            Ok((ifname == "eth0").then(|| {
                let mut b = vec![0u8; 256];
                b[0] = 0x03;
                b
            }))
        })
        .unwrap();
        assert_eq!(asked, vec!["eth0", "eth1"]);
        let m = got[0].1.as_ref().unwrap().as_ref().unwrap();
        assert_eq!(m.eeprom.identifier(), 0x03);
        assert!(got[1].1.as_ref().unwrap().is_none());
        // A dump too short for a lower page is an error naming the port.
        let got = host_modules(&d, None, |_| Ok(Some(vec![3u8; 10]))).unwrap();
        assert!(got[0]
            .1
            .as_ref()
            .unwrap_err()
            .starts_with("eth0: module EEPROM (ioctl)"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "rocewatch-netlink-modules-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
