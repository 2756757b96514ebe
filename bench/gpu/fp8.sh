#!/usr/bin/env bash
# FP8 training on a GPU host with FP8 tensor cores, in one call (docs/design/fp8.md):
#   build    aiscale and test_ops (cuda preset, sm_90)
#   check    the op harness's FP8 family (quantize and scale update against the host
#            reference, the FP8 GEMMs, the FP8 linear layer, GPT-2 and llama models in FP8)
#            and the 16-bit GEMM and model families beside it
#   loss     GPT-2 124M and 350M on the fortunes (data/fortunes, configs/gpt2-124m-gpu.toml):
#            the same steps in bf16 and in fp8, final training and validation losses
#   speed    bench language tokens/s in bf16 and fp8: GPT-2 124M, 350M, 1558M and the
#            Llama-3-1B shape, one GPU
#   profile  op tables of one GPT-2 350M step in bf16 and in fp8
#   layouts  tests/gpu2/fp8_gpu2.cpp (DDP, ZeRO-1/3, tp 2 with and without sequence
#            parallelism, pp 2, recomputed layers in fp8 against bf16), on 2 or more GPUs
# Logs under $OUT, a short table last. From the repository root, with .devdeps carried:
#   bash bench/gpu/fp8.sh [stages...]   (default: build check loss speed)
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
OUT=${OUT:-/tmp/aiscale-fp8-out}
mkdir -p "$OUT"
stages=" ${*:-build check loss speed} "
has() { [[ "$stages" == *" $1 "* ]]; }
source bench/gpu/host_common.sh
BIN=build/cuda/aiscale
OPS=build/cuda/tests/ops/test_ops
STEPS=${STEPS:-100}
RUNS=${RUNS:-/tmp/aiscale-fp8-runs}  # run directories (checkpoints): outside $OUT
rm -rf "$RUNS"
mkdir -p "$RUNS"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
{ nvidia-smi --query-gpu=index,name,memory.total,power.limit,driver_version --format=csv
  git rev-parse HEAD 2>/dev/null; } >> "$OUT/setup.log" 2>&1
table=()
row() { table+=("$(printf '%-44s %s' "$1" "$2")"); }
# field FILE KEY: KEY of FILE's last JSON line (or of a JSON document)
field() {
  python3 -c 'import json,sys
t=open(sys.argv[1]).read().strip()
try: j=json.loads(t)
except Exception: j=json.loads(t.splitlines()[-1])
v=j.get(sys.argv[2], "-")
print(round(v, 4) if isinstance(v, float) else v)' "$1" "$2" 2>/dev/null || echo "-"
}

if has build; then
  targets=(aiscale test_ops)
  has layouts && targets+=(aiscale_fp8_gpu2_tests)
  build_cuda "${targets[@]}"
else
  use_devdeps
fi

if has check; then
  log "check: the op harness's fp8, matmul and model families"
  for op in ${CHECK_OPS:-fp8 matmul gpt_model llama_model}; do
    timeout 600 "$OPS" test --backend cuda --op "$op" > "$OUT/check_op.log" 2>&1
    row "test_ops --op $op" "exit $?: $(grep -E '^(OK|FAILED)' "$OUT/check_op.log" | tail -1)"
    cat "$OUT/check_op.log" >> "$OUT/check.log"
    grep -E "loss over 30 steps" "$OUT/check_op.log" | sed 's/^ *//' >> "$OUT/model_losses.txt"
  done
  rm -f "$OUT/check_op.log"
fi

if has loss; then
  log "loss: GPT-2 124M and 350M on the fortunes, bf16 and fp8, $STEPS steps"
  for model in gpt2-124m gpt2-350m; do
    for p in bf16 fp8; do
      name="${model}-$p"
      timeout 300 "$BIN" train --config configs/gpt2-124m-gpu.toml --model "$model" --precision "$p" \
        --set train.steps="$STEPS" --set run.dir="$RUNS" --set run.name="$name" -q \
        >> "$OUT/train.log" 2>&1
      rc=$?
      s="$RUNS/$name/summary.json"
      [ -f "$s" ] && { echo "$name $(tr -d '\n' < "$s")" >> "$OUT/summaries.txt"; }
      row "train $model $p" "exit $rc: final loss $(field "$s" final_loss), val $(field "$s" val_loss), $(field "$s" tokens_per_s) tokens/s"
    done
  done
fi

if has speed; then
  log "speed: bench language bf16 and fp8"
  for spec in "gpt2-124m 16" "gpt2-350m 16" "gpt2-1558m 8" "llama3-1b-shape 4"; do
    read -r model batch <<< "$spec"
    for p in bf16 fp8; do
      f="$RUNS/speed_${model}_$p.jsonl"
      verbose=0
      [ "$model" = gpt2-124m ] && verbose=1  # the GEMM plans, FP8 or not, in speed.log
      AISCALE_CUDA_VERBOSE=$verbose timeout 300 "$BIN" bench language --model "$model" --batch "$batch" --seq 1024 --device cuda \
        --precision "$p" --steps "${SPEED_STEPS:-30}" --warmup 10 --output "$f" >> "$OUT/speed.log" 2>&1
      row "speed $model B$batch $p" "exit $?: $(field "$f" tokens_per_s_per_device) tokens/s, mfu $(field "$f" mfu)"
      cat "$f" >> "$OUT/speed.jsonl" 2>/dev/null
    done
  done
fi

if has profile; then
  log "profile: op tables of GPT-2 350M, bf16 and fp8"
  for p in bf16 fp8; do
    timeout 300 "$BIN" bench language --model gpt2-350m --batch 16 --seq 1024 --device cuda \
      --precision "$p" --steps 6 --warmup 3 --profile 2 --output "$RUNS/profile_$p.jsonl" \
      > "$OUT/profile_$p.log" 2>&1
    row "profile 350M $p" "exit $? ($OUT/profile_$p.log)"
  done
fi

if has layouts; then
  log "layouts: fp8 against bf16 in the multi-GPU layouts"
  if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
    env -u CUDA_VISIBLE_DEVICES timeout 900 ctest --test-dir build/cuda -R '^fp8\.' --output-on-failure \
      > "$OUT/layouts.log" 2>&1
    row "gpu2 fp8 layouts" "exit $?: $(grep -E 'tests passed|tests failed' "$OUT/layouts.log" | tail -1)"
  else
    row "gpu2 fp8 layouts" "skipped: fewer than 2 GPUs"
  fi
fi

echo "== fp8 ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(git rev-parse --short HEAD 2>/dev/null))"
printf '%s\n' "${table[@]}"
[ -f "$OUT/model_losses.txt" ] && cat "$OUT/model_losses.txt"
exit 0
