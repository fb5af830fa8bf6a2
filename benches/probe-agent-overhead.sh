#!/usr/bin/env bash
# benches/probe-agent-overhead.sh [PEERS] [SECONDS]
#
# What scheduled probing costs the agent itself, natively, at the issue's target scale
# (default 1000 peers at 1 probe/s each), against the same agent without probes, in the
# same run. The probes go through `integration-tests/fake-probe` (no RDMA: every peer
# answers in 20 us), so this measures the host side of a round: the C ABI call with its
# JSON, the per-peer counters and histograms, the store and rules; then, apart, what one
# /metrics scrape of all those series costs (Prometheus scrapes every 15 s or more). The verbs side per probe (post, completion) is measured in the soft-RoCE lab
# (integration-tests/tests/lab.rs, lab_probe_overhead_*); docs/PERFORMANCE.md adds the two.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
# The CPU and RSS readers shared by the benches (benches/lib/measure.py).
export PYTHONPATH="$top/benches/lib${PYTHONPATH:+:$PYTHONPATH}"
peers=${1:-1000}
secs=${2:-30}
cargo build --release --quiet -p rocewatch -p fake-probe
work=$(mktemp -d)
trap 'kill $BASE $LOAD 2>/dev/null || true; rm -rf "$work"' EXIT
for i in $(seq 1 "$peers"); do echo "ok-20us-$i"; done > "$work/peers"
root=integration-tests/fixtures/mlx5-roce-dual-port/sys
port() { python3 -c 'from measure import free_port; print(free_port())'; }
bport=$(port); lport=$(port)
printf '[probes]\npeers_file = "%s"\nplugin = "%s"\ninterval = "1s"\ntimeout = "1s"\nserve = false\n' \
  "$work/peers" "$top/target/release/libfake_probe.so" > "$work/load.toml"
: > "$work/base.toml"
run() { target/release/rocewatch run --sysfs-root "$root" --prometheus-listen "127.0.0.1:$1" \
  --log-level warn --config "$2" & }
run "$bport" "$work/base.toml"; BASE=$!
run "$lport" "$work/load.toml"; LOAD=$!
python3 - "$BASE" "$LOAD" "$bport" "$lport" "$secs" "$peers" <<'PY'
import sys, time, urllib.request
base, load, bport, lport, secs, peers = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                                         sys.argv[4], float(sys.argv[5]), int(sys.argv[6]))
from measure import cpu, rss
def scrape(port):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
def sent(text):
    return sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith("rdma_probe_sent_total{"))
deadline = time.time() + 60
while time.time() < deadline:
    try:
        if sent(scrape(lport)) >= peers:
            scrape(bport); break
    except Exception:
        pass
    time.sleep(0.2)
time.sleep(2)
s0 = sent(scrape(lport)); c0 = (cpu(base), cpu(load)); t0 = time.time()
time.sleep(secs)
wall = time.time() - t0
c1 = (cpu(base), cpu(load)); s1 = sent(scrape(lport))
# Scrapes apart: 20 in a row, CPU per scrape of each agent.
def per_scrape(pid, port):
    c = cpu(pid)
    for _ in range(20):
        body = scrape(port)
    return (cpu(pid) - c) / 20, len(body.splitlines())
sb, lb = per_scrape(base, bport), per_scrape(load, lport)
cb, cl = c1[0] - c0[0], c1[1] - c0[1]
rb, rl = rss(base), rss(load)
rate = (s1 - s0) / wall
print(f"peers={peers} window_s={wall:.1f} probes_per_s={rate:.0f}")
print(f"cpu_base_pct={100*cb/wall:.2f} cpu_probes_pct={100*cl/wall:.2f} "
      f"cpu_added_pct={100*(cl-cb)/wall:.2f} cpu_per_probe_us={1e6*(cl-cb)/max(s1-s0,1):.1f}")
print(f"rss_base_mib={rb:.1f} rss_probes_mib={rl:.1f} rss_added_mib={rl-rb:.1f} "
      f"rss_per_peer_kib={1024*(rl-rb)/peers:.2f} rss_ratio={rl/rb:.2f}")
print(f"scrape_base_ms={1e3*sb[0]:.1f} ({sb[1]} lines) scrape_probes_ms={1e3*lb[0]:.1f} ({lb[1]} lines): "
      f"at one scrape per 15 s, {100*lb[0]/15:.2f} % of a core")
PY
