#!/usr/bin/env bash
# One GPU-host call for the CUDA backend: build, correctness checks, per-op timings,
# training-step benchmarks and the PyTorch peer on the same card, logs under $OUT and a
# short table last. Run from the repository root with .devdeps and .peer carried:
#   bash bench/gpu/run_gpu_host.sh [stages...]     stages: build check perf bench peer
#                                                   (default: all of them)
# Extra benchmark variants: BENCH_VARIANTS="name:ENV=VAL,ENV=VAL name2:..." (each runs
# the 124M bf16 benchmark with those environment variables).
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/aiscale-gpu-out}
mkdir -p "$OUT"
stages=" ${*:-build check perf bench peer} "
has() { [[ "$stages" == *" $1 "* ]]; }
BIN=build/cuda
log() { echo "== $(date +%T) $*" | tee -a "$OUT/setup.log"; }

nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,power.limit,driver_version \
  --format=csv >> "$OUT/setup.log" 2>&1

peer_pid=""
if has peer; then
  # The peer compiles on the CPU for a minute or two: overlap that with our build, and
  # wait for it before anything of ours touches the GPU.
  log "peer start"
  (
    for spec in "124M 16" "350M 8"; do
      set -- $spec
      python3 .peer/torch_gpt2.py --model "$1" --batch "$2" --seq 1024 >> "$OUT/peer.jsonl" \
        2>> "$OUT/peer.err"
    done
  ) &
  peer_pid=$!
fi

if has build; then
  log "build"
  source .devdeps/use-debs.sh .devdeps >> "$OUT/setup.log" 2>&1
  if ! cmake --preset cuda -DCMAKE_CUDA_ARCHITECTURES=90 >> "$OUT/setup.log" 2>&1 ||
     ! cmake --build --preset cuda --target aiscale_gpu_check aiscale_gpt_bench \
       >> "$OUT/setup.log" 2>&1; then
    tail -40 "$OUT/setup.log"
    [ -n "$peer_pid" ] && kill "$peer_pid" 2>/dev/null
    exit 1
  fi
  log "build done"
else
  [ -f .devdeps/use-debs.sh ] && source .devdeps/use-debs.sh .devdeps >> "$OUT/setup.log" 2>&1
fi

if [ -n "$peer_pid" ]; then
  log "waiting for the peer"
  wait "$peer_pid"
  log "peer done"
fi

if has check; then
  log "checks"
  timeout 300 "$BIN/tests/gpu/aiscale_gpu_check" > "$OUT/check.log" 2>&1
  echo "check exit code $?" >> "$OUT/check.log"
  grep -E "FAIL|ERROR|GPU checks" "$OUT/check.log" | tail -25
fi

if has perf; then
  log "perf"
  timeout 120 "$BIN/tests/gpu/aiscale_gpu_check" --perf > "$OUT/perf.log" 2>&1
  echo "perf exit code $?" >> "$OUT/perf.log"
fi

bench() {  # name, env assignments..., -- bench args...
  local name=$1; shift
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local line
  line=$(env "${envs[@]}" timeout 120 "$BIN/bench/gpu/aiscale_gpt_bench" "$@" 2>> "$OUT/bench.err")
  echo "{\"variant\": \"$name\", \"result\": ${line:-null}}" >> "$OUT/bench.jsonl"
}

if has bench; then
  log "bench"
  export AISCALE_CUDA_VERBOSE=1  # paths and GEMM plans to bench.err
  bench base-124m -- --model gpt2-124m --batch 16 --seq 1024
  bench base-350m -- --model gpt2-350m --batch 8 --seq 1024
  bench recompute-124m -- --model gpt2-124m --batch 16 --seq 1024 --recompute 1
  for v in ${BENCH_VARIANTS:-}; do
    name=${v%%:*}
    IFS=, read -r -a kv <<< "${v#*:}"
    bench "$name" "${kv[@]}" -- --model gpt2-124m --batch 16 --seq 1024
  done
  bench fp16-124m -- --model gpt2-124m --batch 16 --seq 1024 --precision fp16 --steps 20 --warmup 5
  bench fp32-124m -- --model gpt2-124m --batch 16 --seq 1024 --precision fp32 --steps 6 --warmup 2
  log "bench done"
fi

python3 - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
def rows(path):
    if not os.path.exists(path): return []
    r = []
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            try: r.append(json.loads(line))
            except Exception: pass
    return r
print("\n%-16s %-10s %5s %-5s %12s %8s %9s %8s  %s" % ("what", "model", "batch", "prec", "tokens/s", "TFLOP/s", "step ms", "mem GiB", "gpu"))
for p in rows(os.path.join(out, "peer.jsonl")):
    print("%-16s %-10s %5d %-5s %12.0f %8.1f %9.2f %8.2f  %s" % ("pytorch", p["model"], p["batch"], "bf16", p["tokens_per_s_per_gpu"], p["tflops_per_gpu"], 1e3 * p["median_step_s"], p["peak_mem_gib"], p["gpu"]))
for b in rows(os.path.join(out, "bench.jsonl")):
    r = b.get("result")
    if not r:
        print("%-16s failed" % b["variant"]); continue
    print("%-16s %-10s %5d %-5s %12.0f %8.1f %9.2f %8.2f  %s" % (b["variant"], r["model"], r["batch"], r["precision"], r["tokens_per_s"], r["tflops_per_gpu"], 1e3 * r["median_step_s"], r["peak_mem_gib"], r["gpu"]))
EOF
