#!/usr/bin/env bash
# The demo: three IPoIB hosts on a soft InfiniBand fabric, on this machine.
#
#   sudo scripts/demo.sh [--keep]
#
# Installs what it needs (scripts/install-deps.sh), builds ipoibd, ipoibctl
# and ibfabricd into build/bin when one is missing or older than the sources,
# then, in network namespaces of its own:
#
#   fab  ibfabricd, the fabric (switch, SM, SA) on 198.18.100.100:18516, a
#        bridge with one veth per host: the "cables"
#   A    ipoibd ib0 198.18.0.1/24 2001:db8::1/64   (underlay 198.18.100.1)
#   B    ipoibd ib0 198.18.0.2/24 2001:db8::2/64   (underlay 198.18.100.2)
#   C    ipoibd ib0 198.18.0.3/24 2001:db8::3/64   (underlay 198.18.100.3)
#
# and shows ping and ping6 between every pair, A's neighbours, paths,
# multicast groups and counters (ipoibctl), A's daemon in journald, and the
# fabric's capture decoded by tshark. Everything it started is stopped and
# its namespaces deleted on exit or Ctrl-C; --keep keeps the directory with
# the capture, configurations and logs. Addresses come only from
# 198.18.0.0/15 and 2001:db8::/32; every wait is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

KEEP=""
for arg in "$@"; do
  case $arg in
    --keep) KEEP=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo: unknown option $arg (try --help)" >&2; exit 2 ;;
  esac
done
if [ "$(id -u)" -ne 0 ]; then
  echo "demo: needs root (network namespaces, TUN devices): sudo $0" >&2
  exit 1
fi

if [ -t 1 ]; then BOLD=$'\033[1m' PLAIN=$'\033[0m'; else BOLD="" PLAIN=""; fi
heading() { printf '\n%s== %s%s\n' "$BOLD" "$*" "$PLAIN"; }
die() { echo "demo: $*" >&2; exit 1; }

# --- dependencies and build ----------------------------------------------------
heading "Dependencies and build"
scripts/install-deps.sh
BIN=$ROOT/build/bin
SOURCES=(CMakeLists.txt common transport sa_client fabric ipoib netlink config daemon)
needs_build() {  # a program missing, or a source newer than it
  local b
  for b in ipoibd ipoibctl ibfabricd; do
    [ -x "$BIN/$b" ] || return 0
    [ -z "$(find "${SOURCES[@]}" -newer "$BIN/$b" \
        \( -name '*.cpp' -o -name '*.h' -o -name 'CMakeLists.txt' \) -print -quit)" ] || return 0
  done
  return 1
}
if needs_build; then
  echo "building ipoibd, ipoibctl, ibfabricd in build/ (RelWithDebInfo; the first build takes minutes)"
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
  ninja -C build ipoibd ipoibctl ibfabricd
else
  echo "dependencies installed; build/bin is up to date"
fi

# --- state, and the cleanup that undoes it ---------------------------------------
T0=$SECONDS
START_EPOCH=$(date +%s)
WORK=$(mktemp -d /tmp/ipoibd-demo.XXXXXX)
SUFFIX=$$
FAB=ipoibd-demo-fab-$SUFFIX
declare -A NS=([A]=ipoibd-demo-a-$SUFFIX [B]=ipoibd-demo-b-$SUFFIX [C]=ipoibd-demo-c-$SUFFIX)
declare -A IDX=([A]=1 [B]=2 [C]=3)
declare -A GUID=([A]=0x0002c90300d0000a [B]=0x0002c90300d0000b [C]=0x0002c90300d0000c)
declare -A PID=()
FABRIC=198.18.100.100:18516
NAMESPACES=()
PIDS=()            # ours only, stopped in reverse order: daemons, then the fabric
JOURNALD_PID=""
JOURNALD_CREATED=()

cleanup() {
  local rc=$? i pid
  trap - EXIT INT TERM
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    pid=${PIDS[i]}
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  if [ -n "$JOURNALD_PID" ]; then
    kill -TERM "$JOURNALD_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$JOURNALD_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$JOURNALD_PID" 2>/dev/null || true
    wait "$JOURNALD_PID" 2>/dev/null || true
    # Only what our journald created (the journal it kept is in $WORK).
    [ ${#JOURNALD_CREATED[@]} -eq 0 ] || rm -rf "${JOURNALD_CREATED[@]}"
  fi
  if [ $rc -eq 130 ]; then
    echo "demo: interrupted; everything it started is stopped" >&2
  elif [ $rc -ne 0 ]; then
    echo "demo: failed (exit $rc); daemon logs:" >&2
    for f in "$WORK"/*.log; do [ -s "$f" ] && { echo "-- $f" >&2; tail -n 20 "$f" >&2; }; done
  fi
  if [ -n "$KEEP" ]; then
    echo "kept: $WORK"
  else
    rm -rf "$WORK"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the underlay: a bridge in the fabric namespace, one veth per host ------------
heading "Network namespaces, fabric and hosts"
ip netns add "$FAB"; NAMESPACES+=("$FAB")
ip -n "$FAB" link set lo up
ip -n "$FAB" link add br0 type bridge
ip -n "$FAB" addr add 198.18.100.100/24 dev br0
ip -n "$FAB" link set br0 up
for h in A B C; do
  ns=${NS[$h]}
  ip netns add "$ns"; NAMESPACES+=("$ns")
  ip -n "$ns" link set lo up
  ip link add "dm${h}h$SUFFIX" netns "$ns" type veth peer name "dm${h}f$SUFFIX" netns "$FAB"
  ip -n "$FAB" link set "dm${h}f$SUFFIX" master br0 up
  ip -n "$ns" addr add "198.18.100.${IDX[$h]}/24" dev "dm${h}h$SUFFIX"
  ip -n "$ns" link set "dm${h}h$SUFFIX" up
done

# --- journald: the running one, or our own for the duration of the demo ----------
# A socket nobody listens on (a journald that was killed) counts as none.
if [ -S /run/systemd/journal/socket ] && ! python3 -c "import socket; socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).connect('/run/systemd/journal/socket')" 2>/dev/null; then
  rm -f /run/systemd/journal/socket
fi
if [ ! -S /run/systemd/journal/socket ]; then
  JD=$(command -v systemd-journald || echo /lib/systemd/systemd-journald)
  [ -x "$JD" ] || die "systemd-journald not found (Debian package systemd)"
  for d in /run/systemd/journal /run/log/journal /run/log; do
    [ -e $d ] || JOURNALD_CREATED+=("$d")
  done
  "$JD" >"$WORK/journald.log" 2>&1 &
  JOURNALD_PID=$!
  for _ in $(seq 50); do [ -S /run/systemd/journal/socket ] && break; sleep 0.1; done
  [ -S /run/systemd/journal/socket ] || die "journald did not start"
  echo "no journald was running: started one (pid $JOURNALD_PID) for the demo"
fi

# --- the fabric and the three hosts -------------------------------------------------
ip netns exec "$FAB" "$BIN/ibfabricd" --listen "$FABRIC" --pcap "$WORK/fabric.pcap" \
  >"$WORK/ibfabricd.log" 2>&1 &
PIDS+=($!)
echo "ibfabricd  --listen $FABRIC --pcap $WORK/fabric.pcap"
for h in A B C; do
  i=${IDX[$h]}
  cat >"$WORK/$h.conf" <<EOF
[fabric]
transport = soft
address = $FABRIC
# Several hosts on one machine: each needs a GUID of its own.
port-guid = ${GUID[$h]}
[interface]
address = 198.18.0.$i/24
address = 2001:db8::$i/64
[daemon]
control-socket = $WORK/$h.sock
EOF
  ip netns exec "${NS[$h]}" "$BIN/ipoibd" -i ib0 -c "$WORK/$h.conf" --log-target journal \
    >"$WORK/$h.log" 2>&1 &
  PID[$h]=$!; PIDS+=("${PID[$h]}")
  echo "host $h: ipoibd -i ib0 -c $WORK/$h.conf   ib0 198.18.0.$i/24 2001:db8::$i/64  (netns ${NS[$h]})"
done

ctl() {  # HOST ARGS...: ipoibctl against HOST's daemon
  local h=$1; shift
  ip netns exec "${NS[$h]}" "$BIN/ipoibctl" -s "$WORK/$h.sock" -t 2s "$@"
}
# Up: the broadcast group joined; then IPv6 duplicate address detection
# (1 s), during which the IPv6 addresses are tentative and cannot send.
for h in A B C; do
  deadline=$((SECONDS + 20))
  until status=$(ctl "$h" -j status 2>/dev/null) && grep -q '"link":"up"' <<<"$status" \
      && ! grep -q '"dad":"tentative"' <<<"$status"; do
    kill -0 "${PID[$h]}" 2>/dev/null || die "host $h: ipoibd exited"
    [ $SECONDS -lt $deadline ] || die "host $h: ib0 not up, or its addresses still tentative, after 20 s"
    sleep 0.1
  done
done
echo "A, B and C: ib0 up (broadcast group joined), IPv6 DAD done ($((SECONDS - T0)) s)"

# --- ping and ping6 ----------------------------------------------------------------
heading "ping and ping6 between every pair"
ping_one() {  # FROM TO DEST_ADDR
  local out rtt
  out=$(ip netns exec "${NS[$1]}" ping -n -q -c 3 -i 0.2 -W 2 "$3" 2>&1) \
    || { echo "$out" >&2; die "ping $1 -> $2 ($3) failed"; }
  rtt=$(sed -n 's|.*= [0-9.]*/\([0-9.]*\)/.*|\1|p' <<<"$out")
  printf '  %s -> %s  %-12s 3/3 replies, avg %s ms\n' "$1" "$2" "$3" "$rtt"
}
for s in A B C; do
  for d in A B C; do
    [ "$s" = "$d" ] && continue
    ping_one "$s" "$d" "198.18.0.${IDX[$d]}"
    ping_one "$s" "$d" "2001:db8::${IDX[$d]}"
  done
done

# --- ipoibctl ----------------------------------------------------------------------
heading "ipoibctl status (host A)"
ctl A status
heading "ipoibctl neigh (host A): IP -> 20-byte IPoIB address (QPN + GID)"
ctl A neigh
heading "ipoibctl paths (host A): GID -> LID, SL, MTU, rate from the SA's PathRecords"
ctl A paths
heading "ipoibctl mcast (host A): the groups A joined through the SA"
ctl A mcast
heading "ipoibctl stats (host A): the non-zero counters, one line per section"
ctl A stats >"$WORK/A-stats.txt"
# "section:" then "  counter: value" lines; every drop has a counter here too.
awk '/^[a-z_]+:$/ { if (line != "") print line; line = sprintf("%-11s", $1); next }
     $2 != "0"   { sub(/:$/, "=", $1)
                   if (length(line) + length($1 $2) > 98) { print line; line = sprintf("%11s", "") }
                   line = line " " $1 $2 }
     END         { if (line != "") print line }' "$WORK/A-stats.txt"

# --- journald ---------------------------------------------------------------------
heading "journald: host A's daemon (journalctl _PID=${PID[A]})"
journal() { timeout 10 journalctl --no-pager --since "@$START_EPOCH" _PID="${PID[A]}" "$@"; }
deadline=$((SECONDS + 5))
until journal -q -o cat 2>/dev/null | grep -q "link up"; do
  [ $SECONDS -lt $deadline ] || die "no 'link up' entry from A's daemon in the journal"
  sleep 0.2
done
journal -o short-precise
echo
echo "Each entry has structured fields; the link-up entry (journalctl -o verbose MESSAGE_ID=...):"
journal -o verbose MESSAGE_ID=e6679c3ea3fe4299bcf2506d6fa52b6e \
  | grep -E '^ +(MESSAGE|MESSAGE_ID|PRIORITY|IPOIB_[A-Z_]+|IB_[A-Z_]+)=' | sed -n 1,14p
journal -o json >"$WORK/A-journal.json" 2>/dev/null || true

# --- the capture --------------------------------------------------------------------
heading "Capture: every packet through the fabric's switch"
PCAP=$WORK/fabric.pcap
echo "file: $PCAP ($(stat -c %s "$PCAP") bytes; pcap, ERF type 21 as ibdump writes)"
echo "IPoIB ARP and ping, first 5 packets:"
{ timeout 20 tshark -n -r "$PCAP" -Y 'arp || icmp || icmpv6.type == 128' 2>/dev/null || true; } | head -n 5
echo
echo "Read it (hardware type 32, 20-byte addresses: QPN + GID):"
echo "  tshark -r $PCAP -Y arp -V"
echo "  tshark -r $PCAP -Y 'infiniband.mad.attributeid == 0x0038' -V   # SA MCMemberRecords"
echo "  wireshark $PCAP"
[ -n "$KEEP" ] || echo "(the file is deleted on exit; run with --keep to keep it)"

heading "Done in $((SECONDS - T0)) s; stopping the daemons and deleting the namespaces"
