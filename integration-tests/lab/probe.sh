#!/bin/bash
# Guest side of the probe lab test (integration-tests/tests/lab.rs): role a runs the
# responder (killed and restarted on b's cue), a responder refusing bandwidth tests and
# the ib_write_bw and ib_send_lat servers; role b probes and runs the bandwidth tests.
# Markers between the guests go through the shared /mnt/host. Last, both run the preflight
# sweep (preflight.sh).
set -u
R=/mnt/host/$RXE_ROLE
mkdir -p "$R"
cp /mnt/extra/rocewatch /mnt/extra/librocewatch_probe_verbs.so /tmp/
BIN=/tmp/rocewatch
exec 2> >(tee "$R/stderr.txt" >&2)
waitfor() { local i=0; until [ -e "$1" ] || [ $i -ge 1200 ]; do sleep 0.1; i=$((i+1)); done; }
# ib_write_bw with the queue settings rocewatch bandwidth uses for 64 KiB messages (32 in
# flight per QP, a retransmission timeout of about 1 s: perftest's 128 and 67 ms make
# soft-RoCE on an emulated guest retransmit, and its retries then fail the test).
PERF="-d rxe0 -x 1 -s 65536 -q 4 -D 5 -t 32 -u 18"
# b's ib_write_bw attempts (three comparisons, at most five attempts each), one TCP port
# and one server of a's each.
PERF_PORT0=18600 PERF_ATTEMPTS=15
case $RXE_ROLE in
a)
  # Busy-polling like ib_send_lat's server, for the RTT comparison; the restarted
  # responder sleeps on completion events, as the agent's does.
  $BIN probe --serve --busy-poll > "$R/serve1.txt" 2>&1 & SRV=$!
  waitfor /mnt/host/b/kill; kill $SRV; wait $SRV 2>/dev/null
  waitfor /mnt/host/b/restart
  $BIN probe --serve > "$R/serve2.txt" 2>&1 & SRV=$!
  # A responder that refuses bandwidth tests, for b's refused test.
  $BIN probe --serve --no-bandwidth --tcp-port 18517 > "$R/serve-nobw.txt" 2>&1 & NOBW=$!
  # RDMA CM listeners for b's CM probes: rocewatch's (its side channel on another TCP
  # port) and rping's, persistent (-P), each on its own CM port.
  modprobe rdma_ucm 2>/dev/null
  $BIN probe --serve --cm --port 18520 --tcp-port 18519 > "$R/serve-cm.txt" 2>&1 & CMSRV=$!
  rping -s -P -a 0.0.0.0 -p 18521 > "$R/rping-server.txt" 2>&1 & RPS=$!
  # ib_write_bw's server for the comparison with rocewatch bandwidth (same size, QPs,
  # duration).
  waitfor /mnt/host/b/bw
  dmesg | tail -40 > "$R/dmesg-bw.txt"
  # A server per attempt of b's, each on its own TCP port, all started now: an attempt
  # that fails may leave its server waiting out its timeout, and b's next attempt must
  # not meet it (a CI run had all five attempts of one comparison fail that way).
  PERFSRV=
  for k in $(seq 0 $((PERF_ATTEMPTS - 1))); do
    timeout 900 ib_write_bw $PERF -p $((PERF_PORT0 + k)) --report_gbits > "$R/ib_write_bw-$k.txt" 2>&1 &
    PERFSRV="$PERFSRV $!"
  done
  i=0; until [ -e /mnt/host/b/bwdone ] || [ $i -ge 1200 ]; do sleep 0.5; i=$((i+1)); done
  kill $PERFSRV 2>/dev/null
  kill $NOBW
  waitfor /mnt/host/b/lat
  timeout 120 ib_send_lat -d rxe0 -x 1 -n 200 -s 64 > "$R/ib_send_lat.txt" 2>&1
  waitfor /mnt/host/b/done
  kill $SRV $CMSRV $RPS
  ;;
b)
  P=$RXE_PEER_IP
  i=0; until $BIN probe "$P" --count 1 --timeout 2s > /dev/null 2>&1 || [ $i -ge 60 ]; do sleep 1; i=$((i+1)); done
  # Back to back and busy-polling on both sides, as ib_send_lat measures (an emulated
  # guest takes milliseconds to wake up on a completion event).
  $BIN probe "$P" --count 200 --interval 0s --busy-poll --json > "$R/probe-ok.json"
  echo "rc=$?" >> "$R/rc.txt"
  # Kill the responder 4 s into a run of 60 probes, bring it back 3 s later (4 s: the
  # emulated guest can take 2 s to start the prober when the host is busy; 60 probes: the
  # run outlasts the restart even when the failures come back at once).
  $BIN probe "$P" --count 60 --interval 250ms --timeout 1s --json > "$R/probe-recovery.json" &
  RUN=$!
  sleep 4; touch /mnt/host/b/kill
  sleep 3; touch /mnt/host/b/restart
  wait $RUN
  # Nobody listens on this port: a connection failure with its cause, exit status 1.
  $BIN probe "$P" --count 2 --tcp-port 1 --json > "$R/probe-refused.json"
  echo "refused rc=$?" >> "$R/rc.txt"
  # RDMA CM, each case beside rping in the same guest: both listeners answer; a port
  # nobody listens on; an address nobody has; UDP 4791 dropped on the way back (b's
  # input: the CM's reply never arrives). rping waits for the CM's own retries (about a
  # minute): bounded here, and its timeout counts as not connected.
  modprobe rdma_ucm 2>/dev/null
  cmcase() { # NAME PEER CMPORT RPINGPORT
    timeout -k 5 60 $BIN probe "$2" --cm --port "$3" --count 3 --timeout 3s --json > "$R/cm-$1.json" 2> "$R/cm-$1.err"
    echo "cm-$1 rc=$?" >> "$R/rc.txt"
    timeout 20 rping -c -a "$2" -p "$4" -C 3 -v > "$R/rping-$1.txt" 2>&1
    echo "rping-$1 rc=$?" >> "$R/rc.txt"
  }
  i=0; until timeout -k 5 30 $BIN probe "$P" --cm --port 18520 --count 1 --timeout 2s > /dev/null 2>&1 || [ $i -ge 30 ]; do sleep 1; i=$((i+1)); done
  cmcase ok "$P" 18520 18521
  cmcase nolistener "$P" 18599 18599
  cmcase noaddr 192.168.100.77 18520 18521
  nft add table inet cmtest && nft add chain inet cmtest input '{ type filter hook input priority 0; policy accept; }' \
    && nft add rule inet cmtest input udp dport 4791 drop 2>> "$R/nft.log"
  cmcase dropped "$P" 18520 18521
  nft delete table inet cmtest
  # doctor against the live responder: first as the host comes (the RoCE mode cannot be
  # read until rdma_cm's configfs directory exists: doctor says how), then after that
  # fix; then with an nftables rule dropping UDP 4791 (the firewall check and the probe
  # must fail), then without it again.
  $BIN doctor --peer "$P" --window 1s --json > "$R/doctor-first.json"; echo "doctor-first rc=$?" >> "$R/rc.txt"
  modprobe rdma_cm 2>/dev/null; mkdir -p /sys/kernel/config/rdma_cm/rxe0
  $BIN doctor --peer "$P" --cm-port 18520 --window 1s --json > "$R/doctor-ok.json"; echo "doctor-ok rc=$?" >> "$R/rc.txt"
  $BIN doctor --peer "$P" --cm-port 18520 --window 1s > "$R/doctor-ok.txt"
  nft add table inet rwtest && nft add chain inet rwtest input '{ type filter hook input priority 0; policy accept; }' \
    && nft add rule inet rwtest input udp dport 4791 drop 2>> "$R/nft.log" || echo "nft setup failed" >> "$R/nft.log"
  nft -j list ruleset > "$R/nft-ruleset.json" 2>> "$R/nft.log"
  $BIN doctor --peer "$P" --cm-port 18520 --window 1s --json > "$R/doctor-firewall.json"; echo "doctor-firewall rc=$?" >> "$R/rc.txt"
  nft delete table inet rwtest
  # UDP 4791 dropped only for queue pair 1 (the CM's messages: nft matches the BTH's
  # destination QP, bytes 5-7 after UDP's 8) on the way back: the side channel's queue
  # pairs pass, CM applications (rping) and the CM probe fail, and doctor --peer says
  # why the two paths differ.
  { nft add table inet cmqp && nft add chain inet cmqp input '{ type filter hook input priority 0; policy accept; }' \
    && nft add rule inet cmqp input udp dport 4791 @th,104,24 1 drop; } 2>> "$R/nft.log" || echo "nft qp1 setup failed" >> "$R/nft.log"
  cmcase qp1dropped "$P" 18520 18521
  $BIN doctor --peer "$P" --cm-port 18520 --window 1s --json > "$R/doctor-cmonly.json"; echo "doctor-cmonly rc=$?" >> "$R/rc.txt"
  nft delete table inet cmqp
  rmdir /sys/kernel/config/rdma_cm/rxe0
  # Bandwidth: rocewatch bandwidth against the responder (it allows tests by default),
  # then ib_write_bw with the same size, queue pairs and duration; the rxe packet
  # counters read straight from sysfs around the rocewatch test as well.
  HW=/sys/class/infiniband/rxe0/ports/1/hw_counters
  ibv_devinfo -v > "$R/ibv_devinfo.txt"
  cat $HW/sent_pkts > "$R/bw-sent-before.txt"
  $BIN bandwidth "$P" --size 65536 --qps 4 --duration 5s --min-share 0 --json > "$R/bw-write.json" 2> "$R/bw-write.stderr"
  echo "bw-write rc=$?" >> "$R/rc.txt"
  cat $HW/sent_pkts > "$R/bw-sent-after.txt"
  $BIN bandwidth "$P" --size 65536 --qps 4 --duration 3s --min-share 0 > "$R/bw-write.txt" 2>> "$R/bw-write.stderr"
  $BIN bandwidth "$P" --op read --qps 2 --duration 2s --min-share 0 --json > "$R/bw-read.json" 2> "$R/bw-read.stderr"
  echo "bw-read rc=$?" >> "$R/rc.txt"
  $BIN bandwidth "$P" --op send --qps 2 --duration 2s --min-share 0 --bidirectional --json > "$R/bw-send.json" 2> "$R/bw-send.stderr"
  echo "bw-send rc=$?" >> "$R/rc.txt"
  # A responder that refuses (--no-bandwidth), and an address nobody has.
  $BIN bandwidth "$P" --tcp-port 18517 --duration 2s > "$R/bw-refused.txt" 2>&1
  echo "bw-refused rc=$?" >> "$R/rc.txt"
  $BIN bandwidth 192.168.100.77 --duration 2s --timeout 2s > "$R/bw-unreachable.txt" 2>&1
  echo "bw-unreachable rc=$?" >> "$R/rc.txt"
  $BIN doctor --peer "$P" --cm-port 18520 --bandwidth --window 1s --json > "$R/doctor-bw.json" 2> "$R/doctor-bw.stderr"
  dmesg | tail -40 > "$R/dmesg-bw.txt"
  touch /mnt/host/b/bw; sleep 2
  PORT=$PERF_PORT0
  perf() { # OUT: one successful ib_write_bw run; each attempt on the next of a's servers
    for i in 1 2 3 4 5; do
      sleep 2
      if timeout 60 ib_write_bw $PERF -p $PORT --report_gbits "$P" > /tmp/perf.txt 2>&1; then
        PORT=$((PORT + 1)); cp /tmp/perf.txt "$1"; return
      fi
      { echo "== attempt $i on port $PORT failed"; cat /tmp/perf.txt; } >> "$R/ib_write_bw-failures.txt"
      PORT=$((PORT + 1))
    done
  }
  # Alternately with rocewatch, three times each: the emulated guests' speed drifts with
  # the host's load (in one loaded run, ib_write_bw measured 0.13 then 0.04 Gb/s), and
  # the best of each is compared.
  perf "$R/ib_write_bw.txt"
  $BIN bandwidth "$P" --size 65536 --qps 4 --duration 5s --min-share 0 --json > "$R/bw-write2.json" 2>> "$R/bw-write.stderr"
  perf "$R/ib_write_bw2.txt"
  $BIN bandwidth "$P" --size 65536 --qps 4 --duration 5s --min-share 0 --json > "$R/bw-write3.json" 2>> "$R/bw-write.stderr"
  perf "$R/ib_write_bw3.txt"
  touch /mnt/host/b/bwdone
  # The agent probing on schedule: the responder and eight addresses nobody has (every
  # round has them all in flight at once, so they cost it one timeout, not eight); a rule
  # on probe failures fires for them.
  cat > /tmp/probes.toml <<CFG
[exporters.prometheus]
listen = "127.0.0.1:9464"
[probes]
peers = ["$P", "cm:$P", "192.168.100.77", "192.168.100.78", "192.168.100.79", "192.168.100.80", "192.168.100.81", "192.168.100.82", "192.168.100.83", "192.168.100.84"]
cm_port = 18520
interval = "500ms"
timeout = "1s"
serve = false
[[rules]]
name = "probe-unreachable"
metric = "rdma.probe.failures"
condition = "increase"
window = "10s"
op = ">"
threshold = 0
CFG
  http_get() { exec 3<>/dev/tcp/127.0.0.1/9464; printf 'GET %s HTTP/1.0\r\nHost: lab\r\n\r\n' "$1" >&3; cat <&3; exec 3<&-; }
  timeout -k 5 30 $BIN run --config /tmp/probes.toml > /dev/null 2> "$R/agent.log" & AG=$!
  sleep 10
  http_get /metrics > "$R/agent-metrics.txt"; http_get /rules > "$R/agent-rules.txt"
  kill $AG; wait $AG
  # Overhead: 100 peers (names for the responder's one address, each its own queue pair)
  # at 10 probes/s each, i.e. 1000 probes/s, the issue's target rate; against the same
  # agent without probes, and with 10 peers (memory per peer: the slope between 10 and
  # 100). CPU from /proc/PID/stat over 20 s after the warm-up.
  for i in $(seq 1 100); do echo "$P peer-$i" >> /etc/hosts; echo "peer-$i" >> /tmp/peers.txt; done
  cat > /tmp/base.toml <<CFG
[exporters.prometheus]
listen = "127.0.0.1:9464"
CFG
  head -10 /tmp/peers.txt > /tmp/peers10.txt
  for n in 10 100; do
    f=/tmp/peers.txt; [ $n = 10 ] && f=/tmp/peers10.txt
    cat /tmp/base.toml - > /tmp/load$n.toml <<CFG
[probes]
peers_file = "$f"
interval = "100ms"
timeout = "1s"
serve = false
CFG
  done
  ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
  rss() { awk '/^VmRSS/ {print $2}' /proc/$1/status; }
  rss_parts() { awk -v n="$2" '/^Rss(Anon|File|Shmem)/ {sub(":", "", $1); printf "%s_%s_kib=%s\n", n, $1, $2}' /proc/$1/status; }
  measure() { # NAME CONFIG PEERS
    $BIN run --config "$2" > /dev/null 2> "$R/$1.log" & local pid=$!
    # Warm-up: 5 s, and with probes until every peer has answered once (setting up 100
    # queue pairs takes seconds in an emulated guest).
    sleep 5
    if [ "$3" -gt 0 ]; then
      local i=0
      until [ "$(http_get /metrics | grep -c '^rdma_probe_rtt_last_seconds{')" -ge "$3" ] || [ $i -ge 60 ]; do sleep 0.5; i=$((i+1)); done
      sleep 2
    fi
    local t0; t0=$(ticks $pid); local w0; w0=$(date +%s.%N)
    http_get /metrics > "$R/$1-metrics0.txt"
    sleep 20; local t1; t1=$(ticks $pid); local w1; w1=$(date +%s.%N)
    awk -v n="$1" -v a="$t0" -v b="$t1" -v hz="$(getconf CLK_TCK)" -v w0="$w0" -v w1="$w1" \
      'BEGIN { printf "%s_cpu_seconds=%.3f\n%s_wall_seconds=%.3f\n", n, (b - a) / hz, n, w1 - w0 }' >> "$R/overhead.txt"
    echo "$1_rss_kib=$(rss $pid)" >> "$R/overhead.txt"
    rss_parts $pid "$1" >> "$R/overhead.txt"
    http_get /metrics > "$R/$1-metrics.txt"
    kill $pid; wait $pid
  }
  measure base /tmp/base.toml 0
  measure load10 /tmp/load10.toml 10
  measure load /tmp/load100.toml 100
  touch /mnt/host/b/lat; sleep 2
  n=0; until timeout 120 ib_send_lat -d rxe0 -x 1 -n 200 -s 64 "$P" > "$R/ib_send_lat.txt" 2>&1 || [ $n -ge 30 ]; do sleep 1; n=$((n+1)); done
  # The bring-up walk (docs/BRINGUP.md), in order, against the same responder
  # (last: a waits on b's cues with bounded patience).
  . /mnt/extra/walkthrough.sh
  touch /mnt/host/b/done
  ;;
esac
# Last, on both: the preflight sweep between the pair, then the topology from LLDP.
. /mnt/extra/preflight.sh
. /mnt/extra/fleet.sh
