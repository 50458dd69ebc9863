#!/usr/bin/env python3
"""Records PyTorch training runs' allocations for gpumem's replay: a GPT-style model trained with
varying batch sizes and sequence lengths, and a ResNet-style network with varying batch and image
sizes. Each run's memory history is dumped as a snapshot (OUT/<run>.pickle) and its PyTorch
figures printed: peak live (max_memory_allocated) and peak reserved (max_memory_reserved).

    python3 bench/torch_memory_runs.py OUT [--steps N]

Then tools/torch_snapshot_to_trace.py turns each snapshot into a trace for `gpumem replay`.
Needs a GPU and PyTorch.
"""
import argparse
import os
import random
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        n = x.shape[1]
        mask = torch.triu(torch.ones(n, n, device=x.device, dtype=torch.bool), 1)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab=32000, d=512, layers=6, heads=8, context=1024):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def resnet():
    try:
        import torchvision

        return torchvision.models.resnet50(num_classes=1000)
    except ImportError:  # a ResNet-style stack of the same shape of work
        layers, c = [nn.Conv2d(3, 64, 7, 2, 3), nn.BatchNorm2d(64), nn.ReLU()], 64
        for out in (256, 512, 1024, 2048):
            layers += [nn.Conv2d(c, out, 3, 2, 1), nn.BatchNorm2d(out), nn.ReLU(), nn.Conv2d(out, out, 3, 1, 1),
                       nn.BatchNorm2d(out), nn.ReLU()]
            c = out
        return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 1000))


# The batch makers and the seed, at module level so that bench/torch_dropin.py runs the same
# batches: the shapes come from `random`, seeded once, the GPT run's draws before the ResNet run's.
SEED = 20261130
GPT_BATCHES, GPT_LENGTHS = [4, 8, 12, 16, 24], [128, 256, 384, 512, 768, 1024]
RESNET_BATCHES, RESNET_SIZES = [16, 24, 32, 48, 64], [128, 160, 192, 224, 256]


def gpt_batch():
    b, n = random.choice(GPT_BATCHES), random.choice(GPT_LENGTHS)
    idx = torch.randint(0, 32000, (b, n), device="cuda")
    return idx, torch.randint(0, 32000, (b, n), device="cuda")


def resnet_batch():
    b, s = random.choice(RESNET_BATCHES), random.choice(RESNET_SIZES)
    return torch.randn(b, 3, s, s, device="cuda"), torch.randint(0, 1000, (b,), device="cuda")


def train_step(model, opt, make_batch):
    x, target = make_batch()
    loss = F.cross_entropy(model(x).flatten(0, -2) if x.dim() == 2 else model(x), target.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def run(name, model, make_batch, steps, out):
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, context=None)
    model = model.cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(steps):
        train_step(model, opt, make_batch)
    torch.cuda.synchronize()
    path = os.path.join(out, f"{name}.pickle")
    torch.cuda.memory._dump_snapshot(path)
    torch.cuda.memory._record_memory_history(enabled=None)
    live, reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    print(f"RUN {name} steps={steps} peak_live={live} peak_reserved={reserved} ratio={reserved / live:.4f} "
          f"snapshot={path}", flush=True)
    del model, opt


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=12)
    a = p.parse_args(argv)
    random.seed(SEED)
    torch.manual_seed(SEED)
    run("gpt", GPT(), gpt_batch, a.steps, a.out)
    run("resnet", resnet(), resnet_batch, a.steps, a.out)


if __name__ == "__main__":
    main(sys.argv[1:])
