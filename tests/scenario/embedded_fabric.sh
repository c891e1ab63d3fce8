#!/usr/bin/env bash
# ipoibd with the embedded fabric service: host A's ipoibd also runs the
# switch, SM and SA ([fabric] embedded = yes); host B's ipoibd plugs into it.
# No ibfabricd process at all: ping and ping6 cross, and ipoibctl says so.
# The embedded fabric's partitions come from [fabric] embedded-partitions:
# A is in 0x8001 from the start, B once A reloads with B added (their
# ib0.8001 children then ping); a file with a mistake stops a start, naming
# its line.
#
# scenario/embedded_fabric.sh BIN_DIR
set -euo pipefail
BIN=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
scenario_init embedded_fabric

A=efa$$; B=efb$$
netns_pair "$A" "$B" 198.18.101.1 198.18.101.2
partitions() {  # the members of 0x8001
  printf 'Default=0x7fff, ipoib : ALL=full ;\nP8001=0x8001, ipoib : %s ;\n' "$1" >"$WORK/partitions.conf"
}
partitions "0x0002c90300b0000a=full"
cat >"$WORK/a.conf" <<EOF2
[fabric]
transport = soft
embedded = yes
embedded-listen = 198.18.101.1:18516
embedded-partitions = $WORK/partitions.conf
address = 198.18.101.1:18516
port-guid = 0x0002c90300b0000a
[interface]
address = 198.18.1.1/24
address = 2001:db8:1::1/64
[daemon]
control-socket = $WORK/a.sock
[child ib0.8001]
pkey = 0x8001
address = 198.18.2.1/24
EOF2
cat >"$WORK/b.conf" <<EOF2
[fabric]
transport = soft
address = 198.18.101.1:18516
port-guid = 0x0002c90300b0000b
[interface]
address = 198.18.1.2/24
address = 2001:db8:1::2/64
[daemon]
control-socket = $WORK/b.sock
[child ib0.8001]
pkey = 0x8001
address = 198.18.2.2/24
EOF2

# A partitions file with a mistake: A does not start, and says where.
printf 'Default=0x7fff, ipoib : ALL=full ;\nP8001=0x8001, ipoib : nonsense ;\n' >"$WORK/bad-partitions.conf"
sed "s|^embedded-partitions = .*|embedded-partitions = $WORK/bad-partitions.conf|" "$WORK/a.conf" >"$WORK/a-bad.conf"
set +e
ip netns exec "$A" timeout 10 "$BIN/ipoibd" -i ib0 -c "$WORK/a-bad.conf" --log-target stderr >"$WORK/a-bad.log" 2>&1
status=$?
set -e
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "A started with a bad partitions file (exit $status)"
grep -q "embedded-partitions: $WORK/bad-partitions.conf:2: " "$WORK/a-bad.log" ||
  fail "A's error does not name the partitions file's line: $(cat "$WORK/a-bad.log")"
pass "a partitions file with a mistake stops the start (exit $status), naming file and line"
start "$A" "$WORK/a.log" "$BIN/ipoibd" -i ib0 -c "$WORK/a.conf" --log-target stderr
start "$B" "$WORK/b.log" "$BIN/ipoibd" -i ib0 -c "$WORK/b.conf" --log-target stderr
wait_for 15 "$WORK/a.log" "link up" || fail "A's link did not come up"
wait_for 15 "$WORK/b.log" "link up" || fail "B's link did not come up"
grep -q "embedded fabric service" "$WORK/a.log" || fail "A did not start the embedded fabric"
status=$(ip netns exec "$A" "$BIN/ipoibctl" -s "$WORK/a.sock" -j status)
grep -q '"embedded_fabric":true' <<<"$status" || fail "ipoibctl status does not show the embedded fabric"
ip netns exec "$B" ping -c 3 -i 0.2 -W 2 198.18.1.1 >/dev/null || fail "ping B -> A"
ip netns exec "$A" ping -6 -c 3 -i 0.2 -W 2 2001:db8:1::2 >/dev/null || fail "ping6 A -> B"
# Unicast took the cut-through path (route hints from the switch), not the switch.
direct=$(ip netns exec "$B" "$BIN/ipoibctl" -s "$WORK/b.sock" -j stats | python3 -c "import json,sys; print(json.load(sys.stdin)['port']['direct_tx'])")
[ "$direct" -gt 0 ] || fail "no unicast went straight to the peer (direct_tx $direct)"
# The embedded fabric's counters are A's too (ipoibctl stats).
configured=$(ip netns exec "$A" "$BIN/ipoibctl" -s "$WORK/a.sock" -j stats | python3 -c "import json,sys; print(json.load(sys.stdin)['fabric_sm']['ports_configured'])")
[ "$configured" -eq 2 ] || fail "A's stats show the embedded SM configured $configured ports, not 2"
pass "embedded fabric: A hosts switch, SM and SA (its counters in A's stats); ping and ping6 between A and B ($direct packets cut through)"

# Partitions: A's ib0.8001 is up, B's waits for its P_Key; A reloads with B
# added and the two children ping each other.
child_link() {  # NS SOCK: ib0.8001's link state
  ip netns exec "$1" "$BIN/ipoibctl" -s "$2" -I ib0.8001 -j status 2>/dev/null |
    python3 -c "import json,sys; print(json.load(sys.stdin)['link'])" 2>/dev/null || echo none
}
wait_child() {  # NS SOCK: until ib0.8001 is up (20 s)
  local deadline=$((SECONDS + 20))
  until [ "$(child_link "$1" "$2")" = up ]; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}
wait_child "$A" "$WORK/a.sock" || fail "A's ib0.8001 did not come up"
[ "$(child_link "$B" "$WORK/b.sock")" = down ] || fail "B's ib0.8001 is up without P_Key 0x8001"
partitions "0x0002c90300b0000a=full, 0x0002c90300b0000b=full"
lines=$(wc -l <"$WORK/a.log")
kill -HUP "${PIDS[0]}"
wait_for_after 10 "$WORK/a.log" "$lines" "configuration reloaded.*embedded partitions \\(P_Keys changed on 1 port\\)" ||
  fail "A's reload did not apply the partitions: $(tail -n 3 "$WORK/a.log")"
wait_child "$B" "$WORK/b.sock" || fail "B's ib0.8001 did not come up after A's reload"
ip netns exec "$B" ping -c 3 -i 0.2 -W 2 198.18.2.1 >/dev/null || fail "ping B -> A over ib0.8001"
pass "embedded partitions: A's ib0.8001 up from the start, B's once A reloaded with B in 0x8001; they ping"

# `ip link del` of B's TUN device: B's ipoibd says so and exits with status
# 1 (systemd's Restart=on-failure starts it again with its device) instead
# of spinning on the dead fd.
B_PID=${PIDS[1]}
ip -n "$B" link del ib0
deadline=$((SECONDS + 10))
while kill -0 "$B_PID" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
kill -0 "$B_PID" 2>/dev/null && fail "B's ipoibd still runs 10 s after its device was deleted"
set +e
wait "$B_PID"
status=$?
set -e
[ "$status" -eq 1 ] || fail "B's ipoibd exited with status $status after its device was deleted, not 1"
grep -q "ib0 was deleted" "$WORK/b.log" || fail "B's log does not say its device was deleted"
ip netns exec "$A" "$BIN/ipoibctl" -s "$WORK/a.sock" status >/dev/null || fail "A stopped with B"
pass "a deleted TUN device: ipoibd logs it and exits with status 1"
