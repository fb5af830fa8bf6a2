#!/usr/bin/env bash
# scripts/measure-rails-rss.sh [SECONDS]
#
# The resident memory of `rocewatch run` probing the eight rails of a host against one
# rail, in the same run (issue 50). Four agents on the generated eight-NIC host
# (integration-tests/fixtures/eight-rails: mlx5_R carries rail R at 10.0.R.1), each
# probing through integration-tests/fake-probe (no RDMA: an address whose last byte is
# 1-99 answers in 20 us), so this is the agent's side:
#   none   no probes (the agent's own memory);
#   one    [fleet] on rail 0 only (600 peers x 4 paths = 2,400 flows a second);
#   eight  [fleet] on all eight rails, the default max_peers = 600 over all rails
#          (the same 2,400 flows, spread over eight probe plugin instances);
#   full   all eight rails, 600 peers each (max_peers = 4800: 19,200 flows a second).
# After the agents have probed every flow once, SECONDS more (default 30) of rounds; then
# VmHWM (peak) and VmRSS of each from /proc/PID/status, the flows a second each probed
# and the rails they were on (the `rail` labels of its fleet results).
#
# ROCEWATCH_BIN and FAKE_PROBE_SO name builds to use; otherwise the release builds of
# rocewatch and fake-probe are made (cargo build --release).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
secs=${1:-30}
if [ -z "${ROCEWATCH_BIN:-}" ] || [ -z "${FAKE_PROBE_SO:-}" ]; then
  cargo build --release --quiet -p rocewatch -p fake-probe
fi
bin=${ROCEWATCH_BIN:-$top/target/release/rocewatch}
so=${FAKE_PROBE_SO:-$top/target/release/libfake_probe.so}
root=integration-tests/fixtures/eight-rails/sys
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT

# This host is the fixture's gpu001 (rail R at 10.0.R.1 on leaf-r01-railR); 600 peers
# h0..h599 on the same leaves, rail R of peer i at 10.<1 + i/99>.R.<i%99 + 1>.
topology() { # RAILS
  echo "host,rail,addr,tor"
  for r in $(seq 0 $(($1 - 1))); do echo "gpu001,$r,10.0.$r.1,leaf-r01-rail$r"; done
  for i in $(seq 0 599); do
    for r in $(seq 0 $(($1 - 1))); do
      echo "h$i,$r,10.$((1 + i / 99)).$r.$((i % 99 + 1)),leaf-r01-rail$r"
    done
  done
}
topology 1 > "$work/one.csv"
topology 8 > "$work/eight.csv"
fleet() { # TOPOLOGY MAX_PEERS MAX_RATE
  printf '[fleet]\ntopology = "%s"\nhost = "gpu001"\nmax_peers = %s\n\n[probes]\nplugin = "%s"\ninterval = "1s"\ntimeout = "1s"\nmax_rate = %s\nserve = false\n' \
    "$1" "$2" "$so" "$3"
}
: > "$work/none.toml"
fleet "$work/one.csv" 600 2400.0 > "$work/one.toml"
fleet "$work/eight.csv" 600 2400.0 > "$work/eight.toml"
fleet "$work/eight.csv" 4800 19200.0 > "$work/full.toml"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
agents=()
for case in none one eight full; do
  p=$(port)
  "$bin" run --sysfs-root "$root" --prometheus-listen "127.0.0.1:$p" --log-level warn \
    --config "$work/$case.toml" 2> "$work/$case.log" &
  pids+=($!)
  agents+=("$case:$!:$p")
done

python3 - "$secs" "$work" "${agents[@]}" <<'PY'
import sys, time, urllib.request
secs, work = float(sys.argv[1]), sys.argv[2]
agents = [a.split(":") for a in sys.argv[3:]]
RESULTS = "rdma_probe_fleet_results_total{"
WANT = {"none": 0, "one": 2400, "eight": 2400, "full": 19200}
def status(pid):
    out = {}
    for l in open(f"/proc/{pid}/status"):
        k, _, v = l.partition(":")
        if k in ("VmHWM", "VmRSS"):
            out[k] = int(v.split()[0]) / 1024
    return out
def scrape(port):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
def results(text):
    total, rails = 0.0, set()
    for l in text.splitlines():
        if l.startswith(RESULTS):
            total += float(l.split()[-1])
            rails.add(l.split('rail="', 1)[1].split('"', 1)[0])
    return total, rails
def log(case):
    return open(f"{work}/{case}.log").read()[-3000:]
deadline = time.time() + 120
while True:
    done, err = True, None
    for case, pid, port in agents:
        try:
            if results(scrape(port))[0] < WANT[case]:
                done = False
        except Exception as e:
            done, err = False, e
    if done:
        break
    if time.time() > deadline:
        msgs = "\n".join(f"--- {c} (its log)\n{log(c)}" for c, _, _ in agents)
        sys.exit(f"the agents never probed every flow once ({err})\n{msgs}")
    time.sleep(0.5)
first = {case: results(scrape(port))[0] for case, _, port in agents}
t0 = time.time()
time.sleep(secs)
wall = time.time() - t0
base = status(agents[0][1])
print(f"window_s={wall:.1f} (after every flow was probed once)")
for case, pid, port in agents:
    total, rails = results(scrape(port))
    s = status(pid)
    print(f"{case:<6} rails={len(rails)} flows_per_s={(total - first[case]) / wall:.0f} "
          f"VmHWM_MiB={s['VmHWM']:.1f} VmRSS_MiB={s['VmRSS']:.1f} "
          f"added_HWM_MiB={s['VmHWM'] - base['VmHWM']:.1f} added_RSS_MiB={s['VmRSS'] - base['VmRSS']:.1f}")
PY
