#!/usr/bin/env bash
# IPoIB connected mode (RFC 4755, issue 21) end to end: real daemons, real
# TUN devices, three hosts in network namespaces over ibfabricd.
#
#   A  ipoibd ib0 198.18.0.1/24 2001:db8::1/64, [interface] connected-mode = yes
#   B  ipoibd ib0 198.18.0.2/24 2001:db8::2/64, connected-mode = yes
#   C  ipoibd ib0 198.18.0.3/24 2001:db8::3/64, datagram mode
#
# Three runs, each with a fresh fabric and fresh daemons:
#  1. capture (ibfabricd --pcap; every packet through the switch):
#     MTU 65520 on A and B, C's group MTU less 4; ping and ping6 between
#     every pair; `ping -s 60000 -M do` and `ping6 -s 60000 -M do` between A
#     and B; from A to C the same gets ICMP Fragmentation Needed / Packet
#     Too Big with C's MTU, the host's route learns it, and pings of 3000
#     bytes then cross (fragmented by the host); ipoibctl neigh shows B
#     connected (up) and C datagram; B restarts with a new QPN and A
#     reaches it again over a new connection; the capture decodes in tshark
#     (CM REQ/REP/RTU for IPoIB ServiceIDs, RC SENDs carrying IP, ACKs) with
#     every CRC recomputed (check_cm_capture.py);
#  2. throughput (cut-through): iperf3 TCP A -> B over the connection, and
#     A -> C, where the host learns C's MTU from our ICMP on the way;
#  3. 1% loss (ibfabricd --fault loss=1%): pings of 60000 bytes with DF and
#     iperf3 A -> B still work (the RC retries), retransmissions counted;
#     B restarts again and is reached again.
#
# scenario/connected_mode.sh BIN_DIR
set -euo pipefail
BIN=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
scenario_init connected_mode

for tool in iperf3 tshark python3 ping; do
  command -v $tool >/dev/null || fail "$tool is not installed (scripts/install-deps.sh)"
done

FAB=cmf$$; A=cma$$; B=cmb$$; C=cmc$$
FABRIC=198.18.106.100:18516
declare -A GUID=([a]=0x0002c90300d0000a [b]=0x0002c90300d0000b [c]=0x0002c90300d0000c)
declare -A UNDERLAY=([a]=198.18.106.1 [b]=198.18.106.2 [c]=198.18.106.3)
declare -A NS=([a]=$A [b]=$B [c]=$C)
declare -A IDX=([a]=1 [b]=2 [c]=3)
declare -A CONNECTED=([a]=yes [b]=yes [c]=no)
# A sends small packets over UD while its connection is idle (the
# default); B sends everything to a capable peer over its connection, as
# the kernel does (and the capture gets single-packet RC SENDs).
declare -A IDLE_UD=([a]=yes [b]=no [c]=yes)

star_underlay "$FAB" 198.18.106.100/24
for h in a b c; do star_host "$FAB" "${NS[$h]}" "$h$$" "${UNDERLAY[$h]}/24"; done

for h in a b c; do
  cat >"$WORK/$h.conf" <<EOF2
[fabric]
transport = soft
address = $FABRIC
port-guid = ${GUID[$h]}
[interface]
connected-mode = ${CONNECTED[$h]}
connected-datagram-when-idle = ${IDLE_UD[$h]}
address = 198.18.0.${IDX[$h]}/24
address = 2001:db8::${IDX[$h]}/64
[daemon]
control-socket = $WORK/$h.sock
EOF2
done

start_fabric() {  # RUN ARGS...
  local run=$1; shift
  start "$FAB" "$WORK/fabric-$run.log" "$BIN/ibfabricd" --listen "$FABRIC" --sweep-interval 1s --control-socket none "$@"
  FABPID=${PIDS[-1]}
  wait_for 5 "$WORK/fabric-$run.log" "listening on" || fail "ibfabricd did not start ($run)"
}
start_hosts() {  # RUN
  for h in a b c; do start_ipoibd $h "$1"; done
  for h in a b c; do wait_link_up $h 20; done
}
stop_all() {
  for h in a b c; do stop_ipoibd $h; done
  kill -TERM "$FABPID"; wait "$FABPID" || true
}
restart_b() {  # RUN: B comes back with a new QPN, and A reaches it
  local old new
  old=$(status_of b qpn)
  stop_ipoibd b
  start_ipoibd b "$1-restart"
  wait_link_up b 20
  new=$(status_of b qpn)
  [ "$new" != "$old" ] || fail "B's QPN did not change over a restart ($old)"
  ping_until a 20 -s 20000 -M do 198.18.0.2 || fail "A did not reach the restarted B ($1)"
  pass "B restarted (QPN $old -> $new); A reached it again with 20000-byte pings"
}

# --- 1. capture ------------------------------------------------------------------
start_fabric capture --pcap "$WORK/cm.pcap"
start_hosts capture
for h in a b; do
  mtu=$(in_ns $h cat /sys/class/net/ib0/mtu)
  [ "$mtu" = 65520 ] || fail "$h's ib0 MTU is $mtu in connected mode"
done
ud_mtu=$(in_ns c cat /sys/class/net/ib0/mtu)
{ [ "$ud_mtu" = 2044 ] || [ "$ud_mtu" = 4092 ]; } || fail "C's ib0 MTU is $ud_mtu"
pass "ib0 MTU 65520 on A and B (connected), $ud_mtu on C (datagram)"

for s in a b c; do
  for d in a b c; do
    [ $s = $d ] && continue
    ping_until $s 10 "198.18.0.${IDX[$d]}" || fail "ping $s -> $d"
    ping_until $s 10 -6 "2001:db8::${IDX[$d]}" || fail "ping6 $s -> $d"
  done
done
pass "ping and ping6 between every pair of A, B (connected) and C (datagram)"

in_ns a ping -c 3 -i 0.2 -W 2 -s 60000 -M do 198.18.0.2 >"$WORK/big.log" 2>&1 || fail "ping -s 60000 -M do A -> B: $(tail -3 "$WORK/big.log")"
in_ns b ping -c 3 -i 0.2 -W 2 -s 60000 -M do 198.18.0.1 >>"$WORK/big.log" 2>&1 || fail "ping -s 60000 -M do B -> A"
in_ns a ping -6 -c 3 -i 0.2 -W 2 -s 60000 -M do 2001:db8::2 >>"$WORK/big.log" 2>&1 || fail "ping6 -s 60000 -M do A -> B"
pass "ping -s 60000 -M do and ping6 -s 60000 -M do between A and B"

in_ns a ping -c 1 -W 2 -s 3000 -M do 198.18.0.3 >"$WORK/ptb4.log" 2>&1 || true
grep -q "Frag needed and DF set (mtu = $ud_mtu)" "$WORK/ptb4.log" ||
  fail "no Fragmentation Needed with mtu $ud_mtu from A's ping to C: $(cat "$WORK/ptb4.log")"
route=$(in_ns a ip route get 198.18.0.3)
grep -q "mtu $ud_mtu" <<<"$route" || fail "A's route to C did not learn mtu $ud_mtu: $route"
in_ns a ping -6 -c 1 -W 2 -s 3000 -M do 2001:db8::3 >"$WORK/ptb6.log" 2>&1 || true
grep -q "Packet too big: mtu=$ud_mtu" "$WORK/ptb6.log" ||
  fail "no Packet Too Big with mtu $ud_mtu from A's ping6 to C: $(cat "$WORK/ptb6.log")"
in_ns a ping -c 2 -i 0.2 -W 2 -s 3000 198.18.0.3 >/dev/null || fail "ping -s 3000 A -> C after the PMTU"
in_ns a ping -6 -c 2 -i 0.2 -W 2 -s 3000 2001:db8::3 >/dev/null || fail "ping6 -s 3000 A -> C after the PMTU"
n=$(stat_of a engine icmp_too_big_tx)
[ "$n" -ge 2 ] || fail "A counted $n ICMP too-big answers"
pass "A -> C over UD: Fragmentation Needed and Packet Too Big (mtu $ud_mtu) from C's address, the routes learned it, 3000-byte pings then crossed ($n answers counted)"

neigh=$(ctl a -j neigh)
python3 - "$neigh" <<'PY' || fail "ipoibctl neigh: $neigh"
import json, sys
rows = {r["address"]: r for r in json.loads(sys.argv[1])}
b, c = rows["198.18.0.2"], rows["198.18.0.3"]
assert b["mode"] == "connected" and b["connection"] == "up", b
assert c["mode"] == "datagram" and c["connection"] == "-", c
assert b["lladdr"].startswith("80:"), b["lladdr"]
assert c["lladdr"].startswith("00:"), c["lladdr"]
PY
for what in connected accepted tx_messages rx_messages; do
  [ "$(stat_of a connected $what)" -ge 1 ] || fail "A's connected.$what is 0"
done
[ "$(stat_of a cm cm_established)" -ge 2 ] || fail "A's CM established fewer than 2 connections"
pass "ipoibctl neigh: B connected (up, flag 0x80), C datagram; stats: connections both ways"

# Small packets to an idle connection: A's go UD (connected-datagram-when-
# idle, the default), B's over its connection (set to no): five pings.
a_idle=$(stat_of a connected idle_datagram); b_idle=$(stat_of b connected idle_datagram)
a_rc=$(stat_of a connected tx_messages); b_rc=$(stat_of b connected tx_messages)
in_ns a ping -c 5 -i 0.2 -W 2 198.18.0.2 >/dev/null || fail "ping A -> B (small)"
[ $(($(stat_of a connected idle_datagram) - a_idle)) -ge 5 ] && [ "$(stat_of a connected tx_messages)" = "$a_rc" ] ||
  fail "A's small pings to B: not over UD (idle_datagram $a_idle -> $(stat_of a connected idle_datagram), RC messages $a_rc -> $(stat_of a connected tx_messages))"
[ $(($(stat_of b connected tx_messages) - b_rc)) -ge 5 ] && [ "$(stat_of b connected idle_datagram)" = "$b_idle" ] ||
  fail "B's small replies: not over its connection (RC messages $b_rc -> $(stat_of b connected tx_messages), idle_datagram $b_idle -> $(stat_of b connected idle_datagram))"
pass "small pings: A's requests over UD while its connection is idle, B's replies over RC (connected-datagram-when-idle = no)"

qpns=$(for h in a b c; do echo "--ud-qpn $(status_of $h qpn)"; done)
restart_b capture
qpns="$qpns --ud-qpn $(status_of b qpn)"
stop_all  # the capture is whole once ibfabricd has exited
# shellcheck disable=SC2086
python3 "$HERE/check_cm_capture.py" "$WORK/cm.pcap" $qpns >"$WORK/capture.log" 2>&1 ||
  fail "the capture: $(tail -n 25 "$WORK/capture.log")"
pass "$(tail -n 1 "$WORK/capture.log")"
rm -f "$WORK/cm.pcap"

# --- 2. throughput ------------------------------------------------------------------
start_fabric throughput
start_hosts throughput
ping_until a 10 198.18.0.2 || fail "A -> B (throughput run)"
ping_until a 10 198.18.0.3 || fail "A -> C (throughput run)"
ip netns exec "${NS[b]}" iperf3 -s -1 -B 198.18.0.2 >"$WORK/iperf-b.log" 2>&1 &
PIDS+=($!)
ip netns exec "${NS[c]}" iperf3 -s -1 -B 198.18.0.3 >"$WORK/iperf-c.log" 2>&1 &
PIDS+=($!)
sleep 0.5
before=$(stat_of a connected tx_messages); ud_before=$(stat_of a engine tx_unicast)
idle_before=$(stat_of a connected idle_datagram)
in_ns a timeout 30 iperf3 -c 198.18.0.2 -t 5 -J >"$WORK/iperf-ab.json" 2>&1 || fail "iperf3 A -> B: $(tail -5 "$WORK/iperf-ab.json")"
after=$(stat_of a connected tx_messages); ud_after=$(stat_of a engine tx_unicast)
idle_after=$(stat_of a connected idle_datagram)
bytes=$(python3 -c "import json,sys; print(int(json.load(open(sys.argv[1]))['end']['sum_received']['bytes']))" "$WORK/iperf-ab.json")
[ "$bytes" -gt 0 ] || fail "iperf3 A -> B moved nothing"
# All of it over the connection: at least one RC message per 65524 bytes;
# UD unicast only for address resolution and the small packets sent while
# the connection was idle (connected-datagram-when-idle: the handshakes and
# iperf3's control messages), hardly any.
[ $((after - before)) -ge $((bytes / 65524)) ] ||
  fail "iperf3 A -> B: $bytes bytes but only $((after - before)) RC messages"
idle=$((idle_after - idle_before))
[ $((ud_after - ud_before - idle)) -le 10 ] ||
  fail "iperf3 A -> B: $((ud_after - ud_before)) unicast frames went UD, $idle of them small ones to an idle connection"
[ "$idle" -le 100 ] || fail "iperf3 A -> B: $idle frames went UD as small ones to an idle connection"
in_ns a timeout 30 iperf3 -c 198.18.0.3 -t 3 >"$WORK/iperf-ac.log" 2>&1 || fail "iperf3 A -> C: $(tail -5 "$WORK/iperf-ac.log")"
grep -q receiver "$WORK/iperf-ac.log" || fail "iperf3 A -> C did not finish"
pass "iperf3 TCP A -> B over RC: $bytes bytes in $((after - before)) RC messages; A -> C over UD: $(grep receiver "$WORK/iperf-ac.log" | awk '{print $7, $8}')"

# Connected mode off and on again by reload (SIGHUP): the MTU follows, and
# with A in datagram mode B's 60000-byte pings get A's UD MTU back.
wait_mtu() {  # HOST MTU
  local deadline=$((SECONDS + 10))
  until [ "$(in_ns "$1" cat /sys/class/net/ib0/mtu)" = "$2" ]; do
    [ $SECONDS -lt $deadline ] || fail "$1's MTU did not become $2 after the reload"
    sleep 0.1
  done
}
sed -i 's/^connected-mode = yes/connected-mode = no/' "$WORK/a.conf"
kill -HUP "${PID[a]}"
wait_mtu a "$ud_mtu"
[ "$(ctl a -j neigh | python3 -c "import json,sys; print(sum(1 for r in json.load(sys.stdin) if r['mode'] == 'connected'))")" = 0 ] ||
  fail "A still calls a neighbour connected in datagram mode"
deadline=$((SECONDS + 10))
until out=$(in_ns b ping -c 1 -W 1 -s 3000 -M do 198.18.0.1 2>&1 || true); grep -q "mtu = $ud_mtu" <<<"$out"; do
  [ $SECONDS -lt $deadline ] || fail "B was not told A's UD MTU after A left connected mode"
  sleep 0.2
done
sed -i 's/^connected-mode = no/connected-mode = yes/' "$WORK/a.conf"
kill -HUP "${PID[a]}"
wait_mtu a 65520
pass "reload: connected-mode = no put A's MTU at $ud_mtu and B's big pings got Fragmentation Needed from it; yes put 65520 back"
stop_all

# --- 3. 1% loss -----------------------------------------------------------------------
start_fabric loss --fault loss=1% --fault-seed 21
start_hosts loss
ping_until a 20 198.18.0.2 || fail "A -> B through 1% loss"
# -w: each echo is waited for, however late its retransmissions bring it
# (without it the last gets twice the slowest round trip).
in_ns a ping -c 10 -i 0.2 -W 3 -w 120 -s 60000 -M do 198.18.0.2 >"$WORK/loss-ping.log" 2>&1 || true
got=$(sed -n 's/.* \([0-9]*\) received.*/\1/p' "$WORK/loss-ping.log")
[ "${got:-0}" -ge 9 ] || fail "only ${got:-0} of 10 60000-byte pings crossed 1% loss: $(tail -3 "$WORK/loss-ping.log")"
ip netns exec "${NS[b]}" iperf3 -s -1 -B 198.18.0.2 >"$WORK/iperf-loss-b.log" 2>&1 &
PIDS+=($!)
sleep 0.5
in_ns a timeout 40 iperf3 -c 198.18.0.2 -t 5 >"$WORK/iperf-loss.log" 2>&1 || fail "iperf3 A -> B through 1% loss: $(tail -5 "$WORK/iperf-loss.log")"
grep -q receiver "$WORK/iperf-loss.log" || fail "iperf3 through loss did not finish"
retx=$(stat_of a connected rc_retransmitted)
[ "$retx" -gt 0 ] || fail "no RC retransmission counted through 1% loss"
pass "1% loss: $got/10 60000-byte pings; iperf3 A -> B $(grep receiver "$WORK/iperf-loss.log" | awk '{print $7, $8}'); A retransmitted $retx RC packets"
restart_b loss
stop_all
echo "connected_mode: all checks passed"
