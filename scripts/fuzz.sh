#!/usr/bin/env bash
# Runs aiscale's libFuzzer targets (tests/fuzz) over their seed corpora for a while each.
# usage: bash scripts/fuzz.sh [SECONDS_PER_TARGET (default 10)] [TARGET ...]
#   e.g. bash scripts/fuzz.sh 600 study     ten minutes on the study TOML parser
# Builds the `asan` preset's fuzz_all (clang, ASan + UBSan) unless AISCALE_FUZZ_BUILD_DIR
# names a folder already built. New inputs go to <build>/fuzz/corpus/<target> (the seeds
# in the repository are not touched); a crash, leak, hang (over 10 s for one input) or
# sanitizer report leaves its input in <build>/fuzz/artifacts/<target> and fails the script.
# Replay one such input: <build>/tests/fuzz/fuzz_<target> <file>.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
seconds=${1:-10}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(train_config study token_shard safetensors checkpoint hf_model gpt2_vocab hf_tokenizer_json analysis catalog)
build=${AISCALE_FUZZ_BUILD_DIR:-}
if [ -z "$build" ]; then
  build=build/asan
  cmake --preset asan >/dev/null
  cmake --build "$build" --target fuzz_all -- -j"$(nproc)" >/dev/null
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for t in "${targets[@]}"; do
  exe="$build/tests/fuzz/fuzz_$t"
  [ -x "$exe" ] || { echo "fuzz: no program $exe (known targets: tests/fuzz/targets.h)"; exit 2; }
  work="$build/fuzz/corpus/$t" artifacts="$build/fuzz/artifacts/$t"
  mkdir -p "$work" "$artifacts"
  log="$build/fuzz/$t.log"
  if "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
       -artifact_prefix="$artifacts/" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz $t: ${seconds}s, ${runs:-?} inputs, no crash (corpus $(ls "$work" | wc -l) inputs)"
  else
    echo "fuzz $t: FAILED, see $log; the input is in $artifacts/"
    grep -E 'ERROR|SUMMARY|invariant|terminate called|what\(\)' "$log" | head -5 || true
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}"
  exit 1
fi
