#!/usr/bin/env bash
# Stops a harness started by start.sh: OpenSM first (it detaches from ibsim
# cleanly), then ibsim; each SIGTERM, then SIGKILL after 5 s. Only the PIDs
# recorded in the env file, and only if their environment proves they are
# this harness's. Then checks that nothing is left: no recorded process, no
# process attached to the fabric (IBSIM_SOCKNAME in its environment; those
# are reported, not killed: they were not started here), no bound ibsim
# socket. Removes the harness directory unless --keep or OSMH_KEEP=1.
#
# Usage: stop.sh ENVFILE|DIR [--keep]
# Exit status: 0 all clean, 1 something left (listed on stderr), 2 usage.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

[ $# -ge 1 ] || { sed -n '2,/^set /p' "$0" | sed '$d' >&2; exit 2; }
keep=${OSMH_KEEP:-0}
[ "${2:-}" = --keep ] && keep=1
osmh_load_env "$1" || exit 2

# The programs first (their timeout wrappers exit with them), then the
# wrappers in case they did not.
osmh_stop_pid "$OSMH_OPENSM_PID" opensm
osmh_stop_pid "$OSMH_OPENSM_WRAPPER_PID" "opensm's timeout wrapper"
osmh_stop_pid "$OSMH_IBSIM_PID" ibsim
osmh_stop_pid "$OSMH_IBSIM_WRAPPER_PID" "ibsim's timeout wrapper"

left=0
for pid in "$OSMH_OPENSM_PID" "$OSMH_OPENSM_WRAPPER_PID" "$OSMH_IBSIM_PID" "$OSMH_IBSIM_WRAPPER_PID"; do
  if osmh_is_ours "$pid"; then
    osmh_log "still running: pid $pid"
    left=1
  fi
done
strays=$(osmh_fabric_pids)
if [ -n "$strays" ]; then
  for pid in $strays; do
    osmh_log "still attached to the fabric: pid $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)"
  done
  left=1
fi
if osmh_socket_bound ctl; then
  osmh_log "ibsim socket @$IBSIM_SOCKNAME:ctl is still bound"
  left=1
fi

if [ "$keep" = 1 ] || [ "$left" = 1 ]; then
  osmh_log "harness directory kept: $OSMH_DIR"
else
  rm -rf "$OSMH_DIR"
fi
exit "$left"
