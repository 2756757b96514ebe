#!/usr/bin/env bash
# Regenerates the reference encodings in this folder (run from anywhere; needs node and
# the npm package gpt-3-encoder from scripts/setup.sh, Debian's sentencepiece tools and
# python3-regex).
#   strings.json          the texts (make_strings.py: hand-picked plus seeded random mixes)
#   gpt2_expected.json    their GPT-2 ids from gpt-3-encoder's own JavaScript encoder
#   fortunes_bpe.model    a SentencePiece BPE model (1000 pieces, byte fallback, no
#                         normalization) trained by spm_train on three fortune files
#   spm_expected.json     [index, ids] from spm_encode for the strings without CR/LF
#                         (spm_encode reads one text per line)
#   splits.json           GPT-2's and Llama 3's pre-tokenizer patterns applied by Python's
#                         regex module (python3-regex) to those strings and random mixes
# The tests (tests/data/tokenizer_reference_test.cpp) only read these files.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
cd "$here"
python3 make_strings.py strings.json
python3 make_splits.py strings.json splits.json
node gpt2_encode.js "$root/third_party_npm/node_modules/gpt-3-encoder" strings.json > gpt2_expected.json
fortunes=/usr/share/games/fortunes
spm_train --input="$fortunes/fortunes,$fortunes/literature,$fortunes/science" \
  --model_prefix=fortunes_bpe --vocab_size=1000 --model_type=bpe --byte_fallback=true \
  --character_coverage=1.0 --normalization_rule_name=identity --remove_extra_whitespaces=false \
  --num_threads=1 --minloglevel=2
rm -f fortunes_bpe.vocab
python3 - <<'PY'
import json, subprocess
strings = json.load(open("strings.json", encoding="utf-8"))
chosen = [i for i, s in enumerate(strings) if "\n" not in s and "\r" not in s]
text = "".join(strings[i] + "\n" for i in chosen)
out = subprocess.run(["spm_encode", "--model=fortunes_bpe.model", "--output_format=id"],
                     input=text.encode("utf-8"), capture_output=True, check=True).stdout.decode()
lines = out.split("\n")[:len(chosen)]
rows = [json.dumps([i, [int(x) for x in line.split()]]) for i, line in zip(chosen, lines)]
open("spm_expected.json", "w").write("[\n" + ",\n".join(rows) + "\n]\n")
PY
echo "generate.sh: wrote strings.json splits.json gpt2_expected.json fortunes_bpe.model spm_expected.json"
