#!/usr/bin/env bash
# OpenSM manages a soft fabric of three switches (issue 44): two leaves and a
# spine, each its own ibfabricd --sm=no, cabled by inter-switch links over
# UDP; OpenSM, attached to leaf 1's sim socket, discovers the three by
# directed route across the links, routes them with each of its engines
# (minhop, updn, ftree; a fallback fails the test), and two ipoibd hosts on
# different leaves talk through the spine.
#
#   leaf1 198.18.111.100:18516 port 8 <-> spine port 1, port 7 <-> spine2 port 1
#   leaf2 198.18.111.100:18517 port 8 <-> spine port 2, port 7 <-> spine2 port 2
#   spine 198.18.111.100:18518 (4 ports)     spine2 198.18.111.100:18519 (4 ports)
#   A on leaf1, 198.18.0.1/24     B on leaf2, 198.18.0.2/24
#
#  1. OpenSM reaches SUBNET UP; ibnetdiscover lists the three switches by
#     their node descriptions and the two ISLs;
#  2. A and B come up through OpenSM and ping; ibtracert from A's LID to
#     B's names leaf1, spine and leaf2 in order; ibroute of the spine has
#     both hosts' LIDs on the ports of their leaves; iblinkinfo shows the
#     leaves cabled to the spine, and perfquery of the spine's ISL port 1
#     counts the packets that crossed it;
#  3. for each engine: OpenSM restarted with routing_engine ENGINE; every
#     "... tables configured on all switches" line of its log names that
#     engine and none says it "cannot build" (OpenSM 3.3.23, Debian 12's,
#     predates no_fallback_routing_engine: a fallback to minhop is found in
#     the log instead), and A and B still ping;
#  4. a second spine added: OpenSM finds it (four switches); under a 10 ms
#     ping from A to B the spine the path crosses (ibtracert) is SIGKILLed:
#     the leaves' SMAs send OpenSM Trap 128, it routes around the spine and
#     the ping goes on; the outage (the longest hole in the replies, and
#     when they came back) is printed; the spine started again comes back
#     (four switches).
#
# With --one-process the four switches are one ibfabricd --topology FILE
# (a .net file; the links between them over its own sockets): steps 1 and
# 2 with four switches from the start, step 3 with updn only, no step 4.
#
# tests/opensm/switched_sm.sh BIN_DIR [--one-process]
set -euo pipefail
BIN=$(cd "$1" && pwd)
ONE_PROCESS=false
[ "${2:-}" = --one-process ] && ONE_PROCESS=true
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../scenario/lib.sh"
if $ONE_PROCESS; then scenario_init switched_sm_topology; else scenario_init switched_sm; fi

PRELOAD=/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so
[ -f "$PRELOAD" ] || { echo "switched_sm: $PRELOAD missing (libumad2sim0); skipped" >&2; exit 77; }
for tool in opensm ibnetdiscover ibtracert ibroute iblinkinfo perfquery python3 ping; do
  command -v $tool >/dev/null || { echo "switched_sm: $tool missing (opensm, infiniband-diags); skipped" >&2; exit 77; }
done

FAB=ssf$$
SOCK=ss$$
IP=198.18.111.100
declare -A LISTEN=([leaf1]=$IP:18516 [leaf2]=$IP:18517 [spine]=$IP:18518 [spine2]=$IP:18519)
declare -A SWGUID=([leaf1]=0x0002c90000a00001 [leaf2]=0x0002c90000a00002 [spine]=0x0002c90000a000f1
  [spine2]=0x0002c90000a000f2)
declare -A SWPID=()
declare -A GUID=([a]=0x0002c90300e5b00a [b]=0x0002c90300e5b00b)
declare -A UNDERLAY=([a]=198.18.111.1 [b]=198.18.111.2)
declare -A FABRIC_OF=([a]=${LISTEN[leaf1]} [b]=${LISTEN[leaf2]})
declare -A NS=([a]=ssa$$ [b]=ssb$$)
declare -A IDX=([a]=1 [b]=2)

star_underlay "$FAB" $IP/24
for h in a b; do star_host "$FAB" "${NS[$h]}" "s$h$$" "${UNDERLAY[$h]}/24"; done

switch() {  # NAME ARGS...
  local name=$1; shift
  start "$FAB" "$WORK/$name.log" "$BIN/ibfabricd" --listen "${LISTEN[$name]}" --control-socket "$WORK/$name.sock" \
    --switch-guid "${SWGUID[$name]}" --node-description "$name" --sm=no "$@"
  SWPID[$name]=$!
}
spine_switch() {  # NAME
  switch "$1" --ports 4 --link "1=${LISTEN[leaf1]}" --link "2=${LISTEN[leaf2]}"
}
if $ONE_PROCESS; then
  # The same cables as a topology file, each cable listed from one end.
  {
    for s in leaf1 leaf2 spine spine2; do
      echo "switchguid=${SWGUID[$s]}"
      case $s in
        leaf1) echo 'Switch 8 "leaf1"'; echo '[8] "spine"[1]'; echo '[7] "spine2"[1]'; echo '[1] "hosta"[1]' ;;
        leaf2) echo 'Switch 8 "leaf2"'; echo '[8] "spine"[2]'; echo '[7] "spine2"[2]' ;;
        *) echo "Switch 4 \"$s\"" ;;
      esac
      echo
    done
    echo 'Hca 1 "hosta"'
  } >"$WORK/fabric.net"
  addresses=()
  for s in leaf1 leaf2 spine spine2; do addresses+=(--switch-address "$s=${LISTEN[$s]}"); done
  start "$FAB" "$WORK/leaf1.log" "$BIN/ibfabricd" --topology "$WORK/fabric.net" "${addresses[@]}" --sm=no \
    --listen "${LISTEN[leaf1]}" --control-socket "$WORK/leaf1.sock" --sim-socket "$SOCK" --sim-attach-wait 3s
  wait_for 10 "$WORK/leaf1.log" "4 switches in this process" || fail "ibfabricd --topology did not start"
  SWITCHES=4
else
  # The leaves are cabled to spine2 from the start; it comes later.
  switch leaf1 --ports 8 --link "8=${LISTEN[spine]}" --link "7=${LISTEN[spine2]}" --sim-socket "$SOCK" --sim-attach-wait 3s
  switch leaf2 --ports 8 --link "8=${LISTEN[spine]}" --link "7=${LISTEN[spine2]}"
  spine_switch spine
  for s in leaf1 leaf2 spine; do wait_for 10 "$WORK/$s.log" "listening on" || fail "$s did not start"; done
  SWITCHES=3
fi

OSM=$WORK/opensm
mkdir -p "$OSM/cache" "$WORK/run"
write_conf() {  # ENGINE
  {
    echo "log_file $OSM/opensm.log"
    echo "force_log_flush TRUE"
    echo "dump_files_dir $OSM/"
    echo "partition_config_file $OSM/partitions.conf.absent"
    echo "qos_policy_file $OSM/qos-policy.conf.absent"
    echo "prefix_routes_file $OSM/prefix-routes.conf.absent"
    echo "per_module_logging_file $OSM/per-module-logging.conf.absent"
    echo "torus_config $OSM/torus-2QoS.conf.absent"
    echo "sweep_interval 1"
    echo "console off"
    echo "daemon FALSE"
    echo "routing_engine $1"
  } >"$OSM/opensm.conf"
}
start_opensm() {  # RUN
  (cd "$OSM" && exec ip netns exec "$FAB" env LD_PRELOAD="$PRELOAD" IBSIM_SOCKNAME="$SOCK" SIM_HOST=opensm \
    OSM_CACHE_DIR="$OSM/cache" OSM_TMP_DIR="$OSM" timeout -s TERM 300 opensm -F "$OSM/opensm.conf" \
    </dev/null >"$WORK/opensm-$1.log" 2>&1) &
  OSM_PID=$!
  PIDS+=("$OSM_PID")
}
sim() {  # CMD...: a tool on a sim node of its own
  (cd "$WORK/run" && ip netns exec "$FAB" env LD_PRELOAD="$PRELOAD" IBSIM_SOCKNAME="$SOCK" SIM_HOST=diag \
    timeout 20 "$@")
}

write_conf minhop
start_opensm first
wait_for 30 "$OSM/opensm.log" "SUBNET UP" || fail "OpenSM did not bring the subnet up"
pass "OpenSM under libumad2sim swept $SWITCHES soft switches: SUBNET UP"

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
ping_until a 30 198.18.0.2 || fail "A does not reach B across the spine"
in_ns a ping -c 3 -W 2 198.18.0.2 >/dev/null || fail "ping A -> B"
in_ns b ping -c 3 -W 2 198.18.0.1 >/dev/null || fail "ping B -> A"
pass "A on leaf1 and B on leaf2 ping each other through the spine"

out=$(sim ibnetdiscover) || fail "ibnetdiscover failed: $out"
echo "$out" >"$WORK/ibnetdiscover.txt"
switches=$(grep -c '^Switch' <<<"$out" || true)
[ "$switches" = "$SWITCHES" ] || fail "ibnetdiscover shows $switches switches, not $SWITCHES: $out"
for s in leaf1 leaf2 spine; do grep -q "^Switch.*# \"$s\"" <<<"$out" || fail "ibnetdiscover does not name $s: $out"; done
# The spine's block: its ports 1 and 2 cabled to the leaves' ports 8.
spine_block=$(awk '/^Switch.*"spine"/{on=1} on&&/^$/{exit} on' <<<"$out")
grep -qE '^\[1\].*\[8\].*"leaf1"' <<<"$spine_block" || fail "ibnetdiscover: spine port 1 is not cabled to leaf1 port 8: $spine_block"
grep -qE '^\[2\].*\[8\].*"leaf2"' <<<"$spine_block" || fail "ibnetdiscover: spine port 2 is not cabled to leaf2 port 8: $spine_block"
pass "ibnetdiscover lists the $SWITCHES switches and the spine's inter-switch links"

lid_of() { ctl "$1" -j status | python3 -c "import json,sys; print(int(json.load(sys.stdin)['lid'], 0))"; }
LID_A=$(lid_of a)
LID_B=$(lid_of b)
out=$(sim ibtracert "$LID_A" "$LID_B") || fail "ibtracert $LID_A $LID_B failed: $out"
echo "$out" >"$WORK/ibtracert.txt"
order=$(grep -oE '"(leaf1|leaf2|spine2?)"' <<<"$out" | tr -d '"' | tr '\n' ' ')
case "$order" in
  "leaf1 spine leaf2 " | "leaf1 spine2 leaf2 ") ;;
  *) fail "ibtracert from A to B crosses '$order', not leaf1, a spine, leaf2: $out" ;;
esac
out=$(sim ibroute -G "${SWGUID[spine]}") || fail "ibroute of the spine failed: $out"
echo "$out" >"$WORK/ibroute-spine.txt"
grep -qE "^0x0*$(printf '%x' "$LID_A") 001 " <<<"$out" || fail "the spine does not route A's LID $LID_A to port 1: $out"
grep -qE "^0x0*$(printf '%x' "$LID_B") 002 " <<<"$out" || fail "the spine does not route B's LID $LID_B to port 2: $out"
pass "ibtracert A -> B names $order; the spine's LFT routes A to port 1, B to port 2"
# iblinkinfo: every ISL of the spine, both ends named; perfquery of the
# spine's port 1 (an ISL): its PMA answers, and the ping's packets crossed it.
out=$(sim iblinkinfo) || fail "iblinkinfo failed: $out"
echo "$out" >"$WORK/iblinkinfo.txt"
spine_links=$(awk '/^Switch: .* spine:$/{on=1; next} /^(Switch|CA):/{on=0} on' <<<"$out")
grep -qE '^ +[0-9]+ +1\[.*Active/ +LinkUp.*"leaf1"' <<<"$spine_links" ||
  fail "iblinkinfo: the spine's port 1 is no ACTIVE link to leaf1: $spine_links"
grep -qE '^ +[0-9]+ +2\[.*Active/ +LinkUp.*"leaf2"' <<<"$spine_links" ||
  fail "iblinkinfo: the spine's port 2 is no ACTIVE link to leaf2: $spine_links"
if $ONE_PROCESS; then
  SPINE_LID=$(ip netns exec "$FAB" "$BIN/ibfabricctl" -s "$WORK/leaf1.sock" -j switches |
    python3 -c "import json,sys; print(int([s for s in json.load(sys.stdin) if s['name']=='spine'][0]['lid'], 0))")
else
  SPINE_LID=$(ip netns exec "$FAB" "$BIN/ibfabricctl" -s "$WORK/spine.sock" -j status |
    python3 -c "import json,sys; print(int(json.load(sys.stdin)['switch_lid'], 0))")
fi
[ "$SPINE_LID" -gt 0 ] || fail "the spine has no LID"
out=$(sim perfquery "$SPINE_LID" 1) || fail "perfquery $SPINE_LID 1 failed: $out"
echo "$out" >"$WORK/perfquery-spine-1.txt"
xmit=$(sed -n 's/^PortXmitPkts:\.*\([0-9]*\)$/\1/p' <<<"$out")
rcv=$(sed -n 's/^PortRcvPkts:\.*\([0-9]*\)$/\1/p' <<<"$out")
[ -n "$xmit" ] && [ -n "$rcv" ] || fail "perfquery of the spine's port 1 shows no packet counters: $out"
[ $((xmit + rcv)) -gt 0 ] || fail "perfquery: no packet crossed the spine's port 1: $out"
pass "iblinkinfo shows both leaves cabled to the spine; perfquery of the spine's ISL port 1: $xmit sent, $rcv received"

ENGINES="updn ftree minhop"
$ONE_PROCESS && ENGINES=updn
for engine in $ENGINES; do
  kill -TERM "$OSM_PID"
  wait "$OSM_PID" 2>/dev/null || true
  osm_mark=$(wc -l <"$OSM/opensm.log")
  write_conf "$engine"
  start_opensm "$engine"
  wait_for_after 30 "$OSM/opensm.log" "$osm_mark" "SUBNET UP" || fail "OpenSM -R $engine did not bring the subnet up"
  # Past SUBNET UP the routing of this start is in the log.
  tail -n +"$((osm_mark + 1))" "$OSM/opensm.log" >"$WORK/opensm-$engine.part"
  used=$(sed -n 's/.* \([a-zA-Z0-9-]*\) tables configured on all switches.*/\1/p' "$WORK/opensm-$engine.part" | sort -u | tr '\n' ' ')
  [ "$used" = "$engine " ] || fail "OpenSM routed with '$used', not $engine: $(grep -i "tables configured\|cannot build\|routing" "$WORK/opensm-$engine.part" | tail -5)"
  if grep -q "cannot build" "$WORK/opensm-$engine.part"; then
    fail "OpenSM's $engine engine failed: $(grep "cannot build" "$WORK/opensm-$engine.part" | tail -3)"
  fi
  ping_until a 30 198.18.0.2 || fail "A does not reach B with OpenSM -R $engine"
  in_ns b ping -c 3 -W 2 198.18.0.1 >/dev/null || fail "ping B -> A with OpenSM -R $engine"
  pass "OpenSM -R $engine routes the $SWITCHES switches; A and B ping"
done

if $ONE_PROCESS; then
  out=$(ip netns exec "$FAB" "$BIN/ibfabricctl" -s "$WORK/leaf1.sock" -j switches) || fail "ibfabricctl switches: $out"
  python3 - "$out" <<'PY' || fail "ibfabricctl switches: $out"
import json, sys
sw = {s["name"]: s for s in json.loads(sys.argv[1])}
assert sorted(sw) == ["leaf1", "leaf2", "spine", "spine2"], sorted(sw)
for name in ("leaf1", "leaf2"):
    links = {l["port"]: l for l in sw[name]["links"]}
    assert sorted(links) == [7, 8], links
    assert all(l["state"] == "active" for l in links.values()), links
assert [l["port"] for l in sw["spine"]["links"]] == [1, 2]
assert sw["spine"]["lid"] != "0x0000"  # OpenSM gave it one
PY
  pass "ibfabricctl switches: four switches, every link ACTIVE"
  for h in a b; do stop_ipoibd "$h"; done
  echo "switched_sm --one-process: all checks passed"
  exit 0
fi

count_switches() { sim ibnetdiscover 2>/dev/null | grep -c '^Switch' || true; }
eventually_switches() {  # N SECONDS
  local deadline=$((SECONDS + $2)) n
  while :; do
    n=$(count_switches)
    [ "$n" = "$1" ] && return 0
    [ $SECONDS -lt $deadline ] || fail "ibnetdiscover shows $n switches, not $1, after $2 s"
    sleep 0.5
  done
}
spine_switch spine2
wait_for 10 "$WORK/spine2.log" "listening on" || fail "spine2 did not start"
eventually_switches 4 20
ping_until a 10 198.18.0.2 || fail "A does not reach B with two spines"
pass "a second spine joined: OpenSM sees four switches"

# The spine A's path to B crosses, SIGKILLed under a 10 ms ping.
out=$(sim ibtracert "$LID_A" "$LID_B") || fail "ibtracert $LID_A $LID_B failed: $out"
on_path=$(grep -oE '"spine2?"' <<<"$out" | tr -d '"' | head -1)
[ -n "$on_path" ] || fail "ibtracert names no spine: $out"
in_ns a ping -D -i 0.01 -W 1 -w 20 198.18.0.2 >"$WORK/ping-kill.txt" 2>&1 &
PING_PID=$!
PIDS+=("$PING_PID")
sleep 2
osm_mark=$(wc -l <"$OSM/opensm.log")
kill_time=$(date +%s.%N)
kill -KILL "${SWPID[$on_path]}"
wait "$PING_PID" 2>/dev/null || true
# The outage: the longest hole in the replies that ends after the kill (a
# reply in flight may still arrive just after it), and when the first
# reply after that hole came.
read -r outage back replies_after <<<"$(ping_outage "$WORK/ping-kill.txt" "$kill_time")"
[ "$replies_after" -gt 0 ] || fail "no echo reply after $on_path was killed (OpenSM did not route around it)"
echo "outage: ${outage} s without an echo reply; the first reply after it ${back} s after $on_path was SIGKILLed ($replies_after replies after the kill; OpenSM sweep_interval 1, link timeout 1 s)"
out=$(sim ibtracert "$LID_A" "$LID_B") || fail "ibtracert after the kill failed: $out"
grep -q "\"$on_path\"" <<<"$out" && fail "A's path to B still crosses the killed $on_path: $out"
# The leaves' SMAs told OpenSM at once (Trap 128), not its next sweep.
after_kill=$(tail -n +"$((osm_mark + 1))" "$OSM/opensm.log")
grep -q "num:128 (Link state change) Producer:2 (Switch)" <<<"$after_kill" ||
  fail "OpenSM got no Trap 128 from a leaf when $on_path went: $(head -20 <<<"$after_kill")"
pass "$on_path SIGKILLed: the leaves sent Trap 128, OpenSM routed around it, replies again ${back} s after the kill"

spine_switch "$on_path"
wait_for 10 "$WORK/$on_path.log" "listening on" || fail "$on_path did not start again"
eventually_switches 4 20
ping_until a 10 198.18.0.2 || fail "A does not reach B after $on_path came back"
pass "$on_path started again: four switches, A reaches B"

for h in a b; do stop_ipoibd "$h"; done
echo "switched_sm: all checks passed"
