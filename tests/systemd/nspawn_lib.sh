# shellcheck shell=bash
# Containers booted with systemd-nspawn, for tests/systemd/nspawn.sh. Source
# it after tests/scenario/lib.sh's scenario_init (it uses WORK, ROOT, fail).
#
# shared/reference/systemd-in-ci.md has the recipe; the gotchas it names are
# marked "gotcha N" below. In short: no system bus on the host, so
# --register=no --keep-unit and nsenter instead of machinectl (1); each
# nspawn in a cgroup of its own, removed after (2); a network namespace
# given with --network-namespace-path (3); /run/systemd/nspawn/propagate/NAME
# removed after (9). Unlike --private-network, --network-namespace-path does
# not add CAP_NET_ADMIN to the container's bounding set (CapBnd 0xfcecafff
# here), and without it TUNSETIFF fails with EPERM even for root:
# --capability=CAP_NET_ADMIN adds it.
#
#   container_boot HOST NETNS     boots ROOT as machine ipoibd-HOST-$$
#   container_wait_running HOST SECONDS
#   ctr HOST CMD...               runs CMD in the container (all namespaces)
#   ctr_write HOST PATH           stdin into PATH in the container
#
# Every container shares ROOT read-only (--volatile=overlay: each writes to
# a tmpfs of its own), and lives at most CONTAINER_LIFETIME seconds even if
# this script is killed (timeout around nspawn).

CONTAINER_LIFETIME=${CONTAINER_LIFETIME:-600}
declare -A CONTAINER_TOP CONTAINER_PID1 CONTAINER_CGROUPS
CONTAINERS=()

container_name() { echo "ipoibd-$1-$$"; }

# What an earlier run killed with SIGKILL (a ctest timeout) could not clean
# up: its empty cgroups, propagation directories and namespaces, found by
# this script's names with the PID of a run that no longer exists.
sweep_stale_runs() {
  local path base pid
  for path in $(cgroup_roots | sed 's|$|/ipoibd-*-*|') /run/systemd/nspawn/propagate/ipoibd-*-* /run/netns/nsp*; do
    [ -e "$path" ] || continue
    base=$(basename "$path")
    case "$base" in
      ipoibd-*-*) pid=${base##*-} ;;
      nsp*) pid=$(echo "$base" | sed -n 's/^nsp\([0-9]*\)\(sw\|fab\|a\|b\)$/\1/p') ;;
    esac
    [[ "$pid" =~ ^[0-9]+$ ]] && ! kill -0 "$pid" 2>/dev/null || continue
    echo "removing $path, left by run $pid" >&2
    case "$path" in
      /run/netns/*) ip netns del "$base" 2>/dev/null || true ;;
      /run/systemd/*) rm -rf "$path" ;;
      *) find "$path" -depth -type d -exec rmdir {} + 2>/dev/null || true ;;
    esac
  done
}

# The cgroup hierarchies nspawn runs in: the unified one alone (cgroup v2),
# or systemd's named v1 hierarchy and the unified one beside it (hybrid).
cgroup_roots() {
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    echo /sys/fs/cgroup
  else
    local d
    for d in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified; do [ -d "$d" ] && echo "$d"; done
  fi
}

container_boot() {  # HOST NETNS
  local h=$1 name cg cgs=()
  name=$(container_name "$h")
  for cg in $(cgroup_roots); do
    mkdir "$cg/$name"
    cgs+=("$cg/$name")
  done
  CONTAINER_CGROUPS[$h]="${cgs[*]}"
  CONTAINERS+=("$h")
  (
    exec 7>&- 8>&-
    for cg in "${cgs[@]}"; do echo "$BASHPID" >"$cg/cgroup.procs"; done
    exec timeout -k 5 "$CONTAINER_LIFETIME" systemd-nspawn -D "$ROOT" -M "$name" \
      --register=no --keep-unit --network-namespace-path="/run/netns/$2" \
      --capability=CAP_NET_ADMIN --volatile=overlay -b --console=read-only
  ) </dev/null >"$WORK/$h-console.log" 2>&1 &
  CONTAINER_TOP[$h]=$!
}

# The container's PID 1: the child of systemd-nspawn that is PID 1 in its
# own PID namespace (NSpid: <pid> 1).
container_find_pid1() {  # HOST
  local nspawn child
  for nspawn in $(pgrep -P "${CONTAINER_TOP[$1]}"); do
    for child in $(pgrep -P "$nspawn"); do
      if awk '$1 == "NSpid:" && NF >= 3 && $NF == 1 { found = 1 } END { exit !found }' \
           "/proc/$child/status" 2>/dev/null; then
        echo "$child"
        return 0
      fi
    done
  done
  return 1
}

container_wait_running() {  # HOST SECONDS
  local h=$1 deadline=$((SECONDS + $2)) pid1="" state
  until pid1=$(container_find_pid1 "$h"); do
    kill -0 "${CONTAINER_TOP[$h]}" 2>/dev/null || fail "$h: systemd-nspawn exited (see $h-console.log)"
    [ $SECONDS -lt $deadline ] || fail "$h: no container PID 1 after $2 s"
    sleep 0.1
  done
  CONTAINER_PID1[$h]=$pid1
  # is-system-running needs the manager's private socket: retry until it is there.
  until state=$(ctr "$h" timeout $((deadline - SECONDS + 1)) systemctl is-system-running --wait 2>/dev/null) &&
        [ "$state" = running ]; do
    case "$state" in
      degraded | maintenance | stopping)
        ctr "$h" systemctl --failed --no-pager >&2 || true
        fail "$h: the container's systemd is $state" ;;
    esac
    [ $SECONDS -lt $deadline ] || fail "$h: not running after $2 s (state '$state')"
    sleep 0.2
  done
}

ctr() {  # HOST CMD...: keeps the host's capabilities and cgroup (gotcha 4)
  local h=$1; shift
  nsenter -t "${CONTAINER_PID1[$h]}" -a env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"
}

ctr_write() {  # HOST PATH
  ctr "$1" sh -c 'mkdir -p "$(dirname "$1")" && cat >"$1"' sh "$2"
}

# On any exit, before scenario_cleanup: the containers' journals, then
# SIGTERM to every nspawn (the container halts, about 0.2 s), SIGKILL to the
# container's PID 1 and nspawn when it takes longer than 20 s; then the
# cgroups, deepest first (nspawn leaves payload/ and supervisor/ in them,
# gotcha 2), and nspawn's propagation directory (gotcha 9).
containers_stop() {  # RC
  local h name top nspawn cg deadline
  # The whole journal is kept with KEEP_WORK=1; scenario_cleanup prints the
  # tail of each on failure.
  for h in "${CONTAINERS[@]}"; do
    [ -n "${CONTAINER_PID1[$h]:-}" ] || continue
    ctr "$h" timeout 10 journalctl -b --no-pager >"$WORK/$h-journal.log" 2>&1 || true
  done
  for h in "${CONTAINERS[@]}"; do
    top=${CONTAINER_TOP[$h]}
    for nspawn in $(pgrep -P "$top"); do kill -TERM "$nspawn" 2>/dev/null || true; done
  done
  for h in "${CONTAINERS[@]}"; do
    top=${CONTAINER_TOP[$h]}
    deadline=$((SECONDS + 20))
    while kill -0 "$top" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    if kill -0 "$top" 2>/dev/null; then
      echo "$h: container did not halt in 20 s; killing it" >&2
      [ -z "${CONTAINER_PID1[$h]:-}" ] || kill -KILL "${CONTAINER_PID1[$h]}" 2>/dev/null || true
      for nspawn in $(pgrep -P "$top"); do kill -KILL "$nspawn" 2>/dev/null || true; done
      kill -KILL "$top" 2>/dev/null || true
    fi
    wait "$top" 2>/dev/null || true
  done
  for h in "${CONTAINERS[@]}"; do
    name=$(container_name "$h")
    for cg in ${CONTAINER_CGROUPS[$h]}; do
      deadline=$((SECONDS + 10))
      while [ -d "$cg" ]; do
        find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
        [ -d "$cg" ] && [ $SECONDS -lt $deadline ] || break
        sleep 0.1
      done
      [ -d "$cg" ] && echo "warning: could not remove cgroup $cg" >&2
    done
    rm -rf "/run/systemd/nspawn/propagate/$name"
  done
  return 0
}
# scenario_cleanup reads the exit status from $?: give it back, without
# errexit. A signal is handled when the running command ends, maybe inside a
# function whose output goes to a file: the cleanup writes to the script's
# own stdout and stderr, kept as fds 7 and 8.
exec 7>&1 8>&2
trap 'rc=$?; { containers_stop $rc; set +e; (exit $rc); scenario_cleanup; } >&7 2>&8' EXIT
