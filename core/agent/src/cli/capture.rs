//! `rocewatch capture`: tcpdump on the RDMA device's netdev (or its RDMA sniffer
//! interface), optionally with rx-vlan-offload off for the capture; or the RoCE v2
//! summary of a capture (`--summary`, `--read FILE`).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use rocewatch_plugin_api::{Inventory, PluginKind};

use super::output::print_json;
use super::progress::{Notes, Progress};
use super::source::SourceArgs;
use crate::app::App;
use rocewatch_doctor::capture::{restore_leftovers, OffloadGuard};
use rocewatch_pcap::{open_capture, summarize};
use rocewatch_runtime::util::duration::RUN_FOR;

/// `rocewatch capture`'s arguments.
#[derive(Debug, Args)]
pub struct CaptureArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// An RDMA device (mlx5_0) or a netdev (ens1f0np0).
    #[arg(conflicts_with = "read")]
    pub target: Option<String>,
    /// Stop after this long (default: until Ctrl-C, or --count).
    #[arg(long, value_parser = RUN_FOR.flag(), value_name = "DUR")]
    pub duration: Option<Duration>,
    /// Stop after this many packets.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Write the packets to this pcap file (as tcpdump -w).
    #[arg(short = 'w', long = "write", value_name = "FILE")]
    pub write: Option<PathBuf>,
    /// Turn rx-vlan-offload off for the capture; the value found is put back afterwards.
    #[arg(long)]
    pub offload_off: bool,
    /// Decode the captured RoCE v2 packets and print the summary.
    #[arg(long)]
    pub summary: bool,
    /// Sum up this pcap file instead of capturing (a regular file, read as it streams).
    #[arg(long, value_name = "FILE")]
    pub read: Option<PathBuf>,
    /// The summary as JSON: {"frames","roce","not_roce","not_roce_why","other",
    /// "by_opcode","by_dest_qp","cnp",...,"truncated"}.
    #[arg(long)]
    pub json: bool,
}

/// Sum up `file` as it is read (a regular file only: a FIFO or a device is refused), one
/// record at a time: memory does not grow with the file.
fn print_summary(file: &Path, json: bool) -> Result<()> {
    let s = open_capture(file)
        .and_then(summarize)
        .with_context(|| file.display().to_string())?;
    if json {
        print_json(&serde_json::to_value(&s)?)?;
    } else {
        print!("{}", s.text());
    }
    Ok(())
}

/// The netdev to capture on, and the RDMA device it belongs to (when known).
fn resolve(inv: &Inventory, root: &Path, target: Option<&str>) -> Result<(String, Option<String>)> {
    match target {
        Some(t) => {
            if let Some(d) = inv.devices.iter().find(|d| d.name == t) {
                let port = d
                    .ports
                    .iter()
                    .filter(|p| p.netdev.is_some())
                    .max_by_key(|p| p.is_up())
                    .with_context(|| format!("{t} has no netdev (its RDMA traffic does not pass a network interface tcpdump can open)"))?;
                return Ok((port.netdev.clone().expect("filtered"), Some(t.into())));
            }
            let device = inv
                .devices
                .iter()
                .find(|d| d.ports.iter().any(|p| p.netdev.as_deref() == Some(t)))
                .map(|d| d.name.clone());
            if device.is_some() || root.join("class/net").join(t).exists() {
                return Ok((t.into(), device));
            }
            bail!("no RDMA device or netdev named {t:?} (rocewatch discover lists them)")
        }
        None => inv
            .devices
            .iter()
            .flat_map(|d| d.ports.iter().map(move |p| (d, p)))
            .find(|(_, p)| {
                p.link_layer.as_deref() == Some("Ethernet") && p.is_up() && p.netdev.is_some()
            })
            .map(|(d, p)| (p.netdev.clone().expect("checked"), Some(d.name.clone())))
            .context("no RoCE port whose netdev is up: name a device or netdev"),
    }
}

/// How long `tcpdump -D` may take to list the interfaces.
const LISTING_BOUND: Duration = Duration::from_secs(10);

/// `tcpdump -D` within `timeout`, as a process group killed at the bound: the RDMA
/// sniffer interface libpcap offers for `device` (mlx5: it lists `mlx5_0`), when it does;
/// none when tcpdump cannot run or fails (then there is no sniffer to offer); the
/// timeout when it hangs.
fn sniffer_with(
    tcpdump: &Path,
    device: &str,
    timeout: Duration,
) -> Result<Option<String>, rocewatch_process::RunError> {
    let mut cmd = std::process::Command::new(tcpdump);
    cmd.arg("-D");
    let out = match rocewatch_process::run_bounded(cmd, timeout) {
        Ok(out) => out,
        Err(rocewatch_process::RunError::Spawn(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(out.stdout.lines().find_map(|l| {
        let name = l.split_once('.')?.1.split_whitespace().next()?;
        (name == device).then(|| name.to_string())
    }))
}

pub async fn run(a: CaptureArgs) -> Result<i32> {
    let summary = a.summary || a.json;
    if let Some(file) = &a.read {
        print_summary(file, a.json)?;
        return Ok(0);
    }
    let mut signals = EndSignals::catch()?;
    // On a terminal, what it waits on (the capture itself only while no packet is
    // printed there).
    let progress = Progress::start("capture");
    let state = rocewatch_runtime::audit::state_dir();
    let (inv, root) = discover_and_restore(&a, &state, &progress).await?;
    let (netdev, device) = resolve(&inv, &root, a.target.as_deref())?;
    let iface = capture_interface(device.as_deref(), &netdev, &progress);
    let mut guard = offload_off(&a, &netdev, &state, &progress)?;
    let temp = tempfile::Builder::new()
        .suffix(".pcap")
        .tempfile()
        .context("a temporary capture file")?;
    let file: Option<PathBuf> = match (&a.write, summary) {
        (Some(w), _) => Some(w.clone()),
        (None, true) => Some(temp.path().to_path_buf()),
        (None, false) => None,
    };
    let mut cmd = tcpdump_command(&iface, file.as_deref(), a.count);
    // Packets printed on the terminal are the progress; into a file, the line says it.
    let progress = (file.is_some() || !std::io::stdout().is_terminal()).then(|| {
        progress.waiting(
            capturing(&iface, &a),
            a.duration.map(|d| Instant::now() + d),
        );
        progress
    });
    // tcpdump's own lines ("listening on", the counts) go above the line.
    let notes = progress.as_ref().map(Progress::notes);
    if notes.is_some() {
        cmd.stderr(std::process::Stdio::piped());
    }
    let mut child = spawn_tcpdump(cmd)?;
    let forwarded = notes.and_then(|n| Some(forward_lines(child.stderr.take()?, n)));
    let (status, signalled) = wait_capture(&mut child, &mut signals, a.duration).await?;
    if let Some(f) = forwarded {
        // tcpdump has ended: its standard error is at its end, or soon.
        let _ = tokio::time::timeout(Duration::from_secs(2), f).await;
    }
    drop(progress);
    restore_offload(guard.as_mut());
    use std::os::unix::process::ExitStatusExt;
    let reader_gone = status.signal() == Some(libc::SIGPIPE);
    // A capture ended by Ctrl-C (tcpdump gets it too) is a capture like any other.
    if !status.success() && !reader_gone && signalled.is_none() {
        bail!("tcpdump on {iface}: {status}");
    }
    if summary && !reader_gone {
        print_summary(file.as_deref().expect("a file with --summary"), a.json)?;
    }
    Ok(signalled.map_or(0, |sig| 128 + sig))
}

/// The signals that end a capture.
struct EndSignals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl EndSignals {
    /// The signals that end a capture are caught before anything changes: whichever comes,
    /// the offload is put back. A closed standard output must not kill us with it off.
    fn catch() -> Result<EndSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        let int = signal(SignalKind::interrupt())?;
        let term = signal(SignalKind::terminate())?;
        let hup = signal(SignalKind::hangup())?;
        // SAFETY: setting a signal disposition; EPIPE is handled where it is written.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
        Ok(EndSignals { int, term, hup })
    }
}

/// The inventory and sysfs root of the configuration, after the restore records an
/// earlier capture left are applied.
async fn discover_and_restore(
    a: &CaptureArgs,
    state: &Path,
    progress: &Progress,
) -> Result<(Inventory, PathBuf)> {
    let cfg = a.source.load()?;
    progress.waiting("discovering the RDMA devices", None);
    let root = cfg.agent.sysfs_root.clone();
    let app = App::start(cfg, Some(&[PluginKind::Discovery])).await;
    let inv = app.discover().await.unwrap_or_default();
    app.stop().await;
    // A record is acted on only for a netdev capture could have been run on.
    let known = |nd: &str| {
        inv.devices
            .iter()
            .any(|d| d.ports.iter().any(|p| p.netdev.as_deref() == Some(nd)))
            || root.join("class/net").join(nd).exists()
    };
    for r in restore_leftovers(state, &known) {
        progress.note(&match r {
            Ok(said) => format!("rocewatch: {said}"),
            Err(e) => format!(
                "rocewatch: a restore record left by an earlier capture could not be applied: {e}"
            ),
        });
    }
    Ok((inv, root))
}

/// The device's RDMA sniffer interface where libpcap offers one, else the netdev.
fn capture_interface(device: Option<&str>, netdev: &str, progress: &Progress) -> String {
    let Some(device) = device else {
        return netdev.to_string();
    };
    progress.waiting(
        format!(
            "asking tcpdump -D for {device}'s sniffer interface (at most {})",
            humantime::format_duration(LISTING_BOUND)
        ),
        None,
    );
    match sniffer_with(Path::new("tcpdump"), device, LISTING_BOUND) {
        Ok(Some(s)) => {
            progress.note(&format!("rocewatch: capturing on {s}, the RDMA sniffer interface of the device (offloaded RDMA traffic never reaches {netdev})"));
            s
        }
        Ok(None) => netdev.to_string(),
        Err(_) => {
            // Said at once: the capture started 10 s late, and on the netdev.
            progress.note(&format!(
                "rocewatch: tcpdump -D did not list the interfaces within {} (given up): capturing on {netdev}, without {device}'s RDMA sniffer interface",
                humantime::format_duration(LISTING_BOUND)
            ));
            netdev.to_string()
        }
    }
}

/// With `--offload-off`, rx-vlan-offload turned off on `netdev` (a guard that puts it
/// back), saying so.
fn offload_off(
    a: &CaptureArgs,
    netdev: &str,
    state: &Path,
    progress: &Progress,
) -> Result<Option<OffloadGuard>> {
    if !a.offload_off {
        return Ok(None);
    }
    let g = OffloadGuard::turn_off(netdev, state).map_err(anyhow::Error::msg)?;
    progress.note(&match &g {
        Some(g) => format!(
            "rocewatch: rx-vlan-offload off on {} for the capture (it is put back after)",
            g.netdev()
        ),
        None => format!("rocewatch: rx-vlan-offload is already off on {netdev}"),
    });
    Ok(g)
}

/// tcpdump on `iface` for RoCE v2, into `file` or printing packets.
fn tcpdump_command(
    iface: &str,
    file: Option<&Path>,
    count: Option<u64>,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("tcpdump");
    // Each packet handed over as it arrives: without it libpcap's ring hands packets over
    // a block at a time (up to a second late), and a capture ended by --duration lost the
    // packets of its last block (a 4 s lab capture: 194 received by the filter, 49
    // captured). Immediate mode's ring holds a frame per packet, each as large as the
    // interface's MTU allows: 8 MiB (`-B`, KiB) keeps a burst of ~900 at MTU 9000.
    cmd.args([
        "-i",
        iface,
        "-nn",
        "-s",
        "0",
        "--immediate-mode",
        "-B",
        "8192",
    ]);
    if let Some(f) = file {
        // Writing a file, tcpdump dissects nothing: it may keep its user (dropping
        // privileges would clear the parent-death signal below, and a SIGKILLed
        // rocewatch would leave it capturing). Printing packets, it drops to its own
        // user as usual (a dissector bug then runs unprivileged), and a SIGKILL of
        // rocewatch leaves it to its --count or to whoever stops it.
        cmd.args(["-Z", "root", "-U", "-w"]).arg(f);
    } else {
        cmd.arg("-l");
    }
    if let Some(n) = count {
        cmd.args(["-c", &n.to_string()]);
    }
    cmd.args(["udp", "port", &rocewatch_pcap::ROCE_PORT.to_string()]);
    // tcpdump goes when we go, however we go (SIGKILL included).
    cmd.kill_on_drop(true);
    // SAFETY: prctl in the child before exec, async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGINT);
            Ok(())
        });
    }
    cmd
}

/// What the capture waits on: `capturing RoCE v2 on ens1f0np0 into x.pcap until 100
/// packets`.
fn capturing(iface: &str, a: &CaptureArgs) -> String {
    let into = a
        .write
        .as_ref()
        .map_or(String::new(), |w| format!(" into {}", w.display()));
    let until = match (a.count, a.duration) {
        (Some(n), _) => format!(" until {n} packets"),
        (None, Some(_)) => String::new(),
        (None, None) => " until Ctrl-C".to_string(),
    };
    format!("capturing RoCE v2 on {iface}{into}{until}")
}

/// Each line of a child's standard error said above the progress line, until its end.
fn forward_lines(err: tokio::process::ChildStderr, notes: Notes) -> tokio::task::JoinHandle<()> {
    use tokio::io::AsyncBufReadExt;
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(err).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            notes.say(&line);
        }
    })
}

fn spawn_tcpdump(mut cmd: tokio::process::Command) -> Result<tokio::process::Child> {
    match cmd.spawn() {
        Ok(c) => Ok(c),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("tcpdump not found: install it (apt-get install tcpdump)")
        }
        Err(e) => bail!("tcpdump: {e}"),
    }
}

/// Until tcpdump ends, a signal comes or `duration` passes; then tcpdump is stopped.
/// Returns how tcpdump ended and the signal that ended the capture, if one did.
async fn wait_capture(
    child: &mut tokio::process::Child,
    signals: &mut EndSignals,
    duration: Option<Duration>,
) -> Result<(std::process::ExitStatus, Option<i32>)> {
    let forever = Duration::from_secs(u64::MAX / 4);
    // 128 + the signal that ended the capture, as a shell reports it.
    let mut signalled: Option<i32> = None;
    let status = tokio::select! {
        biased;
        _ = signals.int.recv() => { signalled = Some(libc::SIGINT); None }
        _ = signals.term.recv() => { signalled = Some(libc::SIGTERM); None }
        _ = signals.hup.recv() => { signalled = Some(libc::SIGHUP); None }
        s = child.wait() => Some(s?),
        _ = tokio::time::sleep(duration.unwrap_or(forever)) => None,
    };
    let status = match status {
        Some(s) => s,
        None => {
            // tcpdump flushes its file and prints its counts on SIGINT.
            if let Some(pid) = child.id() {
                // SAFETY: kill only sends a signal to our child.
                unsafe {
                    libc::kill(pid as i32, libc::SIGINT);
                }
            }
            match tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
                Ok(s) => s?,
                Err(_) => {
                    let _ = child.kill().await;
                    child.wait().await?
                }
            }
        }
    };
    Ok((status, signalled))
}

/// The offload put back (or why not), then the default SIGPIPE again.
fn restore_offload(guard: Option<&mut OffloadGuard>) {
    if let Some(g) = guard {
        match g.restore() {
            Ok(()) => eprintln!("rocewatch: rx-vlan-offload put back on {}", g.netdev()),
            Err(e) => eprintln!("rocewatch: {e}; the restore record stays for the next start"),
        }
    }
    // The offload is back: a closed standard output may end us quietly again.
    // SAFETY: setting a signal disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tcpdump -D` that hangs (a wedged driver as libpcap lists the devices; here a
    /// wrapper whose child hangs) is given up at the bound, its child killed with it.
    #[test]
    fn a_hanging_tcpdump_listing_is_given_up_at_the_bound() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("child.pid");
        let tool = dir.path().join("tcpdump");
        std::fs::write(
            &tool,
            format!(
                "#!/bin/sh\nsh -c 'echo $$ > {}; exec sleep 20'\necho '1.mlx5_0 (RDMA sniffer)'\n",
                pidfile.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let started = std::time::Instant::now();
        let got = sniffer_with(&tool, "mlx5_0", Duration::from_secs(1));
        let took = started.elapsed();
        assert!(
            matches!(got, Err(rocewatch_process::RunError::Timeout { .. })),
            "{got:?}"
        );
        assert!(took < Duration::from_secs(3), "{took:?}");
        let pid = std::fs::read_to_string(&pidfile).unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(2);
        let dead = loop {
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()));
            let dead = stat.as_deref().map_or(true, |l| {
                l.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with(['Z', 'X']))
            });
            if dead || std::time::Instant::now() >= until {
                break dead;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(dead, "tcpdump's child {} lives on", pid.trim());
    }

    /// A capture ended by a signal keeps every packet the filter received: a burst on
    /// loopback right before the end is in the file (without `--immediate-mode` libpcap
    /// held it in its ring's unfinished block and tcpdump ended without it). Needs root and
    /// tcpdump (CI has both).
    #[tokio::test]
    async fn packets_just_before_the_end_are_in_the_file() {
        if unsafe { libc::geteuid() } != 0 || which_tcpdump().is_none() {
            panic!("this test captures on loopback: it needs root and tcpdump (CI has both; scripts/install-test-deps.sh installs tcpdump)");
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.pcap");
        let mut cmd = tcpdump_command("lo", Some(&file), None);
        cmd.stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        // Listening once it says so on standard error.
        let mut err = tokio::io::BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        use tokio::io::AsyncBufReadExt as _;
        tokio::time::timeout(Duration::from_secs(10), err.read_line(&mut line))
            .await
            .expect("tcpdump did not say it listens")
            .unwrap();
        assert!(line.contains("listening on lo"), "{line}");
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        // Loopback's MTU is 64 KiB: a frame of the ring each, so 8 MiB holds 128; 20
        // datagrams are 40 frames.
        for _ in 0..20 {
            sock.send_to(&[0u8; 64], ("127.0.0.1", rocewatch_pcap::ROCE_PORT))
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGTERM) };
        child.wait().await.unwrap();
        let mut rest = String::new();
        use tokio::io::AsyncReadExt as _;
        let _ = err.read_to_string(&mut rest).await;
        let bytes = std::fs::read(&file).unwrap();
        // pcap: a 24-byte file header, then per packet a 16-byte record header and the
        // captured bytes (incl_len at offset 8 of the record header).
        let (mut at, mut packets) = (24usize, 0);
        while at + 16 <= bytes.len() {
            let incl = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
            at += 16 + incl;
            packets += 1;
        }
        // Each datagram is seen twice on loopback (out and in).
        assert!(
            packets >= 20,
            "{packets} packets in the file of 20 sent; tcpdump said: {rest}"
        );
    }

    fn which_tcpdump() -> Option<std::path::PathBuf> {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("tcpdump"))
                .find(|f| f.exists())
        })
    }
}
