#!/usr/bin/env bash
# Installs every package needed to build and test ipoibd, with apt-get,
# non-interactively and without recommends. Idempotent: installs only what is
# missing, and touches apt only then.
set -euo pipefail

packages=(
  # toolchain
  cmake ninja-build g++ clang libclang-rt-14-dev pkg-config ccache
  # libraries
  zlib1g-dev libisal-dev libboost-program-options-dev libmnl-dev libsystemd-dev libcap-dev libsodium-dev
  # verbs backend (real HCAs) and the libibumad SA path
  libibverbs-dev libibumad-dev librdmacm-dev ibverbs-providers
  # tests
  libgtest-dev libgmock-dev libbenchmark-dev tshark python3 iproute2 iputils-ping iperf3 systemd
  # booted Debian containers (tests/systemd/nspawn.sh)
  systemd-container debootstrap
  # the Debian package and its check (packaging/build-deb.sh, packaging/test-deb.sh)
  dpkg-dev binutils lintian man-db groff-base
  # OpenSM reference (tests/opensm)
  opensm ibsim-utils infiniband-diags
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}" >&2
  echo "install-deps: run as root (sudo $0) to install them" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# tshark's package asks whether non-root users may capture; answer no.
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
# Start no services while installing: opensm's package would start a real
# subnet manager on every HCA port of a machine that has them.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
