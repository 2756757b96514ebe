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
# The driver's clock-event counters (microseconds each GPU spent with its clocks held down
# for a reason: power cap, thermal, power brake, ...), where nvidia-smi has them: read at
# the start and end of every variant into $OUT/counters.csv, summed per variant at the end.
COUNTERS=$(nvidia-smi --help-query-gpu 2>/dev/null | grep -oE '"clocks_event_reasons_counters\.[a-z_]+"' |
           tr -d '"' | sort -u | paste -sd, -)
counters() {  # variant, start|end
  [ -n "$COUNTERS" ] || return 0
  nvidia-smi --query-gpu=index,$COUNTERS --format=csv,noheader,nounits 2>/dev/null |
    sed "s/^/$1,$2,/" >> "$OUT/counters.csv"
}
[ -n "$COUNTERS" ] && echo "variant,when,index,$COUNTERS" > "$OUT/counters.csv"
one() {  # name, ranks, env assignments..., -- extra args...
  local name=$1 ranks=$2; shift 2
  counters "$name" start
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
  counters "$name" end
}
# SM clock and board power of every GPU (nvidia-smi every 100 ms, $OUT/smi.csv), averaged
# per variant at the end: a 2-GPU step that is power-capped shows a lower clock.
nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,clocks_throttle_reasons.active \
  --format=csv,noheader,nounits -lms 100 > "$OUT/smi.csv" 2>/dev/null &
smi_pid=$!
NGPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
case "${SET:-phases}" in
verify)
  # After a change: 1 GPU (the first and the last card alone), 2 GPUs over the copy
  # engines and over NCCL, ZeRO-1 over the copy engines, then the copy-engine phase timing.
  one 1gpu 1 X=0 --
  one 1gpu-last-card 1 CUDA_VISIBLE_DEVICES=$((NGPUS - 1)) --
  one 2gpu-ce 2 X=0 -- --grad-transport copy-engine
  one 2gpu-nccl 2 X=0 --
  one 2gpu-ce-zero1 2 X=0 -- --grad-transport copy-engine --zero-stage 1
  one 2gpu-ce-again 2 X=0 -- --grad-transport copy-engine
  one timing-2gpu-ce 2 AISCALE_CUDA_TIMING=1 -- --grad-transport copy-engine
  ;;
split)
  # Layer 0's bucket cut in three (default) or whole (AISCALE_CUDA_SPLIT_LAST_BUCKET=0),
  # alternated, with the phase timing of 1 GPU and of 2 beside them.
  one timing-1gpu 1 AISCALE_CUDA_TIMING=1 --
  one 1gpu 1 X=0 --
  for i in 1 2; do
    one 2gpu-ce-split 2 X=0 -- --grad-transport copy-engine
    one 2gpu-ce-whole 2 AISCALE_CUDA_SPLIT_LAST_BUCKET=0 -- --grad-transport copy-engine
  done
  one timing-2gpu-ce-split 2 AISCALE_CUDA_TIMING=1 -- --grad-transport copy-engine
  one timing-2gpu-ce-whole 2 AISCALE_CUDA_TIMING=1 AISCALE_CUDA_SPLIT_LAST_BUCKET=0 -- --grad-transport copy-engine
  one 2gpu-ce-zero1 2 X=0 -- --grad-transport copy-engine --zero-stage 1
  one 2gpu-nccl 2 X=0 --
  one 1gpu-again 1 X=0 --
  ;;
push)
  # The tail after backward over the copy engines: d(res0) pushed beside the buckets
  # (default) or all-gathered after them (AISCALE_CUDA_PUSH_DRES=0), and both with
  # layer 0's bucket whole (the code before either change), alternated.
  one timing-1gpu 1 AISCALE_CUDA_TIMING=1 --
  one 1gpu 1 X=0 --
  for i in 1 2; do
    one 2gpu-ce-push 2 X=0 -- --grad-transport copy-engine
    one 2gpu-ce-gather 2 AISCALE_CUDA_PUSH_DRES=0 -- --grad-transport copy-engine
    one 2gpu-ce-gather-whole 2 AISCALE_CUDA_PUSH_DRES=0 AISCALE_CUDA_SPLIT_LAST_BUCKET=0 -- --grad-transport copy-engine
  done
  one timing-2gpu-ce-push 2 AISCALE_CUDA_TIMING=1 -- --grad-transport copy-engine
  one 2gpu-ce-zero1-push 2 X=0 -- --grad-transport copy-engine --zero-stage 1
  one 2gpu-ce-zero1-gather 2 AISCALE_CUDA_PUSH_DRES=0 -- --grad-transport copy-engine --zero-stage 1
  one 1gpu-again 1 X=0 --
  ;;
priority)
  # The copy-engine streams at the highest priority (default) or the default one
  # (AISCALE_CE_PRIORITY=default), with d(res0) pushed; and the code before the tail
  # changes (d(res0) all-gathered after the buckets, layer 0's bucket whole, default
  # priority), alternated.
  one timing-1gpu 1 AISCALE_CUDA_TIMING=1 --
  one 1gpu 1 X=0 --
  for i in 1 2; do
    one 2gpu-ce-high 2 X=0 -- --grad-transport copy-engine
    one 2gpu-ce-default 2 AISCALE_CE_PRIORITY=default -- --grad-transport copy-engine
    one 2gpu-ce-before 2 AISCALE_CE_PRIORITY=default AISCALE_CUDA_PUSH_DRES=0 AISCALE_CUDA_SPLIT_LAST_BUCKET=0 -- --grad-transport copy-engine
  done
  one timing-2gpu-ce-high 2 AISCALE_CUDA_TIMING=1 -- --grad-transport copy-engine
  one 2gpu-ce-zero1-high 2 X=0 -- --grad-transport copy-engine --zero-stage 1
  one 1gpu-again 1 X=0 --
  ;;
nvlink)
  # Control: GPU 0 trains alone (phase timing on) while GPU 1's copy engine moves data to
  # and from GPU 0's memory over NVLink (no kernels or copies of GPU 0's own): 14 MiB each
  # way every 1.3 ms (half the exchange's bytes) and back to back; then beside an
  # independent training on GPU 1. Does link activity alone slow a power-capped GPU?
  LOAD=build/cuda/bench/gpu/aiscale_nvlink_load
  [ -x "$LOAD" ] || { echo "build $LOAD first (bench/gpu/run_ddp_gpu2.sh build)"; exit 1; }
  one timing-1gpu 1 AISCALE_CUDA_TIMING=1 --
  "$LOAD" 40 $((14 << 20)) 1300 >> "$OUT/nvlink.log" 2>&1 & load=$!
  one timing-1gpu-link-pattern 1 AISCALE_CUDA_TIMING=1 --
  kill $load 2>/dev/null; wait $load 2>/dev/null
  "$LOAD" 40 $((64 << 20)) 0 >> "$OUT/nvlink.log" 2>&1 & load=$!
  one timing-1gpu-link-continuous 1 AISCALE_CUDA_TIMING=1 --
  kill $load 2>/dev/null; wait $load 2>/dev/null
  CUDA_VISIBLE_DEVICES=1 timeout 60 "$BIN" bench language --model gpt2-124m --batch 16 \
    --seq 1024 --device cuda --precision bf16 --steps 1500 --warmup 5 > /dev/null 2>&1 & other=$!
  one timing-1gpu-beside-gpu1-training 1 AISCALE_CUDA_TIMING=1 --
  kill $other 2>/dev/null; wait $other 2>/dev/null
  one timing-1gpu-again 1 AISCALE_CUDA_TIMING=1 --
  ;;
bf16)
  # Half the bytes over NVLink: the buckets summed in bf16 (--grad-comm bf16: a cast on
  # the model's stream before each bucket, one back after) against fp32, over the copy
  # engines, alternated; with ZeRO-1 too.
  # The casts to bf16 on the communicator's stream (the default since commit d64e643) and,
  # as before it, on the model's stream (AISCALE_CUDA_CAST_ON_COMM=0).
  one 1gpu 1 X=0 --
  for i in 1 2; do
    one 2gpu-ce-fp32 2 X=0 -- --grad-transport copy-engine
    one 2gpu-ce-bf16 2 X=0 -- --grad-transport copy-engine --grad-comm bf16
    one 2gpu-ce-bf16-cast-on-model 2 AISCALE_CUDA_CAST_ON_COMM=0 -- --grad-transport copy-engine --grad-comm bf16
  done
  one 2gpu-ce-zero1-bf16 2 X=0 -- --grad-transport copy-engine --zero-stage 1 --grad-comm bf16
  one 1gpu-again 1 X=0 --
  ;;
bursts)
  # Fewer, larger bursts over NVLink: buckets of ~2 and ~4 layers (56 and 110 MiB) against
  # the default ~1 layer (25 MiB), over the copy engines, alternated.
  one 1gpu 1 X=0 --
  for i in 1 2; do
    one 2gpu-ce-25mib 2 X=0 -- --grad-transport copy-engine
    one 2gpu-ce-56mib 2 X=0 -- --grad-transport copy-engine --bucket-mib 56
    one 2gpu-ce-110mib 2 X=0 -- --grad-transport copy-engine --bucket-mib 110
  done
  one 1gpu-again 1 X=0 --
  ;;
norm)
  # The gradient norm over the copy engines: added up by the buckets' sum kernels
  # (default) or in a pass of its own after the exchange (AISCALE_CUDA_FUSED_NORM=0),
  # alternated three times between two 1-GPU runs; then the phase timing of both.
  one 1gpu 1 X=0 --
  for i in 1 2 3; do
    one 2gpu-ce-fused-norm 2 X=0 -- --grad-transport copy-engine
    one 2gpu-ce-norm-pass 2 AISCALE_CUDA_FUSED_NORM=0 -- --grad-transport copy-engine
  done
  one 1gpu-again 1 X=0 --
  one timing-1gpu 1 AISCALE_CUDA_TIMING=1 --
  one timing-2gpu-ce-fused-norm 2 AISCALE_CUDA_TIMING=1 -- --grad-transport copy-engine
  one timing-2gpu-ce-norm-pass 2 AISCALE_CUDA_TIMING=1 AISCALE_CUDA_FUSED_NORM=0 -- --grad-transport copy-engine
  ;;
forward)
  # Why the forward pass, during which nothing is exchanged, runs slower on 2 GPUs: the
  # phase timing of 1 GPU, of 2 over NCCL and over the copy engines, each with the buckets
  # overlapped with backward and reduced after it (--overlap 0: no traffic beside any
  # kernel of the model), and of 1 GPU again.
  one timing-1gpu 1 AISCALE_CUDA_TIMING=1 --
  one timing-2gpu-ce 2 AISCALE_CUDA_TIMING=1 -- --grad-transport copy-engine
  one timing-2gpu-ce-after-backward 2 AISCALE_CUDA_TIMING=1 -- --grad-transport copy-engine --overlap 0
  one timing-2gpu-nccl 2 AISCALE_CUDA_TIMING=1 --
  one timing-2gpu-nccl-after-backward 2 AISCALE_CUDA_TIMING=1 -- --overlap 0
  one timing-1gpu-again 1 AISCALE_CUDA_TIMING=1 --
  ;;
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
  # One GPU alone and two together: does the exchange cost clock speed at the power cap?
  # The host's other GPU alone gives the cards' own difference; the buckets after backward
  # send the same bytes as the overlapped exchange, beside no kernel of the model.
  one 1gpu 1 X=0 --
  one 1gpu-other-gpu 1 CUDA_VISIBLE_DEVICES=1 --
  one 2gpu-ce 2 X=0 -- --grad-transport copy-engine
  one 2gpu-ce-after-backward 2 X=0 -- --grad-transport copy-engine --overlap 0
  one 2gpu-nccl 2 X=0 --
  one 1gpu-again 1 X=0 --
  one 2gpu-ce-again 2 X=0 -- --grad-transport copy-engine
  ;;
flags)
  # Copy-engine flags raised by the front end (default) or by a one-thread kernel.
  one 2gpu-ce 2 X=0 -- --grad-transport copy-engine
  one 2gpu-ce-flag-kernel 2 AISCALE_CE_FLAGS=kernel -- --grad-transport copy-engine
  one 2gpu-ce-again 2 X=0 -- --grad-transport copy-engine
  one timing-2gpu-ce 2 AISCALE_CUDA_TIMING=1 -- --grad-transport copy-engine
  ;;
esac
kill "$smi_pid" 2>/dev/null
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = [json.loads(line) for line in open(os.path.join(out, "phases.jsonl"))]
# Efficiency tput(2) / (2 tput(1)) against the first untimed run on the first GPU alone.
base = next((j["result"]["tokens_per_s_per_device"] for j in rows if j["result"] and
             j["variant"] == "1gpu"), None)
for j in rows:
    r = j["result"]
    if not r: print("%-28s failed" % j["variant"]); continue
    eff = ", efficiency %.3f" % (r["tokens_per_s_per_device"] / base) if base and r["world_size"] > 1 else ""
    g = r.get("gpu_power", {}).get("ranks") or []
    pw = "; " + " ".join("%.0f/%.0f W %.0f MHz" % (x["mean_power_w"], x["power_limit_w"],
                         x["mean_sm_clock_mhz"]) for x in g) if g else ""
    print("%-28s %d GPU(s) %8.0f tok/s per GPU, step %.2f ms%s%s" % (j["variant"], r["world_size"],
          r["tokens_per_s_per_device"], 1e3 * r["step_time_median_s"], eff, pw))
PY
grep -E "mean of|median of|forward split|bucket \[" "$OUT/phases.err"
[ -s "$OUT/counters.csv" ] && python3 - "$OUT" <<'PY'
import csv, os, sys
out = sys.argv[1]
rows = list(csv.reader(open(os.path.join(out, "counters.csv"))))
head, rows = rows[0], rows[1:]
names = [h.split(".")[-1] for h in head[3:]]
win = {}
for line in open(os.path.join(out, "phases.err")):
    p = line.split()
    if len(p) == 4 and p[0] == "==" and p[2] in ("start", "end"):
        win.setdefault(p[1], {})[p[2]] = float(p[3])
at = {}
for r in rows:
    at[(r[0], r[1], r[2].strip())] = r[3:]
def num(x):
    try: return float(x)
    except ValueError: return None
# Per variant and GPU: the share of the variant's wall time each reason held the clocks
# (counter difference over the run's duration, start-up included).
print("clock-event counters: %% of each variant's wall time (start-up included); reasons: %s" % ", ".join(names))
for (v, when, g), a in sorted(at.items()):
    if when != "start" or (v, "end", g) not in at or v not in win: continue
    b = at[(v, "end", g)]
    wall = (win[v]["end"] - win[v]["start"]) * 1e6
    cells = []
    for n, x, y in zip(names, a, b):
        x, y = num(x), num(y)
        if x is None or y is None or y == x: continue
        cells.append("%s %.1f%%" % (n, 100.0 * (y - x) / wall))
    print("%-28s gpu %s: %s" % (v, g, ", ".join(cells) or "none"))
PY
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
