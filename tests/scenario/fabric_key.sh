#!/usr/bin/env bash
# The fabric key (docs/soft-fabric.md, "Fabric key"): ibfabricd with
# --fabric-key, two ipoibd hosts with [fabric] key-file.
#  1. a key file others may read is refused at start, naming the file;
#  2. host A with the fabric's key comes up; host B with another key never
#     does (the switch counts unknown keys), and comes up once its file
#     holds the right key;
#  3. the keys are rotated by reload in three steps (new key second, new
#     key first, old key gone) while A pings B: no link goes down, no ping
#     is lost.
#
# scenario/fabric_key.sh BIN_DIR
set -euo pipefail
BIN=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
scenario_init fabric_key

FAB=fkf$$; FABRIC=198.18.104.100:18516
declare -A NS=([a]=fka$$ [b]=fkb$$)
declare -A UNDERLAY=([a]=198.18.104.1 [b]=198.18.104.2)
star_underlay "$FAB" 198.18.104.100/24
for h in a b; do star_host "$FAB" "${NS[$h]}" "k$h$$" "${UNDERLAY[$h]}/24"; done

K1=$(printf '%064x' 1); K2=$(printf '%064x' 2); K3=$(printf '%064x' 3)
keyfile() {  # NAME LINE...
  local f=$WORK/$1.key; shift
  printf '%s\n' "$@" >"$f.new"
  chmod 0600 "$f.new"
  mv "$f.new" "$f"
}
keyfile fabric "$K1"; keyfile a "$K1"; keyfile b "$K2"

start "$FAB" "$WORK/fabric.log" "$BIN/ibfabricd" --listen "$FABRIC" --sweep-interval 500ms --fabric-key "$WORK/fabric.key"
FABPID=${PIDS[-1]}
wait_for 5 "$WORK/fabric.log" "listening on .*fabric key from" || fail "ibfabricd did not start with the key"

for h in a b; do
  idx=1; [ "$h" = b ] && idx=2
  cat >"$WORK/$h.conf" <<EOF2
[fabric]
transport = soft
address = $FABRIC
port-guid = 0x0002c90300e0000$idx
key-file = $WORK/$h.key
[interface]
address = 198.18.4.$idx/24
[daemon]
control-socket = $WORK/$h.sock
EOF2
done

# 1. A key others may read
cp "$WORK/a.key" "$WORK/open.key"; chmod 0644 "$WORK/open.key"
sed "s|key-file = .*|key-file = $WORK/open.key|" "$WORK/a.conf" >"$WORK/open.conf"
rc=0
ip netns exec "${NS[a]}" timeout 10 "$BIN/ipoibd" -i ib0 -c "$WORK/open.conf" --log-target stderr >"$WORK/open.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "ipoibd started with a key file others may read"
grep -q "key-file: key file $WORK/open.key has mode 0644: others may read it" "$WORK/open.log" ||
  fail "the refusal does not name the file and its mode: $(cat "$WORK/open.log")"
pass "a key file with mode 0644 refused at start (exit $rc), naming the file"

# 2. The right key and a wrong one
start "${NS[a]}" "$WORK/a.log" "$BIN/ipoibd" -i ib0 -c "$WORK/a.conf" --log-target stderr
APID=${PIDS[-1]}
start "${NS[b]}" "$WORK/b.log" "$BIN/ipoibd" -i ib0 -c "$WORK/b.conf" --log-target stderr
BPID=${PIDS[-1]}
wait_for 20 "$WORK/a.log" "link up" || fail "A (the fabric's key) did not come up"
sleep 2
grep -q "port active" "$WORK/b.log" && fail "B came up with the wrong key"
lines=$(wc -l <"$WORK/fabric.log")
kill -USR1 "$FABPID"
wait_for_after 5 "$WORK/fabric.log" "$lines" "^auth drop unknown_key [1-9]" || fail "the switch counted no unknown key"
pass "A with the fabric's key came up; B with another was refused (unknown key counted)"
kill -TERM "$BPID"; wait "$BPID" 2>/dev/null || true
keyfile b "$K1"
start "${NS[b]}" "$WORK/b2.log" "$BIN/ipoibd" -i ib0 -c "$WORK/b.conf" --log-target stderr
BPID=${PIDS[-1]}
wait_for 20 "$WORK/b2.log" "link up" || fail "B did not come up with the right key"
ip netns exec "${NS[a]}" ping -c 3 -i 0.2 -W 2 198.18.4.2 >/dev/null || fail "A -> B with the key"
pass "B came up once its key file held the fabric's key; A reaches B"

# 3. Rotation by reload while A pings B
# Each step waits until all three have applied it (a second SIGHUP before
# the first was handled would merge with it, and a key dropped before every
# daemon took the next would lose packets), however long that takes here.
reloads=0
reload_all() {
  reloads=$((reloads + 1))
  kill -HUP "$FABPID" "$APID" "$BPID"
  wait_count 30 "$WORK/fabric.log" "fabric keys reloaded" "$reloads" || fail "ibfabricd did not reload ($reloads)"
  for log in a.log b2.log; do
    wait_count 30 "$WORK/$log" "configuration reloaded: applied fabric key" "$reloads" || fail "$log did not reload ($reloads)"
  done
}
# -w: every echo is waited for, late ones too (without it the last is given
# twice the slowest round trip).
ip netns exec "${NS[a]}" ping -c 50 -i 0.1 -W 2 -w 120 198.18.4.2 >"$WORK/ping.log" 2>&1 &
PING=$!
sleep 0.5
for f in fabric a b; do keyfile "$f" "$K1" "$K3"; done; reload_all
for f in fabric a b; do keyfile "$f" "$K3" "$K1"; done; reload_all
for f in fabric a b; do keyfile "$f" "$K3"; done; reload_all
wait "$PING" || fail "pings lost during the rotation: $(tail -2 "$WORK/ping.log")"
grep -q " 0% packet loss" "$WORK/ping.log" || fail "pings lost during the rotation: $(tail -2 "$WORK/ping.log")"
[ "$(grep -c "fabric keys reloaded" "$WORK/fabric.log")" -eq 3 ] || fail "ibfabricd did not reload its key three times"
for log in a.log b2.log; do
  [ "$(grep -c "configuration reloaded: applied fabric key" "$WORK/$log")" -eq 3 ] || fail "$log: the key was not reloaded three times"
  grep -q "link down" "$WORK/$log" && fail "$log: a link went down during the rotation"
done
lines=$(wc -l <"$WORK/fabric.log")
kill -USR1 "$FABPID"
wait_for_after 5 "$WORK/fabric.log" "$lines" "^auth: .*key_rotations 3" || fail "the switch did not count three rotations"
ip netns exec "${NS[b]}" ping -c 3 -i 0.2 -W 2 198.18.4.1 >/dev/null || fail "B -> A with the new key only"
pass "keys rotated in three reloads with 50 pings, none lost, no link down"
echo "fabric_key: all checks passed"
