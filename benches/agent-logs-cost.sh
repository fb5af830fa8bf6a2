#!/usr/bin/env bash
# benches/agent-logs-cost.sh BIN [ROUNDS] [SECONDS] [LOG_LEVEL]
#
# What `[exporters.otlp] agent_logs = true` costs: one rocewatch binary on the generated
# host (16 mlx5 ports, integration-tests/fixtures/generate.py --big), collecting every
# 200 ms with /metrics scraped every 200 ms and OTLP/HTTP metrics every second to a local
# receiver (this script's, answering 200 to everything), with agent_logs off and on
# alternated (off on off on ...) so that the machine's drift weighs on both; SECONDS
# (default 20) per turn, ROUNDS (default 3) turns each, at LOG_LEVEL (default info, as
# `run` logs by default; `debug` makes it log many lines a second). Reported: CPU seconds
# per turn and peak RSS (median over the turns), and the log records the receiver got at
# /v1/logs. Results go to stdout; docs/PERFORMANCE.md keeps them.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
# The CPU and RSS readers shared by the benches (benches/lib/measure.py).
export PYTHONPATH="$top/benches/lib${PYTHONPATH:+:$PYTHONPATH}"
[ $# -ge 1 ] || { sed -n '2,13p' "$0"; exit 2; }
bin=$(realpath "$1") rounds=${2:-3} secs=${3:-20} level=${4:-info}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$(python3 integration-tests/fixtures/generate.py --big "$work/host")
python3 - "$bin" "$root" "$work" "$rounds" "$secs" "$level" <<'PY'
import http.server, os, statistics, subprocess, sys, threading, time, urllib.request
binary, root, work, rounds, secs, level = sys.argv[1:4] + [int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]]
from measure import cpu, free_port, peak_rss
got = {"/v1/metrics": 0, "/v1/logs": 0}
class Receiver(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        got[self.path] = got.get(self.path, 0) + 1
        self.send_response(200); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
threading.Thread(target=srv.serve_forever, daemon=True).start()
endpoint = f"http://127.0.0.1:{srv.server_address[1]}/v1/metrics"
def turn(logs):
    conf = f"{work}/rocewatch-{logs}.toml"
    with open(conf, "w") as f:
        f.write('[plugins.builtin.counters-sysfs.options]\nkeep_files_open = "always"\n\n'
                f'[exporters.otlp]\nendpoint = "{endpoint}"\ninterval = "1s"\n'
                f'agent_logs = {"true" if logs else "false"}\n')
    p = free_port()
    env = dict(os.environ, ROCEWATCH_AGENT__JITTER="0s")
    env.pop("RUST_LOG", None)
    with open(f"{work}/stderr-{logs}.log", "w") as err:
        proc = subprocess.Popen([binary, "run", "--sysfs-root", root, "--interval", "200ms",
                                 "--prometheus-listen", f"127.0.0.1:{p}", "--log-level", level,
                                 "--config", conf], env=env, stderr=err)
    url = f"http://127.0.0.1:{p}/metrics"
    deadline = time.time() + 30
    while True:
        try:
            urllib.request.urlopen(url, timeout=5).read(); break
        except Exception:
            if time.time() > deadline or proc.poll() is not None:
                proc.kill(); sys.exit(f"{binary} did not serve /metrics:\n{open(f'{work}/stderr-{logs}.log').read()}")
            time.sleep(0.1)
    time.sleep(2)
    logs0 = got["/v1/logs"]
    c0, t0 = cpu(proc.pid), time.time()
    while time.time() - t0 < secs:
        s = time.time()
        urllib.request.urlopen(url, timeout=5).read()
        time.sleep(max(0, 0.2 - (time.time() - s)))
    used, rss = cpu(proc.pid) - c0, peak_rss(proc.pid)
    proc.terminate(); proc.wait(timeout=30)
    return used, rss, got["/v1/logs"] - logs0
res = {False: [], True: []}
for r in range(rounds):
    for logs in (False, True):
        res[logs].append(turn(logs))
med = lambda xs: statistics.median(xs)
c = {k: med([x[0] for x in v]) for k, v in res.items()}
m = {k: med([x[1] for x in v]) for k, v in res.items()}
print(f"{rounds} turns each, alternated, {secs:.0f} s each; collect and scrape every 200 ms, "
      f"OTLP metrics every 1 s, 16 ports, --log-level {level}")
print(f"{'':28}{'off':>10}{'on':>10}{'on/off':>8}")
print(f"{'CPU s per turn (median)':28}{c[False]:>10.2f}{c[True]:>10.2f}{c[True] / max(c[False], 1e-9):>8.2f}")
print(f"{'peak RSS MiB (median)':28}{m[False]:>10.1f}{m[True]:>10.1f}{m[True] / m[False]:>8.2f}")
print(f"{'/v1/logs requests per turn':28}{med([x[2] for x in res[False]]):>10}{med([x[2] for x in res[True]]):>10}")
print(f"binary: {binary}")
PY
