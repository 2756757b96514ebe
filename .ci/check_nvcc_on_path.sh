#!/usr/bin/env bash
# Configures the CUDA build (preset-free, AISCALE_CUDA=ON) with the toolkit in a
# non-standard prefix that only PATH names: a folder of links to each entry of the
# installed toolkit (nvcc finds its headers and libraries relative to its own folder, so
# the whole prefix is linked, not only bin/). PATH is the one thing changed; the configure
# must pick that nvcc and that toolkit. Configure only: nothing is compiled.
# usage: bash .ci/check_nvcc_on_path.sh [TOOLKIT (default: the folder above the nvcc on PATH,
#        else /usr/local/cuda)] [BUILD_DIR (default build/ci-nvcc-path)]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
toolkit=${1:-}
if [ -z "$toolkit" ]; then
  nvcc_path=$(command -v nvcc || true)
  toolkit=${nvcc_path:+$(dirname "$(dirname "$(readlink -f "$nvcc_path")")")}
  toolkit=${toolkit:-/usr/local/cuda}
fi
[ -x "$toolkit/bin/nvcc" ] || { echo "check_nvcc_on_path: no nvcc in $toolkit/bin: skipped"; exit 0; }
build=${2:-build/ci-nvcc-path}
prefix=$(mktemp -d /tmp/aiscale-cuda-prefix.XXXXXX)
trap 'rm -rf "$prefix"' EXIT
for entry in "$toolkit"/*; do ln -s "$(readlink -f "$entry")" "$prefix/${entry##*/}"; done
# PATH without any folder that holds an nvcc, then the new prefix in front.
path=""
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do [ -x "$d/nvcc" ] || path+="${path:+:}$d"; done
rm -rf "$build"
log=$(mktemp)
if ! PATH="$prefix/bin:$path" cmake -S . -B "$build" -G Ninja -DAISCALE_CUDA=ON >"$log" 2>&1; then
  cat "$log"; echo "check_nvcc_on_path: configure with nvcc from $prefix/bin on PATH FAILED"; exit 1
fi
compiler=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
if [ "$compiler" != "$prefix/bin/nvcc" ]; then
  echo "check_nvcc_on_path: configure chose nvcc '$compiler', not $prefix/bin/nvcc from PATH"; exit 1
fi
grep -q "aiscale: CUDA backend ON" "$log" || { cat "$log"; echo "check_nvcc_on_path: CUDA backend not on"; exit 1; }
rm -f "$log"
rm -rf "$build"  # its cache names the temporary prefix, which is gone
echo "check_nvcc_on_path: CUDA build configured with nvcc from PATH ($prefix/bin)"
