#!/bin/bash
# Guest side of the recording of testdata/rxe-6.1/res-* (see testdata/README.md), run in
# each guest of a soft-RoCE pair by the lab script:
#
#   cargo build -p rocewatch-netlink --example rdma-res-dump
#   mkdir -p target/res-share && cp target/debug/examples/rdma-res-dump target/res-share/
#   RXE_LAB_SHARE=target/res-share integration-tests/lab/rxe-lab.sh run --pair \
#     core/netlink/testdata/record-res.sh target/res-lab
#
# (The recording in rxe-6.1/ was made so, with RXE_LAB_DIR=target/rxe-lab-work: a work
# directory whose kernel/, rootfs/ and base.cpio.gz link to .cache/rxe-lab's, so the lab
# builds its initrd there instead of rewriting the shared cache's; the same guest image.)
#
# Role a serves ib_write_bw, role b drives it (RDMA writes of 64 KiB for 30 s, with the
# queue settings the lab uses for soft-RoCE under emulation), twice:
#   phase1: the port's QP counters as the guest boots (mode none);
#   phase2: `rdma statistic qp set link rxe0/1 auto type,pid on` before ib_write_bw
#           starts, so its QP is made while auto mode is on; `auto off` at the end.
# While a test's queue pairs exist, each guest records into
# /mnt/host/<role>/<phase>/ (target/res-lab/<role>/<phase>/ on the host):
#   rdma-resource-show-{qp,cq,mr,pd}-before.json  `rdma -j resource show X` just before
#   capture/, rdma-res-dump.txt    the example's requests and replies (NNNN-request.bin,
#                                  NNNN-reply-K.bin) and what it decoded, numbered alike
#   rdma-resource-show-{qp,cq,mr,pd}.json         `rdma -j resource show X` just after
#   rdma-statistic.txt             iproute2's answers to the counter commands afterwards
#   perf-comm.txt (pid and /proc/PID/comm of ib_write_bw), perftest.txt
# and env.txt (kernel, iproute2), dmesg.txt once.
set -u
R0=/mnt/host/$RXE_ROLE
mkdir -p "$R0"
cp /mnt/extra/rdma-res-dump /tmp/rdma-res-dump
exec 2> >(tee "$R0/stderr.txt" >&2)
retry() { local n=0; until "$@"; do n=$((n+1)); [ $n -ge 60 ] && return 1; sleep 1; done; }
{ uname -r; rdma -V; } > "$R0/env.txt" 2>&1
[ -n "$RXE_PEER_IP" ] && retry ping -c1 -W1 "$RXE_PEER_IP" >/dev/null

PERF="timeout 300 ib_write_bw -d rxe0 -x 1 -s 65536 -D 30 -t 32 -u 18"
# perftest's RDMA-write server leaves its QP in RTR, the client moves on to RTS.
rc_qp() { rdma resource show qp 2>/dev/null | grep -q -E 'type RC .*state (RTR|RTS)'; }
st() { { echo "\$ rdma $*"; rdma "$@"; echo "rc=$?"; } >> "$R/rdma-statistic.txt" 2>&1; }

phase() {
  R=$R0/$1
  mkdir -p "$R"
  case $RXE_ROLE in
  a)
    $PERF > "$R/perftest.txt" 2>&1 &
    PERF_PID=$!
    ;;
  b)
    # The server may not listen yet: a client that ends at once is started again.
    for n in $(seq 1 30); do
      sleep 2
      $PERF "$RXE_PEER_IP" > "$R/perftest.txt" 2>&1 &
      PERF_PID=$!
      sleep 3
      kill -0 $PERF_PID 2>/dev/null && break
      { echo "== attempt $n"; cat "$R/perftest.txt"; } >> "$R/perftest-failed.txt"
    done
    ;;
  esac
  # Until the RC queue pair is connected, then a moment for the traffic to settle.
  i=0; until rc_qp || [ $i -ge 600 ]; do sleep 0.5; i=$((i+1)); done
  sleep 2
  for p in $(pgrep -x ib_write_bw); do echo "$p $(cat /proc/$p/comm)"; done > "$R/perf-comm.txt" 2>&1
  for r in qp cq mr pd; do rdma -j resource show $r > "$R/rdma-resource-show-$r-before.json" 2>&1; done
  /tmp/rdma-res-dump "$R/capture" > "$R/rdma-res-dump.txt" 2>&1
  echo "exit $?" >> "$R/rdma-res-dump.txt"
  for r in qp cq mr pd; do rdma -j resource show $r > "$R/rdma-resource-show-$r.json" 2>&1; done
}

# Phase 1, then iproute2 on the same commands (after ours, so they do not change what ours
# found) and a manual binding of the RC QP (the one rdma lists for ib_write_bw).
phase phase1
st -j statistic qp mode
LQPN=$(rdma resource show qp | awk '/type RC/{for(i=1;i<=NF;i++) if($i=="lqpn") {print $(i+1); exit}}')
st statistic qp bind link rxe0/1 lqpn "$LQPN"
st -j statistic qp show
wait $PERF_PID
echo "perftest exit $?" >> "$R/perftest.txt"

# Phase 2: auto mode on before the QP exists (the example then finds it on, asks again,
# dumps the counters and turns it off).
rdma statistic qp set link rxe0/1 auto type,pid on > "$R0/phase2-set.txt" 2>&1
echo "rc=$?" >> "$R0/phase2-set.txt"
phase phase2
st -j statistic qp mode
st -j statistic qp show
st statistic qp set link rxe0/1 auto off
wait $PERF_PID
echo "perftest exit $?" >> "$R/perftest.txt"

dmesg | tail -40 > "$R0/dmesg.txt"
echo done > "$R0/done"
