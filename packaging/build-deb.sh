#!/usr/bin/env bash
# Builds the Debian binary package ipoibd_<version>_<arch>.deb.
#
#   packaging/build-deb.sh [OUTDIR]        OUTDIR defaults to build-pkg/
#
# IPOIBD_DEB_TREE=DIR builds in DIR instead of a fresh build-pkg/cmake,
# with the same flags and the tests too (BUILD_TESTING, warnings as errors),
# and CMAKE_ARGS after OUTDIR go to its configure: scripts/test.sh builds
# its plain tree so, once, and the package comes from the programs it
# tests. A DIR configured before with other flags is configured again
# with the package's.
#
#   IPOIBD_DEB_TREE=build packaging/build-deb.sh OUTDIR [CMAKE_ARG...]
#
# 1. version and date from packaging/deb/changelog; its upstream part must
#    be the CMake project's version;
# 2. a fresh Release build of the five programs in build-pkg/cmake (ccache
#    when installed), Debian's hardening flags from dpkg-buildflags;
# 3. `DESTDIR=build-pkg/root cmake --install` with prefix /usr: programs,
#    units, man pages, docs, and the two /etc files (GNUInstallDirs puts
#    SYSCONFDIR at /etc for the /usr prefix);
# 4. what debhelper would do: strip, compress man pages and large docs, add
#    copyright and changelog.Debian.gz, clamp mtimes to the changelog date;
# 5. DEBIAN/: control with Depends from dpkg-shlibdeps, conffiles,
#    maintainer scripts (packaging/deb/), md5sums;
# 6. dpkg-deb --root-owner-group --build. The package's path is the last
#    line printed.
#
# No root needed. Every tool is in Debian 12's dpkg-dev, binutils, cmake,
# ninja-build and the build dependencies (scripts/install-deps.sh).
set -euo pipefail
umask 022
SRC=$(cd "$(dirname "$0")/.." && pwd)
PKG_DIR=$SRC/packaging/deb
WORK=$SRC/build-pkg
OUT=${1:-$WORK}
shift $(($# > 0 ? 1 : 0))
[ $# -eq 0 ] || [ -n "${IPOIBD_DEB_TREE:-}" ] || { echo "build-deb: CMake arguments need IPOIBD_DEB_TREE" >&2; exit 1; }

die() { echo "build-deb: $*" >&2; exit 1; }
for tool in flock cmake ninja dpkg-deb dpkg-shlibdeps dpkg-parsechangelog dpkg-buildflags strip gzip; do
  command -v "$tool" >/dev/null || die "$tool is missing (scripts/install-deps.sh installs it)"
done

# One build at a time in build-pkg/ (the package check and the nspawn test
# both call this script).
mkdir -p "$WORK"
exec 9>"$WORK/.lock"
flock 9

# -- 1. version ---------------------------------------------------------------
VERSION=$(dpkg-parsechangelog -l "$PKG_DIR/changelog" -S Version)
MAINTAINER=$(dpkg-parsechangelog -l "$PKG_DIR/changelog" -S Maintainer)
export SOURCE_DATE_EPOCH
SOURCE_DATE_EPOCH=$(dpkg-parsechangelog -l "$PKG_DIR/changelog" -S Timestamp)
PROJECT_VERSION=$(sed -n 's/^project(ipoibd VERSION \([0-9.]*\).*/\1/p' "$SRC/CMakeLists.txt")
[ "${VERSION%-*}" = "$PROJECT_VERSION" ] ||
  die "packaging/deb/changelog is at $VERSION but CMakeLists.txt at $PROJECT_VERSION: add a changelog entry"
ARCH=$(dpkg --print-architecture)
DEB=ipoibd_${VERSION}_${ARCH}.deb

# -- 2. build -----------------------------------------------------------------
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# Debian's flags (stack protector, _FORTIFY_SOURCE, relro, now, and a file
# prefix map run from $SRC, which keeps the source path out of the
# binaries); CMake takes CXXFLAGS and LDFLAGS from the environment of the
# first configure, and the Release type adds -O3 -DNDEBUG. No -g: the
# symbols would be stripped anyway (there is no -dbgsym package), and
# compiling without them is faster.
export DEB_BUILD_MAINT_OPTIONS=hardening=+all DEB_CXXFLAGS_MAINT_STRIP=-g
CXXFLAGS=$(cd "$SRC" && echo "$(dpkg-buildflags --get CPPFLAGS) $(dpkg-buildflags --get CXXFLAGS)")
LDFLAGS=$(dpkg-buildflags --get LDFLAGS)
export CXXFLAGS LDFLAGS
# ccache: paths below $SRC hashed relative, so that two checkouts share hits.
export CCACHE_BASEDIR=$SRC
rm -rf "$WORK/root"
if [ -n "${IPOIBD_DEB_TREE:-}" ]; then
  # A tree configured before with other flags (scripts/demo.sh's
  # RelWithDebInfo, a developer's) is configured again with the package's:
  # the flags are given explicitly below, not only through the environment
  # that CMake reads at a tree's first configure.
  TREE=$(mkdir -p "$IPOIBD_DEB_TREE" && cd "$IPOIBD_DEB_TREE" && pwd)
  configure=(-DIPOIBD_WERROR=ON -DBUILD_TESTING=ON "$@")
else
  TREE=$WORK/cmake
  configure=(-DIPOIBD_WERROR=OFF -DBUILD_TESTING=OFF)
  rm -rf "$TREE"
fi
echo "build-deb: configuring a Release build in $TREE" >&2
cmake -S "$SRC" -B "$TREE" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
  -DCMAKE_CXX_FLAGS="$CXXFLAGS" -DCMAKE_EXE_LINKER_FLAGS="$LDFLAGS" -DCMAKE_SHARED_LINKER_FLAGS="$LDFLAGS" \
  "${configure[@]}" "${launcher[@]}" >"$WORK/configure.log" ||
  { cat "$WORK/configure.log" >&2; die "cmake configure failed"; }
programs=(ipoibd ibfabricd ipoibctl ibfabricctl ibudping ibrcperf ibsaquery)
cmake --build "$TREE" --target "${programs[@]}" >&2

# -- 3. install -----------------------------------------------------------------
ROOT=$WORK/root
DESTDIR=$ROOT cmake --install "$TREE" >/dev/null
for f in usr/sbin/ipoibd usr/sbin/ibfabricd usr/bin/ipoibctl usr/bin/ibfabricctl usr/bin/ibudping usr/bin/ibrcperf usr/bin/ibsaquery \
         etc/ipoibd/ib0.conf etc/default/ibfabricd \
         usr/lib/systemd/system/ipoibd@.service usr/lib/systemd/system/ibfabricd.service; do
  [ -e "$ROOT/$f" ] || die "cmake --install did not install /$f"
done

# -- 4. the debhelper steps ---------------------------------------------------
DOC=$ROOT/usr/share/doc/ipoibd
# As dh_strip: symbols and the .comment/.note sections go (no -dbgsym package).
for exe in "$ROOT"/usr/sbin/* "$ROOT"/usr/bin/*; do
  strip --remove-section=.comment --remove-section=.note --strip-unneeded "$exe"
done
# As dh_compress: man pages always, docs above 4 KiB (the copyright file never).
find "$ROOT/usr/share/man" -type f -exec gzip -9n {} +
find "$DOC" -type f -size +4k ! -name copyright -exec gzip -9n {} +
install -m 0644 "$PKG_DIR/copyright" "$DOC/copyright"
gzip -9nc "$PKG_DIR/changelog" >"$DOC/changelog.Debian.gz"
chmod 0644 "$DOC/changelog.Debian.gz"
# Reproducible: every file dated from the changelog entry.
find "$ROOT" -newermt "@$SOURCE_DATE_EPOCH" -exec touch --no-dereference --date="@$SOURCE_DATE_EPOCH" {} +

# -- 5. DEBIAN/ -----------------------------------------------------------------
mkdir -p "$ROOT/DEBIAN"
# dpkg-shlibdeps reads debian/control of the current directory: give it a
# minimal one. -O prints "shlibs:Depends=...".
shlib_dir=$WORK/shlibdeps
rm -rf "$shlib_dir"
mkdir -p "$shlib_dir/debian"
printf 'Source: ipoibd\n\nPackage: ipoibd\nArchitecture: any\n' >"$shlib_dir/debian/control"
depends=$(cd "$shlib_dir" && dpkg-shlibdeps -O -e"$ROOT"/usr/sbin/ipoibd -e"$ROOT"/usr/sbin/ibfabricd \
  -e"$ROOT"/usr/bin/ipoibctl -e"$ROOT"/usr/bin/ibfabricctl -e"$ROOT"/usr/bin/ibudping -e"$ROOT"/usr/bin/ibrcperf -e"$ROOT"/usr/bin/ibsaquery)
depends=${depends#shlibs:Depends=}
[ -n "$depends" ] || die "dpkg-shlibdeps found no dependencies"
installed_size=$(du -sk --apparent-size --exclude=DEBIAN "$ROOT" | cut -f1)

cat >"$ROOT/DEBIAN/control" <<EOF
Package: ipoibd
Version: $VERSION
Architecture: $ARCH
Maintainer: $MAINTAINER
Installed-Size: $installed_size
Depends: $depends
Suggests: tshark
Section: net
Priority: optional
Description: userspace IP-over-InfiniBand daemon
 ipoibd runs IP over InfiniBand (RFC 4391) in user space: it joins the
 IPoIB broadcast and multicast groups through its own subnet administration
 client, resolves neighbours with ARP and IPv6 neighbour discovery, and
 carries IPv4 and IPv6 between a TUN interface and the fabric. Each
 interface is one instance of the systemd service ipoibd@.service,
 configured in /etc/ipoibd/.
 .
 It runs on real host channel adapters through libibverbs and libibumad,
 and on a software InfiniBand fabric carried over UDP, ibfabricd (switch,
 subnet manager and subnet administrator), so that hosts without
 InfiniBand hardware can use it too.
 .
 Also included: ipoibctl, which shows a running daemon's neighbours, paths,
 multicast groups and counters; ibfabricctl, the same for ibfabricd's
 ports, groups and counters; ibudping, a UD datagram test; ibrcperf, an
 RC message test and benchmark; ibsaquery,
 subnet administration queries.
EOF
printf '/etc/default/ibfabricd\n/etc/ipoibd/ib0.conf\n' >"$ROOT/DEBIAN/conffiles"
for script in postinst prerm postrm; do
  install -m 0755 "$PKG_DIR/$script" "$ROOT/DEBIAN/$script"
done
(cd "$ROOT" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
  xargs -0 md5sum >DEBIAN/md5sums)
chmod 0644 "$ROOT/DEBIAN/control" "$ROOT/DEBIAN/conffiles" "$ROOT/DEBIAN/md5sums"

# -- 6. the package -----------------------------------------------------------
mkdir -p "$OUT"
dpkg-deb --root-owner-group -Zxz --build "$ROOT" "$OUT/$DEB" >&2
echo "$(cd "$OUT" && pwd)/$DEB"
