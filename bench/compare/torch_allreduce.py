#!/usr/bin/env python3
"""The work of `aiscale bench allreduce`, done by torch.distributed: all-reduce bandwidth.

Per message size, doubling from --min-bytes to --max-bytes: one all-reduce of a known
pattern checked against its exact sum, --warmup untimed all-reduces, then --repeats loops
of --iters in-place fp32 sums queued back to back with one wait at the end; a loop's time
over --iters is one all-reduce, the median loop counts, and the slowest rank's median is
the figure (as aiscale's benchmark does). algbw = bytes / time, busbw = algbw x 2(n-1)/n.

Run one process per GPU (NCCL) or per CPU process (gloo) under torchrun; rank 0 prints one
JSON line per size with the field names of aiscale's record (docs/guide/bench.md) and
"source": "pytorch":

    torchrun --standalone --nproc_per_node=2 bench/compare/torch_allreduce.py
    torchrun --standalone --nproc_per_node=2 bench/compare/torch_allreduce.py --device cpu \
        --max-bytes 1048576

A development aid beside aiscale, not part of its build: it needs PyTorch.
"""
import argparse
import datetime
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--min-bytes", type=int, default=8)
    p.add_argument("--max-bytes", type=int, default=1 << 30)
    p.add_argument("--step-factor", type=int, default=2)
    p.add_argument("--iters", type=int, default=20, help="all-reduces per timed loop")
    p.add_argument("--warmup", type=int, default=5, help="untimed all-reduces per size")
    p.add_argument("--repeats", type=int, default=3, help="timed loops per size (median counts)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--no-check", action="store_true", help="skip the exact-sum check")
    p.add_argument("--output", help="also append the JSON lines to this file")
    a = p.parse_args()
    if a.min_bytes < 4 or a.max_bytes < a.min_bytes or a.step_factor < 2:
        p.error("need 4 <= --min-bytes <= --max-bytes and --step-factor >= 2")
    if a.iters < 1 or a.repeats < 1 or a.warmup < 0:
        p.error("--iters and --repeats must be at least 1, --warmup at least 0")
    return a


def sizes(a):
    """The message sizes, whole fp32 values, as aiscale's benchmark steps through them."""
    out, b = [], a.min_bytes
    while b <= a.max_bytes:
        out.append(b // 4 * 4)
        b *= a.step_factor
    return out


def pattern(count, rank, device):
    """Small integers (exact in fp32 when summed over ranks): (i mod 251 + 1) x (rank + 1)."""
    i = torch.arange(count, device=device, dtype=torch.int64)
    return ((i % 251 + 1) * (rank + 1)).to(torch.float32)


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
    if "WORLD_SIZE" not in os.environ:
        sys.exit("error: start it under torchrun (torchrun --standalone --nproc_per_node=N ...)")
    cuda = a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available())
    if cuda and not torch.cuda.is_available():
        sys.exit("error: --device cuda but PyTorch sees no GPU: use --device cpu")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device_name = torch.cuda.get_device_name(device) if cuda else cpu_model_name()
    host = socket.gethostname()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    def sync():
        if cuda:
            torch.cuda.synchronize()

    all_sizes = sizes(a)
    buf = torch.empty(all_sizes[-1] // 4, dtype=torch.float32, device=device)
    out = open(a.output, "a") if a.output and rank == 0 else None
    for nbytes in all_sizes:
        count = nbytes // 4
        x = buf[:count]
        x.copy_(pattern(count, rank, device))
        dist.all_reduce(x)
        correct = None
        if not a.no_check:
            expect = pattern(count, 0, device) * (world * (world + 1) // 2)
            bad = torch.tensor([float((x != expect).sum().item())], device=device)
            dist.all_reduce(bad)
            correct = bad.item() == 0
        x.zero_()  # the timed sums of zeros stay finite however often they run
        for _ in range(a.warmup):
            dist.all_reduce(x)
        sync()
        loops = []
        for _ in range(a.repeats):
            dist.barrier()
            sync()
            start = time.perf_counter()
            works = [dist.all_reduce(x, async_op=True) for _ in range(a.iters)]
            for w in works:
                w.wait()
            sync()
            loops.append((time.perf_counter() - start) / a.iters)
        loops.sort()
        mine = torch.tensor([loops[len(loops) // 2]], dtype=torch.float64, device=device)
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)  # the slowest rank's time
        t = mine.item()
        if rank != 0:
            continue
        algbw = nbytes / t / 1e9
        record = {
            "source": "pytorch", "benchmark": "allreduce", "backend": backend,
            "world_size": world, "bytes": nbytes, "count": count, "dtype": "fp32",
            "op": "sum", "in_place": True, "iters": a.iters, "warmup": a.warmup,
            "repeats": a.repeats, "time_s": t, "algbw_GBps": algbw,
            "busbw_GBps": algbw * 2.0 * (world - 1) / world, "device": device_name,
            "host": host, "date": date, "torch_version": torch.__version__,
        }
        if cuda:  # a tuple since PyTorch 2.0, one integer before
            v = torch.cuda.nccl.version()
            record["nccl_version"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        if correct is not None:
            record["correct"] = correct
        line = json.dumps(record)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
    if out:
        out.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
