#!/usr/bin/env bash
# The multi-GPU tests (ctest -L gpu) on a host with one GPU: 2 ranks share it over MPI
# (AISCALE_TEST_SHARED_GPU=1, tests/gpu2/gpu2_support.h: parallel.communicator = "mpi",
# the device collectives staged through host memory), the tests about NCCL or the copy
# engines themselves, and the 4-rank ones, skipped with their reason. Stages:
#   build   the cuda preset (sm_90), every target: aiscale and the GPU test programs
#   test    ctest -L gpu with one GPU visible (CUDA_VISIBLE_DEVICES, default 0)
# Logs under $OUT (setup.log, ctest.log, ctest.xml), a table of every test's verdict
# (passed, failed, skipped with the reason) last. From the repository root, with .devdeps
# carried where the host lacks the Debian packages:
#   bash bench/gpu/shared_gpu_tests.sh [stages...]   (default: build test)
# CTEST_ARGS narrows the tests (e.g. CTEST_ARGS="-R gpu2\." ); TEST_TIMEOUT_S bounds the
# whole ctest run (default 5400 s).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
export AISCALE_TEST_SHARED_GPU=1
OUT=${OUT:-/tmp/aiscale-shared-gpu-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)  # ctest places a relative JUnit path in the build folder
stages=" ${*:-build test} "
has() { [[ "$stages" == *" $1 "* ]]; }
source bench/gpu/host_common.sh
BIN=build/cuda
{ nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
  mpirun --version 2>&1 | head -1
  git rev-parse HEAD 2>/dev/null; } >> "$OUT/setup.log" 2>&1

if has build; then
  build_cuda all
else
  use_devdeps
fi

if has test; then
  visible=$(python3 -c 'import os; print(len([d for d in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]))')
  [ "$visible" = 1 ] || { echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES names $visible GPUs: name one"; exit 2; }
  log "ctest -L gpu, 2 ranks sharing GPU $CUDA_VISIBLE_DEVICES over MPI"
  # shellcheck disable=SC2086  # CTEST_ARGS is a list of arguments
  timeout "${TEST_TIMEOUT_S:-5400}" ctest --test-dir "$BIN" -L gpu --output-on-failure ${CTEST_ARGS:-} \
    --output-junit "$OUT/ctest.xml" > "$OUT/ctest.log" 2>&1
  echo "ctest exit $?" >> "$OUT/ctest.log"
  tail -3 "$OUT/ctest.log"
  # The verdicts from the JUnit file (a skipped test's reason: its "skipped: ..." line).
  python3 - "$OUT/ctest.xml" <<'EOF'
import sys
import xml.etree.ElementTree as ET
try:
    cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
except (OSError, ET.ParseError) as e:
    sys.exit(f"no verdicts: {sys.argv[1]}: {e}")
rows, counts = [], {"passed": 0, "failed": 0, "skipped": 0}
for c in cases:
    out = c.findtext("system-out") or ""
    if c.find("failure") is not None or c.get("status") == "fail":
        verdict, note = "failed", ""
    elif c.find("skipped") is not None or c.get("status") in ("notrun", "disabled"):
        verdict = "skipped"
        note = next((l.strip() for l in out.splitlines() if l.strip().startswith("skipped:")), "")
        note = note[len("skipped:"):].strip()
    else:
        verdict, note = "passed", ""
    counts[verdict] += 1
    rows.append((c.get("name", "?"), verdict, c.get("time", "?"), note))
width = max((len(r[0]) for r in rows), default=4)
print(f"{'test':<{width}}  {'verdict':<7}  {'seconds':>8}  reason")
for name, verdict, secs, note in rows:
    try:
        secs = f"{float(secs):8.1f}"
    except ValueError:
        secs = f"{secs:>8}"
    print(f"{name:<{width}}  {verdict:<7}  {secs}  {note}")
print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
EOF
fi
