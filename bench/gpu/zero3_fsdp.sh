#!/usr/bin/env bash
# Models larger than one GPU on a host of 2-4 GPUs: build, the ZeRO-3 GPU tests, then the
# GPT-2 2.7B variant (60 layers, 30 heads, width 1920; B=4, T=1024, bf16) under ZeRO-3,
# ZeRO-1 and plain data parallelism on all the host's GPUs, against a PyTorch FSDP2 program
# given as $FSDP_PEER (fully_shard per block, bf16 compute, fp32 reduction; it prints one
# JSON line) on the same GPUs, and the 6.6B variant (84 layers, 40 heads, width 2560)
# under ZeRO-3; then 2.7B under ZeRO-3 with the optimizer state on the host. Logs under
# $OUT, a short table last. From the repository root:
#   FSDP_PEER=path/to/fsdp_program.py bash bench/gpu/zero3_fsdp.sh [stages...]
#   stages: build peer test bench big offload    (default: all)
# The peer runs after the build, alone on the host: FSDP2's step is bound by the host's
# kernel launches, so a build beside it would slow it.
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
OUT=${OUT:-/tmp/aiscale-zero3-out}
mkdir -p "$OUT"
stages=" ${*:-build peer test bench big offload} "
has() { [[ "$stages" == *" $1 "* ]]; }
BIN=build/cuda
NGPUS=${NGPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
BATCH=${BATCH:-4}
source bench/gpu/host_common.sh
nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,power.limit --format=csv >> "$OUT/setup.log" 2>&1

if has build; then build_cuda aiscale aiscale_zero3_gpu2_tests; else use_devdeps; fi
if has peer && [ -n "${FSDP_PEER:-}" ]; then
  log "pytorch fsdp2 2.7B on $NGPUS GPUs"
  timeout 300 torchrun --standalone --nproc_per_node="$NGPUS" "$FSDP_PEER" --model 2.7B \
    --batch "$BATCH" --seq 1024 --steps 30 --compile 1 >> "$OUT/peer_fsdp.jsonl" 2>> "$OUT/peer_errors.log"
  echo "peer exit $?" >> "$OUT/peer_errors.log"
  log "pytorch done"
fi

if has test; then
  log "ctest -R zero3"
  timeout "${TEST_TIMEOUT_S:-240}" ctest --test-dir "$BIN" -L gpu -R zero3 -V --timeout 120 > "$OUT/ctest.log" 2>&1
  echo "ctest exit $?" >> "$OUT/ctest.log"
  grep -E "\[gpu2\]|tests passed|Test +#.*(Passed|Failed|Skipped)|ctest exit" "$OUT/ctest.log" | tail -12
fi

# Each run is skipped once the script has run $DEADLINE_S seconds (default 520), so that
# the table still comes out within a 10-minute allotment.
lang() {  # lang MODEL STEPS WARMUP extra options...
  local model=$1 steps=$2 warmup=$3 threads=2
  shift 3
  [[ "$*" == *offload* ]] && threads=$(( $(nproc) / NGPUS ))  # AdamW on the host's cores
  if [ "$SECONDS" -ge "${DEADLINE_S:-520}" ]; then
    echo "language $model $* skipped at ${SECONDS} s" >> "$OUT/errors.log"
    return
  fi
  timeout $(( ${DEADLINE_S:-520} + 60 - SECONDS )) "$BIN/aiscale" launch -n "$NGPUS" --threads-per-rank "$threads" -- bench language --model "$model" \
    --batch "$BATCH" --seq 1024 --device cuda --precision bf16 --steps "$steps" --warmup "$warmup" "$@" \
    --output "$OUT/language.jsonl" > "$OUT/lang_${model}_$(echo "$*" | tr -c 'a-z0-9' _).log" 2>&1
  echo "language $model $* exit $?" >> "$OUT/errors.log"
}
if has bench; then
  log "gpt2-2.7b: ZeRO-3 on $NGPUS GPUs"
  lang gpt2-2.7b 10 3 --zero-stage 3
fi
if has big; then
  log "gpt2-6.6b: ZeRO-3 on $NGPUS GPUs"
  lang gpt2-6.6b 5 2 --zero-stage 3
fi
if has bench; then
  log "gpt2-2.7b: ZeRO-1 and plain data parallelism on $NGPUS GPUs"
  lang gpt2-2.7b 10 3 --zero-stage 1
  lang gpt2-2.7b 10 3 --zero-stage 0
fi
if has offload; then
  log "gpt2-2.7b: ZeRO-3 with the optimizer on the host, $NGPUS GPUs"
  lang gpt2-2.7b 3 1 --zero-stage 3 --offload-optimizer
fi
log "done"

python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
def rows(name):
    p = os.path.join(out, name)
    r = []
    if os.path.exists(p):
        for line in open(p):
            line = line.strip()
            if line.startswith("{"):
                try: r.append(json.loads(line))
                except Exception: pass
    return r
print("\nbf16, T=1024: tokens/s per GPU")
for j in rows("language.jsonl"):
    print("aiscale %-10s %d GPU(s) B=%d zero %s%s: %.0f per GPU, step %.1f ms, arena %.2f GiB, optimizer state %.2f GiB" % (
        j.get("model", "?"), j["world_size"], j.get("batch", 0), j.get("zero_stage", "?"),
        " offload" if j.get("offload_optimizer") else "",
        j["tokens_per_s_per_device"], 1e3 * j["step_time_median_s"], j.get("model_memory_bytes", 0) / 2**30,
        j.get("optimizer_state_bytes", 0) / 2**30))
for p in rows("peer_fsdp.jsonl"):
    print("pytorch fsdp2 %s %d GPU(s) B=%d%s: %.0f per GPU, step %.1f ms, %.0f TFLOP/s, peak %.2f GiB" % (
        p["model"], p["gpus"], p["batch"], " compiled" if p["compile"] else "", p["tokens_per_s_per_gpu"],
        1e3 * p["median_step_s"], p["tflops_per_gpu"], p["peak_mem_gib"]))
PY
