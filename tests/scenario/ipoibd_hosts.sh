#!/usr/bin/env bash
# ipoibd end to end: three hosts on one IPoIB subnet over ibfabricd, real
# daemons, real TUN devices, each host in a network namespace of its own.
#
#   fab  ibfabricd (198.18.100.100 on a bridge of veths, the "cables")
#   A    ipoibd ib0 198.18.0.1/24 2001:db8::1/64   (underlay 198.18.100.1)
#   B    ipoibd ib0 198.18.0.2/24 2001:db8::2/64   (underlay 198.18.100.2),
#        a router for 198.19.5.0/24 behind it (namespace D, 198.19.5.2)
#   C    ipoibd ib0 198.18.0.3/24 2001:db8::3/64   (underlay 198.18.100.3)
#
# Checks, in order:
#  1. A's ipoibd, started before the fabric exists, sends READY=1 only after
#     its broadcast join (a NOTIFY_SOCKET listener), and WATCHDOG=1;
#  2. ping and ping6 between every pair; ipoibctl neigh/paths/mcast/stats;
#  3. routing: A reaches D through `ip route add ... via 198.18.0.2`;
#  4. multicast: C joins 239.1.2.3 and ff05::1:3 with real sockets, A sends
#     to both and C receives; ibsaquery shows C FullMember and A a send-only
#     member; when C leaves, its membership is gone;
#  5. iperf3 TCP A -> B for 5 s; 4 MB over IPv6 with a Destination Options
#     header in every packet (TSO super-packets carrying it);
#  6. B's ipoibd restarts (new QPN): A reaches B again;
#  7. journald (started here when none runs) holds entries with the
#     structured fields and MESSAGE_IDs;
#  8. malformed frames injected into the fabric and malformed packets
#     written to A's TUN are dropped and counted in `ipoibctl stats`, and
#     traffic keeps flowing;
#  9. (checked right after 2) the capture shows IPoIB ARP (hardware type 32, length 20) and ND
#     options of length 3, decoded by tshark;
# 10. SIGTERM: the daemon leaves its groups (ibsaquery) and exits 0.
#
# scenario/ipoibd_hosts.sh BIN_DIR
set -euo pipefail
BIN=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
scenario_init ipoibd_hosts

for tool in iperf3 tshark python3 ping; do
  command -v $tool >/dev/null || fail "$tool is not installed (scripts/install-deps.sh)"
done

FAB=ipf$$; A=ipa$$; B=ipb$$; C=ipc$$; D=ipd$$
FABRIC=198.18.100.100:18516
declare -A GUID=([a]=0x0002c90300a0000a [b]=0x0002c90300a0000b [c]=0x0002c90300a0000c)
declare -A UNDERLAY=([a]=198.18.100.1 [b]=198.18.100.2 [c]=198.18.100.3)
declare -A NS=([a]=$A [b]=$B [c]=$C)
declare -A PID

# --- the underlay: a bridge in FAB, one veth per host ------------------------
star_underlay "$FAB" 198.18.100.100/24
for h in a b c; do star_host "$FAB" "${NS[$h]}" "$h$$" "${UNDERLAY[$h]}/24"; done
# D: a network behind B.
ip netns add "$D"; NAMESPACES+=("$D")
ip -n "$D" link set lo up
ip link add "vb$$" netns "$B" type veth peer name "vd$$" netns "$D"
ip -n "$B" addr add 198.19.5.1/24 dev "vb$$"; ip -n "$B" link set "vb$$" up
ip -n "$D" addr add 198.19.5.2/24 dev "vd$$"; ip -n "$D" link set "vd$$" up
ip -n "$D" route add default via 198.19.5.1
ip netns exec "$B" sysctl -qw net.ipv4.ip_forward=1

# --- journald: use the running one, or start our own ---------------------------
JOURNALD_OURS=""
# A socket nobody listens on (left by a journald that was killed) counts as none.
journal_alive() {
  python3 -c "import socket,sys; s=socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.connect('/run/systemd/journal/socket')" 2>/dev/null
}
if [ -S /run/systemd/journal/socket ] && ! journal_alive; then
  echo "removing a stale journald socket (no journald listens on it)" >&2
  rm -f /run/systemd/journal/socket
fi
if [ ! -S /run/systemd/journal/socket ]; then
  JD=$(command -v systemd-journald || echo /lib/systemd/systemd-journald)
  [ -x "$JD" ] || fail "systemd-journald not found (Debian package systemd)"
  CREATED=()
  for d in /run/systemd/journal /run/log/journal /run/log; do [ -e $d ] || CREATED+=($d); done
  "$JD" >"$WORK/journald.log" 2>&1 &
  JOURNALD_OURS=$!; PIDS+=("$JOURNALD_OURS")
  for _ in $(seq 50); do [ -S /run/systemd/journal/socket ] && break; sleep 0.1; done
  [ -S /run/systemd/journal/socket ] || fail "journald did not start"
  # Remove what our journald created, after scenario_cleanup stopped it.
  CLEANUP_HOOKS+=('rm -rf "${CREATED[@]}"')
fi
MARK="ipoibd-scenario-$$"

# --- configuration ---------------------------------------------------------------
write_config() {  # HOST INDEX
  cat >"$WORK/$1.conf" <<EOF
# $MARK
[fabric]
transport = soft
address = $FABRIC
port-guid = ${GUID[$1]}
[interface]
address = 198.18.0.$2/24
address = 2001:db8::$2/64
[daemon]
control-socket = $WORK/$1.sock
log-level = debug
EOF
}
write_config a 1; write_config b 2; write_config c 3

start_ipoibd() {  # HOST [env...]
  local h=$1; shift
  ip netns exec "${NS[$h]}" env "$@" "$BIN/ipoibd" -i ib0 -c "$WORK/$h.conf" --log-target=journal \
    >"$WORK/$h.log" 2>&1 &
  PID[$h]=$!; PIDS+=("${PID[$h]}")
}
ctl() {  # HOST ARGS...
  local h=$1; shift
  ip netns exec "${NS[$h]}" "$BIN/ipoibctl" -s "$WORK/$h.sock" "$@"
}
wait_link_up() {  # HOST SECONDS
  local deadline=$((SECONDS + $2))
  # Output read whole before grep: under pipefail, grep -q exiting early
  # can give the writer SIGPIPE and fail a pipeline that matched.
  until out=$(ctl "$1" -j status 2>/dev/null || true); grep -q '"link":"up"' <<<"$out"; do
    [ $SECONDS -lt $deadline ] || fail "$1: link not up after $2 s"
    sleep 0.1
  done
}
saquery() {  # ARGS... (from the fabric namespace, a port of its own)
  ip netns exec "$FAB" "$BIN/ibsaquery" --fabric "$FABRIC" --guid 0x0002c90300a000ff "$@"
}
member_state() {  # MGID PORT_GID: the port's JoinState in the group (0: not a member)
  saquery -j members "$1" 2>/dev/null | python3 -c "
import json, sys
state = 0
for line in sys.stdin:
    line = line.strip()
    if not line.startswith('{'): continue
    for r in json.loads(line).get('records') or []:
        if r.get('port_gid') == '$2': state |= r.get('join_state', 0)
print(state)"
}
stat_of() {  # HOST KEY: a counter from `ipoibctl -j stats` (0 when absent)
  ctl "$1" -j stats | python3 -c "import json,sys; d=json.load(sys.stdin); print(sum(v.get('$2',0) for v in d.values() if isinstance(v,dict)))"
}

# --- 1. readiness only after the broadcast join ------------------------------
# It listens until the scenario's cleanup ends it (its own limit, 600 s,
# is far above the scenario's run).
python3 "$HERE/notify_listener.py" "$WORK/notify.sock" "$WORK/notify.log" &
PIDS+=($!)
for _ in $(seq 50); do [ -S "$WORK/notify.sock" ] && break; sleep 0.1; done
start_ipoibd a NOTIFY_SOCKET="$WORK/notify.sock" WATCHDOG_USEC=2000000
sleep 2
grep -q "READY=1" "$WORK/notify.log" 2>/dev/null && fail "READY=1 before any fabric existed"
grep -q "STATUS=" "$WORK/notify.log" || fail "no STATUS= while waiting"
start "$FAB" "$WORK/fab.log" "$BIN/ibfabricd" --listen "$FABRIC" --pcap "$WORK/fabric.pcap"
FAB_PID=$!
wait_for 15 "$WORK/notify.log" "READY=1" || fail "no READY=1 after the fabric came"
# READY=1 and its STATUS= come in one datagram (the listener splits lines).
ready=$(grep -A1 "READY=1" "$WORK/notify.log")
grep -q "STATUS=.*broadcast group joined" <<<"$ready" \
  || { cat "$WORK/notify.log" >&2; fail "READY=1 without the broadcast join in its status"; }
status=$(ctl a -j status)
grep -q '"link":"up"' <<<"$status" || fail "READY=1 but A's link is not up"
wait_for 5 "$WORK/notify.log" "WATCHDOG=1" || fail "no WATCHDOG=1 with WATCHDOG_USEC set"
pass "READY=1 only after the broadcast join; WATCHDOG=1 with WATCHDOG_USEC"

start_ipoibd b
start_ipoibd c
wait_link_up b 15; wait_link_up c 15

# --- 2. ping and ping6 between every pair --------------------------------------
declare -A IDX=([a]=1 [b]=2 [c]=3)
for s in a b c; do
  for d in a b c; do
    [ $s = $d ] && continue
    ip netns exec "${NS[$s]}" ping -c 2 -i 0.2 -W 2 "198.18.0.${IDX[$d]}" >/dev/null \
      || fail "ping $s -> $d"
    ip netns exec "${NS[$s]}" ping -6 -c 2 -i 0.2 -W 2 "2001:db8::${IDX[$d]}" >/dev/null \
      || fail "ping6 $s -> $d"
  done
done
pass "ping and ping6 between every pair of A, B, C"
grep -q "198.18.0.2 .*REACHABLE\|198.18.0.2 .*STALE" <<<"$(ctl a neigh)" || { ctl a neigh; fail "ipoibctl neigh"; }
grep -q "VALID" <<<"$(ctl a paths)" || { ctl a paths; fail "ipoibctl paths"; }
grep -q "ff12:401b:ffff::ffff:ffff.*broadcast.*JOINED" <<<"$(ctl a mcast)" || { ctl a mcast; fail "ipoibctl mcast"; }
grep -q "tx_unicast" <<<"$(ctl a stats)" || fail "ipoibctl stats"
rt=$(stat_of a reachable_time_ms)  # RFC 4861 6.3.2: 0.5-1.5 x reachable-time (30 s)
{ [ "$rt" -ge 15000 ] && [ "$rt" -lt 45000 ]; } || fail "reachable_time_ms $rt is not within 15000-44999"
pass "ipoibctl status, neigh, paths, mcast, stats"

# --- 2b. the capture (early: the iperf3 run below makes it hundreds of MB) ---------------
sleep 0.3  # ibfabricd flushes the capture at the end of each wake-up
tshark -n -c 50000 -r "$WORK/fabric.pcap" -Y arp -T fields -e arp.hw.type -e arp.hw.size 2>/dev/null | sort -u >"$WORK/arp.txt"
grep -qx "32	20" "$WORK/arp.txt" || { cat "$WORK/arp.txt" >&2; fail "no IPoIB ARP (hardware type 32, length 20) in the capture"; }
tshark -n -c 50000 -r "$WORK/fabric.pcap" -Y "icmpv6.type == 135 || icmpv6.type == 136" -T fields -e icmpv6.opt.length \
  2>/dev/null | tr ',' '\n' | sort -u >"$WORK/nd.txt"
grep -qx "3" "$WORK/nd.txt" || { cat "$WORK/nd.txt" >&2; fail "no ND option of length 3 in the capture"; }
pass "capture: ARP hardware type 32 length 20; ND link-layer options of length 3 (tshark)"

# --- 3. routing through B --------------------------------------------------------
ip -n "$A" route add 198.19.5.0/24 via 198.18.0.2 dev ib0
ip netns exec "$A" ping -c 2 -i 0.2 -W 2 198.19.5.2 >/dev/null || fail "A -> D via B"
pass "198.19.5.0/24 behind B reached from A through ip route ... via 198.18.0.2"

# --- 4. multicast -----------------------------------------------------------------
MG4=239.1.2.3; MG6=ff05::1:3
MGID4=ff12:401b:ffff::f01:203; MGID6=ff12:601b:ffff::1:3
ip netns exec "$C" python3 "$HERE/mcast.py" recv $MG4 5000 ib0 60 "$WORK/c4.out" &
PIDS+=($!)
ip netns exec "$C" python3 "$HERE/mcast.py" recv $MG6 5000 ib0 60 "$WORK/c6.out" &
PIDS+=($!)
wait_for 5 "$WORK/c4.out" joined; wait_for 5 "$WORK/c6.out" joined
A_GID=fe80::2:c903:a0:a; C_GID=fe80::2:c903:a0:c
deadline=$((SECONDS + 10))
until [ "$(member_state $MGID4 $C_GID)" = 1 ] && [ "$(member_state $MGID6 $C_GID)" = 1 ]; do
  [ $SECONDS -lt $deadline ] || { saquery members $MGID4 || true; fail "C not a FullMember of the groups"; }
  sleep 0.2
done
ip netns exec "$A" python3 "$HERE/mcast.py" send $MG4 5000 ib0 5 hello4
ip netns exec "$A" python3 "$HERE/mcast.py" send $MG6 5000 ib0 5 hello6
wait_for 5 "$WORK/c4.out" "198.18.0.1 hello4" || fail "C did not receive A's IPv4 multicast"
wait_for 5 "$WORK/c6.out" "hello6" || fail "C did not receive A's IPv6 multicast"
[ "$(member_state $MGID4 $A_GID)" = 8 ] || { saquery members $MGID4; fail "A is not a SendOnlyFullMember of $MG4"; }
[ "$(member_state $MGID6 $A_GID)" = 8 ] || { saquery members $MGID6; fail "A is not a SendOnlyFullMember of $MG6"; }
pass "C joined $MG4 and $MG6 (FullMember), A sent as a send-only member, C received"
touch "$WORK/c4.out.stop" "$WORK/c6.out.stop"
deadline=$((SECONDS + 10))
until [ "$(member_state $MGID4 $C_GID)" = 0 ] && [ "$(member_state $MGID6 $C_GID)" = 0 ]; do
  [ $SECONDS -lt $deadline ] || { saquery members $MGID4 || true; fail "C's membership outlived its leave"; }
  sleep 0.2
done
pass "C left: its FullMember memberships are gone"

# --- 5. iperf3 ----------------------------------------------------------------------
ip netns exec "$B" iperf3 -s -1 -B 198.18.0.2 >"$WORK/iperf-server.log" 2>&1 &
PIDS+=($!)
sleep 0.5
ip netns exec "$A" timeout 30 iperf3 -c 198.18.0.2 -t 5 >"$WORK/iperf.log" 2>&1 || { cat "$WORK/iperf.log" >&2; fail "iperf3"; }
grep -q "receiver" "$WORK/iperf.log" || fail "iperf3 did not finish"
pass "iperf3 TCP A -> B, 5 s: $(grep receiver "$WORK/iperf.log" | awk '{print $7, $8}')"

# 5b. TCP over IPv6 with a Destination Options header in every packet: A's
# kernel hands its TUN TSO super-packets with the header, which ipoibd cuts
# with the header copied (none refused: offload_bad_headers stays put).
BAD_BEFORE=$(stat_of a offload_bad_headers)
ip netns exec "$B" python3 "$HERE/tcp_options.py" serve 2001:db8::2 5301 4000000 20 >"$WORK/dstopts-server.log" 2>&1 &
DSTOPTS_SERVER=$!; PIDS+=($DSTOPTS_SERVER)
sleep 0.5
ip netns exec "$A" timeout 30 python3 "$HERE/tcp_options.py" send 2001:db8::2 5301 4000000 20 >"$WORK/dstopts-client.log" 2>&1 \
  || { cat "$WORK/dstopts-client.log" >&2; fail "TCP with destination options A -> B"; }
wait "$DSTOPTS_SERVER" || { cat "$WORK/dstopts-server.log" >&2; fail "B did not get the 4 MB sent with destination options"; }
[ "$(cat "$WORK/dstopts-server.log")" = "$(cat "$WORK/dstopts-client.log")" ] || fail "the bytes B got are not the bytes A sent"
[ "$(stat_of a offload_bad_headers)" = "$BAD_BEFORE" ] || fail "A refused super-packets with destination options"
pass "TCP over IPv6 with destination options A -> B: 4 MB intact, no super-packet refused"

# --- 6. B restarts with a new QPN ------------------------------------------------------
OLD_QPN=$(ctl b -j status | python3 -c "import json,sys; print(json.load(sys.stdin)['qpn'])")
kill -TERM "${PID[b]}"; wait "${PID[b]}" || fail "B's ipoibd exited non-zero on SIGTERM"
start_ipoibd b
wait_link_up b 15
NEW_QPN=$(ctl b -j status | python3 -c "import json,sys; print(json.load(sys.stdin)['qpn'])")
[ "$OLD_QPN" != "$NEW_QPN" ] || fail "B came back with the same QPN $OLD_QPN"
# A bound for the test, not a claim about speed: A's stale path to B's old
# QPN is revalidated within a second or two when the machine is quiet.
t0=$SECONDS; reached=""
while [ $((SECONDS - t0)) -lt 30 ]; do
  if ip netns exec "$A" ping -c 1 -W 1 198.18.0.2 >/dev/null; then reached=1; break; fi
done
[ -n "$reached" ] || fail "A did not reach B after its restart (30 s)"
pass "B restarted (QPN $OLD_QPN -> $NEW_QPN); A reached it again with no operator action"

# --- 7. journald -------------------------------------------------------------------------
# journald writes asynchronously: look again for a few seconds.
check_journal() {
  journalctl --no-pager -o json SYSLOG_IDENTIFIER=ipoibd _PID="${PID[a]}" >"$WORK/journal.json" 2>/dev/null || true
  python3 - "$WORK/journal.json" <<'PY'
import json, sys
entries = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert entries, "no ipoibd entries in the journal"
up = [e for e in entries if e.get("MESSAGE_ID") == "e6679c3ea3fe4299bcf2506d6fa52b6e"]
assert up, "no link-up entry with its MESSAGE_ID"
e = up[0]
for f in ("IPOIB_IFNAME", "IB_MGID", "IB_QPN", "IB_GID", "IB_LID", "IB_PKEY", "IPOIB_MTU"):
    assert f in e, f"link-up entry lacks {f}"
assert e["IB_QPN"].startswith("0x") and len(e["IB_QPN"]) == 8, e["IB_QPN"]
assert any("IB_MGID" in x and x.get("MESSAGE", "").startswith("joined multicast group") for x in entries), "no group joins"
print(f"{len(entries)} entries; link up {e['MESSAGE_ID']}")
PY
}
deadline=$((SECONDS + 10))
until check_journal >"$WORK/journal-check.txt" 2>&1; do
  [ $SECONDS -lt $deadline ] || { cat "$WORK/journal-check.txt" >&2; fail "journald entries"; }
  sleep 0.5
done
cat "$WORK/journal-check.txt"
pass "journald holds ipoibd's entries with IPOIB_*/IB_* fields and MESSAGE_IDs"

# --- 8. malformed input ---------------------------------------------------------------------
A_LID=$(ctl a -j status | python3 -c "import json,sys; print(int(json.load(sys.stdin)['lid'],16))")
A_QPN=$(ctl a -j status | python3 -c "import json,sys; print(int(json.load(sys.stdin)['qpn'],16))")
before_trunc=$(stat_of a rx_frame_truncated)
ip netns exec "$FAB" "$BIN/ipoibinject" --fabric "$FABRIC" --guid 0x0002c90300a000fe \
  --dlid "$A_LID" --dqpn "$A_QPN" --qkey 0x0b1b >"$WORK/inject.log" 2>&1 || { cat "$WORK/inject.log" >&2; fail "ipoibinject"; }
counted() { [ "$(stat_of "$1" "$2")" -ge 1 ]; }  # HOST KEY: the counter moved
for k in rx_frame_truncated rx_frame_other_ether_type rx_arp_wrong_hardware_type rx_ip_truncated_header rx_rarp rx_nd_bad_checksum malformed_bad_icrc; do
  eventually 20 counted a $k || { ctl a stats >&2; fail "injected frame not counted under $k"; }
done
[ "$(stat_of a rx_frame_truncated)" -gt "$before_trunc" ] || fail "truncated frame not counted"
# From A's host: garbage through the TUN (a packet socket on ib0).
ip netns exec "$A" python3 - <<'PY'
import socket
s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
for p in (b"\x45\x00\x00", b"\x47" + b"\x00" * 30, b"\x10\x11\x12"):
    s.sendto(p, ("ib0", 0x0800))
PY
eventually 20 counted a tun_ip_truncated_header || { ctl a stats >&2; fail "short TUN packet not counted"; }
eventually 20 counted a tun_ip_bad_version || { ctl a stats >&2; fail "bad-version TUN packet not counted"; }
ip netns exec "$A" ping -c 2 -i 0.2 -W 2 198.18.0.3 >/dev/null || fail "traffic stopped after malformed input"
kill -0 "${PID[a]}" || fail "A's ipoibd died"
pass "malformed frames and TUN packets dropped, counted in ipoibctl stats; traffic flows"

# --- 8b. SIGHUP: an address added live; a restart-only key named -----------------
sed -i 's|^address = 198.18.0.1/24$|address = 198.18.0.1/24\naddress = 198.18.0.11/24|; s|^\[daemon\]$|[queues]\nsend-depth = 512\n[daemon]\nbusy-poll = 5ms|' "$WORK/a.conf"
[ "$(stat_of a window_us)" = 0 ] || fail "busy polling on before the reload"
windows_before=$(stat_of a windows)
kill -HUP "${PID[a]}"
deadline=$((SECONDS + 5))
until out=$(ip -n "$A" addr show dev ib0 || true); grep -q "198.18.0.11/24" <<<"$out"; do
  [ $SECONDS -lt $deadline ] || fail "SIGHUP did not add 198.18.0.11"
  sleep 0.1
done
ip netns exec "$B" ping -c 2 -i 0.2 -W 2 198.18.0.11 >/dev/null || fail "B cannot reach A's reloaded address"
[ "$(stat_of a window_us)" = 5000 ] || { ctl a stats >&2; fail "busy-poll = 5ms not in force after the reload"; }
[ "$(stat_of a windows)" -gt "$windows_before" ] || { ctl a stats >&2; fail "no busy-polling window after the reload"; }
grep -q "RELOADING=1" "$WORK/notify.log" || fail "no RELOADING=1 on SIGHUP"
deadline=$((SECONDS + 5))
until out=$(journalctl --no-pager _PID="${PID[a]}" 2>/dev/null || true)
      grep -q "configuration reloaded.*needs a restart to take effect: queues.send-depth" <<<"$out"; do
  [ $SECONDS -lt $deadline ] || { journalctl --no-pager _PID="${PID[a]}" | tail -5; fail "reload did not name queues.send-depth as needing a restart"; }
  sleep 0.2
done
pass "SIGHUP: RELOADING=1, 198.18.0.11 and busy-poll = 5ms applied live (B reaches it, A polls), queues.send-depth reported as needing a restart"

# --- 10. SIGTERM leaves the groups ---------------------------------------------------------------
BCAST=ff12:401b:ffff::ffff:ffff
[ "$(member_state $BCAST $C_GID)" = 1 ] || fail "C is not in the broadcast group before SIGTERM"
kill -TERM "${PID[c]}"; wait "${PID[c]}" || fail "C's ipoibd exited non-zero on SIGTERM"
[ "$(member_state $BCAST $C_GID)" = 0 ] || fail "C still in the broadcast group after SIGTERM"
groups=$(saquery -j groups 2>/dev/null || true)
grep -q "\"port_gid\":\"$C_GID\"" <<<"$groups" && fail "C still a member of some group after SIGTERM"
ip -n "$C" link show ib0 >/dev/null 2>&1 && fail "C's ib0 outlived its daemon"
pass "SIGTERM: C left every group, its interface is gone, exit status 0"
