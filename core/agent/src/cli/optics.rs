//! `rocewatch optics`: the transceiver modules, decoded by `rocewatch_optics`: identity,
//! temperature and voltage, per lane bias and optical power, thresholds, the flags that
//! are on and what is wrong with the read. From a file (`--eeprom-file`: the dumps
//! operators paste) or from the kernel, through [`KERNEL_READER`] (`optics_host.rs`:
//! ethtool netlink by page and bank, the ioctls' linear dump where netlink cannot).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use rocewatch_optics::{Eeprom, Limits, Module};
use serde::Serialize;

use super::output::print_json;
use super::source::SourceArgs;

/// `rocewatch optics`'s arguments.
#[derive(Debug, Args)]
pub struct OpticsArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Decode a module from a dump instead of the host's ports: the output of
    /// `ethtool -m DEV hex on` (the "Offset Values" table), `hexdump -C` or `xxd` of a
    /// raw dump, or the bytes of `ethtool -m DEV raw on` themselves. Offsets are ethtool's
    /// linear layout (SFF-8472: A0h at 0x000, A2h at 0x100; SFF-8636 and CMIS: the lower
    /// page, then upper page N at 0x80 * (N + 1)).
    #[arg(long, value_name = "FILE")]
    pub eeprom_file: Option<PathBuf>,
    /// Print JSON: {"modules": [{"port", "identifier", "vendor", "part_number",
    /// "serial_number", "temperature_c", "voltage_v", "lanes": [{"lane", "bias_ma",
    /// "tx_power_mw", "rx_power_mw", "data_path_state", "tx_disabled"}], "thresholds",
    /// "alarms", "problems", ...}]}; a reading the module does not give is null, never 0
    /// (data_path_state: CMIS only; tx_disabled: SFF-8636 only).
    #[arg(long)]
    pub json: bool,
}

/// One port's module as a reader returns it.
pub struct PortModule {
    /// The port: a netdev name, or the file a dump came from.
    pub port: String,
    pub eeprom: Eeprom,
}

/// Reads the module of every port under a sysfs root from the kernel (ethtool netlink
/// `ETHTOOL_MSG_MODULE_EEPROM_GET` by page and bank, the ioctl where netlink is missing).
/// Were it `None`, the command would say that reading from the kernel is not built and
/// exit 2: it never shows a made-up module.
pub const KERNEL_READER: Option<KernelReader> = Some(read_kernel);

/// A reader of every port's module under a sysfs root.
pub type KernelReader = fn(&Path) -> Result<Vec<PortModule>>;

fn read_kernel(sysfs_root: &Path) -> Result<Vec<PortModule>> {
    let root = sysfs_root.to_string_lossy();
    Ok(super::optics_host::read_host(&root)?
        .into_iter()
        .map(|(port, read)| PortModule {
            port,
            eeprom: read.eeprom,
        })
        .collect())
}

pub fn run(args: OpticsArgs) -> Result<i32> {
    let ports = match &args.eeprom_file {
        Some(path) => vec![from_file(path)?],
        None => match KERNEL_READER {
            Some(read) => read(&args.source.load()?.agent.sysfs_root)?,
            None => {
                eprintln!(
                    "rocewatch optics: reading modules from the kernel: not built; \
                     decode a dump with --eeprom-file FILE (ethtool -m DEV hex on > FILE)"
                );
                return Ok(2);
            }
        },
    };
    if ports.is_empty() && !args.json {
        println!("No transceiver module read.");
    }
    let mut decoded = Vec::new();
    for port in &ports {
        let module = rocewatch_optics::decode(&port.eeprom)
            .with_context(|| format!("{}: cannot decode the module", port.port))?;
        decoded.push((port.port.as_str(), module));
    }
    if args.json {
        print_json(&json(&decoded)?)?;
    } else {
        for (port, module) in &decoded {
            print!("{}", text(port, module));
        }
    }
    Ok(0)
}

fn from_file(path: &std::path::Path) -> Result<PortModule> {
    let bytes = std::fs::read(path).with_context(|| format!("--eeprom-file {}", path.display()))?;
    let eeprom = rocewatch_optics::dump::parse(&bytes)
        .with_context(|| format!("--eeprom-file {}", path.display()))?;
    Ok(PortModule {
        port: path.display().to_string(),
        eeprom,
    })
}

#[derive(Serialize)]
struct JsonModule<'a> {
    port: &'a str,
    #[serde(flatten)]
    module: &'a Module,
}

fn json(decoded: &[(&str, Module)]) -> Result<serde_json::Value> {
    let modules: Vec<JsonModule> = decoded
        .iter()
        .map(|(port, module)| JsonModule { port, module })
        .collect();
    Ok(serde_json::json!({ "modules": serde_json::to_value(modules)? }))
}

/// A value as ethtool prints it (`digits` decimals), `-` when absent.
fn num(value: Option<f64>, digits: usize) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
}

/// Power in dBm as ethtool prints it: `-inf` for no light, `-` when absent.
fn dbm(mw: Option<f64>) -> String {
    match mw {
        Some(v) if v > 0.0 => format!("{:.2}", rocewatch_optics::model::mw_to_dbm(v)),
        Some(_) => "-inf".to_string(),
        None => "-".to_string(),
    }
}

fn text(port: &str, m: &Module) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_string());
    let _ = writeln!(
        out,
        "{port}: 0x{:02x} ({}), {}",
        m.identifier_code,
        m.identifier,
        m.family.name()
    );
    let rows = [
        ("Vendor", or_dash(&m.vendor)),
        ("Vendor OUI", or_dash(&m.vendor_oui)),
        ("Part number", or_dash(&m.part_number)),
        ("Revision", or_dash(&m.revision)),
        ("Serial number", or_dash(&m.serial_number)),
        ("Date code", or_dash(&m.date_code)),
        ("Connector", or_dash(&m.connector)),
        (
            "Wavelength",
            m.wavelength_nm.map_or("-".into(), |w| format!("{w:.3} nm")),
        ),
        ("Compliance", or_dash(&m.revision_compliance)),
        ("Module state", or_dash(&m.module_state)),
        ("Temperature", unit(num(m.temperature_c, 2), "°C")),
        ("Voltage", unit(num(m.voltage_v, 4), "V")),
    ];
    for (name, value) in rows {
        if name == "Module state" && m.module_state.is_none() {
            continue;
        }
        let _ = writeln!(out, "  {name:<14} {value}");
    }
    lanes_table(&mut out, m);
    thresholds_table(&mut out, m);
    alarms_text(&mut out, m);
    let problems: Vec<String> = m.problems.iter().map(|p| p.to_string()).collect();
    let _ = writeln!(out, "  Problems       {}", list_or_none(&problems));
    out
}

fn unit(value: String, unit: &str) -> String {
    if value == "-" {
        value
    } else {
        format!("{value} {unit}")
    }
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join("; ")
    }
}

/// The flags that are on, one line for the module and one per lane.
fn alarms_text(out: &mut String, m: &Module) {
    use std::fmt::Write;
    if m.alarms.is_empty() {
        let _ = writeln!(out, "  Alarms         none");
        return;
    }
    if m.alarms.iter().any(|a| a.latched) {
        // SFF-8636/CMIS: clear on read, so set since the flags were last read.
        let _ = writeln!(
            out,
            "  Alarms (latched: crossed since the module's flags were last read)"
        );
    } else {
        let _ = writeln!(out, "  Alarms");
    }
    let mut lanes: Vec<Option<u8>> = m.alarms.iter().map(|a| a.lane).collect();
    lanes.sort();
    lanes.dedup();
    for lane in lanes {
        let what: Vec<String> = m
            .alarms
            .iter()
            .filter(|a| a.lane == lane)
            .map(|a| match a.level {
                rocewatch_optics::Level::Set => a.measure.name().to_string(),
                level => format!("{} {}", a.measure.name(), level.name()),
            })
            .collect();
        let whose = lane.map_or_else(|| "module".to_string(), |l| format!("lane {l}"));
        let _ = writeln!(out, "    {whose:<12} {}", what.join(", "));
    }
}

fn lanes_table(out: &mut String, m: &Module) {
    use std::fmt::Write;
    if m.lanes.is_empty() {
        let _ = writeln!(out, "  Lanes          -");
        return;
    }
    let rx = if m.rx_power_kind == Some("OMA") {
        "RX OMA"
    } else {
        "RX avg"
    };
    // CMIS only: the data path state of each host lane (page 11h 128-131).
    let dp = m.lanes.iter().any(|l| l.data_path_state.is_some());
    let state = |s: &str| if dp { format!("  {s}") } else { String::new() };
    let _ = writeln!(
        out,
        "  {:>4}  {:>9}  {:>9}  {:>8}  {:>9}  {:>8}{}",
        "Lane",
        "Bias mA",
        "TX mW",
        "TX dBm",
        format!("{rx} mW"),
        "RX dBm",
        state("Data path")
    );
    for lane in &m.lanes {
        let _ = writeln!(
            out,
            "  {:>4}  {:>9}  {:>9}  {:>8}  {:>9}  {:>8}{}",
            lane.lane,
            num(lane.bias_ma, 3),
            num(lane.tx_power_mw, 4),
            dbm(lane.tx_power_mw),
            num(lane.rx_power_mw, 4),
            dbm(lane.rx_power_mw),
            state(lane.data_path_state.as_deref().unwrap_or("-"))
        );
    }
}

fn thresholds_table(out: &mut String, m: &Module) {
    use std::fmt::Write;
    let Some(t) = &m.thresholds else {
        let _ = writeln!(out, "  Thresholds     -");
        return;
    };
    let _ = writeln!(
        out,
        "  {:<16}  {:>10}  {:>10}  {:>10}  {:>10}",
        "Thresholds", "high alarm", "high warn", "low warn", "low alarm"
    );
    let rows: [(&str, Option<Limits>, usize); 5] = [
        ("Temperature °C", t.temperature_c, 2),
        ("Voltage V", t.voltage_v, 4),
        ("Bias mA", t.bias_ma, 3),
        ("TX power mW", t.tx_power_mw, 4),
        ("RX power mW", t.rx_power_mw, 4),
    ];
    for (name, limits, digits) in rows {
        let cells = match limits {
            Some(l) => [l.high_alarm, l.high_warning, l.low_warning, l.low_alarm]
                .map(|v| format!("{v:.digits$}")),
            None => ["-", "-", "-", "-"].map(String::from),
        };
        let _ = writeln!(
            out,
            "  {name:<16}  {:>10}  {:>10}  {:>10}  {:>10}",
            cells[0], cells[1], cells[2], cells[3]
        );
    }
}
