#!/usr/bin/env bash
# Partition membership end to end: the default partition with host A a
# full member and hosts B and C limited members (OpenSM's partitions.conf
# syntax, `Default=0x7fff, ipoib : ALL=limited, GUID=full`).
#  1. every host joins the broadcast group and its link comes up: the SA
#     answers the limited members with the full-member P_Key they can
#     receive (an answer on 0x7FFF would be limited-to-limited, dropped);
#  2. B and C reach A, and A reaches them (ping);
#  3. B cannot reach C: two limited members may not talk (IBA 10.9.3); the
#     receiving port counts the P_Key mismatches.
#
# scenario/limited_members.sh BIN_DIR
set -euo pipefail
BIN=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
scenario_init limited_members

FAB=lmf$$; FABRIC=198.18.102.100:18516
declare -A NS=([a]=lma$$ [b]=lmb$$ [c]=lmc$$)
declare -A GUID=([a]=0x0002c90300c0000a [b]=0x0002c90300c0000b [c]=0x0002c90300c0000c)
declare -A UNDERLAY=([a]=198.18.102.1 [b]=198.18.102.2 [c]=198.18.102.3)
declare -A INDEX=([a]=1 [b]=2 [c]=3)

star_underlay "$FAB" 198.18.102.100/24
for h in a b c; do star_host "$FAB" "${NS[$h]}" "l$h$$" "${UNDERLAY[$h]}/24"; done

cat >"$WORK/partitions.conf" <<EOF2
Default=0x7fff, ipoib : ALL=limited, ${GUID[a]}=full ;
EOF2
start "$FAB" "$WORK/fabric.log" "$BIN/ibfabricd" --listen "$FABRIC" --partitions "$WORK/partitions.conf"

for h in a b c; do
  cat >"$WORK/$h.conf" <<EOF2
[fabric]
transport = soft
address = $FABRIC
port-guid = ${GUID[$h]}
[interface]
address = 198.18.2.${INDEX[$h]}/24
[daemon]
control-socket = $WORK/$h.sock
EOF2
  start "${NS[$h]}" "$WORK/$h.log" "$BIN/ipoibd" -i ib0 -c "$WORK/$h.conf" --log-target stderr
done
ctl() {  # HOST ARGS...
  local h=$1; shift
  ip netns exec "${NS[$h]}" "$BIN/ipoibctl" -s "$WORK/$h.sock" "$@"
}
stat_of() {  # HOST KEY: a counter from `ipoibctl -j stats`, summed over sections (0 when absent)
  ctl "$1" -j stats | python3 -c "import json,sys; d=json.load(sys.stdin); print(sum(v.get('$2',0) for v in d.values() if isinstance(v,dict)))"
}
for h in a b c; do
  wait_for 20 "$WORK/$h.log" "link up" || fail "$h's link did not come up (the SA's answers must reach limited members)"
done
pass "a full member (A) and two limited members (B, C) joined the broadcast group"

ip netns exec "${NS[b]}" ping -c 3 -i 0.2 -W 2 198.18.2.1 >/dev/null || fail "limited B -> full A"
ip netns exec "${NS[c]}" ping -c 3 -i 0.2 -W 2 198.18.2.1 >/dev/null || fail "limited C -> full A"
ip netns exec "${NS[a]}" ping -c 3 -i 0.2 -W 2 198.18.2.3 >/dev/null || fail "full A -> limited C"
pass "limited members and the full member reach each other"

before=$(stat_of c undelivered_pkey_mismatch)
if ip netns exec "${NS[b]}" ping -c 5 -i 0.2 -W 1 198.18.2.3 >/dev/null 2>&1; then
  fail "limited B reached limited C"
fi
after=$(stat_of c undelivered_pkey_mismatch)
bad_b=$(stat_of b undelivered_pkey_mismatch)
[ $((after - before + bad_b)) -gt 0 ] || { ctl c stats >&2; fail "no P_Key mismatch counted for B <-> C"; }
pass "limited B cannot reach limited C: $((after - before + bad_b)) packets dropped as P_Key mismatches"
