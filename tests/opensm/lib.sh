# Helpers shared by the OpenSM-under-ibsim harness scripts (start.sh,
# stop.sh, sim-run.sh, smoke.sh). Source it; nothing runs at source time.
#
# Safety rules: every wait is bounded, and a process is signalled only if it
# is one this harness started (its PID is in the env file and its
# environment carries this harness's IBSIM_SOCKNAME and OSMH_DIR).

# shellcheck disable=SC2034  # used by the scripts that source this
OSMH_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

osmh_log() { echo "opensm-harness: $*" >&2; }

# Path of libumad2sim.so (Debian: libumad2sim0, pulled in by ibsim-utils).
osmh_find_umad2sim() {
  local f
  for f in "/usr/lib/$(uname -m)-linux-gnu/umad2sim/libumad2sim.so" \
           /usr/lib/*/umad2sim/libumad2sim.so /usr/lib/umad2sim/libumad2sim.so \
           /usr/local/lib/umad2sim/libumad2sim.so; do
    [ -f "$f" ] && { echo "$f"; return 0; }
  done
  return 1
}

# Exits 77 (skip) when a tool is missing; scripts/install-deps.sh installs them.
osmh_require_tools() {
  local missing=() t
  for t in ibsim opensm saquery timeout; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
  done
  osmh_find_umad2sim >/dev/null || missing+=(libumad2sim.so)
  if [ ${#missing[@]} -gt 0 ]; then
    osmh_log "missing: ${missing[*]} (Debian: opensm ibsim-utils infiniband-diags; run scripts/install-deps.sh)"
    exit 77
  fi
}

# osmh_load_env ENVFILE|DIR: sources the env file written by start.sh.
osmh_load_env() {
  local f=${1:?env file or harness directory}
  [ -d "$f" ] && f=$f/env
  if [ ! -f "$f" ]; then
    osmh_log "no env file at $f"
    return 1
  fi
  # shellcheck disable=SC1090
  . "$f"
}

# True if PID exists and is not a zombie. (A wrapper that exited stays a
# zombie until PID 1 reaps it; kill -0 still succeeds on a zombie.)
osmh_alive() {
  local stat
  [ -n "${1:-}" ] && stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# True if PID is alive and was started by this harness. A process in the
# middle of execve() shows an empty /proc/PID/environ (the file reads the
# memory map that exec is replacing); start.sh looks at ibsim and OpenSM
# right after their timeout wrapper forked them, so an empty read is tried
# again (up to 1 s) before the PID is taken for not ours. One read in some
# hundreds came back empty that way and failed a CI run with "ibsim exited".
osmh_is_ours() {
  local pid=$1 envf
  for _ in $(seq 50); do
    osmh_alive "$pid" || return 1
    envf=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ") || return 1
    [ -n "$envf" ] && break
    sleep 0.02
  done
  grep -qxF "IBSIM_SOCKNAME=$IBSIM_SOCKNAME" <<<"$envf" &&
    grep -qxF "OSMH_DIR=$OSMH_DIR" <<<"$envf"
}

# osmh_stop_pid PID NAME: TERM, up to 5 s, then KILL, up to 2 s. Only our PIDs.
osmh_stop_pid() {
  local pid=$1 name=$2
  osmh_is_ours "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 50); do
    osmh_alive "$pid" || return 0
    sleep 0.1
  done
  osmh_log "$name (pid $pid) ignored SIGTERM for 5 s; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null
  for _ in $(seq 20); do
    osmh_alive "$pid" || return 0
    sleep 0.1
  done
  osmh_log "$name (pid $pid) still alive after SIGKILL"
  return 1
}

# osmh_child_of PID: prints the (first) child PID of PID, waiting up to 2 s
# for it to appear. Used to find ibsim/opensm under their timeout wrapper.
osmh_child_of() {
  local c
  for _ in $(seq 40); do
    c=$(cat "/proc/$1/task/$1/children" 2>/dev/null)
    c=${c%% *}
    [ -n "$c" ] && { echo "$c"; return 0; }
    kill -0 "$1" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# True if ibsim has bound its abstract socket "<IBSIM_SOCKNAME>:<what>".
# /proc/net/unix shows abstract names with '@' for the NUL bytes; ibsim's
# names carry a trailing NUL, hence "@name@".
osmh_socket_bound() {
  grep -qF "@$IBSIM_SOCKNAME:$1@" /proc/net/unix
}

# PIDs of live processes attached to this harness's fabric: libumad2sim
# preloaded and our IBSIM_SOCKNAME in their environment (ibsim itself, and
# the harness scripts, have no LD_PRELOAD). Read-only.
osmh_fabric_pids() {
  local p envf
  for p in /proc/[0-9]*; do
    envf=$(tr '\0' '\n' 2>/dev/null <"$p/environ") || continue
    grep -qxF "IBSIM_SOCKNAME=$IBSIM_SOCKNAME" <<<"$envf" &&
      grep -q "^LD_PRELOAD=.*umad2sim" <<<"$envf" && echo "${p#/proc/}"
  done
  return 0
}

# osmh_console CMD: sends one command line to ibsim's console (a FIFO ibsim
# holds open read-write, so the write never blocks while ibsim lives).
osmh_console() {
  osmh_is_ours "$OSMH_IBSIM_PID" || { osmh_log "ibsim is not running"; return 1; }
  # shellcheck disable=SC2016  # expanded by the inner bash
  timeout 2 bash -c 'printf "%s\n" "$1" >"$2"' _ "$1" "$OSMH_IBSIM_CONSOLE"
}

# osmh_console_query CMD: sends CMD and prints what ibsim answered (the text
# appended to its log up to the next "sim> " prompt; at most 3 s).
osmh_console_query() {
  local before out
  before=$(stat -c %s "$OSMH_IBSIM_LOG")
  osmh_console "$1" || return 1
  for _ in $(seq 30); do
    out=$(tail -c +"$((before + 1))" "$OSMH_IBSIM_LOG")
    if [[ $out == *"sim> "* ]]; then
      printf '%s\n' "${out%sim> *}"
      return 0
    fi
    sleep 0.1
  done
  osmh_log "ibsim did not answer '$1' within 3 s"
  return 1
}

# Frees ibsim client slots held by dead processes. ibsim has 10 slots (one
# is OpenSM's) and only frees a slot when a client disconnects at exit
# (atexit) or when a write to it fails; a client killed by a signal keeps
# its slot. The console commands "Attached" and "X <n>" fix that.
osmh_reap_clients() {
  local line id pid
  while read -r line; do
    [[ $line =~ ^Client\ ([0-9]+):\ pid\ ([0-9]+) ]] || continue
    id=${BASH_REMATCH[1]} pid=${BASH_REMATCH[2]}
    if ! osmh_alive "$pid"; then
      osmh_log "freeing ibsim client slot $id of dead pid $pid"
      osmh_console "X $id"
    fi
  done < <(osmh_console_query Attached)
}
