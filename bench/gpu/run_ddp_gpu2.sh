#!/usr/bin/env bash
# One call on a 2-GPU host for data parallelism over NCCL: build, the gpu2 tests, the
# all-reduce benchmark against the PyTorch peer (torch_allreduce.py), GPT-2 124M on 1
# and 2 GPUs against the peer (torch_gpt2.py) on 1 and 2 GPUs. Logs under $OUT, a short
# table last (7 files under $OUT: setup.log, errors.log, *.jsonl, ctest.log). Run from the
# repository root with .devdeps and .peers (copies of ../shared/peers/*.py) carried:
#   bash bench/gpu/run_ddp_gpu2.sh [stages...]   stages: build peer allreduce language test mpi
# The PyTorch peer compiles (torch.compile) on the CPU for a minute or more: it runs
# while aiscale builds (the build niced), and always before anything of ours uses the GPUs.
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
OUT=${OUT:-/tmp/aiscale-gpu2-out}
mkdir -p "$OUT"
stages=" ${*:-build peer allreduce language test mpi} "
has() { [[ "$stages" == *" $1 "* ]]; }
BIN=build/cuda
MPIRUN=(mpirun -np 2 --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE
        -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x OMP_NUM_THREADS)
log() { echo "== $(date +%T) $*" | tee -a "$OUT/setup.log"; }

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
  log "peer gpt2 start"
  (
    timeout 300 python3 .peers/torch_gpt2.py --model 124M --batch 16 --seq 1024 >> "$OUT/peer_gpt2.jsonl" 2>> "$OUT/errors.log"
    timeout 300 torchrun --standalone --nproc_per_node=2 .peers/torch_gpt2.py --model 124M --batch 16 --seq 1024 \
      >> "$OUT/peer_gpt2.jsonl" 2>> "$OUT/errors.log"
  ) &
  peer_pid=$!
fi

if has build; then
  log "build"
  source .devdeps/use-debs.sh .devdeps >> "$OUT/setup.log" 2>&1
  if ! cmake --preset cuda -DCMAKE_CUDA_ARCHITECTURES=90 >> "$OUT/setup.log" 2>&1 ||
     ! nice -n 19 cmake --build --preset cuda --target aiscale aiscale_gpu2_tests -j 28 >> "$OUT/setup.log" 2>&1; then
    tail -40 "$OUT/setup.log"
    [ -n "$peer_pid" ] && kill "$peer_pid" 2>/dev/null
    exit 1
  fi
  log "build done"
else
  [ -f .devdeps/use-debs.sh ] && source .devdeps/use-debs.sh .devdeps >> "$OUT/setup.log" 2>&1
fi
grep -E "aiscale: (CUDA|NCCL)" "$OUT/setup.log"

if [ -n "$peer_pid" ]; then
  log "waiting for the peer"
  wait "$peer_pid"
  log "peer gpt2 done"
fi

common=(bench language --model gpt2-124m --batch 16 --seq 1024 --device cuda --precision bf16)
if has allreduce; then
  log "allreduce: peer, then aiscale nccl"
  [ -f .peers/torch_allreduce.py ] && timeout 120 torchrun --standalone --nproc_per_node=2 .peers/torch_allreduce.py \
    >> "$OUT/peer_allreduce.jsonl" 2>> "$OUT/errors.log"
  timeout 150 "${MPIRUN[@]}" "$BIN/aiscale" bench allreduce --backend nccl --nodes 1 \
    --output "$OUT/allreduce.jsonl" > /dev/null 2>> "$OUT/errors.log"
  echo "allreduce nccl exit $?" >> "$OUT/errors.log"
fi

base=0
if has language; then
  log "language: 1 GPU, 2 GPUs (nccl)"
  timeout 120 "$BIN/aiscale" "${common[@]}" --steps 30 --warmup 10 --output "$OUT/language.jsonl" \
    > /dev/null 2>> "$OUT/errors.log"
  base=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["tokens_per_s_per_device"])' \
         "$OUT/language.jsonl" 2>/dev/null || echo 0)
  timeout 150 "${MPIRUN[@]}" "$BIN/aiscale" "${common[@]}" --steps 30 --warmup 10 \
    --baseline-tokens-per-s "$base" --output "$OUT/language.jsonl" > /dev/null 2>> "$OUT/errors.log"
  echo "language nccl exit $?" >> "$OUT/errors.log"
fi

if has test; then
  log "ctest -L gpu -R gpu2"
  # -V: the tests print their measured differences ("[gpu2] ...") also when they pass.
  timeout 280 ctest --test-dir "$BIN" -L gpu -R gpu2 -V --timeout 200 > "$OUT/ctest.log" 2>&1
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
peer_ar = {}
for p in rows("peer_allreduce.jsonl"):
    for row in p["rows"]: peer_ar[row["mib"] * 2**20] = row["busbw_gbs"]
print("\nall-reduce, 2 GPUs, fp32 in place: bus bandwidth GB/s")
print("%12s %10s %10s %10s %8s" % ("bytes", "aiscale", "torch", "ratio", "mpi"))
ours = {(j["backend"], j["bytes"]): j for j in rows("allreduce.jsonl")}
for (b, n), j in sorted(ours.items(), key=lambda x: x[0][1]):
    if b != "nccl" or n < 2**16: continue
    pb = peer_ar.get(n)
    m = ours.get(("mpi", n))
    print("%12d %10.1f %10s %10s %8s" % (n, j["busbw_GBps"], "%.1f" % pb if pb else "",
          "%.3f" % (j["busbw_GBps"] / pb) if pb else "", "%.1f" % m["busbw_GBps"] if m else ""))
print("\nGPT-2 124M, B=16 per GPU, T=1024, bf16: tokens/s per GPU")
peer = {p["gpus"]: p for p in rows("peer_gpt2.jsonl")}
for j in rows("language.jsonl"):
    print("aiscale %d GPU(s) [%s]: %.0f per GPU, step %.2f ms%s" % (j["world_size"], j.get("communicator", ""),
          j["tokens_per_s_per_device"], 1e3 * j["step_time_median_s"],
          ", efficiency %.3f" % j["scaling_efficiency"] if "scaling_efficiency" in j else ""))
for g, p in sorted(peer.items()):
    print("pytorch %d GPU(s): %.0f per GPU, step %.2f ms" % (g, p["tokens_per_s_per_gpu"], 1e3 * p["median_step_s"]))
if 1 in peer and 2 in peer:
    print("pytorch efficiency %.3f" % (peer[2]["tokens_per_s_per_gpu"] / peer[1]["tokens_per_s_per_gpu"]))
EOF
