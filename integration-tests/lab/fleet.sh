#!/bin/bash
# The fleet's topology from LLDP in the guest pair (sourced by probe.sh on both, after
# preflight.sh; $BIN, $R and probe.sh's waitfor set): each guest runs lldpd (Debian's
# lldpd, the guest's hostname lab-a or lab-b as its system name), waits until it sees the
# other as its neighbour, and prints its topology lines with `rocewatch fleet topology`:
# each guest's eth0 is cabled to the other, so each one's "ToR" is the other guest.
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
kill $LLDPD
other=a; [ "$RXE_ROLE" = a ] && other=b
touch "$R/fleet.done"; waitfor "/mnt/host/$other/fleet.done"
