#!/bin/bash
# Guest side of the probe lab test (integration-tests/tests/lab.rs): role a runs the
# responder (killed and restarted on b's cue) and the ib_send_lat server; role b probes.
# Markers between the guests go through the shared /mnt/host.
set -u
R=/mnt/host/$RXE_ROLE
mkdir -p "$R"
cp /mnt/extra/rocewatch /mnt/extra/librocewatch_probe_verbs.so /tmp/
BIN=/tmp/rocewatch
exec 2> >(tee "$R/stderr.txt" >&2)
waitfor() { local i=0; until [ -e "$1" ] || [ $i -ge 1200 ]; do sleep 0.1; i=$((i+1)); done; }
case $RXE_ROLE in
a)
  $BIN probe --serve > "$R/serve1.txt" 2>&1 & SRV=$!
  waitfor /mnt/host/b/kill; kill $SRV; wait $SRV 2>/dev/null
  waitfor /mnt/host/b/restart
  $BIN probe --serve > "$R/serve2.txt" 2>&1 & SRV=$!
  waitfor /mnt/host/b/lat
  timeout 120 ib_send_lat -d rxe0 -x 1 -n 200 -s 64 > "$R/ib_send_lat.txt" 2>&1
  waitfor /mnt/host/b/done
  kill $SRV
  ;;
b)
  P=$RXE_PEER_IP
  i=0; until $BIN probe "$P" --count 1 --timeout 2s > /dev/null 2>&1 || [ $i -ge 60 ]; do sleep 1; i=$((i+1)); done
  # Back to back, as ib_send_lat measures (an idle emulated guest takes milliseconds to
  # wake up for a probe that comes alone).
  $BIN probe "$P" --count 200 --interval 0s --json > "$R/probe-ok.json"
  echo "rc=$?" >> "$R/rc.txt"
  # Kill the responder 2 s into a run of 40 probes, bring it back 3 s later.
  $BIN probe "$P" --count 40 --interval 250ms --timeout 1s --json > "$R/probe-recovery.json" &
  RUN=$!
  sleep 2; touch /mnt/host/b/kill
  sleep 3; touch /mnt/host/b/restart
  wait $RUN
  # Nobody listens on this port: a connection failure with its cause, exit status 1.
  $BIN probe "$P" --count 2 --tcp-port 1 --json > "$R/probe-refused.json"
  echo "refused rc=$?" >> "$R/rc.txt"
  # The agent probing on schedule: the responder and an address nobody has; a rule on
  # probe failures fires for the latter.
  cat > /tmp/probes.toml <<CFG
[exporters.prometheus]
listen = "127.0.0.1:9464"
[probes]
peers = ["$P", "192.168.100.77"]
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
  timeout 30 $BIN run --config /tmp/probes.toml > /dev/null 2> "$R/agent.log" & AG=$!
  sleep 10
  http_get /metrics > "$R/agent-metrics.txt"; http_get /rules > "$R/agent-rules.txt"
  kill $AG; wait $AG
  touch /mnt/host/b/lat; sleep 2
  n=0; until timeout 120 ib_send_lat -d rxe0 -x 1 -n 200 -s 64 "$P" > "$R/ib_send_lat.txt" 2>&1 || [ $n -ge 30 ]; do sleep 1; n=$((n+1)); done
  touch /mnt/host/b/done
  ;;
esac
