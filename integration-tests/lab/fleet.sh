#!/bin/bash
# The fleet's topology from LLDP in the guest pair (sourced by probe.sh on both, after
# preflight.sh; $BIN, $R and probe.sh's waitfor set). Two rails a guest: eth0 (rxe0,
# 192.168.100.0/24) and eth1 (192.168.101.0/24, the boot's second NIC, RXE_LAB_NICS=2),
# whose rxe device, rxe1, is made here: everything before in the boot sees one device.
# Each guest runs lldpd (Debian's lldpd, the guest's hostname lab-a or lab-b as its
# system name), waits until it sees the other as its neighbour on both NICs, and prints
# its topology lines with `rocewatch fleet topology`: each guest's eth0 and eth1 are
# cabled to the other's, so each one's "ToR" on both rails is the other guest. Then both
# run the agent with [fleet] on those lines (below).
rdma link add rxe1 type rxe netdev eth1 2> "$R/rxe1.log"
{ echo "rxe1 rc=$?"; ip -br addr; rdma link show; } >> "$R/rxe1.log" 2>&1
hostname "lab-$RXE_ROLE"
lldpd -d > "$R/lldpd.log" 2>&1 & LLDPD=$!
sleep 1
lldpcli configure lldp tx-interval 1 >> "$R/lldpd.log" 2>&1
i=0
until lldpcli -f json0 show neighbors details 2>/dev/null > /tmp/lldp.json;
  grep -q '"name": "eth0"' /tmp/lldp.json && grep -q '"name": "eth1"' /tmp/lldp.json || [ $i -ge 60 ]; do
  sleep 0.5; i=$((i+1))
done
lldpcli -f json0 show neighbors details > "$R/lldp.json" 2>> "$R/lldpd.log"
"$BIN" fleet topology --this-host "lab-$RXE_ROLE" > "$R/topology.csv" 2> "$R/topology.stderr"
echo "topology rc=$?" >> "$R/fleet.txt"
other=a; [ "$RXE_ROLE" = a ] && other=b
touch "$R/topology.done"; waitfor "/mnt/host/$other/topology.done"
# The agent with [fleet] on both guests: the map is both guests' lines, this host's own
# rows (the NIC info series) from LLDP; each probes the other on both rails (rail 0 from
# rxe0, rail 1 from rxe1), 4 flows a rail whose source ports rotate every 2 s. Once every
# flow has been answered (setting up 8 queue pairs a side at once in emulated guests can
# take longer than the 1 s timeout, so the first attempts may fail), the metrics are
# scraped (fleet-metrics0.txt), then again 12 s later (fleet-metrics.txt): the test
# judges what happened between the two. The RoCE v2 packets this guest sends on eth0 in
# those 12 s are captured (UDP destination port 4791) and summed up by source port, with
# their capture times.
{ cat "$R/topology.csv"; tail -n +2 "/mnt/host/$other/topology.csv"; } > /tmp/fleet.csv
cat > /tmp/fleet.toml <<CFG
[exporters.prometheus]
listen = "127.0.0.1:9464"
[fleet]
topology = "/tmp/fleet.csv"
host = "lab-$RXE_ROLE"
lldp = true
path_rotation = "2s"
failing_window = "6s"
# An emulated guest on a loaded host is overloaded by the agent's standards much of the
# time, which would count rail 1's lost probes as host_overloaded, not as loss: the lab
# judges the network, so the limits are out of reach (the overload rule has its own tests).
overload_steal = 0.99
overload_run_queue = 1000.0
[probes]
interval = "500ms"
timeout = "1s"
reconnect_backoff = "2s"
CFG
scrape() { exec 3<>/dev/tcp/127.0.0.1/9464; printf 'GET /metrics HTTP/1.0\r\nHost: lab\r\n\r\n' >&3; cat <&3 > "$1"; exec 3<&-; }
timeout 300 "$BIN" run --config /tmp/fleet.toml > /dev/null 2> "$R/fleet-agent.log" & FAG=$!
i=0
until scrape /tmp/settle.txt 2>/dev/null; [ "$(grep -c '^rdma_probe_fleet_results_total{.*outcome="ok"' /tmp/settle.txt)" -ge 8 ] || [ $i -ge 120 ]; do
  sleep 0.5; i=$((i+1))
done
echo "settled after $i half-seconds" >> "$R/fleet.txt"
touch "$R/fleet-settled"; waitfor "/mnt/host/$other/fleet-settled"
MY_IP=$(ip -4 -o addr show dev eth0 | awk '{sub("/.*", "", $4); print $4; exit}')
tcpdump -i eth0 -n -tt -w /tmp/roce.pcap "udp dst port 4791 and src host $MY_IP" > "$R/tcpdump.log" 2>&1 & TCPDUMP=$!
sleep 1
scrape "$R/fleet-metrics0.txt"
sleep 12
scrape "$R/fleet-metrics.txt"
touch "$R/fleet-probed"; waitfor "/mnt/host/$other/fleet-probed"
kill $TCPDUMP; wait $TCPDUMP 2>/dev/null
# Then a drops UDP 4791 to its rail-1 address for 10 s: both guests' rail-1 flows lose
# their probes (b's requests, a's answers back), rail 0 stays clean.
if [ "$RXE_ROLE" = a ]; then
  { nft add table inet fleetdrop && nft add chain inet fleetdrop input '{ type filter hook input priority 0; policy accept; }' \
    && nft add rule inet fleetdrop input ip daddr "$RXE_SELF_IP1" udp dport 4791 drop; } 2>> "$R/nft-fleet.log" \
    || echo "nft fleetdrop setup failed" >> "$R/nft-fleet.log"
  touch "$R/fleet-drop"
else
  waitfor /mnt/host/a/fleet-drop
fi
sleep 10
scrape "$R/fleet-drop-metrics.txt"
touch "$R/fleet-drop-probed"; waitfor "/mnt/host/$other/fleet-drop-probed"
[ "$RXE_ROLE" = a ] && { nft -j list ruleset > "$R/nft-fleet.json"; nft delete table inet fleetdrop; } 2>> "$R/nft-fleet.log"
kill $FAG; wait $FAG
# time source-address.port: one line per packet.
tcpdump -r /tmp/roce.pcap -n -tt 2>/dev/null | awk '{print $1, $3}' > "$R/roce-sports.txt"
kill $LLDPD
touch "$R/fleet.done"; waitfor "/mnt/host/$other/fleet.done"
