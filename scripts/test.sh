#!/usr/bin/env bash
# Install dependencies, build everything (CUDA too when nvcc is present: compiled, its
# tests skip without a GPU) and run the whole test suite except tests labelled slow; then
# the sanitizer stage: the unit tests built with ASan + UBSan (the `asan` preset, clang)
# and each libFuzzer target for a few seconds (scripts/fuzz.sh).
# usage: bash scripts/test.sh [extra ctest arguments, e.g. -L unit or -R Gpt]
#   AISCALE_SANITIZERS=0 skips the sanitizer stage; AISCALE_FUZZ_SECONDS (default 8) is
#   the time of each fuzz target.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
preset=cpu
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then preset=cuda; fi
echo "== configure and build (preset $preset)"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -- -j"$(nproc)" 2>&1 | grep -v '^\[' || true
cmake --build --preset "$preset" -- -j"$(nproc)" >/dev/null  # fail here if the build failed
echo "== tests (ctest -LE slow)"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
ctest --preset "$preset" -LE slow --timeout 900 "$@"

[ "${AISCALE_SANITIZERS:-1}" = 0 ] && exit 0
echo "== sanitizers: unit tests under ASan + UBSan (preset asan), then the fuzz targets"
cmake --preset asan >/dev/null
# Only what the unit tests and the fuzzers need (not the MPI, ops or bench programs).
cmake --build build/asan --target aiscale_tests test_ops fuzz_all -- -j"$(nproc)" 2>&1 | grep -v '^\[' || true
cmake --build build/asan --target aiscale_tests test_ops fuzz_all -- -j"$(nproc)" >/dev/null
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --preset asan -L unit --timeout 900 -j"$(nproc)"
AISCALE_FUZZ_BUILD_DIR=build/asan bash scripts/fuzz.sh "${AISCALE_FUZZ_SECONDS:-8}"
