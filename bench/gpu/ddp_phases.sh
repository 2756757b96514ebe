#!/usr/bin/env bash
# Where the time of a data-parallel GPU step goes: GPT-2 124M (B=16, T=1024, bf16) on 1
# GPU and on 2 with the model's phase timing (AISCALE_CUDA_TIMING=1: forward, backward,
# the embedding tail, the gap before the update, the update; host time in collective
# calls), then one-variable variants (collective calls on the model's thread, stream
# priority, bucket size). SET=transport compares NCCL with the copy-engine transport (--grad-transport).
# Needs a built build/cuda (bench/gpu/run_ddp_gpu2.sh build) and 2 GPUs. Writes
# $OUT/phases.jsonl (one bench line per variant, "variant" added) and $OUT/phases.err
# (the per-rank phase lines), and prints a table.
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/aiscale-phases}
mkdir -p "$OUT"
source bench/gpu/host_common.sh
use_devdeps
BIN=build/cuda/aiscale
args=(bench language --model gpt2-124m --batch 16 --seq 1024 --device cuda --precision bf16
      --steps ${STEPS:-20} --warmup 5)
MPI=(mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_NVLS_ENABLE
     -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS)
one() {  # name, ranks, env assignments..., -- extra args...
  local name=$1 ranks=$2; shift 2
  local envs=() mpienv=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); mpienv+=(-x "$1"); shift; done
  shift
  echo "== $name start $(date +%s.%N)" >> "$OUT/phases.err"
  local line
  if [ "$ranks" = 1 ]; then
    line=$(env "${envs[@]}" timeout 90 "$BIN" "${args[@]}" "$@" 2>> "$OUT/phases.err")
  else
    line=$(timeout 120 "${MPI[@]}" "${mpienv[@]}" "$BIN" "${args[@]}" "$@" 2>> "$OUT/phases.err")
  fi
  echo "{\"variant\": \"$name\", \"result\": ${line:-null}}" >> "$OUT/phases.jsonl"
  echo "== $name end $(date +%s.%N)" >> "$OUT/phases.err"
}
case "${SET:-phases}" in
phases)
  one timing-1gpu 1 AISCALE_CUDA_TIMING=1 --
  one timing-2gpu 2 AISCALE_CUDA_TIMING=1 --
  one timing-2gpu-calls-on-model-thread 2 AISCALE_CUDA_TIMING=1 AISCALE_CUDA_COMM_THREAD=0 --
  one timing-2gpu-zero1 2 AISCALE_CUDA_TIMING=1 -- --zero-stage 1
  one timing-2gpu-after-backward 2 AISCALE_CUDA_TIMING=1 -- --overlap 0
  one timing-2gpu-stream-priority 2 AISCALE_CUDA_TIMING=1 AISCALE_CUDA_STREAM_PRIORITY=high --
  one buckets-100mib 2 AISCALE_CUDA_TIMING=0 -- --bucket-mib 100
  ;;
transport)
  # How the buckets travel: NCCL's kernels or the copy engines over CUDA IPC
  # (--grad-transport copy-engine), fp32 and bf16, then the phase and bucket timing.
  one 1gpu 1 X=0 --
  one 2gpu-nccl 2 X=0 --
  one 2gpu-copy-engine 2 X=0 -- --grad-transport copy-engine
  one 2gpu-copy-engine-bf16 2 X=0 -- --grad-transport copy-engine --grad-comm bf16
  one 2gpu-nccl-again 2 X=0 --
  one 2gpu-copy-engine-again 2 X=0 -- --grad-transport copy-engine
  one timing-2gpu-copy-engine 2 AISCALE_CUDA_TIMING=1 -- --grad-transport copy-engine
  ;;
copy-engine)
  # Copy-engine transport variants: bucket size, reduction after backward; NCCL and 1 GPU
  # as references.
  one 1gpu 1 X=0 --
  one 2gpu-nccl 2 X=0 --
  one 2gpu-ce 2 X=0 -- --grad-transport copy-engine
  one 2gpu-ce-50mib 2 X=0 -- --grad-transport copy-engine --bucket-mib 50
  one 2gpu-ce-12mib 2 X=0 -- --grad-transport copy-engine --bucket-mib 12
  one 2gpu-ce-after-backward 2 X=0 -- --grad-transport copy-engine --overlap 0
  one 2gpu-ce-again 2 X=0 -- --grad-transport copy-engine
  one 1gpu-again 1 X=0 --
  one timing-1gpu 1 AISCALE_CUDA_TIMING=1 --
  one timing-2gpu-ce 2 AISCALE_CUDA_TIMING=1 -- --grad-transport copy-engine
  ;;
zero-ce)
  # ZeRO-1 over the copy engines (reduce-scatter, AdamW on the shard, all-gather of the
  # working copy) against plain data parallelism over them; NCCL and 1 GPU as references.
  one 1gpu 1 X=0 --
  one 2gpu-ce 2 X=0 -- --grad-transport copy-engine
  one 2gpu-ce-zero1 2 X=0 -- --grad-transport copy-engine --zero-stage 1
  one 2gpu-nccl-zero1 2 X=0 -- --zero-stage 1
  one 2gpu-ce-again 2 X=0 -- --grad-transport copy-engine
  one 2gpu-ce-zero1-again 2 X=0 -- --grad-transport copy-engine --zero-stage 1
  one 1gpu-again 1 X=0 --
  one timing-2gpu-ce-zero1 2 AISCALE_CUDA_TIMING=1 -- --grad-transport copy-engine --zero-stage 1
  one timing-2gpu-ce 2 AISCALE_CUDA_TIMING=1 -- --grad-transport copy-engine
  ;;
power)
  # SM clock and board power of both GPUs (nvidia-smi every 100 ms, $OUT/smi.csv) while one
  # GPU trains alone and while two train together: does the exchange cost clock speed
  # at the power cap? Averages per variant and GPU are printed at the end.
  nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,clocks_throttle_reasons.active \
    --format=csv,noheader,nounits -lms 100 > "$OUT/smi.csv" 2>/dev/null &
  smi_pid=$!
  one 1gpu 1 X=0 --
  one 2gpu-ce 2 X=0 -- --grad-transport copy-engine
  one 2gpu-nccl 2 X=0 --
  one 1gpu-again 1 X=0 --
  one 2gpu-ce-again 2 X=0 -- --grad-transport copy-engine
  kill "$smi_pid" 2>/dev/null
  ;;
flags)
  # Copy-engine flags raised by the front end (default) or by a one-thread kernel.
  one 2gpu-ce 2 X=0 -- --grad-transport copy-engine
  one 2gpu-ce-flag-kernel 2 AISCALE_CE_FLAGS=kernel -- --grad-transport copy-engine
  one 2gpu-ce-again 2 X=0 -- --grad-transport copy-engine
  one timing-2gpu-ce 2 AISCALE_CUDA_TIMING=1 -- --grad-transport copy-engine
  ;;
esac
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
for line in open(os.path.join(out, "phases.jsonl")):
    j = json.loads(line); r = j["result"]
    if not r: print("%-28s failed" % j["variant"]); continue
    print("%-28s %d GPU(s) %8.0f tok/s per GPU, step %.2f ms" % (j["variant"], r["world_size"],
          r["tokens_per_s_per_device"], 1e3 * r["step_time_median_s"]))
PY
grep -E "mean of|bucket \[" "$OUT/phases.err"
[ -s "$OUT/smi.csv" ] && python3 - "$OUT" <<'PY'
import datetime, os, sys
out = sys.argv[1]
win = {}
for line in open(os.path.join(out, "phases.err")):
    p = line.split()
    if len(p) == 4 and p[0] == "==" and p[2] in ("start", "end"):
        win.setdefault(p[1], {})[p[2]] = float(p[3])
samples = []
for line in open(os.path.join(out, "smi.csv")):
    f = [x.strip() for x in line.split(",")]
    try:
        ts = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        samples.append((ts, int(f[1]), float(f[2]), float(f[3]), f[4]))
    except Exception:
        pass
# nvidia-smi prints local time; phases.err has epoch seconds: align on the first sample.
print("%-16s %4s %9s %9s %8s  (samples from 45%% to 90%% of each run: the steps, not the start-up)" % ("variant", "gpu", "SM MHz", "power W", "n"))
for name, w in win.items():
    if "start" not in w or "end" not in w: continue
    a, b = w["start"], w["end"]
    a, b = a + 0.45 * (b - a), b - 0.1 * (b - a)
    for g in sorted({s[1] for s in samples}):
        sel = [s for s in samples if s[1] == g and a <= s[0] <= b]
        if sel:
            print("%-16s %4d %9.0f %9.0f %8d" % (name, g, sum(s[2] for s in sel) / len(sel), sum(s[3] for s in sel) / len(sel), len(sel)))
PY
