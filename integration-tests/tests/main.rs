//! rocewatch's end-to-end tests: one test binary.
//!
//! - `fixtures`: `discover` and `collect --once` on every fixture tree, against golden
//!   outputs (`SNAPSHOTS=overwrite` rewrites them) and targeted assertions.
//! - `plugins`: real `.so` plugins (the example, a deliberately faulty one, and C-built
//!   libraries with a wrong ABI or no entry symbol) loaded by the agent.
//! - `config`: every file in `configs/` parses; bad files name the key path; env overrides.
//! - `otlp`, `otlp_resilience`: the agent exports to a real VictoriaMetrics on loopback and
//!   an in-test gRPC receiver; outages are queued and retried.
//! - `otlp_prometheus`: what receivers key a host on (`service.instance.id` from the
//!   machine id, `host.id`, schema URL, scope version, User-Agent, the DaemonSet's `k8s.*`)
//!   at in-test receivers; two hosts kept apart by VictoriaMetrics and by Prometheus's own
//!   OTLP receiver (ignored: it needs an upstream build in `ROCEWATCH_PROMETHEUS_OTLP`).
//! - `otel_env`: the OpenTelemetry environment variables (`OTEL_EXPORTER_OTLP_*`, ...)
//!   through the binary to in-test receivers; their precedence and `config check`'s origins.
//! - `agent_logs`: the agent's own logs as OTLP logs (`agent_logs = true`) at an in-test
//!   OTLP/HTTP receiver's `/v1/logs`, with the metrics' resource; off by default.
//! - `otlp_events`: events (a rule's transitions, its remediation decisions and results,
//!   the quarantine entered and released) as OTLP log records at an in-test receiver's
//!   `/v1/logs`; none with `events = false`.
//! - `prometheus`: `/metrics` checked by promtool, content negotiation, `/rules`.
//! - `collectd`: a real collectd receives the network protocol (plain and signed) and runs
//!   `collectd-exec`.
//! - `exporters`: Prometheus, OTLP, collectd and collectd-exec carry the same metrics.
//! - `derived`, `ethtool`, `rules`, `alertmanager`, `probes`, `qos`: each feature through
//!   the binary on fixture trees.
//! - `qos_vf`: `qos` on SR-IOV virtual functions (a guest's VF, a host's VF and its PF):
//!   what the physical function owns shown as its, and refused by `plan` and `apply`.
//! - `lifecycle`: steady conditions said once, a closed stdout, a second signal.
//! - `lab`: the soft-RoCE guest pair (real verbs, sysfs, netlink, configfs, nftables).
//! - `demo`: `rocewatch demo` shows moving numbers and the error burst.
//! - `doctor`: `rocewatch doctor` on fixture trees (the soft-RoCE pair is in `lab`).
//! - `congestion`: `rocewatch congestion` on a fixture tree whose driver statistics move.
//! - `progress`: `doctor` says what it waits on within a second on a terminal and nothing
//!   on a pipe; `congestion` answers at once when the first collection decides it.
//! - `web`: TLS and basic auth on the listeners (exporter-toolkit's web configuration),
//!   with a real Prometheus and curl.
//! - `appenv`: `rocewatch env` and `doctor --env` (NCCL/UCX/Open MPI settings) on the
//!   fixture trees.
//! - `capture`: `rocewatch capture --read` on a crafted pcap of RoCE v2 packets.
//! - `optics`: `rocewatch optics --eeprom-file` on module dumps (text and JSON).
//! - `grammar`: each shared flag's spelling and the old one kept as a hidden alias give
//!   the same output; a typo suggests the nearest command first.
//! - `causes`: errors name their cause (a refused connection, the variable a bad value
//!   came from, what is wrong with `preflight --out`).
//! - `top`: `rocewatch top` says why it has nothing to show (a fixture tree, which the
//!   resources collector cannot read; the collector disabled). The attribution is checked
//!   in the lab.
//! - `preflight`: `rocewatch preflight --plan` on a fixture tree and `--judge` on results
//!   written as each host writes them.
//! - `fleet`, `fleet_rules`: `fleet plan`, `topology` and `simulate` through the binary,
//!   the agent probing a pinglist through fake-probe, and the localization rules evaluated
//!   on the simulator's series for 1,000 hosts in a real VictoriaMetrics.
//! - `packages`: the .deb packages built by scripts/package.sh, installed, upgraded,
//!   removed and purged with dpkg on this machine; the .rpm inspected with rpm.
//! - `packaging`: the systemd unit, Kubernetes and collector manifests, Prometheus rules
//!   and the Grafana dashboard are valid and name only metrics that exist.
// Functions over 120 lines are refused outside tests; this is tests.
#![allow(clippy::too_many_lines)]

mod support;

mod agent_logs;
mod agent_rails;
mod alertmanager;
mod appenv;
mod capture;
mod causes;
mod collectd;
mod config;
mod congestion;
mod demo;
mod derived;
mod doctor;
mod ethtool;
mod exporters;
mod fixtures;
mod fleet;
mod fleet_rails;
mod fleet_rules;
mod grammar;
mod health;
mod health_link;
mod host_cpu;
mod lab;
mod lifecycle;
mod link_history;
mod optics;
mod otel_env;
mod otlp;
mod otlp_events;
mod otlp_prometheus;
mod otlp_resilience;
mod packages;
mod packaging;
mod plugins;
mod preflight;
mod probes;
mod progress;
mod prometheus;
mod qos;
mod qos_vf;
mod quarantine;
mod rail_map;
mod rules;
mod slurm;
mod sriov;
mod sriov_rails;
mod top;
mod web;
