#!/usr/bin/env bash
# Install dependencies, build everything (CUDA too when nvcc is found: compiled, its tests
# skip without a GPU) and run the whole test suite except tests labelled slow; check that
# the build takes its libraries from source folders and finds nvcc on PATH; then the
# sanitizer stage: the unit tests that handle outside input built with ASan + UBSan (the
# `asan` preset, clang; tests/sanitize_selection.cmake says which and why) and each
# libFuzzer target for a few seconds (scripts/fuzz.sh); then the container image with the
# quick start inside it (scripts/check_packaging.sh container). Ends with each stage's wall
# time.
# usage: bash scripts/test.sh [extra ctest arguments, e.g. -L unit or -R Gpt]
#   AISCALE_SANITIZERS=0 skips the sanitizer stage; AISCALE_CONTAINER=0 the container
#   image stage; AISCALE_FUZZ_SECONDS (default 8) is
#   the time of each fuzz target; AISCALE_CCACHE=0 builds without ccache; AISCALE_CCACHE_DIR
#   puts the compiler cache elsewhere than ccache's default (under $HOME, so it survives
#   between runs where $HOME does).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=$(nproc)

# Each stage's wall time, printed as a table when the script ends (also on a failure).
stage_names=() stage_secs=() stage_start=0 stage_name=""
suite_start=$(date +%s%N)
begin() { stage_name=$1; stage_start=$(date +%s%N); echo "== $1"; }
end() {
  stage_names+=("$stage_name")
  stage_secs+=("$(( ($(date +%s%N) - stage_start) / 1000000 ))")  # milliseconds
  stage_name=""
}
report() {
  local rc=$?
  [ -n "$stage_name" ] && { end; stage_names[-1]+=" (FAILED)"; }
  echo "== wall time per stage ($(uptime | sed 's/.*load average/load average/'))"
  for i in "${!stage_names[@]}"; do
    printf '%6d.%d s  %s\n' $((stage_secs[i] / 1000)) $((stage_secs[i] % 1000 / 100)) "${stage_names[$i]}"
  done
  local total=$(( ($(date +%s%N) - suite_start) / 1000000 ))
  printf '%6d.%d s  total\n' $((total / 1000)) $((total % 1000 / 100))
  exit $rc
}
trap report EXIT

begin "setup (scripts/setup.sh)"
bash scripts/setup.sh
end

# ccache (Debian's) for every preset: a clean clone at the same path recompiles nothing
# that an earlier run compiled. CCACHE_BASEDIR makes the cached commands independent of
# the clone's folder where they can be (the source folder is still compiled into the
# binary, so a clone elsewhere hits only where that does not matter).
launchers=()
if [ "${AISCALE_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
  [ -n "${AISCALE_CCACHE_DIR:-}" ] && export CCACHE_DIR=$AISCALE_CCACHE_DIR
  launchers=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
             -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  export AISCALE_CCACHE=1
  ccache -z >/dev/null
fi

build() {  # PRESET-or-DIR TARGET...: quiet unless it fails
  local dir=$1; shift
  local log="$dir/build.log" targets=()
  [ $# -gt 0 ] && targets=(--target "$@")
  if ! cmake --build "$dir" "${targets[@]}" -- -j"$jobs" >"$log" 2>&1; then
    grep -v '^\[' "$log" | tail -60; echo "build of $dir FAILED (log: $log)"; return 1
  fi
  grep -E 'warning:' "$log" | sort -u | head -20 || true
}

preset=cpu
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then preset=cuda; fi
begin "configure and build (preset $preset)"
cmake --preset "$preset" "${launchers[@]}" >/dev/null
build "build/$preset"
end

export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# The unit tests are independent processes: side by side. The others (MPI ranks, Slurm,
# timing-sensitive launches) one at a time, as they were written to run.
begin "unit tests (ctest -L unit -LE slow -j$jobs)"
ctest --preset "$preset" -L unit -LE slow --timeout 900 -j"$jobs" "$@"
end
begin "other tests (ctest -LE 'unit|slow': mpi, gpu, ...)"
ctest --preset "$preset" -LE 'unit|slow' --timeout 900 "$@"
end

begin "build from source folders (.ci/check_dependencies.sh)"
bash .ci/check_dependencies.sh build/ci-deps
end
begin "nvcc from PATH (.ci/check_nvcc_on_path.sh)"
bash .ci/check_nvcc_on_path.sh "" build/ci-nvcc-path
end

if [ "${AISCALE_SANITIZERS:-1}" != 0 ]; then
  begin "sanitizer build (preset asan: aiscale_tests, test_ops, fuzz_all)"
  cmake --preset asan "${launchers[@]}" >/dev/null
  # Only what the unit tests and the fuzzers need (not the MPI, ops or bench programs).
  build build/asan aiscale_tests test_ops fuzz_all
  end
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  begin "sanitizer unit tests (ctest --preset asan -L unit)"
  ctest --preset asan -L unit --timeout 900 -j"$jobs"
  end
  begin "fuzz targets (${AISCALE_FUZZ_SECONDS:-8} s each)"
  AISCALE_FUZZ_BUILD_DIR=build/asan bash scripts/fuzz.sh "${AISCALE_FUZZ_SECONDS:-8}"
  end
fi
# The OCI image built with podman from a debootstrapped Debian 12 and the quick start run
# inside it (scripts/check_packaging.sh container; its base and layers are cached under
# ~/.cache/aiscale-packaging). Where podman cannot run containers, or no Debian mirror is
# reachable for the first base, it says why and is skipped (exit 77).
if [ "${AISCALE_CONTAINER:-1}" != 0 ]; then
  begin "container image and the quick start in it (scripts/check_packaging.sh container)"
  rc=0
  bash scripts/check_packaging.sh container || rc=$?
  if [ "$rc" = 77 ]; then stage_name+=" (skipped)"; elif [ "$rc" != 0 ]; then exit "$rc"; fi
  end
fi
[ -n "${launchers[*]}" ] && ccache -s | grep -E 'Hits|Misses' | head -3 || true
