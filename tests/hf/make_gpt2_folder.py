#!/usr/bin/env python3
"""Writes a randomly initialised tiny GPT2LMHeadModel with transformers' own save_pretrained
(sharded, with model.safetensors.index.json), and prints transformers' greedy continuation
of a prompt, so that aiscale's import of a folder it did not write can be checked.

usage: python3 tests/hf/make_gpt2_folder.py OUT_DIR PROMPT_IDS TOKENS [DTYPE]
  PROMPT_IDS: comma-separated token ids; DTYPE: float32 (default) or bfloat16
Prints the greedy ids, comma-separated. Needs torch and transformers.
"""
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    out, prompt, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dtype = sys.argv[4] if len(sys.argv) > 4 else "float32"
    torch.manual_seed(3)
    # gpt-tiny's shape with a 32-token context; a wide initialisation so that the greedy
    # choice is far from a tie.
    config = GPT2Config(n_layer=2, n_head=2, n_embd=64, n_positions=32, vocab_size=256,
                        initializer_range=0.3, activation_function="gelu_new")
    model = GPT2LMHeadModel(config).eval()
    if dtype == "bfloat16":
        model = model.to(torch.bfloat16)
    model.save_pretrained(out, max_shard_size="60KB", safe_serialization=True)
    model = GPT2LMHeadModel.from_pretrained(out, torch_dtype=torch.float32).eval()
    ids = torch.tensor([[int(x) for x in prompt.split(",")]])
    got = []
    with torch.no_grad():
        for _ in range(tokens):
            nxt = int(torch.argmax(model(ids[:, -config.n_positions:]).logits[0, -1]))
            got.append(nxt)
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    print(",".join(str(i) for i in got))


if __name__ == "__main__":
    main()
