#!/usr/bin/env python3
"""Writes tests/fixtures/resnet_torch.safetensors: ResNets computed by PyTorch, to pin
aiscale's CPU ResNet (tests/nn/resnet_fixture_test.cpp reads it).

usage: python3 bench/compare/torch_resnet_fixture.py [OUT] [--device cuda|cpu]
  (PyTorch and torchvision; on a GPU host the reference runs in fp32 with TF32 and cuDNN
   autotuning off, so it is as exact as the CPU's)

Two cases, both built with torchvision.models.resnet's blocks and parameter names:
  small     aiscale's resnet-small with one block per stage: 3x3 stem (16), stages of
            16/32/64 channels, 1x12x12 images, 10 classes, batch 4
  resnet18  torchvision's resnet18 (ImageNet stem), 3x64x64 images, 10 classes, batch 8 (batch norm at layer4 then averages 32 values: with 2 it is too ill-conditioned for fp32 to agree)
Both start from a deterministic initialisation that aiscale computes the same way (no
weights travel): parameter k (in named_parameters order), element i (row-major):
  u = sin(0.7548776662 * (i + 1) + 1.3247179572 * (k + 1))          (float64, then float32)
  convolution weight (OC, C, K, K): u * sqrt(2) * sqrt(2 / (OC * K * K))
  batch norm weight: 1 + 0.2 u;  batch norm bias: 0.2 u
  fc.weight (OUT, IN): u / sqrt(IN);  fc.bias: 0.5 u / sqrt(IN)
Inputs: x[i] = 1.5 sin(0.1 i + 0.3) over the flat (N, C, H, W) tensor; label of image n is
(3 n + 1) mod 10.

Per case the file holds (float32 tensors, names "<case>.<what>"):
  input, labels (as floats), logits (training-mode forward), loss (label smoothing 0.1),
  grad.<param> (small: every gradient in full; resnet18: grad_head.<param>, the first 64
  values, and grad_sumsq.<param>, the sum of squares),
  step_losses (3 SGD steps on the same batch: lr 0.1, momentum 0.9, Nesterov, weight decay
  1e-4 on convolution and fc weights only; the loss before each update),
  final.<param> after the steps (small: all; resnet18: final_head.<param>, 64 values),
  final_buffer.<bn>.running_mean / running_var after the steps (small only).
Plus "version" = [1].
"""
import json
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models.resnet import BasicBlock, ResNet

VERSION = 1
STEPS, LR, MOMENTUM, WD, SMOOTHING = 3, 0.1, 0.9, 1e-4, 0.1


class SmallResNet(nn.Module):
    """aiscale's resnet-small (one block per stage): torchvision names."""

    def __init__(self, in_channels=1, widths=(16, 32, 64), blocks=(1, 1, 1), classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, widths[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        channels = widths[0]
        for s, (w, n) in enumerate(zip(widths, blocks)):
            layers = []
            for b in range(n):
                stride = 2 if (s > 0 and b == 0) else 1
                down = None
                if stride != 1 or channels != w:
                    down = nn.Sequential(nn.Conv2d(channels, w, 1, stride, bias=False),
                                         nn.BatchNorm2d(w))
                layers.append(BasicBlock(channels, w, stride, down))
                channels = w
            setattr(self, f"layer{s + 1}", nn.Sequential(*layers))
        self.stages = len(widths)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        for s in range(self.stages):
            x = getattr(self, f"layer{s + 1}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def deterministic_init(model):
    with torch.no_grad():
        for k, (name, p) in enumerate(model.named_parameters()):
            i = torch.arange(p.numel(), dtype=torch.float64)
            u = torch.sin(0.7548776662 * (i + 1) + 1.3247179572 * (k + 1))
            if p.dim() == 4:
                oc, _, kh, kw = p.shape
                v = u * math.sqrt(2.0) * math.sqrt(2.0 / (oc * kh * kw))
            elif name.startswith("fc."):
                fan_in = model.fc.in_features
                v = u / math.sqrt(fan_in) * (1.0 if name.endswith("weight") else 0.5)
            elif name.endswith("weight"):
                v = 1.0 + 0.2 * u
            else:
                v = 0.2 * u
            p.copy_(v.to(torch.float32).reshape(p.shape))


def inputs(n, c, h, w):
    i = torch.arange(n * c * h * w, dtype=torch.float64)
    x = (1.5 * torch.sin(0.1 * i + 0.3)).to(torch.float32).reshape(n, c, h, w)
    y = torch.tensor([(3 * k + 1) % 10 for k in range(n)], dtype=torch.int64)
    return x, y


def run_case(model, x, y, full, device):
    model = model.to(device).train()
    x, y = x.to(device), y.to(device)
    out = {"input": x, "labels": y.to(torch.float32)}
    logits = model(x)
    loss = F.cross_entropy(logits, y, label_smoothing=SMOOTHING)
    model.zero_grad()
    loss.backward()
    out["logits"] = logits.detach()
    out["loss"] = loss.detach().reshape(1)
    for name, p in model.named_parameters():
        if full:
            out["grad." + name] = p.grad.detach()
        else:
            out["grad_head." + name] = p.grad.detach().flatten()[:64]
            out["grad_sumsq." + name] = (p.grad.detach().double() ** 2).sum().float().reshape(1)
    decay = [p for p in model.parameters() if p.dim() > 1]
    rest = [p for p in model.parameters() if p.dim() <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": WD},
                           {"params": rest, "weight_decay": 0.0}],
                          lr=LR, momentum=MOMENTUM, nesterov=True)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        step_loss = F.cross_entropy(model(x), y, label_smoothing=SMOOTHING)
        step_loss.backward()
        losses.append(step_loss.item())
        opt.step()
    out["step_losses"] = torch.tensor(losses, dtype=torch.float32)
    for name, p in model.named_parameters():
        if full:
            out["final." + name] = p.detach()
        else:
            out["final_head." + name] = p.detach().flatten()[:64]
    if full:
        for name, b in model.named_buffers():
            if name.endswith("running_mean") or name.endswith("running_var"):
                out["final_buffer." + name] = b.detach()
    return out


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().to("cpu", torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"producer": "bench/compare/torch_resnet_fixture.py",
                              "torch": torch.__version__}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def main():
    args = sys.argv[1:]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if "--device" in args:
        i = args.index("--device")
        device = args[i + 1]
        del args[i:i + 2]
    out_path = args[0] if args else "tests/fixtures/resnet_torch.safetensors"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True

    tensors = {"version": torch.tensor([float(VERSION)])}
    small = SmallResNet()
    deterministic_init(small)
    for k, v in run_case(small, *inputs(4, 1, 12, 12), True, device).items():
        tensors["small." + k] = v
    r18 = ResNet(BasicBlock, [2, 2, 2, 2], num_classes=10)
    deterministic_init(r18)
    for k, v in run_case(r18, *inputs(8, 3, 64, 64), False, device).items():
        tensors["resnet18." + k] = v
    write_safetensors(out_path, tensors)
    print(f"wrote {out_path} ({len(tensors)} tensors) on {device} with torch {torch.__version__}")


if __name__ == "__main__":
    main()
