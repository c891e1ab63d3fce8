#!/usr/bin/env bash
# bench/tunnel.sh - ipoibd against bare veth and userspace TUN tunnels, in one
# run, in the same pair of network namespaces; then ipoibd's resident memory
# idle and with many neighbours and multicast groups. A benchmark: it prints
# figures and asserts nothing (STYLE.md guideline 11); not part of the tests.
#
# Network (DESIGN.md "Test networks": 198.18.0.0/15 only, namespaces made
# here, nothing leaves them):
#
#   tbfab   bridge br0 198.18.100.100/24 (MTU 9000), ibfabricd on :18516
#   tba     veth tbua 198.18.100.1/24 to the bridge      (host A)
#   tbb     veth tbub 198.18.100.2/24 to the bridge      (host B)
#
# Every row runs between tba and tbb over that same underlay (veth, bridge,
# veth; MTU 9000 so that no carrier packet is fragmented). ibfabricd, the
# soft fabric's switch and SM, is a process of its own in tbfab: the path of
# an ipoibd packet is A's ipoibd -> UDP -> ibfabricd -> UDP -> B's ipoibd.
#
# Rows (ROWS= selects a subset, in this order):
#   veth          the underlay itself, kernel only        198.18.100.2  MTU 9000
#   ipoibd-2044   ipoibd pair, broadcast group MTU 2048   198.18.0.2    MTU 2044
#                 (ibfabricd's default partition)
#   ipoibd-4092   ipoibd pair, broadcast group MTU 4096   198.18.0.2    MTU 4092
#                 (ibfabricd --partitions: Default=0x7fff, ipoib, mtu=5 : ALL=full)
#   openvpn-2044  OpenVPN p2p UDP, no crypto, mssfix 0    198.19.1.2    MTU 2044
#   openvpn-4092  same                                    198.19.1.2    MTU 4092
#   socat-4092    socat TUN <-> UDP-DATAGRAM              198.19.3.2    MTU 4092
#   key-4092      the ipoibd-4092 row with a fabric key (ibfabricd --fabric-key,
#                 [fabric] key-file): what authenticating every datagram costs
#   connected-65520  ipoibd pair in connected mode (RFC 4755, [interface]
#                 connected-mode = yes): RC connections, MTU 65520, the same
#                 4096-byte group and path MTU as ipoibd-4092 (issue 21's
#                 target: TCP >= 1.5x ipoibd-4092's, small-ping RTT no worse)
#   tap-2044      the ipoibd-2044 row in TAP mode on both hosts ([interface]
#   tap-4092      mode = tap: Ethernet devices, the kernel's ARP/ND answered
#                 with synthetic MACs; issue 22's target: TCP within 15% of
#                 the TUN row at the same MTU)
#   threads2-4092 the ipoibd-4092 row with [daemon] data-threads = 2 in both
#                 daemons (a multi-queue TUN, a second thread reading and
#                 sending; the ipoibd, key, connected and tap rows set 1);
#                 issue 24's target with STREAMS=4: TCP >= 1.3x ipoibd-4092's
#   floor-4092    bench_floor (bench/floor_forwarder.cpp): the least a userspace
#                 TUN <-> UDP tunnel can do here (one thread, a connected
#                 socket, no protocol); with busy polling in the RTT test.
#                 The yardstick of issue 24's latency targets
#   base-2044     the ipoibd-2044 row with the ipoibd, ibfabricd and ipoibctl
#   base-4092     of BASE_BIN (another build: old against new in one run);
#   base-connected-65520  (the same for connected-65520,
#   base-threads2-4092    and threads2-4092)
#                 added to ROWS beside each ipoibd, threads2 and connected row when BASE_BIN is set,
#                 after it in odd rounds and before it in even ones (the
#                 first of two back-to-back rows measured a slower busy-poll
#                 RTT, whichever build it was)
# (the OpenVPN and socat invocations are those of ../shared/bench/peers.sh)
#
# RTT (first): every row up at once, each on its own devices, addresses and
# ports in the same namespaces (ipoibd rows with their own ibfabricd), and
# a second instance of every ipoibd and floor row with [daemon] busy-poll =
# BUSY_POLL (`ROW+bp`). RTT_ROUNDS rounds; in each, every instance gets
# RTT_PINGS pings from A every PING_INT s, one instance after the other (the
# order reversed every other round), so that the machine's noise hits every
# row alike. Per instance the median and p99 of all its RTTs (us); per pair
# compared, the ratio of the medians with a 95% interval from a bootstrap
# that resamples whole rounds (the rows' samples of one round stay
# together). RTT=0 skips it. After the rounds, pages per echo: for each
# instance as shipped, PAGE_ROUNDS (12) single pings after a quiet spell,
# the pages of both ends' own memory (program, heap, stacks, anonymous
# maps; not shared libraries) referenced by the one ping (clear_refs, then
# smaps), the median round. PAGE_ROUNDS=0 skips it. The threads2 rows ping
# an address of B whose flow the data threads carry (a flow's TUN queue is
# a hash of its addresses; B has 8 to choose from), and the report says how
# many of the pings' datagrams each end's threads sent.
#
# Then per row, one row at a time, from A to B (as shipped, busy polling off):
#   TCP    iperf3, STREAMS streams (1), T seconds; Gbit/s received; retransmits
#   UDP    iperf3 -u -b 0 -l 1400, T seconds: datagrams received per second
#          (receiver side) and the loss
#   CPU    utime+stime of the tunnel's processes (ipoibd x2 + ibfabricd;
#          openvpn x2; socat x2) over the TCP test, per GB received
# The rows are measured REPEAT times (default 3), round-robin so that a
# change of load on the machine hits every row alike; the table shows the
# median of each figure and the TCP figure of every run, and the RTT test's
# medians and p99s. Then the ratios of ipoibd to each peer (same MTU; veth
# against 4092), the RTT ratios with their intervals, and the targets of
# issues 8, 21 and 24 (RTT targets on the medians; issue 8's on the
# busy-poll figure, labelled as such).
#
# Memory: a fresh ibfabricd and one ipoibd (198.19.0.1/16 on tba): VmRSS
# idle; then bench_arp_fill (in tbb, a soft port of its own) sends
# NEIGHBOURS ARP requests for 198.19.0.1 from as many sender addresses
# (198.19.1.0 on; with DISTINCT_GIDS=1 each claims a GID of its own, so
# ipoibd also holds as many path entries, failed ones since no such ports
# exist), and a process in tba joins MCAST_GROUPS IPv4 groups on ib0 with
# real sockets (the kernel's IGMPv3 reports reach ipoibd through the TUN);
# `ipoibctl -j stats` / `mcast` confirm both before VmRSS is read again.
#
# Usage (root; ~10 min with REPEAT=3, every row):  bench/tunnel.sh
# Env: BIN=build/bin  T=5  STREAMS=1  RTT_ROUNDS=40  RTT_PINGS=50  PING_INT=0.005  ROWS="..."  REPEAT=3
#      MEMORY=1  NEIGHBOURS=10000  MCAST_GROUPS=1000  DISTINCT_GIDS=1
#      BUSY_POLL=20ms (the busy-poll window of the +bp instances in the RTT
#      test; 0: none, and the RTT targets are judged on the as-shipped figure)
#      RTT=1 (0: no RTT test)
#      BASE_BIN=DIR (a second build's bin directory: base-* rows, and the
#      ratios of ipoibd to it)
#      IPOIBD_CONFIG='[queues]\nreceive-depth = 32' (lines for the
#      configuration of every ipoibd row but base-*: with BASE_BIN=$BIN, a
#      setting against the default on one build)
#      PAGE_ROUNDS=12 (pings for the pages per echo; 0: none)
#      SKIP_INSTALL=1  RESULTS=DIR (keep raw output: runs.tsv, logs, iperf3
#      JSON, ping output, configurations)
# Needs: ipoibd ibfabricd ipoibctl bench_arp_fill bench_floor in BIN
#   (cmake -S . -B build -G Ninja && ninja -C build ipoibd ibfabricd ipoibctl bench_arp_fill bench_floor)
set -u -o pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "${BIN:-$REPO/build/bin}" 2>/dev/null && pwd) || { echo "tunnel.sh: BIN directory not found" >&2; exit 2; }
T=${T:-5}
STREAMS=${STREAMS:-1}   # parallel TCP streams (iperf3 -P)
RTT=${RTT:-1}
RTT_ROUNDS=${RTT_ROUNDS:-40}   # rounds over every instance
RTT_PINGS=${RTT_PINGS:-50}     # pings per instance per round
PING_INT=${PING_INT:-0.005}
PAGE_ROUNDS=${PAGE_ROUNDS:-12}   # single pings per instance for the pages per echo (0: none)
UDP_LEN=1400
LIFE=${LIFE:-180}       # upper bound on the lifetime of any process started here (s)
ALL_ROWS="veth ipoibd-2044 ipoibd-4092 threads2-4092 tap-2044 tap-4092 connected-65520 key-4092 openvpn-2044 openvpn-4092 socat-4092 floor-4092"
ROWS=${ROWS-$ALL_ROWS}   # ROWS="" runs no row (memory only)
BASE_BIN=${BASE_BIN:-}
IPOIBD_CONFIG=${IPOIBD_CONFIG:-}   # lines (printf %b) added to the configuration of every ipoibd row but base-*
if [ -n "$BASE_BIN" ]; then
  BASE_BIN=$(cd "$BASE_BIN" 2>/dev/null && pwd) || { echo "tunnel.sh: BASE_BIN directory not found" >&2; exit 2; }
  # Each base row right after its ipoibd row, so both see the same load.
  ROWS=$(for r in $ROWS; do
           echo "$r"
           case $r in ipoibd-*) echo "base-${r#ipoibd-}" ;; connected-*|threads2-*) echo "base-$r" ;; esac
         done | xargs)
fi
REPEAT=${REPEAT:-3}      # rounds over ROWS, interleaved; the table shows medians
MEMORY=${MEMORY:-1}
NEIGHBOURS=${NEIGHBOURS:-10000}
MCAST_GROUPS=${MCAST_GROUPS:-1000}
DISTINCT_GIDS=${DISTINCT_GIDS:-1}   # 1: every neighbour a GID (and a path) of its own
BUSY_POLL=${BUSY_POLL:-20ms}   # ipoibd's [daemon] busy-poll for the second ping (0: none)
# The window in microseconds, as ipoibctl stats shows it (ipoibd.conf(5):
# an integer with ms or s, or a bare number of seconds; 0 to 1 s).
BP_US=$(awk -v d="$BUSY_POLL" 'BEGIN {
  if (d !~ /^[0-9]+(ms|s)?$/) exit 1
  n = d + 0; printf "%d\n", (d ~ /ms$/) ? n * 1000 : n * 1000000 }') && [ "$BP_US" -le 1000000 ] \
  || { echo "tunnel.sh: BUSY_POLL=$BUSY_POLL: not a busy-poll duration (0 to 1s: 20ms, 1s, 0)" >&2; exit 2; }
NSF=tbfab NSA=tba NSB=tbb
UF=198.18.100.100 UA=198.18.100.1 UB=198.18.100.2
FABRIC=$UF:18516
UL_MTU=9000
LOCK=/run/lock/ipoibd-tunnel-bench.lock
PIDFILE=/run/ipoibd-tunnel-bench.pids   # PIDs of the last run (stale cleanup)
CLK=$(getconf CLK_TCK)

log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "tunnel.sh: $*"; exit 1; }

[ "$(id -u)" = 0 ] || { echo "tunnel.sh: must run as root (network namespaces)" >&2; exit 1; }
for b in ipoibd ibfabricd ipoibctl bench_arp_fill bench_floor; do
  [ -x "$BIN/$b" ] || die "$BIN/$b missing: ninja -C build ipoibd ibfabricd ipoibctl bench_arp_fill bench_floor"
done
case $RTT_ROUNDS$RTT_PINGS$STREAMS in *[!0-9]*) die "RTT_ROUNDS, RTT_PINGS and STREAMS: numbers" ;; esac
[ "$STREAMS" -ge 1 ] && [ "$STREAMS" -le 16 ] || die "STREAMS: 1 to 16"

# ---------------------------------------------------------------- results
if [ -n "${RESULTS:-}" ]; then
  RES=$RESULTS; mkdir -p "$RES"; KEEP=1
else
  RES=$(mktemp -d /tmp/ipoibd-tunnel.XXXXXX); KEEP=0
fi
RAW=$RES/raw
RUN=$(mktemp -d /tmp/tb.XXXXXX)   # configurations and control sockets (short paths)
mkdir -p "$RAW"

# ---------------------------------------------------------------- install
install_deps() {
  local need=()
  command -v iperf3  >/dev/null || need+=(iperf3)
  command -v openvpn >/dev/null || need+=(openvpn)
  command -v socat   >/dev/null || need+=(socat)
  command -v jq      >/dev/null || need+=(jq)
  command -v ping    >/dev/null || need+=(iputils-ping)
  command -v ip      >/dev/null || need+=(iproute2)
  command -v column  >/dev/null || need+=(bsdextrautils)
  command -v python3 >/dev/null || need+=(python3)
  [ ${#need[@]} -eq 0 ] && return 0
  log "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  timeout 600 apt-get -o DPkg::Lock::Timeout=300 update -qq || true
  timeout 900 apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${need[@]}" >&2 \
    || die "apt-get install ${need[*]} failed"
}

# ---------------------------------------------------------------- processes
# Every process runs as `ip netns exec NS timeout -k 3 LIFE CMD`: ip execs
# timeout, so $! is timeout's PID and the command is its only child.
PIDS=()
bg() {  # bg NAME NS CMD...: start CMD in namespace NS, output to $RAW/NAME.log; sets LASTPID
  local name=$1 ns=$2; shift 2
  ip netns exec "$ns" timeout -k 3 "$LIFE" "$@" >"$RAW/$name${TAG:-}.log" 2>&1 &
  LASTPID=$!
  PIDS+=("$LASTPID"); echo "$LASTPID" >>"$PIDFILE"
}
child_of() {  # the command under a timeout wrapper (waits up to 2 s for the fork)
  local i c
  for i in $(seq 20); do
    c=$(awk '{print $1}' "/proc/$1/task/$1/children" 2>/dev/null)
    [ -n "$c" ] && { echo "$c"; return 0; }
    sleep 0.1
  done
  return 1
}
forget_pid() {  # reaped: its PID may be another process's now
  local keep=() q
  for q in "${PIDS[@]:-}"; do [ -n "$q" ] && [ "$q" != "$1" ] && keep+=("$q"); done
  PIDS=("${keep[@]:-}")
}
stop_pid() {  # stop one wrapper we started, and its command; reap it
  local p=$1 c i
  kill -0 "$p" 2>/dev/null || { wait "$p" 2>/dev/null; forget_pid "$p"; return 0; }
  c=$(awk '{print $1}' "/proc/$p/task/$p/children" 2>/dev/null)
  kill -TERM "$p" 2>/dev/null
  for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$p" 2>/dev/null; then
    [ -n "$c" ] && kill -KILL "$c" 2>/dev/null
    kill -KILL "$p" 2>/dev/null
  fi
  wait "$p" 2>/dev/null
  forget_pid "$p"
  return 0
}
stop_all() {
  local p
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && stop_pid "$p"; done
  PIDS=()
}
kill_ns_pids() {  # whatever still lives in our own namespaces (only what we started can be there)
  local ns p
  for ns in $NSF $NSA $NSB; do
    ip netns list 2>/dev/null | grep -qw "^$ns" || continue
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$p" 2>/dev/null; done
    sleep 0.5
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  done
}
cleanup() {
  stop_all
  kill_ns_pids
  local ns
  for ns in $NSF $NSA $NSB; do ip netns del "$ns" 2>/dev/null; done
  rm -f "$PIDFILE"
  rm -rf "$RUN"
  [ "${KEEP:-1}" = 1 ] || rm -rf "$RES"
}
stale_cleanup() {  # a previous run that crashed: its wrappers (by their exact command line), its namespaces
  if [ -f "$PIDFILE" ]; then
    local p
    while read -r p; do
      [ -n "$p" ] && [ -r "/proc/$p/cmdline" ] || continue
      tr '\0' ' ' <"/proc/$p/cmdline" | grep -q "^timeout -k 3 [0-9]* " && kill -TERM "$p" 2>/dev/null
    done <"$PIDFILE"
  fi
  kill_ns_pids
  local ns
  for ns in $NSF $NSA $NSB; do ip netns del "$ns" 2>/dev/null; done
  : >"$PIDFILE"
}

# ---------------------------------------------------------------- underlay
setup_underlay() {
  local ns h
  for ns in $NSF $NSA $NSB; do ip netns add "$ns" || die "ip netns add $ns"; ip -n "$ns" link set lo up; done
  ip -n $NSF link add br0 type bridge
  ip -n $NSF link set br0 mtu $UL_MTU
  ip -n $NSF addr add $UF/24 dev br0
  ip -n $NSF link set br0 up
  for h in a b; do
    ip link add "tbu$h" netns "tb$h" mtu $UL_MTU type veth peer name "tbp$h" netns $NSF mtu $UL_MTU
    ip -n $NSF link set "tbp$h" master br0 up
    ip -n "tb$h" link set "tbu$h" up
  done
  ip -n $NSA addr add $UA/24 dev tbua
  ip -n $NSB addr add $UB/24 dev tbub
  ip netns exec $NSA ping -n -c 1 -W 2 $UB >/dev/null 2>&1 || die "underlay: $UA cannot reach $UB"
}

# ---------------------------------------------------------------- measurement
ticks() {  # utime+stime (clock ticks) of the given PIDs, all threads
  local s=0 p v
  for p in "$@"; do
    v=$(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null | awk '{print $12 + $13}')
    s=$((s + ${v:-0}))
  done
  echo "$s"
}
wait_up() {  # wait_up ADDR: until ADDR answers a ping from A (<= 15 s)
  local i
  for i in $(seq 30); do
    ip netns exec $NSA ping -n -c 1 -W 0.5 "$1" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  return 1
}
bigping() {  # bigping ADDR MTU: "ok" when a DF ping filling MTU crosses
  ip netns exec $NSA timeout 10 ping -n -c 2 -i 0.2 -W 2 -M do -s $(($2 - 28)) "$1" >/dev/null 2>&1 && echo ok || echo FAIL
}

# measure ROW ADDR MTU NOTE PIDS...: one line of $RES/runs.tsv
#   row mtu tcp_gbps retr udp_rx_kpps udp_loss rtt_p50_us rtt_p99_us
#   bp_rtt_p50_us bp_rtt_p99_us cpu_s_per_gb note
# (the RTT columns are "-" here: the RTT test fills them in, see rtt_test)
measure() {
  local row=$1 addr=$2 mtu=$3 note=$4; shift 4
  local pids=("$@") r=$RAW/$row${TAG:-}
  local tcp=- retr=- kpps=- loss=- cpugb=-
  if ! wait_up "$addr"; then
    log "$row: no connectivity to $addr"
    printf '%s\t%s\tFAIL\t-\t-\t-\t-\t-\t-\t-\t-\t%s\n' "$row" "$mtu" "no connectivity; $note" >>"$RES/runs.tsv"
    return 1
  fi
  note="$note; DF ping at MTU $(bigping "$addr" "$mtu")"
  bg "$row.iperf3-server" $NSB iperf3 -s -B "$addr"
  local srv=$LASTPID
  sleep 0.5
  # 1) TCP, one stream; CPU of the tunnel processes over the test
  local t0 t1
  t0=$(ticks "${pids[@]}")
  ip netns exec $NSA timeout $((T + 20)) iperf3 -c "$addr" -t "$T" -P "$STREAMS" -J >"$r.tcp.json" 2>"$r.tcp.err"
  t1=$(ticks "${pids[@]}")
  if jq -e '.end.sum_received.bytes' "$r.tcp.json" >/dev/null 2>&1; then
    tcp=$(jq -r '.end.sum_received.bits_per_second / 1e9 | . * 100 | round / 100' "$r.tcp.json")
    retr=$(jq -r '.end.sum_sent.retransmits // "-"' "$r.tcp.json")
    if [ ${#pids[@]} -gt 0 ]; then
      cpugb=$(awk -v a="$t0" -v b="$t1" -v k="$CLK" -v n="$(jq -r '.end.sum_received.bytes' "$r.tcp.json")" \
        'BEGIN { if (n > 0) printf "%.2f", (b - a) / k / (n / 1e9); else print "-" }')
    fi
  else
    tcp=ERR; note="$note; tcp: $(jq -r '.error // empty' "$r.tcp.json" 2>/dev/null | head -c 60)"
  fi
  # 2) UDP, 1400-byte datagrams as fast as iperf3 sends them; receiver's rate
  ip netns exec $NSA timeout $((T + 20)) iperf3 -c "$addr" -u -b 0 -l $UDP_LEN -t "$T" -J >"$r.udp.json" 2>"$r.udp.err"
  if jq -e '.end.sum_received.bytes' "$r.udp.json" >/dev/null 2>&1; then
    kpps=$(jq -r --argjson l $UDP_LEN '.end.sum_received.bytes / $l / .end.sum_received.seconds / 1000 | . * 10 | round / 10' "$r.udp.json")
    loss=$(jq -r '.end.sum_received.lost_percent // .end.sum.lost_percent | . * 10 | round / 10' "$r.udp.json")
  else
    kpps=ERR; note="$note; udp: $(jq -r '.error // empty' "$r.udp.json" 2>/dev/null | head -c 60)"
  fi
  stop_pid "$srv"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
    "$row" "$mtu" "$tcp" "$retr" "$kpps" "$loss" - - - - "$cpugb" "$note" >>"$RES/runs.tsv"
  log "$row${TAG:-}: TCP ${tcp} Gbit/s, UDP ${kpps} kpps received (loss ${loss}%), CPU ${cpugb} s/GB"
}

# ---------------------------------------------------------------- ipoibd helpers
GUID_A=0x0002c90300c00001 GUID_B=0x0002c90300c00002
write_ipoibd_config() {  # FILE GUID CIDR MTU SOCKET BUSY_POLL FABRIC [extra lines]
  {
    echo "[fabric]"; echo "transport = soft"; echo "address = $7"; echo "port-guid = $2"
    [ -z "${ROW_KEY:-}" ] || echo "key-file = $ROW_KEY"
    echo "[interface]"; echo "address = $3"; echo "mtu = $4"
    local extra; for extra in ${ROW_MORE_ADDRS:-}; do echo "address = $extra"; done
    [ -z "${ROW_CONNECTED:-}" ] || echo "connected-mode = yes"
    [ -z "${ROW_TAP:-}" ] || echo "mode = tap"
    echo "[daemon]"; echo "control-socket = $5"; echo "log-level = warning"; echo "busy-poll = $6"
    [ -z "${ROW_THREADS:-}" ] || echo "data-threads = $ROW_THREADS"
    [ -z "${ROW_EXTRA:-}" ] || printf '%b\n' "$ROW_EXTRA"
    [ $# -gt 7 ] && printf '%s\n' "${@:8}"
  } >"$1"
}
ctl() {  # NS SOCKET ARGS...
  local ns=$1 sock=$2; shift 2
  ip netns exec "$ns" timeout 10 "${ROW_BIN:-$BIN}/ipoibctl" -s "$sock" "$@"
}
wait_link_up() {  # NS SOCKET SECONDS
  local deadline=$((SECONDS + $3))
  until ctl "$1" "$2" -j status 2>/dev/null | grep -q '"link":"up"'; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}
start_fabric() {  # NAME LISTEN [ibfabricd args]
  local name=$1 listen=$2; shift 2
  bg "$name" $NSF "${ROW_BIN:-$BIN}/ibfabricd" --listen "$listen" -q "$@"
  FAB_WRAP=$LASTPID
  FAB_PID=$(child_of "$FAB_WRAP") || die "$name: ibfabricd did not start"
}

# ---------------------------------------------------------------- instances
# An instance is one tunnel up between A and B. up_* start one and set
#   UP_ADDR (B's tunnel address, what A pings), UP_MTU (A's device MTU),
#   UP_WRAPS (the wrappers to stop), UP_PIDS (the tunnel's processes, for
#   CPU), UP_ENDS (A's and B's tunnel process, for the pages per echo),
#   UP_NOTE; they return non-zero when it did not come up.
# Their parameters place an instance: K, its number (devices, ports and
# addresses of its own, so that all can be up at once for the RTT test:
# 198.18.(10+K).0/24 for ipoibd, 198.19.(100+K).0/24 for the others; K=0
# for the throughput rows: ib0, 198.18.0.0/24, the usual ports) and BP,
# the busy-poll window of ipoibd's [daemon] busy-poll (0 or BUSY_POLL).

up_veth() { UP_ADDR=$UB UP_MTU=$UL_MTU UP_WRAPS=() UP_PIDS=() UP_ENDS= UP_NOTE="kernel only (veth, bridge, veth); no tunnel process"; }

up_ipoibd() {  # up_ipoibd NAME MTU BIN KEY K BP
  local name=$1 mtu=$2 bin=$3 key=$4 k=$5 bp=$6 fabargs=(--mtu 4096)
  local ROW_BIN=$bin ROW_KEY="" ROW_EXTRA=$IPOIBD_CONFIG dev=ib0 net=198.18.0 port=18516
  case $name in base-*) ROW_EXTRA= ;; esac   # the build before, as it ships
  [ "$k" = 0 ] || { dev=tbi$k net=198.18.$((10 + k)) port=$((18516 + k)); }
  local fabric=$UF:$port tag=$name${TAG:-}
  UP_WRAPS=() UP_PIDS=() UP_ENDS= UP_ADDR=$net.2 UP_MTU=- UP_NOTE="ipoibd x2 + ibfabricd"
  if [ -n "$key" ]; then
    ROW_KEY=$RUN/fabric.key
    (umask 077; printf '%064x\n' 42 >"$ROW_KEY")
    fabargs+=(--fabric-key "$ROW_KEY")
  fi
  if [ "$mtu" -gt 2044 ]; then
    # The broadcast group's MTU is the partition's (OpenSM's default 2048):
    # a 4096-byte group gives the 4092-byte interface MTU.
    echo "Default=0x7fff, ipoib, mtu=5 : ALL=full ;" >"$RUN/partitions-4096.conf"
    cp "$RUN/partitions-4096.conf" "$RAW/"
    fabargs+=(--partitions "$RUN/partitions-4096.conf")
  fi
  start_fabric "$name.ibfabricd" "$fabric" "${fabargs[@]}"
  UP_WRAPS+=("$FAB_WRAP"); UP_PIDS+=("$FAB_PID")
  local sa=$RUN/$k.a.sock sb=$RUN/$k.b.sock
  write_ipoibd_config "$RUN/$name-a.conf" $GUID_A "$net.1/24" "$mtu" "$sa" "$bp" "$fabric"
  # Data threads in the RTT test: more addresses on B, for a destination
  # whose flow hashes to the threads' queues (rtt_thread_path).
  local more="" i
  if [ "${ROW_THREADS:-1}" -gt 1 ] && [ "$k" != 0 ]; then
    for i in 3 4 5 6 7 8 9; do more="$more $net.$i/24"; done
  fi
  UP_CANDS="$net.2 $(sed 's|/24||g' <<<"$more")"
  ROW_MORE_ADDRS=$more write_ipoibd_config "$RUN/$name-b.conf" $GUID_B "$net.2/24" "$mtu" "$sb" "$bp" "$fabric"
  cp "$RUN/$name-a.conf" "$RUN/$name-b.conf" "$RAW/"
  bg "$name.ipoibd-a" $NSA "$bin/ipoibd" -i "$dev" -c "$RUN/$name-a.conf" --log-target stderr; local wa=$LASTPID
  bg "$name.ipoibd-b" $NSB "$bin/ipoibd" -i "$dev" -c "$RUN/$name-b.conf" --log-target stderr; local wb=$LASTPID
  UP_WRAPS+=("$wa" "$wb")
  local pa pb
  pa=$(child_of $wa); pb=$(child_of $wb)
  UP_PIDS+=($pa $pb) UP_ENDS="$pa $pb"
  UP_SOCK_A=$sa UP_SOCK_B=$sb
  if ! wait_link_up $NSA "$sa" 20 || ! wait_link_up $NSB "$sb" 20; then
    log "$name: link not up after 20 s"
    UP_NOTE="link not up"
    return 1
  fi
  UP_MTU=$(ip -n $NSA -j link show "$dev" | jq -r '.[0].mtu')
  ctl $NSA "$sa" -j status >"$RAW/$tag.status-a.json" 2>&1
  [ "$UP_MTU" = "$mtu" ] || UP_NOTE="$UP_NOTE; WARNING: $dev MTU $UP_MTU, not $mtu"
  [ "$bp" = 0 ] && UP_NOTE="$UP_NOTE; busy polling off (as shipped)" || UP_NOTE="$UP_NOTE; busy-poll = $bp"
}

up_openvpn() {  # up_openvpn NAME MTU K
  local name=$1 mtu=$2 k=$3 dev=tbovp port=1194 net=198.19.1
  [ "$k" = 0 ] || { dev=tbov$k port=$((1194 + k)) net=198.19.$((100 + k)); }
  local common=(--dev-type tun --proto udp --lport $port --rport $port --cipher none --auth none
                --tun-mtu "$mtu" --mssfix 0 --disable-dco --verb 3)
  bg "$name.a" $NSA openvpn --dev "${dev}a" --local $UA --remote $UB --ifconfig $net.1 $net.2 "${common[@]}"
  local wa=$LASTPID
  bg "$name.b" $NSB openvpn --dev "${dev}b" --local $UB --remote $UA --ifconfig $net.2 $net.1 "${common[@]}"
  local wb=$LASTPID
  UP_WRAPS=("$wa" "$wb") UP_ADDR=$net.2 UP_MTU=$mtu
  UP_NOTE="no crypto (--cipher none --auth none), mssfix 0; openvpn x2"
  local pa pb i
  pa=$(child_of $wa); pb=$(child_of $wb)
  UP_PIDS=($pa $pb) UP_ENDS="$pa $pb"
  for i in $(seq 100); do
    grep -q 'Initialization Sequence Completed' "$RAW/$name.a${TAG:-}.log" 2>/dev/null && break; sleep 0.1; done
}

up_socat() {  # up_socat NAME MTU K
  local name=$1 mtu=$2 k=$3 dev=tbsoc port=5555 net=198.19.3
  [ "$k" = 0 ] || { dev=tbso$k port=$((5555 + k)) net=198.19.$((100 + k)); }
  # UDP-DATAGRAM (unconnected): an early ICMP port unreachable does not end socat.
  bg "$name.a" $NSA socat -b 65536 TUN:$net.1/24,tun-type=tun,tun-name=${dev}a,iff-no-pi,iff-up \
    UDP-DATAGRAM:$UB:$port,bind=$UA:$port
  local wa=$LASTPID
  bg "$name.b" $NSB socat -b 65536 TUN:$net.2/24,tun-type=tun,tun-name=${dev}b,iff-no-pi,iff-up \
    UDP-DATAGRAM:$UA:$port,bind=$UB:$port
  local wb=$LASTPID
  UP_WRAPS=("$wa" "$wb") UP_ADDR=$net.2 UP_MTU=$mtu UP_NOTE="one-thread TUN <-> UDP copy; socat x2"
  local pa pb i
  pa=$(child_of $wa); pb=$(child_of $wb)
  UP_PIDS=($pa $pb) UP_ENDS="$pa $pb"
  for i in $(seq 50); do
    ip -n $NSA link show ${dev}a >/dev/null 2>&1 && ip -n $NSB link show ${dev}b >/dev/null 2>&1 && break; sleep 0.1; done
  ip -n $NSA link set ${dev}a mtu "$mtu"; ip -n $NSB link set ${dev}b mtu "$mtu"
}

up_floor() {  # up_floor NAME MTU K BP
  local name=$1 mtu=$2 k=$3 bp=$4 dev=tbflr port=5655 net=198.19.5 us=0
  [ "$k" = 0 ] || { dev=tbfl$k port=$((5655 + k)) net=198.19.$((100 + k)); }
  [ "$bp" = 0 ] || us=$BP_US
  bg "$name.a" $NSA "$BIN/bench_floor" --tun $dev --local $UA:$port --remote $UB:$port --busy-poll $us
  local wa=$LASTPID
  bg "$name.b" $NSB "$BIN/bench_floor" --tun $dev --local $UB:$port --remote $UA:$port --busy-poll $us
  local wb=$LASTPID
  UP_WRAPS=("$wa" "$wb") UP_ADDR=$net.2 UP_MTU=$mtu
  UP_NOTE="bench_floor x2: one thread, TUN <-> connected UDP socket, no protocol"
  [ "$bp" = 0 ] && UP_NOTE="$UP_NOTE; sleeping" || UP_NOTE="$UP_NOTE; busy polling $bp after traffic"
  local pa pb i h ns
  pa=$(child_of $wa); pb=$(child_of $wb)
  UP_PIDS=($pa $pb) UP_ENDS="$pa $pb"
  for h in a b; do
    ns=$NSA; [ $h = b ] && ns=$NSB
    for i in $(seq 50); do ip -n $ns link show $dev >/dev/null 2>&1 && break; sleep 0.1; done
    ip -n $ns link set $dev mtu "$mtu" up
  done
  ip -n $NSA addr add $net.1/24 dev $dev
  ip -n $NSB addr add $net.2/24 dev $dev
}

# up ROW K BP: the instance of ROW (a name of ALL_ROWS or base-*)
up() {
  local row=$1 k=$2 bp=$3 name=$1
  [ "$bp" = 0 ] || name=$row+bp
  case $row in
    veth)            up_veth ;;
    ipoibd-*)        ROW_THREADS=1 up_ipoibd "$name" "${row#ipoibd-}" "$BIN" "" "$k" "$bp" ;;
    threads2-*)      ROW_THREADS=2 up_ipoibd "$name" "${row#threads2-}" "$BIN" "" "$k" "$bp" ;;
    base-connected-*) ROW_THREADS=1 ROW_CONNECTED=1 up_ipoibd "$name" "${row#base-connected-}" "$BASE_BIN" "" "$k" "$bp" ;;
    base-threads2-*) ROW_THREADS=2 up_ipoibd "$name" "${row#base-threads2-}" "$BASE_BIN" "" "$k" "$bp" ;;
    base-*)          ROW_THREADS=1 up_ipoibd "$name" "${row#base-}" "$BASE_BIN" "" "$k" "$bp" ;;
    key-*)           ROW_THREADS=1 up_ipoibd "$name" "${row#key-}" "$BIN" key "$k" "$bp" ;;
    connected-*)     ROW_THREADS=1 ROW_CONNECTED=1 up_ipoibd "$name" "${row#connected-}" "$BIN" "" "$k" "$bp" ;;
    tap-*)           ROW_THREADS=1 ROW_TAP=1 up_ipoibd "$name" "${row#tap-}" "$BIN" "" "$k" "$bp" ;;
    openvpn-*)       up_openvpn "$name" "${row#openvpn-}" "$k" ;;
    socat-*)         up_socat "$name" "${row#socat-}" "$k" ;;
    floor-*)         up_floor "$name" "${row#floor-}" "$k" "$bp" ;;
    *) log "unknown row $row (rows: $ALL_ROWS)"; UP_WRAPS=(); return 1 ;;
  esac
}
# Rows with a busy-polling instance in the RTT test.
polls() { case $1 in ipoibd-*|threads2-*|base-*|key-*|connected-*|tap-*|floor-*) return 0 ;; esac; return 1; }

# A throughput row: its instance up, measured, stopped.
run_row() {
  local row=$1 w
  if up "$row" 0 0; then
    measure "$row" "$UP_ADDR" "$UP_MTU" "$UP_NOTE" "${UP_PIDS[@]}"
  else
    printf '%s\t%s\tFAIL\t-\t-\t-\t-\t-\t-\t-\t-\t%s\n' "$row" - "$UP_NOTE" >>"$RES/runs.tsv"
  fi
  case $row in ipoibd-*|threads2-*|base-*|key-*|connected-*|tap-*)
    [ -z "${UP_SOCK_A:-}" ] || ctl $NSA "$UP_SOCK_A" -j stats >"$RAW/$row${TAG:-}.stats-a.json" 2>&1
    [ -z "${UP_SOCK_B:-}" ] || ctl $NSB "$UP_SOCK_B" -j stats >"$RAW/$row${TAG:-}.stats-b.json" 2>&1
    UP_SOCK_A="" UP_SOCK_B="" ;;
  esac
  for w in "${UP_WRAPS[@]:-}"; do [ -n "$w" ] && stop_pid "$w"; done
}

# ---------------------------------------------------------------- RTT
# rtt_test: every row up at once (and its +bp instance), RTT_ROUNDS rounds
# of RTT_PINGS pings per instance; $RES/rtt.tsv: round, instance, RTT (ms)
# of every echo; $RES/rtt-lost.tsv: round, instance, pings unanswered.
rtt_test() {
  local names=() addrs=() ends=() socks=() wraps=() k=0 row bp name i rep order
  # Every instance lives through all rounds (each ping batch, its gap and
  # the start of ping, twice as many instances as rows at most).
  local LIFE
  LIFE=$(awk -v r="$RTT_ROUNDS" -v p="$RTT_PINGS" -v i="$PING_INT" -v g="$BP_US" -v n="$(wc -w <<<"$ROWS")" -v q="$PAGE_ROUNDS" \
    'BEGIN { printf "%d\n", 120 + 2 * n * r * (p * i + g / 1e6 + 0.3) * 1.5 + n * q * 0.5 }')
  for row in $ROWS; do
    for bp in 0 $([ "$BP_US" != 0 ] && polls "$row" && echo "$BUSY_POLL"); do
      k=$((k + 1))
      name=$row; [ "$bp" = 0 ] || name=$row+bp
      TAG=.rtt
      UP_SOCK_A="" UP_SOCK_B=""
      if up "$row" "$k" "$bp" && wait_up "$UP_ADDR"; then
        case $row in *threads2-*) rtt_thread_path "$name" ;; esac
        names+=("$name"); addrs+=("$UP_ADDR")
        ends+=("$UP_ENDS"); socks+=("${UP_SOCK_A:-} ${UP_SOCK_B:-}")
        log "rtt: $name up ($UP_ADDR)"
      else
        log "rtt: $name did not come up; left out"
      fi
      wraps+=("${UP_WRAPS[@]:-}")
    done
  done
  TAG=
  : >"$RES/rtt.tsv"; : >"$RES/rtt-lost.tsv"
  local n=${#names[@]} out=$RUN/ping.out got
  for rep in $(seq "$RTT_ROUNDS"); do
    order=$(seq 0 $((n - 1)))
    [ $((rep % 2)) = 0 ] && order=$(seq $((n - 1)) -1 0)
    for i in $order; do
      # A gap: a busy-polling instance pinged last stops polling first.
      sleep $(awk -v us="$BP_US" 'BEGIN { printf "%.3f", us / 1e6 + 0.01 }')
      ip netns exec $NSA timeout 60 ping -n -c "$RTT_PINGS" -i "$PING_INT" -W 1 "${addrs[$i]}" >"$out" 2>&1
      got=$(grep -o 'time=[0-9.]*' "$out" | cut -d= -f2 | awk -v r="$rep" -v nm="${names[$i]}" '{ print r "\t" nm "\t" $1 } END { print NR > "/dev/stderr" }' 2>&1 >>"$RES/rtt.tsv")
      [ "${got:-0}" = "$RTT_PINGS" ] || printf '%s\t%s\t%s\n' "$rep" "${names[$i]}" $((RTT_PINGS - ${got:-0})) >>"$RES/rtt-lost.tsv"
    done
    [ $((rep % 10)) = 0 ] && log "rtt: round $rep of $RTT_ROUNDS"
  done
  # Which path the pings of a data-thread instance took: the kernel hashes a
  # flow to a queue (the addresses decide), the loop's or a thread's.
  : >"$RES/rtt-threads.tsv"
  local sa sb
  for i in "${!names[@]}"; do
    case ${names[$i]} in *threads2-*) ;; *) continue ;; esac
    read -r sa sb <<<"${socks[$i]}"
    [ -n "$sa" ] && [ -n "$sb" ] || continue
    printf '%s\t%s\t%s\t%s\n' "${names[$i]}" "$(stat_field $NSA "$sa" data_threads fast_path)" \
      "$(stat_field $NSB "$sb" data_threads fast_path)" $((RTT_ROUNDS * RTT_PINGS)) >>"$RES/rtt-threads.tsv"
  done
  UP_SOCK_A="" UP_SOCK_B=""
  [ "$PAGE_ROUNDS" = 0 ] || rtt_pages
  for i in "${wraps[@]:-}"; do [ -n "$i" ] && stop_pid "$i"; done
  rtt_analyse
}

# rtt_thread_path NAME (in rtt_test, after a threads2 instance came up):
# the kernel hashes a flow to a TUN queue by its addresses, so a ping takes
# a data thread's path or the event loop's, whole, by the luck of the
# instance's addresses. Pings each of B's addresses (UP_CANDS) and sets
# UP_ADDR to the first whose echoes A's data threads carried, so that
# every threads2 instance (new build and base) measures the threads' path.
rtt_thread_path() {
  local cand f0 f1
  [ -n "${UP_SOCK_A:-}" ] || return 0
  for cand in $UP_CANDS; do
    f0=$(stat_field $NSA "$UP_SOCK_A" data_threads fast_path)
    ip netns exec $NSA timeout 10 ping -n -c 5 -i 0.05 -W 1 "$cand" >/dev/null 2>&1
    f1=$(stat_field $NSA "$UP_SOCK_A" data_threads fast_path)
    if [ $((f1 - f0)) -ge 3 ]; then
      UP_ADDR=$cand
      return 0
    fi
  done
  log "rtt: $1: no address of B whose pings the data threads carry; its pings take the event loop's path"
}

# pages_referenced PID: 4 KiB pages of PID's own memory referenced since
# its clear_refs: its program's mappings, heap, stacks and anonymous maps.
# Shared libraries are left out: their page cache is shared with every
# process, and smaps counts a whole large folio as referenced when any
# process touched it. Output: "PROGRAM OTHER".
pages_referenced() {
  local exe
  exe=$(readlink "/proc/$1/exe" 2>/dev/null); exe=${exe% (deleted)}   # rebuilt meanwhile: smaps shows the bare path
  awk -v exe="$exe" '
    /^[0-9a-f]+-[0-9a-f]+ / { kind = (NF < 6 || $6 == "[heap]" || $6 == "[stack]") ? "other" : ($6 == exe ? "program" : ""); next }
    kind != "" && $1 == "Referenced:" { kb[kind] += $2 }
    END { printf "%d %d\n", kb["program"] / 4, kb["other"] / 4 }' "/proc/$1/smaps" 2>/dev/null
}

# rtt_pages (in rtt_test, every instance up): for each instance as shipped
# with both ends known, PAGE_ROUNDS single pings, each after 0.2 s quiet
# with the ends' referenced bits cleared (/proc/PID/clear_refs) before it;
# the median round by pages of both ends (a heartbeat or timer adds pages
# to some rounds, and a few come out lighter). $RES/rtt-pages.tsv: instance, pages of both
# ends, A's program, A's other, B's program, B's other.
rtt_pages() {
  : >"$RES/rtt-pages.tsv"
  local i rep p pa pb a b ok rounds
  for i in "${!names[@]}"; do
    case ${names[$i]} in *+bp) continue ;; esac
    read -r pa pb <<<"${ends[$i]}"
    [ -n "$pb" ] || continue
    rounds=
    for rep in $(seq "$PAGE_ROUNDS"); do
      sleep 0.2
      ok=1
      for p in $pa $pb; do echo 1 2>/dev/null >"/proc/$p/clear_refs" || ok=0; done
      [ $ok = 1 ] || break
      ip netns exec $NSA ping -n -c 1 -W 1 "${addrs[$i]}" >/dev/null 2>&1 || continue
      a=$(pages_referenced $pa); b=$(pages_referenced $pb)
      [ -n "$a" ] && [ -n "$b" ] || continue
      rounds+="$a $b"$'\n'
    done
    [ -n "$rounds" ] || continue
    printf '%s' "$rounds" | awk -v name="${names[$i]}" '
      NF == 4 { n++; sum[n] = $1 + $2 + $3 + $4; line[n] = $1 "\t" $2 "\t" $3 "\t" $4 }
      END {
        for (x = 1; x <= n; x++) { rank = 0; for (y = 1; y <= n; y++) rank += (sum[y] < sum[x] || (sum[y] == sum[x] && y < x)); if (rank == int((n - 1) / 2)) m = x }
        printf "%s\t%d\t%s\n", name, sum[m], line[m]
      }' >>"$RES/rtt-pages.tsv"
  done
}

# rtt_analyse: $RES/rtt-summary.tsv (instance, samples, p50, p99, mean; us)
# and $RES/rtt-ratios.tsv (A, B, ratio of the medians, 95% interval low,
# high; ratio of the p99s) for the pairs compared.
rtt_analyse() {
  python3 - "$RES/rtt.tsv" "$RES/rtt-summary.tsv" "$RES/rtt-ratios.tsv" <<'PY'
import random, sys
src, summ, rat = sys.argv[1:4]
by = {}      # instance -> round -> [rtt us]
for line in open(src):
    r, name, ms = line.rstrip("\n").split("\t")
    by.setdefault(name, {}).setdefault(int(r), []).append(float(ms) * 1000)
def q(xs, p):
    xs = sorted(xs)
    if not xs: return float("nan")
    i = min(len(xs) - 1, max(0, int(p * len(xs) + 0.999999) - 1))
    return xs[i]
def pooled(name, rounds):
    out = []
    for r in rounds: out.extend(by[name].get(r, []))
    return out
with open(summ, "w") as f:
    for name, rs in by.items():
        xs = pooled(name, rs.keys())
        f.write("%s\t%d\t%.0f\t%.0f\t%.0f\n" % (name, len(xs), q(xs, 0.5), q(xs, 0.99), sum(xs) / len(xs)))
names = set(by)
pairs = []
def add(a, b):
    for bp in ("", "+bp"):
        if a + bp in names and b + bp in names: pairs.append((a + bp, b + bp))
for m in ("2044", "4092"):
    for peer in ("openvpn-", "socat-"):
        add("ipoibd-" + m, peer + m)
        if "ipoibd-%s+bp" % m in names and peer + m in names: pairs.append(("ipoibd-%s+bp" % m, peer + m))
    add("ipoibd-" + m, "floor-4092")
    add("ipoibd-" + m, "base-" + m)
    add("tap-" + m, "ipoibd-" + m)
    add("key-" + m, "ipoibd-" + m)
add("connected-65520", "ipoibd-4092")
add("connected-65520", "base-connected-65520")
add("threads2-4092", "ipoibd-4092")
add("threads2-4092", "base-threads2-4092")
add("floor-4092", "openvpn-4092")
if "floor-4092+bp" in names and "openvpn-4092" in names: pairs.append(("floor-4092+bp", "openvpn-4092"))
rng = random.Random(1)
B = 1000
with open(rat, "w") as f:
    for a, b in pairs:
        rounds = sorted(set(by[a]) & set(by[b]))
        if not rounds: continue
        pa, pb = pooled(a, rounds), pooled(b, rounds)
        point = q(pa, 0.5) / q(pb, 0.5)
        p99 = q(pa, 0.99) / q(pb, 0.99)
        boot = []
        for _ in range(B):
            pick = [rng.choice(rounds) for _ in rounds]
            boot.append(q(pooled(a, pick), 0.5) / q(pooled(b, pick), 0.5))
        boot.sort()
        f.write("%s\t%s\t%.3f\t%.3f\t%.3f\t%.3f\n" % (a, b, point, boot[int(0.025 * B)], boot[int(0.975 * B) - 1], p99))
PY
}

# ---------------------------------------------------------------- memory
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null; }
hwm_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status" 2>/dev/null; }
mib() { awk -v k="$1" 'BEGIN { if (k == "") print "-"; else printf "%.1f", k / 1024 }'; }
stat_field() {  # NS SOCKET SECTION KEY
  ctl "$1" "$2" -j stats 2>/dev/null | jq -r --arg s "$3" --arg k "$4" '.[$s][$k] // 0'
}

memory() {
  local sock=$RUN/m.sock conf=$RUN/memory.conf
  start_fabric memory.ibfabricd "$FABRIC"
  write_ipoibd_config "$conf" $GUID_A 198.19.0.1/16 2044 "$sock" 0 "$FABRIC"
  cp "$conf" "$RAW/"
  bg memory.ipoibd $NSA "$BIN/ipoibd" -i ib0 -c "$conf" --log-target stderr
  local w=$LASTPID p
  p=$(child_of $w) || { log "memory: ipoibd did not start"; return 1; }
  wait_link_up $NSA "$sock" 20 || { log "memory: link not up"; stop_pid $w; stop_pid $FAB_WRAP; return 1; }
  sleep 3   # joins, DAD and the first announcements done
  MEM_IDLE=$(rss_kib "$p")
  ctl $NSA "$sock" -j stats >"$RAW/memory.stats-idle.json" 2>&1
  local base_groups; base_groups=$(stat_field $NSA "$sock" multicast groups)
  log "memory: idle VmRSS $(mib "$MEM_IDLE") MiB; $base_groups groups of its own"

  # NEIGHBOURS requesters.
  local status lid qpn
  status=$(ctl $NSA "$sock" -j status)
  lid=$(jq -r .lid <<<"$status"); qpn=$(jq -r .qpn <<<"$status")
  ip netns exec $NSB timeout 120 "$BIN/bench_arp_fill" --fabric "$FABRIC" --dlid "$lid" --dqpn "$qpn" \
    --target 198.19.0.1 --first 198.19.1.0 --count "$NEIGHBOURS" --distinct-gids "$DISTINCT_GIDS" \
    >"$RAW/memory.arp_fill.log" 2>&1 \
    || log "memory: bench_arp_fill: $(tail -n 1 "$RAW/memory.arp_fill.log")"

  # MCAST_GROUPS groups joined by sockets on ib0.
  ip netns exec $NSA sysctl -qw net.ipv4.igmp_max_memberships=$((MCAST_GROUPS + 64))
  cat >"$RUN/joiner.py" <<'PY'
import os, socket, struct, sys, time
n, stop = int(sys.argv[1]), sys.argv[2]
idx = socket.if_nametoindex("ib0")
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(n):
    group = socket.inet_aton("239.2.%d.%d" % (i // 250, 1 + i % 250))   # 239.2.0.1 ...
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, group + struct.pack("=4xi", idx))  # struct ip_mreqn
print("joined", n, flush=True)
end = time.time() + 150
while time.time() < end and not os.path.exists(stop):
    time.sleep(0.2)
PY
  bg memory.joiner $NSA python3 "$RUN/joiner.py" "$MCAST_GROUPS" "$RUN/joiner.stop"
  local wj=$LASTPID
  local deadline=$((SECONDS + 40)) joined=0 groups=0 neigh=0
  while [ $SECONDS -lt $deadline ]; do
    neigh=$(stat_field $NSA "$sock" neighbour entries)
    joined=$(ctl $NSA "$sock" -j mcast 2>/dev/null | jq '[.[] | select(.state == "JOINED")] | length')
    [ "${joined:-0}" -ge $((MCAST_GROUPS + base_groups)) ] && break
    sleep 1
  done
  groups=$(stat_field $NSA "$sock" multicast groups)
  neigh=$(stat_field $NSA "$sock" neighbour entries)
  MEM_PATHS=$(stat_field $NSA "$sock" path entries)
  ctl $NSA "$sock" -j stats >"$RAW/memory.stats-full.json" 2>&1
  sleep 1
  MEM_FULL=$(rss_kib "$p"); MEM_HWM=$(hwm_kib "$p")
  MEM_NEIGH=$neigh; MEM_GROUPS=$groups; MEM_JOINED=$joined; MEM_BASE=$base_groups
  log "memory: $neigh neighbours, $groups groups ($joined JOINED): VmRSS $(mib "$MEM_FULL") MiB, VmHWM $(mib "$MEM_HWM") MiB"
  touch "$RUN/joiner.stop"
  stop_pid $wj; stop_pid $w; stop_pid $FAB_WRAP
}

# ---------------------------------------------------------------- report
# summary.tsv: per row (in ROWS order), the median of each figure over the
# REPEAT runs (ignoring failed ones), the TCP figure of every run, the notes;
# the RTT columns from the RTT test (the row's instance and its +bp one):
#   1 row, 2 MTU, 3 TCP, 4 retr, 5 UDP kpps, 6 loss, 7 RTT p50, 8 RTT p99,
#   9 busy-poll RTT p50, 10 busy-poll RTT p99, 11 CPU s/GB, 12 TCP each run, 13 notes
aggregate() {
  python3 - "$RES/runs.tsv" "$RES/summary.tsv" "$RES/rtt-summary.tsv" $ROWS <<'PY'
import os, statistics, sys
src, dst, rtt_src, order = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
runs = {}
for line in open(src):
    f = line.rstrip("\n").split("\t")
    runs.setdefault(f[0], []).append(f)
rtt = {}
if os.path.exists(rtt_src):
    for line in open(rtt_src):
        f = line.rstrip("\n").split("\t")
        rtt[f[0]] = (f[2], f[3])
def num(v):
    try: return float(v)
    except ValueError: return None
def fmt(c, x):
    return str(round(x)) if c in (3, 6, 7, 8, 9) else ("%.2f" % x if c in (2, 10) else "%.1f" % x)
with open(dst, "w") as out:
    for row in order:
        rs = runs.get(row)
        if not rs and row not in rtt: continue
        rs = rs or [[row, "-"] + ["-"] * 10]
        cols = [row, rs[0][1]]
        for c in range(2, 11):
            vals = [num(r[c]) for r in rs if num(r[c]) is not None]
            cols.append(fmt(c, statistics.median(vals)) if vals else rs[0][c])
        cols[6:10] = [*rtt.get(row, ("-", "-")), *rtt.get(row + "+bp", ("-", "-"))]
        each = "/".join(r[2] for r in rs)
        notes = rs[0][11] + ("; median of %d runs" % len(rs) if len(rs) > 1 else "")
        out.write("\t".join(cols + [each, notes]) + "\n")
PY
}
lost_note() {  # the RTT test's unanswered pings, per instance
  if [ -s "$RES/rtt-lost.tsv" ]; then
    awk -F'\t' '{ n[$2] += $3 } END { s = ""; for (k in n) s = s (s ? ", " : "") k " " n[k]; print "unanswered: " s }' "$RES/rtt-lost.tsv"
  else
    echo "every ping answered"
  fi
}
ratio() {  # ratio A B: A/B with one decimal, or "-"
  awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2fx", a / b; else print "-" }'
}
field_of() {  # ROW COLUMN(1-based) from summary.tsv
  awk -F'\t' -v r="$1" -v c="$2" '$1 == r { print $c }' "$RES/summary.tsv"
}
report() {
  local hdr=$'row\tMTU\tTCP Gbit/s\tTCP retr\tUDP rx kpps\tUDP loss %\tRTT p50 us\tRTT p99 us\tbusy-poll RTT p50\tbusy-poll RTT p99\tCPU s/GB\tTCP each run'
  {
    cat "$RES/versions.txt"; echo
    { echo "$hdr"; cut -f1-12 "$RES/summary.tsv"; } | column -t -s $'\t'
    echo
    echo "notes:"; awk -F'\t' '{ printf "  %-13s %s\n", $1, $13 }' "$RES/summary.tsv"
    [ "$RTT" = 0 ] || echo "  RTT: the interleaved RTT test ($RTT_ROUNDS rounds x $RTT_PINGS pings per instance; $(lost_note))"
    [ "$BP_US" = 0 ] || echo "  busy-poll RTT: the row's +bp instance, [daemon] busy-poll = $BUSY_POLL in both daemons (ipoibd.conf(5)), bench_floor --busy-poll; every other figure as shipped"
    if [ -s "$RES/rtt-ratios.tsv" ]; then
      echo
      echo "RTT, ratios of the medians (lower is better) with a 95% interval (bootstrap over rounds), and of the p99s:"
      awk -F'\t' '{ printf "  %-20s / %-16s p50 %.2fx [%.2f, %.2f]   p99 %.2fx\n", $1, $2, $3, $4, $5, $6 }' "$RES/rtt-ratios.tsv"
    fi
    if [ -s "$RES/rtt-threads.tsv" ]; then
      echo
      echo "data threads in the RTT test: datagrams each end's threads sent (the pings, and 5 probes per address tried; none: the pings took the event loop's path):"
      awk -F'\t' '{ printf "  %-20s A %6d   B %6d   of %d pings\n", $1, $2, $3, $4 }' "$RES/rtt-threads.tsv"
    fi
    if [ -s "$RES/rtt-pages.tsv" ]; then
      echo
      echo "pages per echo: 4 KiB pages of each end's own memory referenced by one ping after a quiet spell (its program; heap, stacks and anonymous maps; shared libraries left out), the median of $PAGE_ROUNDS:"
      awk -F'\t' '{ printf "  %-16s both %4d   A program %3d other %3d   B program %3d other %3d\n", $1, $2, $3, $4, $5, $6 }' "$RES/rtt-pages.tsv"
    fi
    echo
    echo "throughput, ratios of the medians (TCP and UDP: higher is better; CPU per GB: lower is better):"
    local peer me
    for peer in veth openvpn-2044 openvpn-4092 socat-4092 floor-4092; do
      [ -n "$(field_of $peer 1)" ] || continue
      case $peer in *-2044) me=ipoibd-2044 ;; *) me=ipoibd-4092 ;; esac
      [ -n "$(field_of $me 1)" ] || continue
      printf '  %-15s / %-15s TCP %-7s UDP pps %-7s CPU/GB %s\n' "$me" "$peer" \
        "$(ratio "$(field_of $me 3)" "$(field_of $peer 3)")" "$(ratio "$(field_of $me 5)" "$(field_of $peer 5)")" \
        "$(ratio "$(field_of $me 11)" "$(field_of $peer 11)")"
    done
    if [ -n "$(field_of connected-65520 1)" ] && [ -n "$(field_of ipoibd-4092 1)" ]; then
      printf '  %-15s / %-15s TCP %-7s UDP pps %-7s CPU/GB %s\n' \
        "connected-65520" "ipoibd-4092" \
        "$(ratio "$(field_of connected-65520 3)" "$(field_of ipoibd-4092 3)")" "$(ratio "$(field_of connected-65520 5)" "$(field_of ipoibd-4092 5)")" \
        "$(ratio "$(field_of connected-65520 11)" "$(field_of ipoibd-4092 11)")"
    fi
    for m in 2044 4092; do
      [ -n "$(field_of tap-$m 1)" ] && [ -n "$(field_of ipoibd-$m 1)" ] || continue
      printf '  %-15s / %-15s TCP %-7s UDP pps %-7s CPU/GB %s\n' \
        "tap-$m" "ipoibd-$m" \
        "$(ratio "$(field_of tap-$m 3)" "$(field_of ipoibd-$m 3)")" "$(ratio "$(field_of tap-$m 5)" "$(field_of ipoibd-$m 5)")" \
        "$(ratio "$(field_of tap-$m 11)" "$(field_of ipoibd-$m 11)")"
    done
    local me base
    for me in ipoibd-2044 ipoibd-4092 threads2-4092 connected-65520; do
      base=base-${me#ipoibd-}; [ "${me%%-*}" = ipoibd ] || base=base-$me
      [ -n "$(field_of "$base" 1)" ] && [ -n "$(field_of "$me" 1)" ] || continue
      printf '  %-15s / %-15s TCP %-7s UDP pps %-7s CPU/GB %s\n' \
        "$me" "$base" \
        "$(ratio "$(field_of "$me" 3)" "$(field_of "$base" 3)")" "$(ratio "$(field_of "$me" 5)" "$(field_of "$base" 5)")" \
        "$(ratio "$(field_of "$me" 11)" "$(field_of "$base" 11)")"
    done
    if [ "$MEMORY" = 1 ]; then
      echo
      echo "ipoibd resident memory (VmRSS):"
      echo "  idle:                                   $(mib "${MEM_IDLE:-}") MiB"
      echo "  ${MEM_NEIGH:--} neighbours (${MEM_PATHS:--} path entries), ${MEM_GROUPS:--} multicast groups" \
           "(${MEM_JOINED:--} JOINED, ${MEM_BASE:--} its own): $(mib "${MEM_FULL:-}") MiB (peak VmHWM $(mib "${MEM_HWM:-}") MiB)"
    fi
    echo
    echo "issue 8's targets, for this run (figures, not a verdict on the code: rerun to see the spread):"
    rtt_target() {  # LABEL A B LIMIT: the ratio of A's RTT median to B's, at most LIMIT
      local line; line=$(awk -F'\t' -v a="$2" -v b="$3" '$1 == a && $2 == b' "$RES/rtt-ratios.tsv" 2>/dev/null)
      if [ -z "$line" ]; then printf '  %-52s %8s   (no figure)\n' "$1" -; return; fi
      awk -F'\t' -v l="$1" -v lim="$4" '{ printf "  %-52s %7.2fx   [%.2f, %.2f] <= %s: %s\n", l, $3, $4, $5, lim,
        ($5 <= lim) ? "met" : (($4 > lim) ? "not met" : ($3 <= lim ? "met (interval crosses the limit)" : "not met (interval crosses the limit)")) }' <<<"$line"
    }
    target() {  # LABEL VALUE OP LIMIT
      awk -v l="$1" -v v="$2" -v op="$3" -v lim="$4" 'BEGIN {
        if (v !~ /^[0-9.]+x?$/) { printf "  %-52s %8s   (no figure)\n", l, v; exit }
        x = v; sub(/x$/, "", x); ok = (op == ">=") ? (x + 0 >= lim + 0) : (x + 0 <= lim + 0)
        printf "  %-52s %8s   %s %s: %s\n", l, v, op, lim, ok ? "met" : "not met" }'
    }
    local m bp=""
    [ "$BP_US" = 0 ] || bp=+bp
    for m in 2044 4092; do
      target "TCP ipoibd-$m / openvpn-$m" "$(ratio "$(field_of ipoibd-$m 3)" "$(field_of openvpn-$m 3)")" ">=" 2
      target "UDP pps ipoibd-$m / openvpn-$m" "$(ratio "$(field_of ipoibd-$m 5)" "$(field_of openvpn-$m 5)")" ">=" 2
      rtt_target "RTT p50 ipoibd-$m$bp / openvpn-$m" "ipoibd-$m$bp" "openvpn-$m" 0.5
    done
    if [ -n "$(field_of connected-65520 1)" ]; then
      echo "issue 21's targets (connected mode), for this run:"
      target "TCP connected-65520 / ipoibd-4092" "$(ratio "$(field_of connected-65520 3)" "$(field_of ipoibd-4092 3)")" ">=" 1.5
      rtt_target "RTT p50 connected-65520 / ipoibd-4092" connected-65520 ipoibd-4092 1
    fi
    if [ -n "$(field_of threads2-4092 1)" ]; then
      echo "issue 24's data-thread target ($STREAMS TCP stream(s); the target is for 4), for this run:"
      target "TCP threads2-4092 / ipoibd-4092" "$(ratio "$(field_of threads2-4092 3)" "$(field_of ipoibd-4092 3)")" ">=" 1.3
      rtt_target "RTT p50 threads2-4092 / ipoibd-4092" threads2-4092 ipoibd-4092 1.05
    fi
    if [ -s "$RES/rtt-ratios.tsv" ]; then
      echo "issue 24's RTT targets, for this run:"
      for m in 2044 4092; do
        rtt_target "RTT p50 ipoibd-$m / openvpn-$m (as shipped)" "ipoibd-$m" "openvpn-$m" 1
        [ -z "$bp" ] && continue
        rtt_target "RTT p50 ipoibd-$m+bp / openvpn-$m" "ipoibd-$m+bp" "openvpn-$m" 0.6
        rtt_target "RTT p50 ipoibd-$m+bp / floor-4092+bp" "ipoibd-$m+bp" "floor-4092+bp" 1.3
      done
    fi
    if [ -n "$(field_of tap-2044 1)$(field_of tap-4092 1)" ]; then
      echo "issue 22's targets (TAP mode), for this run:"
      for m in 2044 4092; do
        [ -n "$(field_of tap-$m 1)" ] || continue
        target "TCP tap-$m / ipoibd-$m" "$(ratio "$(field_of tap-$m 3)" "$(field_of ipoibd-$m 3)")" ">=" 0.85
      done
    fi
    if [ "$MEMORY" = 1 ]; then
      target "VmRSS idle, MiB" "$(mib "${MEM_IDLE:-}")" "<=" 16
      target "VmRSS ${MEM_NEIGH:--} neighbours ${MEM_GROUPS:--} groups, MiB" "$(mib "${MEM_FULL:-}")" "<=" 64
    fi
  } | tee "$RES/table.txt"
}

# ---------------------------------------------------------------- main
exec 9>"$LOCK"
flock -w 600 9 || die "another tunnel.sh holds $LOCK"
trap cleanup EXIT
trap 'exit 130' INT TERM
[ "${SKIP_INSTALL:-0}" = 1 ] || install_deps
stale_cleanup
setup_underlay
{
  echo "date: $(date -Is)   host: $(uname -n)   kernel: $(uname -r)"
  echo "cpus: $(nproc) x$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)   loadavg at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "ipoibd: $("$BIN/ipoibd" --version 2>&1 | head -1) ($BIN, git $(git -C "$REPO" describe --always --dirty 2>/dev/null || echo '?'))"
  [ -z "$BASE_BIN" ] || echo "base-* rows: $BASE_BIN (git $(git -C "$BASE_BIN" describe --always --dirty 2>/dev/null || echo '?'))"
  [ -z "$IPOIBD_CONFIG" ] || echo "ipoibd rows but base-*, configuration added: $(printf '%b' "$IPOIBD_CONFIG" | tr '\n' ' ')"
  echo "$(iperf3 --version | head -1); $(openvpn --version | head -1 | cut -d' ' -f1-2); $(socat -V | grep -m1 'socat version' | cut -d' ' -f2-3)"
  rtt_params="RTT $RTT_ROUNDS rounds x $RTT_PINGS pings every $PING_INT s per instance, pages per echo median of $PAGE_ROUNDS"
  [ "$RTT" = 1 ] || rtt_params="no RTT test"
  echo "params: T=$T s, TCP $STREAMS stream(s), UDP -b 0 -l $UDP_LEN, $rtt_params, underlay MTU $UL_MTU"
} >"$RES/versions.txt"
: >"$RES/runs.tsv"
rm -f "$RES"/rtt.tsv "$RES"/rtt-summary.tsv "$RES"/rtt-ratios.tsv "$RES"/rtt-lost.tsv "$RES"/rtt-pages.tsv  # a reused RESULTS directory
if [ "$RTT" = 1 ] && [ -n "$ROWS" ]; then
  log "== RTT: every row up at once, $RTT_ROUNDS rounds of $RTT_PINGS pings per instance"
  rtt_test
fi
for rep in $(seq "$REPEAT"); do
  TAG=.r$rep
  order=$ROWS
  if [ -n "$BASE_BIN" ] && [ $((rep % 2)) = 0 ]; then
    # base-X before ipoibd-X in even rounds.
    order=$(echo "$ROWS" | tr ' ' '\n' | awk '/^(ipoibd|connected|threads2)-/ { held = $0; next } { print } /^base-/ && held { print held; held = "" }' | xargs)
  fi
  for row in $order; do
    log "== $row (run $rep of $REPEAT)"
    run_row "$row"
  done
done
TAG=
aggregate
if [ "$MEMORY" = 1 ]; then
  log "== memory"
  memory
fi
report
[ "$KEEP" = 1 ] && log "raw results: $RES"
exit 0
