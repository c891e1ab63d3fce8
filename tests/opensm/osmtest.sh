#!/usr/bin/env bash
# OpenSM's own conformance flows against ibfabricd's SM and SA (issue 23):
# osmtest -f c (inventory: SA ClassPortInfo, NodeRecords, PortInfoRecords,
# PathRecords, LinkRecords) and osmtest -f m (the multicast flow: joins,
# leaves and queries with the statuses IBA o15.0.1.x asks for), run under
# libumad2sim against
#   - OpenSM 3.3 under ibsim (tests/opensm/start.sh: switch sw0 and CAs
#     ca0 with OpenSM, ca1 with osmtest, ca2), the reference, and
#   - ibfabricd with a sim node "peer" (LID 1, a CA osmtest sees as the
#     remote port, as it sees OpenSM's ca0 under ibsim) and osmtest's node
#     (LID 2), the switch at LID 0x10,
# and compared step by step by osmtest_compare.py: the same statuses in
# every step, ours passing, differences only where the table in
# osmtest_compare.py (and docs/sa-server.md) explains them.
#
# tests/opensm/osmtest.sh BIN_DIR
set -euo pipefail
BIN=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../scenario/lib.sh"
scenario_init osmtest

PRELOAD=/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so
[ -f "$PRELOAD" ] || { echo "osmtest: $PRELOAD missing (libumad2sim0); skipped" >&2; exit 77; }
for tool in osmtest opensm ibsim python3; do
  command -v $tool >/dev/null || { echo "osmtest: $tool missing (opensm, ibsim-utils); skipped" >&2; exit 77; }
done

# 1. The reference: OpenSM under ibsim.
env=$(bash "$HERE/start.sh") || fail "the OpenSM/ibsim harness did not start"
CLEANUP_HOOKS+=("bash '$HERE/stop.sh' '$env' >/dev/null 2>&1")
OSMH_CLIENT_TIMEOUT=60 bash "$HERE/sim-run.sh" "$env" ca1 osmtest -f c -i "$WORK/ref-inventory.txt" \
  >"$WORK/ref-c.log" 2>&1 || true
OSMH_CLIENT_TIMEOUT=60 bash "$HERE/sim-run.sh" "$env" ca1 osmtest -f m -i "$WORK/ref-inventory.txt" \
  >"$WORK/ref-m.log" 2>&1 || true
bash "$HERE/stop.sh" "$env" >/dev/null 2>&1 || true
grep -q 'OSMTEST: TEST "Create Inventory"' "$WORK/ref-c.log" || fail "osmtest -f c did not run against OpenSM"
grep -q 'OSMTEST: TEST "Multicast"' "$WORK/ref-m.log" || fail "osmtest -f m did not run against OpenSM"

# 2. ibfabricd, in a namespace of its own.
FAB=ost$$
SOCK=os$$
PEER=0x0002c90300ee0000
OSMT=0x0002c90300ee0100
ip netns add "$FAB"; NAMESPACES+=("$FAB")
ip -n "$FAB" link set lo up
start "$FAB" "$WORK/fabric.log" "$BIN/ibfabricd" --listen 127.0.0.1:18516 --control-socket none \
  --sim-socket "$SOCK" --switch-lid 0x10 --sim-node "peer=$PEER" --sim-node "osmtest=$OSMT" \
  --lid "$(printf 0x%x $((PEER + 1)))=1" --lid "$(printf 0x%x $((OSMT + 1)))=2"
wait_for 10 "$WORK/fabric.log" "serving libumad2sim clients" || fail "ibfabricd did not start"
# The peer: a sim client that attaches and stays (its port is the remote CA).
cat >"$WORK/peer.py" <<'EOF2'
import os, socket, struct, sys, time
base = sys.argv[1]
addr = lambda name: "\0" + name + "\0"
pid = os.getpid()
ctl = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
ctl.bind(addr(f"{base}:ctl{pid}"))
ctl.connect(addr(f"{base}:ctl"))
data = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
data.bind(addr(f"{base}:in{pid}"))
info = struct.pack("<III", pid, 0, 0) + b"peer".ljust(32, b"\0")
ctl.send(struct.pack("<IIII", 0xDEADBEEF, 0, 1, 44) + info.ljust(64, b"\0"))
reply = ctl.recv(80)
slot = struct.unpack_from("<I", reply, 16)[0]
data.connect(addr(f"{base}:out{slot}"))
print("attached as slot", slot, flush=True)
data.settimeout(1)
deadline = time.time() + 300
while time.time() < deadline:
    try:
        data.recv(288)  # nothing is expected; unsolicited requests only go to an IsSM client
    except socket.timeout:
        pass
EOF2
start "$FAB" "$WORK/peer.log" python3 "$WORK/peer.py" "$SOCK"
wait_for 10 "$WORK/fabric.log" '"peer" ACTIVE with LID 0x0001' || fail "the peer's port did not become ACTIVE"
mkdir -p "$WORK/run"
ours() {  # FLOW LOG
  (cd "$WORK/run" && ip netns exec "$FAB" env LD_PRELOAD="$PRELOAD" IBSIM_SOCKNAME="$SOCK" SIM_HOST=osmtest \
    timeout 60 osmtest -f "$1" -i "$WORK/inventory.txt") >"$2" 2>&1 || true
}
ours c "$WORK/ours-c.log"
ours m "$WORK/ours-m.log"
grep -q "osmtest" "$WORK/fabric.log" || fail "osmtest never attached to ibfabricd"

# 3. Step by step.
python3 "$HERE/osmtest_compare.py" "$WORK/ours-c.log" "$WORK/ref-c.log" "$WORK/ours-m.log" "$WORK/ref-m.log" \
  | tee "$WORK/compare.log" || fail "osmtest against ibfabricd differs from OpenSM where nothing explains it"
grep -q "NodeRecord\|DEFINE_NODE" "$WORK/inventory.txt" || fail "no NodeRecords in osmtest's inventory"
grep -q "DEFINE_LINK" "$WORK/inventory.txt" || fail "no LinkRecords in osmtest's inventory"
pass "osmtest -f c and -f m against ibfabricd: the statuses of OpenSM under ibsim, step by step"
echo "osmtest: all checks passed"
