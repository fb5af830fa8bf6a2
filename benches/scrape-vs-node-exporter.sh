#!/usr/bin/env bash
# benches/scrape-vs-node-exporter.sh [SECONDS] [ROUNDS] [SYSFS_ROOT]
#
# rocewatch against Debian's node_exporter (infiniband collector only) on the same host
# tree (default: generated, 16 mlx5 ports with full counters and hw_counters; SYSFS_ROOT
# for another tree), run side by side: both serve /metrics, both are scraped every 200 ms
# for SECONDS (default 30; rocewatch also collects every 200 ms). Each turn starts both
# afresh; the turns alternate plain scrapes (no gzip: curl, most harnesses) and gzip
# scrapes (as Prometheus asks), ROUNDS (default 1) of each, medians reported. For each
# way: CPU seconds over the window (after a 2 s warm-up) and since each process started
# (its start, to the first answer on /metrics, said apart), RSS as its peak since start (VmHWM) and as its mean over the window (VmRSS every
# 0.1 s), bytes per scrape, as ratios; and the series each exports. Then the bare-read
# benchmark (collection vs reading the same files in a tight loop; BARE_READ=0 skips it).
# ROCEWATCH=BINARY runs that binary instead of building one; KEEP_FILES_OPEN=0 leaves the
# collector's default for a tree that is not sysfs (each file opened at each collection),
# as a harness that does not set it sees.
# Results go to stdout; docs/PERFORMANCE.md keeps the last ones.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
# The CPU and RSS readers shared by the benches (benches/lib/measure.py).
export PYTHONPATH="$top/benches/lib${PYTHONPATH:+:$PYTHONPATH}"
secs=${1:-30} rounds=${2:-1}
ne=.cache/node-exporter/usr/bin/prometheus-node-exporter
[ -x "$ne" ] || scripts/fetch-deb.sh bookworm prometheus-node-exporter .cache/node-exporter >/dev/null
rocewatch=${ROCEWATCH:-}
if [ -z "$rocewatch" ]; then
  cargo build --release --quiet -p rocewatch
  rocewatch=$top/target/release/rocewatch
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ $# -ge 3 ]; then
  root=$(realpath "$3")
else
  root=$(python3 integration-tests/fixtures/generate.py --big "$work/host")
fi
# The generated tree is regular files, not sysfs: tell the collector to keep them open as
# it does on sysfs by default (one pread per counter per collection), so the benchmark
# measures the production read path.
if [ "${KEEP_FILES_OPEN:-1}" = 0 ]; then
  : > "$work/rocewatch.toml"
  echo "keep_files_open: the collector's default (this tree is not sysfs: each file opened at each collection)"
else
  printf '[plugins.builtin.counters-sysfs.options]\nkeep_files_open = "always"\n' > "$work/rocewatch.toml"
fi
python3 - "$(realpath "$rocewatch")" "$ne" "$root" "$work" "$secs" "$rounds" <<'PY'
import os, statistics, subprocess, sys, time
from measure import RssSampler, cpu, free_port, peak_rss, scrape, wait_serving
rocewatch, ne, root, work, secs, rounds = sys.argv[1:5] + [float(sys.argv[5]), int(sys.argv[6])]

def start():
    """Both servers, afresh: (rocewatch, node_exporter), each (Popen, port, stderr path,
    CPU seconds it had used when it first answered /metrics)."""
    rp, np_ = free_port(), free_port()
    env = dict(os.environ, ROCEWATCH_AGENT__JITTER="0s")
    procs = []
    for name, port, argv in [
        ("rocewatch", rp, [rocewatch, "run", "--sysfs-root", root, "--interval", "200ms",
                           "--prometheus-listen", f"127.0.0.1:{rp}", "--log-level", "warn",
                           "--config", f"{work}/rocewatch.toml"]),
        ("node_exporter", np_, [ne, f"--path.sysfs={root}", "--collector.disable-defaults",
                                "--collector.infiniband", f"--web.listen-address=127.0.0.1:{np_}",
                                "--log.level=warn"]),
    ]:
        err = f"{work}/{name}.stderr"
        procs.append((subprocess.Popen(argv, env=env, stderr=open(err, "w")), port, err))
    ready = []
    for p, port, err in procs:
        try:
            wait_serving(port, p)
        except RuntimeError as e:
            for q, _, _ in procs:
                q.kill()
            sys.exit(f"{e}\n{open(err).read()}")
        ready.append((p, port, err, cpu(p.pid)))
    return ready

def collect_time(text):
    """(sum, count) of rocewatch's own counters-sysfs collection durations."""
    v = {}
    for l in text.splitlines():
        if l.startswith("rocewatch_plugin_duration_seconds_") and 'plugin="counters-sysfs"' in l:
            v[l.split("{")[0].rsplit("_", 1)[1]] = float(l.split()[-1])
    return v.get("sum", 0.0), v.get("count", 0.0)

def turn(use_gzip):
    (rw, rport, _, rw_ready), (nx, nport, _, nx_ready) = procs = start()
    time.sleep(2)  # warm-up
    k0 = collect_time(scrape(rport)[0])
    c0 = (cpu(rw.pid), cpu(nx.pid))
    sampler = RssSampler([rw.pid, nx.pid]).start()
    t0, n = time.time(), 0
    while time.time() - t0 < secs:
        s = time.time()
        a, asent = scrape(rport, use_gzip)
        b, bsent = scrape(nport, use_gzip)
        n += 1
        time.sleep(max(0, 0.2 - (time.time() - s)))
    dt = time.time() - t0
    sampler.stop()
    c1 = (cpu(rw.pid), cpu(nx.pid))
    k1 = collect_time(scrape(rport)[0])
    out = {"window": dt, "scrapes": n, "a": a, "b": b, "collect": (k1[0] - k0[0], k1[1] - k0[1])}
    for key, pid in (("rw", rw.pid), ("ne", nx.pid)):
        i = 0 if key == "rw" else 1
        out[key] = {
            "cpu": c1[i] - c0[i],
            "cpu_start": c1[i],
            "cpu_ready": rw_ready if key == "rw" else nx_ready,
            "peak": peak_rss(pid),
            "mean": sampler.mean(pid),
            "bytes": asent if key == "rw" else bsent,
        }
    for p, _, _, _ in procs:
        p.terminate()
        p.wait(timeout=30)
    return out

res = {False: [], True: []}
for _ in range(rounds):
    for use_gzip in (False, True):
        res[use_gzip].append(turn(use_gzip))
med = statistics.median
last = res[True][-1]
series = lambda text, prefix: sum(1 for l in text.splitlines() if l.startswith(prefix))
print(f"window {secs:.0f} s per turn, {rounds} turn(s) of each way, alternated, both servers afresh "
      f"each turn; scraped every 200 ms, rocewatch collecting every 200 ms; medians")
print(f"load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
print(f"{'':34}{'rocewatch':>12}{'node_exporter':>15}{'ratio':>8}")
rows = [
    ("CPU seconds in the window", "cpu", ".2f"),
    ("CPU seconds since start", "cpu_start", ".2f"),
    ("  of which to the first answer", "cpu_ready", ".2f"),
    ("RSS peak since start (MiB)", "peak", ".1f"),
    ("RSS mean in the window (MiB)", "mean", ".1f"),
    ("bytes per scrape (on the wire)", "bytes", ".0f"),
]
for use_gzip in (False, True):
    print("gzip scrapes (as Prometheus asks)" if use_gzip else "plain scrapes (no gzip: curl, most harnesses)")
    for label, key, fmt in rows:
        r = med([t["rw"][key] for t in res[use_gzip]])
        n = med([t["ne"][key] for t in res[use_gzip]])
        ratio = f"{r / n:>8.2f}" if n > 0 else f"{'-':>8}"
        print(f"  {label:32}{r:>12{fmt}}{n:>15{fmt}}{ratio}")
rw_series, ne_series = series(last["a"], "rdma_"), series(last["b"], "node_infiniband_")
print(f"{'series exported':34}{rw_series:>12}{ne_series:>15}{rw_series / ne_series:>8.2f}")
print(f"{'bytes per scrape (decompressed)':34}{len(last['a']):>12}{len(last['b']):>15}{len(last['a']) / len(last['b']):>8.2f}")
busy, ncol = last["collect"]
if ncol > 0:
    print(f"rocewatch (last gzip turn): {ncol:.0f} collections in the window, {busy / ncol * 1e3:.2f} ms each "
          f"(its own plugin-duration metric),")
    print(f"  {busy:.2f} s of its {last['rw']['cpu']:.2f} CPU seconds; the rest is storing, deriving, rendering "
          f"and serving /metrics")
PY
if [ "${BARE_READ:-1}" != 0 ]; then
  cargo bench --quiet -p rocewatch-counters-sysfs --bench collect_vs_bare -- "$root" 2>/dev/null | grep -v '^tree:'
fi
