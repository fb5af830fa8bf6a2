//! collectd, for real: Debian's collectd 5.12 receives our network packets (plain and
//! signed) and runs `rocewatch collectd-exec` as an Exec plugin, writing CSV that the
//! tests read back. A wrong password must be rejected by collectd.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;

pub(crate) struct Collectd {
    _proc: Spawned,
    dir: tempfile::TempDir,
}

impl Drop for Collectd {
    /// Its log file is printed when the test fails (its standard error is, by [`Spawned`]).
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- collectd's log:\n{}--- end", self.log());
        }
    }
}

impl Collectd {
    pub(crate) fn csv(&self) -> PathBuf {
        self.dir.path().join("csv")
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("collectd.log")).unwrap_or_default()
    }
}

pub(crate) fn collectd_bin() -> Option<PathBuf> {
    require(
        "collectd",
        receiver("ROCEWATCH_COLLECTD", "/usr/sbin/collectd", "collectd"),
    )
}

/// Start collectd with csv + logfile and the extra plugin configuration that `extra`
/// writes given collectd's own directory.
pub(crate) fn start(bin: &Path, hostname: &str, extra: impl FnOnce(&Path) -> String) -> Collectd {
    // collectd's csv plugin refuses paths with a component starting with a dot (`.tmpXYZ`).
    let dir = tempfile::Builder::new()
        .prefix("rocewatch-collectd-")
        .tempdir()
        .unwrap();
    // The Exec plugin runs our binary as `nobody`, which must read the config it is given.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let extra = extra(dir.path());
    let d = dir.path().display();
    let types = root().join("configs/collectd/types.db");
    let conf = format!(
        "Hostname \"{hostname}\"\nFQDNLookup false\nBaseDir \"{d}\"\nPIDFile \"{d}/collectd.pid\"\nPluginDir \"/usr/lib/collectd\"\n\
         TypesDB \"/usr/share/collectd/types.db\" \"{}\"\nAutoLoadPlugin false\nInterval 1\n\
         LoadPlugin logfile\n<Plugin logfile>\n  LogLevel info\n  File \"{d}/collectd.log\"\n  Timestamp true\n</Plugin>\n\
         LoadPlugin csv\n<Plugin csv>\n  DataDir \"{d}/csv\"\n  StoreRates false\n</Plugin>\n{extra}",
        types.display()
    );
    let path = dir.path().join("collectd.conf");
    std::fs::write(&path, conf).unwrap();
    let t = Command::new(bin)
        .args(["-t", "-C"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        t.status.success(),
        "collectd -t: {}{}",
        String::from_utf8_lossy(&t.stdout),
        String::from_utf8_lossy(&t.stderr)
    );
    let proc = Spawned::start(
        "collectd",
        Command::new(bin).args(["-f", "-C"]).arg(&path),
        None,
    );
    let c = Collectd { _proc: proc, dir };
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && !c.log().contains("Initialization complete") {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        c.log().contains("Initialization complete"),
        "collectd did not start: {}",
        c.log()
    );
    c
}

/// collectd with a network listener on a UDP port (`listen` writes its configuration for
/// a port): collectd cannot listen on port 0 and say where, so the port is one that was
/// free a moment ago, and another is tried when it was taken in between.
pub(crate) fn start_listening(
    bin: &Path,
    hostname: &str,
    listen: impl Fn(&Path, u16) -> String,
) -> (Collectd, u16) {
    for _ in 0..5 {
        let port = free_udp_port();
        let c = start(bin, hostname, |dir| listen(dir, port));
        if !c.log().contains("sockent_server_listen failed") {
            return (c, port);
        }
        eprintln!(
            "collectd could not bind UDP port {port}; trying another:\n{}",
            c.log()
        );
    }
    panic!("collectd could not bind a UDP port in five tries");
}

/// The last value written to the CSV file of `host/plugin_dir/prefix-DATE`.
fn csv_value(c: &Collectd, host: &str, plugin_dir: &str, prefix: &str) -> Option<f64> {
    let dir = c.csv().join(host).join(plugin_dir);
    let file = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok())
        .find(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_prefix(prefix).is_some_and(|rest| {
                rest.starts_with('-')
                    && rest[1..].chars().next().is_some_and(|c| c.is_ascii_digit())
            })
        })?;
    let text = std::fs::read_to_string(file.path()).ok()?;
    let last = text.lines().rfind(|l| !l.starts_with("epoch"))?;
    last.split(',').nth(1)?.trim().parse().ok()
}

fn wait_value(c: &Collectd, host: &str, plugin_dir: &str, prefix: &str) -> Option<f64> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Some(v) = csv_value(c, host, plugin_dir, prefix) {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    None
}

fn run_agent(port: u16, host: &str, security: &str) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("rw.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsysfs_root = {:?}\ninterval = \"500ms\"\n\n[exporters.collectd]\nserver = \"127.0.0.1:{port}\"\nhost_name = \"{host}\"\n{security}",
            fixture("mlx5-roce-dual-port")
        ),
    )
    .unwrap();
    let o = rocewatch(
        &["run", "--config", cfg.to_str().unwrap(), "--duration", "3s"],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
}

fn check_values(c: &Collectd, host: &str) {
    let io = wait_value(c, host, "rdma-mlx5_0-1", "rdma_port_io-transmit")
        .unwrap_or_else(|| panic!("no CSV for {host}: {}", c.log()));
    assert_eq!(
        io,
        4.0 * (mlx5_counter("mlx5_0", "counters/port_xmit_data") as f64),
        "DERIVE counter, in bytes"
    );
    let cnp = wait_value(c, host, "rdma-mlx5_1-1", "rdma_port_cnp_sent").unwrap();
    assert_eq!(
        cnp,
        (mlx5_counter("mlx5_1", "hw_counters/np_cnp_sent") as f64)
    );
    let rate = wait_value(c, host, "rdma-mlx5_1-1", "rdma_port_rate").unwrap();
    assert_eq!(rate, 100e9, "GAUGE");
    assert!(
        wait_value(
            c,
            host,
            "rocewatch-counters-sysfs",
            "rocewatch_samples_emitted"
        )
        .is_some_and(|v| v > 0.0),
        "self-metrics arrive too"
    );
}

#[test]
fn network_protocol_plain() {
    let Some(bin) = collectd_bin() else { return };
    let (c, port) = start_listening(&bin, "collectd-plain", |_, port| {
        format!(
            "LoadPlugin network\n<Plugin network>\n  Listen \"127.0.0.1\" \"{port}\"\n</Plugin>\n"
        )
    });
    run_agent(port, "rw-plain", "");
    check_values(&c, "rw-plain");
}

fn signed_server(bin: &Path) -> (Collectd, u16) {
    start_listening(bin, "collectd-signed", |dir, port| {
        let auth = dir.join("auth");
        std::fs::write(&auth, "rocewatch: right-password\n").unwrap();
        format!(
            "LoadPlugin network\n<Plugin network>\n  <Listen \"127.0.0.1\" \"{port}\">\n    SecurityLevel Sign\n    AuthFile \"{}\"\n  </Listen>\n</Plugin>\n",
            auth.display()
        )
    })
}

#[test]
fn network_protocol_signed() {
    let Some(bin) = collectd_bin() else { return };
    let (c, port) = signed_server(&bin);
    run_agent(
        port,
        "rw-signed",
        "security_level = \"sign\"\nusername = \"rocewatch\"\npassword = \"right-password\"\n",
    );
    check_values(&c, "rw-signed");
}

#[test]
fn network_protocol_wrong_password_is_rejected_by_collectd() {
    let Some(bin) = collectd_bin() else { return };
    let (c, port) = signed_server(&bin);
    run_agent(
        port,
        "rw-wrong",
        "security_level = \"sign\"\nusername = \"rocewatch\"\npassword = \"wrong-password\"\n",
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && !c.log().contains("Hash mismatch") {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        c.log().contains("Hash mismatch"),
        "collectd must reject the signature: {}",
        c.log()
    );
    assert!(
        !c.csv().join("rw-wrong").exists(),
        "no value may be accepted"
    );
}

#[test]
fn signing_without_credentials_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("c.toml");
    std::fs::write(&f, "[exporters.collectd]\nserver = \"127.0.0.1:25826\"\nsecurity_level = \"sign\"\nusername = \"u\"\n").unwrap();
    let o = rocewatch(&["config", "check", f.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("exporters.collectd.password"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn exec_plugin() {
    let Some(bin) = collectd_bin() else { return };
    let rw = artifacts().rocewatch.display().to_string();
    let root = fixture("mlx5-roce-dual-port").display().to_string();
    let c = start(&bin, "exec-host", |_| {
        format!("LoadPlugin exec\n<Plugin exec>\n  Exec \"nobody:nogroup\" \"{rw}\" \"collectd-exec\" \"--sysfs-root\" \"{root}\"\n</Plugin>\n")
    });
    // The host name and interval come from collectd (COLLECTD_HOSTNAME, COLLECTD_INTERVAL).
    check_values(&c, "exec-host");
    assert!(
        !c.log().contains("exec plugin: Unable to parse"),
        "{}",
        c.log()
    );
}

#[test]
fn collect_once_collectd_format_is_putval() {
    let o = rocewatch(
        &[
            "collect",
            "--once",
            "--format",
            "collectd",
            "--sysfs-root",
            fixture("mlx5-roce-dual-port").to_str().unwrap(),
        ],
        &[("ROCEWATCH_AGENT__HOST_NAME", "h1")],
    );
    assert!(o.status.success());
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.contains("/rdma-mlx5_0-1/rdma_port_io-transmit\""))
        .unwrap();
    let want = 4.0 * (mlx5_counter("mlx5_0", "counters/port_xmit_data") as f64);
    assert!(
        line.starts_with("PUTVAL \"h1/rdma-mlx5_0-1/rdma_port_io-transmit\" interval=10.000 "),
        "{line}"
    );
    assert!(line.ends_with(&format!(":{want}")), "{line}");
}
