#!/usr/bin/env bash
# One GPU-host run for the CUDA backend: build, correctness checks, per-op timings,
# training-step benchmarks and the PyTorch comparison (bench/compare/torch_gpt2.py) on the
# same card, logs under $OUT and a short table last. Run from the repository root on a host
# with PyTorch (and .devdeps, the Debian packages the build needs, where the host lacks them):
#   bash bench/gpu/run_gpu_host.sh [stages...]     stages: build check perf profile bench
#                                                   cli peer (default: all but profile)
# The stage `peer` runs the PyTorch comparison.
# Extra benchmark variants: BENCH_VARIANTS="name:ENV=VAL,ENV=VAL name2:..." (each runs
# the 124M bf16 benchmark with those environment variables).
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/aiscale-gpu-out}
mkdir -p "$OUT"
stages=" ${*:-build check perf bench cli peer} "
has() { [[ "$stages" == *" $1 "* ]]; }
BIN=build/cuda
source bench/gpu/host_common.sh

nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,power.limit,driver_version \
  --format=csv >> "$OUT/setup.log" 2>&1

peer_pid=""
if has peer; then
  # torch.compile works on the CPU for a minute or two: overlap that with our build, and
  # wait for it before anything of ours touches the GPU.
  log "pytorch start"
  (
    for spec in "gpt2-124m 16" "gpt2-350m 8"; do
      set -- $spec
      python3 bench/compare/torch_gpt2.py --model "$1" --batch "$2" --seq 1024 --steps 30 \
        --warmup 10 >> "$OUT/peer.jsonl" 2>> "$OUT/bench.err"
    done
  ) &
  peer_pid=$!
fi

if has build; then build_cuda test_ops aiscale_attention_variants aiscale_gpt_bench aiscale; else use_devdeps; fi

if [ -n "$peer_pid" ]; then
  log "waiting for pytorch"
  wait "$peer_pid"
  log "pytorch done"
fi

if has check; then
  log "checks"
  timeout 300 "$BIN/tests/ops/test_ops" test --backend cuda > "$OUT/check.log" 2>&1
  echo "check exit code $?" >> "$OUT/check.log"
  timeout 120 "$BIN/bench/dev/aiscale_attention_variants" check >> "$OUT/check.log" 2>&1
  echo "workbench check exit code $?" >> "$OUT/check.log"
  grep -E "FAIL|ERROR|cuda checks|workbench checks|exit code" "$OUT/check.log" | tail -25
fi

if has profile; then
  # Nsight Compute on the hot kernels (each launched once by --profile); clocks left alone.
  log "ncu"
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  timeout 300 "$NCU" --clock-control none \
    --kernel-name regex:'flash_forward_wide|flash_backward_kernel|layernorm_backward|gelu_backward_partial' \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    "$BIN/tests/ops/test_ops" perf --backend cuda --profile > "$OUT/ncu.txt" 2>&1
  echo "ncu exit code $?" >> "$OUT/ncu.txt"
fi

if has perf; then
  log "perf"
  timeout 120 "$BIN/tests/ops/test_ops" perf --backend cuda > "$OUT/perf.log" 2>&1
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
  bench fp32-124m -- --model gpt2-124m --batch 16 --seq 1024 --precision fp32 --steps 5 --warmup 2
  log "bench done"
fi

if has cli; then
  # The same model through the product's own command (the trainer's step loop).
  log "cli bench"
  for spec in "gpt2-124m 16" "gpt2-350m 8"; do
    set -- $spec
    timeout 120 "$BIN/aiscale" bench language --device cuda --model "$1" --batch "$2" --seq 1024 \
      --precision bf16 --steps 30 --warmup 10 >> "$OUT/cli.jsonl" 2>> "$OUT/bench.err"
  done
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
hdr = ("what", "model", "batch", "prec", "tokens/s", "TFLOP/s", "step ms", "fwd", "bwd", "opt", "mem GiB", "gpu")
fmt = "%-15s %-9s %5s %-4s %9s %7s %8s %6s %6s %5s %7s  %s"
print(); print(fmt % hdr)
peer = {}
for p in rows(os.path.join(out, "peer.jsonl")):  # bench/compare/torch_gpt2.py records
    key = {"gpt2-124m": "124M", "gpt2-350m": "350M"}.get(p["model"], p["model"])
    peer[key] = p["tokens_per_s_per_device"]
    print(fmt % ("pytorch", p["model"][5:], p["batch"], p["precision"], "%.0f" % p["tokens_per_s_per_device"],
                 "%.1f" % p["achieved_tflops_per_device"], "%.2f" % (1e3 * p["step_time_median_s"]), "", "", "",
                 "%.2f" % (p["peak_memory_bytes"] / 2**30), p["device"]))
for b in rows(os.path.join(out, "bench.jsonl")):
    r = b.get("result")
    if not r:
        print("%-15s failed" % b["variant"]); continue
    print(fmt % (b["variant"][:15], r["model"][5:], r["batch"], r["precision"], "%.0f" % r["tokens_per_s"], "%.1f" % r["tflops_per_gpu"], "%.2f" % (1e3 * r["median_step_s"]), "%.1f" % r.get("fwd_ms", 0), "%.1f" % r.get("bwd_ms", 0), "%.1f" % r.get("opt_ms", 0), "%.2f" % r["peak_mem_gib"], r["gpu"]))
for c in rows(os.path.join(out, "cli.jsonl")):
    print(fmt % ("aiscale bench", c["model"][5:], c["batch"], c["precision"], "%.0f" % c["tokens_per_s"], "%.1f" % c["achieved_tflops_per_device"], "%.2f" % (1e3 * c["step_time_median_s"]), "", "", "", "%.2f" % (c["peak_memory_bytes"] / 2**30), c["device"]))
    key = {"gpt2-124m": "124M", "gpt2-350m": "350M"}.get(c["model"], "")
    if key in peer:
        print("ratio %-15s %s: %.3f x pytorch" % ("aiscale bench", key, c["tokens_per_s"] / peer[key]))
for b in rows(os.path.join(out, "bench.jsonl")):
    r = b.get("result")
    key = {"gpt2-124m": "124M", "gpt2-350m": "350M"}.get(r["model"] if r else "", "")
    if r and key in peer and r["precision"] == "bf16":
        print("ratio %-15s %s: %.3f x pytorch" % (b["variant"], key, r["tokens_per_s"] / peer[key]))
EOF
