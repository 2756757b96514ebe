#!/usr/bin/env bash
# The defaults against their alternatives on a GPU host, in one call (docs/design/defaults.md):
#   language  GPT-2 124M bf16 on 1 GPU, then on 2 and 4 GPUs (as many as the host has) with
#             the default gradient transport ("auto") and with NCCL's (--grad-transport nccl);
#             efficiency against the 1-GPU figure of the same call
#   vision    ResNet-50 bf16, batch 256, with the default batch norm ("auto") and the own
#             kernels (--batchnorm own)
#   decoder   the kernels of one GPT-2 124M decoding stream (`bench sample`), timed by
#             Nsight Compute, per kernel and per step
# Logs under $OUT, a short table last. From the repository root, with .devdeps carried:
#   bash bench/gpu/defaults.sh [stages...]   stages: build language vision decoder (default: all)
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
OUT=${OUT:-/tmp/aiscale-defaults-out}
mkdir -p "$OUT"
stages=" ${*:-build language vision decoder} "
has() { [[ "$stages" == *" $1 "* ]]; }
source bench/gpu/host_common.sh
BIN=build/cuda/aiscale
NGPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
MPI=(mpirun --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE
     -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x OMP_NUM_THREADS
     -x LD_LIBRARY_PATH)
{ nvidia-smi --query-gpu=index,name,memory.total,power.limit,driver_version --format=csv
  git rev-parse HEAD 2>/dev/null; } >> "$OUT/setup.log" 2>&1
table=()
row() { table+=("$(printf '%-48s %s' "$1" "$2")"); }
# field FILE KEY: KEY of FILE's last JSON line
field() {
  python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1].get(sys.argv[2], "-"))' \
    "$1" "$2" 2>/dev/null || echo "-"
}

if has build; then build_cuda aiscale; else use_devdeps; fi

if has language; then
  log "language: 1 GPU, then 2 and 4 GPUs, auto and nccl transports"
  common=(bench language --model gpt2-124m --batch 16 --seq 1024 --device cuda --precision bf16
          --steps 30 --warmup 10)
  timeout 120 "$BIN" "${common[@]}" --output "$OUT/language_1.jsonl" > "$OUT/language.log" 2>&1
  base=$(field "$OUT/language_1.jsonl" tokens_per_s_per_device)
  row "language 1 GPU tokens/s" "$base"
  for n in 2 4; do
    [ "$n" -le "$NGPUS" ] || continue
    for t in default nccl; do
      extra=()
      [ "$t" = nccl ] && extra=(--grad-transport nccl)
      f="$OUT/language_${n}_$t.jsonl"
      timeout 150 "${MPI[@]}" -np "$n" "$BIN" "${common[@]}" "${extra[@]}" \
        --baseline-tokens-per-s "$base" --output "$f" >> "$OUT/language.log" 2>&1
      row "language $n GPUs, transport $t" \
        "exit $?: $(field "$f" tokens_per_s_per_device) tokens/s per GPU, efficiency $(field "$f" scaling_efficiency), took $(field "$f" grad_transport)"
    done
  done
fi

if has vision; then
  log "vision: ResNet-50 bf16, default batch norm and own"
  for bn in default own; do
    extra=()
    [ "$bn" = own ] && extra=(--batchnorm own)
    f="$OUT/vision_$bn.jsonl"
    CUDA_VISIBLE_DEVICES=0 timeout 200 "$BIN" bench vision --device cuda --model resnet50 \
      --precision bf16 --steps 30 --warmup 10 "${extra[@]}" --output "$f" >> "$OUT/vision.log" 2>&1
    row "vision ResNet-50 bf16, batchnorm $bn" \
      "exit $?: $(field "$f" images_per_s) images/s ($(field "$f" batchnorm); $(field "$f" kernels))"
  done
fi

if has decoder && command -v ncu > /dev/null; then
  log "decoder: the kernels of one stream under ncu"
  # Past the prompt, the first (eager) steps and the graph's capture: replayed steps only.
  CUDA_VISIBLE_DEVICES=0 timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes.sum \
    --csv --launch-skip 1000 --launch-count 310 "$BIN" bench sample --device cuda \
    --model gpt2-124m --streams 1 --prompt-len 64 --tokens 64 --output "$OUT/ncu_sample.jsonl" \
    > "$OUT/ncu_decoder.csv" 2> "$OUT/ncu_decoder.err"
  # 310 launches: five replayed steps of 62 kernels.
  python3 bench/gpu/ncu_table.py "$OUT/ncu_decoder.csv" --steps 5 > "$OUT/decoder_kernels.txt" 2>&1
  row "decoder kernels (ncu)" "$(tail -1 "$OUT/decoder_kernels.txt")"
fi

echo
echo "== $(date -u +%F) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$NGPUS, $(git rev-parse --short HEAD 2>/dev/null)"
printf '%s\n' "${table[@]}"
[ -f "$OUT/decoder_kernels.txt" ] && cat "$OUT/decoder_kernels.txt"
exit 0
