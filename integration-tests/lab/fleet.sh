#!/bin/bash
# The fleet's topology from LLDP in the guest pair (sourced by probe.sh on both, after
# preflight.sh; $BIN, $R and probe.sh's waitfor set): each guest runs lldpd (Debian's
# lldpd, the guest's hostname lab-a or lab-b as its system name), waits until it sees the
# other as its neighbour, and prints its topology lines with `rocewatch fleet topology`:
# each guest's eth0 is cabled to the other, so each one's "ToR" is the other guest. Then
# both run the agent with [fleet] on those lines (below).
hostname "lab-$RXE_ROLE"
lldpd -d > "$R/lldpd.log" 2>&1 & LLDPD=$!
sleep 1
lldpcli configure lldp tx-interval 1 >> "$R/lldpd.log" 2>&1
i=0
until lldpcli -f json0 show neighbors details 2>/dev/null | grep -q '"interface"' || [ $i -ge 60 ]; do
  sleep 0.5; i=$((i+1))
done
lldpcli -f json0 show neighbors details > "$R/lldp.json" 2>> "$R/lldpd.log"
"$BIN" fleet topology --this-host "lab-$RXE_ROLE" > "$R/topology.csv" 2> "$R/topology.stderr"
echo "topology rc=$?" >> "$R/fleet.txt"
other=a; [ "$RXE_ROLE" = a ] && other=b
touch "$R/topology.done"; waitfor "/mnt/host/$other/topology.done"
# The agent with [fleet] on both guests, for 12 s: the map is both guests' lines, this
# host's own row (the NIC info series) from LLDP; each probes the other on 4 flows whose
# source ports rotate every 2 s. The RoCE v2 packets this guest sends are captured (UDP
# destination port 4791) and summed up by source port, with their capture times.
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
[probes]
interval = "500ms"
timeout = "1s"
reconnect_backoff = "2s"
CFG
MY_IP=$(ip -4 -o addr show dev eth0 | awk '{sub("/.*", "", $4); print $4; exit}')
tcpdump -i eth0 -n -tt -w /tmp/roce.pcap "udp dst port 4791 and src host $MY_IP" > "$R/tcpdump.log" 2>&1 & TCPDUMP=$!
sleep 1
timeout 40 "$BIN" run --config /tmp/fleet.toml > /dev/null 2> "$R/fleet-agent.log" & FAG=$!
sleep 12
exec 3<>/dev/tcp/127.0.0.1/9464; printf 'GET /metrics HTTP/1.0\r\nHost: lab\r\n\r\n' >&3; cat <&3 > "$R/fleet-metrics.txt"; exec 3<&-
touch "$R/fleet-probed"; waitfor "/mnt/host/$other/fleet-probed"
kill $FAG; wait $FAG
kill $TCPDUMP; wait $TCPDUMP 2>/dev/null
# time source-address.port: one line per packet.
tcpdump -r /tmp/roce.pcap -n -tt 2>/dev/null | awk '{print $1, $3}' > "$R/roce-sports.txt"
kill $LLDPD
touch "$R/fleet.done"; waitfor "/mnt/host/$other/fleet.done"
