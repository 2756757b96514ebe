#!/usr/bin/env bash
# ResNet on GPUs: build, the GPU vision tests (every CUDA vision op against the CPU
# reference, the GPU ResNet against the CPU model), then ResNet-50 on synthetic 224x224
# images, bf16 AMP (both batch-norm paths) and fp32, on one GPU and data-parallel on all
# the host's GPUs, against a PyTorch ResNet-50 program, $RESNET_PEER (default
# bench/compare/torch_resnet50.py: channels-last, `--amp 1` bf16 autocast or `--amp 0` fp32
# with TF32 off, `--compile 0|1`; one JSON line) on the same GPUs. Logs under $OUT, a short
# table last. From the repository root:
#   bash bench/gpu/vision_gpu.sh [stages...]
#   stages: build test bench peer multi    (default: all)
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
OUT=${OUT:-/tmp/aiscale-vision-out}
mkdir -p "$OUT"
RESNET_PEER=${RESNET_PEER:-bench/compare/torch_resnet50.py}
stages=" ${*:-build test bench peer multi} "
has() { [[ "$stages" == *" $1 "* ]]; }
BIN=build/cuda
NGPUS=${NGPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
STEPS=${STEPS:-40}
source bench/gpu/host_common.sh

if has build; then build_cuda aiscale aiscale_gpu_vision_tests; else use_devdeps; fi
if has test; then
  log "ctest -R gpu.vision"
  timeout "${TEST_TIMEOUT_S:-300}" ctest --test-dir "$BIN" -L gpu -R gpu.vision -V --timeout 280 > "$OUT/vision_ctest.log" 2>&1
  echo "ctest exit $?" >> "$OUT/vision_ctest.log"
  grep -E "^\S*\[ +(OK|FAILED) +\]|tests passed|ctest exit" "$OUT/vision_ctest.log" | tail -40
fi
vis() {  # vis NAME GPUS options...
  local name=$1 n=$2
  shift 2
  local launch=("$BIN/aiscale")
  [ "$n" -gt 1 ] && launch=("$BIN/aiscale" launch -n "$n" --threads-per-rank 2 --)
  timeout 200 "${launch[@]}" bench vision --device cuda --model resnet50 --steps "$STEPS" --warmup 10 "$@" \
    --output "$OUT/vision.jsonl" > "$OUT/vision_$name.log" 2>&1
  echo "vision $name exit $?" >> "$OUT/errors.log"
}
if has bench; then
  log "resnet50 on one GPU: bf16 (own and cuDNN batch norm), fp32"
  vis bf16 1 --precision bf16
  vis bf16_cudnn_bn 1 --precision bf16 --batchnorm cudnn
  vis fp32 1 --precision fp32
fi
if has peer && [ -n "${RESNET_PEER:-}" ]; then
  log "pytorch resnet50 on one GPU"
  for args in "--amp 1 --compile 1" "--amp 1 --compile 0" "--amp 0 --compile 0"; do
    timeout 240 python3 "$RESNET_PEER" $args --steps "$STEPS" >> "$OUT/peer_resnet.jsonl" 2>> "$OUT/peer_errors.log"
    echo "peer $args exit $?" >> "$OUT/peer_errors.log"
  done
fi
if has multi && [ "$NGPUS" -gt 1 ]; then
  log "resnet50 bf16 on 2 and $NGPUS GPUs"
  for n in 2 $([ "$NGPUS" -ge 4 ] && echo 4); do
    vis "bf16_x$n" "$n" --precision bf16
    if [ -n "${RESNET_PEER:-}" ]; then
      timeout 240 torchrun --standalone --nproc_per_node="$n" "$RESNET_PEER" --amp 1 --compile 0 --steps "$STEPS" \
        >> "$OUT/peer_resnet.jsonl" 2>> "$OUT/peer_errors.log"
    fi
  done
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
print("\nResNet-50, synthetic 224x224: images/s per GPU")
for j in rows("vision.jsonl"):
    print("aiscale %d GPU(s) %s B=%s%s: %.0f per GPU (%s)" % (j.get("world_size", 1), j.get("precision", "?"),
          j.get("batch_size", j.get("batch", "?")), " bn " + str(j.get("batchnorm")) if j.get("batchnorm") else "",
          j.get("images_per_s_per_rank", 0), j.get("kernels", "")))
for p in rows("peer_resnet.jsonl"):
    print("pytorch " + " ".join("%s=%s" % (k, v) for k, v in p.items() if k not in ("gpu",)))
PY
