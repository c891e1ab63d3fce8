#!/usr/bin/env bash
# What an operator sees of the soft fabric and its hosts (issue 19 item 6):
#  1. ibfabricctl: status, ports (GUID, LID, state, UDP address), groups,
#     stats (every counter), -j JSON; a wrong socket exits 3 with a reason;
#  2. ipoibctl status: the soft port's UDP address, the SM's last contact;
#  3. Prometheus: ipoibd's and ibfabricd's /metrics and textfiles parse as
#     the text format and carry the counters, labelled.
#
# scenario/observability.sh BIN_DIR
set -euo pipefail
BIN=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
scenario_init observability

FAB=obf$$; FABRIC=198.18.105.100:18516
declare -A NS=([a]=oba$$ [b]=obb$$)
declare -A UNDERLAY=([a]=198.18.105.1 [b]=198.18.105.2)
star_underlay "$FAB" 198.18.105.100/24
for h in a b; do star_host "$FAB" "${NS[$h]}" "o$h$$" "${UNDERLAY[$h]}/24"; done

start "$FAB" "$WORK/fabric.log" "$BIN/ibfabricd" --listen "$FABRIC" --control-socket "$WORK/fabric.sock" \
  --metrics-listen 127.0.0.1:9465 --metrics-file "$WORK/fabric.prom"
wait_for 5 "$WORK/fabric.log" "listening on" || fail "ibfabricd did not start"
for h in a b; do
  idx=1; [ "$h" = b ] && idx=2
  cat >"$WORK/$h.conf" <<EOF2
[fabric]
transport = soft
address = $FABRIC
port-guid = 0x0002c90300f0000$idx
bind = ${UNDERLAY[$h]}:4100$idx
[interface]
address = 198.18.5.$idx/24
[daemon]
control-socket = $WORK/$h.sock
metrics-listen = 127.0.0.1:9464
metrics-file = $WORK/$h.prom
EOF2
  start "${NS[$h]}" "$WORK/$h.log" "$BIN/ipoibd" -i ib0 -c "$WORK/$h.conf" --log-target stderr
done
for h in a b; do wait_for 20 "$WORK/$h.log" "link up" || fail "$h's link did not come up"; done
ip netns exec "${NS[a]}" ping -c 3 -i 0.2 -W 2 198.18.5.2 >/dev/null || fail "A -> B"

# 1. ibfabricctl
fctl() { ip netns exec "$FAB" "$BIN/ibfabricctl" -s "$WORK/fabric.sock" "$@"; }
out=$(fctl ports)
for h in a b; do
  idx=1; [ "$h" = b ] && idx=2
  grep -Eq "active +0x000[0-9a-f] +0x0002c90300f0000$idx +${UNDERLAY[$h]}:4100$idx +true +ipoibd ib0" <<<"$out" ||
    fail "ibfabricctl ports lacks $h: $out"
done
out=$(fctl groups)
grep -Eq "ff12:401b:ffff::ffff:ffff +0xc000 +0xffff +0x00000b1b .* 2 +0 +true" <<<"$out" || fail "ibfabricctl groups: $out"
grep -q "^ports_active: 2$" <<<"$(fctl status)" || fail "ibfabricctl status: $(fctl status)"
grep -q "^capture: none$" <<<"$(fctl status)" || fail "ibfabricctl status without a capture: $(fctl status)"
fctl -j stats | python3 -c "import json,sys; d=json.load(sys.stdin); assert d['switch']['forwarded'] > 0 and d['sm']['ports_configured'] == 2, d" ||
  fail "ibfabricctl -j stats"
rc=0; err=$(ip netns exec "$FAB" "$BIN/ibfabricctl" -s "$WORK/nothing.sock" status 2>&1) || rc=$?
[ "$rc" -eq 3 ] && grep -q "ibfabricd is not running" <<<"$err" || fail "a wrong socket: exit $rc, $err"
pass "ibfabricctl: ports with GUID, LID, state and address; groups; status; stats as JSON; a missing daemon exits 3"

# 2. ipoibctl status
status=$(ip netns exec "${NS[a]}" "$BIN/ipoibctl" -s "$WORK/a.sock" -j status)
echo "$status" | python3 -c "
import json,sys
d=json.load(sys.stdin); d=d[0] if isinstance(d,list) else d
assert d['port_address']=='${UNDERLAY[a]}:41001', d['port_address']
assert d['sm_silent'] is False and isinstance(d['sm_contact_age_s'], int) and d['sm_contact_age_s'] < 10, d
" || fail "ipoibctl status: $status"
pass "ipoibctl status shows the port's UDP address and the SM's last contact"

# 3. Prometheus
ip netns exec "${NS[a]}" python3 "$HERE/check_prometheus.py" http://127.0.0.1:9464/metrics \
  --expect '^ipoibd_engine_[a-z_]+\{instance="ib0",interface="ib0"\} [0-9]+$' \
  --expect '^ipoibd_port_active\{instance="ib0"\} 1$' \
  --expect '^ipoibd_interface_link_up\{instance="ib0",interface="ib0"\} 1$' \
  --expect '^ipoibd_port_direct_tx\{instance="ib0"\} [0-9]+$' || fail "ipoibd /metrics"
ip netns exec "$FAB" python3 "$HERE/check_prometheus.py" http://127.0.0.1:9465/metrics \
  --expect '^ibfabricd_sm_ports\{state="active"\} 2$' \
  --expect '^ibfabricd_switch_forwarded [1-9][0-9]*$' \
  --expect '^ibfabricd_sa_groups [0-9]+$' || fail "ibfabricd /metrics"
# The textfile is rewritten every 10 s: the one after the link came up.
ok=""
for _ in $(seq 30); do
  if python3 "$HERE/check_prometheus.py" "$WORK/a.prom" --expect '^ipoibd_port_active\{instance="ib0"\} 1$' >/dev/null; then ok=1; break; fi
  sleep 0.5
done
[ -n "$ok" ] || fail "ipoibd's textfile: $(python3 "$HERE/check_prometheus.py" "$WORK/a.prom" --expect '^ipoibd_port_active')"
python3 "$HERE/check_prometheus.py" "$WORK/fabric.prom" --expect '^ibfabricd_udp_udp_rx [0-9]+$' || fail "ibfabricd's textfile"
pass "Prometheus text from both daemons parses, over HTTP and as textfiles"
echo "observability: all checks passed"
