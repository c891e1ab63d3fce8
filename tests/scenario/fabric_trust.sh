#!/usr/bin/env bash
# The soft fabric tried as an attacker on the underlay would (issue 19):
# ibfabricd and two ipoibd hosts A and B on a bridge, and host X, which is
# not a port of the fabric but can send UDP to everyone.
#  1. forged SMPs (SubnSet PortInfo Down), data, route hints, permits and
#     link packets from X's address to A's soft port change nothing: A stays
#     ACTIVE, B still reaches it, every datagram is counted (foreign_dropped)
#     and logged with X's address;
#  2. route hints with the fabric's source address (a raw socket) naming X
#     for B's LID redirect nothing: A keeps reaching B, X captures no packet,
#     A counts the refused hints;
#  3. a port X plugs into the fabric sends SubnSet(PortInfo) Down to A with
#     guessed M_Keys: A stays ACTIVE, ibfabricd logs A's Trap 256;
#  4. X floods the switch with link packets from 200 sockets while B
#     restarts: X gets at most 16 ports (its pending share), B comes back;
#  5. A's ipoibd stops for 3 s (SIGSTOP; the switch's link timeout is longer,
#     so the link stays up while the SM's sweeps go unanswered): the SM
#     gives the port up, then finds it again once it answers, with the same
#     LID, and B reaches A again within a sweep interval and a second.
#
# scenario/fabric_trust.sh BIN_DIR
set -euo pipefail
BIN=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
scenario_init fabric_trust

FAB=ftf$$; FABRIC=198.18.103.100:18516
declare -A NS=([a]=fta$$ [b]=ftb$$ [x]=ftx$$)
declare -A UNDERLAY=([a]=198.18.103.1 [b]=198.18.103.2 [x]=198.18.103.9)
A_PORT=198.18.103.1:40001

star_underlay "$FAB" 198.18.103.100/24
for h in a b x; do star_host "$FAB" "${NS[$h]}" "t$h$$" "${UNDERLAY[$h]}/24"; done
# X's sockets of steps 1 to 3 and those of the flood (step 4) from disjoint
# port ranges: a flood socket that got the port of step 3's ibattack (still
# plugged: port 3, its address) would receive that port's traffic and count
# as a seventeenth port the flood was given.
ip netns exec "${NS[x]}" sysctl -qw net.ipv4.ip_local_port_range="32768 46999"

# A link timeout longer than the stall of step 5; 24 switch ports, fewer
# than the 200 sockets of step 4.
start "$FAB" "$WORK/fabric.log" "$BIN/ibfabricd" --listen "$FABRIC" --sweep-interval 500ms --link-timeout 10s --ports 24
FABPID=${PIDS[-1]}
wait_for 5 "$WORK/fabric.log" "listening on"

write_conf() {  # HOST INDEX [BIND]
  cat >"$WORK/$1.conf" <<EOF2
[fabric]
transport = soft
address = $FABRIC
port-guid = 0x0002c90300d0000$2
${3:+bind = $3}
[interface]
address = 198.18.3.$2/24
[daemon]
control-socket = $WORK/$1.sock
EOF2
}
write_conf a 1 "$A_PORT"
write_conf b 2
start "${NS[a]}" "$WORK/a.log" "$BIN/ipoibd" -i ib0 -c "$WORK/a.conf" --log-target stderr
APID=${PIDS[-1]}
start "${NS[b]}" "$WORK/b.log" "$BIN/ipoibd" -i ib0 -c "$WORK/b.conf" --log-target stderr
BPID=${PIDS[-1]}
ctl() {  # HOST ARGS...
  local h=$1; shift
  ip netns exec "${NS[$h]}" "$BIN/ipoibctl" -s "$WORK/$h.sock" "$@"
}
stat_of() {  # HOST KEY: a counter from `ipoibctl -j stats`, summed over sections (0 when absent)
  ctl "$1" -j stats | python3 -c "import json,sys; d=json.load(sys.stdin); print(sum(v.get('$2',0) for v in d.values() if isinstance(v,dict)))"
}
status_of() {  # HOST KEY
  ctl "$1" -j status | python3 -c "import json,sys; d=json.load(sys.stdin); d=d[0] if isinstance(d,list) else d; print(d['$2'])"
}
fabric_stats() {  # the switch's, SM's and SA's counters (SIGUSR1 to stdout)
  local lines
  lines=$(wc -l <"$WORK/fabric.log")
  kill -USR1 "$FABPID"
  wait_for_after 5 "$WORK/fabric.log" "$lines" "^sa: " >/dev/null
  tail -n +"$((lines + 1))" "$WORK/fabric.log"
}
for h in a b; do wait_for 20 "$WORK/$h.log" "link up" || fail "$h's link did not come up"; done
[ "$(status_of a port_address)" = "$A_PORT" ] || fail "A's status shows port_address $(status_of a port_address), not $A_PORT"
ip netns exec "${NS[b]}" ping -c 3 -i 0.2 -W 2 198.18.3.1 >/dev/null || fail "B -> A before the attacks"
LID_A=$(status_of a lid); LID_B=$(status_of b lid); QPN_A=$(status_of a qpn)
pass "A (LID $LID_A, port $A_PORT) and B (LID $LID_B) up and talking"

# 1. Datagrams from outside the fabric
before=$(stat_of a foreign_dropped)
out=$(ip netns exec "${NS[x]}" "$BIN/ibattack" foreign --to "$A_PORT" --dlid "$LID_A" --qpn "$QPN_A" --count 20)
grep -q "received 0$" <<<"$out" || fail "X got answers from A's port: $out"
after=$(stat_of a foreign_dropped)
[ $((after - before)) -eq 100 ] || fail "A counted $((after - before)) foreign datagrams, sent 100"
[ "$(status_of a port_state)" = ACTIVE ] || fail "A's port left ACTIVE: $(status_of a port_state)"
grep -q "from ${UNDERLAY[x]}:[0-9]*, not the fabric" "$WORK/a.log" || fail "A did not log X's address"
ip netns exec "${NS[b]}" ping -c 3 -i 0.2 -W 2 198.18.3.1 >/dev/null || fail "B -> A after X's forgeries"
pass "100 forged datagrams from X's address dropped and counted by A, logged with X's address; A still ACTIVE"

# 2. Route hints with the fabric's address (raw socket)
refused=$(stat_of a route_hints_refused)
ip netns exec "${NS[a]}" ping -c 30 -i 0.1 -W 2 198.18.3.2 >"$WORK/ping2.log" 2>&1 &
PING=$!
out=$(ip netns exec "${NS[x]}" "$BIN/ibattack" spoof-hint --fabric "$FABRIC" --to "$A_PORT" --dlid "$LID_B" --seconds 3)
wait "$PING" || fail "A -> B while X spoofed route hints: $(tail -3 "$WORK/ping2.log")"
grep -q "captured 0$" <<<"$out" || fail "X captured A's packets for B: $out"
[ "$(stat_of a route_hints_refused)" -gt "$refused" ] || fail "A counted no refused route hint"
pass "spoofed route hints from the fabric's address refused; A -> B kept going, X captured nothing"

# 3. A forged M_Key Set from a port of the fabric
out=$(ip netns exec "${NS[x]}" "$BIN/ibattack" mkey-set --fabric "$FABRIC" --dlid "$LID_A" --count 16)
grep -q "sent 16 Sets" <<<"$out" || fail "ibattack mkey-set: $out"
wait_for 5 "$WORK/fabric.log" "port LID $LID_A .* with a bad M_Key \(Trap 256\)" || fail "no Trap 256 from A at the SM"
[ "$(status_of a port_state)" = ACTIVE ] || fail "A's port left ACTIVE after forged Sets"
violations=$(stat_of a "sma_dropped_m_key_mismatch")
[ "$violations" -ge 16 ] || fail "A counted $violations M_Key violations, 16 sent"
ip netns exec "${NS[b]}" ping -c 3 -i 0.2 -W 2 198.18.3.1 >/dev/null || fail "B -> A after the forged Sets"
pass "16 Sets with guessed M_Keys refused by A ($violations violations), Trap 256 logged by the SM"

# 4. A port-table flood from one host while B restarts
ip netns exec "${NS[x]}" sysctl -qw net.ipv4.ip_local_port_range="47000 60999"
ip netns exec "${NS[x]}" "$BIN/ibattack" flood --fabric "$FABRIC" --sockets 200 --seconds 6 >"$WORK/flood.log" 2>&1 &
FLOOD=$!
sleep 1
kill -TERM "$BPID"; wait "$BPID" 2>/dev/null || true
lines=$(wc -l <"$WORK/b.log" 2>/dev/null || echo 0)
start "${NS[b]}" "$WORK/b2.log" "$BIN/ipoibd" -i ib0 -c "$WORK/b.conf" --log-target stderr
BPID=${PIDS[-1]}
wait_for 15 "$WORK/b2.log" "link up" || fail "B did not come back during the flood"
ip netns exec "${NS[b]}" ping -c 3 -i 0.2 -W 2 198.18.3.1 >/dev/null || fail "B -> A during the flood"
wait "$FLOOD" || true
plugged=$(sed -n 's/^ibattack flood: \([0-9]*\) of 200.*/\1/p' "$WORK/flood.log")
[ -n "$plugged" ] && [ "$plugged" -le 16 ] ||
  fail "the flood got $plugged ports: $(cat "$WORK/flood.log"); the SM: $(grep "SM: port" "$WORK/fabric.log" | tail -n 30); $(fabric_stats)"
stats=$(fabric_stats)
grep -q "switch drop admission_pending" <<<"$stats" || fail "no admission_pending drops: $stats"
pass "a 200-socket flood got $plugged switch ports; B restarted and came back meanwhile"

# 5. A port silent for 3 s comes back
lines=$(wc -l <"$WORK/fabric.log")
kill -STOP "$APID"
sleep 3
wait_for_after 5 "$WORK/fabric.log" "$lines" "LID $LID_A gone \(no answer to the sweep\)" || { kill -CONT "$APID"; fail "the SM did not give A up"; }
kill -CONT "$APID"
t0=$SECONDS
wait_for_after 10 "$WORK/fabric.log" "$lines" "ACTIVE with LID $LID_A" || fail "the SM did not bring A back"
ok=""
for _ in $(seq 20); do
  if ip netns exec "${NS[b]}" ping -c 1 -W 1 198.18.3.1 >/dev/null 2>&1; then ok=1; break; fi
done
[ -n "$ok" ] || fail "B does not reach A after A answered again"
[ "$(status_of a lid)" = "$LID_A" ] || fail "A's LID changed: $(status_of a lid)"
pass "A, silent for 3 s, was found again with LID $LID_A; B reaches it ($((SECONDS - t0)) s after it answered)"
echo "fabric_trust: all checks passed"
