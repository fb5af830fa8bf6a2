#!/usr/bin/env bash
# benches/scrape-vs-node-exporter.sh [SECONDS]
#
# rocewatch against Debian's node_exporter (infiniband collector only) on the same
# generated host (16 mlx5 ports with full counters and hw_counters), in the same run:
# both serve /metrics, both are scraped every 200 ms for the same window (rocewatch also
# collects every 200 ms), and we report CPU seconds over the window and peak RSS of each,
# as ratios, and the series each exports. Then the bare-read benchmark (collection vs
# reading the same files in a tight loop). Results go to stdout; docs/PERFORMANCE.md keeps
# the last ones.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
secs=${1:-30}
ne=.cache/node-exporter/usr/bin/prometheus-node-exporter
[ -x "$ne" ] || scripts/fetch-deb.sh bookworm prometheus-node-exporter .cache/node-exporter >/dev/null
cargo build --release --quiet -p rocewatch
work=$(mktemp -d)
trap 'kill $RW $NE 2>/dev/null || true; rm -rf "$work"' EXIT
root=$(python3 integration-tests/fixtures/generate.py --big "$work/host")
# The generated tree is regular files, not sysfs: tell the collector to keep them open as
# it does on sysfs by default (one pread per counter per collection), so the benchmark
# measures the production read path.
printf '[plugins.builtin.counters-sysfs.options]\nkeep_files_open = "always"\n' > "$work/rocewatch.toml"
rwport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
neport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ROCEWATCH_AGENT__JITTER=0s target/release/rocewatch run --sysfs-root "$root" --interval 200ms \
  --prometheus-listen "127.0.0.1:$rwport" --log-level warn --config "$work/rocewatch.toml" & RW=$!
"$ne" --path.sysfs="$root" --collector.disable-defaults --collector.infiniband \
  --web.listen-address="127.0.0.1:$neport" --log.level=warn & NE=$!
python3 - "$RW" "$NE" "$rwport" "$neport" "$secs" <<'PY'
import sys, time, urllib.request, os
rw, ne, rwport, neport, secs = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5])
tick = os.sysconf("SC_CLK_TCK")
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick
def hwm(pid):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmHWM:"):
            return int(l.split()[1]) / 1024
def scrape(port):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
deadline = time.time() + 30
while time.time() < deadline:
    try:
        scrape(rwport); scrape(neport); break
    except Exception:
        time.sleep(0.1)
time.sleep(2)  # warm-up
def collect_time(text):
    """(sum, count) of the agent's own counters-sysfs collection durations."""
    v = {}
    for l in text.splitlines():
        if l.startswith("rocewatch_plugin_duration_seconds_") and 'plugin="counters-sysfs"' in l:
            v[l.split("{")[0].rsplit("_", 1)[1]] = float(l.split()[-1])
    return v.get("sum", 0.0), v.get("count", 0.0)
k0 = collect_time(scrape(rwport))
c0 = (cpu(rw), cpu(ne)); t0 = time.time(); n = 0
while time.time() - t0 < secs:
    start = time.time()
    a = scrape(rwport); b = scrape(neport); n += 1
    time.sleep(max(0, 0.2 - (time.time() - start)))
dt = time.time() - t0
c1 = (cpu(rw), cpu(ne))
k1 = collect_time(scrape(rwport))
series = lambda text, prefix: sum(1 for l in text.splitlines() if l.startswith(prefix))
rw_cpu, ne_cpu = c1[0] - c0[0], c1[1] - c0[1]
rw_rss, ne_rss = hwm(rw), hwm(ne)
rw_series, ne_series = series(a, "rdma_"), series(b, "node_infiniband_")
print(f"window: {dt:.1f} s, {n} scrapes of each (every 200 ms); rocewatch also collects every 200 ms")
print(f"{'':22}{'rocewatch':>12}{'node_exporter':>15}{'ratio':>8}")
print(f"{'CPU seconds':22}{rw_cpu:>12.2f}{ne_cpu:>15.2f}{rw_cpu / max(ne_cpu, 1e-9):>8.2f}")
print(f"{'CPU % of one core':22}{100 * rw_cpu / dt:>12.2f}{100 * ne_cpu / dt:>15.2f}")
print(f"{'peak RSS (MiB)':22}{rw_rss:>12.1f}{ne_rss:>15.1f}{rw_rss / ne_rss:>8.2f}")
print(f"{'series exported':22}{rw_series:>12}{ne_series:>15}{rw_series / ne_series:>8.2f}")
print(f"{'bytes per scrape':22}{len(a):>12}{len(b):>15}{len(a) / len(b):>8.2f}")
ncol = k1[1] - k0[1]
if ncol > 0:
    per = (k1[0] - k0[0]) / ncol
    print(f"rocewatch: {ncol:.0f} collections in the window, {per * 1e3:.2f} ms each (its own plugin-duration metric),")
    print(f"  {per * ncol:.2f} s of its {rw_cpu:.2f} CPU seconds; the rest is storing, deriving, rendering and serving /metrics")
PY
cargo bench --quiet -p rocewatch-counters-sysfs --bench collect_vs_bare -- "$root" 2>/dev/null | grep -v '^tree:'
