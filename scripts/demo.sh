#!/usr/bin/env bash
# First contact: build rocewatch and run the demo against a simulated fabric.
# Installs what is needed on a fresh Debian/Ubuntu machine (a C compiler, and Rust through
# rustup if cargo is missing), then runs `rocewatch demo` (Ctrl-C to stop). Extra
# arguments go to the demo, e.g. scripts/demo.sh --otlp-endpoint http://127.0.0.1:4318/v1/metrics
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if ! command -v cc >/dev/null; then
  echo "demo.sh: installing gcc"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq gcc curl ca-certificates >/dev/null
fi
if ! command -v cargo >/dev/null; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "demo.sh: installing Rust with rustup (into ~/.cargo)"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
fi
cargo build --release --quiet -p rocewatch
exec target/release/rocewatch demo "$@"
