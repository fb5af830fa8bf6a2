#!/usr/bin/env bash
# benches/scale-2000-ports.sh [SECONDS]
#
# The agent at 2000 ports (issue 18): a generated tree of 1000 mlx5 devices x 2 ports
# (integration-tests/fixtures/generate.py --scale, 104 000 counter files), in a temporary
# directory. Measured: `collect --once` in JSON and Prometheus format (wall time, CPU,
# peak RSS with /usr/bin/time), then `run` at a 1 s interval with /metrics scraped every
# second (gzip accepted, as Prometheus does) for SECONDS (default 30): CPU and RSS, with
# the QoS view read at the default interval and again every 5 s; then `run` with OTLP to an endpoint that
# refuses connections (the retry queue filling, export every 1 s). No peer reads this tree
# (node_exporter has no hw_counters), so the peers are the same release binary on the
# 16-port tree of generate.py --big (per-port cost: linear scaling is a ratio of 1.0) and,
# with BEFORE=path/to/an/older/rocewatch, that binary on the same tree in the same run.
# The tree is regular files, not sysfs: keep_files_open = "always" makes the collector keep
# them open as it does on sysfs (pass KEEP=never for the open-per-read path).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
secs=${1:-30}
keep=${KEEP:-always}
cargo build --release --quiet -p rocewatch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "generating 1000 devices x 2 ports (about a minute)..." >&2
big=$(python3 integration-tests/fixtures/generate.py --scale "$work/scale" 1000 2)
small=$(python3 integration-tests/fixtures/generate.py --big "$work/small")
# The defaults but for keep_files_open; and the same with the QoS view read again every
# 5 s (default 60 s), so that the window holds a few re-reads of its 72 000 series.
printf '[plugins.builtin.counters-sysfs.options]\nkeep_files_open = "%s"\n' "$keep" > "$work/rocewatch.toml"
printf '[qos]\ninterval = "5s"\n' | cat "$work/rocewatch.toml" - > "$work/qos-5s.toml"
once() { # BINARY ROOT FORMAT -> "wall_s cpu_s rss_mib bytes"
  /usr/bin/time -f "%e %U %S %M" -o "$work/time" "$1" collect --once --format "$3" \
    --sysfs-root "$2" --config "$work/rocewatch.toml" > "$work/out" 2> "$work/err" || true
  read -r wall user sys rss < "$work/time"
  awk -v w="$wall" -v u="$user" -v s="$sys" -v r="$rss" -v b="$(wc -c < "$work/out")" \
    'BEGIN { printf "%s %.2f %.1f %s\n", w, u + s, r / 1024, b }'
}
bins=("target/release/rocewatch")
[ -n "${BEFORE:-}" ] && bins+=("$BEFORE")
for bin in "${bins[@]}"; do
  echo "== $bin"
  printf '%-34s %8s %8s %9s %11s\n' "collect --once" "wall s" "CPU s" "RSS MiB" "bytes"
  for fmt in json prometheus; do
    for tree in small big; do
      root=$small; ports=16; [ "$tree" = big ] && { root=$big; ports=2000; }
      once "$bin" "$root" "$fmt" > "$work/r"
      read -r wall cpu rss bytes < "$work/r"
      printf '%-34s %8s %8s %9s %11s\n' "$fmt, $ports ports" "$wall" "$cpu" "$rss" "$bytes"
      [ "$tree" = big ] && grep -m3 partial "$work/err" || true
    done
  done
  echo "run, 1 s interval, /metrics scraped every second, $secs s:"
  python3 benches/scale-run.py "$bin" "$big" "$secs" --config "$work/rocewatch.toml"
  echo "run, the same, the QoS view read every 5 s, $secs s:"
  python3 benches/scale-run.py "$bin" "$big" "$secs" --config "$work/qos-5s.toml"
  refused=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  echo "run, 1 s interval, OTLP every 1 s to 127.0.0.1:$refused (refused), $secs s:"
  python3 benches/scale-run.py "$bin" "$big" "$secs" --config "$work/rocewatch.toml" \
    --otlp-endpoint "http://127.0.0.1:$refused/v1/metrics" --export-interval 1s
done
