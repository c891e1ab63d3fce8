# Helpers for scenario scripts: network namespaces of our own, processes we
# started, bounded waits, and cleanup on any exit. Source it; call
# scenario_init NAME first.
#
# Safety rules (README, DESIGN.md): only namespaces this script creates,
# addresses from 198.18.0.0/15, every wait bounded, and only our own PIDs
# are ever killed.

scenario_init() {
  SCENARIO=$1
  if [ "$(id -u)" -ne 0 ]; then
    echo "$SCENARIO: needs root for network namespaces; skipped" >&2
    exit 77
  fi
  WORK=$(mktemp -d "/tmp/ipoibd-$SCENARIO.XXXXXX")
  NAMESPACES=()
  PIDS=()
  CLEANUP_HOOKS=()  # commands eval'd after processes and namespaces are gone
  trap scenario_cleanup EXIT
  trap 'exit 130' INT TERM
}

# kill_tree SIGNAL PID: PID and every process under it (a `timeout`
# wrapper's command with it), children first.
kill_tree() {
  local c
  for c in $(cat /proc/"$2"/task/*/children 2>/dev/null); do kill_tree "$1" "$c"; done
  kill -"$1" "$2" 2>/dev/null || true
}

scenario_cleanup() {
  local rc=$?
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    # What is left gets SIGKILL, with what runs under it: killing only a
    # `timeout` wrapper would orphan its command (an ASan ibfabricd stuck
    # in LeakSanitizer's exit, spinning a CPU, was left so once).
    kill_tree KILL "$pid"
  done
  for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  for hook in "${CLEANUP_HOOKS[@]}"; do eval "$hook" || true; done
  if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
    echo "---- $SCENARIO failed (rc $rc); logs from $WORK:" >&2
    for f in "$WORK"/*.log; do [ -f "$f" ] && { echo "== $f" >&2; tail -n 40 "$f" >&2; }; done
  fi
  if [ -n "${KEEP_WORK:-}" ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
  exit $rc
}

# netns_pair A B ADDR_A ADDR_B: two namespaces joined by a veth pair.
netns_pair() {
  local a=$1 b=$2
  ip netns add "$a"; NAMESPACES+=("$a")
  ip netns add "$b"; NAMESPACES+=("$b")
  ip link add "v$$a" netns "$a" type veth peer name "v$$b" netns "$b"
  ip -n "$a" addr add "$3/24" dev "v$$a"
  ip -n "$b" addr add "$4/24" dev "v$$b"
  for ns in "$a" "$b"; do
    ip -n "$ns" link set lo up
  done
  ip -n "$a" link set "v$$a" up
  ip -n "$b" link set "v$$b" up
}

# star_underlay FAB BRIDGE_CIDR: namespace FAB with a bridge br0 at
# BRIDGE_CIDR (where ibfabricd listens); star_host FAB NS TAG HOST_CIDR: a
# namespace NS joined to that bridge by a veth pair (u<TAG>/p<TAG>).
star_underlay() {
  ip netns add "$1"; NAMESPACES+=("$1")
  ip -n "$1" link set lo up
  ip -n "$1" link add br0 type bridge
  ip -n "$1" addr add "$2" dev br0
  ip -n "$1" link set br0 up
}
star_host() {
  local fab=$1 ns=$2 tag=$3
  ip netns add "$ns"; NAMESPACES+=("$ns")
  ip -n "$ns" link set lo up
  ip link add "u$tag" netns "$ns" type veth peer name "p$tag" netns "$fab"
  ip -n "$fab" link set "p$tag" master br0 up
  ip -n "$ns" addr add "$4" dev "u$tag"
  ip -n "$ns" link set "u$tag" up
}

# start NS LOG CMD...: runs CMD in namespace NS in the background; sets $!
# and remembers the PID for cleanup.
start() {
  local ns=$1 log=$2
  shift 2
  ip netns exec "$ns" "$@" >"$log" 2>&1 &
  PIDS+=($!)
}

# wait_for SECONDS FILE PATTERN: until a line of FILE matches PATTERN.
wait_for() {
  local deadline=$((SECONDS + $1))
  until grep -qE "$3" "$2" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ]; then
      echo "timed out after $1 s waiting for /$3/ in $2" >&2
      return 1
    fi
    sleep 0.1
  done
}

# eventually SECONDS CMD...: until CMD succeeds (a counter moved, say),
# tried every 0.1 s; fails after SECONDS.
eventually() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.1
  done
}

# wait_count SECONDS FILE PATTERN N: until N lines of FILE match PATTERN
# (a daemon has handled its Nth signal, say).
wait_count() {
  local deadline=$((SECONDS + $1))
  until [ "$(grep -cE "$3" "$2" 2>/dev/null)" -ge "$4" ]; do
    if [ $SECONDS -ge $deadline ]; then
      echo "timed out after $1 s waiting for $4 lines /$3/ in $2" >&2
      return 1
    fi
    sleep 0.1
  done
}

# wait_for_after SECONDS FILE LINE PATTERN: like wait_for, counting only
# lines after line LINE (what was logged before an action does not count).
wait_for_after() {
  local deadline=$((SECONDS + $1))
  until tail -n +"$(($3 + 1))" "$2" 2>/dev/null | grep -qE "$4"; do
    if [ $SECONDS -ge $deadline ]; then
      echo "timed out after $1 s waiting for /$4/ in $2 after line $3" >&2
      return 1
    fi
    sleep 0.1
  done
}

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

# ipoibd hosts, one per namespace: the caller declares NS (host ->
# namespace, associative), BIN and WORK; each host's configuration is
# $WORK/HOST.conf and its control socket the one that file names.
declare -A PID
start_ipoibd() {  # HOST RUN: started in the background, logging to $WORK/HOST-RUN.log
  ip netns exec "${NS[$1]}" "$BIN/ipoibd" -i ib0 -c "$WORK/$1.conf" --log-target=stderr >"$WORK/$1-$2.log" 2>&1 &
  PID[$1]=$!; PIDS+=("${PID[$1]}")
}
stop_ipoibd() {  # HOST: SIGTERM, and it must exit 0
  kill -TERM "${PID[$1]}"
  local rc=0; wait "${PID[$1]}" || rc=$?
  [ $rc -eq 0 ] || fail "$1's ipoibd exited $rc on SIGTERM"
}
ctl() {  # HOST ARGS...: ipoibctl on HOST's control socket
  local h=$1; shift
  ip netns exec "${NS[$h]}" "$BIN/ipoibctl" -s "$WORK/$h.sock" "$@"
}
in_ns() {  # HOST CMD...
  local h=$1; shift
  ip netns exec "${NS[$h]}" "$@"
}
wait_link_up() {  # HOST SECONDS
  local deadline=$((SECONDS + $2)) out
  while :; do
    out=$(ctl "$1" -j status 2>/dev/null || true)
    grep -q '"link":"up"' <<<"$out" && return 0
    [ $SECONDS -lt $deadline ] || fail "$1: link not up after $2 s"
    sleep 0.1
  done
}
stat_of() {  # HOST SECTION KEY: one counter of ipoibctl stats (0 when absent)
  ctl "$1" -j stats | python3 -c "import json,sys; print(json.load(sys.stdin).get('$2',{}).get('$3',0))"
}
status_of() {  # HOST KEY: one field of ipoibctl status
  ctl "$1" -j status | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"
}
# ping until one echo comes back (a new neighbour or connection may take a
# moment), at most SECONDS.
ping_until() {  # HOST SECONDS ping-args...
  local h=$1 deadline=$((SECONDS + $2)); shift 2
  until in_ns "$h" ping -c 1 -W 1 "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
  done
}

# ping_outage PING_D_OUTPUT KILL_TIME: of a `ping -D` log, "GAP BACK REPLIES":
# the longest hole in the replies that ends after KILL_TIME (a reply in
# flight may still arrive just after it), when the first reply after that
# hole came (seconds after KILL_TIME), and how many replies came after it.
ping_outage() {
  python3 - "$1" "$2" <<'PY'
import re, sys
kill = float(sys.argv[2])
times = [float(m.group(1)) for m in re.finditer(r"^\[(\d+\.\d+)\] \d+ bytes from", open(sys.argv[1]).read(), re.M)]
holes = [(b - a, b) for a, b in zip(times, times[1:]) if b > kill]
gap, end = max(holes) if holes else (-1, kill - 1)
print("%.2f %.2f %d" % (gap, end - kill, sum(1 for t in times if t > kill)))
PY
}
