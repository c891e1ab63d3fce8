#!/usr/bin/env bash
# OpenSM manages the soft fabric (issue 23): ibfabricd --sm=no runs only the
# switch (with its SMA) and serves libumad2sim; OpenSM 3.3, attached as a
# sim client, sweeps the fabric, assigns the LIDs, programs the switch
# through its SMA and serves the SA; two ipoibd hosts come up through it.
#
#   ibfabricd --sm=no (namespace FAB, 198.18.110.100:18516, --sim-socket)
#   OpenSM on sim node "opensm" (in FAB)
#   A  ipoibd ib0 198.18.0.1/24    B  ipoibd ib0 198.18.0.2/24
#
#  1. OpenSM reaches SUBNET UP; the switch got its LID from it (ibfabricctl
#     status), the hosts' ports are ACTIVE with OpenSM's LID as their SM LID;
#  2. A and B join the broadcast group through OpenSM's SA (saquery -g, run
#     against OpenSM), resolve each other and ping (IPv4 and IPv6);
#  3. two minutes under a healthy OpenSM, whose light sweeps leave the CA
#     ports alone: no host warns of SM silence (the hosts' SA probes are
#     answered), and sm_contact_age_s stays under the default sm-silence;
#  4. OpenSM killed: at the default sm-silence (35 s) each host warns that
#     the SM neither sweeps nor answers;
#  5. OpenSM started again: it asks the ports to reregister (client
#     reregister), the hosts rejoin through the new OpenSM and still ping,
#     and say the SM reaches them again.
#
# tests/opensm/external_sm.sh BIN_DIR
set -euo pipefail
BIN=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../scenario/lib.sh"
scenario_init external_sm

PRELOAD=/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so
[ -f "$PRELOAD" ] || { echo "external_sm: $PRELOAD missing (libumad2sim0); skipped" >&2; exit 77; }
for tool in opensm saquery sminfo python3 ping; do
  command -v $tool >/dev/null || { echo "external_sm: $tool missing (opensm, infiniband-diags); skipped" >&2; exit 77; }
done

FAB=esf$$
SOCK=es$$
FABRIC=198.18.110.100:18516
declare -A GUID=([a]=0x0002c90300e5a00a [b]=0x0002c90300e5a00b)
declare -A UNDERLAY=([a]=198.18.110.1 [b]=198.18.110.2)
declare -A NS=([a]=esa$$ [b]=esb$$)
declare -A IDX=([a]=1 [b]=2)

star_underlay "$FAB" 198.18.110.100/24
for h in a b; do star_host "$FAB" "${NS[$h]}" "e$h$$" "${UNDERLAY[$h]}/24"; done

start "$FAB" "$WORK/fabric.log" "$BIN/ibfabricd" --listen "$FABRIC" --control-socket "$WORK/fab.sock" \
  --sm=no --sim-socket "$SOCK" --sim-attach-wait 3s
FAB_PID=$!
wait_for 10 "$WORK/fabric.log" "listening on" || fail "ibfabricd did not start"
grep -q "no SM (--sm=no)" "$WORK/fabric.log" || fail "ibfabricd does not say its SM is off"
fabstatus() {  # KEY
  ip netns exec "$FAB" "$BIN/ibfabricctl" -s "$WORK/fab.sock" -j status |
    python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"
}
[ "$(fabstatus switch_lid)" = 0x0000 ] || fail "the switch has a LID before any SM"

# OpenSM as a sim client: its cwd holds its config, log, cache and the
# shim's fake sysfs.
OSM=$WORK/opensm
mkdir -p "$OSM/cache" "$WORK/run"
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
} >"$OSM/opensm.conf"
start_opensm() {  # RUN
  (cd "$OSM" && exec ip netns exec "$FAB" env LD_PRELOAD="$PRELOAD" IBSIM_SOCKNAME="$SOCK" SIM_HOST=opensm \
    OSM_CACHE_DIR="$OSM/cache" OSM_TMP_DIR="$OSM" timeout -s TERM 300 opensm -F "$OSM/opensm.conf" \
    </dev/null >"$WORK/opensm-$1.log" 2>&1) &
  OSM_PID=$!
  PIDS+=("$OSM_PID")
}
start_opensm 1
wait_for 30 "$OSM/opensm.log" "SUBNET UP" || fail "OpenSM did not bring the subnet up"
pass "OpenSM under libumad2sim swept the soft fabric: SUBNET UP"

for h in a b; do
  cat >"$WORK/$h.conf" <<EOF2
[fabric]
transport = soft
address = $FABRIC
port-guid = ${GUID[$h]}
[interface]
address = 198.18.0.${IDX[$h]}/24
[daemon]
control-socket = $WORK/$h.sock
EOF2
  start_ipoibd "$h" 1
done
for h in a b; do wait_link_up "$h" 40; done
sim() {  # CMD...: a tool on a sim node of its own
  (cd "$WORK/run" && ip netns exec "$FAB" env LD_PRELOAD="$PRELOAD" IBSIM_SOCKNAME="$SOCK" SIM_HOST=diag \
    timeout 20 "$@")
}
out=$(sim sminfo) || fail "sminfo failed: $out"
OSM_LID=$(sed -n 's/^sminfo: sm lid \([0-9]*\) .*/\1/p' <<<"$out")
grep -q "SMINFO_MASTER" <<<"$out" || fail "sminfo: OpenSM is not master: $out"
for h in a b; do
  sm_lid=$(ctl "$h" -j status | python3 -c "import json,sys; print(int(json.load(sys.stdin)['sm_lid'], 0))")
  [ "$sm_lid" = "$OSM_LID" ] || fail "$h's SM LID is $sm_lid, not OpenSM's $OSM_LID"
done
[ "$(fabstatus switch_lid)" != 0x0000 ] || fail "OpenSM did not give the switch a LID"
pass "the hosts are ACTIVE with OpenSM (LID $OSM_LID) as their SM; the switch has LID $(fabstatus switch_lid)"

ping_until a 20 198.18.0.2 || fail "A does not reach B through OpenSM's fabric"
in_ns a ping -c 3 -W 2 198.18.0.2 >/dev/null || fail "ping A -> B"
in_ns b ping -c 3 -W 2 198.18.0.1 >/dev/null || fail "ping B -> A"
out=$(sim saquery -g) || fail "saquery -g failed: $out"
grep -q "ff12:401b:ffff::ffff:ffff" <<<"$out" || fail "saquery -g: OpenSM has no broadcast group: $out"
pass "A and B joined through OpenSM's SA and ping each other"

# Two minutes under a healthy OpenSM: no false SM-silence warning.
SILENCE_WARNING="no word from the subnet manager"
for round in $(seq 1 24); do
  sleep 5
  for h in a b; do
    ! grep -q "$SILENCE_WARNING" "$WORK/$h-1.log" || fail "$h warned of SM silence under a healthy OpenSM: $(grep "$SILENCE_WARNING" "$WORK/$h-1.log")"
  done
done
for h in a b; do
  out=$(ctl "$h" -j status)
  python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert d['sm_silent'] is False and d['sm_contact_age_s'] < 35, d" "$out" ||
    fail "$h: SM contact after two minutes under OpenSM: $out"
done
probes=$(stat_of a engine sa_probes)
pass "two minutes under OpenSM, no SM-silence warning ($probes SA probes from A answered)"

# OpenSM killed and not restarted yet: at the default sm-silence the hosts
# warn.
kill -TERM "$OSM_PID"
wait "$OSM_PID" 2>/dev/null || true
for h in a b; do wait_for 60 "$WORK/$h-1.log" "$SILENCE_WARNING" || fail "$h did not warn of SM silence with OpenSM gone"; done
pass "OpenSM gone: both hosts warn at the default sm-silence: $(grep -o "$SILENCE_WARNING for [0-9]* s" "$WORK/a-1.log" | head -1)"

# OpenSM restarts: a new SM asks every port to reregister.
mark=$(wc -l <"$WORK/a-1.log")
# OpenSM appends to its log (accum_log_file): only a SUBNET UP after this
# line is the new one's.
osm_mark=$(wc -l <"$OSM/opensm.log")
start_opensm 2
wait_for_after 30 "$OSM/opensm.log" "$osm_mark" "SUBNET UP" || fail "the restarted OpenSM did not bring the subnet up"
wait_for_after 30 "$WORK/a-1.log" "$mark" "reregister|rejoin|client_reregister" || fail "A was not asked to reregister"
ping_until a 30 198.18.0.2 || fail "A does not reach B after OpenSM's restart"
for h in a b; do
  wait_for 40 "$WORK/$h-1.log" "the subnet manager reaches this port again" || fail "$h did not say the SM is back"
done
pass "OpenSM restarted: the hosts reregister, still reach each other, and say the SM is back"

for h in a b; do stop_ipoibd "$h"; done
echo "external_sm: all checks passed"
