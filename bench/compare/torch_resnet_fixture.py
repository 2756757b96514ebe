#!/usr/bin/env python3
"""Writes tests/fixtures/resnet_torch.safetensors: ResNets computed by PyTorch, to pin
aiscale's CPU ResNet (tests/nn/resnet_fixture_test.cpp reads it).

usage: python3 bench/compare/torch_resnet_fixture.py [OUT] [--device cuda|cpu]
  (PyTorch and torchvision; on a GPU host the reference runs in fp32 with TF32 and cuDNN
   autotuning off, so it is as exact as the CPU's)

Two cases, both built with torchvision.models.resnet's blocks and parameter names:
  small     aiscale's resnet-small with one block per stage: 3x3 stem (16), stages of
            16/32/64 channels, 1x12x12 images, 10 classes, batch 4; sinusoid
            initialisation and inputs; SGD at lr 0.1
  resnet18  torchvision's resnet18 (ImageNet stem), 3x64x64 images, 10 classes, batch 8;
            hashed initialisation and inputs (salt 1031); SGD at lr 0.01
Both start from a deterministic initialisation that aiscale computes the same way (no
weights travel). Parameter k (in named_parameters order), element i (row-major), u in
[-1, 1] computed in float64 (then float32):
  sinusoid  u = sin(0.7548776662 * (i + 1) + 1.3247179572 * (k + 1)), a = sqrt(2)
  hashed    h = ((i + 1) * 2654435761 + (k + 1) * 1013904223) mod p, p = 2^31 - 1;
            h = h^2 mod p twice (exact int64); u = (2 h + 1) / p - 1, a = sqrt(3)
  convolution weight (OC, C, K, K): u * a * sqrt(2 / (OC * K * K))  (He's fan-out std)
  batch norm weight: 1 + 0.2 u;  batch norm bias: 0.2 u
  fc.weight (OUT, IN): u / sqrt(IN);  fc.bias: 0.5 u / sqrt(IN)
The sinusoid rule makes every weight matrix rank 2 (each output channel's filter is the
same sinusoid at another phase), which leaves ResNet-18 so ill-conditioned that fp32
gradients of any two implementations differ by up to 30 % (see docs/guide/vision.md); the
hashed rule is full rank. Inputs, flat index i over (N, C, H, W): sinusoid
x[i] = 1.5 sin(0.1 i + 0.3); hashed x[i] = 1.5 u with u the hashed rule at element i and
k = salt. The salt is chosen so that, in exact (float64) arithmetic, no ReLU input of
layer2-layer4 lies within 1.8e-5 of zero: a ReLU (or a max-pool choice) within float32
rounding of its kink routes a gradient differently in two correct implementations.
Label of image n is (3 n + 1) mod 10.

Per case the file holds (float32 tensors, names "<case>.<what>"):
  input (N, C, H, W), labels (as floats), init ([1] sinusoid, [2] hashed),
  sgd ([lr, momentum, weight decay]), logits (training-mode forward), loss (label
  smoothing 0.1),
  grad.<param> (small: every gradient in full; resnet18: grad_head.<param>, the first 64
  values, and grad_sumsq.<param>, the sum of squares),
  step_losses (3 SGD steps on the same batch: the case's lr, momentum 0.9, Nesterov, weight
  decay 1e-4 on convolution and fc weights only; the loss before each update),
  final.<param> after the steps (small: all; resnet18: final_head.<param>, 64 values),
  final_buffer.<bn>.running_mean / running_var after the steps (small only).
Plus "version" = [2] (version 1 had no init or sgd entries and ResNet-18 on the sinusoid
rule at lr 0.1).
"""
import json
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models.resnet import BasicBlock, ResNet

VERSION = 2
STEPS, MOMENTUM, WD, SMOOTHING = 3, 0.9, 1e-4, 0.1
SINUSOID, HASHED = 1, 2
HASH_P = 2147483647
RESNET18_SALT = 1031


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


def hashed_u(n, k):
    """u for elements 0..n-1 of parameter k under the hashed rule (exact int64, then float64)."""
    i = torch.arange(n, dtype=torch.int64)
    h = ((i + 1) * 2654435761 + (k + 1) * 1013904223) % HASH_P
    h = h * h % HASH_P
    h = h * h % HASH_P
    return (2 * h + 1).to(torch.float64) / HASH_P - 1.0


def deterministic_init(model, rule):
    with torch.no_grad():
        for k, (name, p) in enumerate(model.named_parameters()):
            if rule == SINUSOID:
                i = torch.arange(p.numel(), dtype=torch.float64)
                u = torch.sin(0.7548776662 * (i + 1) + 1.3247179572 * (k + 1))
                amplitude = math.sqrt(2.0)
            else:
                u = hashed_u(p.numel(), k)
                amplitude = math.sqrt(3.0)
            if p.dim() == 4:
                oc, _, kh, kw = p.shape
                v = u * amplitude * math.sqrt(2.0 / (oc * kh * kw))
            elif name.startswith("fc."):
                fan_in = model.fc.in_features
                v = u / math.sqrt(fan_in) * (1.0 if name.endswith("weight") else 0.5)
            elif name.endswith("weight"):
                v = 1.0 + 0.2 * u
            else:
                v = 0.2 * u
            p.copy_(v.to(torch.float32).reshape(p.shape))


def inputs(n, c, h, w, rule, salt=0):
    if rule == SINUSOID:
        i = torch.arange(n * c * h * w, dtype=torch.float64)
        x = 1.5 * torch.sin(0.1 * i + 0.3)
    else:
        x = 1.5 * hashed_u(n * c * h * w, salt)
    y = torch.tensor([(3 * k + 1) % 10 for k in range(n)], dtype=torch.int64)
    return x.to(torch.float32).reshape(n, c, h, w), y


def run_case(model, x, y, full, device, rule, lr):
    model = model.to(device).train()
    x, y = x.to(device), y.to(device)
    out = {"input": x, "labels": y.to(torch.float32),
           "init": torch.tensor([float(rule)]), "sgd": torch.tensor([lr, MOMENTUM, WD])}
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
                          lr=lr, momentum=MOMENTUM, nesterov=True)
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
    deterministic_init(small, SINUSOID)
    for k, v in run_case(small, *inputs(4, 1, 12, 12, SINUSOID), True, device,
                         SINUSOID, 0.1).items():
        tensors["small." + k] = v
    r18 = ResNet(BasicBlock, [2, 2, 2, 2], num_classes=10)
    deterministic_init(r18, HASHED)
    for k, v in run_case(r18, *inputs(8, 3, 64, 64, HASHED, RESNET18_SALT), False, device,
                         HASHED, 0.01).items():
        tensors["resnet18." + k] = v
    write_safetensors(out_path, tensors)
    print(f"wrote {out_path} ({len(tensors)} tensors) on {device} with torch {torch.__version__}")


if __name__ == "__main__":
    main()
