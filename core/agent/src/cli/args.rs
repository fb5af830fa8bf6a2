//! The top of the command line's grammar (clap): `Cli` (with the long version), and the
//! `Command` enum with each command's help text. Each command's own arguments are at the
//! top of the file of its name beside this one, with what it does; the options several
//! commands share are in `source.rs`.

use std::path::PathBuf;
use std::sync::OnceLock;

use clap::{Parser, Subcommand};

use super::bandwidth::BandwidthCmdArgs;
use super::capture::CaptureArgs;
use super::collect::CollectArgs;
use super::collectd::CollectdExecArgs;
use super::config::ConfigCommand;
use super::congestion::CongestionArgs;
use super::demo::DemoArgs;
use super::discover::DiscoverArgs;
use super::doctor::DoctorArgs;
use super::env::EnvArgs;
use super::fleet::FleetCommand;
use super::health::HealthArgs;
use super::optics::OpticsArgs;
use super::plugins::PluginsArgs;
use super::preflight::PreflightArgs;
use super::probe::ProbeCmdArgs;
use super::qos::QosCommand;
use super::quarantine::QuarantineCommand;
use super::rules::RulesArgs;
use super::run::RunArgs;
use super::top::TopArgs;
use crate::config::LogFormat;

/// rocewatch: keep RDMA/RoCEv2 networks healthy.
///
/// Discovers RDMA devices and ports, reads their counters (sysfs, RDMA netlink, ethtool),
/// exports them (OTLP, Prometheus, collectd), evaluates threshold rules and runs
/// remediation safely, and probes peers over verbs. Start with `rocewatch demo` (no RDMA
/// hardware needed), then `rocewatch discover` and `rocewatch collect --once` on a real
/// host.
#[derive(Debug, Parser)]
#[command(
    name = "rocewatch",
    version = long_version(),
    propagate_version = true
)]
pub struct Cli {
    /// Log format (logs go to standard error).
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Log filter, e.g. `info`, `debug`, `rocewatch=debug` (default `error` for one-shot
    /// commands, `info` for `run` and `demo`; RUST_LOG also works).
    #[arg(long, global = true)]
    pub log_level: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List RDMA devices and ports: state, link, rate, netdev (like ibdev2netdev), GIDs.
    ///
    /// Example: rocewatch discover --sysfs-root integration-tests/fixtures/mlx5-roce-dual-port --json
    Discover(DiscoverArgs),
    /// Read every counter once and print it.
    ///
    /// Values are normalized (port_xmit_data/port_rcv_data in bytes, not 4-octet words);
    /// `source` is the file relative to the port directory.
    Collect(CollectArgs),
    /// Run the agent: collect on schedule, export, until SIGINT/SIGTERM.
    Run(RunArgs),
    /// List plugins: kind, origin (built-in or file), ABI version, state, last error.
    ///
    /// Loads and starts every configured plugin and calls each once.
    Plugins(PluginsArgs),
    /// Threshold rules and their state: pending, firing, cleared, with values
    ///
    /// Asks a running agent (its Prometheus listener serves /rules), or with --once
    /// evaluates the configured rules on one collection here (rates and `for` durations
    /// need a running agent; --once shows what holds right now).
    ///
    /// Examples:
    ///   rocewatch rules --agent http://127.0.0.1:9464
    ///   rocewatch rules --once --config configs/rules.toml --sysfs-root integration-tests/fixtures/mlx5-roce-dual-port/sys
    #[command(verbatim_doc_comment)]
    Rules(RulesArgs),
    /// RDMA reachability and latency to a peer (RC ping-pong over verbs, like ib_send_lat).
    ///
    /// Sends `--count` RC Send/Recv ping-pongs (as `ib_send_lat` or `rping -c` do) and
    /// prints a summary; the exit status is 1 when nothing came back.
    ///
    /// The peer runs a responder: `rocewatch probe --serve`. Connection setup goes over a
    /// TCP side channel (port 18516), the RoCE v2 GID is the one of the local IP towards
    /// the peer. The verbs plugin (librocewatch_probe_verbs.so, which needs rdma-core's
    /// libibverbs) is found in ROCEWATCH_PLUGIN_DIR, next to this binary, or in
    /// /usr/lib/rocewatch (the rocewatch-probe-verbs package).
    ///
    /// Examples:
    ///   rocewatch probe --serve
    ///   rocewatch probe 192.168.100.1 --count 100 --size 64
    #[command(verbatim_doc_comment)]
    Probe(ProbeCmdArgs),
    /// RDMA bandwidth to a peer (RC WRITE, READ or SEND over verbs, like ib_write_bw).
    ///
    /// `--qps` RC queue pairs post `--size`-byte messages (2 MiB in flight each: 32
    /// messages of 64 KiB; between 4 and 128 messages) for `--duration`; prints ib_write_bw's table (#bytes #iterations BW peak BW average
    /// MsgRate), the port's line rate (sysfs `rate`, and the netdev speed for RoCE) and the
    /// share reached, and what moved on both ports meanwhile (PFC pauses per priority,
    /// CNPs, ECN marks, retransmissions, out-of-sequence, out_of_buffer, discards). Exit
    /// status 1 when the share is under --min-share (with what explains it), 2 when the
    /// test could not run (refused, unreachable: the cause is printed).
    ///
    /// The peer runs `rocewatch probe --serve` (or the agent with [probes]
    /// serve_bandwidth = true). The same test with perftest:
    ///   rocewatch bandwidth PEER --size 65536 --qps 4 --duration 10s
    ///   = ib_write_bw -s 65536 -q 4 -D 10 -t 32 -u 18 PEER  (--op read: ib_read_bw, --op send: ib_send_bw;
    ///     -t 32 -u 18: the same messages in flight and retransmission timeout)
    /// Latency stays with `rocewatch probe` (ib_send_lat).
    ///
    /// Examples:
    ///   rocewatch bandwidth 192.168.100.1
    ///   rocewatch bandwidth 192.168.100.1 --op read --qps 8 --duration 5s --json
    #[command(verbatim_doc_comment)]
    Bandwidth(BandwidthCmdArgs),
    /// Sweep a job's hosts before it starts: rail-matched RDMA tests between pairs, and
    /// which NIC, host or direction is bad.
    ///
    /// Each host runs it (srun --ntasks-per-node=1) and writes its tests as JSON lines;
    /// --judge over every host's lines names a bad NIC, host or direction (docs/PROBES.md).
    Preflight(PreflightArgs),
    /// The fleet: the pinglists hosts derive from a topology file (ToR mesh and
    /// cross-ToR peers).
    #[command(subcommand)]
    Fleet(FleetCommand),
    /// Configuration tools.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// RoCE, PFC and ECN configuration of the RDMA ports.
    #[command(subcommand)]
    Qos(QosCommand),
    /// Run the RoCE troubleshooting guide as checks: pass/warn/fail, evidence, the fix.
    ///
    /// Checks, in order: RDMA devices present; every port ACTIVE and LinkUp; the netdev of
    /// each RoCE port, up, with an IP address; a RoCE v2 GID for that IP; RoCE mode (v2);
    /// PFC on --priority and trust dscp; ECN on that priority (notification and reaction
    /// point); one MTU on every RoCE netdev (and, with --peer, packets of that size reach
    /// the peer unfragmented); nftables and iptables rule sets that drop UDP 4791 (read
    /// with nft -j list ruleset and iptables-save, not guessed); irqbalance running or the
    /// NIC's interrupts spread over CPUs; the host: the link layer, each NIC's PCIe link,
    /// its interrupts against its NUMA node, RoCE netdevs sharing a subnet (ARP and
    /// reverse-path sysctls, a policy route per rail), GPUs against NICs (nvidia-smi topo
    /// -m terms, GPUDirect, ACS); the driver module's build (the kernel's own or a vendor package's,
    /// one build across the RDMA stack) and the same firmware on devices of one driver;
    /// the kernel log's RDMA/NIC driver messages over --log-window; pause frames, drops, out_of_buffer, out-of-sequence and retransmission counters
    /// not moving over --window; with --peer, a verbs probe (the peer runs
    /// `rocewatch probe --serve` or the agent with [probes]); and which interface to
    /// capture on with the tcpdump and ethtool offload commands to use and to restore.
    /// A check that cannot be decided here says skip and why (a fixture tree is not the
    /// live host's firewall; rxe has no PFC).
    ///
    /// Exit status: 0 nothing failed (warnings allowed), 1 a check failed, 2 on an error.
    ///
    /// Example: rocewatch doctor --peer 10.0.0.2
    ///          rocewatch doctor --sysfs-root integration-tests/fixtures/mlx5-roce-dual-port/sys --window 1s
    #[command(verbatim_doc_comment)]
    Doctor(DoctorArgs),
    /// The congestion state of every port and priority over a window, from its counters
    /// together: idle, flowing, ecn_controlled, pfc_dominated, lossy, storm.
    ///
    /// Collects twice --window apart and shows, per port and priority the NIC reports per
    /// priority (mlx5 and bnxt: bytes, pauses, pause time; ice: pauses), the rates and the
    /// state (docs/CONGESTION.md). --advise adds, for each port and priority in a troubled
    /// state (storm, pfc_dominated, lossy), what to tune and the counters it rests on;
    /// it changes nothing (`rocewatch qos plan` and `apply` do). --watch shows it again
    /// every window until interrupted.
    ///
    /// Exit status: 0, or 2 when nothing could be collected.
    ///
    /// Examples:
    ///   rocewatch congestion --window 30s --advise
    ///   rocewatch congestion --json | jq '.ports[] | select(.state == "storm")'
    #[command(verbatim_doc_comment)]
    Congestion(CongestionArgs),
    /// Is this host fit to take jobs? One verdict for a scheduler, in under 2 s.
    ///
    /// Checks, in order: RDMA devices present ([health] min_devices, default 1); every
    /// port whose netdev is administratively up, and every InfiniBand port, ACTIVE and
    /// LinkUp at [health] min_rate_gbps or at the rate of its siblings (ports of the same
    /// HCA model); each device's PCIe link at the most its card and slot allow; a RoCE v2 GID
    /// for each address of the port's netdev; the RoCE netdevs' MTU (min_mtu, else one MTU
    /// for all); the driver and firmware builds [health] names; links that flapped
    /// [health] max_flaps times (default 2) within flap_window (default 10m), counted
    /// between runs in the state directory; transceiver modules at an alarm level or with
    /// a dark lane (live host); failing driver messages in
    /// the kernel log over [health] kernel_log_window (default 15m: firmware command
    /// timeouts, health compromised, PCIe slot power); queue pairs in the error state
    /// (RDMA netlink; a QP in ERR wedges every rank of the job on it); and, with
    /// [health] agent or --agent, a running agent's firing rules (never required: an
    /// agent that does not answer is said and weighs nothing). [health] checks = [...]
    /// picks the checks that count. A fixture tree (--sysfs-root) has no netlink or
    /// kernel log of its own: those checks say skipped.
    ///
    /// Output: one line naming the worst finding (device, port, what is wrong), at most
    /// 80 bytes (node-problem-detector's default max_output_length); --all adds every
    /// finding; --json prints them all.
    ///
    /// Exit status: 0 healthy, 1 unhealthy, 2 cannot tell (a state that could not be
    /// read, a configuration that does not load): node-problem-detector's custom-plugin
    /// contract (OK, NonOK, Unknown).
    ///
    /// Examples:
    ///   rocewatch health
    ///   rocewatch health --all --agent http://127.0.0.1:9464
    ///   rocewatch health --json --sysfs-root integration-tests/fixtures/gpu-two-socket/sys
    #[command(verbatim_doc_comment)]
    Health(HealthArgs),
    /// The host's quarantine: show it, enter it by hand, release it (audited).
    ///
    /// A host in quarantine takes no jobs: `health` says unhealthy (and `health --slurm`
    /// drains the node) until it is released. A rule with `quarantine = true` puts the
    /// host there when it fires. The state is the file quarantine.json in the state
    /// directory ($STATE_DIRECTORY, else /var/lib/rocewatch): it outlives the agent, a
    /// kill -9 and a reboot; the agent exports it as rocewatch_quarantine.
    #[command(subcommand, verbatim_doc_comment)]
    Quarantine(QuarantineCommand),
    /// Transceiver modules: identity, temperature, voltage, per lane bias and optical
    /// power, thresholds and the alarm and warning flags that are on, as `ethtool -m`
    /// shows them (°C, V, mA, mW and dBm).
    ///
    /// Decodes SFF-8472 (SFP, SFP+, SFP28, with external calibration), SFF-8636 (QSFP+,
    /// QSFP28) and CMIS (QSFP-DD, OSFP; lanes of every bank). What cannot be trusted is
    /// said under Problems and its readings are absent (`-`, null in JSON), never 0: a
    /// module that claims diagnostics but answers zeros, a DOM type byte saying none, a
    /// read failing its checksums (CC_BASE, CC_EXT, CC_DMI), a page not read.
    ///
    /// Without --eeprom-file: the module of every netdev backed by a device (under
    /// --sysfs-root), read over ethtool netlink by page and bank, through the ioctl's
    /// linear dump where netlink cannot; a port whose driver reads no module (a virtual
    /// NIC, an empty cage) is said on standard error and left out. --eeprom-file decodes
    /// a dump taken elsewhere instead (docs/OPTICS.md).
    ///
    /// Exit status: 0 decoded (no module read included), 2 on an error (a file that is not
    /// a dump names the line or offset at fault).
    ///
    /// Examples:
    ///   rocewatch optics
    ///   ethtool -m eth2 hex on > eth2.hex; rocewatch optics --eeprom-file eth2.hex
    ///   ethtool -m eth2 raw on > eth2.bin; rocewatch optics --eeprom-file eth2.bin --json
    #[command(verbatim_doc_comment)]
    Optics(OpticsArgs),
    /// The environment NCCL, UCX and Open MPI need on this host to take the RDMA path.
    ///
    /// Computed from discovery and the QoS state: the ACTIVE ports (NCCL_IB_HCA,
    /// UCX_NET_DEVICES), the GID index holding the RoCE v2 GID of the netdev's IPv4 address
    /// (NCCL_IB_GID_INDEX, UCX_IB_GID_INDEX), the traffic class that puts RDMA on the
    /// lossless priority (NCCL_IB_TC, UCX_IB_TRAFFIC_CLASS: the configured RDMA CM ToS, else
    /// the one [[qos.desired]] asks for), the interfaces for sockets (NCCL_SOCKET_IFNAME),
    /// and Open MPI's OMPI_MCA_pml=ucx, OMPI_MCA_btl=^openib. InfiniBand ports get no GID
    /// index and their IPoIB netdev for sockets. What cannot be decided (a DOWN port, ports
    /// whose GID index differs, no traffic class) is said on standard error, naming the port.
    ///
    /// Examples:
    ///   eval "$(rocewatch env)"
    ///   rocewatch env --for nccl --device 'mlx5_*'
    ///   rocewatch env --format slurm > /etc/slurm/rdma-env.sh   # slurm.conf: TaskProlog=
    ///   rocewatch doctor --env job.env                          # check a job's settings
    #[command(verbatim_doc_comment)]
    Env(EnvArgs),
    /// Capture RoCE v2 traffic (UDP 4791) on an RDMA device's netdev, or sum up a capture.
    ///
    /// Finds the netdev of the RDMA device (as ibdev2netdev; or takes a netdev; default:
    /// the first RoCE port whose netdev is up) and runs tcpdump on it. On mlx5, offloaded
    /// RDMA traffic never reaches the netdev: when `tcpdump -D` lists an RDMA sniffer
    /// interface for the device, the capture is taken there (and says so). --offload-off
    /// turns rx-vlan-offload off through the ethtool ioctls for the capture and restores
    /// the value it found afterwards, on Ctrl-C/SIGTERM too, and after a crash on the next
    /// start (a restore record in the state directory). --summary (or --read FILE for an
    /// existing pcap) decodes RoCE v2: packets and bytes per opcode and destination QP,
    /// CNPs, ECN-CE marks, ACKs, NAKs, RNR NAKs, PSN gaps and retransmissions. Only a
    /// payload with a defined opcode, transport version 0 and room for its headers, pad
    /// and ICRC counts as RoCE; other UDP 4791 payloads are counted apart, with why. The
    /// file is read record by record (memory does not grow with it); only a regular file
    /// is read (a FIFO or a device is refused); a last record cut short is said.
    ///
    /// Examples:
    ///   rocewatch capture mlx5_0 --duration 10s --summary
    ///   rocewatch capture ens1f0np0 --count 100000 -w roce.pcap --offload-off
    ///   rocewatch capture --read roce.pcap --json
    #[command(verbatim_doc_comment)]
    Capture(CaptureArgs),
    /// Which workloads hold the RDMA resources, live: one line per workload.
    ///
    /// A workload is what a process belongs to, found from its cgroup: a Kubernetes pod
    /// and container (pod:<uid>/<container>), a Slurm job step (slurm:<job>.<step>), a
    /// systemd unit (unit:<name>), each only where the kubelet, slurmstepd or systemd make
    /// its cgroup (never below a user@UID.service), else the command (process:<command>);
    /// QPs the kernel itself holds belong to its consumer (kernel:<name>, e.g.
    /// kernel:ib_core). Beyond the collector's max_workloads the rest is summed into
    /// `other` (shown last).
    ///
    /// Per workload: QPs, CQs, MRs, MR bytes and PDs, summed over its devices and ports:
    /// the counts `rdma resource show qp|cq|mr|pd` lists for its processes. With per-QP
    /// counters (bound by the running agent with [plugins.builtin.resources.options]
    /// qp_counters = true; give top the same configuration with --config), per second:
    /// retransmissions (packet_seq_err, implied_nak_seq_err, local_ack_timeout_err,
    /// roce_adp_retrans; rxe: completer_retry_err, rcvd_seq_err), CNPs (np_cnp_sent +
    /// rp_cnp_handled) and requests received (rx_write/read/atomic_requests; rxe:
    /// rdma_recvs: no driver counts bytes per QP). Without them those columns say `-`.
    ///
    /// Reads the resources collector (RDMA netlink) only. Exit status 2, with the cause,
    /// when it is not loaded or cannot run here (no RDMA netlink); a host where nothing
    /// holds resources prints the header and "no RDMA resources held".
    ///
    /// Examples:
    ///   rocewatch top                          # live; q or Ctrl-C to quit
    ///   rocewatch top --sort mr-bytes --limit 10
    ///   rocewatch top --once --json | jq '.workloads[] | select(.kind == "slurm")'
    #[command(verbatim_doc_comment)]
    Top(TopArgs),
    /// The agent against a simulated fabric, with a live view of per-port rates.
    ///
    /// Generates a sysfs tree (two mlx5 RoCE ports, with their driver statistics) in a
    /// temporary directory, advances its counters every tick (traffic; an error burst on
    /// one port at 8 s; a PFC pause storm on priority 3 of the other at 20 s), and runs the
    /// real pipeline on it with the default rules (configs/rules.toml): the storm fires
    /// `pfc-pause-storm` 30 s later and a dry-run remediation is audited. The scenarios
    /// ecn, pfc, lossy, storm, incast and global-pause show each congestion state
    /// (docs/CONGESTION.md). Add --otlp-endpoint to export as well.
    Demo(DemoArgs),
    /// Run as a collectd Exec plugin: print PUTVAL lines every interval.
    ///
    /// collectd config:  LoadPlugin exec
    ///                   <Plugin exec> Exec "rocewatch" "/usr/bin/rocewatch" "collectd-exec" </Plugin>
    /// The interval and host name come from COLLECTD_INTERVAL and COLLECTD_HOSTNAME (set by
    /// collectd), else from the config. Load configs/collectd/types.db in collectd.
    CollectdExec(CollectdExecArgs),
    /// Print docs/METRICS.md, generated from the metric catalog.
    MetricsDoc,
    /// Print the collectd types.db for rocewatch's metrics.
    CollectdTypes,
    /// Print the shell completion script for bash, zsh or fish.
    ///
    /// The packages install them; from a source build:
    ///   rocewatch completions bash > /usr/share/bash-completion/completions/rocewatch
    ///   rocewatch completions zsh > /usr/local/share/zsh/site-functions/_rocewatch
    ///   rocewatch completions fish > ~/.config/fish/completions/rocewatch.fish
    /// or, for this shell only: source <(rocewatch completions bash)
    #[command(verbatim_doc_comment)]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: CompletionShell,
    },
    /// Write the manual pages (rocewatch.1, one page per subcommand: rocewatch-probe.1,
    /// rocewatch-qos-apply.1, ...) into DIR, for packaging.
    #[command(hide = true)]
    ManPages {
        /// Where to write them (created if missing).
        dir: PathBuf,
    },
}

/// `rocewatch --version`: `0.1.0 (git 1a2b3c4d5e6f, plugin ABI 1.4)`. The revision is
/// the build's (`build.rs`: `ROCEWATCH_GIT_REV`, else `git rev-parse`, else `unknown`).
pub fn long_version() -> &'static str {
    static V: OnceLock<String> = OnceLock::new();
    V.get_or_init(|| {
        format!(
            "{} (git {}, plugin ABI {}.{})",
            env!("CARGO_PKG_VERSION"),
            env!("ROCEWATCH_GIT_REV"),
            rocewatch_plugin_sdk::abi::ABI_MAJOR,
            rocewatch_plugin_sdk::abi::ABI_MINOR
        )
    })
}

/// The shells completions are made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

impl Command {
    /// Commands that print a result and exit.
    pub fn is_one_shot(&self) -> bool {
        match self {
            Command::Probe(p) => !p.args.serve,
            Command::Run(_) | Command::Demo(_) | Command::CollectdExec(_) => false,
            Command::Discover(_)
            | Command::Collect(_)
            | Command::Plugins(_)
            | Command::Rules(_)
            | Command::Qos(_)
            | Command::Doctor(_)
            | Command::Congestion(_)
            | Command::Health(_)
            | Command::Quarantine(_)
            | Command::Optics(_)
            | Command::Bandwidth(_)
            | Command::Preflight(_)
            | Command::Fleet(_)
            | Command::Env(_)
            | Command::Capture(_)
            | Command::Top(_)
            | Command::Config(_)
            | Command::MetricsDoc
            | Command::CollectdTypes
            | Command::Completions { .. }
            | Command::ManPages { .. } => true,
        }
    }
}
