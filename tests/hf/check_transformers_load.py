#!/usr/bin/env python3
"""Checks that an aiscale checkpoint (GPT-2 or Llama family: transformers picks the class
from its config.json) loads in Hugging Face transformers and computes the same function: greedy generation from the same prompt must give the same token ids.

usage: python3 tests/hf/check_transformers_load.py CHECKPOINT_DIR "PROMPT_IDS" "AISCALE_IDS"
  PROMPT_IDS / AISCALE_IDS: comma-separated token ids (aiscale sample --print-ids)
Exit code 0 when they agree. Needs torch and transformers (the GPU host has both).
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM


def main():
    ckpt, prompt, expected = sys.argv[1], sys.argv[2], sys.argv[3]
    prompt_ids = [int(x) for x in prompt.split(",") if x.strip()]
    expected_ids = [int(x) for x in expected.split(",") if x.strip()]
    model, info = AutoModelForCausalLM.from_pretrained(ckpt, output_loading_info=True)
    model.eval()
    # GPT-2's causal-mask buffers and a tied head are not stored; every other key must be.
    tied = getattr(model.config, "tie_word_embeddings", True)
    missing = [k for k in info["missing_keys"]
               if not k.endswith("attn.bias") and not (tied and k == "lm_head.weight")]
    if missing or info["unexpected_keys"] or info["mismatched_keys"]:
        print(json.dumps({"ok": False, "loading_info": {k: list(v) for k, v in info.items()}}))
        return 1
    ids = torch.tensor([prompt_ids])
    n_ctx = getattr(model.config, "n_positions", None) or model.config.max_position_embeddings
    out = []
    with torch.no_grad():
        for _ in range(len(expected_ids)):
            logits = model(ids[:, -n_ctx:]).logits[0, -1]
            nxt = int(torch.argmax(logits))
            out.append(nxt)
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    ok = out == expected_ids
    print(json.dumps({"ok": ok, "transformers_ids": out, "aiscale_ids": expected_ids,
                      "params": sum(p.numel() for p in model.parameters())}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
