#!/usr/bin/env bash
# shellcheck disable=SC2154  # OSMH_* variables come from the harness env file
# Smoke test of the OpenSM-under-ibsim harness: starts it, queries OpenSM's
# SA from the simulated CAs ca1/ca2 (OpenSM is on ca0) with saquery and with
# umad_probe (our own libibumad client, compiled here), checks the fields,
# stops the harness and checks nothing is left. Prints the time of each
# phase. Exit: 0 pass, 1 fail, 77 tools missing (skip).
#
# Usage: smoke.sh [-k]   (-k: keep the harness directory, for debugging)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
osmh_require_tools
if ! command -v cc >/dev/null || [ ! -f /usr/include/infiniband/umad.h ]; then
  osmh_log "need cc and libibumad-dev for umad_probe"
  exit 77
fi
[ "${1:-}" = -k ] && export OSMH_KEEP=1

failures=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
ms_since() { echo $(( (${EPOCHREALTIME/./} - $1) / 1000 )); }

# field OUTPUT NAME: value of saquery's "NAME........value" line (first one).
field() { sed -nE "s/^[[:space:]]*$2\.+(.*)$/\1/p" <<<"$1" | head -n 1; }
# expect WHAT OUTPUT NAME=VALUE...: every field has the value.
expect() {
  local what=$1 out=$2 kv got
  shift 2
  for kv in "$@"; do
    got=$(field "$out" "${kv%%=*}")
    if [ "$got" = "${kv#*=}" ]; then
      ok "$what: ${kv%%=*} = $got"
    else
      bad "$what: ${kv%%=*} = '$got', want '${kv#*=}'"
    fi
  done
}
# kv LINE KEY: value of KEY=value in one of umad_probe's lines.
kv() { sed -nE "s/.*(^| )$2=([^ ]*).*/\2/p" <<<"$1" | head -n 1; }

t_total=${EPOCHREALTIME/./}
work=$(mktemp -d /tmp/ipoibd-opensm-smoke.XXXXXX)
env_file=""
cleanup() {
  [ -n "$env_file" ] && "$HERE/stop.sh" "$env_file" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

cc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -o "$work/umad_probe" \
  "$HERE/umad_probe.c" -libumad || { echo "FAIL: umad_probe does not compile"; exit 1; }

# --- start
t=${EPOCHREALTIME/./}
env_file=$("$HERE/start.sh" -w 30) || { echo "FAIL: start.sh"; env_file=""; exit 1; }
echo "time: start (ibsim + OpenSM to SUBNET UP) $(ms_since "$t") ms"
osmh_load_env "$env_file"
run() { "$HERE/sim-run.sh" "$env_file" "$@" 2>&1; }

t=${EPOCHREALTIME/./}
# --- NodeRecords, one Get per LID (a GetTable of all four needs RMPP,
# which libumad2sim does not do: saquery -N shows only the first record).
for n in ca0 ca1 ca2; do
  lidvar=OSMH_LID_$n guidvar=OSMH_GUID_$n
  out=$(run ca1 saquery NR "${!lidvar}")
  expect "NodeRecord $n" "$out" "lid=${!lidvar}" "node_type=Channel Adapter" \
    num_ports=1 "port_guid=${!guidvar}" "NodeDescription=$n" port_num=1
done
out=$(run ca2 saquery NR "$OSMH_LID_sw0")
expect "NodeRecord sw0" "$out" "lid=$OSMH_LID_sw0" node_type=Switch num_ports=4 \
  "node_guid=$OSMH_GUID_sw0" NodeDescription=sw0

# --- SM: the master SM is OpenSM's port on ca0.
out=$(run ca2 saquery -s)
expect "SM PortInfoRecord" "$out" "base_lid=$OSMH_SM_LID" "master_sm_base_lid=$OSMH_SM_LID"

# --- IPoIB broadcast group (default partition): OpenSM's defaults.
bcast=ff12:401b:ffff::ffff:ffff
out=$(run ca1 saquery MCMR --mgid "$bcast")
# mtu 0x84: selector "exactly", 2048; rate 0x83: exactly 10 Gb/s;
# pkt_life 0x92: exactly 18. PortGid/JoinState blank: SM_Key 0 is untrusted.
expect "MCMemberRecord $bcast" "$out" "MGID=$bcast" qkey=0xb1b mlid=0xc000 \
  mtu=0x84 pkey=0xffff rate=0x83 pkt_life=0x92 SL=0x0 TClass=0x0 \
  FlowLabel=0x0 HopLimit=0x0 Scope=0x2 PortGid=:: JoinState=0x0
out=$(run ca2 saquery -g)
expect "saquery -g" "$out" "MGID=$bcast" Mlid=0xC000 Mtu=0x84 pkey=0xFFFF Rate=0x83

# --- PathRecord ca1 -> ca2 by LIDs, asked from ca1.
out=$(run ca1 saquery PR --slid "$OSMH_LID_ca1" --dlid "$OSMH_LID_ca2")
expect "PathRecord ca1->ca2" "$out" "slid=$OSMH_LID_ca1" "dlid=$OSMH_LID_ca2" \
  sgid=fe80::10:3 dgid=fe80::10:5 pkey=0xFFFF sl=0x0 mtu=0x84 rate=0x83 \
  pkt_life=0x92 num_path_revers=0x80 hop_flow_raw=0x0 tclass=0x0

# --- umad_probe: our own libibumad client (the SA client's path).
want_mcmr="mgid=$bcast qkey=0x00000b1b mlid=0xc000 mtu=0x84 tclass=0x00 pkey=0xffff rate=0x83 pkt_life=0x92 sl=0 scope=2"
check_probe() { # WHAT OUTPUT RC METHOD JOIN_STATE PORT_GID
  local what=$1 out=$2 rc=$3 method=$4 js=$5 pgid=$6 recv mcmr pair
  recv=$(grep '^recv:' <<<"$out") mcmr=$(grep '^mcmr:' <<<"$out")
  if [ "$rc" -ne 0 ] || [ "$(kv "$recv" status)" != 0x0000 ] || [ "$(kv "$recv" method)" != "$method" ]; then
    bad "umad_probe $what: rc $rc, $recv"
    printf '%s\n' "$out" | sed 's/^/    /'
    return
  fi
  [ "$what" = leave ] && { ok "umad_probe leave: $recv"; return; }
  for pair in $want_mcmr "join_state=$js" "port_gid=$pgid"; do
    [ "$(kv "$mcmr" "${pair%%=*}")" = "${pair#*=}" ] || { bad "umad_probe $what: want $pair in: $mcmr"; return; }
  done
  ok "umad_probe $what: $recv"
}
out=$(run ca1 "$work/umad_probe" -m get); rc=$?
check_probe get "$out" $rc 0x81 0x0 ::
if grep -q '^fd: fd=10[0-9][0-9] .*epoll_ctl=Bad file descriptor' <<<"$out"; then
  ok "umad fd is libumad2sim's fake fd (>= 1024), epoll refuses it"
else
  bad "unexpected fd line: $(grep '^fd:' <<<"$out")"
fi
out=$(run ca2 "$work/umad_probe" -m join); rc=$?
check_probe join "$out" $rc 0x81 0x1 fe80::10:5
out=$(run ca2 "$work/umad_probe" -m leave); rc=$?
check_probe leave "$out" $rc 0x95 - -
echo "time: queries (14 client runs) $(ms_since "$t") ms"

# --- stop, and nothing left
t=${EPOCHREALTIME/./}
if "$HERE/stop.sh" "$env_file"; then ok "stop.sh: all clean"; else bad "stop.sh reported leftovers"; fi
for pid in "$OSMH_IBSIM_PID" "$OSMH_OPENSM_PID" "$OSMH_IBSIM_WRAPPER_PID" "$OSMH_OPENSM_WRAPPER_PID"; do
  osmh_alive "$pid" && bad "pid $pid still alive"
done
left=$(osmh_fabric_pids)
if [ -z "$left" ]; then ok "no process attached to the fabric"; else bad "attached: $left"; fi
if osmh_socket_bound ctl; then bad "ibsim socket still bound"; else ok "ibsim sockets gone"; fi
if [ "${OSMH_KEEP:-0}" != 1 ]; then
  if [ -e "$OSMH_DIR" ]; then bad "$OSMH_DIR not removed"; else ok "harness directory removed"; fi
fi
env_file=""
echo "time: stop $(ms_since "$t") ms"
echo "time: total $(ms_since "$t_total") ms"

if [ "$failures" -ne 0 ]; then
  echo "smoke: $failures check(s) failed"
  exit 1
fi
echo "smoke: PASS"
