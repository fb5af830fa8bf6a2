#!/usr/bin/env bash
# rxe-lab.sh - real soft-RoCE (rdma_rxe) inside nested QEMU guests, for integration tests.
#
# rocewatch's copy of the project's shared lab script (../shared/lab/rxe-lab.sh), changed
# only where marked "rocewatch:": the cache lives in the repository (.cache/rxe-lab), the
# one-off KVM probe gives up after 20 s, and RXE_LAB_NICS=2 gives each guest of a pair a
# second NIC on a second link (a second rail).
#
# Works on a Debian 12 (bookworm) x86_64 host as root, without RDMA support in the host kernel.
# The guest runs the stock Debian bookworm kernel (linux-image-amd64, which ships rdma_rxe.ko)
# and a debootstrap'ed bookworm userland (rdma-core, ibverbs-utils, rdmacm-utils, perftest,
# iproute2, tcpdump, nftables) packed as an initramfs. The host is never modified except by `apt-get install`
# of the tools below; the kernel .deb is only downloaded and unpacked (dpkg -x).
#
# Usage:
#   rxe-lab.sh build                          install deps, build/cached kernel + rootfs + initrd
#   rxe-lab.sh run [--pair] CMDFILE [OUTDIR]  boot guest(s), run CMDFILE (bash) in each, power off
#   rxe-lab.sh selftest [OUTDIR]              build, then run the built-in demo in --pair mode
#   rxe-lab.sh demo-cmd > FILE                print the built-in demo command file
#
# Inside the guest the command file runs as root under bash, with the rxe device already created
# (modprobe rdma_rxe ib_uverbs rdma_ucm ib_umad; rdma link add rxe0 type rxe netdev eth0) unless
# RXE_LAB_SETUP=0. Environment seen by the command file:
#   RXE_ROLE      single | a | b           (--pair boots two guests: a and b)
#   RXE_SELF_IP   10.0.2.15 (single, QEMU user net) or 192.168.100.1 (a) / 192.168.100.2 (b)
#   RXE_PEER_IP   the other guest's IP (pair mode), empty in single mode
#   RXE_DEV=rxe0  RXE_NETDEV=eth0
#   with RXE_LAB_NICS=2 (pair mode): RXE_NETDEV1=eth1, RXE_SELF_IP1 192.168.101.1 (a) /
#   192.168.101.2 (b), RXE_PEER_IP1 the other's; eth1 is up with its address, and the
#   command file makes its rxe device itself (rdma link add rxe1 type rxe netdev eth1) when
#   it wants one, so that a script written for one device sees one until then.
# Host paths visible in the guest (virtio-9p): OUTDIR at /mnt/host, $RXE_LAB_SHARE at /mnt/extra.
# Results on the host: OUTDIR/guest-<role>.log (command stdout+stderr), OUTDIR/exit-<role>
# (command exit status), OUTDIR/console-<role>.log (serial console), OUTDIR/timings.txt.
# Exit status of `run`: 0 iff every guest's command exited 0 and no guest timed out.
#
# Environment knobs (all optional):
#   RXE_LAB_DIR=/tmp/rxe-lab/work  cache/build dir     RXE_LAB_ACCEL=auto|kvm|tcg (auto: probe KVM once, cache)
#   RXE_LAB_MEM=1024  RXE_LAB_SMP=1  RXE_LAB_TIMEOUT=900 (seconds per guest)
#   RXE_LAB_MIRROR=URL (default: the Debian mirror this machine's apt is configured with)
#   RXE_LAB_EXTRA_PKGS="pkg1,pkg2"  (guest packages)
#   RXE_LAB_SHARE=/some/host/dir  (read-write 9p mount at /mnt/extra, e.g. host-built test binaries)
#   RXE_LAB_SETUP=1  (0: don't create rxe0 in init)
#   RXE_LAB_NICS=1  (2: --pair guests get a second virtio NIC, eth1, linked to each other)
set -euo pipefail

# rocewatch: cache under the repository, never in /tmp
REPO=$(cd "$(dirname "$0")/../.." && pwd)
W=${RXE_LAB_DIR:-$REPO/.cache/rxe-lab}
# The guest is bootstrapped from the same Debian mirror the host's apt already uses.
host_mirror() {
  { grep -h -A3 -E '^Types:.*deb' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/{print $2}';
    grep -h -E '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '{for(i=2;i<=NF;i++) if($i ~ /^http/){print $i; break}}'; } |
    grep -v -E 'security|nodesource|cloud' | head -n1 || true
}
MIRROR=${RXE_LAB_MIRROR:-$(host_mirror)}
[ -n "$MIRROR" ] || { echo "rxe-lab: cannot find a Debian mirror in the apt configuration; set RXE_LAB_MIRROR" >&2; exit 1; }
SUITE=bookworm
MEM=${RXE_LAB_MEM:-1024}
SMP=${RXE_LAB_SMP:-1}
TMO=${RXE_LAB_TIMEOUT:-900}
ACCEL=${RXE_LAB_ACCEL:-auto}
SETUP=${RXE_LAB_SETUP:-1}
NICS=${RXE_LAB_NICS:-1}
GUEST_PKGS="rdma-core,ibverbs-providers,ibverbs-utils,rdmacm-utils,perftest,iproute2,tcpdump,kmod,iputils-ping,procps,nftables,lldpd${RXE_LAB_EXTRA_PKGS:+,$RXE_LAB_EXTRA_PKGS}"
GUEST_MODULES="rdma_rxe ib_uverbs rdma_ucm ib_umad virtio_net virtio_pci virtio_rng 9p 9pnet_virtio configfs crc32_generic crc32-pclmul nf_tables sch_tbf"

log() { echo "[rxe-lab $(date +%H:%M:%S)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now() { date +%s.%N; }
dt() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }

need_root() {
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || die "must run as root"
    exec sudo -E "$0" "$@"
  fi
}

install_deps() {
  # a fresh machine has no package lists yet: apt-cache and apt-get download need them
  if [ -z "$(ls /var/lib/apt/lists 2>/dev/null | grep -v -E '^(lock|partial|auxfiles)$')" ]; then
    log "apt-get update (no package lists yet)"; apt-get update -qq >/dev/null
  fi
  local missing=
  for c in qemu-system-x86_64 debootstrap cpio depmod gzip; do command -v $c >/dev/null || missing=1; done
  [ -x /usr/sbin/depmod ] || [ -x /sbin/depmod ] || missing=1
  if [ -n "$missing" ]; then
    log "installing host packages (qemu-system-x86 debootstrap cpio kmod gzip)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      qemu-system-x86 debootstrap cpio kmod gzip ca-certificates >/dev/null
  fi
}

build_kernel() {
  KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  [ -n "$KPKG" ] || die "cannot resolve linux-image-amd64 (run apt-get update)"
  KDIR=$W/kernel/$KPKG
  if [ ! -e "$KDIR/.done" ]; then
    log "downloading + unpacking $KPKG (not installed on the host)"
    rm -rf "$KDIR" "$W/debs" && mkdir -p "$W/debs" "$KDIR"
    chmod 777 "$W/debs"
    (cd "$W/debs" && apt-get download "$KPKG" >/dev/null 2>&1) || die "apt-get download $KPKG failed"
    dpkg -x "$W"/debs/"$KPKG"_*.deb "$KDIR"
    KV=$(ls "$KDIR/lib/modules")
    depmod -b "$KDIR" "$KV"
    [ -e "$KDIR/lib/modules/$KV/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko" ] || die "rdma_rxe.ko missing in $KPKG"
    rm -rf "$W/debs"
    touch "$KDIR/.done"
  fi
  KV=$(ls "$KDIR/lib/modules")
  VMLINUZ=$(ls "$KDIR"/boot/vmlinuz-*)
}

build_rootfs() {
  local stamp="$SUITE $MIRROR $GUEST_PKGS"
  if [ ! -e "$W/rootfs/.done" ] || [ "$(cat "$W/rootfs/.done")" != "$stamp" ] || [ ! -e "$W/base.cpio.gz" ]; then
    log "debootstrap $SUITE guest rootfs ($GUEST_PKGS)"
    local t=$(now)
    rm -rf "$W/rootfs" "$W/rootfs.new" "$W/base.cpio.gz"
    mkdir -p "$W/cache/debootstrap"
    debootstrap --variant=minbase --cache-dir="$W/cache/debootstrap" --include="$GUEST_PKGS" \
      "$SUITE" "$W/rootfs.new" "$MIRROR" > "$W/debootstrap.log" 2>&1 || die "debootstrap failed, see $W/debootstrap.log"
    rm -rf "$W"/rootfs.new/var/cache/apt/archives/*.deb "$W"/rootfs.new/var/cache/apt/*.bin \
      "$W"/rootfs.new/var/lib/apt/lists/* "$W"/rootfs.new/usr/share/doc/* "$W"/rootfs.new/usr/share/man/* \
      "$W"/rootfs.new/usr/share/locale/* "$W"/rootfs.new/usr/share/info/*
    mv "$W/rootfs.new" "$W/rootfs"
    (cd "$W/rootfs" && find . -xdev ! -name .done | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -1) > "$W/base.cpio.gz.new"
    mv "$W/base.cpio.gz.new" "$W/base.cpio.gz"
    echo "$stamp" > "$W/rootfs/.done"
    log "rootfs built in $(dt $t)s ($(du -sm "$W/rootfs" | cut -f1) MB, base.cpio.gz $(du -m "$W/base.cpio.gz" | cut -f1) MB)"
  fi
}

write_init() {
  cat > "$1" <<'EOF'
#!/bin/sh
# rxe-lab guest init (PID 1): mount, load modules, net + rxe setup, run /mnt/host/cmd.sh, power off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm /run /tmp /mnt/host /mnt/extra
mount -t devpts devpts /dev/pts; mount -t tmpfs tmpfs /dev/shm; mount -t tmpfs tmpfs /run; mount -t tmpfs tmpfs /tmp
echo "rxe-lab: init start uptime=$(cut -d' ' -f1 /proc/uptime)"
RXE_ROLE=single RXE_SELF_IP=10.0.2.15 RXE_PEER_IP= SETUP=1
for x in $(cat /proc/cmdline); do
  case "$x" in
    rxe.role=*) RXE_ROLE=${x#rxe.role=};; rxe.ip=*) RXE_SELF_IP=${x#rxe.ip=};;
    rxe.peer=*) RXE_PEER_IP=${x#rxe.peer=};; rxe.setup=*) SETUP=${x#rxe.setup=};;
    # rocewatch: the second NIC's address and its peer's (RXE_LAB_NICS=2)
    rxe.ip1=*) RXE_SELF_IP1=${x#rxe.ip1=};; rxe.peer1=*) RXE_PEER_IP1=${x#rxe.peer1=};;
  esac
done
RXE_DEV=rxe0 RXE_NETDEV=eth0
export RXE_ROLE RXE_SELF_IP RXE_PEER_IP RXE_DEV RXE_NETDEV
[ -n "${RXE_SELF_IP1:-}" ] && { RXE_NETDEV1=eth1; export RXE_SELF_IP1 RXE_PEER_IP1 RXE_NETDEV1; }
modprobe -a virtio_pci virtio_net virtio_rng 9pnet_virtio 9p configfs
mount -t configfs configfs /sys/kernel/config 2>/dev/null
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 host0 /mnt/host || echo "rxe-lab: 9p host0 mount FAILED"
grep -qs extra /sys/bus/virtio/drivers/9pnet_virtio/*/mount_tag && mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 extra /mnt/extra
ip link set lo up
i=0; while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
ip addr add "$RXE_SELF_IP/24" dev eth0; ip link set eth0 up
[ -n "$RXE_PEER_IP" ] || ip route add default via 10.0.2.2 2>/dev/null
# rocewatch: the second NIC, eth1, up with its address (its rxe device is the command's to make)
if [ -n "${RXE_SELF_IP1:-}" ]; then
  i=0; while [ ! -e /sys/class/net/eth1 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
  ip addr add "$RXE_SELF_IP1/24" dev eth1; ip link set eth1 up
fi
if [ "$SETUP" = 1 ]; then
  modprobe -a rdma_rxe ib_uverbs rdma_ucm ib_umad && rdma link add rxe0 type rxe netdev eth0 || echo "rxe-lab: rxe setup FAILED"
fi
echo "rxe-lab: ready role=$RXE_ROLE ip=$RXE_SELF_IP peer=$RXE_PEER_IP uptime=$(cut -d' ' -f1 /proc/uptime)"
OUT=/mnt/host/guest-$RXE_ROLE.log
if [ -f /mnt/host/cmd.sh ]; then
  ( cd /tmp && exec bash /mnt/host/cmd.sh ) > "$OUT" 2>&1 < /dev/null
  rc=$?
  echo $rc > /mnt/host/exit-$RXE_ROLE
  echo "rxe-lab: command exit=$rc uptime=$(cut -d' ' -f1 /proc/uptime)"
else
  echo "rxe-lab: no /mnt/host/cmd.sh"
fi
sync; umount /mnt/extra 2>/dev/null; umount /mnt/host 2>/dev/null
echo "rxe-lab: poweroff"
echo o > /proc/sysrq-trigger
sleep 60
EOF
  chmod 755 "$1"
}

build_initrd() {
  # initrd = base rootfs cpio (cached) + small overlay cpio (modules closure + /init); the kernel
  # unpacks concatenated cpio archives in order.
  local st=$W/overlay
  rm -rf "$st" && mkdir -p "$st/lib/modules/$KV"
  cp "$KDIR/lib/modules/$KV"/modules.builtin* "$KDIR/lib/modules/$KV/modules.order" "$st/lib/modules/$KV/"
  local m f rel
  for m in $GUEST_MODULES; do
    modprobe -d "$KDIR" -S "$KV" --show-depends "$m" 2>/dev/null | awk '$1=="insmod"{print $2}'
  done | sort -u | while read -r f; do
    rel=${f#"$KDIR/lib/modules/$KV/"}
    mkdir -p "$st/lib/modules/$KV/$(dirname "$rel")"; cp "$f" "$st/lib/modules/$KV/$rel"
  done
  [ -e "$st/lib/modules/$KV/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko" ] || die "module closure failed"
  depmod -b "$st" "$KV"
  # bookworm is usr-merged (/lib -> usr/lib); a real lib/ dir in the overlay would replace the symlink
  if [ -L "$W/rootfs/lib" ]; then mkdir -p "$st/usr" && mv "$st/lib" "$st/usr/lib"; fi
  write_init "$st/init"
  (cd "$st" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -1) > "$W/overlay.cpio.gz"
  cat "$W/base.cpio.gz" "$W/overlay.cpio.gz" > "$W/initrd.gz.new" && mv "$W/initrd.gz.new" "$W/initrd.gz"
}

do_build() {
  local t=$(now)
  mkdir -p "$W"
  install_deps
  build_kernel
  build_rootfs
  build_initrd
  log "image ready in $(dt $t)s: kernel $KV, initrd $(du -m "$W/initrd.gz" | cut -f1) MB"
}

qemu_accel_args() {
  if [ "$ACCEL" = auto ]; then
    if [ -e "$W/accel" ]; then ACCEL=$(cat "$W/accel"); else
      ACCEL=tcg
      if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
        log "probing KVM (one-off, cached in $W/accel)"
        local p; p=$(mktemp -d); echo 'echo ok' > "$p/cmd.sh"
        # rocewatch: the probe gives up after 20 s, not 60 (a working KVM boots in ~3 s)
        ( timeout 20 qemu-system-x86_64 -enable-kvm -cpu host -m "$MEM" -smp 1 -kernel "$VMLINUZ" -initrd "$W/initrd.gz" \
          -append "console=ttyS0 panic=-1 rxe.setup=0" -display none -monitor none -no-reboot -serial file:"$p/console" \
          -netdev user,id=n0 -device virtio-net-pci,netdev=n0 \
          -virtfs local,path="$p",mount_tag=host0,security_model=none,id=host0 >"$p/qemu.out" 2>&1 || true ) 2>/dev/null
        grep -qs '^ok' "$p/guest-single.log" && ACCEL=kvm
        rm -rf "$p"
      fi
      echo $ACCEL > "$W/accel"; log "accelerator: $ACCEL"
    fi
  fi
  case $ACCEL in
    kvm) ACCEL_ARGS="-enable-kvm -cpu host";;
    tcg) ACCEL_ARGS="-accel tcg";;
    *) die "RXE_LAB_ACCEL must be auto|kvm|tcg";;
  esac
}

# boot_vm ROLE IP PEER NETDEV_ARGS MAC OUTDIR [IP1 PEER1 NETDEV1_ARGS MAC1]
# (runs in background, sets VM_PID; the optional four make a second NIC, eth1)
boot_vm() {
  local role=$1 ip=$2 peer=$3 net=$4 mac=$5 out=$6 extra=() nic1=() app1=
  [ -n "${RXE_LAB_SHARE:-}" ] && extra=(-virtfs "local,path=$(readlink -f "$RXE_LAB_SHARE"),mount_tag=extra,security_model=none,id=extra")
  # rocewatch: a second NIC right after the first (the next PCI slot, so the guest names it eth1)
  [ -n "${7:-}" ] && { nic1=(-netdev "$9" -device "virtio-net-pci,netdev=n1,mac=${10}"); app1=" rxe.ip1=$7 rxe.peer1=$8"; }
  timeout --kill-after=10 "$TMO" qemu-system-x86_64 $ACCEL_ARGS -m "$MEM" -smp "$SMP" \
    -kernel "$VMLINUZ" -initrd "$W/initrd.gz" \
    -append "console=ttyS0 panic=-1 rxe.role=$role rxe.ip=$ip rxe.peer=$peer rxe.setup=$SETUP$app1" \
    -display none -monitor none -no-reboot -serial file:"$out/console-$role.log" \
    -netdev "$net" -device "virtio-net-pci,netdev=n0,mac=$mac" "${nic1[@]}" \
    -virtfs "local,path=$out,mount_tag=host0,security_model=none,id=host0" "${extra[@]}" \
    > "$out/qemu-$role.log" 2>&1 &
  VM_PID=$!
}

do_run() {
  local pair=0
  [ "${1:-}" = --pair ] && { pair=1; shift; }
  local cmd=${1:?usage: rxe-lab.sh run [--pair] CMDFILE [OUTDIR]}
  [ -f "$cmd" ] || die "no such command file: $cmd"
  local out=${2:-$W/runs/$(date +%Y%m%d-%H%M%S)}
  do_build
  qemu_accel_args
  mkdir -p "$out"; out=$(readlink -f "$out")
  rm -f "$out"/guest-*.log "$out"/exit-* "$out"/console-*.log "$out"/qemu-*.log "$out/timings.txt"
  cp "$cmd" "$out/cmd.sh"
  local t=$(now) rc=0 roles pids=() r
  if [ $pair = 0 ]; then
    roles=single
    boot_vm single 10.0.2.15 "" "user,id=n0" 52:54:00:12:34:56 "$out"; pids+=($VM_PID)
  else
    roles="a b"
    local sd; sd=$(mktemp -d /tmp/rxe-lab-sock.XXXXXX) a1=() b1=()
    # rocewatch: RXE_LAB_NICS=2, a second link between the guests (its own socket pair)
    if [ "$NICS" = 2 ]; then
      a1=(192.168.101.1 192.168.101.2 "dgram,id=n1,local.type=unix,local.path=$sd/a1,remote.type=unix,remote.path=$sd/b1" 52:54:00:00:01:01)
      b1=(192.168.101.2 192.168.101.1 "dgram,id=n1,local.type=unix,local.path=$sd/b1,remote.type=unix,remote.path=$sd/a1" 52:54:00:00:01:02)
    fi
    boot_vm a 192.168.100.1 192.168.100.2 \
      "dgram,id=n0,local.type=unix,local.path=$sd/a,remote.type=unix,remote.path=$sd/b" 52:54:00:00:00:01 "$out" "${a1[@]}"; pids+=($VM_PID)
    boot_vm b 192.168.100.2 192.168.100.1 \
      "dgram,id=n0,local.type=unix,local.path=$sd/b,remote.type=unix,remote.path=$sd/a" 52:54:00:00:00:02 "$out" "${b1[@]}"; pids+=($VM_PID)
  fi
  log "booted ($ACCEL) roles: $roles; output in $out"
  for p in "${pids[@]}"; do wait "$p" || { r=$?; log "qemu pid $p exited rc=$r (124 = timeout after ${TMO}s)"; rc=1; }; done
  [ $pair = 1 ] && rm -rf "$sd"
  {
    echo "accel=$ACCEL mem=${MEM}M smp=$SMP"
    echo "wall_total_s=$(dt $t)"
    for r in $roles; do
      echo "$r: $(grep -a -E 'rxe-lab: (init start|ready|command exit)' "$out/console-$r.log" | tr '\n' ' ')"
    done
  } > "$out/timings.txt"
  for r in $roles; do
    if [ "$(cat "$out/exit-$r" 2>/dev/null)" != 0 ]; then log "role $r: command failed or did not finish (exit=$(cat "$out/exit-$r" 2>/dev/null || echo none))"; rc=1; fi
  done
  cat "$out/timings.txt" >&2
  log "done rc=$rc; logs: $(ls "$out"/guest-*.log | tr '\n' ' ')"
  return $rc
}

demo_cmd() {
  cat <<'EOF'
#!/bin/bash
# rxe-lab demo: verbs, counters, gid types, rdma_cm configfs, rping, ib_write_bw, ib_send_lat, tcpdump.
# Roles: single (loopback on one guest), a (server), b (client).
sec() { echo; echo "=== $* (uptime $(cut -d' ' -f1 /proc/uptime))"; }
counters() { grep -H . /sys/class/infiniband/rxe0/ports/1/counters/* 2>&1; grep -H . /sys/class/infiniband/rxe0/ports/1/hw_counters/* 2>&1; }
retry() { local n=0; until "$@"; do n=$((n+1)); [ $n -ge 60 ] && return 1; sleep 1; done; echo "(ok after $n retries)"; }
t0=$(cut -d' ' -f1 /proc/uptime)
sec setup role=$RXE_ROLE self=$RXE_SELF_IP peer=$RXE_PEER_IP
rdma link show; ls -l /dev/infiniband
[ -n "$RXE_PEER_IP" ] && retry ping -c1 -W1 "$RXE_PEER_IP" >/dev/null && echo "peer reachable"
sec ibv_devices; ibv_devices
sec ibv_devinfo; ibv_devinfo
if [ -x /mnt/extra/ibv_list ]; then sec host-built ibv_list; ldd /mnt/extra/ibv_list; /mnt/extra/ibv_list; fi
sec gids
for i in 0 1 2 3; do
  d=/sys/class/infiniband/rxe0/ports/1
  echo "gids/$i=$(cat $d/gids/$i) type=$(cat $d/gid_attrs/types/$i 2>&1) ndev=$(cat $d/gid_attrs/ndevs/$i 2>&1)"
done
sec rdma_cm configfs
mkdir /sys/kernel/config/rdma_cm/rxe0 && grep -H . /sys/kernel/config/rdma_cm/rxe0/ports/1/*; rmdir /sys/kernel/config/rdma_cm/rxe0
sec counters BEFORE; counters
SELF=$RXE_SELF_IP; PEER=${RXE_PEER_IP:-$RXE_SELF_IP}
server() { tcpdump -n -e -i eth0 -c 5 udp port 4791 > /tmp/tcpdump.txt 2>&1 & TD=$!; sleep 1
  sec rping server;       timeout 120 rping -s -a "$SELF" -C 10 -v; echo "rc=$?"
  sec ib_write_bw server; timeout 120 ib_write_bw -d rxe0 -x 1; echo "rc=$?"
  sec ib_send_lat server; timeout 120 ib_send_lat -d rxe0 -x 1; echo "rc=$?"
  sleep 1; kill $TD 2>/dev/null; wait $TD; sec tcpdump; cat /tmp/tcpdump.txt; }
client() { sleep 3
  sec rping client;       time retry timeout 60 rping -c -a "$PEER" -C 10 -v; echo "rc=$?"
  sec ib_write_bw client; time retry timeout 120 ib_write_bw -d rxe0 -x 1 "$PEER"; echo "rc=$?"
  sec ib_send_lat client; time retry timeout 120 ib_send_lat -d rxe0 -x 1 "$PEER"; echo "rc=$?"; }
case $RXE_ROLE in
  a) server;;
  b) client;;
  single) server > /tmp/server.txt 2>&1 & SP=$!; client; wait $SP; cat /tmp/server.txt;;
esac
sec counters AFTER; counters
sec rdma statistic; rdma statistic show
sec dmesg; dmesg | grep -i -E 'rxe|rdma|infiniband'
echo "test sequence: uptime $t0 -> $(cut -d' ' -f1 /proc/uptime)"
EOF
}

do_selftest() {
  local out=${1:-$W/runs/selftest-$(date +%Y%m%d-%H%M%S)}
  mkdir -p "$W"
  # host-built dynamically linked verbs program (bookworm glibc + libibverbs), run inside the guest
  if ! [ -e /usr/include/infiniband/verbs.h ] || ! command -v gcc >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev libibverbs-dev >/dev/null
  fi
  mkdir -p "$W/hostbin"
  cat > "$W/hostbin/ibv_list.c" <<'EOF'
#include <stdio.h>
#include <infiniband/verbs.h>
int main(void) {
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list) { perror("ibv_get_device_list"); return 1; }
    printf("ibv_list: %d device(s)\n", n);
    for (int i = 0; i < n; i++) {
        struct ibv_context *ctx = ibv_open_device(list[i]);
        struct ibv_device_attr da; struct ibv_port_attr pa; union ibv_gid gid;
        printf("  [%d] name=%s node_type=%s\n", i, ibv_get_device_name(list[i]), ibv_node_type_str(list[i]->node_type));
        if (!ctx) { perror("    ibv_open_device"); continue; }
        if (!ibv_query_device(ctx, &da))
            printf("    fw=%s max_qp=%d phys_ports=%d\n", da.fw_ver, da.max_qp, da.phys_port_cnt);
        if (!ibv_query_port(ctx, 1, &pa))
            printf("    port1 state=%s active_mtu=%d link_layer=%s gid_tbl_len=%d\n", ibv_port_state_str(pa.state),
                   128 << pa.active_mtu, pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "IB", pa.gid_tbl_len);
        for (int g = 0; g < 2 && !ibv_query_gid(ctx, 1, g, &gid); g++) {
            printf("    gid[%d]=", g);
            for (int b = 0; b < 16; b += 2) printf("%02x%02x%s", gid.raw[b], gid.raw[b+1], b < 14 ? ":" : "\n");
        }
        ibv_close_device(ctx);
    }
    ibv_free_device_list(list);
    return 0;
}
EOF
  gcc -O2 -Wall -o "$W/hostbin/ibv_list" "$W/hostbin/ibv_list.c" -libverbs
  demo_cmd > "$W/demo-cmd.sh"
  RXE_LAB_SHARE="$W/hostbin" do_run --pair "$W/demo-cmd.sh" "$out"
}

need_root "$@"
case "${1:-}" in
  build) do_build;;
  run) shift; do_run "$@";;
  selftest) shift; do_selftest "$@";;
  demo-cmd) demo_cmd;;
  *) sed -n '2,40p' "$0"; exit 2;;
esac
