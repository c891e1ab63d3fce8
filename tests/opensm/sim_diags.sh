#!/usr/bin/env bash
# infiniband-diags on the soft fabric (issue 23): ibfabricd --sim-socket
# serves programs under Debian's libumad2sim, each a CA node of the fabric
# beside two ipoibd hosts in network namespaces, with ibfabricd's own SM
# and SA answering.
#
#   ibfabricd (namespace FAB, 198.18.109.100:18516, --sim-socket sd<pid>)
#   A  ipoibd ib0 198.18.0.1/24    B  ipoibd ib0 198.18.0.2/24
#   sim clients in FAB: node "diag" (--sim-node GUID), node "other"
#
#  1. ibstat/ibaddr under the shim: the node's GUIDs (port GUID = node + 1),
#     ACTIVE with a LID from the SM and the SM's LID;
#  2. saquery -g lists the IPoIB broadcast group A and B joined; saquery PR
#     from A's LID to B's gives a path with those LIDs; saquery on a node
#     GUID's NodeRecord that ours does not serve gets the SA's status;
#  3. smpquery portinfo and nodeinfo by LID reach A's port (A's SMA answers
#     through the switch), smpquery -D nodeinfo 0 is answered by the sim
#     node's own SMA; sminfo gets ibfabricd's SM (LID 1, MASTER);
#     ibnetdiscover walks the switch (its own SMA) and lists every port
#     with its GUID and LID; smpquery nodeinfo/switchinfo of the switch;
#     perfquery -x, perfquery LID, perfquery -R against A's PMA: its
#     counters are the ones ipoibctl stats shows (section port), and a
#     reset changes what perfquery sees, not ipoibctl;
#  4. a sim client killed with SIGKILL with a request in flight is reaped
#     (ibfabricctl stats: sim clients_reaped), its node unplugged, and the
#     fabric stays healthy: A and B still ping, a new client works;
#  5. malformed sim-protocol messages (short, bad magic, unknown type, a
#     short MAD datagram) are refused and counted, and ibfabricd serves on.
#
# tests/opensm/sim_diags.sh BIN_DIR
set -euo pipefail
BIN=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../scenario/lib.sh"
scenario_init sim_diags

PRELOAD=/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so
[ -f "$PRELOAD" ] || { echo "sim_diags: $PRELOAD missing (libumad2sim0); skipped" >&2; exit 77; }
for tool in saquery smpquery ibstat ibaddr sminfo perfquery ibnetdiscover python3 ping pkill; do
  command -v $tool >/dev/null || { echo "sim_diags: $tool missing (infiniband-diags); skipped" >&2; exit 77; }
done

FAB=sdf$$
SOCK=sd$$
FABRIC=198.18.109.100:18516
DIAG_GUID=0x0002c90300d1a600
declare -A GUID=([a]=0x0002c90300d1a00a [b]=0x0002c90300d1a00b)
declare -A UNDERLAY=([a]=198.18.109.1 [b]=198.18.109.2)
declare -A NS=([a]=sda$$ [b]=sdb$$)
declare -A IDX=([a]=1 [b]=2)

star_underlay "$FAB" 198.18.109.100/24
for h in a b; do star_host "$FAB" "${NS[$h]}" "d$h$$" "${UNDERLAY[$h]}/24"; done

start "$FAB" "$WORK/fabric.log" "$BIN/ibfabricd" --listen "$FABRIC" --control-socket "$WORK/fab.sock" \
  --sim-socket "$SOCK" --sim-node "diag=$DIAG_GUID" --sim-request-timeout 30s
FAB_PID=$!
wait_for 10 "$WORK/fabric.log" "listening on" || fail "ibfabricd did not start"
grep -q "serving libumad2sim clients on @$SOCK:ctl" "$WORK/fabric.log" || fail "no sim socket announced"

for h in a b; do
  cat >"$WORK/$h.conf" <<EOF2
[fabric]
transport = soft
address = $FABRIC
port-guid = ${GUID[$h]}
[interface]
address = 198.18.0.${IDX[$h]}/24
[daemon]
control-socket = $WORK/$h.sock
EOF2
  start_ipoibd "$h" 1
done
for h in a b; do wait_link_up "$h" 20; done
ping_until a 20 198.18.0.2 || fail "A does not reach B"
pass "two ipoibd hosts up on the fabric"

# A sim client: the shim, the socket name, SIM_HOST, a scratch directory
# (the shim writes its fake sysfs there), bounded in time.
mkdir -p "$WORK/run"
sim() {  # NODE CMD...
  local node=$1; shift
  (cd "$WORK/run" && ip netns exec "$FAB" env LD_PRELOAD="$PRELOAD" IBSIM_SOCKNAME="$SOCK" SIM_HOST="$node" \
    timeout 20 "$@")
}
fabstat() {  # SECTION KEY
  ip netns exec "$FAB" "$BIN/ibfabricctl" -s "$WORK/fab.sock" -j stats |
    python3 -c "import json,sys; print(json.load(sys.stdin).get('$1',{}).get('$2',0))"
}
hex() { printf '0x%016x' "$1"; }

# 1. ibstat and ibaddr
out=$(sim diag ibstat) || fail "ibstat failed: $out"
grep -q "Node GUID: $DIAG_GUID" <<<"$out" || fail "ibstat node GUID: $out"
grep -q "Port GUID: $(hex $((DIAG_GUID + 1)))" <<<"$out" || fail "ibstat port GUID is not node GUID + 1: $out"
grep -q "State: Active" <<<"$out" || fail "ibstat: port not Active: $out"
grep -q "SM lid: 1" <<<"$out" || fail "ibstat: SM LID is not the switch's: $out"
DIAG_LID=$(sed -n 's/.*Base lid: \([0-9]*\).*/\1/p' <<<"$out")
[ -n "$DIAG_LID" ] && [ "$DIAG_LID" -gt 1 ] || fail "ibstat: no LID: $out"
out=$(sim diag ibaddr) || fail "ibaddr failed: $out"
grep -q "LID start $(printf '0x%x' "$DIAG_LID")" <<<"$out" || fail "ibaddr: $out"
pass "ibstat/ibaddr: node $DIAG_GUID, port GUID +1, ACTIVE with LID $DIAG_LID, SM LID 1"

lid_of() { ctl "$1" -j status | python3 -c "import json,sys; print(int(json.load(sys.stdin)['lid'], 0))"; }
LID_A=$(lid_of a); LID_B=$(lid_of b)

# 2. saquery against ibfabricd's SA
out=$(sim diag saquery -g) || fail "saquery -g failed: $out"
grep -q "MGID.*ff12:401b:ffff::ffff:ffff" <<<"$out" || fail "saquery -g: no broadcast group: $out"
grep -q "Mlid.*0xC000" <<<"$out" || fail "saquery -g: broadcast MLID: $out"
[ "$(grep -c "MGID" <<<"$out")" -eq "$(grep -c "MGID.*ff12:" <<<"$out")" ] || fail "saquery -g: empty records: $out"
out=$(sim diag saquery PR --slid "$LID_A" --dlid "$LID_B") || fail "saquery PR failed: $out"
grep -q "dlid\.*$LID_B$" <<<"$out" || fail "saquery PR: dlid: $out"
grep -q "slid\.*$LID_A$" <<<"$out" || fail "saquery PR: slid: $out"
[ "$(grep -c "PathRecord dump" <<<"$out")" -eq 1 ] || fail "saquery PR: not one record: $out"
pass "saquery -g lists the broadcast group; saquery PR $LID_A -> $LID_B"

# 3. SMPs: LID-routed to A's port, directed route of HopCount 0
out=$(sim diag smpquery portinfo "$LID_A") || fail "smpquery portinfo failed: $out"
grep -q "^Lid:\.*$LID_A$" <<<"$out" || fail "smpquery portinfo: LID: $out"
grep -q "LinkState:\.*Active" <<<"$out" || fail "smpquery portinfo: state: $out"
grep -q "Mkey:.*<not displayed>" <<<"$out" || fail "smpquery portinfo shows the M_Key: $out"
out=$(sim diag smpquery nodeinfo "$LID_A") || fail "smpquery nodeinfo failed: $out"
grep -q "PortGuid:\.*$(hex "${GUID[a]}")" <<<"$out" || fail "smpquery nodeinfo of A: $out"
out=$(sim diag smpquery -D nodeinfo 0) || fail "smpquery -D nodeinfo 0 failed: $out"
grep -q "^Guid:\.*$DIAG_GUID" <<<"$out" || fail "smpquery -D nodeinfo 0: $out"
[ "$(fabstat sim local_smps)" -ge 1 ] || fail "the DR SMP of HopCount 0 was not answered locally"
pass "smpquery portinfo/nodeinfo by LID reach A's SMA; -D nodeinfo 0 is the node's own"

# The switch through its own SMA: ibnetdiscover walks it by directed route.
out=$(sim diag ibnetdiscover 2>&1) || true
grep -q "^switchguid=0x20000fffe000001" <<<"$out" || fail "ibnetdiscover: no switch: $out"
grep -qE '^Switch[[:space:]]+64 .*"ibfabricd soft switch" base port 0 lid 1 ' <<<"$out" || fail "ibnetdiscover: the switch line: $out"
for h in a b; do
  lid=$([ $h = a ] && echo "$LID_A" || echo "$LID_B")
  grep -qE "\"H-$(printf %016x "${GUID[$h]}")\".*# \"ipoibd ib0\" lid $lid " <<<"$out" || fail "ibnetdiscover: $h (LID $lid): $out"
done
grep -qE "\"H-$(printf %016x "$DIAG_GUID")\".*# \"diag\" lid $DIAG_LID " <<<"$out" || fail "ibnetdiscover: the sim node: $out"
out=$(sim diag smpquery nodeinfo 1) || fail "smpquery nodeinfo 1 failed: $out"
grep -q "NodeType:\.*Switch" <<<"$out" || fail "smpquery nodeinfo 1: $out"
out=$(sim diag smpquery -D switchinfo 0,1) || fail "smpquery -D switchinfo 0,1 failed: $out"
grep -q "LinearFdbCap:\.*49152" <<<"$out" || fail "smpquery switchinfo: $out"
pass "ibnetdiscover lists the switch and every port with its GUID and LID; smpquery reaches the switch's SMA"

out=$(sim diag sminfo) || fail "sminfo failed: $out"
grep -q "sm lid 1 sm guid 0x.*state 3 SMINFO_MASTER" <<<"$out" || fail "sminfo: $out"
pass "sminfo: ibfabricd's SM at LID 1, MASTER"

# PerfMgt: A's port answers perfquery from the counters ipoibctl shows;
# the sim node's own port answers too.
num() { sed -n "s/^$1:\.*\([0-9]*\)$/\1/p" <<<"$2"; }
tx0=$(stat_of a port tx_packets); rx0=$(stat_of a port rx_packets)
out=$(sim diag perfquery -x "$LID_A" 1) || fail "perfquery -x failed: $out"
tx1=$(stat_of a port tx_packets); rx1=$(stat_of a port rx_packets)
xp=$(num PortXmitPkts "$out"); rp=$(num PortRcvPkts "$out"); xd=$(num PortXmitData "$out")
[ -n "$xp" ] && [ "$xp" -ge "$tx0" ] && [ "$xp" -le "$tx1" ] || fail "perfquery PortXmitPkts $xp is not ipoibctl's tx_packets ($tx0..$tx1): $out"
[ -n "$rp" ] && [ "$rp" -ge "$rx0" ] && [ "$rp" -le "$rx1" ] || fail "perfquery PortRcvPkts $rp is not ipoibctl's rx_packets ($rx0..$rx1): $out"
[ "$xd" -gt "$xp" ] || fail "perfquery PortXmitData $xd: not octets/4 of $xp packets"
out=$(sim diag perfquery "$LID_A") || fail "perfquery LID (PortSelect 0) failed: $out"
[ "$(num PortXmitPkts "$out")" -ge "$xp" ] || fail "perfquery LID: $out"
out=$(sim diag perfquery -R "$LID_A" 1) || fail "perfquery -R failed: $out"
out=$(sim diag perfquery "$LID_A" 1) || fail "perfquery after the reset failed: $out"
[ "$(num PortXmitPkts "$out")" -lt "$xp" ] || fail "perfquery -R reset nothing: $out"
[ "$(stat_of a port tx_packets)" -ge "$tx1" ] || fail "the reset reached ipoibctl's counters"
[ "$(stat_of a pma pma_resets)" -ge 1 ] || fail "ipoibctl stats pma: no reset counted"
out=$(sim diag perfquery) || fail "perfquery of the sim node's own port failed: $out"
grep -q "PortXmitPkts" <<<"$out" || fail "perfquery (own port): $out"
# The switch's PMA: the counters of the switch port A is plugged into.
A_SWPORT=$(ip netns exec "$FAB" "$BIN/ibfabricctl" -s "$WORK/fab.sock" -j ports |
  python3 -c "import json,sys; print([p['port'] for p in json.load(sys.stdin) if p['guid']=='$(printf 0x%016x "${GUID[a]}")'][0])")
out=$(sim diag perfquery -x 1 "$A_SWPORT") || fail "perfquery of the switch port failed: $out"
[ "$(num PortRcvPkts "$out")" -gt 0 ] || fail "perfquery of switch port $A_SWPORT: $out"
[ "$(fabstat switch_pma pma_responses)" -ge 2 ] || fail "the switch's PMA answered nothing"
pass "perfquery: A's PMA agrees with ipoibctl stats, resets its own view only; the sim node and the switch answer too"

# 4. SIGKILL with a request in flight: an SMP to a LID nobody has (the
# switch drops it) waits for its status 110, 30 s here (--sim-request-timeout;
# 1 s by default), so the kill comes before it however slow the polls below.
reaped0=$(fabstat sim clients_reaped)
mads0=$(fabstat sim mads_from_clients)
timeouts0=$(fabstat sim timeouts)
# ip netns exec and env exec; timeout forks sminfo: $VICTIM is timeout.
(cd "$WORK/run" && exec ip netns exec "$FAB" env LD_PRELOAD="$PRELOAD" IBSIM_SOCKNAME="$SOCK" SIM_HOST=other \
  timeout 60 smpquery -t 25000 nodeinfo 1000) >"$WORK/victim.log" 2>&1 &
VICTIM=$!
PIDS+=("$VICTIM")
deadline=$((SECONDS + 10))
until [ "$(fabstat sim mads_from_clients)" -gt "$mads0" ]; do
  [ $SECONDS -lt $deadline ] || fail "the victim client sent nothing"
  sleep 0.05
done
pkill -KILL -P "$VICTIM" -x smpquery || fail "no smpquery process to kill"
wait "$VICTIM" 2>/dev/null || true
[ "$(fabstat sim timeouts)" -eq "$timeouts0" ] || fail "the victim's request was answered before the kill: not mid-MAD"
deadline=$((SECONDS + 5))
until [ "$(fabstat sim clients_reaped)" -gt "$reaped0" ]; do
  [ $SECONDS -lt $deadline ] || fail "the killed client was not reaped: $(ip netns exec "$FAB" "$BIN/ibfabricctl" -s "$WORK/fab.sock" -j stats)"
  sleep 0.1
done
wait_for 5 "$WORK/fabric.log" "sim: node other unplugged" || fail "the killed client's node stayed"
kill -0 "$FAB_PID" || fail "ibfabricd died"
ping_until a 10 198.18.0.2 || fail "A no longer reaches B after the kill"
out=$(sim diag saquery -g) || fail "saquery after the kill failed: $out"
grep -q "ff12:401b:ffff::ffff:ffff" <<<"$out" || fail "saquery after the kill: $out"
pass "a client killed mid-MAD is reaped, its node unplugged; the fabric serves on"

# 5. Malformed sim-protocol messages, straight to the sockets.
ip netns exec "$FAB" python3 - "$SOCK" <<'EOF2' || fail "malformed messages were not refused"
import os, socket, struct, sys
base = sys.argv[1]
def addr(name): return "\0" + name + "\0"
ctl = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
pid = 4000000 + os.getpid() % 100000
ctl.bind(addr(f"{base}:ctl{pid}"))
ctl.connect(addr(f"{base}:ctl"))
ctl.settimeout(3)
def ask(payload):
    ctl.send(payload)
    reply = ctl.recv(200)
    assert len(reply) == 80, len(reply)
    return struct.unpack_from("<IIII", reply)
msg = lambda magic, cid, typ, ln, data=b"": struct.pack("<IIII", magic, cid, typ, ln) + data.ljust(64, b"\0")
assert ask(b"short")[2] == 0                              # wrong size: ERROR
assert ask(msg(0x12345678, 0, 1, 44))[2] == 0             # bad magic
assert ask(msg(0xDEADBEEF, 0, 77, 0))[2] == 0             # unknown type
assert ask(msg(0xDEADBEEF, 0, 7, 65))[2] == 0             # len above 64
assert ask(msg(0xDEADBEEF, 9, 7, 64))[2] == 0             # a slot not connected
# A proper client, then a short MAD datagram on its data socket.
data = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
data.bind(addr(f"{base}:in{pid}"))
info = struct.pack("<III", pid, 0, 0) + b"junk".ljust(32, b"\0")
magic, slot, typ, ln = ask(msg(0xDEADBEEF, 0, 1, 44, info))
assert typ == 1, typ
data.connect(addr(f"{base}:out{slot}"))
data.send(b"x" * 100)
assert ask(msg(0xDEADBEEF, slot, 2, 0))[2] == 2          # DISCONNECT
EOF2
for k in ctl_wrong_size ctl_bad_magic ctl_unknown_type ctl_bad_length ctl_unknown_client request_wrong_size; do
  [ "$(fabstat sim dropped_$k)" -ge 1 ] || fail "sim dropped_$k not counted"
done
kill -0 "$FAB_PID" || fail "ibfabricd died on malformed messages"
out=$(sim diag ibaddr) || fail "ibaddr after malformed messages failed: $out"
pass "malformed control and data messages refused and counted; ibfabricd serves on"

for h in a b; do stop_ipoibd "$h"; done
echo "sim_diags: all checks passed"
