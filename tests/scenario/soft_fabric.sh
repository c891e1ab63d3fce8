#!/usr/bin/env bash
# Scenario: the soft fabric with real processes in two network namespaces.
#
#   ns A (198.18.0.1): ibfabricd, ibudping server
#   ns B (198.18.0.2): ibudping client, ibforge, a port that gets killed
#
# 1. the SM brings both ports to ACTIVE
# 2. 10,000 unicast UD datagrams of 12..MTU bytes, 16 in flight: all intact,
#    in order
# 3. multicast: a datagram to a group reaches the server's QP and the
#    sender's own QP
# 4. the capture decodes in tshark with the LIDs, QPNs and Q_Key used, and
#    CRCs that check_capture.py recomputes on its own
# 5a. the SA: a subscriber gets Reports for a group created and deleted
#    and a port going away; the join's MADs are in the capture as sent
# 5. forged packets are dropped and counted by reason (ibforge, and
#    ibfabricd's statistics on SIGUSR1)
# 6. a killed port is marked gone within the sweep interval
# 7. ibfabricd restarted: the surviving server port returns to ACTIVE and
#    sees client_reregister; traffic resumes
#
# Usage: soft_fabric.sh BIN_DIR   (as root; exit 77 = skipped)
set -euo pipefail
BIN=$(cd "${1:?usage: soft_fabric.sh BIN_DIR}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
scenario_init soft_fabric

A=ipoibd-sf-a-$$
B=ipoibd-sf-b-$$
netns_pair "$A" "$B" 198.18.0.1 198.18.0.2
FABRIC=198.18.0.1:18516
QKEY=0x00c0ffee
MGID=ff12:401b:ffff::1234
MLID=0xc001
# The forger gets a LID of its own, so its frames are told apart in the capture.
FORGER_GUID=0x02000000000f0f0f
FORGER=0x00f0
# The M_Key secret in a file: the restarted ibfabricd (step 7) holds the
# keys it gave the ports and reprograms them at once.
FABRIC_ARGS=(--listen "$FABRIC" --sweep-interval 500ms --link-timeout 1s --mcast-group "$MLID" --lid "$FORGER_GUID=$FORGER"
  --m-key "file:$WORK/m_key")

start "$A" "$WORK/fabric.log" "$BIN/ibfabricd" "${FABRIC_ARGS[@]}" --pcap "$WORK/fabric.pcap"
FAB=$!
wait_for 5 "$WORK/fabric.log" "listening on"

# 1. ports come up
start "$A" "$WORK/server.log" "$BIN/ibudping" --fabric "$FABRIC" --instance server --qkey $QKEY \
  --mgid $MGID --mlid $MLID --count 0 --timeout 900 server
SERVER=$!
wait_for 10 "$WORK/server.log" "^ibudping server: LID"
read -r SLID SQPN < <(sed -n 's/^ibudping server: LID \(0x[0-9a-f]*\) QPN \(0x[0-9a-f]*\).*/\1 \2/p' "$WORK/server.log")
pass "server port ACTIVE, LID $SLID QPN $SQPN"

# 2. unicast
ip netns exec "$B" "$BIN/ibudping" --fabric "$FABRIC" --instance client --qkey $QKEY \
  --dest-lid "$SLID" --dest-qpn "$SQPN" --count 10000 --size 12:4096 --window 16 --timeout 60 -q client \
  >"$WORK/client.log" 2>&1 || fail "unicast client failed: $(cat "$WORK/client.log")"
grep -q "sent 10000 received 10000 lost 0 corrupt 0 out_of_order 0" "$WORK/client.log" \
  || fail "unicast: $(grep 'client:' "$WORK/client.log")"
read -r CLID CQPN < <(sed -n 's/^ibudping client: LID \(0x[0-9a-f]*\) QPN \(0x[0-9a-f]*\).*/\1 \2/p' "$WORK/client.log")
pass "10000 unicast datagrams intact and in order ($(grep rtt_us "$WORK/client.log"))"

# 3. multicast, to the server's QP and back to the sender's own
ip netns exec "$B" "$BIN/ibudping" --fabric "$FABRIC" --instance client --qkey $QKEY \
  --mgid $MGID --mlid $MLID --count 5 --window 1 --timeout 20 client >"$WORK/mcast.log" 2>&1 \
  || fail "multicast client: $(cat "$WORK/mcast.log")"
grep -q "multicast sent 5 own copies received 5 corrupt 0" "$WORK/mcast.log" || fail "multicast: $(cat "$WORK/mcast.log")"
deadline=$((SECONDS + 5))
until [ "$(grep -c '^multicast seq' "$WORK/server.log")" -ge 5 ]; do
  [ $SECONDS -lt $deadline ] || fail "server saw $(grep -c '^multicast seq' "$WORK/server.log") of 5 multicast datagrams"
  sleep 0.1
done
pass "multicast reached the server's QP and the sender's own port"

# 5a. the SA: a subscriber sees Reports; an ibsaquery join and leave make
#     group-created and group-deleted traps; the SA MADs are in the capture
start "$B" "$WORK/subscriber.log" "$BIN/ibsaquery" --fabric "$FABRIC" --instance subscriber \
  subscribe all --listen 60s
wait_for 10 "$WORK/subscriber.log" "status|subscribed|0x0000"
SA_MGID=ff12:e01b::5eed
ip netns exec "$A" "$BIN/ibsaquery" --fabric "$FABRIC" --instance joiner -j join $SA_MGID --create --qkey 0x1234 \
  >"$WORK/join.json" 2>&1 || fail "ibsaquery join: $(cat "$WORK/join.json")"
SA_MLID=$(python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).readline()); print(r["records"][0]["mlid"])' "$WORK/join.json")
wait_for 10 "$WORK/subscriber.log" "Report: trap 66 "
# The joiner has exited; its port's link times out and the group goes with
# its last member: trap 65 for the port, 67 for the group.
wait_for 10 "$WORK/subscriber.log" "Report: trap 67 "
wait_for 10 "$WORK/subscriber.log" "Report: trap 65 "
pass "Reports for group created (66), deleted (67) and a port going away (65) reached the subscriber"

# 5. forged packets
ip netns exec "$B" "$BIN/ibforge" --fabric "$FABRIC" --guid "$FORGER_GUID" >"$WORK/forge.log" 2>&1 || fail "ibforge: $(cat "$WORK/forge.log")"
kill -USR1 "$FAB"
wait_for 5 "$WORK/fabric.log" "switch link_check bad_vcrc [1-9]"
wait_for 5 "$WORK/fabric.log" "switch drop no_route [1-9]"
wait_for 5 "$WORK/fabric.log" "switch drop pkey_inbound [1-9]"
wait_for 5 "$WORK/fabric.log" "switch link_check too_short [1-9]"
grep -q "^ibforge: LID $FORGER " "$WORK/forge.log" || fail "ibforge did not get LID $FORGER"
pass "forged packets dropped and counted: $(grep -c ' ok' "$WORK/forge.log") port/switch cases"

# 6. a killed port is noticed
start "$B" "$WORK/victim.log" "$BIN/ibudping" --fabric "$FABRIC" --instance victim --count 0 --timeout 120 server
VICTIM=$!
wait_for 10 "$WORK/victim.log" "^ibudping server: LID"
VLID=$(sed -n 's/^ibudping server: LID \(0x[0-9a-f]*\).*/\1/p' "$WORK/victim.log")
before=$(wc -l <"$WORK/fabric.log")
kill -KILL "$VICTIM"
wait "$VICTIM" 2>/dev/null || true
wait_for_after 5 "$WORK/fabric.log" "$before" "LID $VLID gone"
pass "killed port LID $VLID marked gone"

# 4. the capture of the first ibfabricd, complete once it has exited
kill -TERM "$FAB"
for _ in $(seq 50); do kill -0 "$FAB" 2>/dev/null || break; sleep 0.1; done
kill -0 "$FAB" 2>/dev/null && fail "ibfabricd did not exit on SIGTERM"
wait "$FAB" || fail "ibfabricd exited non-zero on SIGTERM"
python3 "$HERE/check_capture.py" "$WORK/fabric.pcap" --lid "$SLID" --qpn "$SQPN" --lid "$CLID" --qpn "$CQPN" \
  --qkey $QKEY --mlid $MLID --mgid $MGID --forger-lid "$FORGER" \
  --sa-join-mgid $SA_MGID --sa-join-mlid "$SA_MLID" || fail "capture check"
pass "capture decoded by tshark; CRCs recomputed"

# 7. SM restart: the server survives, is reprogrammed and told to re-register
start "$A" "$WORK/fabric2.log" "$BIN/ibfabricd" "${FABRIC_ARGS[@]}"
FAB=$!
wait_for 10 "$WORK/server.log" "^event client_reregister"
ip netns exec "$B" "$BIN/ibudping" --fabric "$FABRIC" --instance client --qkey $QKEY \
  --dest-lid "$SLID" --dest-qpn "$SQPN" --count 100 --size 12:2048 --window 4 --timeout 30 -q client \
  >"$WORK/client2.log" 2>&1 || fail "traffic after the SM restart: $(cat "$WORK/client2.log")"
pass "after the SM restart: client_reregister seen, LID $SLID kept, traffic resumed"
echo "soft_fabric: all checks passed"
