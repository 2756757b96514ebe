#!/usr/bin/env bash
# Quick start: install dependencies, build, tokenize Debian's fortunes (real English
# text) with GPT-2's BPE, train a small GPT on the CPU, sample a few lines from it, and
# write the run's HTML report (loss curve, throughput, step-time distribution).
# usage: bash scripts/quickstart.sh [--set section.key=value ...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
echo "== build (cmake --preset cpu)"
cmake --preset cpu >/dev/null
cmake --build --preset cpu --target aiscale -- -j"$(nproc)" | grep -v '^\[' || true
bin=build/cpu/aiscale
if [ ! -f data/fortunes/fortunes_train_000000.bin ]; then
  echo "== tokenize /usr/share/games/fortunes -> data/fortunes/"
  $bin data tokenize --input /usr/share/games/fortunes --output-prefix data/fortunes/fortunes --fortune
fi
echo "== train (configs/quickstart.toml)"
$bin launch -n 2 -- train --config configs/quickstart.toml --set run.name="quickstart-$(date -u +%Y%m%d-%H%M%S)" "$@" | tee /tmp/aiscale-quickstart.$$
run_dir=$(sed -n 's/^run directory: //p' /tmp/aiscale-quickstart.$$)
rm -f /tmp/aiscale-quickstart.$$
if [ -z "$run_dir" ]; then
  echo "quickstart: the training printed no run directory; see its output above" >&2
  exit 1
fi
echo "== sample from $run_dir"
# Fortunes are short: end-of-text comes early, so ask for 120 tokens however many fortunes.
$bin sample --run "$run_dir" --prompt "The meaning of life is" --tokens 120 --min-tokens 120 \
  --temperature 0.8 --top-k 40
echo "== report"
$bin report "$run_dir" -o "$run_dir/report.html"
case $run_dir in /*) report=$run_dir/report.html ;; *) report=$root/$run_dir/report.html ;; esac
echo "quickstart: open $report in a browser (it works offline)"
