//! Transceiver module EEPROM decoders: SFF-8472 (SFP/SFP+/SFP28), SFF-8636 (QSFP+/QSFP28)
//! and CMIS (QSFP-DD/OSFP), laid out as ethtool's `sfpid.c`/`sfpdiag.c`, `qsfp.c` and
//! `cmis.c` read them, with SFF-8472's external calibration as the standard states it.
//!
//! Layout:
//! - [`eeprom`]: the bytes as read ([`Eeprom`]: lower page, upper pages by bank and page,
//!   A2h), from a reader (ethtool netlink by page) or ethtool's linear dump;
//! - [`model`]: what a module says ([`Module`]): inventory, readings (°C, V, mA, mW),
//!   thresholds, alarms, problems; absent readings are `None`, never zero;
//! - `sff8472`, `sff8636`, `cmis`: one decoder per family;
//! - [`verdict`]: one verdict per module ([`ModuleVerdict`]), for every command that
//!   judges one (doctor, health);
//! - [`dump`]: the formats operators paste (`ethtool -m DEV hex on`, `hexdump -C`, raw
//!   bytes) into an [`Eeprom`].

mod cmis;
mod common;
pub mod dump;
pub mod eeprom;
mod error;
pub mod model;
mod sff8472;
mod sff8636;
pub mod verdict;

pub use eeprom::{Eeprom, Page};
pub use error::Error;
pub use model::{Alarm, Family, Lane, Level, Limits, Measure, Module, Problem, Thresholds};
pub use verdict::{judge_module, ModuleFinding, ModuleLevel, ModuleVerdict};

/// Decodes a module: the family from the identifier byte, then that family's map.
pub fn decode(eeprom: &Eeprom) -> Result<Module, Error> {
    let id = eeprom.identifier();
    let mut module = if eeprom::is_sff8472_id(id) {
        sff8472::decode(eeprom)
    } else if eeprom::is_sff8636_id(id) {
        sff8636::decode(eeprom)
    } else if eeprom::is_cmis_id(id) {
        cmis::decode(eeprom)
    } else {
        return Err(Error::UnknownIdentifier { code: id });
    };
    let latched = module.family.flags_latched();
    for a in &mut module.alarms {
        a.latched = latched;
    }
    Ok(module)
}
