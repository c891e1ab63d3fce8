#!/usr/bin/env bash
# bench/hops.sh - ping RTT and TCP between two ipoibd hosts across a chain of
# 1, 3 and 5 soft switches, and the fabric's CPU per forwarded packet per
# switch (issue 44, item 10). A benchmark: it prints figures and asserts
# nothing (STYLE.md guideline 11).
#
# Network (198.18.0.0/15 only, namespaces made here, nothing leaves them):
#
#   hbfab  bridge br0 198.18.112.100/24: the switches, one ibfabricd --sm=no
#          each on 198.18.112.100:18600+i, switch i's port 2 cabled to switch
#          i+1's port 1; OpenSM on switch 1's sim socket routes the chain
#   hba    ipoibd A on switch 1, ib0 198.18.0.1/24
#   hbb    ipoibd B on the last switch, ib0 198.18.0.2/24
#
# Rows: every hop count of HOPS, each with --cut-through no; with one
# switch also as shipped (cut-through yes: after the switch's route hints
# A and B talk straight over UDP, so that row is the floor). Across an
# inter-switch link there is no cut-through: every packet passes every
# switch. Each row REPEAT times (round-robin), the table the medians:
#   RTT        PINGS pings 10 ms apart (ping -D), median and p99, in us
#   TCP        iperf3 for TCP_SECONDS, Gbit/s at the receiver
#   fabric     CPU seconds all switch processes used during the TCP test,
#              packets they forwarded (sum of switch.forwarded), and CPU
#              per forwarded packet (each packet counts once per switch it
#              passes): us/pkt/switch
#
# Usage (root; about 5 min with the defaults):  bench/hops.sh
# Env: BIN=build/bin  HOPS="1 3 5"  REPEAT=3  PINGS=200  TCP_SECONDS=5
#      RESULTS=dir (default: a temp dir)
set -euo pipefail
BIN=$(cd "${BIN:-$(dirname "$0")/../build/bin}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
HOPS=${HOPS:-1 3 5}
REPEAT=${REPEAT:-3}
PINGS=${PINGS:-200}
TCP_SECONDS=${TCP_SECONDS:-5}
for exe in ibfabricd ibfabricctl ipoibd ipoibctl; do [ -x "$BIN/$exe" ] || { echo "bench/hops.sh: no $BIN/$exe" >&2; exit 1; }; done
for tool in opensm iperf3 python3 ping; do command -v $tool >/dev/null || { echo "bench/hops.sh: $tool missing" >&2; exit 1; }; done
PRELOAD=/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so
[ -f "$PRELOAD" ] || { echo "bench/hops.sh: $PRELOAD missing (libumad2sim0)" >&2; exit 1; }
. "$HERE/../tests/scenario/lib.sh"
scenario_init bench-hops
RESULTS=${RESULTS:-$(mktemp -d /tmp/bench-hops.XXXXXX)}
mkdir -p "$RESULTS"
log() { echo "[$(date +%T)] $*" >&2; }

FAB=hbfab$$
SOCK=hb$$
IP=198.18.112.100
declare -A NS=([a]=hba$$ [b]=hbb$$)
declare -A GUID=([a]=0x0002c90300e5c00a [b]=0x0002c90300e5c00b)
declare -A IDX=([a]=1 [b]=2)
star_underlay "$FAB" $IP/24
star_host "$FAB" "${NS[a]}" "ha$$" 198.18.112.1/24
star_host "$FAB" "${NS[b]}" "hb$$" 198.18.112.2/24
# A 4 KiB IB packet in one UDP datagram: 9000-byte links, as bench/tunnel.sh's
# (tests/scenario/lib.sh's are 1500 and would fragment every datagram).
ip -n "$FAB" link set br0 mtu 9000
for tag in ha hb; do
  ip -n "$FAB" link set "p$tag$$" mtu 9000
done
ip -n "${NS[a]}" link set "uha$$" mtu 9000
ip -n "${NS[b]}" link set "uhb$$" mtu 9000

SWITCH_PIDS=()
ROW_PIDS=()
stop_row() {
  for pid in "${ROW_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${ROW_PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  ROW_PIDS=()
  SWITCH_PIDS=()
}

# start_row HOPS CUT_THROUGH: the chain, OpenSM, A and B up and pinging.
start_row() {
  local n=$1 cut=$2 i args
  for i in $(seq 1 "$n"); do
    args=(--listen "$IP:$((18600 + i))" --control-socket "$WORK/s$i.sock" --switch-guid "$(printf '0x0002c90000b000%02x' "$i")"
      --node-description "s$i" --sm=no --ports 8 --cut-through "$cut")
    [ "$i" -gt 1 ] && args+=(--link "1=$IP:$((18600 + i - 1))")
    [ "$i" -lt "$n" ] && args+=(--link "2=$IP:$((18600 + i + 1))")
    [ "$i" = 1 ] && args+=(--sim-socket "$SOCK" --sim-attach-wait 3s)
    ip netns exec "$FAB" "$BIN/ibfabricd" "${args[@]}" >"$WORK/s$i.log" 2>&1 &
    ROW_PIDS+=($!); SWITCH_PIDS+=($!); PIDS+=($!)
  done
  for i in $(seq 1 "$n"); do wait_for 10 "$WORK/s$i.log" "listening on" || fail "switch $i did not start"; done
  local osm=$WORK/opensm
  rm -rf "$osm"; mkdir -p "$osm/cache" "$WORK/run"
  {
    echo "log_file $osm/opensm.log"; echo "force_log_flush TRUE"; echo "dump_files_dir $osm/"
    echo "partition_config_file $osm/none"; echo "qos_policy_file $osm/none"; echo "prefix_routes_file $osm/none"
    echo "per_module_logging_file $osm/none"; echo "torus_config $osm/none"
    echo "sweep_interval 1"; echo "console off"; echo "daemon FALSE"
  } >"$osm/opensm.conf"
  (cd "$osm" && exec ip netns exec "$FAB" env LD_PRELOAD="$PRELOAD" IBSIM_SOCKNAME="$SOCK" SIM_HOST=opensm \
    OSM_CACHE_DIR="$osm/cache" OSM_TMP_DIR="$osm" timeout -s TERM 600 opensm -F "$osm/opensm.conf" \
    </dev/null >"$WORK/opensm.out" 2>&1) &
  ROW_PIDS+=($!); PIDS+=($!)
  wait_for 30 "$osm/opensm.log" "SUBNET UP" || fail "OpenSM did not bring up $n switches"
  local h fabric
  for h in a b; do
    fabric=$IP:18601
    [ "$h" = b ] && fabric=$IP:$((18600 + n))
    cat >"$WORK/$h.conf" <<EOF
[fabric]
transport = soft
address = $fabric
port-guid = ${GUID[$h]}
[interface]
address = 198.18.0.${IDX[$h]}/24
[daemon]
control-socket = $WORK/$h.sock
EOF
    start_ipoibd "$h" "row"
    ROW_PIDS+=("${PID[$h]}")
  done
  for h in a b; do wait_link_up "$h" 40; done
  ping_until a 30 198.18.0.2 || fail "A does not reach B across $n switches"
}

fabric_cpu_ticks() {  # the switch processes' utime + stime, in clock ticks
  local total=0 pid f
  for pid in "${SWITCH_PIDS[@]}"; do
    read -r -a f <"/proc/$pid/stat"
    total=$((total + f[13] + f[14]))
  done
  echo "$total"
}
fabric_forwarded() {  # sum of switch.forwarded over the chain
  local total=0 i n
  for i in $(seq 1 "${#SWITCH_PIDS[@]}"); do
    n=$(ip netns exec "$FAB" "$BIN/ibfabricctl" -s "$WORK/s$i.sock" -j stats |
      python3 -c "import json,sys; print(json.load(sys.stdin)['switch']['forwarded'])")
    total=$((total + n))
  done
  echo "$total"
}

# measure ROW RUN: one run of a row, a line of raw-results.tsv.
measure() {
  local row=$1 run=$2 hops=${1%%-*}
  in_ns a ping -D -c "$PINGS" -i 0.01 -W 1 198.18.0.2 >"$RESULTS/$row.r$run.ping" 2>&1 || true
  local rtt
  rtt=$(python3 - "$RESULTS/$row.r$run.ping" <<'PY'
import re, sys, statistics
ms = sorted(float(m) for m in re.findall(r"time=([0-9.]+) ms", open(sys.argv[1]).read()))
if not ms: print("- -"); sys.exit()
p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
print("%.0f %.0f" % (statistics.median(ms) * 1000, p99 * 1000))
PY
)
  in_ns b iperf3 -s -1 -p 5301 >/dev/null 2>&1 &
  local server=$!
  sleep 0.5
  local cpu0 fwd0 cpu1 fwd1
  cpu0=$(fabric_cpu_ticks); fwd0=$(fabric_forwarded)
  in_ns a iperf3 -c 198.18.0.2 -p 5301 -t "$TCP_SECONDS" -J >"$RESULTS/$row.r$run.iperf.json" 2>/dev/null || true
  cpu1=$(fabric_cpu_ticks); fwd1=$(fabric_forwarded)
  wait "$server" 2>/dev/null || true
  local tcp
  tcp=$(python3 -c "import json,sys
try: print('%.2f' % (json.load(open(sys.argv[1]))['end']['sum_received']['bits_per_second'] / 1e9))
except Exception: print('-')" "$RESULTS/$row.r$run.iperf.json")
  local hz cpu_s fwd per
  hz=$(getconf CLK_TCK)
  cpu_s=$(python3 -c "print('%.2f' % (($cpu1 - $cpu0) / $hz))")
  fwd=$((fwd1 - fwd0))
  # Too few forwarded packets (cut-through: the stream went host to host)
  # make no per-packet figure.
  per=$(python3 -c "print('%.2f' % ((($cpu1 - $cpu0) / $hz) * 1e6 / $fwd) if $fwd >= 1000 else '-')")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$row" "$run" $rtt "$tcp" "$cpu_s" "$fwd" "$per" >>"$RESULTS/raw.tsv"
  log "$row r$run: RTT p50/p99 ${rtt/ //} us, TCP $tcp Gbit/s, fabric $cpu_s CPU s for $fwd forwarded packets ($per us/pkt/switch)"
}

ROWS=()
for h in $HOPS; do
  [ "$h" = 1 ] && ROWS+=("1-cut")
  ROWS+=("$h-nocut")
done
: >"$RESULTS/raw.tsv"
for run in $(seq 1 "$REPEAT"); do
  for row in "${ROWS[@]}"; do
    hops=${row%%-*}
    cut=no; [ "${row#*-}" = cut ] && cut=yes
    log "== $hops switch(es), cut-through $cut (run $run of $REPEAT)"
    start_row "$hops" "$cut"
    measure "$row" "$run"
    stop_row
  done
done

python3 - "$RESULTS/raw.tsv" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    rows.setdefault(f[0], []).append(f[2:])
def med(vals):
    v = [float(x) for x in vals if x not in ("-", "")]
    return statistics.median(v) if v else None
def fmt(x, spec):
    return "-" if x is None else format(x, spec)
print("%-10s %-11s %10s %10s %10s %12s %14s %16s %s" % ("switches", "cut-through", "RTT p50 us", "RTT p99 us",
      "TCP Gbit/s", "fabric CPU s", "forwarded pkts", "us/pkt/switch", "TCP each run"))
for row, runs in rows.items():
    cols = list(zip(*runs))
    hops, cut = row.split("-")
    print("%-10s %-11s %10s %10s %10s %12s %14s %16s %s" % (hops, "yes" if cut == "cut" else "no",
          fmt(med(cols[0]), ".0f"), fmt(med(cols[1]), ".0f"), fmt(med(cols[2]), ".2f"), fmt(med(cols[3]), ".2f"),
          fmt(med(cols[4]), ".0f"), fmt(med(cols[5]), ".2f"), "/".join(cols[2])))
PY
log "raw results: $RESULTS"
