#!/usr/bin/env bash
# This tree against another source tree (an earlier commit) on the same GPUs, in one run:
# both built (CUDA, sm_90), then the op harness on CUDA, the kernel workbench and the
# GPU tests of this tree (gpu2 where the host has 2 GPUs, the one-GPU ones where it has
# one), the training losses of both builds on the same config (they must agree bit for bit
# where the kernels are deterministic), GPT-2 124M tokens/s on 1 GPU and on 2 (NCCL, copy
# engines; on a two-GPU host) and ResNet-50 bf16 images/s, alternated between the builds.
# Logs under $OUT, a short table last. From the repository root, with .devdeps carried and the other tree
# unpacked in BASE (e.g. `git archive COMMIT | tar -x -C .base`):
#   BASE=.base bash bench/gpu/compare_builds.sh [stages...]   stages: build check test loss bench
# (ROUNDS=N: the benchmark rounds, 2 by default.)
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
OUT=${OUT:-/tmp/aiscale-compare-out}
BASE=${BASE:-.base}
mkdir -p "$OUT"
stages=" ${*:-build check test loss bench} "
has() { [[ "$stages" == *" $1 "* ]]; }
source bench/gpu/host_common.sh
NEW=build/cuda
OLD=$BASE/build/cuda
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
MPI=(mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_NVLS_ENABLE -x OMP_NUM_THREADS)
{ nvidia-smi --query-gpu=index,name,power.limit,driver_version --format=csv; git rev-parse HEAD 2>/dev/null; } >> "$OUT/setup.log" 2>&1

if has build; then
  log "build: this tree and $BASE, side by side"
  use_devdeps
  ( cmake --preset cuda -DCMAKE_CUDA_ARCHITECTURES=90 > "$OUT/build_new.log" 2>&1 &&
    cmake --build --preset cuda >> "$OUT/build_new.log" 2>&1 ) &
  new_pid=$!
  ( cd "$BASE" && cmake --preset cuda -DCMAKE_CUDA_ARCHITECTURES=90 > "$OUT/build_old.log" 2>&1 &&
    cmake --build --preset cuda --target aiscale >> "$OUT/build_old.log" 2>&1 ) &
  old_pid=$!
  wait $new_pid || { tail -30 "$OUT/build_new.log"; exit 1; }
  wait $old_pid || { tail -30 "$OUT/build_old.log"; exit 1; }
  log "build done"
else
  use_devdeps
fi

if has check; then
  log "op harness on CUDA, kernel workbench"
  timeout 240 "$NEW/tests/ops/test_ops" test --backend cuda > "$OUT/ops_cuda.log" 2>&1
  echo "test_ops exit $?" >> "$OUT/ops_cuda.log"
  timeout 120 "$NEW/bench/dev/aiscale_attention_variants" > "$OUT/workbench.jsonl" 2>> "$OUT/errors.log"
  echo "workbench exit $?" >> "$OUT/errors.log"
fi

if has test; then
  if [ "$GPUS" -ge 2 ]; then
    log "gpu2 tests"
    timeout 300 ctest --test-dir "$NEW" -L gpu -R gpu2 --timeout 200 > "$OUT/gpu2.log" 2>&1
  else
    log "one-GPU tests (the op harness, which check runs, left out)"
    timeout 500 ctest --test-dir "$NEW" -L gpu -E "gpu2|^ops[.]cuda" --timeout 300 > "$OUT/gpu2.log" 2>&1
  fi
  echo "ctest exit $?" >> "$OUT/gpu2.log"
fi

if has loss; then
  # 20 steps of GPT-2 124M on the carried shards, 1 GPU and 2 GPUs (NCCL, copy engines,
  # ZeRO-1), each build; the losses of metrics.jsonl compared line by line below.
  log "losses: both builds"
  cfg=(--set model.preset=\"gpt2-124m\" model.n_layer=12 model.n_head=12 model.n_embd=768
       model.block_size=1024 train.device=\"cuda\" train.precision=\"bf16\" train.batch_size=8
       train.seq_len=256 train.steps=20 train.eval_every=0 train.log_every=1 run.checkpoint_every=0)
  for build in NEW OLD; do
    bin=${!build}/aiscale
    variants=("1:"); [ "$GPUS" -ge 2 ] && variants+=("2:nccl" "2:copy-engine" "2:zero1")
    for v in "${variants[@]}"; do
      n=${v%%:*}; how=${v#*:}
      extra=(); [ "$how" = copy-engine ] && extra=(parallel.grad_transport=\"copy-engine\")
      [ "$how" = zero1 ] && extra=(parallel.zero_stage=1)
      name=loss_${build}_${n}_${how:-one}
      launch=(); [ "$n" = 2 ] && launch=("${MPI[@]}")
      AISCALE_CUDA_AUTOTUNE=0 timeout 120 "${launch[@]}" "$bin" train --config configs/quickstart.toml -q \
        "${cfg[@]}" "${extra[@]}" run.dir=\"$OUT/runs\" run.name=\"$name\" > "$OUT/$name.log" 2>&1
      echo "$name exit $?" >> "$OUT/errors.log"
    done
  done
fi

if has bench; then
  log "GPT-2 124M tokens/s, builds alternated"
  common=(bench language --model gpt2-124m --batch 16 --seq 1024 --device cuda --precision bf16 --steps 30 --warmup 10)
  for round in $(seq "${ROUNDS:-2}"); do
    for build in NEW OLD; do
      bin=${!build}/aiscale
      timeout 120 "$bin" "${common[@]}" --output "$OUT/bench_${build}.jsonl" > /dev/null 2>> "$OUT/errors.log"
      base=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["tokens_per_s_per_device"])' \
             "$OUT/bench_${build}.jsonl" 2>/dev/null || echo 0)
      [ "$GPUS" -ge 2 ] && for t in nccl copy-engine; do
        timeout 150 "${MPI[@]}" "$bin" "${common[@]}" --grad-transport "$t" --baseline-tokens-per-s "$base" \
          --output "$OUT/bench_${build}.jsonl" > /dev/null 2>> "$OUT/errors.log"
      done
      CUDA_VISIBLE_DEVICES=0 timeout 200 "$bin" bench vision --device cuda --model resnet50 --precision bf16 \
        --steps 30 --warmup 10 --output "$OUT/vision_${build}.jsonl" > /dev/null 2>> "$OUT/errors.log"
    done
  done
fi
log "done"

python3 - "$OUT" <<'EOF'
import glob, json, os, re, sys
out = sys.argv[1]
def lines(p):
    try: return [l for l in open(p)]
    except OSError: return []
t = "".join(lines(os.path.join(out, "ops_cuda.log")))
m = re.findall(r"^.*(?:passed|failed).*$", t, re.M)
print("op harness (CUDA):", m[-1] if m else "no summary", "|", (re.findall(r"test_ops exit \d+", t) or ["?"])[0])
g = "".join(lines(os.path.join(out, "gpu2.log")))
print("gpu2 tests:", (re.findall(r"\d+% tests passed.*", g) or ["no summary"])[0], "|", (re.findall(r"ctest exit \d+", g) or ["?"])[0])
for f in re.findall(r"^\s*\d+ - \S+ \(Failed\)", g, re.M): print("  failed:", f.strip())
def losses(name):
    p = os.path.join(out, "runs", name, "metrics.jsonl")
    return [json.loads(l)["loss"] for l in lines(p) if l.startswith("{")]
print("\nlosses, 20 steps (this tree vs base):")
for v in ["1_one", "2_nccl", "2_copy-engine", "2_zero1"]:
    a, b = losses("loss_NEW_" + v), losses("loss_OLD_" + v)
    same = a == b and len(a) > 0
    diff = max((abs(x - y) for x, y in zip(a, b)), default=float("nan"))
    print("  %-14s %2d steps; identical: %s; max |diff| %.3g; last %s vs %s" % (v, len(a), same, diff,
          a[-1] if a else "-", b[-1] if b else "-"))
print("\nResNet-50 bf16, default batch: images/s per round")
for build in ["NEW", "OLD"]:
    for j in [json.loads(l) for l in lines(os.path.join(out, "vision_%s.jsonl" % build)) if l.startswith("{")]:
        print("  %s %9.1f" % ("this" if build == "NEW" else "base", j["images_per_s"]))
print("\nGPT-2 124M, B=16, T=1024, bf16: tokens/s per GPU (efficiency) per round")
for build in ["NEW", "OLD"]:
    rows = [json.loads(l) for l in lines(os.path.join(out, "bench_%s.jsonl" % build)) if l.startswith("{")]
    for j in rows:
        print("  %s %d GPU %-12s %9.0f %s" % ("this" if build == "NEW" else "base", j["world_size"],
              j.get("grad_transport", "") if j["world_size"] > 1 else "", j["tokens_per_s_per_device"],
              "%.4f" % j["scaling_efficiency"] if "scaling_efficiency" in j else ""))
EOF
