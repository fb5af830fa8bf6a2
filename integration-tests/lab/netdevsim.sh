# netdevsim.sh - sourced by counters.sh in guest a: SR-IOV VFs on a real kernel, from
# netdevsim (built for the guest kernel by netdevsim-build.sh, shared at
# /mnt/extra/netdevsim/KV, KV the guest kernel's release).
#
# Loads psample and netdevsim, makes netdevsim device 1 with one port, enables 2 VFs on it
# (its `sriov_numvfs`), sets the VF attributes through `ip link set PF vf N ...`, then
# records under $R:
#   nds-setup.txt          each command and its exit status (insmod, new_device, ip link set)
#   nds-pf.txt             the PF netdev's name
#   nds-vfinfo-reply.bin   the kernel's raw reply to RTM_GETLINK (the PF by name, with
#                          IFLA_EXT_MASK = RTEXT_FILTER_VF), as one netlink message
#   nds-ip-link.txt        `ip -d link show dev PF` (its `vf N` lines)
#   nds-link-*, nds-fec-set.txt, nds-optics.*: the link and module requests (nds_link)
# or nds-missing.txt when the module was not built (the test then says SKIPPED).
# doctor's sriov topic is not run here: it finds PFs by their PCI `sriov_totalvfs` among
# the RDMA ports' netdevs, and netdevsim is neither a PCI device nor an RDMA device.
# Uses $R (the role's output directory), as counters.sh sets it.
nds_run() {
  local m=/mnt/extra/netdevsim/$(uname -r) dev=/sys/bus/netdevsim/devices/netdevsim1 pf i
  if [ ! -f "$m/netdevsim.ko" ]; then
    echo "no $m/netdevsim.ko (integration-tests/lab/netdevsim-build.sh did not run)" > "$R/nds-missing.txt"
    return 0
  fi
  # each step said with its status, for the host-side test to show when one failed
  step() { "$@" >> "$R/nds-setup.txt" 2>&1; echo "rc=$? $*" >> "$R/nds-setup.txt"; }
  [ -d /sys/module/psample ] || step insmod "$m/psample.ko"
  step insmod "$m/netdevsim.ko"
  step sh -c 'echo "1 1" > /sys/bus/netdevsim/new_device'
  i=0; until [ -n "$(ls "$dev/net" 2>/dev/null)" ] || [ $i -ge 50 ]; do sleep 0.1; i=$((i+1)); done
  pf=$(ls "$dev/net" 2>/dev/null | head -n1)
  echo "$pf" > "$R/nds-pf.txt"
  [ -n "$pf" ] || { dmesg | tail -n 20 >> "$R/nds-setup.txt"; return 0; }
  step sh -c "echo 2 > $dev/sriov_numvfs"
  step ip link set dev "$pf" up
  step ip link set dev "$pf" vf 0 mac 02:00:00:00:0a:03
  step ip link set dev "$pf" vf 0 vlan 10 qos 3
  step ip link set dev "$pf" vf 1 min_tx_rate 100 max_tx_rate 300
  step ip link set dev "$pf" vf 1 state disable
  step ip link set dev "$pf" vf 1 trust on
  step ip link set dev "$pf" vf 1 spoofchk off
  # The request as rocewatch_netlink::vfinfo sends it: RTM_GETLINK (18), NLM_F_REQUEST,
  # an ifinfomsg, IFLA_IFNAME (3) and IFLA_EXT_MASK (29) = RTEXT_FILTER_VF (1); the reply
  # (one RTM_NEWLINK, or an NLMSG_ERROR) written as it came. perl-base is in the guest.
  perl -e '
    use Socket; my $nl = pack("S S L L", 16, 0, 0, 0);
    socket(my $s, 16, SOCK_RAW, 0) or die "socket: $!"; bind($s, $nl) or die "bind: $!";
    my $n = "$ARGV[0]\0"; $n .= "\0" x ((4 - length($n) % 4) % 4);
    my $b = pack("C C S l L L", 0, 0, 0, 0, 0, 0) . pack("S S", 4 + length($ARGV[0]) + 1, 3) . $n
      . pack("S S L", 8, 29, 1);
    send($s, pack("L S S L L", 16 + length($b), 18, 1, 1, 0) . $b, 0, $nl) or die "send: $!";
    defined(recv($s, my $r, 65536, 0)) or die "recv: $!"; binmode STDOUT; print $r;
  ' "$pf" > "$R/nds-vfinfo-reply.bin" 2>> "$R/nds-setup.txt"
  ip -d link show dev "$pf" > "$R/nds-ip-link.txt" 2>&1
  nds_link "$pf"
}
# nds_link PF: the link requests of counters-ethtool and `rocewatch optics` on a real
# kernel. netdevsim (6.1) answers ETHTOOL_MSG_FEC_GET from what the FEC ioctl set, and
# has no module (ETHTOOL_MSG_MODULE_EEPROM_GET: EOPNOTSUPP). Records:
#   nds-link-default.json/.stderr  `rocewatch collect --once` on PF before any FEC is set
#   nds-fec-set.txt                the ETHTOOL_SFECPARAM ioctl (RS) and its status
#   nds-link-rs.json/.stderr       the same collection after it
#   nds-optics.txt/.stderr/.rc     `rocewatch optics` on this host (no module anywhere)
nds_link() {
  local pf=$1
  printf '[plugins.builtin.counters-ethtool.options]\ninterfaces = ["%s"]\n' "$pf" > /tmp/nds-ethtool.toml
  "$BIN" collect --once --config /tmp/nds-ethtool.toml --sysfs-root /sys \
    > "$R/nds-link-default.json" 2> "$R/nds-link-default.stderr"
  # struct ethtool_fecparam { cmd = ETHTOOL_SFECPARAM (0x51), active_fec, fec =
  # ETHTOOL_FEC_RS (1 << ETHTOOL_FEC_RS_BIT 3), reserved } through SIOCETHTOOL (0x8946),
  # include/uapi/linux/ethtool.h and sockios.h.
  perl -e '
    use Socket; socket(my $s, AF_INET, SOCK_DGRAM, 0) or die "socket: $!";
    my $fp = pack("L4", 0x51, 0, 8, 0);
    my $ifr = pack("a16 P a16", $ARGV[0], $fp, "");
    ioctl($s, 0x8946, $ifr) or die "SIOCETHTOOL ETHTOOL_SFECPARAM: $!";
  ' "$pf" > "$R/nds-fec-set.txt" 2>&1
  echo "rc=$?" >> "$R/nds-fec-set.txt"
  "$BIN" collect --once --config /tmp/nds-ethtool.toml --sysfs-root /sys \
    > "$R/nds-link-rs.json" 2> "$R/nds-link-rs.stderr"
  "$BIN" optics > "$R/nds-optics.txt" 2> "$R/nds-optics.stderr"
  echo $? > "$R/nds-optics.rc"
}
nds_run
