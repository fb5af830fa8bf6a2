#!/usr/bin/env bash
# netdevsim-build.sh - build netdevsim.ko for the soft-RoCE lab's guest kernel, once (cached).
#
# Debian's kernels do not build netdevsim (`# CONFIG_NETDEVSIM is not set`), whose SR-IOV
# emulation answers RTM_GETLINK's IFLA_VFINFO_LIST on a real kernel. This builds only
# drivers/net/netdevsim out of tree against Debian's headers of the lab's kernel, with the
# sources from Debian's linux-source package of the same upload, and copies the lab kernel's
# psample.ko beside it (netdevsim depends on it; the guest's initrd does not carry it).
# Nothing is installed on the host: the .debs are downloaded and unpacked (dpkg -x) into a
# temporary directory, removed afterwards.
#
# Output: .cache/netdevsim/KV/{netdevsim.ko,psample.ko,BUILD.txt} (BUILD.txt: the packages,
# their download size, the build's wall time, the module's vermagic). The counters boot
# (counters.sh, guest a) loads them from the share (lab.rs copies them there).
# Needs: the lab's kernel unpacked (rxe-lab.sh build), gcc-12, make, apt-get; run as root.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
log() { echo "netdevsim: $*" >&2; }
# The kernel rxe-lab.sh boots: the image package linux-image-amd64 depends on now.
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
kdir=$top/.cache/rxe-lab/kernel/$kpkg
[ -n "$kpkg" ] && [ -e "$kdir/.done" ] || { log "the lab kernel ($kpkg) is not unpacked yet (integration-tests/lab/rxe-lab.sh build)"; exit 1; }
kv=$(ls "$kdir/lib/modules")
out=$top/.cache/netdevsim/$kv
if [ -e "$out/.done" ]; then log "cached: $out"; exit 0; fi
command -v gcc-12 >/dev/null && command -v make >/dev/null || { log "needs gcc-12 and make"; exit 1; }
# The upload the lab kernel came from: the candidate of its image package, as rxe-lab.sh
# downloaded it. The headers of an ABI (6.1.0-N) keep their symbol CRCs across uploads.
ver=$(apt-cache policy "linux-image-$kv" | awk '/Candidate:/{print $2}')
[ -n "$ver" ] && [ "$ver" != "(none)" ] || { log "apt knows no linux-image-$kv (apt-get update?)"; exit 1; }
src=linux-source-${kv%.0-*}   # 6.1.0-57-amd64 -> linux-source-6.1
series=${src#linux-source-}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT; chmod 777 "$tmp"
t0=$(date +%s.%N)
(cd "$tmp" && apt-get download "$src=$ver" "linux-headers-$kv=$ver" "linux-headers-${kv%-amd64}-common=$ver" \
  "linux-kbuild-$series=$ver" >/dev/null 2>&1) || { log "apt-get download of $src, the headers and kbuild $ver failed"; exit 1; }
mb=$(du -cm "$tmp"/*.deb | awk 'END{print $1}')
t1=$(date +%s.%N)
for d in "$tmp"/linux-headers-*.deb "$tmp"/linux-kbuild-*.deb; do dpkg -x "$d" "$tmp/root"; done
hdr=$tmp/root/usr/src/linux-headers-$kv
# The arch headers' Makefile includes the common ones by their installed path.
sed -i "s|include /usr/src/|include $tmp/root/usr/src/|" "$hdr/Makefile"
dpkg-deb --fsys-tarfile "$tmp/${src}_"*.deb | tar -xO "./usr/src/$src.tar.xz" |
  tar -xJ -C "$tmp" "$src/drivers/net/netdevsim"
t2=$(date +%s.%N)
make -C "$hdr" M="$tmp/$src/drivers/net/netdevsim" CONFIG_NETDEVSIM=m -j"$(nproc)" modules > "$tmp/make.log" 2>&1 ||
  { cat "$tmp/make.log" >&2; log "the build failed"; exit 1; }
t3=$(date +%s.%N)
ko=$tmp/$src/drivers/net/netdevsim/netdevsim.ko
magic=$(modinfo -F vermagic "$ko")
want=$(modinfo -F vermagic "$(find "$kdir/lib/modules/$kv" -name psample.ko | head -n1)")
[ "$magic" = "$want" ] || { log "vermagic '$magic' is not the lab kernel's '$want'"; exit 1; }
rm -rf "$out.new" && mkdir -p "$out.new"
cp "$ko" "$out.new/"
strip --strip-debug "$out.new/netdevsim.ko"   # 5.5 MB with its debug info, for the 9p share
cp "$(find "$kdir/lib/modules/$kv" -name psample.ko | head -n1)" "$out.new/"
el() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", b-a}'; }
{ echo "packages=$src linux-headers-$kv linux-headers-${kv%-amd64}-common linux-kbuild-$series ($ver)"
  echo "download_mb=$mb download_s=$(el "$t0" "$t1")"
  echo "unpack_s=$(el "$t1" "$t2") build_s=$(el "$t2" "$t3") cpus=$(nproc)"
  echo "vermagic=$magic"
  echo "depends=$(modinfo -F depends "$ko")"
} > "$out.new/BUILD.txt"
touch "$out.new/.done"
rm -rf "$out" && mv "$out.new" "$out"
log "built for $kv: $(tr '\n' ' ' < "$out/BUILD.txt")"
