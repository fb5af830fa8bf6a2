//! The bytes of one module as read: the lower page, the upper pages by (bank, page), and
//! SFF-8472's second address (A2h, I2C 0x51). Whoever reads (ethtool netlink by page and
//! bank, the ioctl's linear dump, a file) fills an [`Eeprom`]; the decoders only look.

use std::collections::BTreeMap;

use crate::error::Error;

/// One 128-byte page.
pub type Page = [u8; 128];

/// SFF-8024 identifier byte values that select the memory map (SFF-8024 table 4-1; the
/// same split as ethtool's `eeprom_parse`/`module-common.c`).
pub(crate) fn is_sff8472_id(id: u8) -> bool {
    // 0x02 GBIC/soldered, 0x03 SFP/SFP+/SFP28 (ethtool decodes both with sfpid.c).
    matches!(id, 0x02 | 0x03)
}

pub(crate) fn is_sff8636_id(id: u8) -> bool {
    // 0x0C QSFP, 0x0D QSFP+, 0x11 QSFP28 (ethtool's qsfp.c).
    matches!(id, 0x0c | 0x0d | 0x11)
}

pub(crate) fn is_cmis_id(id: u8) -> bool {
    // 0x18 QSFP-DD, 0x19 OSFP, 0x1B DSFP, 0x1E QSFP+ CMIS, 0x1F SFP-DD CMIS, 0x20 SFP+ CMIS
    // (ethtool's cmis.c decodes all of these).
    matches!(id, 0x18 | 0x19 | 0x1b | 0x1e | 0x1f | 0x20)
}

/// A module's memory as read. Pages not read are absent, not zero.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eeprom {
    lower: Page,
    upper: BTreeMap<(u8, u8), Page>,
    a2: Option<[u8; 256]>,
}

impl Eeprom {
    /// A module of which only the lower page (bytes 0-127; SFF-8472: A0h 0-127) was read.
    pub fn new(lower: Page) -> Self {
        Eeprom {
            lower,
            upper: BTreeMap::new(),
            a2: None,
        }
    }

    /// Adds (or replaces) upper page `page` of `bank` (bytes 128-255 of that page, as
    /// ethtool netlink returns them for offset 128, length 128). SFF-8472's A0h upper half
    /// is bank 0, page 0; SFF-8636 uses bank 0 only.
    pub fn insert_page(&mut self, bank: u8, page: u8, upper: Page) {
        self.upper.insert((bank, page), upper);
    }

    /// Removes upper page `page` of `bank` (a reader that finds it was not the module's).
    pub fn remove_page(&mut self, bank: u8, page: u8) {
        self.upper.remove(&(bank, page));
    }

    /// Sets SFF-8472's diagnostics memory (I2C address 0x51, "A2h"): 256 bytes.
    pub fn set_a2(&mut self, a2: [u8; 256]) {
        self.a2 = Some(a2);
    }

    /// ethtool's legacy linear layout (`ETHTOOL_GMODULEEEPROM`, `ethtool -m DEV raw on`),
    /// chosen by the identifier byte 0. SFF-8472: A0h at 0x000-0x0ff, A2h at 0x100-0x1ff.
    /// SFF-8636 and CMIS: the lower page, then upper page N at 0x80 * (N + 1) (00h at 0x80,
    /// 01h at 0x100, 02h at 0x180, 03h at 0x200: ethtool's `qsfp.c` and
    /// `cmis_memory_map_init_buf`), bank 0. Pages cut short by the dump's end are left out,
    /// as are pages a flat-memory module does not have (only 00h is kept).
    pub fn from_linear(bytes: &[u8]) -> Result<Self, Error> {
        let known: Vec<Option<u8>> = bytes.iter().copied().map(Some).collect();
        Self::from_sparse(&known)
    }

    /// [`Eeprom::from_linear`] over a dump with holes (`None`: a byte the dump did not
    /// give): a page is kept only when all its bytes are known.
    pub fn from_sparse(bytes: &[Option<u8>]) -> Result<Self, Error> {
        let Some(lower) = page_at(bytes, 0) else {
            return Err(Error::TooShort {
                len: bytes.iter().take_while(|b| b.is_some()).count(),
            });
        };
        let mut eeprom = Eeprom::new(lower);
        let id = lower[0];
        if is_sff8472_id(id) {
            if let Some(upper) = page_at(bytes, 0x80) {
                eeprom.insert_page(0, 0, upper);
            }
            if let (Some(low), Some(high)) = (page_at(bytes, 0x100), page_at(bytes, 0x180)) {
                let mut a2 = [0u8; 256];
                a2[..128].copy_from_slice(&low);
                a2[128..].copy_from_slice(&high);
                eeprom.set_a2(a2);
            }
            return Ok(eeprom);
        }
        let flat = if is_cmis_id(id) {
            lower[2] & 0x80 != 0
        } else {
            lower[2] & 0x04 != 0
        };
        let last_page = if flat { 0 } else { 0xff };
        for page in 0..=last_page {
            if let Some(upper) = page_at(bytes, 0x80 * (usize::from(page) + 1)) {
                eeprom.insert_page(0, page, upper);
            }
        }
        Ok(eeprom)
    }

    /// The lower page.
    pub fn lower(&self) -> &Page {
        &self.lower
    }

    /// Upper page `page` of `bank`, when it was read.
    pub fn page(&self, bank: u8, page: u8) -> Option<&Page> {
        self.upper.get(&(bank, page))
    }

    /// SFF-8472's A2h, when it was read.
    pub fn a2(&self) -> Option<&[u8; 256]> {
        self.a2.as_ref()
    }

    /// The identifier byte (SFF-8024), byte 0 of the lower page.
    pub fn identifier(&self) -> u8 {
        self.lower[0]
    }
}

fn page_at(bytes: &[Option<u8>], offset: usize) -> Option<Page> {
    let slice = bytes.get(offset..offset + 128)?;
    let mut page = [0u8; 128];
    for (to, from) in page.iter_mut().zip(slice) {
        *to = (*from)?;
    }
    Some(page)
}
