#!/usr/bin/env bash
# Builds everything twice (warnings as errors; then AddressSanitizer + UBSan) and runs every
# test with ctest, then builds the libFuzzer harnesses (clang) and runs each one for a short,
# fixed time (fuzz/run.sh). This is the README's test command and what CI runs. Among the tests
# of the first build, package.relocatable compiles the whole tree at Release (-O3, what users
# build) with warnings as errors, as the relocatable package (tools/package.sh), which then runs
# in a chroot without its dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
jobs=$(nproc 2>/dev/null || echo 2)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

echo "== build (warnings are errors) =="
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCZ_WERROR=ON >/dev/null
cmake --build build -j "$jobs"
echo "== tests =="
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== build (AddressSanitizer + UBSan) =="
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCZ_WERROR=ON -DCZ_SANITIZE=ON \
      -DCZ_WITH_CUDA=OFF >/dev/null
cmake --build build-asan -j "$jobs"
echo "== tests under sanitizers =="
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE nosan

fuzz_secs=25
echo "== fuzz (libFuzzer, $fuzz_secs s per harness) =="
bash fuzz/run.sh "$fuzz_secs"
