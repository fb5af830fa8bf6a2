//! The link's own history and its transceiver module, read by counters-ethtool on the
//! netdevs of RDMA ports: carrier transitions from sysfs (`/sys/class/net/IF/
//! carrier_changes`, `carrier_up_count`, `carrier_down_count`), why the link is down and
//! the FEC mode and statistics from ethtool netlink (`ETHTOOL_MSG_LINKSTATE_GET`,
//! `ETHTOOL_MSG_FEC_GET`), and the module's diagnostics from its EEPROM
//! (`ETHTOOL_MSG_MODULE_EEPROM_GET`, decoded by `rocewatch_optics`). A reading the module
//! or driver does not give is absent, never zero.

use rocewatch_plugin_api::MetricDescriptor;

pub use crate::entry::CatalogEntry;
use crate::entry::{entry, NONE};
use crate::names;

/// A lane of the port or module, numbered from 0 for FEC (the kernel's array order) and
/// from 1 for a module (as `ethtool -m` numbers channels).
pub const ATTR_LANE: &str = "rdma.lane";
/// Why the link is down, in words (`enum ethtool_link_ext_state`: `autoneg`, `bad
/// signal integrity`, `cable issue`, ...).
pub const ATTR_DOWN_REASON: &str = "rdma.link.reason";
/// The detail of the reason (its substate: `no partner detected`, `serdes ALOS (loss of
/// signal)`, ...); empty when the driver gives none.
pub const ATTR_DOWN_DETAIL: &str = "rdma.link.reason_detail";
/// The FEC mode in use (`Off`, `RS`, `BaseR`, `LLRS`), as `ethtool --show-fec` prints it.
pub const ATTR_FEC_MODE: &str = "rdma.link.fec.mode";
/// A FEC histogram bin: the symbol errors per codeword it counts (`0`, `1-3`, ...).
pub const ATTR_FEC_BIN: &str = "rdma.link.fec.bin";
/// The module's identifier as ethtool names it (`QSFP28`, `SFP/SFP+/SFP28`, ...).
pub const ATTR_MODULE_IDENTIFIER: &str = "rdma.optics.identifier";
pub const ATTR_MODULE_VENDOR: &str = "rdma.optics.vendor";
pub const ATTR_MODULE_PART: &str = "rdma.optics.part_number";
pub const ATTR_MODULE_SERIAL: &str = "rdma.optics.serial_number";
/// What a module flag is about (`temperature`, `receiver power`, `rx loss of signal`...).
pub const ATTR_MODULE_MEASURE: &str = "rdma.optics.measure";
/// The flag's level (`high alarm`, `low warning`, ... or `set` for a state flag).
pub const ATTR_MODULE_LEVEL: &str = "rdma.optics.level";

const LINK: &str = "every netdev (sysfs)";
const EXT: &str =
    "drivers with get_link_ext_state (mlx5, mlxsw, some PHYs), while the link is down";
const FEC: &str = "drivers with get_fec_stats (mlx5, ice, bnxt_en, ...)";
const MODULE: &str = "ports with a module cage whose driver reads it (mlx5, ice, bnxt_en, sfp-bus)";

/// The link history metrics.
pub static LINK_HEALTH_CATALOG: &[CatalogEntry] = &[
    entry!(names::LINK_CARRIER_CHANGES, "{event}", Counter, "carrier_changes", NONE, 1, LINK,
        "Carrier (link) up and down transitions the kernel counted since the netdev appeared: a flapping link climbs by two a flap."),
    entry!(names::LINK_CARRIER_UP_EVENTS, "{event}", Counter, "carrier_up_count", NONE, 1, LINK,
        "Times the carrier came up."),
    entry!(names::LINK_CARRIER_DOWN_EVENTS, "{event}", Counter, "carrier_down_count", NONE, 1, LINK,
        "Times the carrier went down."),
    entry!(names::LINK_DOWN_REASON, "1", Gauge, "ETHTOOL_A_LINKSTATE_EXT_STATE", NONE, 1, EXT,
        "1 while the link is down and the driver says why: `rdma.link.reason` (the state) and `rdma.link.reason_detail` (its substate), in words. Absent while the link is up or the driver does not say."),
    entry!(names::LINK_FEC_MODE, "1", Gauge, "ETHTOOL_A_FEC_ACTIVE", NONE, 1, FEC,
        "1, with the FEC mode in use in `rdma.link.fec.mode`; absent when the kernel reports none (no link)."),
    entry!(names::LINK_FEC_CORRECTED_BLOCKS, "{codeword}", Counter, "ETHTOOL_A_FEC_STAT_CORRECTED", NONE, 1, FEC,
        "Codewords FEC corrected (errors on the line that FEC still hid)."),
    entry!(names::LINK_FEC_UNCORRECTABLE_BLOCKS, "{codeword}", Counter, "ETHTOOL_A_FEC_STAT_UNCORR", NONE, 1, FEC,
        "Codewords FEC could not correct: each is a frame lost to the physical layer."),
    entry!(names::LINK_FEC_CORRECTED_BITS, "{bit}", Counter, "ETHTOOL_A_FEC_STAT_CORR_BITS", NONE, 1, FEC,
        "Bits FEC corrected; over the bits received (`rdma.link.received_bits`) the pre-FEC bit error rate."),
    entry!(names::LINK_FEC_LANE_CORRECTED_BLOCKS, "{codeword}", Counter, "ETHTOOL_A_FEC_STAT_CORRECTED per lane", NONE, 1, FEC,
        "As `rdma.link.fec.corrected_blocks`, per lane (`rdma.lane`) where the driver counts them so: one bad lane among good ones is a fiber or a module lane."),
    entry!(names::LINK_FEC_LANE_UNCORRECTABLE_BLOCKS, "{codeword}", Counter, "ETHTOOL_A_FEC_STAT_UNCORR per lane", NONE, 1, FEC,
        "As `rdma.link.fec.uncorrectable_blocks`, per lane."),
    entry!(names::LINK_FEC_LANE_CORRECTED_BITS, "{bit}", Counter, "ETHTOOL_A_FEC_STAT_CORR_BITS per lane", NONE, 1, FEC,
        "As `rdma.link.fec.corrected_bits`, per lane."),
    entry!(names::LINK_FEC_CODEWORDS, "{codeword}", Counter, "ETHTOOL_A_FEC_STAT_HIST", NONE, 1, "kernels with ETHTOOL_A_FEC_STAT_HIST (2025 and later) and drivers that fill it",
        "Codewords received with the number of symbol errors of the bin `rdma.link.fec.bin` (IEEE 802.3ck/df FEC histogram): errors drifting into the high bins precede uncorrectable codewords."),
];

/// The module (transceiver) metrics.
pub static OPTICS_CATALOG: &[CatalogEntry] = &[
    entry!(names::OPTICS_INFO, "1", Gauge, "module EEPROM identifier, vendor, part and serial number", NONE, 1, MODULE,
        "1, with the module's `rdma.optics.identifier`, `rdma.optics.vendor`, `rdma.optics.part_number` and `rdma.optics.serial_number`: a changed serial is a swapped module."),
    entry!(names::OPTICS_TEMPERATURE, "Cel", Gauge, "module EEPROM temperature monitor", NONE, 1, MODULE,
        "Module temperature."),
    entry!(names::OPTICS_VOLTAGE, "V", Gauge, "module EEPROM supply voltage monitor", NONE, 1, MODULE,
        "Module supply voltage."),
    entry!(names::OPTICS_LANE_BIAS, "mA", Gauge, "module EEPROM laser bias monitor", NONE, 1, MODULE,
        "Laser bias current of a lane (`rdma.lane`, from 1)."),
    entry!(names::OPTICS_LANE_TX_POWER, "mW", Gauge, "module EEPROM transmit power monitor", NONE, 1, MODULE,
        "Optical power a lane transmits."),
    entry!(names::OPTICS_LANE_RX_POWER, "mW", Gauge, "module EEPROM receive power monitor", NONE, 1, MODULE,
        "Optical power a lane receives (average or OMA, as the module says): drifting toward its low warning is a dirty or failing fiber before the link drops."),
    entry!(names::OPTICS_FLAG, "1", Gauge, "module EEPROM alarm and warning flags", NONE, 1, MODULE,
        "1 per alarm, warning or state flag the module has set: `rdma.optics.measure`, `rdma.optics.level`, and `rdma.lane` for a lane's flag. Absent when no flag is set."),
];

/// The entry of a link health metric read from `source`.
pub fn link_health_entry(source: &str) -> Option<&'static CatalogEntry> {
    LINK_HEALTH_CATALOG.iter().find(|e| e.source == source)
}

/// The entry of module metric `name`.
pub fn optics_entry(name: &str) -> Option<&'static CatalogEntry> {
    OPTICS_CATALOG.iter().find(|e| e.name == name)
}

/// Descriptors of the link health and module metrics.
pub fn link_health_descriptors() -> Vec<MetricDescriptor> {
    let mut d = crate::entry::descriptors_of(LINK_HEALTH_CATALOG);
    d.extend(crate::entry::descriptors_of(OPTICS_CATALOG));
    d
}
