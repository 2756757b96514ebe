#!/usr/bin/env bash
# The paths a user walks first, on a GPU host: the decoder of `aiscale sample --device cuda`
# against the CPU model and its speed (`aiscale bench sample`, 1 and 64 streams of GPT-2
# 124M), sampling a trained run on the GPU, the errors of GPU ranks (a layout the ranks
# cannot hold, a rank-local failure, a resume into another layout) as a user sees them
# through `aiscale launch`, and the whole GPU test set (label gpu: torchrun on 2 GPUs, the
# resume matrix, every layout). Logs under $OUT, a short table last. From the repository
# root, with .devdeps (the Debian packages the build needs) and data/fortunes (the tokenized
# fortunes) carried:
#   bash bench/gpu/user_paths.sh [stages...]   stages: build decoder sample errors tests
#   (default: all)
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
OUT=${OUT:-/tmp/aiscale-user-paths-out}
mkdir -p "$OUT"
stages=" ${*:-build decoder sample errors tests} "
has() { [[ "$stages" == *" $1 "* ]]; }
source bench/gpu/host_common.sh
BIN=build/cuda/aiscale
NGPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
{ nvidia-smi --query-gpu=index,name,memory.total,power.limit,driver_version --format=csv
  git rev-parse HEAD 2>/dev/null; } >> "$OUT/setup.log" 2>&1
table=()
row() { table+=("$(printf '%-44s %s' "$1" "$2")"); }

if has build; then
  if has tests; then build_cuda all; else build_cuda aiscale aiscale_gpu_sample_tests; fi
else
  use_devdeps
fi

if has decoder; then
  log "decoder against the CPU model"
  timeout 300 build/cuda/tests/gpu_sample/aiscale_gpu_sample_tests > "$OUT/decoder.log" 2>&1
  row "decoder tests (exit code)" "$? ($(grep -c '\[       OK' "$OUT/decoder.log") ok, $(grep -c '\[  FAILED' "$OUT/decoder.log") failed)"
fi

if has sample; then
  log "bench sample: GPT-2 124M on one GPU, 1 and 64 streams"
  for streams in 1 64; do
    CUDA_VISIBLE_DEVICES=0 timeout 120 "$BIN" bench sample --device cuda --model gpt2-124m \
      --streams "$streams" --prompt-len 64 --tokens 256 --output "$OUT/bench_sample.jsonl" \
      >> "$OUT/sample.log" 2>&1
    row "bench sample, $streams stream(s) (exit code)" "$?"
  done
  python3 - "$OUT/bench_sample.jsonl" >> "$OUT/sample.log" 2>&1 <<'PY'
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    print("streams", j.get("streams"), {k: v for k, v in j.items() if "tokens_per_s" in k or "step" in k})
PY
  grep '^streams' "$OUT/sample.log" | while read -r line; do row "  decode" "$line"; done
  if command -v nsys > /dev/null; then
    log "nsys: the kernels of one decoding stream"
    CUDA_VISIBLE_DEVICES=0 timeout 120 nsys profile -o "$OUT/sample_profile" --force-overwrite true \
      --stats=true "$BIN" bench sample --device cuda --model gpt2-124m --streams 1 \
      --prompt-len 64 --tokens 256 > "$OUT/sample_profile.log" 2>&1
    rm -f "$OUT"/sample_profile.nsys-rep "$OUT"/sample_profile.sqlite
  fi
  log "train a quick-start model on the GPU, then sample it there"
  timeout 120 "$BIN" train -q -c configs/quickstart.toml --set train.device=cuda \
    train.precision=bf16 train.steps=60 run.dir="$OUT/runs" run.name=gpu_sample \
    > "$OUT/sample_train.log" 2>&1
  ( time timeout 60 "$BIN" sample --run "$OUT/runs/gpu_sample" --device cuda --prompt "The" \
      --tokens 120 --min-tokens 120 --temperature 0.8 --top-k 40 --seed 1 ) \
    > "$OUT/sample_gpu.txt" 2>&1
  row "sample --device cuda (exit code)" "$(grep -c 'tokens/s' "$OUT/sample_gpu.txt") summary line(s): $(grep 'tokens/s' "$OUT/sample_gpu.txt" | tail -1)"
fi

# One case of the error paths: its exit code, how many "error:" lines the ranks printed,
# and launch's summary line.
error_case() {
  local name=$1; shift
  local log_file="$OUT/errors_$name.log"
  timeout 240 "$@" > "$log_file" 2>&1
  local code=$?
  local summary
  summary=$(grep '^launch: [0-9]* of' "$log_file" | tail -1 | cut -c1-90)
  row "errors: $name" "exit $code, $(grep -c 'error: ' "$log_file") error line(s); ${summary:-no summary}"
}

if has errors && [ "$NGPUS" -ge 2 ]; then
  log "errors of GPU ranks"
  gpu=(--set train.device=cuda train.precision=bf16 train.steps=12 train.warmup_steps=2
       run.dir="$OUT/runs")
  cfg=(-q -c configs/quickstart.toml)
  # On 2 ranks, and on 4 where the host has them: tensor parallelism of 3 (no rank count
  # here divides by it), tensor x pipeline parallelism that needs twice the ranks, a
  # rank-local failure of the last rank, and a tp 2 run resumed as data parallelism.
  sizes=(2)
  [ "$NGPUS" -ge 4 ] && sizes+=(4)
  for n in "${sizes[@]}"; do
    error_case "n${n}_tp3" "$BIN" launch -n "$n" -- train "${cfg[@]}" "${gpu[@]}" \
      run.name="n${n}_tp3" parallel.tensor_parallel=3
    error_case "n${n}_tp2pp${n}" "$BIN" launch -n "$n" -- train "${cfg[@]}" "${gpu[@]}" \
      run.name="n${n}_tp2pp${n}" parallel.tensor_parallel=2 parallel.pipeline_parallel="$n" \
      parallel.microbatches="$n"
    error_case "n${n}_rank_local" env AISCALE_FAULT="fail@3:$((n - 1))" "$BIN" launch -n "$n" \
      -- train "${cfg[@]}" "${gpu[@]}" run.name="n${n}_fail"
    timeout 240 "$BIN" launch -n "$n" -- train "${cfg[@]}" "${gpu[@]}" run.name="n${n}_tp2" \
      parallel.tensor_parallel=2 > "$OUT/train_n${n}_tp2.log" 2>&1
    row "train tp 2 on $n ranks (exit code)" "$?"
    error_case "n${n}_resume_tp2_as_dp${n}_ok" "$BIN" launch -n "$n" -- train -q \
      --resume "$OUT/runs/n${n}_tp2" --set parallel.tensor_parallel=1 train.steps=16
  done
fi

if has tests; then
  log "the GPU test set (ctest -L gpu)"
  # CTEST_ARGS narrows it (e.g. -R "^(pp|resume)\."), for a host with little time left.
  (cd build/cuda && timeout 420 ctest -L gpu --timeout 300 ${CTEST_ARGS:-} > "$OUT/ctest_gpu.log" 2>&1)
  row "ctest -L gpu" "$(grep -E 'tests passed' "$OUT/ctest_gpu.log" | tail -1)"
  grep -E '\(Failed\)|\(Timeout\)|\*\*\*' "$OUT/ctest_gpu.log" | head -10 | while read -r line; do row "  failed" "$line"; done
fi

echo
echo "== $(date -u +%F) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$NGPUS, $(git rev-parse --short HEAD 2>/dev/null)"
printf '%s\n' "${table[@]}"
