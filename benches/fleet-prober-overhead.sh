#!/usr/bin/env bash
# benches/fleet-prober-overhead.sh [SECONDS]
#
# What the fleet prober costs the agent (issue #29): one agent with [fleet] probing a
# 600-peer pinglist on 4 paths each (2,400 probes a second, the default bound at 10,000
# hosts), beside one probing a flat list of 1,000 peers at 1 probe/s each (the figures
# benches/probe-agent-overhead.sh gives) and one without probes, all three in the same
# run: CPU share of one core, resident memory, and what one /metrics scrape costs.
# The probes go through integration-tests/fake-probe (no RDMA: an address whose last byte
# is 1-99 answers in 20 us), so this is the host side: the pinglist, the flows and their
# rotation, the per-path statistics and the bounded fleet series. The verbs side per
# probe is the soft-RoCE lab's (docs/PERFORMANCE.md).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
# The CPU and RSS readers shared by the benches (benches/lib/measure.py).
export PYTHONPATH="$top/benches/lib${PYTHONPATH:+:$PYTHONPATH}"
secs=${1:-30}
cargo build --release --quiet -p rocewatch -p fake-probe
work=$(mktemp -d)
trap 'kill $BASE $FLAT $FLEET 2>/dev/null || true; rm -rf "$work"' EXIT
so="$top/target/release/libfake_probe.so"
root=integration-tests/fixtures/mlx5-roce-dual-port/sys
# The fixture's mlx5_0 is 10.0.0.1 (host a, rail 0); 600 peers on the same ToR and rail:
# all of them are a's ToR mesh.
{
  echo "host,rail,addr,tor"
  echo "a,0,10.0.0.1,t1"
  for i in $(seq 0 599); do echo "h$i,0,10.1.$((i / 99)).$((i % 99 + 1)),t1"; done
} > "$work/fleet.csv"
for i in $(seq 1 1000); do echo "ok-20us-$i"; done > "$work/peers"
port() { python3 -c 'from measure import free_port; print(free_port())'; }
bport=$(port); lport=$(port); fport=$(port)
: > "$work/base.toml"
printf '[probes]\npeers_file = "%s"\nplugin = "%s"\ninterval = "1s"\ntimeout = "1s"\nserve = false\n' \
  "$work/peers" "$so" > "$work/flat.toml"
printf '[fleet]\ntopology = "%s"\nhost = "a"\n\n[probes]\nplugin = "%s"\ninterval = "1s"\ntimeout = "1s"\nmax_rate = 2400.0\nserve = false\n' \
  "$work/fleet.csv" "$so" > "$work/fleet.toml"
run() { target/release/rocewatch run --sysfs-root "$root" --prometheus-listen "127.0.0.1:$1" \
  --log-level warn --config "$2" & }
run "$bport" "$work/base.toml"; BASE=$!
run "$lport" "$work/flat.toml"; FLAT=$!
run "$fport" "$work/fleet.toml"; FLEET=$!
python3 - "$secs" "$BASE:$bport" "$FLAT:$lport" "$FLEET:$fport" <<'PY'
import sys, time, urllib.request
secs = float(sys.argv[1])
(base, bport), (flat, lport), (fleet, fport) = [tuple(a.split(":")) for a in sys.argv[2:5]]
from measure import cpu, rss
def scrape(port):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
def total(text, prefix):
    return sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith(prefix))
FLAT_SENT, FLEET_SENT = "rdma_probe_sent_total{", "rdma_probe_fleet_results_total{"
deadline = time.time() + 90
while True:
    try:
        if total(scrape(lport), FLAT_SENT) >= 1000 and total(scrape(fport), FLEET_SENT) >= 2400:
            scrape(bport)
            break
    except Exception as e:
        err = e
    if time.time() > deadline:
        sys.exit(f"the agents never completed a round: {err if 'err' in dir() else 'no probes'}")
    time.sleep(0.2)
time.sleep(2)
pids = (base, flat, fleet)
s0 = (total(scrape(lport), FLAT_SENT), total(scrape(fport), FLEET_SENT))
c0 = [cpu(p) for p in pids]; t0 = time.time()
time.sleep(secs)
wall = time.time() - t0
c1 = [cpu(p) for p in pids]
s1 = (total(scrape(lport), FLAT_SENT), total(scrape(fport), FLEET_SENT))
def per_scrape(pid, port):
    c = cpu(pid)
    for _ in range(20):
        body = scrape(port)
    return (cpu(pid) - c) / 20, len(body.splitlines())
cb, cf, cg = [(b - a) / wall for a, b in zip(c0, c1)]
rb, rf, rg = [rss(p) for p in pids]
flat_rate, fleet_rate = (s1[0] - s0[0]) / wall, (s1[1] - s0[1]) / wall
sb, sf, sg = per_scrape(base, bport), per_scrape(flat, lport), per_scrape(fleet, fport)
print(f"window_s={wall:.1f} flat_probes_per_s={flat_rate:.0f} fleet_probes_per_s={fleet_rate:.0f}")
print(f"cpu_base_pct={100*cb:.2f} cpu_flat_pct={100*cf:.2f} cpu_fleet_pct={100*cg:.2f} "
      f"added_flat_pct={100*(cf-cb):.2f} added_fleet_pct={100*(cg-cb):.2f} "
      f"fleet_over_flat={(cg-cb)/max(cf-cb,1e-9):.2f}")
print(f"cpu_per_probe_us flat={1e6*(cf-cb)/max(flat_rate,1):.1f} fleet={1e6*(cg-cb)/max(fleet_rate,1):.1f}")
print(f"rss_mib base={rb:.1f} flat={rf:.1f} fleet={rg:.1f} added_flat={rf-rb:.1f} added_fleet={rg-rb:.1f}")
print(f"scrape_ms base={1e3*sb[0]:.1f} ({sb[1]} lines) flat={1e3*sf[0]:.1f} ({sf[1]} lines) "
      f"fleet={1e3*sg[0]:.1f} ({sg[1]} lines)")
PY
