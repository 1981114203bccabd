#!/usr/bin/env python3
"""Trains a small GPT-style model with PyTorch and canzona doing the whole optimizer step, as an
ordinary torchrun script: the only canzona lines build the optimizer.

    torchrun --nproc-per-node 4 examples/torch_train.py --tp 2     # DP2·TP2
    torchrun --nproc-per-node 4 examples/torch_train.py            # DP4·TP1
    torchrun --nproc-per-node 1 examples/torch_train.py --device cuda
    python3 examples/torch_train.py                                # one process

The model (token and position embeddings, pre-norm blocks of causal self-attention with a fused
QKV projection and a SwiGLU MLP with a fused gate/up projection, a final norm and an output
layer) is tensor-parallel the way Megatron-LM splits it: QKV and gate/up column-parallel, the
attention output and the MLP down projection row-parallel, the embedding vocab-parallel and the
output layer column-parallel with its logits gathered; its collectives run over the job's
torch.distributed TP groups. The job does no data-parallel gradient reduction of its own: every
DP rank backpropagates its share of the global batch, and canzona.torch.Optimizer's step
reduce-scatters (averages) the gradients over the job's DP groups, runs AdamW and Muon as its
plan distributes them, and all-gathers the parameters. Learning rates follow a
torch.optim.lr_scheduler.

The corpus is generated (a seeded sentence grammar), the initial weights come from one seeded
generator for the full, unsharded tensors, so every DP/TP shape trains the same model on the
same data; examples/torch_reference.py trains it in one process with plain PyTorch.
Needs torch 2.5 or newer (tools/setup.sh's .venv has 2.13), the canzona package
(PYTHONPATH=python) and CANZONA_EXEC_LIB (docs/PYTHON.md); started by torchrun.
"""
import argparse
import contextlib
import json
import math
import os
import random
import socket
import sys
import time

VOCAB = "\n .,?abcdefghijklmnopqrstuvwxyz"
VOCAB_SIZE = 64  # the characters above, padded so that every TP size up to 64 divides it

WORDS = {
    "det": ["the", "a", "every", "one", "no", "some"],
    "adj": ["small", "quiet", "green", "old", "bright", "lazy", "quick", "round"],
    "noun": ["cat", "dog", "bird", "river", "tree", "house", "child", "stone", "boat", "garden"],
    "verb": ["sees", "likes", "follows", "finds", "keeps", "hears", "paints", "carries"],
    "prep": ["near", "under", "behind", "beside", "over"],
}


def corpus(seed, n_sentences=4000):
    """A deterministic text from a small sentence grammar: structured enough that the loss
    falls quickly, varied enough that it does not collapse to zero."""
    rnd = random.Random(seed)

    def phrase():
        words = [rnd.choice(WORDS["det"])]
        if rnd.random() < 0.5:
            words.append(rnd.choice(WORDS["adj"]))
        words.append(rnd.choice(WORDS["noun"]))
        return words

    lines = []
    for _ in range(n_sentences):
        s = phrase() + [rnd.choice(WORDS["verb"])] + phrase()
        if rnd.random() < 0.4:
            s += [rnd.choice(WORDS["prep"])] + phrase()
        end = rnd.choice([".", ".", ".", "?"])
        lines.append(" ".join(s) + end)
    return "\n".join(lines) + "\n"


def tokens(seed):
    import torch

    index = {ch: i for i, ch in enumerate(VOCAB)}
    return torch.tensor([index[ch] for ch in corpus(seed)], dtype=torch.long)


def global_batch(data, step, batch, seq, seed):
    """Inputs and targets [batch, seq] of a step: the same for every shape of the job (a DP
    rank takes its rows), chosen by the step number so a resumed run continues the data."""
    import torch

    rnd = random.Random(seed * 1000003 + step)
    starts = [rnd.randrange(0, data.numel() - seq - 1) for _ in range(batch)]
    x = torch.stack([data[s:s + seq] for s in starts])
    y = torch.stack([data[s + 1:s + seq + 1] for s in starts])
    return x, y


# ---- the model description: which parameters are split over TP, fused, and how optimized ----

def param_specs(cfg):
    """name -> (full shape, tp_dim, blocks or None, optimizer) in registration order."""
    h, f, v = cfg.hidden, cfg.ffn, VOCAB_SIZE
    specs = {"embed.weight": ([v, h], 0, None, "elementwise"),
             "pos.weight": ([cfg.seq, h], None, None, "elementwise")}
    for i in range(cfg.layers):
        p = f"layers.{i}."
        specs.update({
            p + "ln1.weight": ([h], None, None, "elementwise"),
            p + "ln1.bias": ([h], None, None, "elementwise"),
            p + "attn.qkv.weight": ([3 * h, h], 0, (0, [h, h, h]), "matrix"),
            p + "attn.proj.weight": ([h, h], 1, None, "matrix"),
            p + "ln2.weight": ([h], None, None, "elementwise"),
            p + "ln2.bias": ([h], None, None, "elementwise"),
            p + "mlp.fc1.weight": ([2 * f, h], 0, (0, [f, f]), "matrix"),
            p + "mlp.fc2.weight": ([h, f], 1, None, "matrix"),
        })
    specs.update({"ln_f.weight": ([h], None, None, "elementwise"),
                  "ln_f.bias": ([h], None, None, "elementwise"),
                  "head.weight": ([v, h], 0, None, "elementwise")})
    return specs


# The same declarations as canzona.model_description wants them (fnmatch patterns).
TP_DIMS = {"embed.weight": 0, "*.attn.qkv.weight": 0, "*.attn.proj.weight": 1,
           "*.mlp.fc1.weight": 0, "*.mlp.fc2.weight": 1, "head.weight": 0}


def blocks_decl(cfg):
    return {"*.attn.qkv.weight": (0, [cfg.hidden] * 3), "*.mlp.fc1.weight": (0, [cfg.ffn] * 2)}


OPTIMIZERS = {"embed.weight": "elementwise", "pos.weight": "elementwise",
              "head.weight": "elementwise"}


def init_params(cfg):
    """The full, unsharded initial parameters (name -> fp32 tensor) from one seeded generator."""
    import torch

    gen = torch.Generator().manual_seed(cfg.seed)
    out = {}
    for name, (shape, _, _, _) in param_specs(cfg).items():
        if name.endswith(".bias"):
            t = torch.zeros(shape)
        elif len(shape) == 1:
            t = torch.ones(shape)
        else:
            std = 0.02
            if name.endswith("attn.proj.weight") or name.endswith("mlp.fc2.weight"):
                std = 0.02 / math.sqrt(2 * cfg.layers)
            t = torch.randn(shape, generator=gen) * std
        out[name] = t.float()
    return out


def shard(full, tp_dim, blocks, tp, r):
    """TP rank r's shard of a full tensor as docs/EXECUTOR.md "Buffer layout" lays it out: a
    block-fused matrix split along its blocks' dimension is the concatenation of every block's
    r-th slice."""
    if tp_dim is None or tp == 1:
        return full.clone()
    import torch

    sizes = blocks[1] if blocks and blocks[0] == tp_dim else [full.shape[tp_dim]]
    parts = []
    for blk in torch.split(full, sizes, dim=tp_dim):
        parts.append(torch.chunk(blk, tp, dim=tp_dim)[r])
    return torch.cat(parts, dim=tp_dim).contiguous()


def unshard(shards, tp_dim, blocks):
    """The full tensor from every TP rank's shard (the inverse of shard)."""
    import torch

    if tp_dim is None or len(shards) == 1:
        return shards[0].clone()
    tp = len(shards)
    sizes = blocks[1] if blocks and blocks[0] == tp_dim else [shards[0].shape[tp_dim] * tp]
    local = [s // tp for s in sizes]
    per_rank = [torch.split(s, local, dim=tp_dim) for s in shards]
    return torch.cat([torch.cat([per_rank[r][b] for r in range(tp)], dim=tp_dim)
                      for b in range(len(sizes))], dim=tp_dim)


# ---- Megatron-style TP collectives as autograd functions ----

def tp_functions(group, tp):
    import torch
    import torch.distributed as dist

    class CopyToTP(torch.autograd.Function):
        """Identity forward, all-reduce backward: the input of a column-parallel layer."""

        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            g = g.clone()
            dist.all_reduce(g, group=group)
            return g

    class ReduceFromTP(torch.autograd.Function):
        """All-reduce forward, identity backward: the output of a row-parallel layer."""

        @staticmethod
        def forward(ctx, x):
            x = x.clone()
            dist.all_reduce(x, group=group)
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    class GatherFromTP(torch.autograd.Function):
        """All-gather along the last dimension forward, this rank's slice backward."""

        @staticmethod
        def forward(ctx, x):
            parts = [torch.empty_like(x) for _ in range(tp)]
            dist.all_gather(parts, x.contiguous(), group=group)
            ctx.n = x.shape[-1]
            return torch.cat(parts, dim=-1)

        @staticmethod
        def backward(ctx, g):
            r = dist.get_rank(group=group)
            return g[..., r * ctx.n:(r + 1) * ctx.n].contiguous()

    if tp == 1:
        ident = lambda x: x  # noqa: E731
        return ident, ident, ident
    return CopyToTP.apply, ReduceFromTP.apply, GatherFromTP.apply


def build_model(cfg, tp, tp_rank, group):
    """The GPT module holding TP rank tp_rank's shards (tp = 1: the whole model)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    copy_to, reduce_from, gather_from = tp_functions(group, tp)
    h, heads, f, v = cfg.hidden, cfg.heads, cfg.ffn, VOCAB_SIZE
    hl, fl, vl, heads_l = h // tp, f // tp, v // tp, heads // tp
    d = h // heads

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(h)
            self.attn = nn.Module()
            self.attn.qkv = nn.Linear(h, 3 * hl, bias=False)    # column-parallel, [q; k; v]
            self.attn.proj = nn.Linear(hl, h, bias=False)       # row-parallel
            self.ln2 = nn.LayerNorm(h)
            self.mlp = nn.Module()
            self.mlp.fc1 = nn.Linear(h, 2 * fl, bias=False)     # column-parallel, [gate; up]
            self.mlp.fc2 = nn.Linear(fl, h, bias=False)         # row-parallel

        def forward(self, x):
            b, t, _ = x.shape
            q, k, val = self.attn.qkv(copy_to(self.ln1(x))).split(hl, dim=-1)
            q, k, val = (z.view(b, t, heads_l, d).transpose(1, 2) for z in (q, k, val))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(d)
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
            y = (att @ val).transpose(1, 2).reshape(b, t, hl)
            x = x + reduce_from(self.attn.proj(y))
            gate, up = self.mlp.fc1(copy_to(self.ln2(x))).split(fl, dim=-1)
            return x + reduce_from(self.mlp.fc2(F.silu(gate) * up))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vl, h)                    # vocab-parallel
            self.pos = nn.Embedding(cfg.seq, h)
            self.layers = nn.ModuleList(Block() for _ in range(cfg.layers))
            self.ln_f = nn.LayerNorm(h)
            self.head = nn.Linear(h, vl, bias=False)            # column-parallel, logits gathered

        def forward(self, idx, targets):
            lo = tp_rank * vl
            local = idx - lo
            outside = (local < 0) | (local >= vl)
            e = self.embed(local.masked_fill(outside, 0)).masked_fill(outside.unsqueeze(-1), 0.0)
            x = reduce_from(e) + self.pos.weight[:idx.shape[1]]
            for blk in self.layers:
                x = blk(x)
            logits = gather_from(self.head(copy_to(self.ln_f(x))))
            return F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1))

    return GPT()


def load_shards(model, cfg, full, tp, tp_rank):
    """Copies TP rank tp_rank's shards of the full parameters into the model."""
    import torch

    specs = param_specs(cfg)
    names = [n for n, _ in model.named_parameters()]
    if names != list(specs):
        raise SystemExit(f"error: the module registers {names}, the specs list {list(specs)}")
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape, tp_dim, blocks, _ = specs[name]
            if list(full[name].shape) != shape:
                raise SystemExit(f"torch_train.py: error: {name}: the checkpoint holds shape "
                                 f"{list(full[name].shape)}, this model {shape} (resume with "
                                 "the saved run's model options)")
            p.copy_(shard(full[name], tp_dim, blocks, tp, tp_rank))


# ---- the distributed run ----

def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description="Train a small GPT-style model with Megatron-style tensor parallelism "
                    "(torch.distributed) and canzona's optimizer step (Muon for the matrices, "
                    "AdamW for the rest). Start it with torchrun --nproc-per-node DP*TP.",
        epilog="Example: torchrun --nproc-per-node 4 examples/torch_train.py --tp 2 "
               "(needs PYTHONPATH=python and CANZONA_EXEC_LIB; docs/PYTHON.md).")
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1; "
                                                      "DP is the processes / tp)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="where the model and canzona's buffers live (default cpu: gloo; "
                         "cuda: NCCL, one GPU per process)")
    ap.add_argument("--steps", type=int, default=50, help="optimizer steps to run (default 50)")
    ap.add_argument("--layers", type=int, default=2, help="transformer blocks (default 2)")
    ap.add_argument("--hidden", type=int, default=256, help="hidden size (default 256)")
    ap.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    ap.add_argument("--ffn", type=int, default=512, help="MLP width (default 512)")
    ap.add_argument("--seq", type=int, default=32, help="sequence length (default 32)")
    ap.add_argument("--batch", type=int, default=8,
                    help="global batch in sequences, split over DP (default 8)")
    ap.add_argument("--micro-batches", type=int, default=1,
                    help="gradient accumulation: backward passes per step (default 1)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the corpus and the weights")
    ap.add_argument("--lr", type=float, default=0.01, help="Muon learning rate (default 0.01)")
    ap.add_argument("--adamw-lr", type=float, default=2e-3,
                    help="AdamW learning rate (default 2e-3)")
    ap.add_argument("--weight-decay", type=float, default=0.01,
                    help="decoupled weight decay of Muon and AdamW (default 0.01)")
    ap.add_argument("--schedule", choices=("warmup-cosine", "cosine", "constant"),
                    default="warmup-cosine",
                    help="learning-rate schedule, a torch.optim.lr_scheduler: warmup-cosine "
                         "(LambdaLR: --warmup steps of linear warm-up, then a cosine decay to "
                         "10 %% at --decay-steps), cosine (CosineAnnealingLR over --steps down "
                         "to 10 %%), constant (default warmup-cosine)")
    ap.add_argument("--warmup", type=int, default=5,
                    help="steps of linear learning-rate warm-up (default 5)")
    ap.add_argument("--decay-steps", type=int, default=50,
                    help="the step at which the cosine decay after the warm-up reaches 10 %% "
                         "of the learning rates (default 50; at most --warmup: no decay)")
    ap.add_argument("--muon-scaling", choices=("rms", "shape"), default="rms",
                    help="Muon update scale (default rms: 0.2*sqrt(max(rows, cols)))")
    ap.add_argument("--max-grad-norm", type=float, default=0.0,
                    help="clip the global gradient norm to this (default 0: off)")
    ap.add_argument("--overlap", action="store_true",
                    help="overlap canzona's step with the passes (canzona.torch.Optimizer("
                         "overlap=True)): each bucket's gradient reduce-scatter starts during "
                         "the last micro-batch's backward, each bucket's parameter all-gather is "
                         "waited for by the next forward; the micro-batches before the last run "
                         "under opt.no_sync(). Same results as without it")
    ap.add_argument("--early-updates", action="store_true",
                    help="with --overlap, run each micro-group's update in the backward pass, "
                         "as soon as its buckets are reduced (early_updates=True; needs "
                         "--max-grad-norm 0, turns the NaN/Inf check off). Same results")
    ap.add_argument("--bucket-size", type=int, default=None, metavar="N",
                    help="gradient bucket size in elements of canzona's plan (default: the "
                         "planner's, one bucket for this small model; with --overlap, smaller "
                         "buckets start reducing earlier)")
    ap.add_argument("--set-to-none", action="store_true",
                    help="zero the gradients with zero_grad(set_to_none=True)")
    ap.add_argument("--save", metavar="DIR",
                    help="after the last step write a checkpoint to DIR/step-N (N: steps "
                         "taken): params.safetensors (the full parameters and N) and optim/ "
                         "(the optimizer's state_dict() through torch.distributed.checkpoint, "
                         "loadable under any DP/TP shape)")
    ap.add_argument("--save-every", type=int, default=0, metavar="K",
                    help="with --save: also write DIR/step-N after every K steps")
    ap.add_argument("--load", metavar="DIR",
                    help="resume from a checkpoint folder (DIR/step-N) under this run's DP/TP "
                         "shape; --steps more steps follow")
    ap.add_argument("--params-only", action="store_true",
                    help="with --load: take the parameters and step but not the optimizer "
                         "state (shows what the state is worth)")
    ap.add_argument("--save-plan", metavar="FILE", help="write canzona's plan to FILE")
    ap.add_argument("--log-json", metavar="FILE",
                    help="write the per-step losses and gradient norms as JSON (rank 0)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    return ap.parse_args(argv)


def lr_factor(cfg, step):
    """The warmup-cosine schedule's factor (LambdaLR): linear warm-up over --warmup steps, then
    a cosine decay to 10 % at step --decay-steps (and 10 % after it). A function of the step
    alone, so a resumed run continues it."""
    if step < cfg.warmup:
        return (step + 1) / cfg.warmup
    if cfg.decay_steps <= cfg.warmup:
        return 1.0
    x = min(1.0, (step - cfg.warmup) / (cfg.decay_steps - cfg.warmup))
    return 0.1 + 0.45 * (1.0 + math.cos(math.pi * x))


def scheduler(cfg, optimizer, step0):
    """The torch.optim.lr_scheduler of --schedule over optimizer's groups, at step step0."""
    import torch

    sched = torch.optim.lr_scheduler
    if cfg.schedule == "warmup-cosine":
        return sched.LambdaLR(optimizer, lambda s: lr_factor(cfg, s + step0))
    if cfg.schedule == "cosine":
        for g in optimizer.param_groups:
            g.setdefault("initial_lr", g["lr"])
        return sched.CosineAnnealingLR(optimizer, T_max=cfg.steps + step0, last_epoch=step0 - 1,
                                       eta_min=0.0)
    return sched.LambdaLR(optimizer, lambda s: 1.0)


def check_shape(cfg, world):
    """A message for a job shape that cannot run, or None."""
    if cfg.tp < 1:
        return "--tp must be at least 1"
    if world % cfg.tp:
        return (f"--tp {cfg.tp} does not divide the {world} processes of this job (torchrun "
                "--nproc-per-node DP*TP)")
    dp = world // cfg.tp
    for what, n in (("--heads", cfg.heads), ("--hidden", cfg.hidden), ("--ffn", cfg.ffn),
                    ("the vocabulary (64)", VOCAB_SIZE)):
        if n % cfg.tp:
            return f"{what} = {n} is not divisible by --tp {cfg.tp}"
    if cfg.hidden % cfg.heads:
        return f"--hidden {cfg.hidden} is not divisible by --heads {cfg.heads}"
    if cfg.batch % (dp * cfg.micro_batches):
        return (f"--batch {cfg.batch} is not divisible by DP {dp} x --micro-batches "
                f"{cfg.micro_batches}")
    if cfg.params_only and not cfg.load:
        return "--params-only needs --load"
    if cfg.save_every and not cfg.save:
        return "--save-every needs --save"
    return None


def init_distributed(device):
    """torch.distributed from torchrun's env:// rendezvous; a lone `python3 torch_train.py`
    gets a one-process world of its own."""
    import torch.distributed as dist

    if "RANK" not in os.environ:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]),
                          RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        s.close()
    dist.init_process_group("nccl" if device == "cuda" else "gloo")


def save_checkpoint(cfg, tp, opt, model, steps):
    """DIR/step-N: the optimizer's state_dict() through torch.distributed.checkpoint (DIR/step-N/
    optim, every rank takes part) and the full parameters, put together on rank 0 from the TP
    shards of DP rank 0."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import canzona

    rank = dist.get_rank()
    out = os.path.join(cfg.save, f"step-{steps}")
    dcp.save({"optim": opt.state_dict()}, checkpoint_id=os.path.join(out, "optim"))
    local = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, local)
    if rank == 0:
        os.makedirs(out, exist_ok=True)
        specs = param_specs(cfg)
        full = {n: unshard([everyone[t][n] for t in range(tp)], specs[n][1], specs[n][2])
                for n in specs}
        canzona.safetensors.save(os.path.join(out, "params.safetensors"),
                                 {n: t.numpy() for n, t in full.items()}, {"step": str(steps)})
        print(f"saved {out}", flush=True)
    dist.barrier()


def load_checkpoint(cfg):
    """(full parameters, step) from --load, or a message."""
    import torch
    import canzona

    path = os.path.join(cfg.load, "params.safetensors")
    try:
        tensors, meta = canzona.safetensors.load(path)
        missing = sorted(set(param_specs(cfg)) - set(tensors))
        if missing:
            raise ValueError(f"no tensor {missing[0]!r} (another model?)")
        return {k: torch.from_numpy(a) for k, a in tensors.items()}, int(meta["step"])
    except (OSError, ValueError, KeyError) as e:
        return f"cannot resume from {path}: {e}"


def main(argv=None):
    cfg = parse_args(argv)
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        print(f"torch_train.py: error: PyTorch is not installed for {sys.executable} (run "
              "tools/setup.sh and use .venv/bin/python, or pip install torch)", file=sys.stderr)
        return 2
    init_distributed(cfg.device)
    rank, world = dist.get_rank(), dist.get_world_size()
    msg = check_shape(cfg, world)
    if msg:
        if rank == 0:
            print(f"torch_train.py: error: {msg}", file=sys.stderr)
        return 2
    dp, tp = world // cfg.tp, cfg.tp
    dp_rank, tp_rank = rank // tp, rank % tp  # TP innermost, as Megatron lays ranks out
    torch.set_num_threads(cfg.threads)
    device = torch.device("cpu")
    if cfg.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    group = None
    for d in range(dp):  # every rank creates every TP group, in the same order
        g = dist.new_group([d * tp + t for t in range(tp)])
        if d == dp_rank:
            group = g

    model = build_model(cfg, tp, tp_rank, group)
    step0 = 0
    if cfg.load:
        box = [load_checkpoint(cfg) if rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        if isinstance(box[0], str):
            if rank == 0:
                print(f"torch_train.py: error: {box[0]}", file=sys.stderr)
            return 2
        full, step0 = box[0]
    else:
        full = init_params(cfg)
    load_shards(model, cfg, full, tp, tp_rank)
    del full
    model.to(device)

    import canzona.torch

    opt = canzona.torch.Optimizer(
        model, tp_group=group, tp_dims=TP_DIMS, blocks=blocks_decl(cfg), optimizers=OPTIMIZERS,
        lr=cfg.lr, weight_decay=cfg.weight_decay, adamw_lr=cfg.adamw_lr,
        muon_scaling=cfg.muon_scaling, max_grad_norm=cfg.max_grad_norm, save_plan=cfg.save_plan,
        overlap=cfg.overlap, early_updates=cfg.early_updates, bucket_size=cfg.bucket_size)

    sched = scheduler(cfg, opt, step0)
    if cfg.load and not cfg.params_only:
        # The torch way: this optimizer's state_dict() as the template dcp.load fills. dcp.load
        # reads only the template's keys, so the scheduler comes first: its "initial_lr" in
        # the param groups is then loaded too (else LambdaLR's base would be the saved rate).
        import torch.distributed.checkpoint as dcp

        state = {"optim": opt.state_dict()}
        dcp.load(state, checkpoint_id=os.path.join(cfg.load, "optim"))
        opt.load_state_dict(state["optim"])

    data = tokens(cfg.seed)
    rows = cfg.batch // dp
    micro = rows // cfg.micro_batches
    losses, norms = [], []
    t0 = time.time()
    if rank == 0:
        print(f"torch_train: DP{dp}·TP{tp} on {device}, "
              f"{sum(p.numel() for p in model.parameters())} parameters per rank, steps "
              f"{step0}..{step0 + cfg.steps - 1}", flush=True)
    for step in range(step0, step0 + cfg.steps):
        x, y = global_batch(data, step, cfg.batch, cfg.seq, cfg.seed)
        x, y = x[dp_rank * rows:(dp_rank + 1) * rows], y[dp_rank * rows:(dp_rank + 1) * rows]
        opt.zero_grad(set_to_none=cfg.set_to_none)
        total = torch.zeros((), dtype=torch.float64)
        for m in range(cfg.micro_batches):
            xs, ys = x[m * micro:(m + 1) * micro], y[m * micro:(m + 1) * micro]
            # With --overlap, only the last micro-batch's backward starts the reduce-scatters.
            last = m == cfg.micro_batches - 1
            with contextlib.nullcontext() if last else opt.no_sync():
                loss = model(xs.to(device), ys.to(device)) / cfg.micro_batches
                loss.backward()
            total += loss.detach().double().cpu()
        opt.step()
        sched.step()
        # Every TP rank holds its DP rank's loss: the mean over the world is the mean over DP.
        mean = total.to(device)
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
        norms.append(float(opt.grad_norm))
        if rank == 0:
            print(f"step {step:4d}  loss {losses[-1]:.6f}  grad_norm {norms[-1]:.4f}", flush=True)
        if cfg.save and cfg.save_every and (step + 1 - step0) % cfg.save_every == 0:
            save_checkpoint(cfg, tp, opt, model, step + 1)
    secs = time.time() - t0

    if cfg.save and not (cfg.save_every and cfg.steps % cfg.save_every == 0):
        save_checkpoint(cfg, tp, opt, model, step0 + cfg.steps)
    if rank == 0:
        print(f"done: {cfg.steps} steps in {secs:.1f} s, loss {losses[0]:.4f} -> "
              f"{losses[-1]:.4f}", flush=True)
        if cfg.log_json:
            with open(cfg.log_json, "w") as f:
                json.dump({"dp": dp, "tp": tp, "first_step": step0, "loss": losses,
                           "grad_norm": norms}, f)
    opt.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
