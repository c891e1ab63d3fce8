#!/usr/bin/env bash
# TAP mode (issue 22): real daemons, a real TAP device beside real TUNs,
# three hosts in network namespaces over ibfabricd.
#
#   A  ipoibd ib0 mode = tap  198.18.0.1/24 2001:db8::1/64, datagram mode
#   B  ipoibd ib0 mode = tun  198.18.0.2/24 2001:db8::2/64, connected mode
#   C  ipoibd ib0 mode = tap  198.18.0.3/24 2001:db8::3/64, connected mode
#
#  1. A's ib0 is an Ethernet device with the synthetic MAC of its port GUID;
#     ping and ping6 between every pair; `ip neigh show dev ib0` on A lists
#     B and C as REACHABLE with their synthetic MACs (02 + the GUID's low 40
#     bits), and ipoibctl neigh shows the same MACs;
#  2. iperf3 TCP A -> B and B -> A (TAP <-> TUN), C -> B over an RC
#     connection (TAP in connected mode, 60000-byte pings with DF);
#  3. frames the translation cannot map, written on A's ib0 with an
#     AF_PACKET socket (a VLAN tag, LLDP, a forged source MAC, ARP for
#     hardware type 6, a truncated frame, a frame to an unknown MAC) are
#     dropped and counted by reason, and ping still works;
#  4. B restarts with a new QPN: A's kernel keeps B's MAC and reaches it
#     again (the MAC stands for the port, not the QPN).
#
# scenario/tap_mode.sh BIN_DIR
set -euo pipefail
BIN=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
scenario_init tap_mode

for tool in iperf3 python3 ping; do
  command -v $tool >/dev/null || fail "$tool is not installed (scripts/install-deps.sh)"
done

FAB=tpf$$; A=tpa$$; B=tpb$$; C=tpc$$
FABRIC=198.18.107.100:18516
declare -A GUID=([a]=0x0002c90300f0000a [b]=0x0002c90300f0000b [c]=0x0002c90300f0000c)
declare -A MAC=([a]=02:03:00:f0:00:0a [b]=02:03:00:f0:00:0b [c]=02:03:00:f0:00:0c)
declare -A UNDERLAY=([a]=198.18.107.1 [b]=198.18.107.2 [c]=198.18.107.3)
declare -A NS=([a]=$A [b]=$B [c]=$C)
declare -A IDX=([a]=1 [b]=2 [c]=3)
declare -A MODE=([a]=tap [b]=tun [c]=tap)
declare -A CONNECTED=([a]=no [b]=yes [c]=yes)

star_underlay "$FAB" 198.18.107.100/24
for h in a b c; do star_host "$FAB" "${NS[$h]}" "$h$$" "${UNDERLAY[$h]}/24"; done

for h in a b c; do
  cat >"$WORK/$h.conf" <<EOF2
[fabric]
transport = soft
address = $FABRIC
port-guid = ${GUID[$h]}
[interface]
mode = ${MODE[$h]}
connected-mode = ${CONNECTED[$h]}
address = 198.18.0.${IDX[$h]}/24
address = 2001:db8::${IDX[$h]}/64
[daemon]
control-socket = $WORK/$h.sock
EOF2
done


start "$FAB" "$WORK/fabric.log" "$BIN/ibfabricd" --listen "$FABRIC" --sweep-interval 1s --control-socket none
FABPID=${PIDS[-1]}
wait_for 5 "$WORK/fabric.log" "listening on" || fail "ibfabricd did not start"
for h in a b c; do start_ipoibd $h run; done
for h in a b c; do wait_link_up $h 20; done

# --- 1. the devices, pings, the kernel's neighbour table --------------------------
link_a=$(in_ns a ip -d link show ib0)
grep -q "link/ether ${MAC[a]}" <<<"$link_a" || fail "A's ib0 is not an Ethernet device with MAC ${MAC[a]}: $link_a"
grep -q "tap" <<<"$link_a" || fail "A's ib0 is not a TAP device: $link_a"
link_b=$(in_ns b ip -d link show ib0)
grep -q "link/none" <<<"$link_b" || fail "B's ib0 is not a TUN: $link_b"
pass "A's ib0 is a TAP device with MAC ${MAC[a]}; B's a TUN"

for pair in "a 2" "a 3" "b 1" "b 3" "c 1" "c 2"; do
  set -- $pair
  ping_until "$1" 20 "198.18.0.$2" || fail "$1 cannot ping 198.18.0.$2"
  ping_until "$1" 20 "2001:db8::$2" || fail "$1 cannot ping6 2001:db8::$2"
done
pass "ping and ping6 between every pair (TAP, TUN, TAP+connected)"

neigh=$(in_ns a ip neigh show dev ib0)
for peer in "b 2" "c 3"; do
  set -- $peer
  for addr in "198.18.0.$2" "2001:db8::$2"; do
    grep -qE "^$addr lladdr ${MAC[$1]} (REACHABLE|STALE|DELAY|PROBE)" <<<"$neigh" ||
      fail "A's ip neigh lacks $addr at ${MAC[$1]}: $neigh"
  done
done
grep -q "198.18.0.2 lladdr ${MAC[b]} REACHABLE" <<<"$neigh" || fail "B is not REACHABLE in A's ip neigh: $neigh"
ctl_neigh=$(ctl a -j neigh)
python3 - "$ctl_neigh" "${MAC[b]}" "${MAC[c]}" <<'EOF' || fail "ipoibctl neigh on A does not show the synthetic MACs: $ctl_neigh"
import json, sys
rows = {r["address"]: r for r in json.loads(sys.argv[1])}
assert rows["198.18.0.2"]["mac"] == sys.argv[2], rows["198.18.0.2"]
assert rows["198.18.0.3"]["mac"] == sys.argv[3], rows["198.18.0.3"]
EOF
pass "A's ip neigh: B and C at their synthetic MACs (REACHABLE); ipoibctl neigh agrees"

# --- 2. throughput, connected mode under TAP -------------------------------------------
mtu_c=$(in_ns c cat /sys/class/net/ib0/mtu)
[ "$mtu_c" = 65520 ] || fail "C's ib0 MTU is $mtu_c in connected mode (TAP)"
in_ns c ping -c 3 -W 2 -s 60000 -M do 198.18.0.2 >/dev/null || fail "C (TAP, connected) cannot ping B with 60000 bytes"
in_ns c ping -c 3 -W 2 -s 60000 -M do 2001:db8::2 >/dev/null || fail "C (TAP, connected) cannot ping6 B with 60000 bytes"
[ "$(stat_of c engine tx_connected)" -gt 0 ] || fail "C sent nothing over RC"
pass "C (TAP, MTU 65520) pings B with 60000 bytes over its RC connection"

iperf() {  # CLIENT SERVER-HOST
  local out
  in_ns "$2" timeout 30 iperf3 -s -1 -B "198.18.0.${IDX[$2]}" >"$WORK/iperf-$1-$2-srv.log" 2>&1 &
  PIDS+=($!)
  sleep 0.5
  out=$(in_ns "$1" timeout 30 iperf3 -c "198.18.0.${IDX[$2]}" -t 3 -J) || fail "iperf3 $1 -> $2 failed"
  python3 -c "import json,sys; d=json.loads(sys.argv[1]); b=d['end']['sum_received']['bytes']; assert b > 1000000, b; print('%.2f' % (d['end']['sum_received']['bits_per_second']/1e9))" "$out"
}
ab=$(iperf a b) || fail "iperf3 A -> B moved nothing"
ba=$(iperf b a) || fail "iperf3 B -> A moved nothing"
cb=$(iperf c b) || fail "iperf3 C -> B moved nothing"
pass "iperf3 TCP: A(TAP) -> B(TUN) $ab Gbit/s, B -> A $ba Gbit/s, C(TAP, RC) -> B $cb Gbit/s"
[ "$(stat_of a tap rx_segmented)" -gt 0 ] || fail "A's TAP took no TSO super-frames (offloads off?)"

# --- 3. frames the translation cannot map ----------------------------------------------
before_ok=$(stat_of a ethernet frames_in)
in_ns a python3 - "${MAC[a]}" "${MAC[b]}" <<'EOF' || fail "could not write raw frames on A's ib0"
import socket, struct, sys
own = bytes.fromhex(sys.argv[1].replace(":", ""))
peer = bytes.fromhex(sys.argv[2].replace(":", ""))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("ib0", 0))
ip = bytes.fromhex("4500001c0001000040010000c6120001c6120002") + bytes(8)  # a small IPv4 packet
arp6 = struct.pack("!HHBBH", 6, 0x0800, 6, 4, 1) + own + bytes([198, 18, 0, 1]) + bytes(6) + bytes([198, 18, 0, 2])
frames = [
    peer + own + struct.pack("!H", 0x8100) + struct.pack("!HH", 5, 0x0800) + ip,  # VLAN tag
    bytes.fromhex("0180c200000e") + own + struct.pack("!H", 0x88CC) + bytes(40),  # LLDP
    peer + bytes.fromhex("02deadbeef01") + struct.pack("!H", 0x0800) + ip,         # forged source MAC
    b"\xff" * 6 + own + struct.pack("!H", 0x0806) + arp6,                           # ARP, hardware type 6
    bytes.fromhex("021122334455") + own + struct.pack("!H", 0x0800) + ip,         # an unknown MAC
]
for f in frames:
    s.send(f)
EOF
unmappable_counted() {  # every reason counted once at least, in A's stats now
  python3 - "$(ctl a -j stats)" <<'EOF'
import json, sys
e = json.loads(sys.argv[1])["ethernet"]
for key in ("frame_vlan_tagged", "drop_other_ether_type", "drop_forged_source", "arp_wrong_hardware_type",
            "drop_unknown_mac"):
    assert e.get(key, 0) >= 1, (key, e)
EOF
}
eventually 20 unmappable_counted 2>/dev/null || fail "A did not count the unmappable frames by reason: $(ctl a -j stats)"
ping_until a 10 198.18.0.2 || fail "A cannot ping B after the bad frames"
pass "VLAN, LLDP, forged source, ARP for hardware type 6, unknown MAC: dropped and counted by reason; ping still works"

# --- 4. a peer restart keeps its MAC ---------------------------------------------------
old=$(status_of b qpn)
stop_ipoibd b
start_ipoibd b restart
wait_link_up b 20
new=$(status_of b qpn)
[ "$new" != "$old" ] || fail "B's QPN did not change over a restart ($old)"
ping_until a 20 198.18.0.2 || fail "A did not reach the restarted B"
neigh=$(in_ns a ip neigh show dev ib0)
grep -q "198.18.0.2 lladdr ${MAC[b]}" <<<"$neigh" || fail "B's MAC changed over its restart: $neigh"
pass "B restarted (QPN $old -> $new); A reached it at the same MAC ${MAC[b]}"

for h in a b c; do stop_ipoibd $h; done
kill -TERM "$FABPID"; wait "$FABPID" || true
pass "tap_mode"
