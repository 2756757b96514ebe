#!/usr/bin/env bash
# A GPT-2 124M scaling study on the GPUs of one host, with PyTorch beside it, in one run:
# `aiscale scale` of configs/studies/gpt2-124m-gpu.toml over 1, 2, 4, 8 GPUs (those the host
# has, or $COUNTS), and bench/compare/torch_gpt2.py (compiled, DDP through torchrun) on the
# same counts, bf16. PyTorch compiles on the CPU while aiscale builds and runs before anything
# of aiscale's uses the GPUs. The study directory, PyTorch's JSON lines and their analysis,
# and the report (when the chart libraries are there) go to $OUT/study.tar.gz; a summary last.
# From the repository root, with .devdeps carried:
#   bash bench/gpu/study_gpt2.sh [stages...]     stages: build peer study (default: all)
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
OUT=${OUT:-/tmp/aiscale-study-out}
mkdir -p "$OUT"
stages=" ${*:-build peer study} "
has() { [[ "$stages" == *" $1 "* ]]; }
source bench/gpu/host_common.sh
BIN=build/cuda/aiscale
NGPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
COUNTS=${COUNTS:-$(for n in 1 2 4 8; do [ "$n" -le "$NGPUS" ] && echo -n "$n "; done)}
WORK=$OUT/work
mkdir -p "$WORK"
{ nvidia-smi --query-gpu=index,name,power.limit,driver_version --format=csv; nvidia-smi topo -m
  git rev-parse HEAD 2>/dev/null; python3 -c 'import torch; print("torch", torch.__version__)'; } >> "$OUT/setup.log" 2>&1

peer_pid=""
if has peer; then
  log "peer: PyTorch on $COUNTS GPU(s)"
  (
    base=0
    for n in $COUNTS; do
      timeout 300 torchrun --standalone --nproc_per_node="$n" bench/compare/torch_gpt2.py --model gpt2-124m \
        --batch 16 --seq 1024 --steps 30 --warmup 10 --precision bf16 --compile 1 \
        --baseline-tokens-per-s "$base" --output "$WORK/pytorch.jsonl" > /dev/null 2>> "$OUT/errors.log"
      echo "peer $n exit $?" >> "$OUT/errors.log"
      [ "$n" = 1 ] && base=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["tokens_per_s_per_device"])' \
        "$WORK/pytorch.jsonl" 2>/dev/null || echo 0)
    done
  ) &
  peer_pid=$!
fi

if has build; then build_cuda aiscale; else use_devdeps; fi
if [ -n "$peer_pid" ]; then
  log "waiting for the peer"
  wait "$peer_pid"
fi

if has study; then
  counts_toml=$(echo $COUNTS | sed 's/ /, /g')
  sed "s/^counts = .*/counts = [$counts_toml]/" configs/studies/gpt2-124m-gpu.toml > "$WORK/study.toml"
  log "study: counts [$counts_toml]"
  timeout 480 "$BIN" scale "$WORK/study.toml" -o "$WORK/study" > "$OUT/study.log" 2>&1
  echo "study exit $?" >> "$OUT/study.log"
  "$BIN" scale --analyze "$WORK/pytorch.jsonl" > "$WORK/pytorch-analysis.json" 2>> "$OUT/errors.log"
  if [ -d third_party_npm/node_modules/vega ]; then
    "$BIN" report "$WORK/study" "$WORK/pytorch-analysis.json" -o "$WORK/report.html" >> "$OUT/study.log" 2>&1
  fi
fi
log "done"
tar -czf "$OUT/study.tar.gz" -C "$OUT" work
grep -vE "^\[[0-9]+/[0-9]+\] .*running" "$OUT/study.log" | tail -30
python3 - "$WORK/pytorch.jsonl" <<'EOF'
import json, sys
try: rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
except OSError: rows = []
for j in rows:
    print("pytorch %d GPU(s) %s: %.0f tokens/s per GPU%s" % (j["world_size"], j.get("precision", ""),
          j["tokens_per_s_per_device"], ", efficiency %.3f" % j["scaling_efficiency"] if "scaling_efficiency" in j else ""))
EOF
