#!/usr/bin/env bash
# The test command: installs what it needs, builds from scratch and runs the
# whole suite. Exits non-zero on any failure. Each configuration is built
# once, with only what its stage runs:
#
#   build/      g++, warnings as errors, configured as the Debian package is
#               (Release, dpkg-buildflags' hardening, prefix /usr): first
#               its programs, packaged by packaging/build-deb.sh into
#               build-pkg/ (the .deb that the nspawn test boots and the
#               package check installs, checks and purges), then every test
#               and benchmark; the whole ctest suite (unit, in-process,
#               scenarios, OpenSM, systemd units, the package in nspawn
#               containers) runs the programs the package ships
#   build-san/  clang, AddressSanitizer + UBSan: every test again but the
#               nspawn one (which runs the package's build), and the
#               libFuzzer targets for a bounded time; no benchmarks
#   build-tsan/ clang, ThreadSanitizer: the tests of the data threads and
#               their send queues (the only code that runs on several threads),
#               alone and in whole nodes (in-process, soft fabric), and the
#               verbs send queue on the fake HCA
#
# build-san/ is built at nice 19 while build/'s tests run, build-tsan/
# while build-san/'s do: a build takes the CPU the tests leave idle.
#
# The budget (docs/testing.md): 25 minutes on a fresh 2-CPU machine, the
# downloads (apt-get, debootstrap) aside, which are timed apart. No test
# may bound load-dependent work by a fixed deadline: bound it by progress.
# The summary at the end prints each stage's time and test count.
set -euo pipefail
cd "$(dirname "$0")/.."

STAGES=()
stage_start=0
stage_name=""
stage() {  # stage NAME: ends the running stage, starts NAME
  stage_end
  stage_name=$1
  stage_start=$SECONDS
  echo "== $stage_name"
}
stage_end() {
  [ -n "$stage_name" ] || return 0
  STAGES+=("$(printf '%-44s %5d s' "$stage_name" $((SECONDS - stage_start)))")
  stage_name=""
}
COUNTS=()
count_ctest() {  # count_ctest LABEL DIR [ctest args]: tests ctest runs there
  local label=$1 dir=$2
  shift 2
  COUNTS+=("$(printf '%-44s %5d' "$label" "$(ctest --test-dir "$dir" -N "$@" | sed -n 's/^Total Tests: //p')")")
}
summary() {  # summary EXIT_STATUS
  local rc=$1
  stage_end
  echo
  echo "== summary ($( [ $rc -eq 0 ] && echo passed || echo "FAILED, exit $rc"))"
  printf '%s\n' "${STAGES[@]}"
  local downloads=0 line
  for line in "${STAGES[@]}"; do
    case $line in *"[download]"*) downloads=$((downloads + $(echo "$line" | awk '{print $(NF-1)}'))) ;; esac
  done
  printf '%-44s %5d s\n' "all" "$SECONDS"
  # The budget is a figure to watch, not a test: a slow machine is no failure.
  printf '%-44s %5d s (budget on a fresh 2-CPU machine: 1500 s)\n' "all but the downloads" $((SECONDS - downloads))
  if [ ${#COUNTS[@]} -gt 0 ]; then
    echo "tests per stage:"
    printf '%s\n' "${COUNTS[@]}"
  fi
}

# A build beside a test stage: the next tree's build runs at the lowest CPU
# priority while ctest runs the last one's tests, and takes only the CPU
# time they leave idle (they wait on sweeps, retries and peers more than
# they compute). Tests bound their waits by events or progress, not by
# deadlines (docs/testing.md), and pass beside a CPU hog at full priority
# (stress-ng --cpu 2); a nice 19 build is a gentler neighbour than that.
bg_pid=""
bg_log=""
bg_build() {  # bg_build LOG FUNCTION: runs FUNCTION at nice 19 in the background
  bg_log=$1
  ( renice -n 19 "$BASHPID" >/dev/null && "$2" ) >"$bg_log" 2>&1 &
  bg_pid=$!
}
renice_tree() {  # renice_tree NICE PID: PID and every process under it
  local child
  renice -n "$1" -p "$2" >/dev/null 2>&1 || true
  for child in $(pgrep -P "$2" 2>/dev/null); do renice_tree "$1" "$child"; done
}
bg_wait() {  # bg_wait WHAT: waits for the background build, fails with its log's tail
  local pid=$bg_pid
  bg_pid=""
  # What is left of the build is the stage now: back at this script's
  # priority, or a CPU hog beside the command (stress-ng at nice 0) would
  # leave it 1.5% of the machine.
  renice_tree "$(nice)" "$pid"
  if ! wait "$pid"; then
    tail -n 60 "$bg_log" >&2
    echo "$1 failed (its log: $bg_log)" >&2
    exit 1
  fi
  echo "$1: done (its log: $bg_log)"
}
kill_tree() {  # kill_tree PID: PID and every process under it (ours only)
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill -TERM "$1" 2>/dev/null || true
}
bg_stop() {  # on exit: a build still running beside a failed stage is stopped
  if [ -n "$bg_pid" ]; then
    kill_tree "$bg_pid"
    wait "$bg_pid" 2>/dev/null || true
  fi
}
trap 'summary_rc=$?; bg_stop; summary "$summary_rc"' EXIT

stage "deps: apt-get [download]"
scripts/install-deps.sh

# ccache keeps object files between runs on the same machine (CI reuses the
# session's machine); a cold cache costs little.
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # What ccache needs to cache compiles that use a precompiled header (the
  # test programs' one, tests/unit/CMakeLists.txt).
  export CCACHE_SLOPPINESS=pch_defines,time_macros
fi
jobs=$(nproc)
# ctest runs twice as many tests as there are CPUs: most tests wait (on an
# SM sweep, a retry, a peer), and at one per CPU the CPUs were more than
# half idle through the ASan run. Every wait is bounded by its event or by
# progress, never by a deadline the load could outlast (docs/testing.md).
test_jobs=$((jobs * 2))

# The package first: its Depends name what the nspawn root must hold, and
# the root's download then runs as a stage of its own. Its programs are
# built in build/, configured as the package is (IPOIBD_DEB_TREE), so the
# tests below run what the package ships and nothing is built twice.
stage "package: build/'s programs, the .deb"
mkdir -p build-pkg
# The test programs at -O1 (IPOIBD_TEST_CXX_FLAGS): the code they test
# keeps the package's -O3.
DEB=$(IPOIBD_DEB_TREE=build packaging/build-deb.sh build-pkg -DIPOIBD_TEST_CXX_FLAGS=-O1 2>build-pkg/build.log |
  tail -n 1) ||
  { tail -n 50 build-pkg/build.log >&2; echo "packaging/build-deb.sh failed (build-pkg/build.log)" >&2; exit 1; }
[ -f "$DEB" ] || { echo "no package built" >&2; exit 1; }
echo "built $DEB"
export IPOIBD_NSPAWN_DEB=$DEB IPOIBD_DEB=$DEB

if [ "$(id -u)" -eq 0 ] && command -v debootstrap >/dev/null; then
  stage "nspawn root: debootstrap [download]"
  mapfile -t depends < <(dpkg-deb -f "$DEB" Depends | tr ',' '\n' | sed 's/|.*//; s/(.*)//; s/[[:space:]]//g' | grep .)
  bash tests/systemd/nspawn_root.sh "${depends[@]}" | tail -n 1
fi

# The rest of build/: tests and benchmarks, with the package's flags (no
# debug information: -g doubles the compile time of a test file, and a
# failure here is debugged in a developer's own build).
stage "build (g++, -Werror): the tests"
cmake --build build -j "$jobs"

# Line tables are enough for the sanitizers' reports (file:line in every
# frame) at a fraction of -g's cost.
san_build() {
  CC=clang CXX=clang++ cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS_DEBUG="-O0 -gline-tables-only" \
    -DIPOIBD_SANITIZE=ON -DIPOIBD_FUZZ=ON -DIPOIBD_BENCH=OFF "${launcher[@]}" &&
    cmake --build build-san -j "$jobs"
}
stage "tests (g++), build-san building beside them"
mkdir -p build-san
bg_build build-san/build.log san_build
count_ctest "build/ (g++)" build
ctest --test-dir build --output-on-failure --timeout 300 -j "$test_jobs"
stage "build-san (clang, ASan+UBSan, libFuzzer): the rest"
bg_wait "build-san (clang, ASan+UBSan, libFuzzer)"

tsan_targets=(data_worker_tests send_queue_tests data_threads_tests)
if [ -f /usr/include/infiniband/verbs.h ]; then  # the verbs send queue on the fake HCA (tests/hw)
  tsan_targets+=(verbs_fake_hca_tests)
fi
tsan_build() {
  CC=clang CXX=clang++ cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
    -DIPOIBD_TSAN=ON -DIPOIBD_BENCH=OFF "${launcher[@]}" &&
    cmake --build build-tsan -j "$jobs" --target "${tsan_targets[@]}"
}
stage "tests (ASan+UBSan, fuzzers), build-tsan building beside them"
mkdir -p build-tsan
bg_build build-tsan/build.log tsan_build
count_ctest "build-san/ (ASan+UBSan)" build-san
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-san --output-on-failure --timeout 300 -j "$test_jobs"
stage "build-tsan (clang, ThreadSanitizer: data threads): the rest"
bg_wait "build-tsan (clang, ThreadSanitizer: data threads)"

stage "tests (ThreadSanitizer)"
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
tsan_run() {  # tsan_run PROGRAM [FILTER]: runs it, counts its tests
  local filter=${2:-*}
  "build-tsan/bin/$1" --gtest_filter="$filter"
  COUNTS+=("$(printf '%-44s %5d' "build-tsan/ $1 ($filter)" \
    "$("build-tsan/bin/$1" --gtest_filter="$filter" --gtest_list_tests | grep -c '^  ')")")
}
tsan_run data_worker_tests
tsan_run send_queue_tests
tsan_run data_threads_tests
if [ -f /usr/include/infiniband/verbs.h ]; then
  tsan_run verbs_fake_hca_tests 'FakeHcaSendQueue.*'
fi

stage "package check (dpkg -i, verify, lintian, purge)"
rc=0
packaging/test-deb.sh || rc=$?
if [ "$rc" -eq 77 ]; then
  echo "package check skipped (not root)"
elif [ "$rc" -ne 0 ]; then
  exit "$rc"
fi
