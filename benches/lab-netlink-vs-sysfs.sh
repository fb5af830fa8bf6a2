#!/usr/bin/env bash
# benches/lab-netlink-vs-sysfs.sh [SECONDS] [ROUNDS]
#
# The real host's lever (issue 53): the hw_counters of an RDMA port read through one RDMA
# netlink request (`hw_counters_source = "netlink"`) against the same counters read file by
# file from sysfs, on a real kernel: one soft-RoCE guest of the lab (rdma_rxe has both
# paths), Debian bookworm's stock kernel under QEMU. In the same guest, node_exporter's
# infiniband collector, for the ratio a real host would see.
#
# Each contender serves /metrics and is scraped every 200 ms for SECONDS (default 20), the
# agent also collecting every 200 ms; the three are run one after the other, ROUNDS times
# (default 2), alternated, so that a slower stretch of the emulation does not favour one.
# Reported per run: CPU seconds of the process over the window (utime + stime from
# /proc/PID/stat), its peak RSS (VmHWM), and for rocewatch the counters-sysfs plugin's own
# collection time (its rocewatch_plugin_duration_seconds metric).
#
# Absolute figures under software emulation mean nothing; the ratios, taken in one guest
# within minutes, are the result. Needs the lab image (scripts/install-test-deps.sh) and
# builds rocewatch in release mode. Results on stdout; docs/PERFORMANCE.md keeps the last.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
secs=${1:-20}
rounds=${2:-2}
ne=.cache/node-exporter/usr/bin/prometheus-node-exporter
[ -x "$ne" ] || scripts/fetch-deb.sh bookworm prometheus-node-exporter .cache/node-exporter >/dev/null
cargo build --release --quiet -p rocewatch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/share" "$work/out"
cp target/release/rocewatch "$work/share/rocewatch"
cp "$ne" "$work/share/node_exporter"
cat > "$work/guest.sh" <<GUEST
#!/bin/bash
set -u
secs=$secs
rounds=$rounds
GUEST
cat >> "$work/guest.sh" <<'GUEST'
cp /mnt/extra/rocewatch /tmp/rocewatch
cp /mnt/extra/node_exporter /tmp/node_exporter
R=/mnt/host/results.txt
: > "$R"
tick=$(getconf CLK_TCK)
cpu() { awk -v t="$tick" '{ sub(/.*\) /, ""); split($0, f, " "); printf "%.3f", (f[12] + f[13]) / t }' "/proc/$1/stat"; }
hwm() { awk '/^VmHWM:/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }
scrape() {
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
  cat <&3
  exec 3<&-
}
# plugin_time PORT: the counters-sysfs plugin's collection seconds and count so far
plugin_time() {
  scrape "$1" | awk '/^rocewatch_plugin_duration_seconds_(sum|count)\{/ && /plugin="counters-sysfs"/ {
    n = $1; sub(/\{.*/, "", n); v[n] = $NF } END { printf "%s %s", v["rocewatch_plugin_duration_seconds_sum"] + 0, v["rocewatch_plugin_duration_seconds_count"] + 0 }'
}
wait_up() { for _ in $(seq 1 300); do scrape "$1" > /dev/null 2>&1 && return 0; sleep 0.2; done; return 1; }
# measure NAME PID PORT: scrape every 200 ms for $secs, then one result line
measure() {
  local name=$1 pid=$2 port=$3 c0 c1 t0 t1 n=0 p0 p1 body
  wait_up "$port" || { echo "$name: never answered on $port" >> "$R"; return 1; }
  sleep 2
  [ "$name" = node_exporter ] || p0=$(plugin_time "$port")
  c0=$(cpu "$pid"); t0=$(date +%s.%N)
  while awk -v a="$t0" -v b="$(date +%s.%N)" -v s="$secs" 'BEGIN { exit !(b - a < s) }'; do
    body=$(scrape "$port"); n=$((n + 1)); sleep 0.2
  done
  t1=$(date +%s.%N); c1=$(cpu "$pid")
  local series
  series=$(printf '%s\n' "$body" | grep -c -E '^(rdma_|node_infiniband_)' || true)
  if [ "$name" = node_exporter ]; then
    echo "$name cpu=$(awk -v a="$c0" -v b="$c1" 'BEGIN{printf "%.3f", b-a}') window=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') scrapes=$n rss=$(hwm "$pid") series=$series" >> "$R"
  else
    p1=$(plugin_time "$port")
    echo "$name cpu=$(awk -v a="$c0" -v b="$c1" 'BEGIN{printf "%.3f", b-a}') window=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') scrapes=$n rss=$(hwm "$pid") series=$series plugin=$(echo "$p0 $p1" | awk '{ if ($4 > $2) printf "%.3fms/%d", 1000 * ($3 - $1) / ($4 - $2), $4 - $2; else printf "none" }')" >> "$R"
  fi
}
run_agent() {
  local src=$1
  printf '[plugins.builtin.counters-sysfs]\noptions = { hw_counters_source = "%s" }\n' "$src" > /tmp/$src.toml
  ROCEWATCH_AGENT__JITTER=0s /tmp/rocewatch run --interval 200ms --prometheus-listen 127.0.0.1:9500 \
    --log-level warn --config /tmp/$src.toml 2>> /mnt/host/agent-$src.log &
  local pid=$!
  measure "rocewatch-$src" "$pid" 9500
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
run_ne() {
  /tmp/node_exporter --collector.disable-defaults --collector.infiniband \
    --web.listen-address=127.0.0.1:9100 --log.level=warn 2>> /mnt/host/node_exporter.log &
  local pid=$!
  measure node_exporter "$pid" 9100
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
ls /sys/class/infiniband/*/ports/*/hw_counters | head -3 > /mnt/host/hw_counters.txt
for r in $(seq 1 "$rounds"); do
  run_agent sysfs; run_agent netlink; run_ne
done
exit 0
GUEST
RXE_LAB_SHARE="$work/share" RXE_LAB_TIMEOUT=$((300 + rounds * 3 * (secs + 30))) \
  bash integration-tests/lab/rxe-lab.sh run "$work/guest.sh" "$work/out" >&2 || {
  echo "lab run failed; guest log and results so far:" >&2
  cat "$work/out"/guest-*.log "$work/out/results.txt" >&2; exit 1; }
cat "$work/out/results.txt"
# node_exporter's infiniband collector reads counters/ and hw_counters/ of each port; what
# it said about the guest's device (rxe has no counters/ directory) is worth seeing.
if grep -q '^node_exporter .*series=0' "$work/out/results.txt"; then
  echo "node_exporter exported no node_infiniband_ series; its log:"
  sort -u "$work/out/node_exporter.log" | head -n 5
fi
python3 - "$work/out/results.txt" <<'PY'
import sys, re, statistics
runs = {}
for line in open(sys.argv[1]):
    name, *kv = line.split()
    d = dict(x.split("=", 1) for x in kv)
    runs.setdefault(name, []).append(d)
def cpu(name):
    return [float(d["cpu"]) / float(d["window"]) for d in runs.get(name, [])]
def plugin_ms(name):
    return [float(d["plugin"].split("ms/")[0]) for d in runs.get(name, []) if d.get("plugin", "none") != "none"]
s, n, ne = cpu("rocewatch-sysfs"), cpu("rocewatch-netlink"), cpu("node_exporter")
if not (s and n and ne):
    sys.exit(f"missing runs: {sorted(runs)}")
print()
print(f"{'':28}{'CPU % of a core':>16}{'plugin ms/collection':>22}{'peak RSS MiB':>14}")
for name in ("rocewatch-sysfs", "rocewatch-netlink", "node_exporter"):
    pm = plugin_ms(name)
    rss = max(float(d["rss"]) for d in runs[name])
    print(f"{name:28}{100 * statistics.median(cpu(name)):>16.2f}{(f'{statistics.median(pm):.3f}' if pm else '-'):>22}{rss:>14.1f}")
print()
print(f"netlink / sysfs, process CPU:      x{statistics.median(n) / statistics.median(s):.2f}")
if plugin_ms("rocewatch-sysfs") and plugin_ms("rocewatch-netlink"):
    print(f"netlink / sysfs, plugin time:      x{statistics.median(plugin_ms('rocewatch-netlink')) / statistics.median(plugin_ms('rocewatch-sysfs')):.2f}")
print(f"rocewatch (sysfs) / node_exporter:   x{statistics.median(s) / statistics.median(ne):.2f}")
print(f"rocewatch (netlink) / node_exporter: x{statistics.median(n) / statistics.median(ne):.2f}")
PY
