#!/usr/bin/env bash
# The test command: installs what it needs, builds from scratch and runs the
# whole suite through ctest. Exits non-zero on any failure.
#
#   build/      g++, warnings as errors: the binaries users run (build/bin/)
#   build-san/  clang, AddressSanitizer + UBSan: every unit test again, and
#               the libFuzzer targets for a bounded time
#   build-tsan/ clang, ThreadSanitizer: the tests of the data threads and
#               their send queues (the only code that runs on several threads),
#               alone and in whole nodes (in-process, soft fabric), and the
#               verbs send queue on the fake HCA
#   build-pkg/  the Debian package, installed, checked and purged
#               (packaging/test-deb.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

# ccache keeps object files between runs on the same machine (CI reuses the
# session's machine); a cold cache costs nothing.
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi

echo "== build (g++, -Werror)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}"
cmake --build build
ctest --test-dir build --output-on-failure --timeout 300 -j"$(nproc)"

echo "== build-san (clang, ASan+UBSan, libFuzzer)"
CC=clang CXX=clang++ cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DIPOIBD_SANITIZE=ON -DIPOIBD_FUZZ=ON "${launcher[@]}"
cmake --build build-san
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-san --output-on-failure --timeout 300 -j"$(nproc)"

echo "== build-tsan (clang, ThreadSanitizer: data threads)"
CC=clang CXX=clang++ cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIPOIBD_TSAN=ON "${launcher[@]}"
cmake --build build-tsan --target data_worker_tests fabric_tests inprocess_tests $(test -f /usr/include/infiniband/verbs.h && echo verbs_fake_hca_tests)
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
build-tsan/bin/data_worker_tests
build-tsan/bin/fabric_tests --gtest_filter='FabricKey/SendQueueTest.*'
build-tsan/bin/inprocess_tests --gtest_filter='DataThreads.*'
if [ -f /usr/include/infiniband/verbs.h ]; then  # the verbs send queue on the fake HCA (tests/hw)
  build-tsan/bin/verbs_fake_hca_tests --gtest_filter='FakeHcaSendQueue.*'
fi

echo "== package (build, dpkg -i, verify, lintian, purge)"
rc=0
packaging/test-deb.sh || rc=$?
if [ "$rc" -eq 77 ]; then
  echo "package check skipped (not root)"
elif [ "$rc" -ne 0 ]; then
  exit "$rc"
fi
