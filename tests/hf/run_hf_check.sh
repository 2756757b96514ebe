#!/usr/bin/env bash
# Trains a tiny byte-level model with aiscale, then checks that Hugging Face transformers
# loads its checkpoint and greedy-decodes the same tokens. Needs python3 with torch and
# transformers (the GPU host has both).
# usage: bash tests/hf/run_hf_check.sh [BUILD_DIR] [PRESET: gpt-tiny (default) or llama-tiny]
set -euo pipefail
bin=${1:-build/cpu}/aiscale
preset=${2:-gpt-tiny}
tmp=$(mktemp -d)
$bin data tokenize --input README.md docs --output-prefix "$tmp/d" --tokenizer byte --format paragraphs >/dev/null
cat > "$tmp/c.toml" <<TOML
[model]
preset = "$preset"
vocab_size = 256
block_size = 64
[data]
train = "$tmp/d_train_*.bin"
tokenizer = "byte"
[train]
batch_size = 8
seq_len = 64
steps = 400
lr = 3e-3
warmup_steps = 20
[run]
dir = "$tmp/runs"
name = "hf"
TOML
$bin train -q -c "$tmp/c.toml" >/dev/null
out=$($bin sample --run "$tmp/runs/hf" --prompt "the " --tokens 24 --temperature 0 --print-ids --tokenizer byte 2>/dev/null)
ids=$(echo "$out" | sed -n 's/^ids: \[\(.*\)\]$/\1/p' | tr -d ' ')
ckpt=$(ls -d "$tmp"/runs/hf/checkpoints/step_* | tail -1)
echo "aiscale greedy: $(echo "$out" | head -1)"
python3 "$(dirname "$0")/check_transformers_load.py" "$ckpt" "116,104,101,32" "$ids"
