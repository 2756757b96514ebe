#!/usr/bin/env python3
"""The work of `aiscale bench language`, done by PyTorch: GPT-2-family training steps.

One training step is what aiscale's benchmark times: forward, cross-entropy loss, backward,
global-norm gradient clipping (1.0), an AdamW update and zeroing the gradients, on a batch
of uniform-random tokens (the step's time does not depend on the data). On a GPU the step
runs as PyTorch users make it fast: bf16 autocast, scaled_dot_product_attention (flash
attention where the card has it), fused AdamW and, unless --compile 0, torch.compile. Under
torchrun every process trains one GPU (or one CPU process) and DistributedDataParallel
all-reduces the gradients during backward.

Prints one JSON line, from rank 0, whose fields carry the names of aiscale's bench record
where they mean the same thing (docs/guide/bench.md), with "source": "pytorch".

    python3 bench/compare/torch_gpt2.py --model gpt2-124m --batch 16 --seq 1024
    torchrun --standalone --nproc_per_node=2 bench/compare/torch_gpt2.py --model gpt2-124m \
        --batch 16 --seq 1024 --baseline-tokens-per-s 480000
    python3 bench/compare/torch_gpt2.py --model gpt-tiny --batch 2 --seq 32 --device cpu

A development aid beside aiscale, not part of its build: it needs PyTorch (1.13 or later;
torch.compile and fused AdamW from 2.0).
"""
import argparse
import datetime
import json
import math
import os
import resource
import socket
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# The shapes of aiscale's model presets (src/aiscale/nn): layers, heads, width, context, vocab.
PRESETS = {
    "gpt2-124m": (12, 12, 768, 1024, 50257),
    "gpt2-350m": (24, 16, 1024, 1024, 50257),
    "gpt2-774m": (36, 20, 1280, 1024, 50257),
    "gpt2-1558m": (48, 25, 1600, 1024, 50257),
    "gpt-mini": (4, 4, 256, 128, 50257),
    "gpt-tiny": (2, 2, 64, 64, 256),
}

# Dense bf16 peaks in TFLOP/s by device name, for "mfu" (the figures aiscale's record uses).
# Longer names first: "GH200" before "H200", "H100 PCIe" before "H100".
DENSE_BF16_PEAK_TFLOPS = [("GH200", 989.0), ("H200", 989.0), ("H100 PCIe", 756.0),
                          ("H100 NVL", 835.0), ("H100", 989.0), ("A100", 312.0)]


class Block(nn.Module):
    """Pre-LayerNorm GPT-2 block: causal self-attention and a GELU (tanh) MLP."""

    def __init__(self, width, heads, use_sdpa):
        super().__init__()
        self.heads = heads
        self.use_sdpa = use_sdpa
        self.ln_1 = nn.LayerNorm(width)
        self.c_attn = nn.Linear(width, 3 * width)
        self.attn_proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.c_fc = nn.Linear(width, 4 * width)
        self.mlp_proj = nn.Linear(4 * width, width)

    def attention(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        if self.use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # PyTorch before 2.0: the scores materialised and masked
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            y = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return self.attn_proj(y.transpose(1, 2).reshape(b, t, c))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    """GPT-2: token and position embeddings, blocks, final LayerNorm, tied output head."""

    def __init__(self, layers, heads, width, context, vocab_rows, use_sdpa):
        super().__init__()
        self.wte = nn.Embedding(vocab_rows, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads, use_sdpa) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        # GPT-2's initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 L).
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied with the token embedding
        # Under bf16 autocast cross_entropy runs in fp32 (autocast's list), as aiscale's loss.
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt2-124m", choices=sorted(PRESETS))
    p.add_argument("--layers", type=int, help="override the preset's layer count")
    p.add_argument("--heads", type=int, help="override the preset's head count")
    p.add_argument("--width", type=int, help="override the preset's width")
    p.add_argument("--vocab", type=int, help="override the preset's vocabulary")
    p.add_argument("--context", type=int, help="override the preset's context length")
    p.add_argument("--batch", type=int, default=8, help="sequences per device and step")
    p.add_argument("--seq", type=int, default=128, help="sequence length")
    p.add_argument("--steps", type=int, default=30, help="timed steps")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"],
                   help="auto: bf16 autocast on GPUs, fp32 on CPUs")
    p.add_argument("--compile", default="auto", choices=["auto", "0", "1"],
                   help="torch.compile the model; auto: on GPUs with PyTorch 2, never on CPUs")
    p.add_argument("--vocab-multiple", type=int, default=0,
                   help="pad the embedding rows to a multiple of this (0: 64 on GPUs as "
                        "aiscale's CUDA model pads them, 1 on CPUs); the padded rows never "
                        "receive a token")
    p.add_argument("--threads", type=int, default=0, help="CPU threads per process; 0: PyTorch's default")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--baseline-tokens-per-s", type=float, default=0.0,
                   help="the 1-device tokens/s, for scaling_efficiency")
    p.add_argument("--output", help="also append the JSON line to this file")
    a = p.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.batch < 1 or a.seq < 1:
        p.error("--steps, --batch and --seq must be at least 1 and --warmup at least 0")
    return a


def percentile(values, q):
    """The q-quantile with linear interpolation between neighbours (as aiscale's core/stats.h)."""
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (pos - lo) * (v[hi] - v[lo])


def cpu_model_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def main():
    a = parse_args()
    layers, heads, width, context, vocab = PRESETS[a.model]
    layers, heads, width = a.layers or layers, a.heads or heads, a.width or width
    context, vocab = a.context or context, a.vocab or vocab
    if width % heads:
        sys.exit(f"error: width {width} is not divisible by {heads} heads: change --width or --heads")
    if a.seq > context:
        sys.exit(f"error: --seq {a.seq} exceeds the model's context {context}: lower --seq")

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available())
    if cuda and not torch.cuda.is_available():
        sys.exit("error: --device cuda but PyTorch sees no GPU: use --device cpu")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if world > 1:
        torch.distributed.init_process_group("nccl" if cuda else "gloo")

    precision = a.precision if a.precision != "auto" else ("bf16" if cuda else "fp32")
    torch2 = int(torch.__version__.split(".")[0]) >= 2
    compiled = {"auto": cuda and torch2, "1": True, "0": False}[a.compile]
    if compiled and not torch2:
        sys.exit(f"error: --compile 1 needs PyTorch 2 (this is {torch.__version__}): use --compile 0")
    use_sdpa = hasattr(F, "scaled_dot_product_attention")
    multiple = a.vocab_multiple or (64 if cuda else 1)
    vocab_rows = (vocab + multiple - 1) // multiple * multiple

    torch.manual_seed(a.seed)
    model = Gpt(layers, heads, width, context, vocab_rows, use_sdpa).to(device)
    # Parameters as aiscale counts them: the tied embedding once, the unpadded vocabulary.
    n_params = sum(p.numel() for p in model.parameters()) - (vocab_rows - vocab) * width
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    adamw_args = {"lr": 1e-4, "betas": (0.9, 0.95), "eps": 1e-8}
    if cuda and torch2:
        adamw_args["fused"] = True
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}], **adamw_args)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    step_model = torch.compile(model) if compiled else model

    gen = torch.Generator().manual_seed(a.seed + 1000 * rank)
    tokens = torch.randint(0, vocab, (a.batch, a.seq + 1), generator=gen).to(device)
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                              enabled=precision == "bf16")

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
    if not math.isfinite(loss.item()):
        sys.exit(f"error: the loss is {loss.item()} after {a.warmup + a.steps} steps")

    # As aiscale: the mean of the ranks' medians (the ranks step in lock-step).
    median = statistics.median(times)
    if world > 1:
        m = torch.tensor([median], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(m)
        median = m.item() / world
    tokens_per_device = a.batch * a.seq / median
    flops_per_token = 6 * n_params + 12 * layers * width * a.seq
    achieved = tokens_per_device * flops_per_token / 1e12
    device_name = torch.cuda.get_device_name(device) if cuda else cpu_model_name()
    if cuda:
        peak_memory = torch.cuda.max_memory_allocated(device)
    else:  # the peak resident set of the process (ru_maxrss is in KiB on Linux)
        peak_memory = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    mean = sum(times) / len(times)
    record = {
        "source": "pytorch",
        "benchmark": "language",
        "model": a.model,
        "n_params": n_params,
        "n_layer": layers,
        "n_head": heads,
        "n_embd": width,
        "vocab_size": vocab,
        "vocab_rows": vocab_rows,
        "seq": a.seq,
        "batch": a.batch,
        "grad_accum": 1,
        "world_size": world,
        "precision": precision,
        "device_kind": "gpu" if cuda else "cpu",
        "device": device_name,
        "attention": "sdpa" if use_sdpa else "materialized",
        "threads": torch.get_num_threads(),
        "steps_timed": a.steps,
        "tokens_per_s": tokens_per_device * world,
        "tokens_per_s_per_device": tokens_per_device,
        "flops_per_token": flops_per_token,
        "flop_formula": "6*N + 12*L*C*T per token (N = all parameters incl. embeddings)",
        "achieved_tflops_per_device": achieved,
        "achieved_gflops_per_device": achieved * 1e3,
        "step_time_median_s": median,
        "step_time_p90_s": percentile(times, 0.9),
        "step_time_min_s": min(times),
        "step_time_max_s": max(times),
        "step_time_mean_s": mean,
        "step_time_stddev_s": statistics.stdev(times) if len(times) > 1 else 0.0,
        "step_times_s": times,
        "peak_memory_bytes": peak_memory,
        "final_loss": loss.item(),
        "host": socket.gethostname(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "torch_version": torch.__version__,
        "compiled": compiled,
    }
    if world > 1:
        record["communicator"] = "nccl" if cuda else "gloo"
        record["gradient_sync"] = "DistributedDataParallel"
    for name, peak in DENSE_BF16_PEAK_TFLOPS:
        if cuda and name in device_name:
            record["peak_tflops_dense_bf16"] = peak
            record["mfu"] = achieved / peak
            break
    if a.baseline_tokens_per_s > 0:
        record["baseline_tokens_per_s"] = a.baseline_tokens_per_s
        record["scaling_efficiency"] = tokens_per_device / a.baseline_tokens_per_s
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
