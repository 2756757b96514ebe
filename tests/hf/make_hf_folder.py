#!/usr/bin/env python3
"""Writes a randomly initialised tiny causal language model with transformers' own
save_pretrained (sharded, with model.safetensors.index.json), and prints transformers'
greedy continuation of a prompt, so that aiscale's import of a folder it did not write can
be checked.

usage: python3 tests/hf/make_hf_folder.py FAMILY OUT_DIR PROMPT_IDS TOKENS [DTYPE]
  FAMILY: gpt2 (GPT2LMHeadModel in gpt-tiny's shape) or llama (LlamaForCausalLM in
  llama-tiny's shape: 4 query and 2 key/value heads, untied head); PROMPT_IDS:
  comma-separated token ids; DTYPE: float32 (default) or bfloat16
Prints the greedy ids, comma-separated. Needs torch and transformers.
"""
import sys

import torch
from transformers import (AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM)

CONTEXT = 32


def build(family):
    # A wide initialisation so that the greedy choice is far from a tie.
    if family == "gpt2":
        config = GPT2Config(n_layer=2, n_head=2, n_embd=64, n_positions=CONTEXT, vocab_size=256,
                            initializer_range=0.3, activation_function="gelu_new")
        return GPT2LMHeadModel(config)
    if family == "llama":
        config = LlamaConfig(hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2,
                             max_position_embeddings=CONTEXT, vocab_size=256, rope_theta=10000.0,
                             rms_norm_eps=1e-5, tie_word_embeddings=False, initializer_range=0.3)
        return LlamaForCausalLM(config)
    sys.exit(f"make_hf_folder: unknown family '{family}' (gpt2 or llama)")


def main():
    family, out, prompt, tokens = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    dtype = sys.argv[5] if len(sys.argv) > 5 else "float32"
    torch.manual_seed(3)
    model = build(family).eval()
    if dtype == "bfloat16":
        model = model.to(torch.bfloat16)
    model.save_pretrained(out, max_shard_size="60KB", safe_serialization=True)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    ids = torch.tensor([[int(x) for x in prompt.split(",")]])
    got = []
    with torch.no_grad():
        for _ in range(tokens):
            nxt = int(torch.argmax(model(ids[:, -CONTEXT:]).logits[0, -1]))
            got.append(nxt)
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    print(",".join(str(i) for i in got))


if __name__ == "__main__":
    main()
