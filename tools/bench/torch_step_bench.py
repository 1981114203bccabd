#!/usr/bin/env python3
"""canzona.torch.Optimizer's training iteration against the synchronous baseline a PyTorch user
would otherwise write: DistributedDataParallel (gradients all-reduced in backward), then
torch.optim.Muon on the matrices and torch.optim.AdamW on the rest, on every rank. One process
group (gloo), one model, the same data; run it under torchrun:

    .venv/bin/torchrun --standalone --nproc-per-node 4 tools/bench/torch_step_bench.py

The model is a stack of square Linear layers (default 48 of 1024 x 1024, 50.4 M parameters)
with a LayerNorm per block of four, so the optimizer step dominates the iteration. Each variant
trains --steps steps after --warmup; an iteration is timed from a barrier to a barrier (the
slowest rank's time) and the median is printed, with the ratio to canzona's:

  * ddp+muon       DDP, then torch.optim.Muon (its Newton-Schulz in bfloat16, as shipped) +
                   AdamW on every rank
  * ddp+muon-fp32  the same with the Newton-Schulz iteration in float32, canzona's precision
                   (skip with --no-fp32-baseline)
  * canzona        canzona.torch.Optimizer (reduce-scatter, each matrix's update on its one
                   owner, all-gather), DP = world size

Also the step alone (after backward: the optimizers' step() calls; canzona's reduce-scatter is
inside its step, DDP's all-reduce inside backward) and, per variant, the loss after the last
step, the mean over the ranks (the runs train the same model). Options: --layers N --hidden H --batch B --steps S
--warmup W --json FILE. Needs CANZONA_EXEC_LIB (and PYTHONPATH=python) as docs/PYTHON.md says.
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

from canzona.testing import torch_muon_fp32


class Stack(nn.Module):
    def __init__(self, layers, hidden):
        super().__init__()
        blocks = []
        for i in range(0, layers, 4):
            blocks.append(nn.LayerNorm(hidden))
            for _ in range(min(4, layers - i)):
                blocks.append(nn.Linear(hidden, hidden, bias=False))
                blocks.append(nn.ReLU())
        self.net = nn.Sequential(*blocks)

    def forward(self, x):
        return (self.net(x) ** 2).mean()


def make_model(cfg):
    torch.manual_seed(0)
    m = Stack(cfg.layers, cfg.hidden)
    with torch.no_grad():
        for p in m.parameters():
            if p.ndim == 2:
                p.normal_(0.0, 1.0 / cfg.hidden ** 0.5)
    return m


def batch(cfg, step, rank, world):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(cfg.batch // world, cfg.hidden, generator=g)


def timed(fn):
    dist.barrier()
    t0 = time.perf_counter()
    out = fn()
    dist.barrier()
    return time.perf_counter() - t0, out


def time_iterations(cfg, model, step):
    """cfg.warmup + cfg.steps iterations of forward, backward and step() (the optimizers' step
    and zero_grad): the timed ones' iteration and step times and the last mean loss."""
    rank, world = dist.get_rank(), dist.get_world_size()
    iters, steps, loss = [], [], None
    for s in range(cfg.warmup + cfg.steps):
        x = batch(cfg, s, rank, world)

        def it():
            loss = model(x)
            loss.backward()
            t, _ = timed(step)
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            return mean.item() / world, t

        t, (loss, st) = timed(it)
        if s >= cfg.warmup:
            iters.append(t)
            steps.append(st)
    return iters, steps, loss


def run_baseline(cfg, fp32):
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(make_model(cfg))
    mats = [p for p in model.parameters() if p.ndim == 2]
    rest = [p for p in model.parameters() if p.ndim != 2]
    muon = torch.optim.Muon(mats, lr=1e-3, weight_decay=0.01, adjust_lr_fn="match_rms_adamw")
    adamw = torch.optim.AdamW(rest, lr=3e-4, betas=(0.9, 0.95), weight_decay=0.01)

    def step():
        muon.step()
        adamw.step()
        muon.zero_grad()
        adamw.zero_grad()

    with torch_muon_fp32() if fp32 else contextlib.nullcontext():
        return time_iterations(cfg, model, step)


def run_canzona(cfg):
    import canzona.torch

    model = make_model(cfg)
    opt = canzona.torch.Optimizer(model, lr=1e-3, weight_decay=0.01, muon_scaling="rms",
                                  adamw_lr=3e-4, adamw_betas=(0.9, 0.95))

    def step():
        opt.step()
        opt.zero_grad()

    try:
        return time_iterations(cfg, model, step)
    finally:
        opt.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32, help="global batch rows (default 32)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per variant (default 5)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--no-fp32-baseline", action="store_true")
    ap.add_argument("--json", metavar="FILE", help="write the figures as JSON (rank 0)")
    cfg = ap.parse_args()
    if cfg.steps < 1 or cfg.layers < 1 or cfg.hidden < 1:
        ap.error("--steps, --layers and --hidden must be positive")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if cfg.batch % world:
        if rank == 0:
            print(f"torch_step_bench.py: error: --batch {cfg.batch} is not divisible by the "
                  f"{world} ranks", file=sys.stderr)
        return 2
    nparams = sum(p.numel() for p in make_model(cfg).parameters())
    if rank == 0:
        print(f"torch_step_bench: {world} ranks (gloo), {cfg.layers} x {cfg.hidden}^2 matrices, "
              f"{nparams / 1e6:.1f} M parameters, torch {torch.__version__}, "
              f"{cfg.steps} timed steps after {cfg.warmup}", flush=True)
    variants = [("canzona", lambda: run_canzona(cfg)), ("ddp+muon", lambda: run_baseline(cfg, False))]
    if not cfg.no_fp32_baseline:
        variants.append(("ddp+muon-fp32", lambda: run_baseline(cfg, True)))
    results = {}
    for name, fn in variants:
        iters, steps, loss = fn()
        results[name] = {"iteration_s": statistics.median(iters),
                         "step_s": statistics.median(steps), "iterations_s": iters,
                         "final_loss": loss}
        if rank == 0:
            print(f"{name:14s} iteration median {results[name]['iteration_s']:.3f} s "
                  f"(step {results[name]['step_s']:.3f} s); all: "
                  f"{' '.join(f'{t:.2f}' for t in iters)}; final loss {loss:.6f}", flush=True)
    if rank == 0:
        base = results["canzona"]["iteration_s"]
        for name in results:
            if name != "canzona":
                r = results[name]["iteration_s"] / base
                results[name]["ratio_to_canzona"] = r
                print(f"{name} / canzona, iteration: {r:.2f}x; step: "
                      f"{results[name]['step_s'] / results['canzona']['step_s']:.2f}x")
        if cfg.json:
            with open(cfg.json, "w") as f:
                json.dump({"world": world, "params": nparams, "torch": torch.__version__,
                           "results": results}, f, indent=1)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
