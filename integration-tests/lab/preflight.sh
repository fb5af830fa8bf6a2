#!/bin/bash
# The preflight sweep between the two guests (sourced by probe.sh on both, last; $BIN,
# $R and probe.sh's waitfor set): once as they are, then with guest b's egress throttled
# by a token bucket (tc ... tbf), so that b -> a is slow and a -> b is not. Each sweep
# writes its JSON lines to pf-<name>.jsonl, the table to pf-<name>.stderr, and
# "pf-<name> rc= start= end=" (uptime seconds) to pf.txt; the test judges both guests'
# lines on the host.
#
# The guests' RDMA WRITE reaches a few hundred Mb/s at best, and 40 Mb/s on a loaded host:
# the sweep judges against a line rate of 1 Gb/s with a 3 % floor (30 Mb/s); the bucket
# passes 10 Mb/s. One queue pair (2 MiB in flight) so that the throttled test's last
# messages drain within the test's 5 s; the bucket queues 2 s (2.5 MB) and drops nothing.
pf_now() { cut -d' ' -f1 /proc/uptime; }
pf() { # NAME
  local t0; t0=$(pf_now)
  "$BIN" preflight --host-list 192.168.100.1,192.168.100.2 --this-host "$RXE_SELF_IP" \
    --duration 3s --qps 1 --line-rate 1 --min-bandwidth-share 0.03 --max-latency-us 1000000 \
    --out "$R/pf-$1.jsonl" 2> "$R/pf-$1.stderr"
  echo "pf-$1 rc=$? start=$t0 end=$(pf_now)" >> "$R/pf.txt"
}
other=a; [ "$RXE_ROLE" = a ] && other=b
pf pass
touch "$R/pf-pass.done"; waitfor "/mnt/host/$other/pf-pass.done"
if [ "$RXE_ROLE" = b ]; then
  tc qdisc add dev eth0 root tbf rate 10mbit burst 32kb latency 2s 2> "$R/tc.log"
  echo "tc rc=$?" >> "$R/pf.txt"
  touch "$R/pf-tbf"
else
  waitfor /mnt/host/b/pf-tbf
fi
pf slow
if [ "$RXE_ROLE" = b ]; then
  tc -s qdisc show dev eth0 >> "$R/tc.log"; tc qdisc del dev eth0 root
fi
touch "$R/pf-slow.done"; waitfor "/mnt/host/$other/pf-slow.done"
