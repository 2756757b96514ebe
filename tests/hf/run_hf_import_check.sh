#!/usr/bin/env bash
# The other direction of run_hf_check.sh: a GPT-2 or Llama folder written by transformers' own
# save_pretrained (sharded with an index, fp32 and bf16) starts an aiscale run with
# --init-from, and aiscale's greedy decoding of it gives transformers' ids; the run's own
# checkpoint, written in shards (run.max_shard_gb), loads back into transformers with the
# same ids. Needs python3 with torch and transformers.
# usage: bash tests/hf/run_hf_import_check.sh [BUILD_DIR] [FAMILY: gpt2 (default) or llama]
set -euo pipefail
bin=${1:-build/cpu}/aiscale
family=${2:-gpt2}
case $family in gpt2) preset=gpt-tiny ;; llama) preset=llama-tiny ;; *) echo "family: gpt2 or llama"; exit 2 ;; esac
here=$(dirname "$0")
tmp=$(mktemp -d)
prompt="116,104,101,32"   # "the "
$bin data tokenize --input README.md docs --output-prefix "$tmp/d" --tokenizer byte --format paragraphs >/dev/null
cat > "$tmp/c.toml" <<TOML
[model]
preset = "$preset"
block_size = 32
[data]
train = "$tmp/d_train_*.bin"
tokenizer = "byte"
[train]
batch_size = 4
seq_len = 32
steps = 1
warmup_steps = 0
lr = 0.0
weight_decay = 0.0
[run]
dir = "$tmp/runs"
max_shard_gb = 0.0001
TOML
status=0
for dtype in float32 bfloat16; do
  want=$(python3 "$here/make_hf_folder.py" "$family" "$tmp/hf-$dtype" "$prompt" 16 "$dtype")
  echo "transformers wrote: $(ls "$tmp/hf-$dtype" | tr '\n' ' ')"
  # lr 0: the one step leaves the imported weights as they are.
  $bin train -q -c "$tmp/c.toml" --init-from "$tmp/hf-$dtype" --set run.name="$dtype" >/dev/null
  out=$($bin sample --run "$tmp/runs/$dtype" --prompt "the " --tokens 16 --temperature 0 --print-ids --tokenizer byte 2>/dev/null)
  got=$(echo "$out" | sed -n 's/^ids: \[\(.*\)\]$/\1/p' | tr -d ' ')
  echo "$dtype: transformers greedy $want"
  echo "$dtype: aiscale greedy      $got"
  [ "$want" = "$got" ] || { echo "$dtype: the imported model decodes differently"; status=1; }
  ckpt=$(ls -d "$tmp/runs/$dtype"/checkpoints/step_* | tail -1)
  echo "aiscale wrote: $(ls "$ckpt" | tr '\n' ' ')"
  python3 "$here/check_transformers_load.py" "$ckpt" "$prompt" "$got" || status=1
done
exit $status
