#!/usr/bin/env bash
# One run on a host of 2 or more GPUs for data parallelism: build, the gpu2 tests, the
# all-reduce benchmark against PyTorch (bench/compare/torch_allreduce.py), GPT-2 124M on 1
# GPU and on 2, 4, 8 (up to the GPUs present, or $SWEEP) against PyTorch DDP
# (bench/compare/torch_gpt2.py) on the same counts: plain data parallelism (buckets
# overlapped with backward; over NCCL and over the copy engines), ZeRO-1, and on 2 GPUs the
# buckets reduced after backward (--overlap 0); 1 GPU also on the host's last GPU alone.
# Logs under $OUT, a short table last (setup.log, errors.log, *.jsonl, ctest.log). Run
# from the repository root on a host with PyTorch and torchrun (and .devdeps, the Debian
# packages the build needs, where the host lacks them):
#   bash bench/gpu/run_ddp_gpu2.sh [stages...]   stages: build peer check allreduce language test mpi
# The stage `peer` runs the PyTorch training comparison; it compiles (torch.compile) on the
# CPU for a minute or more, so it runs while aiscale builds (the build niced), and always
# before anything of ours uses the GPUs.
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
OUT=${OUT:-/tmp/aiscale-gpu2-out}
mkdir -p "$OUT"
stages=" ${*:-build peer check allreduce language test mpi} "
has() { [[ "$stages" == *" $1 "* ]]; }
BIN=build/cuda
NGPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
SWEEP=${SWEEP:-$(for n in 2 4 8; do [ "$n" -le "$NGPUS" ] && echo -n "$n "; done)}
MPI=(mpirun --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE
     -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x OMP_NUM_THREADS)
MPIRUN=("${MPI[@]}" -np 2)
source bench/gpu/host_common.sh

{
  nvidia-smi --query-gpu=index,name,memory.total,clocks.sm,clocks.max.sm,power.limit,driver_version --format=csv
  nvidia-smi topo -m
  git rev-parse HEAD 2>/dev/null || cat .gpu2/HEAD 2>/dev/null
  ls -l /usr/include/nccl.h /usr/local/cuda/include/nccl.h 2>&1
  mpirun --version 2>&1 | head -1
  python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
} >> "$OUT/setup.log" 2>&1

peer_pid=""
if has peer; then
  log "pytorch gpt2 start"
  torch_gpt2=(bench/compare/torch_gpt2.py --model gpt2-124m --batch 16 --seq 1024 --steps 30 --warmup 10)
  (
    timeout 300 python3 "${torch_gpt2[@]}" >> "$OUT/peer_gpt2.jsonl" 2>> "$OUT/errors.log"
    for n in $SWEEP; do
      timeout 300 torchrun --standalone --nproc_per_node="$n" "${torch_gpt2[@]}" \
        >> "$OUT/peer_gpt2.jsonl" 2>> "$OUT/errors.log"
    done
  ) &
  peer_pid=$!
fi

if has build; then build_cuda aiscale aiscale_gpu2_tests test_ops aiscale_nvlink_load aiscale_p2p_copy_bench; else use_devdeps; fi
grep -E "aiscale: (CUDA|NCCL)" "$OUT/setup.log"

if [ -n "$peer_pid" ]; then
  log "waiting for pytorch"
  wait "$peer_pid"
  log "pytorch gpt2 done"
fi

if has check; then
  log "gpu checks (one GPU: every op against the CPU reference)"
  timeout 200 "$BIN/tests/ops/test_ops" test --backend cuda > "$OUT/check.log" 2>&1
  echo "check exit code $?" >> "$OUT/check.log"
  grep -E "FAIL|ERROR|cuda checks|check exit" "$OUT/check.log" | tail -8
fi

common=(bench language --model gpt2-124m --batch 16 --seq 1024 --device cuda --precision bf16)
if has allreduce; then
  log "allreduce: pytorch, then aiscale nccl"
  for n in ${ALLREDUCE_SWEEP:-2}; do
    timeout 120 torchrun --standalone --nproc_per_node="$n" bench/compare/torch_allreduce.py \
      >> "$OUT/peer_allreduce.jsonl" 2>> "$OUT/errors.log"
    timeout 150 "${MPI[@]}" -np "$n" "$BIN/aiscale" bench allreduce --backend nccl --nodes 1 \
      --output "$OUT/allreduce.jsonl" > /dev/null 2>> "$OUT/errors.log"
    echo "allreduce nccl $n exit $?" >> "$OUT/errors.log"
  done
fi

base=0
if has language; then
  log "language: 1 GPU, then $SWEEP GPUs (nccl: overlapped, ZeRO-1; 2 GPUs also not overlapped)"
  timeout 120 "$BIN/aiscale" "${common[@]}" --steps 30 --warmup 10 --output "$OUT/language.jsonl" \
    > /dev/null 2>> "$OUT/errors.log"
  base=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["tokens_per_s_per_device"])' \
         "$OUT/language.jsonl" 2>/dev/null || echo 0)
  # The same on the host's last GPU alone: how much the cards differ (a lock-step
  # data-parallel step runs at the pace of the slowest).
  CUDA_VISIBLE_DEVICES=$((NGPUS - 1)) timeout 120 "$BIN/aiscale" "${common[@]}" --steps 30 --warmup 10 \
    --output "$OUT/language_last_gpu.jsonl" > /dev/null 2>> "$OUT/errors.log"
  for n in $SWEEP; do
    variants=("--zero-stage 0" "--zero-stage 0 --grad-transport copy-engine" "--zero-stage 1")
    [ "$n" = 2 ] && variants+=("--zero-stage 0 --overlap 0")
    for v in "${variants[@]}"; do
      timeout 150 "${MPI[@]}" -np "$n" "$BIN/aiscale" "${common[@]}" --steps 30 --warmup 10 $v \
        --baseline-tokens-per-s "$base" --output "$OUT/language.jsonl" > /dev/null 2>> "$OUT/errors.log"
      echo "language nccl $n $v exit $?" >> "$OUT/errors.log"
    done
  done
fi

if has test; then
  log "ctest -L gpu -R gpu2"
  # -V: the tests print their measured differences ("[gpu2] ...") also when they pass.
  timeout "${TEST_TIMEOUT_S:-420}" ctest --test-dir "$BIN" -L gpu -R gpu2 -V --timeout 200 > "$OUT/ctest.log" 2>&1
  echo "ctest exit $?" >> "$OUT/ctest.log"
  grep -E "\[gpu2\]|tests passed|Test +#.*(Passed|Failed|Skipped)|ctest exit" "$OUT/ctest.log" | tail -20
fi

# For comparison, while time is left (under 470 s so far): the same through MPI and host memory.
if has mpi && [ "$SECONDS" -lt "${MPI_STAGE_BEFORE_S:-470}" ]; then
  log "mpi: allreduce and language through host memory"
  timeout 45 "${MPIRUN[@]}" "$BIN/aiscale" bench allreduce --backend mpi --nodes 1 --iters 5 \
    --max-bytes $((128 << 20)) --step-factor 4 --output "$OUT/allreduce.jsonl" > /dev/null 2>> "$OUT/errors.log"
  echo "allreduce mpi exit $?" >> "$OUT/errors.log"
  timeout 60 "${MPIRUN[@]}" "$BIN/aiscale" "${common[@]}" --steps 6 --warmup 2 --communicator mpi \
    --baseline-tokens-per-s "$base" --output "$OUT/language.jsonl" > /dev/null 2>> "$OUT/errors.log"
  echo "language mpi exit $?" >> "$OUT/errors.log"
fi
log "done"

python3 - "$OUT" <<'EOF'
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
peer_ar = {}  # bench/compare/torch_allreduce.py: one line per size
for p in rows("peer_allreduce.jsonl"):
    peer_ar[(p["world_size"], p["bytes"])] = p["busbw_GBps"]
ours = {(j["backend"], j.get("world_size", 2), j["bytes"]): j for j in rows("allreduce.jsonl")}
for world in sorted({w for (_, w, _) in ours}):
    print("\nall-reduce, %d GPUs, fp32 in place: bus bandwidth GB/s" % world)
    print("%12s %10s %10s %10s %8s" % ("bytes", "aiscale", "torch", "ratio", "mpi"))
    for (b, w, n), j in sorted(ours.items(), key=lambda x: x[0][2]):
        if b != "nccl" or w != world or n < 2**16: continue
        pb = peer_ar.get((world, n))
        m = ours.get(("mpi", world, n))
        print("%12d %10.1f %10s %10s %8s" % (n, j["busbw_GBps"], "%.1f" % pb if pb else "",
              "%.3f" % (j["busbw_GBps"] / pb) if pb else "", "%.1f" % m["busbw_GBps"] if m else ""))
def power(j):  # the GPUs' mean board power / limit and SM clock over the timed steps (NVML)
    g = j.get("gpu_power", {}).get("ranks")
    if not g: return ""
    return "; power " + " ".join("%.0f/%.0f W %.0f MHz" % (r["mean_power_w"], r["power_limit_w"],
                                  r["mean_sm_clock_mhz"]) for r in g)
print("\nGPT-2 124M, B=16 per GPU, T=1024, bf16: tokens/s per GPU")
peer = {p["world_size"]: p for p in rows("peer_gpt2.jsonl")}  # bench/compare/torch_gpt2.py
for j in rows("language.jsonl"):
    how = "" if j["world_size"] == 1 else " zero %s, %s, %s," % (j.get("zero_stage", "?"), j.get("gradient_sync", "?"),
                                                                 j.get("grad_transport", "nccl"))
    print("aiscale %d GPU(s) [%s]%s %.0f per GPU, step %.2f ms, optimizer state %.2f GiB, memory %.2f GiB%s" % (
          j["world_size"], j.get("communicator", ""), how, j["tokens_per_s_per_device"],
          1e3 * j["step_time_median_s"], j.get("optimizer_state_bytes", 0) / 2**30,
          j.get("model_memory_bytes", 0) / 2**30,
          ", efficiency %.3f" % j["scaling_efficiency"] if "scaling_efficiency" in j else "")
          + power(j))
for j in rows("language_last_gpu.jsonl"):
    print("aiscale 1 GPU, the host's last GPU alone: %.0f, step %.2f ms%s" % (j["tokens_per_s_per_device"],
          1e3 * j["step_time_median_s"], power(j)))
for g, p in sorted(peer.items()):
    print("pytorch %s %d GPU(s)%s: %.0f per GPU, step %.2f ms%s" % (
          p["torch_version"], g, " compiled" if p["compiled"] else "", p["tokens_per_s_per_device"],
          1e3 * p["step_time_median_s"], ", efficiency %.3f" % (p["tokens_per_s_per_device"] /
          peer[1]["tokens_per_s_per_device"]) if g > 1 and 1 in peer else ""))
EOF
