#!/usr/bin/env bash
# The kernels of one GPT-2 training step on one GPU under Nsight Compute: per kernel name
# the launches, time, share and DRAM traffic of the timed step of `bench language`
# (cudaProfilerStart/Stop bracket the timed steps, ncu --profile-from-start off records only
# them). Each kernel is timed alone with cold caches (ncu's default cache control), so
# the sum is an upper bound of the step. For docs/design/gpu-training-step.md's floors.
#   bash bench/gpu/step_kernels.sh [MODEL ...]   (default: gpt2-124m gpt2-350m)
# From the repository root, after the CUDA build (bench/gpu/host_common.sh build_cuda aiscale).
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/aiscale-step-kernels-out}
mkdir -p "$OUT"
source bench/gpu/host_common.sh
use_devdeps
models=("${@:-gpt2-124m gpt2-350m}")
for model in ${models[*]}; do
  batch=16
  [ "$model" = gpt2-350m ] && batch=8
  log "ncu: one timed step of $model, batch $batch x 1024, bf16"
  CUDA_VISIBLE_DEVICES=0 timeout 300 ncu --profile-from-start off --clock-control none --csv \
    --metrics gpu__time_duration.sum,dram__bytes.sum build/cuda/aiscale bench language \
    --model "$model" --batch "$batch" --seq 1024 --device cuda --precision bf16 --steps 1 \
    --warmup 3 --output "$OUT/step_$model.jsonl" > "$OUT/step_$model.csv" 2> "$OUT/step_$model.err"
  echo "== $model: exit $?"
  python3 bench/gpu/ncu_table.py "$OUT/step_$model.csv" --top 20 | tee "$OUT/step_$model.txt"
done
