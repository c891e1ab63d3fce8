#!/usr/bin/env bash
# bench/rc.sh - the reliable service (RC) against the unreliable one (UD) on
# the soft fabric, with no loss and with 1% loss, in one run (issue 20). A
# benchmark: it prints figures and asserts nothing (STYLE.md guideline 11).
#
# Network (198.18.0.0/15 only, namespaces made here, nothing leaves them):
#
#   rcbfab  bridge br0 198.18.106.100/24 (MTU 9000), ibfabricd on :18516
#   rcba    veth 198.18.106.1/24 to the bridge: ibrcperf client
#   rcbb    veth 198.18.106.2/24 to the bridge: ibrcperf server
#
# Fabrics (FABRICS= selects, in this order):
#   direct     no faults: after the switch's route hints the two ports
#              talk straight over UDP (what ipoibd hosts do)
#   switched   ibfabricd --cut-through no: every packet passes the switch,
#              none lost (the comparison point for the lossy fabric)
#   loss-1     --fault loss=1%: every packet passes the switch, 1% of those
#              it sends out are dropped
# Tests (TESTS=), ibrcperf(1) clients, all at the fabric's 4096-byte MTU:
#   ud-4096      UD datagrams of 4096 bytes, no acknowledgement: the
#                payload that arrived over the time it took (loss is loss)
#   send-4096    RC SENDs of one packet each, depth 64
#   send-65536   RC SENDs of 16 packets, depth 16
#   write-65536  RC RDMA WRITEs with immediate, 16 packets, depth 16
#   read-65536   RC RDMA READs, 16 response packets, depth 16
# Each pair (fabric, test) runs REPEAT times (default 3), round-robin over
# everything so that machine noise hits every row alike; the table shows the
# medians: messages/s, Gb/s of payload, packets sent again, local ACK
# timeouts and (UD) the share lost. Then, per fabric, RC's payload rate as a
# share of UD's at the same MTU (issue 20's target: RC at no loss >= 80% of
# UD).
#
# Usage (root; ~3 min with REPEAT=3):  bench/rc.sh
# Env: BIN=build/bin  REPEAT=3  FABRICS="direct switched loss-1"  TESTS="..."
#      SCALE=1 (multiplies every message count)  RESULTS=dir (default: a temp dir)
set -euo pipefail
BIN=$(cd "${BIN:-$(dirname "$0")/../build/bin}" && pwd)
REPEAT=${REPEAT:-3}
FABRICS=${FABRICS:-direct switched loss-1}
TESTS=${TESTS:-ud-4096 send-4096 send-65536 write-65536 read-65536}
SCALE=${SCALE:-1}
[ "$(id -u)" -eq 0 ] || { echo "bench/rc.sh: needs root (network namespaces)" >&2; exit 1; }
for exe in ibfabricd ibrcperf; do [ -x "$BIN/$exe" ] || { echo "bench/rc.sh: no $BIN/$exe" >&2; exit 1; }; done
RESULTS=${RESULTS:-$(mktemp -d /tmp/bench-rc.XXXXXX)}
mkdir -p "$RESULTS"
FAB=rcbfab$$; A=rcba$$; B=rcbb$$
FABRIC=198.18.106.100:18516
PIDS=()

cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  for ns in "$A" "$B" "$FAB"; do ip netns del "$ns" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
log() { echo "[$(date +%T)] $*" >&2; }

ip netns add "$FAB"; ip -n "$FAB" link set lo up
ip -n "$FAB" link add br0 type bridge; ip -n "$FAB" link set br0 mtu 9000
ip -n "$FAB" addr add 198.18.106.100/24 dev br0; ip -n "$FAB" link set br0 up
n=1
for ns in "$A" "$B"; do
  ip netns add "$ns"; ip -n "$ns" link set lo up
  ip link add "rcu$n$$" mtu 9000 netns "$ns" type veth peer name "rcp$n$$" mtu 9000 netns "$FAB"
  ip -n "$FAB" link set "rcp$n$$" master br0 up
  ip -n "$ns" addr add "198.18.106.$n/24" dev "rcu$n$$"
  ip -n "$ns" link set "rcu$n$$" up
  n=$((n + 1))
done

fabric_args() {
  case $1 in
    direct) ;;
    switched) echo --cut-through no ;;
    loss-1) echo --fault loss=1% --fault-seed 11 ;;
    *) echo "bench/rc.sh: unknown fabric '$1'" >&2; exit 1 ;;
  esac
}
client_args() {  # TEST FABRIC
  local count
  case $1 in
    ud-4096) count=300000; echo --test ud --size 4096 --depth 64 ;;
    send-4096) count=300000; echo --test send --size 4096 --depth 64 ;;
    send-65536) count=20000; echo --test send --size 65536 --depth 16 ;;
    write-65536) count=20000; echo --test write --size 65536 --depth 16 ;;
    read-65536) count=20000; echo --test read --size 65536 --depth 16 ;;
    *) echo "bench/rc.sh: unknown test '$1'" >&2; exit 1 ;;
  esac
  # Go-back-N under loss is slower: fewer messages keep the rows short.
  [ "$2" = loss-1 ] && count=$((count / 4))
  echo --count "$(awk -v c="$count" -v s="$SCALE" 'BEGIN { printf "%d", c * s }')"
}

# run FABRIC TEST REP: one measurement; appends a line to raw.tsv
run_one() {
  local fabric=$1 test=$2 rep=$3 tag="$1.$2.$3"
  # shellcheck disable=SC2046
  ip netns exec "$FAB" "$BIN/ibfabricd" --listen "$FABRIC" --control-socket none --quiet $(fabric_args "$fabric") \
    >"$RESULTS/fabric.$tag.log" 2>&1 &
  local fab=$!; PIDS+=("$fab")
  sleep 0.3
  ip netns exec "$B" "$BIN/ibrcperf" server --fabric "$FABRIC" --instance bench-server --listen 198.18.106.2:18515 \
    --run-timeout 120 >"$RESULTS/server.$tag.log" 2>&1 &
  local srv=$!; PIDS+=("$srv")
  # shellcheck disable=SC2046
  ip netns exec "$A" timeout 150 "$BIN/ibrcperf" client --fabric "$FABRIC" --instance bench-client \
    --connect 198.18.106.2:18515 --run-timeout 120 $(client_args "$test" "$fabric") >"$RESULTS/client.$tag.log" 2>&1 || true
  wait "$srv" 2>/dev/null || true
  kill -TERM "$fab" 2>/dev/null || true; wait "$fab" 2>/dev/null || true
  PIDS=()
  local c=$RESULTS/client.$tag.log
  local rate gbps retx tmo lost
  rate=$(sed -n 's/^rate: \([0-9.]*\) messages\/s.*/\1/p' "$c")
  gbps=$(sed -n 's/^rate: .* \([0-9.]*\) Gb\/s payload/\1/p' "$c")
  retx=$(sed -n 's/^retransmitted \([0-9]*\) timeouts \([0-9]*\).*/\1/p' "$c")
  tmo=$(sed -n 's/^retransmitted \([0-9]*\) timeouts \([0-9]*\).*/\2/p' "$c")
  lost=$(sed -n 's/^ud: lost [0-9]* (\([0-9.]*\)%)/\1/p' "$c")
  if ! grep -q "^client: every message arrived intact" "$c"; then
    log "$tag: FAILED (see $c)"
    rate=; gbps=
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$fabric" "$test" "$rep" "${rate:-}" "${gbps:-}" "${retx:-0}" "${tmo:-0}" \
    "${lost:-}" >>"$RESULTS/raw.tsv"
  log "$tag: ${rate:-?} msg/s ${gbps:-?} Gb/s retransmitted ${retx:-0} timeouts ${tmo:-0}${lost:+ lost $lost%}"
}

: >"$RESULTS/raw.tsv"
for rep in $(seq "$REPEAT"); do
  for fabric in $FABRICS; do
    for test in $TESTS; do run_one "$fabric" "$test" "$rep"; done
  done
done

python3 - "$RESULTS/raw.tsv" "$REPEAT" <<'EOF' | tee "$RESULTS/summary.txt"
import collections, statistics, sys
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    rows.setdefault((f[0], f[1]), []).append(f)
def med(vals):
    vals = [float(v) for v in vals if v != ""]
    return statistics.median(vals) if vals else None
print(f"RC and UD over the soft fabric, medians of {sys.argv[2]} runs")
print(f"{'fabric':10} {'test':12} {'msg/s':>10} {'Gb/s':>7} {'resent':>9} {'timeouts':>8} {'lost %':>7}  Gb/s of each run")
best = {}
for (fabric, test), rs in rows.items():
    rate, gbps = med([r[3] for r in rs]), med([r[4] for r in rs])
    retx, tmo, lost = med([r[5] for r in rs]), med([r[6] for r in rs]), med([r[7] for r in rs])
    runs = " ".join(r[4] or "fail" for r in rs)
    print(f"{fabric:10} {test:12} {rate or 0:10.0f} {gbps or 0:7.3f} {retx or 0:9.0f} {tmo or 0:8.0f} "
          f"{'' if lost is None else f'{lost:.2f}':>7}  {runs}")
    best[(fabric, test)] = gbps
print()
print("RC payload rate / UD payload rate (4096-byte MTU, same fabric):")
for fabric in dict.fromkeys(k[0] for k in best):
    ud = best.get((fabric, "ud-4096"))
    if not ud:
        continue
    parts = [f"{t} {best[(fabric, t)] / ud:.2f}x" for (f, t) in best if f == fabric and t != "ud-4096" and best[(f, t)]]
    print(f"  {fabric:10} " + ", ".join(parts))
EOF
log "results in $RESULTS"
