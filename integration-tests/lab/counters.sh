#!/bin/bash
# Guest side of the counters lab test (integration-tests/tests/lab.rs), run in each guest of
# a soft-RoCE pair by rxe-lab.sh: role a serves ib_write_bw, role b drives it.
#
# Everything is recorded under /mnt/host/<role>/ for the host-side test to check:
#   <phase>-sysfs-before.json, <phase>-netlink.json, <phase>-sysfs-after.json
#       `rocewatch collect --once` with hw_counters from sysfs, netlink, sysfs again
#   <phase>-rdma.json      `rdma -j statistic show` between them
#   <phase>-capture/       the netlink requests and replies of the netlink collection
#   phases: idle0 (before traffic), during (while ib_write_bw runs), idle1 (after)
#   snap-retries.txt       "during" snapshots taken again because the traffic stalled
#   perftest.txt, discover.json, ibv_devinfo.txt, rdma-link.json, hw_counters.txt
#   env.json, env.stderr; env.sh, doctor-env.json, doctor-env-bad.json (role b)
#   capture.json, capture.stderr (role a): rocewatch capture on rxe0 while ib_write_bw runs
#   qos-before.json, qos-v2.json, qos-tos.json, qos-tos.txt, qos-set-v1.txt (role a):
#       `rocewatch qos show` around configfs changes
#   qos-plan-a.txt, qos-dry-a.txt, qos-apply-a.json, qos-applied.json, qos-rollback-a.json,
#   qos-rolledback.json, qos-apply-b.json/.rc, qos-mtu-after-b.txt, qos-audit.jsonl (role a):
#       `rocewatch qos plan/apply/rollback` on the real configfs and netdev
#   res-workload.txt, res-cgroup.txt, res-metrics-{during,after}.txt, res-{qp,cq,mr,pd}.json,
#   res-{qp,mr}-after.json, top-{during,after}.json, res-mode-{before,during,after}.txt,
#   res-agent.log, res-audit.jsonl: ib_write_bw inside a pod's (a) or a Slurm step's (b)
#       cgroup, with an agent asking for per-QP counters; res-kill-*.txt, res-restart-*,
#       res-audit-kill.jsonl (role a): that agent killed with SIGKILL, then one without
#       per-QP counters putting the mode back
#   kmsg-pci.txt, kmsg-metrics*.txt, kmsg-rules.txt, kmsg-agent.log, doctor-kmsg.json (role b):
#       driver messages in mlx5's formats written into /dev/kmsg while the agent runs with
#       a rule on rdma.kernel.events; what /metrics, /rules and doctor made of them
#   virt-facts.txt, virt-stat.txt, doctor-virt.json/.stderr (role a): DMI, the hypervisor
#       flag and the clocksources; /proc/stat's cpu line before and after a doctor run
#   nds-setup.txt, nds-pf.txt, nds-vfinfo-reply.bin, nds-ip-link.txt (role a): netdevsim's
#       VFs and the kernel's IFLA_VFINFO_LIST reply (netdevsim.sh), or nds-missing.txt;
#   nds-link-{default,rs}.json, nds-fec-set.txt, nds-optics.* (role a): counters-ethtool's
#       link requests on netdevsim before and after its FEC was set, `rocewatch optics`
set -u
R=/mnt/host/$RXE_ROLE
# Run the agent from the guest's memory, not page by page over 9p (a debug build is big).
cp /mnt/extra/rocewatch /tmp/rocewatch
BIN=/tmp/rocewatch
mkdir -p "$R"
exec 2> >(tee "$R/stderr.txt" >&2)
for src in sysfs netlink; do
  printf '[plugins.builtin.counters-sysfs]\noptions = { hw_counters_source = "%s" }\n' "$src" > /tmp/$src.toml
done
collect() { "$BIN" collect --once --format json --config /tmp/$1.toml; }
# snap PHASE [moving]: sysfs, netlink, rdma statistic, sysfs again. With "moving", the
# traffic must move across it: the moving counter read just after the first sysfs read and
# just before the last one must differ, so the two sysfs reads do. Soft-RoCE on a loaded
# host stalls now and then for a moment (a retransmission timeout): such a snapshot is
# taken again, up to 5 times (said in snap-retries.txt).
snap() {
  local n=0 m0 m1
  while :; do
    rm -rf "$R/$1-capture"
    collect sysfs > "$R/$1-sysfs-before.json"; m0=$(moving)
    ROCEWATCH_NETLINK_CAPTURE="$R/$1-capture" collect netlink > "$R/$1-netlink.json"
    rdma -j statistic show > "$R/$1-rdma.json"
    m1=$(moving); collect sysfs > "$R/$1-sysfs-after.json"
    n=$((n+1))
    { [ "${2:-}" != moving ] || [ "$m1" != "$m0" ] || [ $n -ge 5 ]; } && return
    echo "$1 snapshot $n: $MOVING stayed at $m0; again" >> "$R/snap-retries.txt"
    sleep 0.5
  done
}
# The counter the traffic moves here: the writer (b) sends the data, the target (a) receives it.
MOVING=sent_pkts; [ "$RXE_ROLE" = a ] && MOVING=rcvd_pkts
moving() { cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$MOVING; }
retry() { local n=0; until "$@"; do n=$((n+1)); [ $n -ge 60 ] && return 1; sleep 1; done; }

[ -n "$RXE_PEER_IP" ] && retry ping -c1 -W1 "$RXE_PEER_IP" >/dev/null
"$BIN" discover --json > "$R/discover.json"
ibv_devinfo -v > "$R/ibv_devinfo.txt"
# rocewatch env: what NCCL/UCX need here (the GID index is checked against ibv_devinfo);
# doctor --env on those settings and on a job's wrong ones (role b).
"$BIN" env --format json > "$R/env.json" 2> "$R/env.stderr"
if [ "$RXE_ROLE" = b ]; then
  "$BIN" env > "$R/env.sh" 2>> "$R/env.stderr"
  "$BIN" doctor --window 1s --json --env "$R/env.sh" > "$R/doctor-env.json" 2>> "$R/env.stderr"
  printf 'NCCL_IB_GID_INDEX=0\nNCCL_IB_HCA=rxe0:1,rxe9\n' > /tmp/bad.env
  "$BIN" doctor --window 1s --json --env /tmp/bad.env > "$R/doctor-env-bad.json" 2>> "$R/env.stderr"
fi
rdma -j link show > "$R/rdma-link.json"
# The kernel log (role b): messages in the mlx5 driver's formats naming eth0's PCI function
# (rxe0's netdev) are written into /dev/kmsg while the agent runs with a rule on
# rdma.kernel.events; then doctor reads the same log.
if [ "$RXE_ROLE" = b ]; then
  PCI=$(readlink -f /sys/class/net/eth0/device | grep -o '[0-9a-f]\{4\}:[0-9a-f]\{2\}:[0-9a-f]\{2\}\.[0-7]' | tail -n1)
  echo "$PCI" > "$R/kmsg-pci.txt"
  cat > /tmp/kmsg.toml <<CFG
[agent]
interval = "1s"
[exporters.prometheus]
listen = "127.0.0.1:9465"
[[rules]]
name = "nic-command-timeouts"
metric = "rdma.kernel.events"
match = { "rdma.kernel.pattern" = "cmd_timeout" }
condition = "increase"
window = "1m"
op = ">"
threshold = 0
CFG
  kget() { exec 3<>/dev/tcp/127.0.0.1/9465 || return 1; printf 'GET %s HTTP/1.0\r\nHost: lab\r\n\r\n' "$1" >&3; cat <&3; exec 3<&-; }
  timeout 90 "$BIN" run --config /tmp/kmsg.toml > /dev/null 2> "$R/kmsg-agent.log" & KAG=$!
  i=0; until kget /metrics > "$R/kmsg-metrics0.txt" 2>/dev/null || [ $i -ge 120 ]; do sleep 0.5; i=$((i+1)); done
  sleep 2
  kmsg() { echo "$1" > /dev/kmsg; }
  kmsg "<3>mlx5_core $PCI: wait_func:1189:(pid 4242): ACCESS_REG(0x805) timeout. Will cause a leak of a command resource"
  kmsg "<3>mlx5_core $PCI: poll_health:852:(pid 0): device's health compromised - reached miss count"
  kmsg "<4>mlx5_core $PCI: mlx5_pcie_event:326:(pid 165): Detected insufficient power on the PCIe slot (27W)."
  for n in 1 2; do kmsg "<6>mlx5_core $PCI eth0: Link down"; kmsg "<6>mlx5_core $PCI eth0: Link up"; done
  kmsg "<4>thermal thermal_zone0: critical temperature reached"
  # Until the rule fires (two collections: the new series at 0, then its count).
  i=0; until kget /rules 2>/dev/null | grep -q '"phase":"firing"' || [ $i -ge 120 ]; do sleep 0.5; i=$((i+1)); done
  kget /metrics > "$R/kmsg-metrics.txt"; kget /rules > "$R/kmsg-rules.txt"
  kill $KAG; wait $KAG
  "$BIN" doctor --window 1s --log-window 10m --json > "$R/doctor-kmsg.json" 2>> "$R/kmsg-agent.log"
fi
# QoS on a real kernel (role a): configfs rdma_cm mounted, `qos show` before the device's
# directory exists, then with it (RoCE v2, the default), then after setting the ToS to 106
# through configfs; RoCE v1 is refused by rxe (it is RoCE v2 only), and the refusal is
# recorded; DCB is asked over netlink of a netdev without DCB operations.
if [ "$RXE_ROLE" = a ]; then
  modprobe rdma_cm 2>/dev/null
  mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
  "$BIN" qos show --json > "$R/qos-before.json" 2>> "$R/qos.log"
  mkdir -p /sys/kernel/config/rdma_cm/rxe0
  P1=/sys/kernel/config/rdma_cm/rxe0/ports/1
  "$BIN" qos show --json > "$R/qos-v2.json" 2>> "$R/qos.log"
  ( echo "IB/RoCE v1" > $P1/default_roce_mode ) 2> "$R/qos-set-v1.txt"; echo "rc=$?" >> "$R/qos-set-v1.txt"
  echo 106 > $P1/default_roce_tos
  "$BIN" qos show --json > "$R/qos-tos.json" 2>> "$R/qos.log"
  "$BIN" qos show > "$R/qos-tos.txt" 2>> "$R/qos.log"
  echo 0 > $P1/default_roce_tos
  rmdir /sys/kernel/config/rdma_cm/rxe0
  # qos apply/rollback on the real configfs: apply creates the device's directory and
  # sets the ToS; rollback restores the value read once the directory existed. Then a
  # change the kernel refuses half-way (RoCE v1 on rxe) after one it accepted (the
  # netdev MTU): the MTU is put back.
  q() { printf '[remediation]\naudit_log = "/tmp/audit.jsonl"\n[qos]\nsnapshot_dir = "/tmp/snaps"\n[[qos.desired]]\ndevices = "rxe0"\nsettings = { %s }\n' "$1" > /tmp/qos.toml; }
  q 'roce_mode = "v2", roce_tos = "106", pfc_enabled = "3"'
  "$BIN" qos plan --config /tmp/qos.toml > "$R/qos-plan-a.txt" 2>> "$R/qos.log"; echo "rc=$?" >> "$R/qos-plan-a.txt"
  "$BIN" qos apply --config /tmp/qos.toml > "$R/qos-dry-a.txt" 2>> "$R/qos.log"; echo "rc=$?" >> "$R/qos-dry-a.txt"
  ls /sys/kernel/config/rdma_cm/ > "$R/qos-after-dry.txt"
  "$BIN" qos apply --yes --json --config /tmp/qos.toml > "$R/qos-apply-a.json" 2>> "$R/qos.log"
  "$BIN" qos show --json > "$R/qos-applied.json" 2>> "$R/qos.log"
  "$BIN" qos rollback --yes --json --config /tmp/qos.toml > "$R/qos-rollback-a.json" 2>> "$R/qos.log"
  "$BIN" qos show --json > "$R/qos-rolledback.json" 2>> "$R/qos.log"
  q 'mtu = "1400", roce_mode = "IB/RoCE v1"'
  "$BIN" qos apply --yes --json --config /tmp/qos.toml > "$R/qos-apply-b.json" 2>> "$R/qos.log"; echo $? > "$R/qos-apply-b.rc"
  cat /sys/class/net/eth0/mtu > "$R/qos-mtu-after-b.txt"
  cp /tmp/audit.jsonl "$R/qos-audit.jsonl"
  rmdir /sys/kernel/config/rdma_cm/rxe0
fi
# RDMA resources per workload: ib_write_bw runs inside a cgroup shaped as kubelet makes a
# pod's container (role a, the target: systemd driver, containerd) or Slurm a job step
# (role b, the writer: cgroup v2 layout), while an agent runs with per-QP counters asked
# for (rxe accepts the counter mode and binds nothing: said once). Its /metrics during and
# after the test, `rdma resource show` and `rocewatch top` beside it.
mountpoint -q /sys/fs/cgroup || mount -t cgroup2 none /sys/fs/cgroup
POD_UID=7f3e2d1c-0b9a-4c8d-9e7f-6a5b4c3d2e1f
CID=4f9d0c2b7a1e3f5d6c8b9a0e1f2d3c4b5a6978e0d1c2b3a4f5e6d7c8b9a0f1e2
if [ "$RXE_ROLE" = a ]; then
  CG=/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod${POD_UID//-/_}.slice/cri-containerd-$CID.scope
  WL="pod:$POD_UID/${CID:0:12}"
else
  CG=/sys/fs/cgroup/system.slice/slurmstepd.scope/job_42/step_0/user/task_0
  WL="slurm:42.0"
fi
mkdir -p "$CG"
echo "$WL" > "$R/res-workload.txt"; echo "${CG#/sys/fs/cgroup}" > "$R/res-cgroup.txt"
cat > /tmp/res.toml <<CFG
[agent]
interval = "1s"
[exporters.prometheus]
listen = "127.0.0.1:9466"
[plugins.builtin.resources]
options = { qp_counters = true }
CFG
hget() { exec 3<>/dev/tcp/127.0.0.1/9466 || return 1; printf 'GET %s HTTP/1.0\r\nHost: lab\r\n\r\n' "$1" >&3; cat <&3; exec 3<&-; }
rdma statistic qp mode link rxe0/1 > "$R/res-mode-before.txt" 2>&1
timeout 240 "$BIN" run --config /tmp/res.toml > /dev/null 2> "$R/res-agent.log" & RAG=$!
i=0; until hget /metrics > /dev/null 2>&1 || [ $i -ge 120 ]; do sleep 0.5; i=$((i+1)); done
rdma statistic qp mode link rxe0/1 > "$R/res-mode-during.txt" 2>&1
cat /var/lib/rocewatch/qp-counter-modes.json > "$R/res-state-during.txt" 2>&1
snap idle0
# RDMA writes of 64 KiB for 45 s (duration mode): long enough to read the resources, then
# the counters while they move, however slow the emulation (CI runs under the suite's
# load: at 20 s the steps before the counters' snapshot outlasted the traffic; with the
# snapshot first, at 30 s, the resources were read after it).
# 32 in flight and a ~1 s retransmission timeout (-t 32 -u 18), as the bandwidth lab runs
# it: with perftest's 128 and 67 ms, soft-RoCE in loaded guests retransmitted until a round
# failed ("Failed status 9"), and the workload was gone while top was read.
PERF="ib_write_bw -d rxe0 -x 1 -D 45 -s 65536 -t 32 -u 18"
# Under emulation perftest's clock calibration sometimes fails after the traffic ("Can't
# produce a report"); both sides then fail that round and start another. Failed rounds go
# to perftest-failed.txt, the successful one to perftest.txt.
perf_rounds() {
  local n=0 max=6 peer=
  [ "$RXE_ROLE" = b ] && { max=40; peer=$RXE_PEER_IP; sleep 2; }   # b also waits for a to listen
  while [ $n -lt $max ]; do
    n=$((n+1))
    # In the workload's cgroup: the shell moves itself there and becomes perftest.
    if timeout 300 sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CG" $PERF $peer > /tmp/perf.out 2>&1; then
      cat /tmp/perf.out > "$R/perftest.txt"; echo "perftest exit 0 (round $n)" >> "$R/perftest.txt"; return 0
    fi
    { echo "== round $n"; cat /tmp/perf.out; } >> "$R/perftest-failed.txt"
    sleep 1
  done
  echo "perftest exit 1 (after $n rounds)" >> "$R/perftest.txt"; return 1
}
base=$(moving)
perf_rounds &
PERF_PID=$!
# Snapshot while packets flow (once 2000 have moved), then wait for the end.
i=0; while [ $(( $(moving) - base )) -lt 2000 ] && [ $i -lt 600 ]; do sleep 0.2; i=$((i+1)); done
# rocewatch capture while the writes flow (role a, the target: WRITEs in, ACKs out),
# beside the next steps.
if [ "$RXE_ROLE" = a ]; then
  { "$BIN" capture rxe0 --duration 3s --offload-off --summary --json > "$R/capture.json" 2> "$R/capture.stderr"
    echo "rc=$?" >> "$R/capture.stderr"; } & CAP_PID=$!
fi
# The workload's QPs and MRs while the test runs (first: the QPs live as long as the
# test): the agent's /metrics once a collection has seen them, rdma resource show,
# rocewatch top.
# (Its QP, not only its MR: perftest registers memory before it makes the QP.)
i=0; until hget /metrics > "$R/res-metrics-during.txt" 2>/dev/null && grep "^rdma_resource_qps{" "$R/res-metrics-during.txt" | grep -q "rdma_workload=\"$WL\".* [1-9]" || [ $i -ge 40 ]; do sleep 0.25; i=$((i+1)); done
for k in qp cq mr pd; do rdma -j resource show $k > "$R/res-$k.json" 2>&1; done
i=0; until "$BIN" top --once --json > "$R/top-during.json" 2> "$R/top-during.stderr" && grep -q "\"$WL\"" "$R/top-during.json" || [ $i -ge 20 ]; do sleep 0.5; i=$((i+1)); done
snap during moving
[ "$RXE_ROLE" = a ] && wait $CAP_PID
wait $PERF_PID
sleep 3   # the peer's last ACKs
snap idle1
# perftest is gone: its workload's series read 0, top lists it no more, the counter mode
# is put back when the agent stops (audited both ways).
i=0; until hget /metrics > "$R/res-metrics-after.txt" 2>/dev/null && grep "^rdma_resource_qps{" "$R/res-metrics-after.txt" | grep "rdma_workload=\"$WL\"" | grep -q ' 0$' || [ $i -ge 40 ]; do sleep 0.25; i=$((i+1)); done
for k in qp mr; do rdma -j resource show $k > "$R/res-$k-after.json" 2>&1; done
"$BIN" top --once --json > "$R/top-after.json" 2> "$R/top-after.stderr"
# Stopped with one SIGTERM (a: the agent itself), or through timeout (b: it signals the
# agent, then its whole group: a second signal ends the agent at once, unless the two
# arrive together), the counter mode goes back either way.
if [ "$RXE_ROLE" = a ]; then kill -TERM $(pgrep -P $RAG); else kill $RAG; fi
wait $RAG
rdma statistic qp mode link rxe0/1 > "$R/res-mode-after.txt" 2>&1
ls /var/lib/rocewatch > "$R/res-state-after.txt" 2>&1
cp /var/lib/rocewatch/audit.jsonl "$R/res-audit.jsonl" 2>> "$R/res-agent.log"
# Killed (SIGKILL) with the mode changed (role a): the mode found stays on disk, and the
# next agent, with per-QP counters no longer asked for, puts it back when it starts.
if [ "$RXE_ROLE" = a ]; then
  "$BIN" run --config /tmp/res.toml > /dev/null 2> "$R/res-kill-agent.log" & KAG=$!
  i=0; until grep -q "set to auto" "$R/res-kill-agent.log" || [ $i -ge 120 ]; do sleep 0.5; i=$((i+1)); done
  kill -9 $KAG; wait $KAG
  rdma statistic qp mode link rxe0/1 > "$R/res-kill-mode.txt" 2>&1
  cat /var/lib/rocewatch/qp-counter-modes.json > "$R/res-kill-state.txt" 2>&1
  printf '[agent]\ninterval = "1s"\n' > /tmp/res-off.toml
  "$BIN" run --config /tmp/res-off.toml --duration 2s > /dev/null 2> "$R/res-restart-agent.log"
  rdma statistic qp mode link rxe0/1 > "$R/res-restart-mode.txt" 2>&1
  ls /var/lib/rocewatch > "$R/res-restart-state.txt" 2>&1
  cp /var/lib/rocewatch/audit.jsonl "$R/res-audit-kill.jsonl"
fi
# Inside the guest (role a): what the files say of the virtualization (DMI, the CPU's
# hypervisor flag, the clocksources) and /proc/stat's cpu line around a doctor run, whose
# virtualization topic tells the hypervisor and the steal over its window.
if [ "$RXE_ROLE" = a ]; then
  { for f in sys_vendor product_name; do echo "$f=$(cat /sys/class/dmi/id/$f 2>/dev/null)"; done
    echo "hypervisor_flag=$(grep -m1 -c -w hypervisor /proc/cpuinfo)"
    echo "clocksources=$(cat /sys/devices/system/clocksource/clocksource0/available_clocksource 2>/dev/null)"
  } > "$R/virt-facts.txt"
  grep '^cpu ' /proc/stat > "$R/virt-stat.txt"
  "$BIN" doctor --window 2s --json > "$R/doctor-virt.json" 2> "$R/doctor-virt.stderr"
  grep '^cpu ' /proc/stat >> "$R/virt-stat.txt"
fi
# SR-IOV VFs on the real kernel (role a): netdevsim's VFs with their attributes set, the
# kernel's raw IFLA_VFINFO_LIST reply and `ip -d link show` (integration-tests/lab/netdevsim.sh).
if [ "$RXE_ROLE" = a ] && [ -f /mnt/extra/netdevsim.sh ]; then . /mnt/extra/netdevsim.sh; fi
grep -H . /sys/class/infiniband/rxe0/ports/1/hw_counters/* > "$R/hw_counters.txt"
echo done > "$R/done"
