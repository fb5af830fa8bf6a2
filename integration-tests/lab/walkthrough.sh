#!/bin/bash
# The walk through the RoCE bring-up guide (docs/BRINGUP.md), in its order, on the probe
# lab's guest b against the responder on guest a (sourced by probe.sh; $BIN, $P and $R set).
# Each step writes walk-<step>.out and .err and appends "<step> rc=<status>" to walk.txt,
# so the test sees that the steps ran and in which order:
#   discover -> qos -> probe -> bandwidth -> env -> doctor -> capture
walk() { # STEP COMMAND...
  local step=$1; shift
  "$@" > "$R/walk-$step.out" 2> "$R/walk-$step.err"
  echo "$step rc=$?" >> "$R/walk.txt"
}
: > "$R/walk.txt"
# 1. What RDMA devices, ports, netdevs and GIDs there are (ibdev2netdev, ibv_devinfo).
walk discover "$BIN" discover --json
# 2. The RoCE/PFC/ECN configuration as it is. rdma_cm's configfs directory is what the
# guide's RoCE mode step creates; without it the mode cannot be read (qos and doctor say
# so): the walk creates it, as an operator following the guide does.
modprobe rdma_cm 2>/dev/null; mkdir -p /sys/kernel/config/rdma_cm/rxe0
walk qos "$BIN" qos show --json
# 3. Connectivity and latency over real verbs (ib_send_lat's measurement).
walk probe "$BIN" probe "$P" --count 10 --json
# 4. Bandwidth against line rate (ib_write_bw's measurement). The emulated guests reach a
# small share of the virtual link's rate: the walk asks for no share, the lab test of
# `bandwidth` itself compares with ib_write_bw.
walk bandwidth "$BIN" bandwidth "$P" --duration 3s --qps 2 --min-share 0 --json
# 5. What NCCL, UCX and Open MPI need on this host.
walk env "$BIN" env --format json
# 6. The guide's checks, with the peer.
walk doctor "$BIN" doctor --peer "$P" --cm-port 18520 --window 1s --json
# 6b. (Not a step of the walk.) The userspace stack as libibverbs sees it, then under a
# 64 KiB locked-memory limit without CAP_IPC_LOCK (an old host's or a container's
# default): doctor's memlock check fails, and a probe whose 512 KiB buffer cannot be
# registered says why.
ibv_devices > "$R/ibv_devices.txt" 2>&1
limited() { bash -c 'ulimit -l 64 && exec setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock "$@"' limited "$@"; }
limited timeout -k 5 120 "$BIN" doctor --window 100ms --json > "$R/doctor-memlock.json" 2> "$R/doctor-memlock.err"
limited timeout -k 5 60 "$BIN" probe "$P" --count 1 --size 262144 --json > "$R/probe-memlock.out" 2>&1
echo "rc=$?" >> "$R/probe-memlock.out"
# 7. A capture on the RDMA device's netdev while probes flow: the side channel's, and RDMA
# CM probes whose connections carry the ToS set in configfs (104: DSCP 26).
echo 104 > /sys/kernel/config/rdma_cm/rxe0/ports/1/default_roce_tos
( sleep 1; "$BIN" probe "$P" --count 40 --interval 50ms > /dev/null 2>&1 ) & PROBES=$!
( sleep 1; timeout -k 5 60 "$BIN" probe "$P" --cm --port 18520 --count 15 --interval 100ms > "$R/walk-cm-probes.out" 2>&1 ) & CMPROBES=$!
# And three whose connections ask for their own ToS (96: DSCP 24).
( sleep 1.5; timeout -k 5 60 "$BIN" probe "$P" --cm --port 18520 --tos 96 --count 3 --interval 200ms --json > "$R/walk-cm-tos.json" 2> "$R/walk-cm-tos.err" ) & CMTOS=$!
walk capture "$BIN" capture rxe0 --duration 4s --summary --json
wait $PROBES $CMPROBES $CMTOS
echo 0 > /sys/kernel/config/rdma_cm/rxe0/ports/1/default_roce_tos
rmdir /sys/kernel/config/rdma_cm/rxe0 2>/dev/null
