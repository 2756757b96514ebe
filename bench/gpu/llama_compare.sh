#!/usr/bin/env bash
# The llama family on a GPU host: build, the family's GPU tests (its ops and its CUDA model
# against a double-precision host model: test_ops --op llama_ops / llama_model; on 2 GPUs
# DDP, ZeRO-1/2/3, tensor and pipeline parallelism against one GPU, the refused layouts),
# then in one go the Llama 3.2 1B
# shape (untied head, as the PyTorch program: --tie-embeddings false) in bf16, B=4,
# T=2048 on one GPU, by aiscale bench language and by bench/compare/torch_llama.py (RMSNorm,
# rotary, SwiGLU, GQA through SDPA, fused AdamW, torch.compile) on the same shape; on 2 GPUs
# the same shape data-parallel against PyTorch's DistributedDataParallel, and the Llama 3.1
# 8B shape (B=2, T=2048) under ZeRO-3 against PyTorch's FSDP2 (fully_shard per block).
# Logs under $OUT, a short table last. From the repository root, with .devdeps (the
# Debian packages the build needs) carried:
#   bash bench/gpu/llama_compare.sh [stages...]   stages: build tests one two  (default: all)
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
OUT=${OUT:-/tmp/aiscale-llama-out}
mkdir -p "$OUT"
stages=" ${*:-build tests one two} "
has() { [[ "$stages" == *" $1 "* ]]; }
source bench/gpu/host_common.sh
BIN=build/cuda/aiscale
NGPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
{ nvidia-smi --query-gpu=index,name,memory.total,power.limit,driver_version --format=csv
  git rev-parse HEAD 2>/dev/null; } >> "$OUT/setup.log" 2>&1
table=()
row() { table+=("$(printf '%-52s %s' "$1" "$2")"); }
# tokens/s per GPU of the last JSON line of a file (aiscale's and PyTorch's records alike).
tps() {
  python3 - "$1" <<'PY' 2>/dev/null || echo "-"
import json, sys
lines = [l for l in open(sys.argv[1]) if l.startswith("{")]
j = json.loads(lines[-1])
t = j.get("tokens_per_s_per_device") or j.get("tokens_per_s", 0) / max(1, j.get("world_size", 1))
print(f"{t:,.0f} tokens/s per GPU, MFU {j.get('mfu', 0):.1%}, step {j.get('step_time_median_s', 0)*1e3:.0f} ms")
PY
}

if has build; then
  build_cuda aiscale test_ops aiscale_llama_gpu2_tests
else
  use_devdeps
fi

if has tests; then
  for op in llama_ops llama_model; do
    log "test_ops --op $op"
    timeout 600 build/cuda/tests/ops/test_ops test --backend cuda --op "$op" --verbose \
      > "$OUT/test_$op.log" 2>&1
    row "test_ops $op (exit code)" "$? ($(grep -c ' ok ' "$OUT/test_$op.log" || true) ok lines, $(grep -ci 'fail' "$OUT/test_$op.log" || true) fail lines)"
  done
  if [ "$NGPUS" -ge 2 ]; then
    log "llama 2-GPU tests"
    timeout 600 ctest --test-dir build/cuda -L gpu -R '^llama\.' --output-on-failure \
      > "$OUT/test_gpu2.log" 2>&1
    row "llama 2-GPU tests (exit code)" "$? ($(grep -c 'Passed' "$OUT/test_gpu2.log" || true) passed)"
  fi
fi

ONE_ARGS=(--model llama3-1b-shape --tie-embeddings false --device cuda
          --precision bf16 --batch 4 --seq-len 2048)
if has one; then
  log "aiscale: llama3-1b-shape, untied, bf16, B=4 T=2048, 1 GPU"
  CUDA_VISIBLE_DEVICES=0 timeout 300 "$BIN" bench language "${ONE_ARGS[@]}" --steps 20 --warmup 5 \
    --output "$OUT/aiscale_1gpu.jsonl" > "$OUT/aiscale_1gpu.log" 2>&1
  row "aiscale 1B-shape, 1 GPU (exit $?)" "$(tps "$OUT/aiscale_1gpu.jsonl")"
  log "pytorch: the same shape, 1 GPU"
  CUDA_VISIBLE_DEVICES=0 timeout 600 python3 bench/compare/torch_llama.py --model llama3-1b-shape \
    --untied --batch 4 --seq 2048 --steps 20 --warmup 5 --output "$OUT/torch_1gpu.jsonl" \
    > "$OUT/torch_1gpu.log" 2>&1
  row "pytorch 1B-shape, 1 GPU (exit $?)" "$(tps "$OUT/torch_1gpu.jsonl")"
fi

if has two && [ "$NGPUS" -ge 2 ]; then
  log "aiscale: llama3-1b-shape, 2 GPUs data-parallel"
  timeout 300 "$BIN" launch -n 2 --threads-per-rank 4 -- bench language "${ONE_ARGS[@]}" \
    --steps 20 --warmup 5 --output "$OUT/aiscale_2gpu.jsonl" > "$OUT/aiscale_2gpu.log" 2>&1
  row "aiscale 1B-shape, 2 GPUs DDP (exit $?)" "$(tps "$OUT/aiscale_2gpu.jsonl")"
  log "pytorch: the same shape, 2 GPUs DistributedDataParallel"
  timeout 600 torchrun --standalone --nproc_per_node=2 bench/compare/torch_llama.py \
    --model llama3-1b-shape --untied --batch 4 --seq 2048 --steps 20 --warmup 5 \
    --output "$OUT/torch_2gpu.jsonl" > "$OUT/torch_2gpu.log" 2>&1
  row "pytorch 1B-shape, 2 GPUs DDP (exit $?)" "$(tps "$OUT/torch_2gpu.jsonl")"
  log "aiscale: llama3-8b-shape under ZeRO-3 on 2 GPUs"
  timeout 400 "$BIN" launch -n 2 --threads-per-rank 4 -- bench language --model llama3-8b-shape \
    --device cuda --precision bf16 --batch 2 --seq-len 2048 --zero-stage 3 --steps 10 --warmup 3 \
    --output "$OUT/aiscale_8b_zero3.jsonl" > "$OUT/aiscale_8b_zero3.log" 2>&1
  code=$?
  if [ -s "$OUT/aiscale_8b_zero3.jsonl" ]; then
    row "aiscale 8B-shape, 2 GPUs ZeRO-3 (exit $code)" "$(tps "$OUT/aiscale_8b_zero3.jsonl")"
  else
    row "aiscale 8B-shape, 2 GPUs ZeRO-3 (exit $code)" "$(grep -m1 -o 'error.*' "$OUT/aiscale_8b_zero3.log" | cut -c1-70)"
  fi
  log "pytorch: llama3-8b-shape, 2 GPUs FSDP2"
  timeout 600 torchrun --standalone --nproc_per_node=2 bench/compare/torch_llama.py \
    --model llama3-8b-shape --batch 2 --seq 2048 --steps 10 --warmup 3 --fsdp \
    --output "$OUT/torch_8b_fsdp.jsonl" > "$OUT/torch_8b_fsdp.log" 2>&1
  row "pytorch 8B-shape, 2 GPUs FSDP2 (exit $?)" "$(tps "$OUT/torch_8b_fsdp.jsonl")"
fi

echo
echo "llama family on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x $NGPUS"
for line in "${table[@]}"; do echo "$line"; done | tee "$OUT/table.txt"
