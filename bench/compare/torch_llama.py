#!/usr/bin/env python3
"""The work of `aiscale bench language` on a llama-family preset, done by PyTorch.

One training step is what aiscale's benchmark times: forward, cross-entropy loss, backward,
global-norm gradient clipping (1.0), an AdamW update and zeroing the gradients, on a batch of
uniform-random tokens. The model is the llama family of aiscale's presets
(src/aiscale/nn/models/gpt_config.h): RMSNorm, rotary position embedding (rotate-half, with
Llama 3's frequency scaling), grouped-query attention through scaled_dot_product_attention
(enable_gqa, K and V kept at their own head count), a SwiGLU MLP, no biases, an untied LM
head unless --tied. On a GPU the step runs as PyTorch users make it fast: bf16 autocast,
fused AdamW and, unless --compile 0, torch.compile. Under torchrun every process trains one
GPU: DistributedDataParallel all-reduces the gradients, or with --fsdp FSDP2's fully_shard
shards each block and then the whole model (bf16 compute, fp32 gradient reduction).

Prints one JSON line, from rank 0, with the field names of aiscale's bench record
(docs/guide/bench.md) where they mean the same thing, "source": "pytorch".

    python3 bench/compare/torch_llama.py --model llama3-1b-shape --batch 4 --seq 2048
    torchrun --standalone --nproc_per_node=2 bench/compare/torch_llama.py \
        --model llama3-8b-shape --batch 2 --seq 2048 --fsdp
    python3 bench/compare/torch_llama.py --model llama-tiny --batch 2 --seq 32 --device cpu

A development aid beside aiscale, not part of its build: it needs PyTorch 2.5 or later for
enable_gqa (earlier: K and V repeated to every query head) and fully_shard (--fsdp).
"""
import argparse
import datetime
import json
import math
import os
import socket
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# aiscale's llama presets: layers, heads, KV heads, width, MLP width, vocabulary, tied,
# rope theta, Llama 3 scaling (factor, low, high, original context) or None.
LLAMA3_32 = (32.0, 1.0, 4.0, 8192)
LLAMA3_8 = (8.0, 1.0, 4.0, 8192)
PRESETS = {
    "llama3-1b-shape": (16, 32, 8, 2048, 8192, 128256, True, 500000.0, LLAMA3_32),
    "llama3-3b-shape": (28, 24, 8, 3072, 8192, 128256, True, 500000.0, LLAMA3_32),
    "llama3-8b-shape": (32, 32, 8, 4096, 14336, 128256, False, 500000.0, LLAMA3_8),
    "llama-mini": (4, 8, 2, 256, 688, 50257, False, 10000.0, None),
    "llama-tiny": (2, 4, 2, 64, 176, 256, False, 10000.0, None),
}
DENSE_BF16_PEAK_TFLOPS = [("GH200", 989.0), ("H200", 989.0), ("H100 PCIe", 756.0),
                          ("H100 NVL", 835.0), ("H100", 989.0), ("A100", 312.0)]


def inv_freq(head, theta, scaling):
    """theta^(-2i/D), with Llama 3's scaling of the long wavelengths (as aiscale's table)."""
    f = [theta ** (-2.0 * i / head) for i in range(head // 2)]
    if scaling is None:
        return torch.tensor(f, dtype=torch.float64)
    factor, low, high, orig = scaling
    out = []
    for x in f:
        wavelen = 2 * math.pi / x
        if wavelen > orig / low:
            x = x / factor
        elif wavelen >= orig / high:
            smooth = (orig / wavelen - low) / (high - low)
            x = (1 - smooth) * x / factor + smooth * x
        out.append(x)
    return torch.tensor(out, dtype=torch.float64)


def rotate(x, cos, sin):
    """Rotate-half: pair (x_i, x_{i+D/2}) turned by the position's angle."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Block(nn.Module):
    def __init__(self, width, heads, kv_heads, ffn, eps):
        super().__init__()
        self.heads, self.kv_heads, self.head = heads, kv_heads, width // heads
        kv = kv_heads * self.head
        self.input_layernorm = nn.RMSNorm(width, eps=eps)
        self.qkv_proj = nn.Linear(width, width + 2 * kv, bias=False)
        self.o_proj = nn.Linear(width, width, bias=False)
        self.post_attention_layernorm = nn.RMSNorm(width, eps=eps)
        self.gate_up_proj = nn.Linear(width, 2 * ffn, bias=False)
        self.down_proj = nn.Linear(ffn, width, bias=False)
        self.ffn = ffn

    def attention(self, x, cos, sin):
        b, t, c = x.shape
        kv = self.kv_heads * self.head
        q, k, v = self.qkv_proj(x).split([c, kv, kv], dim=2)
        q = q.view(b, t, self.heads, self.head).transpose(1, 2)
        k = k.view(b, t, self.kv_heads, self.head).transpose(1, 2)
        v = v.view(b, t, self.kv_heads, self.head).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        try:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        except TypeError:  # PyTorch before 2.5: K and V repeated to every query head
            g = self.heads // self.kv_heads
            y = F.scaled_dot_product_attention(q, k.repeat_interleave(g, 1),
                                               v.repeat_interleave(g, 1), is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, c))

    def forward(self, x, cos, sin):
        x = x + self.attention(self.input_layernorm(x), cos, sin)
        gate, up = self.gate_up_proj(self.post_attention_layernorm(x)).split(self.ffn, dim=2)
        return x + self.down_proj(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, layers, heads, kv_heads, width, ffn, vocab, tied, theta, scaling, seq):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, width)
        self.layers = nn.ModuleList(Block(width, heads, kv_heads, ffn, 1e-5) for _ in range(layers))
        self.norm = nn.RMSNorm(width, eps=1e-5)
        self.lm_head = None if tied else nn.Linear(width, vocab, bias=False)
        angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq(width // heads, theta, scaling))
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)
        # aiscale's initialisation: N(0, 0.02), o_proj and down_proj by 1/sqrt(2 L), norms 1.
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        x = self.embed_tokens(idx)
        cos, sin = self.cos[: idx.size(1)], self.sin[: idx.size(1)]
        for layer in self.layers:
            x = layer(x, cos, sin)
        h = self.norm(x)
        logits = self.lm_head(h) if self.lm_head is not None else F.linear(h, self.embed_tokens.weight)
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="llama3-1b-shape", choices=sorted(PRESETS))
    p.add_argument("--layers", type=int, help="override the preset's layer count")
    tie = p.add_mutually_exclusive_group()
    tie.add_argument("--tied", action="store_true", help="tie the LM head to the embedding")
    tie.add_argument("--untied", action="store_true", help="give the LM head its own weight")
    p.add_argument("--batch", type=int, default=4, help="sequences per device and step")
    p.add_argument("--seq", type=int, default=2048, help="sequence length")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"],
                   help="auto: bf16 autocast on GPUs, fp32 on CPUs")
    p.add_argument("--compile", default="auto", choices=["auto", "0", "1"],
                   help="torch.compile each block; auto: on GPUs, never on CPUs")
    p.add_argument("--fsdp", action="store_true",
                   help="under torchrun: FSDP2 fully_shard per block and the model (else DDP)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--output", help="also append the JSON line to this file")
    a = p.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.batch < 1 or a.seq < 1:
        p.error("--steps, --batch and --seq must be at least 1 and --warmup at least 0")
    return a


def main():
    a = parse_args()
    layers, heads, kv_heads, width, ffn, vocab, tied, theta, scaling = PRESETS[a.model]
    layers = a.layers or layers
    tied = True if a.tied else False if a.untied else tied
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available())
    if cuda and not torch.cuda.is_available():
        sys.exit("error: --device cuda but PyTorch sees no GPU: use --device cpu")
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
    if world > 1:
        torch.distributed.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None)
    if a.fsdp and world < 2:
        sys.exit("error: --fsdp shards over torchrun's processes: run under torchrun with 2 or more")
    precision = a.precision if a.precision != "auto" else ("bf16" if cuda else "fp32")
    compiled = {"auto": cuda, "1": True, "0": False}[a.compile]

    torch.manual_seed(a.seed)
    meta = a.fsdp
    with torch.device("meta" if meta else device):
        model = Llama(layers, heads, kv_heads, width, ffn, vocab, tied, theta, scaling, a.seq)
    # Parameters as aiscale counts them, and its FLOPs: 6 N + 12 L C T with N all but an
    # untied input embedding (a lookup).
    n_params = sum(p.numel() for p in model.parameters())
    n_matmul = n_params - (0 if tied else vocab * width)
    if a.fsdp:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if precision == "bf16" else torch.float32,
                                  reduce_dtype=torch.float32)
        for layer in model.layers:
            fully_shard(layer, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        model.to_empty(device=device)
        torch.manual_seed(a.seed)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
                    p.normal_(0.0, std)
                else:
                    p.fill_(1.0)
            angles = torch.outer(torch.arange(a.seq, dtype=torch.float64),
                                 inv_freq(width // heads, theta, scaling)).to(device)
            model.cos.copy_(angles.cos().float())
            model.sin.copy_(angles.sin().float())
    if compiled:
        for layer in model.layers:
            layer.compile()
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=1e-4, betas=(0.9, 0.95), eps=1e-8, fused=cuda)
    step_model = model
    if world > 1 and not a.fsdp:
        step_model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)

    gen = torch.Generator().manual_seed(a.seed + 1000 * rank)
    tokens = torch.randint(0, vocab, (a.batch, a.seq + 1), generator=gen).to(device)
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                              enabled=precision == "bf16" and not a.fsdp)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    times = []
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for i in range(a.warmup + a.steps):
        sync()
        start = time.perf_counter()
        with autocast:
            loss = step_model(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        if i >= a.warmup:
            times.append(time.perf_counter() - start)
    final_loss = loss.item()
    if not math.isfinite(final_loss):
        sys.exit(f"error: the loss is {final_loss} after {a.warmup + a.steps} steps")

    median = statistics.median(times)
    if world > 1:
        m = torch.tensor([median], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(m)
        median = m.item() / world
    tokens_per_device = a.batch * a.seq / median
    flops_per_token = 6 * n_matmul + 12 * layers * width * a.seq
    achieved = tokens_per_device * flops_per_token / 1e12
    device_name = torch.cuda.get_device_name(device) if cuda else "cpu"
    record = {
        "source": "pytorch",
        "benchmark": "language",
        "model": a.model,
        "family": "llama",
        "tie_embeddings": tied,
        "n_params": n_params,
        "n_layer": layers,
        "n_head": heads,
        "n_kv_head": kv_heads,
        "n_embd": width,
        "ffn_hidden": ffn,
        "vocab_size": vocab,
        "seq": a.seq,
        "batch": a.batch,
        "world_size": world,
        "precision": precision,
        "device_kind": "gpu" if cuda else "cpu",
        "device": device_name,
        "attention": "sdpa (enable_gqa)",
        "gradient_sync": ("FSDP2 fully_shard" if a.fsdp else "DistributedDataParallel") if world > 1 else "none",
        "steps_timed": a.steps,
        "tokens_per_s": tokens_per_device * world,
        "tokens_per_s_per_device": tokens_per_device,
        "flops_per_token": flops_per_token,
        "flop_formula": "6*N + 12*L*C*T per token (N = all parameters but an untied input embedding)",
        "achieved_tflops_per_device": achieved,
        "step_time_median_s": median,
        "step_time_min_s": min(times),
        "step_time_max_s": max(times),
        "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if cuda else 0,
        "final_loss": final_loss,
        "host": socket.gethostname(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "torch_version": torch.__version__,
        "compiled": compiled,
    }
    for name, peak in DENSE_BF16_PEAK_TFLOPS:
        if cuda and name in device_name:
            record["peak_tflops_dense_bf16"] = peak
            record["mfu"] = achieved / peak
            break
    if rank == 0:
        line = json.dumps(record)
        print(line, flush=True)
        if a.output:
            with open(a.output, "a") as f:
                f.write(line + "\n")
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
