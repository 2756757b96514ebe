#!/usr/bin/env python3
"""ResNet-50 training throughput in PyTorch, the peer of `aiscale bench vision --device cuda`.

    python3 bench/compare/torch_resnet50.py [--batch 256] [--steps 30] [--warmup 10]
                                             [--amp 1] [--compile 1]

The same work as aiscale's benchmark: torchvision's ResNet-50 (v1.5), channels-last, one
batch of random 224x224 images and labels made once on the GPU, SGD with momentum 0.9 and
weight decay 5e-5, cross-entropy; bf16 autocast with --amp 1 (fp32 with TF32 off with
--amp 0); torch.compile with --compile 1. Each step is timed with CUDA events after the
warm-up steps (which also absorb the compilation). Under torchrun (WORLD_SIZE > 1) each
process takes the GPU of its LOCAL_RANK and the model is wrapped in DistributedDataParallel
over NCCL; the images/s are per GPU. Rank 0 prints one JSON line."""
import argparse
import json
import os
import statistics

import torch
import torchvision


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--amp", type=int, default=1)
    ap.add_argument("--compile", type=int, default=1)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_resnet50.py: no CUDA device visible")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    if world > 1:
        torch.distributed.init_process_group("nccl", device_id=dev)
    model = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-5)
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randn(a.batch, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (a.batch,), device=dev)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bool(a.amp)):
            loss = loss_fn(model(images), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    run = torch.compile(step) if a.compile else step
    for _ in range(a.warmup):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(a.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    median = statistics.median(times)
    if world > 1:
        t = torch.tensor([median], device=dev)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        median = float(t)
        torch.distributed.destroy_process_group()
        if os.environ.get("RANK", "0") != "0":
            return
    print(json.dumps({
        "source": "pytorch", "program": "torch_resnet50", "model": "resnet50", "batch": a.batch,
        "precision": "bf16" if a.amp else "fp32", "compile": bool(a.compile),
        "steps": a.steps, "warmup": a.warmup, "step_time_median_s": median,
        "world_size": world, "images_per_s_per_gpu": a.batch / median,
        "images_per_s": a.batch * world / median, "final_loss": float(loss.detach()),
        "gpu": torch.cuda.get_device_name(0), "torch_version": torch.__version__,
        "torchvision": torchvision.__version__}))


if __name__ == "__main__":
    main()
