#!/bin/sh
# Records the rtnetlink dumps under this folder: a throwaway network namespace with two
# veth "rails" in one subnet, first bare (addresses only, strict rp_filter on rail1), then
# configured for multi-rail (sysctls, a rule and a table per rail, a few other rules and
# a multipath route to exercise the decoders). Run as root from the repository root:
#   sh core/netlink/testdata/route-6.18/record.sh
# The namespace is deleted at the end, also on failure.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
ns=rw-record-$$
cargo build -q -p rocewatch-netlink --example route-dump
dump=$(pwd)/target/debug/examples/route-dump
trap 'ip netns del $ns 2>/dev/null || true' EXIT
ip netns add $ns
n() { ip -n $ns "$@"; }
x() { ip netns exec $ns "$@"; }
n link set lo up
for i in 0 1; do
    n link add rail$i type veth peer name peer$i
    n link set peer$i up
    n link set rail$i up
done
n addr add 198.51.100.11/24 dev rail0
n addr add 198.51.100.12/24 dev rail1
n addr add 2001:db8:1::11/64 dev rail0 nodad
n addr add 2001:db8:1::12/64 dev rail1 nodad
x sysctl -qw net.ipv4.conf.rail1.rp_filter=1

record() {
    out=$here/$1
    rm -rf "$out" "$out.tmp"
    mkdir -p "$out"
    x "$dump" "$out.tmp" > "$out/route-dump.txt"
    # The example's requests, in order: links, addresses, rules, IPv4 routes, IPv6 routes.
    k=1
    for what in link address rule route4 route6; do
        nnnn=$(printf %04d $k)
        mv "$out.tmp/$nnnn-request.bin" "$out/$what-dump-request.bin"
        for f in "$out.tmp/$nnnn"-reply-*.bin; do
            mv "$f" "$out/$what-dump-${f##*-reply-}"
        done
        k=$((k + 1))
    done
    rmdir "$out.tmp"
    x ip -j link show > "$out/ip-link.json"
    x ip -j addr show > "$out/ip-addr.json"
    x ip -j -4 rule show > "$out/ip-rule4.json"
    x ip -j -6 rule show > "$out/ip-rule6.json"
    x ip -j -4 route show table all > "$out/ip-route4.json"
    x ip -j -6 route show table all > "$out/ip-route6.json"
    : > "$out/sysctl.txt"
    for conf in all rail0 rail1; do
        for knob in arp_ignore arp_announce rp_filter; do
            echo "$conf.$knob=$(x cat /proc/sys/net/ipv4/conf/$conf/$knob)" >> "$out/sysctl.txt"
        done
    done
}

record bare

for i in 0 1; do
    x sysctl -qw net.ipv4.conf.rail$i.arp_ignore=1 net.ipv4.conf.rail$i.arp_announce=2 \
        net.ipv4.conf.rail$i.rp_filter=2
done
n rule add from 198.51.100.11 table 100
n rule add from 198.51.100.12 table 1001
n -6 rule add from 2001:db8:1::11 table 100
n -6 rule add from 2001:db8:1::12 table 1001
n rule add iif rail0 lookup main pref 1000
n rule add not fwmark 0x10 oif rail1 table 1001 pref 1001
n rule add to 203.0.113.0/24 prohibit pref 900
n route add 198.51.100.0/24 dev rail0 src 198.51.100.11 table 100
n route add default via 198.51.100.1 dev rail0 table 100
n route add 198.51.100.0/24 dev rail1 src 198.51.100.12 table 1001
n -6 route add 2001:db8:1::/64 dev rail0 table 100
n -6 route add 2001:db8:1::/64 dev rail1 table 1001
n route add 203.0.113.0/24 table 2000 nexthop via 198.51.100.1 dev rail0 nexthop via 198.51.100.2 dev rail1

record configured
uname -r > "$here/uname-r.txt"
