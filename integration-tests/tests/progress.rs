//! Nothing silent on a terminal: `doctor` and `capture` say on standard error what they
//! wait on within a second when it is a terminal (a pseudo-terminal from util-linux's
//! `script`), wipe it before their output, and write no progress byte to a pipe;
//! `congestion` answers at once when the first collection already decides it; `capture`
//! says why it waited (a `tcpdump -D` that does not answer) at the default log level.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

/// util-linux's `script`, which runs a command on a pseudo-terminal (Debian: bsdutils,
/// essential), or `None` after saying what is missing.
fn script() -> Option<&'static std::path::Path> {
    let script = std::path::Path::new("/usr/bin/script");
    if script.exists() {
        Some(script)
    } else {
        missing(
            "util-linux's script (a pseudo-terminal)",
            "apt-get install bsdutils",
        );
        None
    }
}

/// What a command run on a pseudo-terminal wrote there (its standard error: standard
/// output goes to `out`), when the first byte came, and its exit status.
struct OnTerminal {
    bytes: String,
    first_byte_after: Option<Duration>,
    code: Option<i32>,
}

fn on_terminal(
    script: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
    out: &std::path::Path,
) -> OnTerminal {
    let words: Vec<String> = std::iter::once(artifacts().rocewatch.display().to_string())
        .chain(args.iter().map(|a| a.to_string()))
        .map(|w| format!("'{w}'"))
        .collect();
    // Standard output to a file: the terminal carries standard error only.
    let cmd = format!("{} > '{}'", words.join(" "), out.display());
    let started = Instant::now();
    let mut child = Command::new(script)
        .args(["-qec", &cmd, "/dev/null"])
        .envs(env.iter().copied())
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run script");
    let mut pty = child.stdout.take().unwrap();
    let mut bytes = Vec::new();
    let mut first_byte_after = None;
    let mut buf = [0u8; 4096];
    while let Ok(n) = pty.read(&mut buf) {
        if n == 0 {
            break;
        }
        first_byte_after.get_or_insert_with(|| started.elapsed());
        bytes.extend_from_slice(&buf[..n]);
    }
    let status = child.wait().unwrap();
    OnTerminal {
        bytes: String::from_utf8_lossy(&bytes).into_owned(),
        first_byte_after,
        code: status.code(),
    }
}

#[test]
fn doctor_says_what_it_waits_on_within_a_second_on_a_terminal() {
    let Some(script) = script() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("stdout");
    let root = fixture("mlx5-roce-dual-port");
    let args = [
        "doctor",
        "--sysfs-root",
        root.to_str().unwrap(),
        "--window",
        "3s",
    ];
    let t = on_terminal(script, &args, &[], &out);
    let report = std::fs::read_to_string(&out).unwrap();
    assert_eq!(t.code, Some(1), "{report}\n{:?}", t.bytes);
    let first = t.first_byte_after.expect("nothing on the terminal");
    assert!(
        first < Duration::from_secs(1),
        "first byte after {first:?}: {:?}",
        t.bytes
    );
    // What it waits on, and how long remains, counting down.
    assert!(
        t.bytes
            .contains("doctor: reading counters over a 3s window (3s left)")
            && t.bytes
                .contains("doctor: reading counters over a 3s window (1s left)"),
        "{:?}",
        t.bytes
    );
    // Wiped before the report: the terminal's last bytes clear the line.
    assert!(t.bytes.ends_with("\r\x1b[2K"), "{:?}", t.bytes);
    // The report is as on a pipe, without a byte of the progress line.
    assert!(report.contains("PASS  devices: mlx5_0"), "{report}");
    assert!(
        !report.contains('\r') && !report.contains('\x1b'),
        "{report:?}"
    );

    // On a pipe: not one byte of it.
    let o = rocewatch(&args, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        !err.contains('\r') && !err.contains('\x1b') && !err.contains("doctor: reading"),
        "{err:?}"
    );
    assert_eq!(stdout(&o), report);
}

#[test]
fn congestion_answers_at_once_without_per_priority_counters() {
    // The fixture's sysfs counters are read, but no driver statistics per priority: the
    // first collection decides it, however long the window.
    let root = fixture("mlx5-roce-dual-port");
    // Built (or found) before the clock starts.
    let _ = artifacts();
    for json in [false, true] {
        let mut args = vec![
            "congestion",
            "--sysfs-root",
            root.to_str().unwrap(),
            "--window",
            "30s",
        ];
        if json {
            args.push("--json");
        }
        let started = Instant::now();
        let o = rocewatch(&args, &[]);
        let took = started.elapsed();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(took < Duration::from_secs(5), "took {took:?}");
        let text = stdout(&o);
        if json {
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["ports"], serde_json::json!([]), "{v}");
            assert!(v["window_s"].as_f64().unwrap() < 5.0, "{v}");
        } else {
            assert!(
                text.contains("\nno per-priority counters (bytes, pauses, pause time: the NIC's driver statistics through counters-ethtool): no congestion state\n"),
                "{text}"
            );
            assert!(text.contains("without waiting the 30s window"), "{text}");
        }
    }
    // Nothing collected at all: said at once, status 2.
    let root = fixture("no-devices");
    let started = Instant::now();
    let o = rocewatch(
        &[
            "congestion",
            "--sysfs-root",
            root.to_str().unwrap(),
            "--window",
            "30s",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        stderr(&o).contains("rocewatch congestion: nothing could be collected"),
        "{}",
        stderr(&o)
    );
}

/// A stand-in for tcpdump: `-D` hangs (a driver slow to list its devices), a capture says
/// what tcpdump says on standard error and ends on SIGINT with its counts.
fn fake_tcpdump(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let tool = dir.join("tcpdump");
    std::fs::write(
        &tool,
        "#!/bin/sh\n\
         if [ \"$1\" = -D ]; then exec sleep 60; fi\n\
         echo \"tcpdump: listening on $2, link-type EN10MB (Ethernet), snapshot length 262144 bytes\" >&2\n\
         trap 'echo \"0 packets captured\" >&2; exit 0' INT\n\
         while :; do sleep 0.1; done\n",
    )
    .unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `capture` into a file: the wait for `tcpdump -D` explained at the default log level
/// (it was silent for 10 s, then captured on the netdev without a word), tcpdump's own
/// lines passed on, and on a terminal the capture's line counting down; on a pipe not a
/// byte of that line.
#[test]
fn capture_says_why_it_waited_and_what_it_captures() {
    let Some(script) = script() else { return };
    let dir = tempfile::tempdir().unwrap();
    fake_tcpdump(dir.path());
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let pcap = dir.path().join("x.pcap");
    let root = fixture("mlx5-roce-dual-port");
    let args = [
        "capture",
        "--sysfs-root",
        root.to_str().unwrap(),
        "--duration",
        "2s",
        "-w",
        pcap.to_str().unwrap(),
    ];
    let env = [
        ("PATH", path.as_str()),
        ("STATE_DIRECTORY", dir.path().to_str().unwrap()),
    ];
    let o = rocewatch(&args, &env);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("rocewatch: tcpdump -D did not list the interfaces within 10s (given up): capturing on ens1f0np0, without mlx5_0's RDMA sniffer interface\n"),
        "{err}"
    );
    assert!(
        err.contains("tcpdump: listening on ens1f0np0") && err.contains("0 packets captured"),
        "{err}"
    );
    assert!(
        !err.contains('\r') && !err.contains('\x1b') && !err.contains("capture: capturing"),
        "{err:?}"
    );

    // On a terminal (the fake tcpdump found through PATH as the shell passes it on).
    let out = dir.path().join("stdout");
    let t = on_terminal(script, &args, &env, &out);
    assert_eq!(t.code, Some(0), "{:?}", t.bytes);
    let first = t.first_byte_after.expect("nothing on the terminal");
    assert!(first < Duration::from_secs(1), "first byte after {first:?}");
    assert!(
        t.bytes
            .contains("capture: asking tcpdump -D for mlx5_0's sniffer interface (at most 10s)"),
        "{:?}",
        t.bytes
    );
    let capturing = format!(
        "capture: capturing RoCE v2 on ens1f0np0 into {} (2s left)",
        pcap.display()
    );
    assert!(t.bytes.contains(&capturing), "{:?}", t.bytes);
    // tcpdump's line on a line of its own, the progress line wiped before it.
    assert!(
        t.bytes.contains("\r\x1b[2Ktcpdump: listening on ens1f0np0"),
        "{:?}",
        t.bytes
    );
    assert!(t.bytes.ends_with("\r\x1b[2K"), "{:?}", t.bytes);
}

/// A plugin that hangs (the fault plugin, given 2 s a call): the timeout that made the
/// command wait is said on standard error at the default log level, when it happens.
#[test]
fn a_plugin_timeout_is_said_at_the_default_level() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("rocewatch.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsysfs_root = {:?}\n\n[[plugins.external]]\npath = {:?}\ntimeout = \"2s\"\noptions = {{ mode = \"hang\" }}\n",
            fixture("mlx5-roce-dual-port"),
            artifacts().fault_so
        ),
    )
    .unwrap();
    let o = rocewatch(
        &[
            "congestion",
            "-c",
            cfg.to_str().unwrap(),
            "--window",
            "100ms",
        ],
        &[],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("WARN") && err.contains("timed out after 2s"),
        "{err}\n{}",
        stdout(&o)
    );
}

/// A log line said while the progress line is drawn (a plugin that hangs past its
/// timeout during doctor's counter window) starts on a wiped line: the progress line's
/// text is not left in front of it on the terminal.
#[test]
fn a_log_line_wipes_the_progress_line_first() {
    let Some(script) = script() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (cfg, out) = (dir.path().join("rocewatch.toml"), dir.path().join("stdout"));
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsysfs_root = {:?}\n\n[[plugins.external]]\npath = {:?}\ntimeout = \"1s\"\noptions = {{ mode = \"hang\" }}\n",
            fixture("mlx5-roce-dual-port"),
            artifacts().fault_so
        ),
    )
    .unwrap();
    let t = on_terminal(
        script,
        &["doctor", "-c", cfg.to_str().unwrap(), "--window", "3s"],
        &[],
        &out,
    );
    let at = t
        .bytes
        .find("timed out after 1s")
        .unwrap_or_else(|| panic!("no timeout said: {:?}", t.bytes));
    let line_start = t.bytes[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = &t.bytes[line_start..at];
    let shown = line.rsplit("\x1b[2K").next().unwrap_or(line);
    assert!(
        !shown.contains("doctor: "),
        "the log line is drawn after the progress line's text: {line:?}"
    );
}
