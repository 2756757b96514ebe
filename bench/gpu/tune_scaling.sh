#!/usr/bin/env bash
# `aiscale tune --scaling` on a GPU host's CPU cores (16 or more): the 1 to 10,000-model
# table for small MLPs and small XGBoost models on the synthetic regression of the course's
# shape (100,000 rows, 6 features; 2 folds), and XGBoost called directly
# (bench/gpu/tune_xgboost_direct.cpp) on the same data and models for the per-model
# throughput comparison. Tables, JSON and a summary go to $OUT. On 16 cores this takes
# about 5 minutes after the build (one XGBoost task, 10 rounds on 50,000 rows: ~0.07 s).
# From the repository root (libxgboost-dev installed, or carried in .devdeps):
#   bash bench/gpu/tune_scaling.sh            COUNTS="1 10 100 1000 10000" THREADS=16 by default
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/aiscale-tune-scaling}
mkdir -p "$OUT"
source bench/gpu/host_common.sh
THREADS=${THREADS:-$(nproc)}
COUNTS=${COUNTS:-1 10 100 1000 10000}
DIRECT_MODELS=${DIRECT_MODELS:-1000}
ROWS=${ROWS:-100000}
list=$(echo "$COUNTS" | tr ' ' ',')
{ lscpu | head -20; git rev-parse HEAD; date -u; } >> "$OUT/setup.log" 2>&1

log "build (cpu preset)"
use_devdeps
if ! cmake --preset cpu >> "$OUT/setup.log" 2>&1 || ! cmake --build --preset cpu --target aiscale >> "$OUT/setup.log" 2>&1; then
  tail -40 "$OUT/setup.log"; exit 1
fi
BIN=build/cpu/aiscale
inc=(); IFS=: read -ra pfx <<< "${CMAKE_PREFIX_PATH:-}"; for p in "${pfx[@]}"; do [ -d "$p/include" ] && inc+=("-I$p/include"); done
c++ -O2 -std=c++20 "${inc[@]}" bench/gpu/tune_xgboost_direct.cpp -o "$OUT/tune_xgboost_direct" -lxgboost -lpthread \
  >> "$OUT/setup.log" 2>&1 || { log "no XGBoost to compile against: install libxgboost-dev"; exit 1; }

"$BIN" tune --synthetic-csv "$OUT/synthetic.csv" --rows "$ROWS" --seed 1 >> "$OUT/setup.log"
common="[data]
source = \"csv\"
path = \"$OUT/synthetic.csv\"
target = \"y\""
cat > "$OUT/mlp.toml" <<TOML
[study]
name = "scaling-mlp"
backend = "mlp"
folds = 2
dir = "$OUT/mlp"
threads = $THREADS
$common
[fixed]
epochs = 2
batch_size = 256
[params.hidden]
type = "int"
low = 4
high = 16
[params.lr]
type = "log-uniform"
low = 1e-3
high = 3e-2
TOML
# XGBoost with one configuration (max_depth 4, 10 rounds) so the direct calls do the same work.
cat > "$OUT/xgboost.toml" <<TOML
[study]
name = "scaling-xgboost"
backend = "xgboost"
folds = 2
dir = "$OUT/xgboost"
threads = $THREADS
$common
[fixed]
num_round = 10
[params.max_depth]
type = "int"
low = 4
high = 4
TOML

for backend in mlp xgboost; do
  log "aiscale tune --scaling $list ($backend, $THREADS threads)"
  "$BIN" tune "$OUT/$backend.toml" --scaling "$list" --fresh -q | tee "$OUT/$backend-table.txt"
done
log "aiscale tune --scaling $DIRECT_MODELS (xgboost) and XGBoost direct, $THREADS threads"
"$BIN" tune "$OUT/xgboost.toml" --set "study.dir=\"$OUT/xgboost-compare\"" --scaling "$DIRECT_MODELS" -q \
  > "$OUT/xgboost-compare.txt"
"$OUT/tune_xgboost_direct" "$OUT/synthetic.csv" "$DIRECT_MODELS" "$THREADS" 10 4 2 | tee "$OUT/xgboost-direct.json"
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
a = json.load(open(f"{out}/xgboost-compare/scaling.json"))["rows"][0]
d = json.loads(open(f"{out}/xgboost-direct.json").read())
ours, theirs = a["models"] / a["wall_seconds"], d["models_per_second"]
print(f"XGBoost models/s: aiscale tune {ours:.2f}, direct {theirs:.2f}, ratio {ours / theirs:.3f}")
PY
log "done: $OUT"
