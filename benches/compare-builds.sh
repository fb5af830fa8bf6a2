#!/usr/bin/env bash
# benches/compare-builds.sh BIN_A BIN_B [ROUNDS] [SECONDS]
#
# Two rocewatch binaries (two profiles, the build before and after a change) on the same
# generated host (16 mlx5 ports, integration-tests/fixtures/generate.py --big), alternated
# A B A B ... in one run so that the machine's drift weighs on both: each collects every
# 200 ms and serves /metrics, scraped every 200 ms, for SECONDS (default 20) per turn;
# ROUNDS (default 3) turns each. Reported: CPU seconds per turn and peak RSS of each
# (median over the turns) and B/A. Results go to stdout; docs/PERFORMANCE.md keeps them.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
# The CPU and RSS readers shared by the benches (benches/lib/measure.py).
export PYTHONPATH="$top/benches/lib${PYTHONPATH:+:$PYTHONPATH}"
[ $# -ge 2 ] || { sed -n '2,10p' "$0"; exit 2; }
a=$(realpath "$1") b=$(realpath "$2") rounds=${3:-3} secs=${4:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$(python3 integration-tests/fixtures/generate.py --big "$work/host")
printf '[plugins.builtin.counters-sysfs.options]\nkeep_files_open = "always"\n' > "$work/rocewatch.toml"
python3 - "$a" "$b" "$root" "$work/rocewatch.toml" "$rounds" "$secs" <<'PY'
import os, statistics, subprocess, sys, time, urllib.request
a, b, root, conf, rounds, secs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), float(sys.argv[6])
from measure import cpu, free_port, peak_rss
def turn(binary):
    p = free_port()
    env = dict(os.environ, ROCEWATCH_AGENT__JITTER="0s")
    proc = subprocess.Popen([binary, "run", "--sysfs-root", root, "--interval", "200ms",
                             "--prometheus-listen", f"127.0.0.1:{p}", "--log-level", "warn",
                             "--config", conf], env=env, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{p}/metrics"
    deadline = time.time() + 30
    while True:
        try:
            urllib.request.urlopen(url, timeout=5).read(); break
        except Exception:
            if time.time() > deadline or proc.poll() is not None:
                proc.kill(); sys.exit(f"{binary} did not serve /metrics:\n{proc.stderr.read().decode()}")
            time.sleep(0.1)
    time.sleep(2)
    c0, t0 = cpu(proc.pid), time.time()
    while time.time() - t0 < secs:
        s = time.time()
        urllib.request.urlopen(url, timeout=5).read()
        time.sleep(max(0, 0.2 - (time.time() - s)))
    used, rss = cpu(proc.pid) - c0, peak_rss(proc.pid)
    proc.terminate(); proc.wait(timeout=30)
    return used, rss
res = {a: [], b: []}
for r in range(rounds):
    for binary in (a, b):
        res[binary].append(turn(binary))
med = lambda xs: statistics.median(xs)
ca, cb = med([c for c, _ in res[a]]), med([c for c, _ in res[b]])
ra, rb = med([m for _, m in res[a]]), med([m for _, m in res[b]])
print(f"{rounds} turns each, alternated, {secs:.0f} s each; collect and scrape every 200 ms, 16 ports")
print(f"{'':24}{'A':>10}{'B':>10}{'B/A':>8}")
print(f"{'CPU s per turn (median)':24}{ca:>10.2f}{cb:>10.2f}{cb / max(ca, 1e-9):>8.2f}")
print(f"{'peak RSS MiB (median)':24}{ra:>10.1f}{rb:>10.1f}{rb / ra:>8.2f}")
print(f"{'size MiB':24}{os.path.getsize(a) / 2**20:>10.1f}{os.path.getsize(b) / 2**20:>10.1f}{os.path.getsize(b) / os.path.getsize(a):>8.2f}")
print(f"A: {a}\nB: {b}")
PY
