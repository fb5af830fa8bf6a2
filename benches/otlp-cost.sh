#!/usr/bin/env bash
# benches/otlp-cost.sh BEFORE AFTER [PORTS] [SECONDS]
#
# What OTLP costs next to the Prometheus listener (issue 31's table), for two rocewatch
# binaries (the build before and after a change), alternated in one run: on a generated
# tree of PORTS ports (default 200: PORTS/2 mlx5 devices x 2 ports), `rocewatch run`
# collecting every second with /metrics scraped every second (gzip accepted, as Prometheus
# does), then the same with OTLP/HTTP every second to a live receiver (VictoriaMetrics
# from .cache when scripts/install-test-deps.sh put it there, else a Python receiver that
# answers 200), the same without compression (gzip is the default: its cost), then to an
# endpoint that refuses connections (the retry queue filling).
# CPU over SECONDS (default 20) and mean RSS (benches/scale-run.py), each build's OTLP
# runs as ratios of its own Prometheus run. Results go to stdout; docs/PERFORMANCE.md
# keeps them.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
# The port and process readers shared by the benches (benches/lib/measure.py).
export PYTHONPATH="$top/benches/lib${PYTHONPATH:+:$PYTHONPATH}"
[ $# -ge 2 ] || { sed -n '2,14p' "$0"; exit 2; }
before=$(realpath "$1") after=$(realpath "$2") ports=${3:-200} secs=${4:-20}
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
free_port() { python3 -c 'from measure import free_port; print(free_port())'; }
root=$(python3 integration-tests/fixtures/generate.py --scale "$work/tree" $((ports / 2)) 2)
printf '[plugins.builtin.counters-sysfs.options]\nkeep_files_open = "always"\n' > "$work/rocewatch.toml"
# The OTLP exporter's own section, for its compression (the endpoint comes from the flag).
printf '[exporters.otlp]\nendpoint = "http://127.0.0.1:1/v1/metrics"\ncompression = "none"\n' | cat "$work/rocewatch.toml" - > "$work/plain.toml"
live=$(free_port)
vm=.cache/victoria-metrics/usr/bin/victoria-metrics
if [ -x "$vm" ]; then
  "$vm" -httpListenAddr "127.0.0.1:$live" -storageDataPath "$work/vm" -loggerLevel ERROR >/dev/null 2>&1 &
  pids+=($!)
  url="http://127.0.0.1:$live/opentelemetry/v1/metrics"
  receiver="VictoriaMetrics $("$vm" -version 2>&1 | head -1)"
else
  python3 - "$live" <<'PY' &
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
  pids+=($!)
  url="http://127.0.0.1:$live/v1/metrics"
  receiver="a Python receiver answering 200"
fi
until curl -s -o /dev/null "http://127.0.0.1:$live/" 2>/dev/null || python3 -c "import socket; socket.create_connection(('127.0.0.1', $live), 1)" 2>/dev/null; do sleep 0.2; done
refused=$(free_port)
run() { # BINARY MODE -> "cpu_percent rss_mib"
  local extra=()
  case $2 in
    live) extra=(--otlp-endpoint "$url" --export-interval 1s) ;;
    plain) extra=(--otlp-endpoint "$url" --export-interval 1s) ;;
    refused) extra=(--otlp-endpoint "http://127.0.0.1:$refused/v1/metrics" --export-interval 1s) ;;
  esac
  local conf=$work/rocewatch.toml
  [ "$2" = plain ] && conf=$work/plain.toml
  python3 benches/scale-run.py "$1" "$root" "$secs" --config "$conf" "${extra[@]}" |
    sed -n 's/.*CPU \([0-9.]*\)% of a core; RSS mean \([0-9.]*\) MiB.*/\1 \2/p'
}
declare -A cpu rss
for mode in prometheus live plain refused; do
  for build in before after; do
    bin=$before; [ $build = after ] && bin=$after
    read -r c r < <(run "$bin" "$mode") || { echo "benches/scale-run.py gave no CPU and RSS for $build ($bin), $mode" >&2; exit 1; }
    cpu[$build.$mode]=$c rss[$build.$mode]=$r
  done
done
echo "$ports ports, collect and scrape every 1 s, OTLP every 1 s, $secs s per run; live receiver: $receiver"
printf '%-44s %10s %10s %10s %10s\n' "" "before CPU%" "RSS MiB" "after CPU%" "RSS MiB"
for mode in prometheus live plain refused; do
  label=$mode
  [ $mode = prometheus ] && label="Prometheus listener, scraped with gzip"
  [ $mode = live ] && label="+ OTLP/HTTP to a live receiver"
  [ $mode = plain ] && label="  the same, compression = none"
  [ $mode = refused ] && label="+ OTLP to a refused endpoint"
  printf '%-44s %10s %10s %10s %10s\n' "$label" "${cpu[before.$mode]}" "${rss[before.$mode]}" "${cpu[after.$mode]}" "${rss[after.$mode]}"
done
# A ratio, or "-" when the Prometheus run's figure is 0: scale-run.py gives CPU to a tenth
# of a point of a core, and a short run of a few ports rounds to 0.0 (no ratio to give).
ratio() { python3 -c "a, b = $1, $2; print(f'x{a / b:.2f}' if b > 0 else '-')"; }
for build in before after; do
  echo "$build: OTLP live ${cpu[$build.live]}/${cpu[$build.prometheus]} = $(ratio "${cpu[$build.live]}" "${cpu[$build.prometheus]}") CPU, $(ratio "${rss[$build.live]}" "${rss[$build.prometheus]}") RSS; uncompressed $(ratio "${cpu[$build.plain]}" "${cpu[$build.prometheus]}") CPU; refused $(ratio "${cpu[$build.refused]}" "${cpu[$build.prometheus]}") CPU, $(ratio "${rss[$build.refused]}" "${rss[$build.prometheus]}") RSS"
  if python3 -c "import sys; sys.exit(0 if ${cpu[$build.prometheus]} > 0 else 1)"; then :; else
    echo "  ($build: the Prometheus run's CPU rounds to 0.0 % of a core over $secs s: no CPU ratio; run longer or with more ports)"
  fi
done
