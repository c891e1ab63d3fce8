#!/usr/bin/env bash
# ibfabricd's own SM manages a soft fabric of several switches (issue 44):
# two leaves and two spines, each its own ibfabricd, cabled by inter-switch
# links over UDP; leaf1 runs the SM (the others --sm=no), finds the other
# three by directed route, routes them, and two ipoibd hosts on different
# leaves talk through a spine. Under a 10 ms ping the spine that carries
# the ping is SIGKILLed: the leaves' links to it time out, leaf2's SMA sends
# Trap 128, the SM routes around it; the outage is printed and must stay
# under 5 s. The spine started again is found again.
#
#   leaf1 198.18.112.100:18526 port 8 <-> spine port 1, port 7 <-> spine2 port 1
#   leaf2 198.18.112.100:18527 port 8 <-> spine port 2, port 7 <-> spine2 port 2
#   A on leaf1, 198.18.0.1/24     B on leaf2, 198.18.0.2/24
#
# With --routing updn the SM routes up/down (the spines its roots).
#
# tests/scenario/switched_fabric.sh BIN_DIR [--routing minhop|updn]
set -euo pipefail
BIN=$(cd "$1" && pwd)
ROUTING=minhop
[ "${2:-}" = --routing ] && ROUTING=$3
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
scenario_init "switched_fabric_$ROUTING"

FAB=swf$$
IP=198.18.112.100
declare -A LISTEN=([leaf1]=$IP:18526 [leaf2]=$IP:18527 [spine]=$IP:18528 [spine2]=$IP:18529)
declare -A SWGUID=([leaf1]=0x0002c90000b00001 [leaf2]=0x0002c90000b00002 [spine]=0x0002c90000b000f1
  [spine2]=0x0002c90000b000f2)
declare -A SWPID=()
declare -A GUID=([a]=0x0002c90300e5c00a [b]=0x0002c90300e5c00b)
declare -A UNDERLAY=([a]=198.18.112.1 [b]=198.18.112.2)
declare -A FABRIC_OF=([a]=${LISTEN[leaf1]} [b]=${LISTEN[leaf2]})
declare -A NS=([a]=swa$$ [b]=swb$$)
declare -A IDX=([a]=1 [b]=2)

star_underlay "$FAB" $IP/24
for h in a b; do star_host "$FAB" "${NS[$h]}" "w$h$$" "${UNDERLAY[$h]}/24"; done

switch() {  # NAME ARGS...
  local name=$1; shift
  start "$FAB" "$WORK/$name.log" "$BIN/ibfabricd" --listen "${LISTEN[$name]}" --control-socket "$WORK/$name.sock" \
    --switch-guid "${SWGUID[$name]}" --node-description "$name" "$@"
  SWPID[$name]=$!
}
spine_switch() {  # NAME
  switch "$1" --sm=no --ports 4 --link "1=${LISTEN[leaf1]}" --link "2=${LISTEN[leaf2]}"
}
switch leaf1 --ports 8 --link "8=${LISTEN[spine]}" --link "7=${LISTEN[spine2]}" --routing "$ROUTING"
switch leaf2 --sm=no --ports 8 --link "8=${LISTEN[spine]}" --link "7=${LISTEN[spine2]}"
spine_switch spine
spine_switch spine2
for s in leaf1 leaf2 spine spine2; do wait_for 10 "$WORK/$s.log" "listening on" || fail "$s did not start"; done
for g in "${SWGUID[leaf2]}" "${SWGUID[spine]}" "${SWGUID[spine2]}"; do
  wait_for 15 "$WORK/leaf1.log" "switch $g .* found" || fail "the SM did not find switch $g: $(grep 'SM:' "$WORK/leaf1.log" | tail -5)"
done
pass "leaf1's SM found leaf2, spine and spine2 by directed route"

for h in a b; do
  cat >"$WORK/$h.conf" <<EOF2
[fabric]
transport = soft
address = ${FABRIC_OF[$h]}
port-guid = ${GUID[$h]}
[interface]
address = 198.18.0.${IDX[$h]}/24
[daemon]
control-socket = $WORK/$h.sock
EOF2
  start_ipoibd "$h" 1
done
for h in a b; do wait_link_up "$h" 40; done
ping_until a 30 198.18.0.2 || fail "A does not reach B across a spine: $(grep 'SM:' "$WORK/leaf1.log" | tail -8)"
in_ns a ping -c 3 -W 2 198.18.0.2 >/dev/null || fail "ping A -> B"
in_ns b ping -c 3 -W 2 198.18.0.1 >/dev/null || fail "ping B -> A"
pass "A on leaf1 and B on leaf2 ping each other through a spine, routed by ibfabricd's SM"

forwarded() {  # SWITCH: packets it forwarded
  ip netns exec "$FAB" "$BIN/ibfabricctl" -s "$WORK/$1.sock" -j stats |
    python3 -c "import json,sys; d=json.load(sys.stdin); print(d['switch']['forwarded'])"
}
# The spine the ping crosses: the one whose forwarded count grows under it.
before_spine=$(forwarded spine)
before_spine2=$(forwarded spine2)
in_ns a ping -c 50 -i 0.01 -W 1 198.18.0.2 >/dev/null || true
d1=$(( $(forwarded spine) - before_spine ))
d2=$(( $(forwarded spine2) - before_spine2 ))
on_path=spine
[ "$d2" -gt "$d1" ] && on_path=spine2
[ $((d1 + d2)) -ge 50 ] || fail "the spines forwarded $d1 and $d2 packets of a 50-echo ping"

in_ns a ping -D -i 0.01 -W 1 -w 20 198.18.0.2 >"$WORK/ping-kill.txt" 2>&1 &
PING_PID=$!
PIDS+=("$PING_PID")
sleep 2
kill_time=$(date +%s.%N)
kill -KILL "${SWPID[$on_path]}"
wait "$PING_PID" 2>/dev/null || true
read -r outage back replies_after <<<"$(ping_outage "$WORK/ping-kill.txt" "$kill_time")"
[ "$replies_after" -gt 0 ] || fail "no echo reply after $on_path was killed: $(grep 'SM:' "$WORK/leaf1.log" | tail -8)"
echo "outage: ${outage} s without an echo reply; the first reply after it ${back} s after $on_path was SIGKILLed ($replies_after replies after the kill; link timeout 1 s)"
python3 -c "import sys; sys.exit(0 if float('$back') < 5 else 1)" || fail "replies came back ${back} s after the kill, not within 5 s"
wait_for 10 "$WORK/leaf1.log" "switch ${SWGUID[$on_path]} .* lost" || fail "the SM did not lose $on_path"
pass "$on_path SIGKILLed: the SM routed around it, replies again ${back} s after the kill"

spine_switch "$on_path"
wait_for 10 "$WORK/$on_path.log" "listening on" || fail "$on_path did not start again"
wait_for 15 "$WORK/leaf1.log" "switch ${SWGUID[$on_path]} found again" || fail "the SM did not find $on_path again"
ping_until a 10 198.18.0.2 || fail "A does not reach B after $on_path came back"
pass "$on_path started again: the SM found it again, A reaches B"

for h in a b; do stop_ipoibd "$h"; done
# updn finds no roots before the CA ports are up (then minhop routes, as
# OpenSM falls back); once they are, every routing is updn's.
last_fail=$(grep -n "routing failed" "$WORK/leaf1.log" | tail -1 | cut -d: -f1 || true)
last_ok=$(grep -n "$ROUTING routing works again" "$WORK/leaf1.log" | tail -1 | cut -d: -f1 || true)
if [ -n "$last_fail" ] && { [ -z "$last_ok" ] || [ "$last_ok" -lt "$last_fail" ]; }; then
  fail "$ROUTING routing still fails: $(grep 'routing failed' "$WORK/leaf1.log" | tail -2)"
fi
echo "switched_fabric ($ROUTING): all checks passed"
