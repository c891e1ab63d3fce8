#!/usr/bin/env bash
# Runs one libibumad client (saquery, umad_probe, our SA tests...) on a
# simulated CA of a running harness: LD_PRELOAD=libumad2sim.so,
# IBSIM_SOCKNAME of the harness, SIM_HOST=NODE, in a scratch working
# directory (libumad2sim writes ./sys-<pid>/ there), bounded by a timeout.
# The client sees one HCA "ibsim0" with one port (1), the first port of NODE.
#
# Usage: sim-run.sh ENVFILE|DIR NODE CMD [ARG...]
#   NODE: ca1 or ca2 (ca0 is OpenSM's node; a client there works too)
#   OSMH_CLIENT_TIMEOUT: seconds before the client is killed (default 30)
# CMD runs in the scratch directory: give it absolute paths (the caller's
# directory is in OSMH_CALLER_PWD). Exit status: CMD's, 124 on timeout.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

[ $# -ge 3 ] || { sed -n '2,/^set /p' "$0" | sed '$d' >&2; exit 2; }
osmh_load_env "$1" || exit 2
node=$2
shift 2
osmh_is_ours "$OSMH_IBSIM_PID" || { osmh_log "ibsim of $OSMH_DIR is not running"; exit 1; }

mkdir -p "$OSMH_DIR/run"
scratch=$(mktemp -d "$OSMH_DIR/run/$node.XXXXXX") || exit 1
rc=0
(
  cd "$scratch" || exit 1
  export OSMH_CALLER_PWD=$OLDPWD OSMH_DIR IBSIM_SOCKNAME SIM_HOST=$node
  export LD_PRELOAD=$OSMH_UMAD2SIM${LD_PRELOAD:+:$LD_PRELOAD}
  unset IBSIM_SERVER_NAME IBSIM_SERVER_PORT SIM_SET_ISSM
  exec timeout -k 2 "${OSMH_CLIENT_TIMEOUT:-30}" "$@"
) || rc=$?
# A client killed by a signal did not detach from ibsim: free its slot.
if [ "$rc" -ge 124 ]; then
  [ "$rc" -eq 124 ] && osmh_log "timed out after ${OSMH_CLIENT_TIMEOUT:-30} s: $*"
  osmh_reap_clients
fi
rm -rf "$scratch"
exit "$rc"
