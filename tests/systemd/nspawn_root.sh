#!/usr/bin/env bash
# A minimal Debian bookworm root that boots under systemd-nspawn, cached
# between runs on the same machine; prints the cached tarball's path.
#
#   tests/systemd/nspawn_root.sh [PACKAGE...]
#
# The root is debootstrap --variant=minbase with systemd, systemd-sysv,
# dbus, iproute2, iputils-ping and the PACKAGEs (the tested package's
# runtime Depends), from the host's own Debian mirror (the first bookworm
# URI in its apt sources; IPOIBD_NSPAWN_MIRROR overrides it). Then, as
# shared/reference/systemd-in-ci.md says: a hostname of its own (debootstrap
# copies the host's), and console-getty and the apt/dpkg/e2scrub/fstrim
# timers masked, so a boot reaches "running" at once and stays quiet.
#
# The cache: $IPOIBD_NSPAWN_CACHE (default /var/cache/ipoibd-nspawn)/
# bookworm-ARCH-KEY.tar.gz, KEY a hash of RECIPE below and the package list,
# so a new runtime dependency or a change to this recipe builds a new root
# (about 45 s and 72 MB) and removes the older tarballs; otherwise the
# tarball is reused as it is. Concurrent runs serialise on a lock in the
# cache directory. Delete the directory to start afresh.
set -euo pipefail
RECIPE=1   # bump when the steps below change
SUITE=bookworm
CACHE=${IPOIBD_NSPAWN_CACHE:-/var/cache/ipoibd-nspawn}

die() { echo "nspawn_root: $*" >&2; exit 1; }
command -v debootstrap >/dev/null || die "debootstrap is missing (scripts/install-deps.sh installs it)"

# The first http(s) URI of a bookworm main suite in the host's apt sources,
# one-line (sources.list) or deb822 (*.sources) format.
host_mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk -v s="$SUITE" '$1 == "deb" {
        i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
        if ($(i + 1) == s && $i ~ /^https?:/) { print $i; exit }
      }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v s="$SUITE" 'BEGIN { RS = ""; FS = "\n" }
      {
        uri = ""; suite = 0; deb = 0
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^Types:.*(^|[ \t])deb([ \t]|$)/) deb = 1
          if ($i ~ /^URIs:/) { split($i, w, /[ \t]+/); uri = w[2] }
          if ($i ~ /^Suites:/) { n = split($i, w, /[ \t]+/); for (j = 2; j <= n; j++) if (w[j] == s) suite = 1 }
        }
        if (deb && suite && uri ~ /^https?:/) { print uri; exit }
      }' "$f"
  done
}

ARCH=$(dpkg --print-architecture)
packages=$(printf '%s\n' systemd systemd-sysv dbus iproute2 iputils-ping "$@" | LC_ALL=C sort -u | paste -sd, -)
KEY=$(printf 'recipe %s\nsuite %s\narch %s\npackages %s\n' "$RECIPE" "$SUITE" "$ARCH" "$packages" |
  sha256sum | cut -c1-16)
TARBALL=$CACHE/$SUITE-$ARCH-$KEY.tar.gz

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock -w 600 9 || die "another run holds $CACHE/.lock for more than 10 minutes"
if [ -s "$TARBALL" ]; then
  echo "$TARBALL"
  exit 0
fi

MIRROR=${IPOIBD_NSPAWN_MIRROR:-$(host_mirror | head -n1)}
[ -n "$MIRROR" ] || die "no $SUITE mirror in the host's apt sources: set IPOIBD_NSPAWN_MIRROR"
ROOT=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$ROOT" "$TARBALL.tmp"' EXIT
echo "nspawn_root: debootstrap $SUITE from $MIRROR with $packages (once; cached as $TARBALL)" >&2
debootstrap --variant=minbase --include="$packages" "$SUITE" "$ROOT" "$MIRROR" >"$ROOT.log" 2>&1 ||
  { tail -n 30 "$ROOT.log" >&2; rm -f "$ROOT.log"; die "debootstrap failed"; }
rm -f "$ROOT.log"

echo ipoibd-nspawn >"$ROOT/etc/hostname"
masked=(console-getty.service apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer
        e2scrub_all.timer fstrim.timer)
systemctl --root="$ROOT" mask "${masked[@]}" >/dev/null 2>&1
apt_lists=("$ROOT"/var/lib/apt/lists/*)
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "${apt_lists[@]}"

tar -C "$ROOT" --numeric-owner --xattrs --xattrs-include='*' -czf "$TARBALL.tmp" .
mv "$TARBALL.tmp" "$TARBALL"
# One root per machine is enough: older recipes and package lists go.
find "$CACHE" -maxdepth 1 -name "$SUITE-$ARCH-*.tar.gz" ! -name "$(basename "$TARBALL")" -delete
echo "$TARBALL"
