#!/usr/bin/env bash
# The shipped units pass `systemd-analyze verify` (with ExecStart= pointed
# at this build, since nothing is installed) and their hardening is scored
# by `systemd-analyze security --offline`: exposure must stay below 5.
#
# verify_units.sh SOURCE_DIR BIN_DIR
set -euo pipefail
SRC=$(cd "$1" && pwd); BIN=$(cd "$2" && pwd)
command -v systemd-analyze >/dev/null || { echo "systemd-analyze missing (Debian package systemd)"; exit 1; }
WORK=$(mktemp -d /tmp/ipoibd-units.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
for unit in "$SRC"/systemd/*.service; do
  sed -e "s|/usr/sbin/ipoibd|$BIN/ipoibd|; s|/usr/sbin/ibfabricd|$BIN/ibfabricd|" "$unit" >"$WORK/$(basename "$unit")"
done
cp "$WORK/ipoibd@.service" "$WORK/ipoibd@ib0.service"
# The man pages are checked once installed (the package test); here only
# the units themselves.
systemd-analyze verify --man=no "$WORK/ipoibd@ib0.service" "$WORK/ibfabricd.service"
echo "ok: systemd-analyze verify"
for unit in ipoibd@ib0.service ibfabricd.service; do
  score=$(systemd-analyze security --offline=yes "$WORK/$unit" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
  [ -n "$score" ] || { echo "no security score for $unit"; exit 1; }
  awk -v s="$score" 'BEGIN { exit !(s < 5.0) }' || { echo "FAIL: $unit exposure $score (want < 5)"; exit 1; }
  echo "ok: $unit exposure $score"
done
