//! cmis decoder (being written).

use crate::common::empty_module;
use crate::model::{Family, Module};
use crate::Eeprom;

pub(crate) fn decode(eeprom: &Eeprom) -> Module {
    empty_module(Family::Cmis, eeprom.identifier())
}
