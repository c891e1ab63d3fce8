#!/usr/bin/env bash
# shellcheck disable=SC2154  # OSMH_* variables come from the harness env file
# The SA against OpenSM: one request list (compare-requests.txt), sent by
# ibsaquery
#   (a) to OpenSM under ibsim, through libibumad (libumad2sim), from ca1;
#   (b) to ibfabricd, through the soft fabric's QP1, from a port with ca1's
#       GUID and LID, in network namespaces of its own;
# each answer as one JSON line; compare.py compares status codes and record
# fields and lists the fields allowed to differ with their reasons.
#
# The soft fabric mirrors the simulated one: the ports have ca1's and ca2's
# GUIDs (so the same GIDs) and LIDs (ibfabricd --lid), the SM has LID 1 as
# OpenSM has, the MTU is 2048 like ibsim's links, the default partition has
# its IPoIB broadcast group in both. ca2's twin is an idle ibudping port.
#
# Usage: compare.sh BIN_DIR [-k]   (-k: keep the work directory)
# Exit: 0 agree, 1 disagree or a step failed, 77 skipped (not root, or
# OpenSM/ibsim/libumad2sim or ibsaquery's umad transport missing).
set -uo pipefail
BIN=$(cd "${1:?usage: compare.sh BIN_DIR [-k]}" && pwd)
KEEP=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=SCRIPTDIR/lib.sh
. "$HERE/lib.sh"
# shellcheck source=SCRIPTDIR/../scenario/lib.sh
. "$HERE/../scenario/lib.sh"

osmh_require_tools
command -v python3 >/dev/null || { echo "compare: needs python3; skipped" >&2; exit 77; }
for tool in ibsaquery ibfabricd ibudping; do
  if [ ! -x "$BIN/$tool" ]; then
    echo "compare: $tool is not built in $BIN" >&2
    exit 1
  fi
done
if [[ $("$BIN/ibsaquery" --version) != *umad* ]]; then
  echo "compare: ibsaquery was built without libibumad (libibumad-dev); skipped" >&2
  exit 77
fi
scenario_init compare   # root check (exit 77), $WORK, cleanup of namespaces and PIDs

ENV_FILE=""
compare_cleanup() {
  local rc=$?
  [ -n "$ENV_FILE" ] && "$HERE/stop.sh" "$ENV_FILE" >/dev/null 2>&1
  if [ "$KEEP" = -k ]; then
    cp -r "$WORK" "$WORK.kept" && echo "compare: results kept in $WORK.kept" >&2
  fi
  (exit "$rc")
  scenario_cleanup
}
trap compare_cleanup EXIT

# --- (a) OpenSM under ibsim, through libibumad
ENV_FILE=$("$HERE/start.sh" -w 30 -l 600) || { ENV_FILE=""; fail "could not start OpenSM under ibsim"; }
osmh_load_env "$ENV_FILE"
SELF_LID=$OSMH_LID_ca1 PEER_LID=$OSMH_LID_ca2
SELF_GUID=$OSMH_GUID_ca1 PEER_GUID=$OSMH_GUID_ca2
# fe80:: + a GUID below 2^32 (ibsim's are 0x10000N), as ibsaquery prints GIDs.
gid_of() {
  if [ $(($1 >> 16)) -eq 0 ]; then printf 'fe80::%x\n' "$1"; else printf 'fe80::%x:%x\n' $(($1 >> 16)) $(($1 & 0xffff)); fi
}
if [ $((SELF_GUID >> 32)) -ne 0 ] || [ $((PEER_GUID >> 32)) -ne 0 ]; then
  fail "unexpected ibsim GUIDs $SELF_GUID $PEER_GUID"
fi
SELF_GID=$(gid_of "$SELF_GUID") PEER_GID=$(gid_of "$PEER_GUID")
sed -e "s/@SELF_GID@/$SELF_GID/g" -e "s/@PEER_GID@/$PEER_GID/g" \
    -e "s/@SELF_LID@/$SELF_LID/g" -e "s/@PEER_LID@/$PEER_LID/g" \
    "$HERE/compare-requests.txt" >"$WORK/requests.txt"
pass "OpenSM up: ca1 LID $SELF_LID GID $SELF_GID, ca2 LID $PEER_LID GID $PEER_GID, SM LID $OSMH_SM_LID"

# libumad2sim over-reads its own buffer (README gotcha 4): ASan builds need
# the suppression; harmless for others.
ASAN_OPTIONS="suppressions=$HERE/asan.supp${ASAN_OPTIONS:+:$ASAN_OPTIONS}" OSMH_CLIENT_TIMEOUT=60 \
  "$HERE/sim-run.sh" "$ENV_FILE" ca1 "$BIN/ibsaquery" --transport umad -j -v batch "$WORK/requests.txt" \
  >"$WORK/opensm.jsonl" 2>"$WORK/opensm-client.log"
rc=$?
[ "$rc" -le 1 ] || fail "ibsaquery through libibumad exited $rc: $(cat "$WORK/opensm-client.log")"
pass "OpenSM answered $(wc -l <"$WORK/opensm.jsonl") requests ($(tail -n 1 "$WORK/opensm-client.log"))"
"$HERE/stop.sh" "$ENV_FILE" >"$WORK/opensm-stop.log" 2>&1 || fail "OpenSM harness did not stop cleanly: $(cat "$WORK/opensm-stop.log")"
ENV_FILE=""

# --- (b) ibfabricd, through the soft fabric's QP1
A=ipoibd-cmp-a-$$
B=ipoibd-cmp-b-$$
netns_pair "$A" "$B" 198.18.0.1 198.18.0.2
FABRIC=198.18.0.1:18516
start "$A" "$WORK/fabric.log" timeout 300 "$BIN/ibfabricd" --listen "$FABRIC" --mtu 2048 \
  --lid "$SELF_GUID=$SELF_LID" --lid "$PEER_GUID=$PEER_LID" --sweep-interval 500ms
wait_for 5 "$WORK/fabric.log" "listening on" || fail "ibfabricd did not start"
start "$B" "$WORK/peer.log" timeout 300 "$BIN/ibudping" --fabric "$FABRIC" --guid "$PEER_GUID" \
  --count 0 --timeout 240 server
wait_for 10 "$WORK/peer.log" "^ibudping server: LID" || fail "the peer port did not become ACTIVE"
grep -q "^ibudping server: LID $(printf '0x%04x' "$PEER_LID") .* GID $PEER_GID " "$WORK/peer.log" \
  || fail "peer port: $(grep '^ibudping server' "$WORK/peer.log"), want LID $PEER_LID GID $PEER_GID"
ip netns exec "$B" timeout 120 "$BIN/ibsaquery" --fabric "$FABRIC" --guid "$SELF_GUID" -j -v \
  batch "$WORK/requests.txt" >"$WORK/ibfabricd.jsonl" 2>"$WORK/ibfabricd-client.log"
rc=$?
[ "$rc" -le 1 ] || fail "ibsaquery through the soft fabric exited $rc: $(cat "$WORK/ibfabricd-client.log")"
pass "ibfabricd answered $(wc -l <"$WORK/ibfabricd.jsonl") requests ($(tail -n 1 "$WORK/ibfabricd-client.log"))"

# --- the comparison
python3 "$HERE/compare.py" "$WORK/opensm.jsonl" "$WORK/ibfabricd.jsonl" | tee "$WORK/compare.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "ibfabricd's SA disagrees with OpenSM (above)"
