#!/usr/bin/env bash
# Install what the test suite needs on a fresh Debian 12 / Ubuntu machine (as root, or
# with sudo): a C compiler (for the C test plugins and -sys crates), and the real
# receivers the end-to-end tests start on loopback. Idempotent; fast when all is there.
#
#   - gcc, pkg-config, ca-certificates, curl        (Debian packages)
#   - collectd-core (network, csv, exec plugins)    (Debian package; no service is started)
#   - systemd (systemd-analyze)                     (verifies and scores packaging/systemd/rocewatch.service)
#   - dpkg-dev, fakeroot, binutils, rpm, man-db     (scripts/package.sh builds the .deb and .rpm
#                                                    packages; the tests install the .debs, read
#                                                    the manual page, inspect the .rpm)
#   - ethtool, iproute2, tcpdump                    (to compare our ethtool ioctls with `ethtool -S`
#                                                    on veth pairs the tests create; tcpdump for
#                                                    `rocewatch capture` on such a pair)
#   - libibverbs-dev, librdmacm-dev, libclang-dev,  (to build the verbs probe plugin: rdma-sys
#     clang                                          generates its bindings with bindgen; the
#                                                    rocewatch binary itself links none of it)
#   - slurmctld, slurmd, slurm-client, munge        (a real Slurm on loopback for the Slurm tests:
#                                                    rocewatch_slurm::harness starts its own munged,
#                                                    slurmctld and slurmd in a temporary directory;
#                                                    the packages' services are not used)
#   - victoria-metrics (OTLP/HTTP receiver)         (Debian trixie package, unpacked with
#                                                    dpkg -x into .cache/; nothing from
#                                                    trixie is installed into the system)
#   - prometheus, promtool                          (Debian bookworm package, unpacked the
#                                                    same way: no service is installed)
#   - the soft-RoCE lab image                       (integration-tests/lab/rxe-lab.sh build:
#                                                    qemu-system-x86, debootstrap, cpio from
#                                                    apt; the Debian kernel .deb unpacked and a
#                                                    bookworm guest built into .cache/rxe-lab)
#   - netdevsim.ko for the lab's guest kernel       (integration-tests/lab/netdevsim-build.sh:
#                                                    built once out of tree from Debian's
#                                                    linux-source and headers of that kernel,
#                                                    ~150 MB downloaded, ~1 min; cached in
#                                                    .cache/netdevsim; the .debs are not kept)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

need=()
for p in gcc pkg-config ca-certificates curl collectd-core ethtool iproute2 tcpdump libibverbs-dev librdmacm-dev libclang-dev clang systemd dpkg-dev fakeroot binutils rpm man-db slurmctld slurmd slurm-client munge; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "install-test-deps: apt-get install ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

vm=.cache/victoria-metrics/usr/bin/victoria-metrics
if [ ! -x "$vm" ]; then
  echo "install-test-deps: fetching victoria-metrics (Debian trixie) into .cache/victoria-metrics"
  scripts/fetch-deb.sh trixie victoria-metrics .cache/victoria-metrics >/dev/null
fi
"$vm" -version >/dev/null 2>&1 || { echo "install-test-deps: $vm does not run" >&2; exit 1; }
prom=.cache/prometheus/usr/bin/prometheus
if [ ! -x "$prom" ]; then
  echo "install-test-deps: fetching prometheus (Debian bookworm) into .cache/prometheus"
  scripts/fetch-deb.sh bookworm prometheus .cache/prometheus >/dev/null
fi
"$prom" --version >/dev/null 2>&1 || { echo "install-test-deps: $prom does not run" >&2; exit 1; }
if [ "${ROCEWATCH_SKIP_LAB:-}" != 1 ]; then
  integration-tests/lab/rxe-lab.sh build 2>&1 | sed 's/^/install-test-deps: /'
  $SUDO integration-tests/lab/netdevsim-build.sh 2>&1 | sed 's/^/install-test-deps: /'
fi
echo "install-test-deps: ok ($("$vm" -version 2>&1 | grep -m1 .); $("$prom" --version 2>&1 | grep -m1 .))"
