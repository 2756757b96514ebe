#!/usr/bin/env bash
# Install dependencies, build everything (CUDA too when nvcc is present: compiled, its
# tests skip without a GPU) and run the whole test suite except tests labelled slow.
# usage: bash scripts/test.sh [extra ctest arguments, e.g. -L unit or -R Gpt]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
preset=cpu
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then preset=cuda; fi
echo "== configure and build (preset $preset)"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -- -j"$(nproc)" 2>&1 | grep -v '^\[' || true
cmake --build --preset "$preset" -- -j"$(nproc)" >/dev/null  # fail here if the build failed
echo "== tests (ctest -LE slow)"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
ctest --preset "$preset" -LE slow --timeout 900 "$@"
