"""canzona.torch.Optimizer against torch.optim.Muon + torch.optim.AdamW, the optimizer torch ships,
trained in one process on the same model, data and initial weights (issue 36, item 3). Started by
torchrun: with 1 process it checks DP1; with 4, DP2·TP2 and DP4·TP1, each with Megatron-style TP
shards (plain tensors, tp_dims declared, collectives of our own) and with torch's own DTensor
tensor parallelism (parallelize_module with ColwiseParallel / RowwiseParallel over the "tp"
dimension of a ("dp", "tp") DeviceMesh, no tp_dims).

    python -m torch.distributed.run --standalone --nproc-per-node 4 torch_muon_check.py

Each of canzona's two Muon scalings is mapped to torch's adjust_lr_fn with the same rates
(docs/PYTHON.md, "canzona and torch.optim.Muon"):

  muon_scaling="rms"   <->  Muon(adjust_lr_fn="match_rms_adamw")   0.2 * sqrt(max(rows, cols))
  muon_scaling="shape" <->  Muon(adjust_lr_fn="original")          sqrt(max(1, rows / cols))

Both sides: lr 0.02 (Muon) and 3e-3 (AdamW), weight decay 0.1 on both, momentum 0.95 with
Nesterov, 5 Newton-Schulz steps with (3.4445, -4.775, 2.0315), AdamW betas (0.9, 0.95), eps 1e-8.

Bounds, per step's loss (relative) and per final parameter (||a - b||_F / ||b||_F), 20 steps:

  * against torch.optim.Muon with its Newton-Schulz in fp32 (the shipped function runs it in
    bfloat16; the test swaps in the same iteration in fp32): 1e-4. Everything else is the same
    arithmetic in another order (canzona's momentum is mu*buf + g, torch's the EMA
    lerp(g, 1 - mu), which differ by the factor 1 - mu that the Newton-Schulz normalization
    removes; the DP average and the TP gather add in another order), so the runs agree to a few
    float32 roundings amplified by 20 steps; the measured differences are printed.
  * against torch.optim.Muon as shipped: 5e-3 on the loss, 5e-2 on the parameters. Its
    bfloat16 iteration rounds every product to 8 significant bits (unit roundoff 2^-9 = 2e-3),
    so each update differs from the fp32 one by about 1 %; over 20 steps at these rates that
    moves the parameters by a few percent of their update, which the fp32 reference shows
    (torch's own bf16 against fp32 difference is printed beside ours: ours must stay within
    the bound, and within 3 times torch's own).
  * a negative control: the same run against torch.optim.Muon with nesterov=False must differ
    by more than the fp32 bound, so the comparison can fail.

Per-head Muon (issue 42): canzona with heads= on the query, key and value projections (heads of
H / HEADS rows, the TP shards holding whole heads, so each is a TP-local task) against
torch.optim.Muon run on every head as a parameter of its own (the reference model keeps each
head's rows as a separate leaf and concatenates them in forward), fp32 Newton-Schulz, "rms"
scaling: the same 1e-4 bound, and whole-matrix Muon as its negative control.

Env: CANZONA_EXEC_LIB, CANZONA_LIB, PYTHONPATH with python/ and CZ_SOURCE_DIR. Writes nothing.
"""
import math
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import canzona.torch as ct
from canzona.testing import train_torch

sys.path.insert(0, os.path.join(os.environ["CZ_SOURCE_DIR"], "examples"))
from torch_train import tp_functions  # noqa: E402  (Megatron-style TP collectives)

V, H, HEADS, FFN, T, B, LAYERS = 64, 64, 4, 128, 16, 8, 2
STEPS = 20
LR, ADAMW_LR, WD = 0.02, 3e-3, 0.1
FP32_TOL = 1e-4
BF16_LOSS_TOL, BF16_PARAM_TOL, BF16_RATIO = 5e-3, 5e-2, 3.0
TORCH_FN = {"rms": "match_rms_adamw", "shape": "original"}
# name suffix -> TP dimension of the Megatron-style shards (0 column-, 1 row-parallel)
TP_DIMS = {"*.wq.weight": 0, "*.wk.weight": 0, "*.wv.weight": 0, "*.wo.weight": 1,
           "*.w1.weight": 0, "*.w2.weight": 1}


class Block(nn.Module):
    def __init__(self, tp):
        super().__init__()
        self.ln1 = nn.LayerNorm(H)
        self.wq, self.wk, self.wv = (nn.Linear(H, H // tp, bias=False) for _ in range(3))
        self.wo = nn.Linear(H // tp, H, bias=False)
        self.ln2 = nn.LayerNorm(H)
        self.w1 = nn.Linear(H, FFN // tp, bias=False)
        self.w2 = nn.Linear(FFN // tp, H, bias=False)

    def forward(self, x, copy_to, reduce_from):
        b, t, _ = x.shape
        y = copy_to(self.ln1(x))
        q, k, v = self.wq(y), self.wk(y), self.wv(y)
        d = H // HEADS
        heads = q.shape[-1] // d  # this TP rank's heads
        q, k, v = (z.view(b, t, heads, d).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + reduce_from(self.wo(att.transpose(1, 2).reshape(b, t, heads * d)))
        return x + reduce_from(self.w2(F.gelu(self.w1(copy_to(self.ln2(x))))))


class Net(nn.Module):
    """A small decoder: separate q, k, v, o and MLP matrices (torch.optim.Muon orthogonalizes
    whole parameters, so nothing is fused), embedding, norms and head replicated over TP."""

    def __init__(self, tp=1, tp_group=None, layers=LAYERS):
        super().__init__()
        self.embed = nn.Embedding(V, H)
        self.layers = nn.ModuleList(Block(tp) for _ in range(layers))
        self.ln_f = nn.LayerNorm(H)
        self.head = nn.Linear(H, V, bias=False)
        self._tp = tp_functions(tp_group, tp)[:2] if tp_group is not None else (_id, _id)

    def forward(self, idx, targets):
        x = self.embed(idx)
        for blk in self.layers:
            x = blk(x, *self._tp)
        return F.cross_entropy(self.head(self.ln_f(x)).reshape(-1, V), targets.reshape(-1))


def _id(x):
    return x


def full_init(layers=LAYERS):
    g = torch.Generator().manual_seed(1234)
    ref = Net(layers=layers)
    with torch.no_grad():
        for n, p in ref.named_parameters():
            if p.ndim == 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5 / math.sqrt(p.shape[1]))
            else:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g) if n.endswith("weight")
                        else 0.1 * torch.randn(p.shape, generator=g))
    return {n: p.detach().clone() for n, p in ref.named_parameters()}


def batch(step):
    """The global batch of a step: every shape trains on the same rows."""
    g = torch.Generator().manual_seed(99 + step)
    x = torch.randint(0, V, (B, T), generator=g)
    return x, (x * 7 + 3) % V  # a rule the model learns within the 20 steps


def tp_dim_of(name):
    import fnmatch

    return next((d for pat, d in TP_DIMS.items() if fnmatch.fnmatchcase(name, pat)), None)


def reference(init, scaling, fp32=False, nesterov=True):
    """One process, the whole batch: torch.optim.Muon on the matrices, AdamW on the rest.
    Returns (losses, final parameters)."""
    model = Net()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(init[n])
    mats = [p for p in model.parameters() if p.ndim == 2 and p is not model.embed.weight
            and p is not model.head.weight]
    rest = [p for p in model.parameters() if all(p is not q for q in mats)]
    return train_torch(model, mats, rest, (batch(step) for step in range(STEPS)),
                       muon=dict(lr=LR, weight_decay=WD, momentum=0.95, nesterov=nesterov,
                                 ns_steps=5, eps=1e-7, adjust_lr_fn=TORCH_FN[scaling]),
                       adamw=dict(lr=ADAMW_LR, betas=(0.9, 0.95), eps=1e-8, weight_decay=WD),
                       fp32=fp32)


HEAD_ROWS = H // HEADS
HEADS_OF = {"*.wq.weight": (0, HEAD_ROWS), "*.wk.weight": (0, HEAD_ROWS),
            "*.wv.weight": (0, HEAD_ROWS)}


class HeadLinear(nn.Module):
    """A bias-free linear layer whose weight's rows are held head by head, each head a
    parameter of its own: what torch.optim.Muon then orthogonalizes one head at a time."""

    def __init__(self, weight):
        super().__init__()
        self.heads = nn.ParameterList(nn.Parameter(w.clone())
                                      for w in torch.split(weight, HEAD_ROWS, dim=0))

    def forward(self, x):
        return F.linear(x, torch.cat(list(self.heads), dim=0))


def reference_per_head(init):
    """torch.optim.Muon per head of wq, wk and wv (fp32 Newton-Schulz, "rms"), whole matrices
    elsewhere, AdamW on the rest; the final parameters under Net's names."""
    model = Net()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(init[n])
    for blk in model.layers:
        for name in ("wq", "wk", "wv"):
            setattr(blk, name, HeadLinear(getattr(blk, name).weight.detach()))
    mats = [p for n, p in model.named_parameters() if p.ndim == 2 and
            n not in ("embed.weight", "head.weight")]
    rest = [p for p in model.parameters() if all(p is not q for q in mats)]
    losses, params = train_torch(
        model, mats, rest, (batch(step) for step in range(STEPS)),
        muon=dict(lr=LR, weight_decay=WD, momentum=0.95, nesterov=True, ns_steps=5, eps=1e-7,
                  adjust_lr_fn=TORCH_FN["rms"]),
        adamw=dict(lr=ADAMW_LR, betas=(0.9, 0.95), eps=1e-8, weight_decay=WD), fp32=True)
    out = {n: p for n, p in params.items() if ".heads." not in n}
    for i in range(LAYERS):
        for name in ("wq", "wk", "wv"):
            pre = f"layers.{i}.{name}.heads."
            out[f"layers.{i}.{name}.weight"] = torch.cat(
                [params[pre + str(h)] for h in range(HEADS)], dim=0)
    return losses, out


def shard(full, name, tp, r):
    d = tp_dim_of(name)
    return full.clone() if d is None or tp == 1 else torch.chunk(full, tp, dim=d)[r].clone()


def build(kind, init, dp, tp, mesh, layers=LAYERS):
    """This rank's model at DP·TP: Megatron-style plain shards, or DTensors from
    parallelize_module."""
    tp_group = mesh.get_group("tp")
    r = mesh.get_local_rank("tp")
    if kind == "plain":
        model = Net(tp, tp_group, layers)
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(shard(init[n], n, tp, r))
        return model
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    model = Net(layers=layers)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(init[n])
    plan = {}
    for i in range(layers):
        plan.update({f"layers.{i}.wq": ColwiseParallel(), f"layers.{i}.wk": ColwiseParallel(),
                     f"layers.{i}.wv": ColwiseParallel(), f"layers.{i}.wo": RowwiseParallel(),
                     f"layers.{i}.w1": ColwiseParallel(), f"layers.{i}.w2": RowwiseParallel()})
    parallelize_module(model, mesh["tp"], plan)
    return model


def full_params(model, kind, tp, mesh):
    out = {}
    for n, p in model.named_parameters():
        if kind == "dtensor" and hasattr(p, "full_tensor"):
            out[n] = p.detach().full_tensor()
            continue
        d = tp_dim_of(n)
        if d is None or tp == 1:
            out[n] = p.detach().clone()
            continue
        parts = [torch.empty_like(p) for _ in range(tp)]
        dist.all_gather(parts, p.detach().contiguous(), group=mesh.get_group("tp"))
        out[n] = torch.cat(parts, dim=d)
    return out


def optimizer(model, kind, mesh, scaling="rms", heads=None):
    """canzona with the arguments that equal torch.optim.Muon(adjust_lr_fn=TORCH_FN[scaling])
    + AdamW as reference() builds them (heads: per-head Muon's declarations)."""
    kw = {} if kind == "dtensor" else {"tp_dims": TP_DIMS}
    if heads:
        kw["heads"] = heads
    return ct.Optimizer(model, mesh=mesh, lr=LR, weight_decay=WD, momentum=0.95, nesterov=True,
                        ns_steps=5, muon_scaling=scaling, adamw_lr=ADAMW_LR,
                        adamw_betas=(0.9, 0.95), adamw_eps=1e-8, adamw_weight_decay=WD,
                        optimizers={"embed.weight": "elementwise", "head.weight": "elementwise"},
                        **kw)


def run_steps(model, opt, dp_group, steps, batch_of=None):
    """Training steps on the global batches batch_of(step) (default: batch), this DP rank
    taking its rows; returns the losses, each the mean over DP."""
    batch_of = batch_of or batch
    dp, d = dist.get_world_size(dp_group), dist.get_rank(dp_group)
    losses = []
    for step in steps:
        x, y = batch_of(step)
        rows = x.shape[0] // dp
        loss = model(x[d * rows:(d + 1) * rows], y[d * rows:(d + 1) * rows])
        loss.backward()
        opt.step()
        opt.zero_grad()
        t = loss.detach().clone()
        dist.all_reduce(t, group=dp_group)
        losses.append(t.item() / dp)
    return losses


def train(kind, init, dp, tp, scaling, heads=None):
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    model = build(kind, init, dp, tp, mesh)
    opt = optimizer(model, kind, mesh, scaling, heads)
    losses = run_steps(model, opt, mesh.get_group("dp"), range(STEPS))
    params = full_params(model, kind, tp, mesh)
    opt.close()
    return losses, params


def compare(losses, params, ref):
    ref_losses, ref_params = ref
    loss_rel = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
    rel = {n: float((params[n] - ref_params[n]).norm() / ref_params[n].norm()) for n in params}
    worst = max(rel, key=rel.get)
    return loss_rel, rel[worst], worst


def refusals():
    """At DP2·TP2: every placement canzona cannot run is refused on every rank, naming the
    parameter and its placement, with the parameters' values and storage as they were."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    tpm = mesh["tp"]
    other = init_device_mesh("cpu", (2, 2), mesh_dim_names=("a", "b"))["b"]
    cases = [
        ("Partial", lambda: DTensor.from_local(torch.ones(4, 4), tpm, [Partial()]),
         ["'m.w'", "Partial"]),
        ("a shard over dp (FSDP2)",
         lambda: distribute_tensor(torch.ones(8, 4), mesh, [Shard(0), Replicate()]),
         ["'m.w'", "mesh dimension 'dp'", "FSDP2"]),
        ("uneven shards", lambda: distribute_tensor(torch.ones(5, 4), tpm, [Shard(0)]),
         ["'m.w'", "uneven shards", "5 along dimension 0"]),
        ("two meshes", lambda: distribute_tensor(torch.ones(4, 4), other, [Shard(0)]),
         ["'m.w'", "another mesh"]),
    ]
    failed = []
    for what, make, needles in cases:
        m = nn.Module()
        m.m = nn.Module()
        m.m.v = nn.Parameter(distribute_tensor(torch.ones(4, 4), tpm, [Shard(1)]))
        m.m.w = nn.Parameter(make())
        before = {n: (p.to_local().clone(), p.to_local().data_ptr())
                  for n, p in m.named_parameters()}
        try:
            ct.Optimizer(m, mesh=mesh)
            failed.append(f"{what}: accepted")
        except Exception as e:  # noqa: BLE001 - the message is what is checked
            missing = [n for n in needles if n not in str(e)]
            if missing:
                failed.append(f"{what}: {missing} not in {e}")
            elif dist.get_rank() == 0:
                print(f"refused ({what}) on every rank: {e}", flush=True)
        for n, p in m.named_parameters():
            if not (torch.equal(p.to_local(), before[n][0]) and
                    p.to_local().data_ptr() == before[n][1]):
                failed.append(f"{what}: {n} changed")
    # Blocks along the dimension torch's Shard cuts contiguously.
    m = nn.Module()
    m.qkv = nn.Parameter(distribute_tensor(torch.ones(12, 4), tpm, [Shard(0)]))
    try:
        ct.Optimizer(m, mesh=mesh, blocks={"qkv": (0, [4, 4, 4])})
        failed.append("blocks along the shard: accepted")
    except Exception as e:  # noqa: BLE001
        if "cuts contiguously" not in str(e):
            failed.append(f"blocks along the shard: {e}")
    return failed


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    grids = [(1, 1)] if world == 1 else [(2, 2), (4, 1)]
    init = full_init()
    failed = []

    def say(text):
        if rank == 0:
            print(text, flush=True)

    for scaling in ("rms", "shape"):
        exact = reference(init, scaling, fp32=True)
        shipped = reference(init, scaling)
        control = reference(init, scaling, fp32=True, nesterov=False)
        own_loss, own_param, _ = compare(shipped[0], shipped[1], exact)
        say(f"[{scaling} <-> adjust_lr_fn={TORCH_FN[scaling]!r}] torch.optim.Muon bf16 vs "
            f"fp32 Newton-Schulz: loss {own_loss:.2e}, parameters {own_param:.2e}; loss "
            f"{exact[0][0]:.4f} -> {exact[0][-1]:.4f}")
        if not exact[0][-1] < 0.8 * exact[0][0]:
            failed.append(f"{scaling}: the reference's loss did not fall")
        for dp, tp in grids:
            for kind in ("plain", "dtensor"):
                losses, params = train(kind, init, dp, tp, scaling)
                tag = f"DP{dp}·TP{tp} {kind:7s} {scaling:5s}"
                l32, p32, n32 = compare(losses, params, exact)
                lbf, pbf, nbf = compare(losses, params, shipped)
                lc, pc, _ = compare(losses, params, control)
                say(f"{tag}: vs fp32 NS loss {l32:.2e} params {p32:.2e} ({n32}); vs shipped "
                    f"Muon loss {lbf:.2e} params {pbf:.2e} ({nbf}); vs nesterov=False "
                    f"params {pc:.2e}")
                if not (l32 <= FP32_TOL and p32 <= FP32_TOL):
                    failed.append(f"{tag}: against fp32 Newton-Schulz {l32:.2e} / {p32:.2e} "
                                  f"> {FP32_TOL:g}")
                if not (lbf <= BF16_LOSS_TOL and pbf <= BF16_PARAM_TOL):
                    failed.append(f"{tag}: against torch.optim.Muon {lbf:.2e} / {pbf:.2e}")
                if not pbf <= BF16_RATIO * max(own_param, FP32_TOL):
                    failed.append(f"{tag}: {pbf:.2e} from torch.optim.Muon, more than "
                                  f"{BF16_RATIO:g} x its own bf16 effect {own_param:.2e}")
                if not pc > FP32_TOL:
                    failed.append(f"{tag}: nesterov=False is indistinguishable ({pc:.2e})")
    # Per-head Muon against torch.optim.Muon on each head; whole-matrix Muon (exact, "rms",
    # from the loop above) must be distinguishable from it, or the comparison could not fail.
    per_head = reference_per_head(init)
    exact = reference(init, "rms", fp32=True)
    _, whole_vs_heads, _ = compare(exact[0], exact[1], per_head)
    for dp, tp in grids:
        for kind in ("plain", "dtensor"):
            losses, params = train(kind, init, dp, tp, "rms", HEADS_OF)
            tag = f"DP{dp}·TP{tp} {kind:7s} per-head"
            lh, ph, nh = compare(losses, params, per_head)
            say(f"{tag}: vs torch.optim.Muon per head (fp32 NS) loss {lh:.2e} params {ph:.2e} "
                f"({nh}); whole-matrix Muon vs per head {whole_vs_heads:.2e}")
            if not (lh <= FP32_TOL and ph <= FP32_TOL):
                failed.append(f"{tag}: against torch.optim.Muon per head {lh:.2e} / {ph:.2e} "
                              f"> {FP32_TOL:g}")
    if not whole_vs_heads > FP32_TOL:
        failed.append(f"per-head and whole-matrix Muon are indistinguishable ({whole_vs_heads:.2e})")
    if world == 4:
        failed += refusals()
    for f in failed:
        print(f"rank {rank}: FAIL: {f}", flush=True)
    say("FAIL" if failed else "ok")
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
