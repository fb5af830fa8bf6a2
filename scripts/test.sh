#!/usr/bin/env bash
# The whole test suite, from a fresh clone on a fresh Debian/Ubuntu machine:
# installs system packages and test receivers, checks formatting and lints, runs every
# test (unit, fixture trees, real .so plugins, OTLP to a real VictoriaMetrics, demo).
#
#   scripts/test.sh            everything
#   scripts/test.sh -- NAME    only tests matching NAME (passed to cargo test)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

command -v cargo >/dev/null || { echo "test.sh: cargo not found; install Rust with rustup (https://rustup.rs)" >&2; exit 1; }
scripts/install-test-deps.sh

# A clean clone builds once: incremental caches would only double the target folder.
# The build needs about 8 GiB (the debug test build, clippy's, the .deb's release build).
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi
free_kib=$(df -Pk . | awk 'NR == 2 { print $4 }')
echo "test.sh: $((free_kib / 1024 / 1024)) GiB free where the build goes"
if [ "${free_kib:-0}" -lt $((8 * 1024 * 1024)) ]; then
  echo "test.sh: warning: less than 8 GiB free here; the build may fail with 'No space left on device'" >&2
fi

filter=()
if [ "${1:-}" = "--" ]; then shift; filter=("$@"); fi

if [ ${#filter[@]} -eq 0 ]; then
  echo "== cargo fmt --check"
  cargo fmt --all -- --check
  echo "== cargo clippy"
  cargo clippy --workspace --all-targets --quiet -- -D warnings
fi
echo "== cargo test"
mkdir -p target
log=target/test-output.log
# Every component is required here (a plain `cargo test` skips what is missing, saying
# so): a receiver or the lab image that is missing fails its test, and any SKIPPED line
# fails the run.
ROCEWATCH_REQUIRE_ALL=1 \
ROCEWATCH_VICTORIA_METRICS="$top/.cache/victoria-metrics/usr/bin/victoria-metrics" \
ROCEWATCH_PROMETHEUS="$top/.cache/prometheus/usr/bin/prometheus" \
  cargo test --workspace --all-features "${filter[@]}" 2>&1 | tee "$log"
# One closing line for the whole run (cargo prints one per test binary).
awk '/^test result:/ { p += $4; f += $6; i += $8 } /^SKIPPED: / { s += 1 } END { printf "%d passed, %d failed, %d ignored, %d skipped\n", p, f, i, s }' "$log"
if grep -q '^SKIPPED: ' "$log"; then
  echo "test.sh: a test was skipped (see the SKIPPED lines above): scripts/test.sh runs every test" >&2
  grep '^SKIPPED: ' "$log" >&2
  exit 1
fi
