#!/usr/bin/env bash
# P_Key child interfaces in one daemon (issue 22): real daemons in network
# namespaces over ibfabricd, whose partitions give A and B P_Key 0x8001 and
# C only the default partition.
#
#   A  ipoibd ib0 198.18.0.1/24 + [child ib0.8001] 198.18.1.1/24 (one port)
#   B  ipoibd ib0 198.18.0.2/24 (ib0.8001 198.18.1.2/24 added by reload)
#   C  ipoibd ib0 198.18.0.3/24 + [child ib0.8001] 198.18.1.3/24, but C's
#      port is not in partition 0x8001
#
#  1. one port per daemon: A's ibfabricctl entry is one GUID and LID; A's
#     ib0 and ib0.8001 have their own QPNs and broadcast groups (ipoibctl
#     interfaces, -I ib0.8001);
#  2. C's ib0.8001 stays down and says why (the P_Key is not in its port's
#     table); C reaches A's and B's ib0;
#  3. a reload adds ib0.8001 to B: the device appears, its link comes up and
#     A's and B's children ping each other (and ping6 on link-local);
#  4. P_Key enforcement on the wire: a frame from C's port (P_Key 0xffff)
#     sent to A's child QP is dropped by A's port and counted as a P_Key
#     mismatch; C's kernel has no way to 198.18.1.0/24 (its child is down);
#  5. ibfabricd reloads its partitions (SIGHUP) with C in 0x8001: the SM
#     sets C's P_Key table in place, C's ib0.8001 comes up and reaches A's;
#  6. a reload removes B's child: its device goes, A's child no longer
#     reaches 198.18.1.2.
#
# scenario/pkey_children.sh BIN_DIR
set -euo pipefail
BIN=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
scenario_init pkey_children

for tool in python3 ping; do
  command -v $tool >/dev/null || fail "$tool is not installed (scripts/install-deps.sh)"
done

FAB=pkf$$
FABRIC=198.18.108.100:18516
declare -A GUID=([a]=0x0002c90300f1000a [b]=0x0002c90300f1000b [c]=0x0002c90300f1000c)
declare -A UNDERLAY=([a]=198.18.108.1 [b]=198.18.108.2 [c]=198.18.108.3)
declare -A NS=([a]=pka$$ [b]=pkb$$ [c]=pkc$$)
declare -A IDX=([a]=1 [b]=2 [c]=3)

star_underlay "$FAB" 198.18.108.100/24
for h in a b c; do star_host "$FAB" "${NS[$h]}" "$h$$" "${UNDERLAY[$h]}/24"; done

cat >"$WORK/partitions.conf" <<EOF2
Default=0x7fff, ipoib : ALL=full ;
P8001=0x8001, ipoib : ${GUID[a]}=full, ${GUID[b]}=full ;
EOF2

write_conf() {  # HOST WITH_CHILD
  cat >"$WORK/$1.conf" <<EOF2
[fabric]
transport = soft
address = $FABRIC
port-guid = ${GUID[$1]}
[interface]
address = 198.18.0.${IDX[$1]}/24
[daemon]
control-socket = $WORK/$1.sock
EOF2
  if [ "$2" = yes ]; then
    cat >>"$WORK/$1.conf" <<EOF2
[child ib0.8001]
pkey = 0x8001
address = 198.18.1.${IDX[$1]}/24
EOF2
  fi
}
write_conf a yes; write_conf b no; write_conf c yes

wait_child_up() {  # HOST SECONDS
  local deadline=$((SECONDS + $2)) out
  while :; do
    out=$(ctl "$1" -I ib0.8001 -j status 2>/dev/null || true)
    grep -q '"link":"up"' <<<"$out" && return 0
    [ $SECONDS -lt $deadline ] || fail "$1: ib0.8001 not up after $2 s: $out"
    sleep 0.1
  done
}
reload() {  # HOST: SIGHUP, and wait for the reload's log line
  local lines; lines=$(wc -l <"$WORK/$1-run.log")
  kill -HUP "${PID[$1]}"
  wait_for_after 10 "$WORK/$1-run.log" "$lines" "configuration reloaded" || fail "$1 did not reload"
}

start "$FAB" "$WORK/fabric.log" "$BIN/ibfabricd" --listen "$FABRIC" --partitions "$WORK/partitions.conf" \
  --sweep-interval 1s --control-socket "$WORK/fabric.sock"
FABPID=${PIDS[-1]}
wait_for 5 "$WORK/fabric.log" "listening on" || fail "ibfabricd did not start"
for h in a b c; do start_ipoibd $h run; done
for h in a b c; do wait_link_up $h 20; done
wait_child_up a 20

# --- 1. one port, two interfaces ---------------------------------------------------
ports=$(ip netns exec "$FAB" "$BIN/ibfabricctl" -s "$WORK/fabric.sock" -j ports)
python3 - "$ports" "${GUID[a]}" <<'EOF' || fail "A does not hold exactly one fabric port: $ports"
import json, sys
guid = int(sys.argv[2], 16)
rows = [p for p in json.loads(sys.argv[1]) if int(str(p.get("guid", p.get("port_guid", "0"))), 16) == guid]
assert len(rows) == 1, rows
EOF
ifs=$(ctl a -j interfaces)
python3 - "$ifs" <<'EOF' || fail "ipoibctl interfaces on A: $ifs"
import json, sys
rows = {r["interface"]: r for r in json.loads(sys.argv[1])}
assert set(rows) == {"ib0", "ib0.8001"}, rows
assert rows["ib0"]["pkey"] == "0xffff" and rows["ib0.8001"]["pkey"] == "0x8001", rows
assert rows["ib0"]["qpn"] != rows["ib0.8001"]["qpn"], rows
EOF
in_ns a ip link show ib0.8001 >/dev/null || fail "A has no ib0.8001 device"
pass "A: one fabric port (one GUID, one LID), ib0 (0xffff) and ib0.8001 (0x8001) with their own QPs"

# --- 2. a child whose partition the SM did not give the port -----------------------
sleep 1
st=$(ctl c -I ib0.8001 -j status)
grep -q '"link":"down"' <<<"$st" || fail "C's ib0.8001 is not down: $st"
log_c=$(cat "$WORK/c-run.log")
grep -q "P_Key 0x8001 is not in the port's P_Key table" <<<"$log_c" || fail "C did not say why ib0.8001 is down"
for peer in 1 2; do ping_until c 10 "198.18.0.$peer" || fail "C cannot reach 198.18.0.$peer"; done
pass "C's ib0.8001 stays down (P_Key 0x8001 not in its port's table, logged); C reaches A's and B's ib0"

# --- 3. a child added by reload --------------------------------------------------------
in_ns b ip link show ib0.8001 >/dev/null 2>&1 && fail "B has ib0.8001 before the reload"
write_conf b yes
reload b
wait_child_up b 20
in_ns b ip link show ib0.8001 >/dev/null || fail "B's reload did not create ib0.8001"
ping_until a 20 198.18.1.2 || fail "A's ib0.8001 cannot reach B's"
ping_until b 20 198.18.1.1 || fail "B's ib0.8001 cannot reach A's"
[ "$(ctl a -I ib0.8001 -j stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["engine"]["tx_unicast"])')" -gt 0 ] ||
  fail "A's child sent nothing unicast"
pass "reload added B's ib0.8001; A's and B's children ping each other over partition 0x8001"

# --- 4. P_Key enforcement on the wire ---------------------------------------------------
qpn_child=$(ctl a -I ib0.8001 -j status | python3 -c 'import json,sys; print(json.load(sys.stdin)["qpn"])')
lid_a=$(ctl a -j status | python3 -c 'import json,sys; print(json.load(sys.stdin)["lid"])')
before=$(ctl a -j stats | python3 -c 'import json,sys; print(json.load(sys.stdin).get("port",{}).get("undelivered_pkey_mismatch",0))')
ip netns exec "${NS[c]}" "$BIN/ipoibinject" --fabric "$FABRIC" --guid 0x0002c90300f100cc --dlid "$lid_a" \
  --dqpn "$qpn_child" --qkey 0x0b1b --only valid >"$WORK/inject.log" 2>&1 || fail "ipoibinject failed: $(cat "$WORK/inject.log")"
mismatches() { ctl a -j stats | python3 -c 'import json,sys; print(json.load(sys.stdin).get("port",{}).get("undelivered_pkey_mismatch",0))'; }
moved() { [ "$(mismatches)" -gt "$before" ]; }
eventually 20 moved || true
after=$(mismatches)
[ "$after" -gt "$before" ] || fail "A's port did not count a P_Key mismatch for a default-partition frame to its child ($before -> $after)"
if in_ns c ping -c 2 -W 1 198.18.1.1 >/dev/null 2>&1; then fail "C reached A's ib0.8001"; fi
pass "a frame on P_Key 0xffff to A's child QP: dropped by A's port as a P_Key mismatch ($before -> $after); C cannot reach 198.18.1.0/24"

# --- 5. the SM adds the P_Key: C's child comes up ----------------------------------------
cat >"$WORK/partitions.conf" <<EOF2
Default=0x7fff, ipoib : ALL=full ;
P8001=0x8001, ipoib : ${GUID[a]}=full, ${GUID[b]}=full, ${GUID[c]}=full ;
EOF2
qpn_c=$(status_of c qpn)
lines=$(wc -l <"$WORK/fabric.log")
kill -HUP "$FABPID"
wait_for_after 5 "$WORK/fabric.log" "$lines" "partitions reloaded" || fail "ibfabricd did not reload its partitions"
wait_child_up c 20
ping_until c 20 198.18.1.1 || fail "C's ib0.8001 cannot reach A's after the SM added 0x8001"
[ "$(status_of c qpn)" = "$qpn_c" ] || fail "C's ib0 got a new QP when a child's partition was added"
pass "ibfabricd SIGHUP put C in 0x8001: C's ib0.8001 came up and reaches A's (C's ib0 kept its QP)"

# --- 6. a child removed by reload -------------------------------------------------------
write_conf b no
reload b
for _ in $(seq 50); do in_ns b ip link show ib0.8001 >/dev/null 2>&1 || break; sleep 0.1; done
in_ns b ip link show ib0.8001 >/dev/null 2>&1 && fail "B's reload did not remove ib0.8001"
ifs=$(ctl b -j interfaces)
grep -q "ib0.8001" <<<"$ifs" && fail "B still lists ib0.8001: $ifs"
# A's neighbour entry for B's child goes stale; its unicast then has nowhere to go.
ctl a -I ib0.8001 flush neigh >/dev/null
if in_ns a ping -c 2 -W 1 198.18.1.2 >/dev/null 2>&1; then fail "A's child still reaches B's removed child"; fi
ping_until a 10 198.18.0.2 || fail "A's ib0 no longer reaches B's after B's child went"
pass "reload removed B's ib0.8001: its device is gone, A's child cannot reach it, the parents still talk"

for h in a b c; do stop_ipoibd $h; done
kill -TERM "$FABPID"; wait "$FABPID" || true
pass "pkey_children"
