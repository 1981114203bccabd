#!/usr/bin/env python3
"""canzona in a torch 2.x job with tensor parallelism as torchtitan writes it: a DeviceMesh of
("dp", "tp"), the model parallelized by torch's own parallelize_module (ColwiseParallel and
RowwiseParallel), no DDP and no tp_dims: canzona.torch.Optimizer reads each parameter's TP
dimension from its DTensor placement, reduce-scatters the gradients over "dp", runs Muon on the
matrices (each on one owner) and AdamW on the rest, and all-gathers the parameters.

    torchrun --standalone --nproc-per-node 4 examples/torch_dtensor.py --tp 2    # DP2·TP2

Needs the canzona package (PYTHONPATH=python) and CANZONA_EXEC_LIB (docs/PYTHON.md); prints the
loss (the mean over DP) every few steps and exits 0 once it fell below half its first value.
"""
import argparse
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

import canzona.torch


class MLPBlock(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.w1 = nn.Linear(dim, hidden, bias=False)   # column-parallel: Shard(0)
        self.w2 = nn.Linear(hidden, dim, bias=False)   # row-parallel: Shard(1)

    def forward(self, x):
        return x + self.w2(F.gelu(self.w1(self.norm(x))))


class Model(nn.Module):
    def __init__(self, vocab=64, dim=128, hidden=512, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(MLPBlock(dim, hidden) for _ in range(layers))
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        x = self.embed(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def main():
    ap = argparse.ArgumentParser(description="canzona with DTensor tensor parallelism")
    ap.add_argument("--tp", type=int, default=2, help="TP size (default 2; DP = world / TP)")
    ap.add_argument("--steps", type=int, default=30)
    cfg = ap.parse_args()
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    if cfg.tp < 1 or world % cfg.tp:
        sys.exit(f"torch_dtensor.py: --tp {cfg.tp} does not divide the {world} processes")
    torch.set_num_threads(1)
    mesh = init_device_mesh("cpu", (world // cfg.tp, cfg.tp), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)                     # the same initial weights on every rank
    model = Model()
    parallelize_module(model, mesh["tp"], {f"blocks.{i}.{n}": s for i in range(2) for n, s in
                                           (("w1", ColwiseParallel()), ("w2", RowwiseParallel()))})

    # The optimizer: Muon on the matrices, AdamW on the rest (embedding and head by choice).
    opt = canzona.torch.Optimizer(model, mesh=mesh, lr=0.02, adamw_lr=3e-3,
                                  optimizers={"embed.weight": "elementwise",
                                              "head.weight": "elementwise"})
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.steps)
    dp, dp_rank = mesh.size(0), mesh.get_local_rank("dp")
    first = None
    for step in range(cfg.steps):
        g = torch.Generator().manual_seed(step)   # the global batch; this DP rank takes its rows
        x = torch.randint(0, 64, (16, 32), generator=g)
        y = (x * 5 + 1) % 64
        rows = slice(dp_rank * 16 // dp, (dp_rank + 1) * 16 // dp)
        loss = F.cross_entropy(model(x[rows]).flatten(0, 1), y[rows].flatten())
        loss.backward()
        opt.step(); sched.step(); opt.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean, group=mesh.get_group("dp"))
        mean = mean.item() / dp
        first = mean if first is None else first
        if dist.get_rank() == 0 and (step % 10 == 0 or step == cfg.steps - 1):
            print(f"step {step:3d}  loss {mean:.4f}", flush=True)
    opt.close()
    dist.destroy_process_group()
    return 0 if mean < 0.5 * first else 1


if __name__ == "__main__":
    sys.exit(main())
