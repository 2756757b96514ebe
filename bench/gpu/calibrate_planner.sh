#!/usr/bin/env bash
# The planner's calibration sweep on one GPU of this host: `aiscale bench language` over
# micro-batch (1, 2, 4, 8, 16) for GPT-2 124M, 350M and 774M, over width (512 ... 2048 at 12
# layers, heads of 64, micro-batch 8), bf16, T = 1024, and GPT-2 124M in fp32 at micro-batch
# 4 and 16; then the 2-GPU NCCL all-reduce for the intra-node bandwidth. It writes the JSON Lines
# the planner reads (`aiscale plan --calibration FILE`), named for the card, into $OUT and,
# with COMMIT_FIXTURE=1, as tests/plan/fixtures/calibration_sweep_<card>.jsonl, which
# PlanGemmCurve.RecordedSweepPointsWithinTenPercent then checks (every point, GPT-2 350M at
# micro-batch 1, 4 and 16 among them, within ±10 % of the curve fitted to the sweep).
# A configuration that does not fit in memory (774M at 16) is skipped and noted.
# From the repository root, with .devdeps carried:
#   bash bench/gpu/calibrate_planner.sh [stages...]   stages: build sweep allreduce (default: all)
# Environment: MODELS (default "gpt2-124m gpt2-350m gpt2-774m"), BATCHES ("1 2 4 8 16"),
#   WIDTHS ("512 1024 1280 1600 2048"), STEPS (30), WARMUP (10),
#   OUT (/tmp/aiscale-calibration-out), COMMIT_FIXTURE (0).
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/aiscale-calibration-out}
mkdir -p "$OUT"
stages=" ${*:-build sweep allreduce} "
has() { [[ "$stages" == *" $1 "* ]]; }
source bench/gpu/host_common.sh
BIN=build/cuda/aiscale
MODELS=${MODELS:-"gpt2-124m gpt2-350m gpt2-774m"}
BATCHES=${BATCHES:-"1 2 4 8 16"}
WIDTHS=${WIDTHS:-"512 1024 1280 1600 2048"}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-10}
NGPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr -cs 'A-Za-z0-9' '_' | tr 'A-Z' 'a-z' | sed 's/_$//')
card=${card:-unknown_gpu}
RESULT=$OUT/calibration_sweep_${card}.jsonl
{ nvidia-smi --query-gpu=index,name,power.limit,driver_version --format=csv
  git rev-parse HEAD 2>/dev/null; } >> "$OUT/setup.log" 2>&1

if has build; then build_cuda aiscale; else use_devdeps; fi
[ -x "$BIN" ] || { echo "no $BIN: run the build stage first" >&2; exit 1; }

if has sweep; then
  : > "$RESULT.tmp"
  for model in $MODELS; do
    for b in $BATCHES; do
      log "sweep: $model, micro-batch $b"
      if ! CUDA_VISIBLE_DEVICES=0 timeout 600 "$BIN" bench language --device cuda --model "$model" \
           --batch-size "$b" --seq-len 1024 --precision bf16 --steps "$STEPS" --warmup "$WARMUP" \
           --output "$RESULT.tmp" >> "$OUT/sweep.log" 2>&1; then
        log "sweep: $model at micro-batch $b did not run (see sweep.log; out of memory is expected for the largest)"
      fi
    done
  done
  for c in $WIDTHS; do
    log "sweep: 12 layers of width $c, micro-batch 8"
    CUDA_VISIBLE_DEVICES=0 timeout 600 "$BIN" bench language --device cuda --model gpt2-124m \
      --n-embd "$c" --n-head $((c / 64)) --batch-size 8 --seq-len 1024 --precision bf16 \
      --steps "$STEPS" --warmup "$WARMUP" --output "$RESULT.tmp" >> "$OUT/sweep.log" 2>&1 ||
      log "sweep: width $c did not run (see sweep.log)"
  done
  for b in 4 16; do
    log "sweep: gpt2-124m in fp32, micro-batch $b"
    CUDA_VISIBLE_DEVICES=0 timeout 600 "$BIN" bench language --device cuda --model gpt2-124m \
      --batch-size "$b" --seq-len 1024 --precision fp32 --steps 10 --warmup 3 \
      --output "$RESULT.tmp" >> "$OUT/sweep.log" 2>&1 || log "sweep: fp32 at $b did not run"
  done
fi

if has allreduce && [ "$NGPUS" -ge 2 ]; then
  log "allreduce: 2 GPUs over NCCL"
  mpirun -np 2 --bind-to none "$BIN" bench allreduce --backend nccl --nodes 1 \
    --output "$RESULT.tmp" >> "$OUT/sweep.log" 2>&1 || log "allreduce failed (see sweep.log)"
fi

if [ -s "$RESULT.tmp" ]; then
  mv "$RESULT.tmp" "$RESULT"
  log "wrote $RESULT ($(wc -l < "$RESULT") lines)"
  # What the planner makes of it: the fitted curve and its figures.
  "$BIN" plan --model gpt2-350m --tokens 1e9 --systems tests/plan/fixtures/gpuhost_2xh100.toml \
    --systems tests/plan/fixtures/gpuhost_2xh200.toml --system "$( [[ $card == *h100* ]] && echo gpuhost-h100 || echo gpuhost )" \
    --gpus 1 --batch-size 4 --global-batch 4 --calibration "$RESULT" --explain | tee "$OUT/plan.txt"
  if [ "${COMMIT_FIXTURE:-0}" = 1 ]; then
    cp "$RESULT" "tests/plan/fixtures/calibration_sweep_${card}.jsonl"
    log "copied to tests/plan/fixtures/calibration_sweep_${card}.jsonl: build the cpu preset and run ctest -R PlanGemmCurve"
  fi
fi
