"""canzona.torch.Optimizer on models wrapped with torch's FSDP2 (fully_shard), under the real
torchrun (gloo, CPU), against one process running the same optimizer (issue 41, item 3).

  torch_fsdp_check.py                 the driver: the three runs below, in a temporary folder
  torch_fsdp_check.py ref DIR         (torchrun 1) the model unsharded, canzona.torch.Optimizer
                                      at DP1 (ZeRO-1), 20 steps: losses and final parameters
  torch_fsdp_check.py fsdp DIR        (torchrun 4) FSDP2 at DP4, then HSDP 2x2 (replicate 2,
                                      shard 2), then FSDP2 + TP at DP2xTP2 (a 2-D (dp, tp)
                                      mesh), 20 steps each against ref: every step's loss
                                      within a relative 1e-5 (LOSS_RTOL), every parameter
                                      within PARAM_RTOL; the DP4 run saves its optimizer state
                                      and parameters after step 10; then the refusals
  torch_fsdp_check.py resume DIR      (torchrun 2) FSDP2 at DP2 from DP4's step-10 checkpoint:
                                      steps 10..19 equal DP4's, and the same continuation
                                      without the optimizer state differs

The model has matrices whose rows FSDP2 cuts unevenly over 4 ranks (50 rows: 13, 13, 13, 11)
and one with fewer rows than ranks (3 rows: 1, 1, 1, 0, an empty shard). Each rank trains on
its slice of the global batch; FSDP2 averages the gradients over the shard group (and HSDP's
replicas), which is the global batch's gradient.

PARAM_RTOL: the reduce-scatter adds the ranks' gradients in another order than one process's
backward (fp32: each addition rounded, relative 2^-24), and Newton-Schulz, a polynomial of
degree 3^5 in the gradient, amplifies such differences; over 20 steps the largest relative
difference measured was 2.1e-6 (test-sized matrices). The bound is 1e-5: within reach of
reordering, far below what one wrong shard, a stale gradient or a skipped owner gives (a
relative difference of order 1 on the parameter it touches).
"""
import os
import subprocess
import sys
import tempfile
import time

import torch

STEPS, SAVE_AT = 20, 10
LOSS_RTOL, PARAM_RTOL = 1e-5, 1e-5
VOCAB, HIDDEN, SEQ, BATCH = 64, 32, 8, 8

SRC = os.environ.get("CZ_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "python"))


def build_model():
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.norm = nn.LayerNorm(HIDDEN)
            self.fc1 = nn.Linear(HIDDEN, width, bias=False)
            self.fc2 = nn.Linear(width, HIDDEN, bias=False)

        def forward(self, h):
            return h + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(h))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, HIDDEN)
            self.blocks = nn.ModuleList([Block(48), Block(50)])
            self.router = nn.Linear(HIDDEN, 3, bias=False)  # 3 rows over 4 ranks: one empty
            self.head = nn.Linear(HIDDEN, VOCAB, bias=False)

        def forward(self, x, y):
            h = self.embed(x)
            for b in self.blocks:
                h = b(h)
            h = h * torch.sigmoid(self.router(h)).mean(-1, keepdim=True)
            return nn.functional.cross_entropy(self.head(h).flatten(0, 1), y.flatten())

    torch.manual_seed(0)
    return Model()


def batch(step, ranks=1, rank=0):
    """This rank's slice of the global batch of the step (the same tokens for every shape)."""
    g = torch.Generator().manual_seed(1000 + step)
    t = torch.randint(VOCAB, (BATCH, SEQ + 1), generator=g)
    k = BATCH // ranks
    t = t[rank * k:(rank + 1) * k]
    return t[:, :-1], t[:, 1:]


def shard(model, mesh):
    from torch.distributed.fsdp import fully_shard

    for b in model.blocks:
        fully_shard(b, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def shard_tp(model, mesh):
    """FSDP2 + TP on a 2-D ("dp", "tp") mesh, as torchtitan builds it: each block's fc1
    ColwiseParallel (its rows over TP: FSDP2 then cuts a TP shard's rows, _StridedShard) and fc2
    RowwiseParallel (its columns over TP), then fully_shard over "dp"; the embedding, norms,
    router and head stay TP-replicated (DTensors of the "dp" sub-mesh)."""
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    for b in model.blocks:
        parallelize_module(b, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    return shard(model, mesh["dp"])


def optimizer(model, **kw):
    import canzona.torch

    return canzona.torch.Optimizer(model, lr=0.02, adamw_lr=3e-3, timeout=120, **kw)


def train(model, opt, steps, ranks, rank, group=None, first=0, micro=1):
    """Losses of steps first..first+steps-1: each rank's slice, averaged over the ranks; with
    micro > 1 the slice in that many micro-batches whose gradients accumulate (FSDP2 adds each
    backward's reduced gradient to .grad), zero_grad(set_to_none=False) after each step."""
    import torch.distributed as dist

    losses = []
    for step in range(first, first + steps):
        x, y = batch(step, ranks, rank)
        loss = 0.0
        for xm, ym in zip(x.chunk(micro), y.chunk(micro)):
            part = model(xm, ym) / micro
            part.backward()
            loss = loss + part.detach()
        opt.step()
        opt.zero_grad(set_to_none=micro == 1)
        t = loss.detach().clone()
        if ranks > 1:
            dist.all_reduce(t, group=group)
            t /= ranks
        losses.append(float(t))
    return losses


def full_params(model):
    from torch.distributed.tensor import DTensor

    return {n: (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
            for n, p in model.named_parameters()}


def compare(what, losses, ref_losses, params, ref_params):
    """Failures (messages) of a run against the reference: losses and parameters."""
    bad = []
    worst = 0.0
    for k, (a, b) in enumerate(zip(losses, ref_losses)):
        rel = abs(a - b) / abs(b)
        worst = max(worst, rel)
        if rel > LOSS_RTOL:
            bad.append(f"{what}: step {k} loss {a!r}, reference {b!r} (relative {rel:.2e} > "
                       f"{LOSS_RTOL})")
    pworst = 0.0
    for n, b in ref_params.items():
        a = params[n]
        rel = float((a - b).norm() / b.norm())
        pworst = max(pworst, rel)
        if rel > PARAM_RTOL:
            bad.append(f"{what}: parameter {n!r} relative difference {rel:.2e} > {PARAM_RTOL}")
    if os.environ.get("RANK", "0") == "0":
        print(f"{what}: worst loss relative difference {worst:.2e}, worst parameter "
              f"{pworst:.2e}", flush=True)
    return bad


# ---- the runs ------------------------------------------------------------------------------
def run_ref(out):
    import torch

    model = build_model()
    opt = optimizer(model)
    losses = train(model, opt, STEPS, 1, 0)
    torch.save({"loss": losses, "params": full_params(model)}, os.path.join(out, "ref.pt"))
    opt.close()


def expect_refusal(what, fn, needle):
    """A failure message unless fn raises with needle in its message (on every rank)."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - canzona.Error and ValueError alike
        if needle in str(e):
            if os.environ.get("RANK", "0") == "0":
                print(f"refused, {what}: {e}", flush=True)
            return []
        return [f"refusal {what}: raised {type(e).__name__}: {e}; expected {needle!r}"]
    return [f"refusal {what}: accepted; expected a refusal naming {needle!r}"]


def refusals(out):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    import canzona.planning
    import canzona.torch

    bad = []
    mesh = init_device_mesh("cpu", (4,), mesh_dim_names=("dp",))
    model = shard(build_model(), mesh)
    named = list(model.named_parameters())
    desc = canzona.torch.Optimizer._describe([(named, {})], None, None, None, 1, {}, model,
                                             full=True)
    plan2 = os.path.join(out, "dp2.plan.json")
    zero1 = os.path.join(out, "zero1.plan.json")
    wrong = os.path.join(out, "wrong.plan.json")
    if dist.get_rank() == 0:
        with open(plan2, "w") as f:
            f.write(canzona.planning.plan_text(desc, canzona.torch._cluster(2, 1), layout="fsdp"))
        with open(zero1, "w") as f:
            f.write(canzona.planning.plan_text(desc, canzona.torch._cluster(4, 1)))
        # The same model but the router planned with 4 rows: even shards (1 each) where FSDP2
        # cuts this job's 3 rows 1, 1, 1, 0.
        for p in desc["params"]:
            if p["name"] == "router.weight":
                p["shape"] = [4, HIDDEN]
        with open(wrong, "w") as f:
            f.write(canzona.planning.plan_text(desc, canzona.torch._cluster(4, 1), layout="fsdp"))
    dist.barrier()
    bad += expect_refusal("plan for DP2", lambda: optimizer(model, plan=plan2),
                          "FSDP2 shard group has 4 ranks")
    bad += expect_refusal("ZeRO-1 plan", lambda: optimizer(model, plan=zero1),
                          "plan it with --layout fsdp")
    bad += expect_refusal("router planned with 4 rows", lambda: optimizer(model, plan=wrong),
                          "parameter 'router.weight'")
    bad += expect_refusal("overlap", lambda: optimizer(model, overlap=True),
                          "overlap=True with FSDP2")
    # No fresh gradient: none yet, and the last step's again (no backward since), after either
    # form of zero_grad and without one.
    opt = optimizer(model)
    bad += expect_refusal("step() before any backward", opt.step, "no gradients on any rank")
    for zero in (None, True, False):
        x, y = batch(0, 4, dist.get_rank())
        model(x, y).backward()
        opt.step()
        if zero is not None:
            opt.zero_grad(set_to_none=zero)
        bad += expect_refusal(f"the last step's gradients (zero_grad: {zero})", opt.step,
                              "no gradients on any rank")
    opt.close()
    other = build_model()
    # Block 0's matrices along their columns (32 and 48: even over 4, as FSDP2 needs there).
    fully_shard(other.blocks[0], mesh=mesh, shard_placement_fn=lambda p: Shard(p.ndim - 1))
    fully_shard(other, mesh=mesh)
    bad += expect_refusal("Shard(1)", lambda: optimizer(other), "FSDP2's default Shard(0)")
    part = build_model()
    for b in part.blocks:  # the root left out: embed, router and head stay plain tensors
        fully_shard(b, mesh=mesh)
    bad += expect_refusal("root not wrapped", lambda: optimizer(part), "is a plain tensor")
    # HSDP replicas that start different: refused on every rank (check_replicas), although only
    # one shard group's rows differ (rank 2: replica 1, shard rank 0); "broadcast" copies
    # replica 0's rows instead.
    hm = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    for mode in (True, "broadcast"):
        rep = shard(build_model(), hm)
        if dist.get_rank() == 2:
            with torch.no_grad():
                rep.head.weight._local_tensor.add_(1.0)
        if mode is True:
            bad += expect_refusal("HSDP replicas differ", lambda: optimizer(rep),
                                  "differs across the HSDP replicas")
            continue
        optimizer(rep, check_replicas=mode).close()
        w = rep.head.weight._local_tensor.detach().clone()
        every = [torch.empty_like(w) for _ in range(4)]
        dist.all_gather(every, w)
        r = dist.get_rank()
        if not torch.equal(every[r % 2], every[r % 2 + 2]):
            bad.append("check_replicas='broadcast' left the HSDP replicas different")
    # FSDP2 + TP: uneven TP shards (the router's 3 rows over 2 TP ranks), and TP-replicated
    # rows that differ between the TP ranks of a DP rank (rank 1: DP rank 0, TP rank 1).
    m2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    uneven = build_model()
    parallelize_module(uneven.router, m2["tp"], ColwiseParallel())
    bad += expect_refusal("uneven TP shards", lambda: optimizer(shard_tp(uneven, m2)),
                          "uneven TP shards (3 along dimension 0 over 2 TP ranks)")
    rep = shard_tp(build_model(), m2)
    if dist.get_rank() == 1:
        with torch.no_grad():
            rep.head.weight._local_tensor.add_(1.0)
    bad += expect_refusal("TP replicas differ", lambda: optimizer(rep),
                          "which TP replicates, differs across the TP ranks")
    return bad


def run_fsdp(out):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    ref = torch.load(os.path.join(out, "ref.pt"))
    me = dist.get_rank()
    bad = []
    # FSDP2 at DP4: saved after step SAVE_AT for the resumed run.
    model = shard(build_model(), init_device_mesh("cpu", (4,), mesh_dim_names=("dp",)))
    opt = optimizer(model)
    losses = train(model, opt, SAVE_AT, 4, me)
    state, params = opt.state_dict(), full_params(model)
    if me == 0:
        torch.save({"optim": state, "params": params}, os.path.join(out, "dp4.step10.pt"))
    losses += train(model, opt, STEPS - SAVE_AT, 4, me, first=SAVE_AT)
    bad += compare("FSDP2 DP4", losses, ref["loss"], full_params(model), ref["params"])
    if me == 0:
        torch.save({"loss": losses, "params": full_params(model)}, os.path.join(out, "dp4.pt"))
    else:
        full_params(model)  # collective: every rank all-gathers
    opt.close()
    # HSDP: replicate 2 x shard 2; each replica's executor over its shard group. Two
    # accumulated micro-batches per step and zero_grad(set_to_none=False).
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    model = shard(build_model(), mesh)
    opt = optimizer(model)
    losses = train(model, opt, STEPS, 4, me, micro=2)
    bad += compare("HSDP 2x2", losses, ref["loss"], full_params(model), ref["params"])
    opt.close()
    # FSDP2 + TP at DP2·TP2: each DP rank's slice of the batch, the same on its TP ranks.
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    model = shard_tp(build_model(), mesh)
    opt = optimizer(model)
    losses = train(model, opt, STEPS, 2, me // 2, group=mesh["dp"].get_group())
    bad += compare("FSDP2+TP DP2xTP2", losses, ref["loss"], full_params(model), ref["params"])
    opt.close()
    # The TP dimension outermost ("tp", "dp": TP groups {0, 2}, {1, 3}); FSDP2 puts the
    # parameters on a (dp, tp) view of it, and canzona's shard group follows that order. Three
    # steps against the reference's first three.
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("tp", "dp"))
    model = shard_tp(build_model(), mesh)
    opt = optimizer(model)
    dp_group = mesh["dp"].get_group()
    losses = train(model, opt, 3, 2, dist.get_rank(dp_group), group=dp_group)
    bad += compare("FSDP2+TP, TP outermost, 3 steps", losses, ref["loss"][:3], {}, {})
    full_params(model)  # every rank, as compare's callers
    opt.close()
    bad += refusals(out)
    return bad


def run_resume(out):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    me = dist.get_rank()
    ckpt = torch.load(os.path.join(out, "dp4.step10.pt"))
    dp4 = torch.load(os.path.join(out, "dp4.pt"))
    bad = []
    results = {}
    for with_state in (True, False):
        model = build_model()
        model.load_state_dict(ckpt["params"])
        model = shard(model, init_device_mesh("cpu", (2,), mesh_dim_names=("dp",)))
        opt = optimizer(model)
        if with_state:
            opt.load_state_dict(ckpt["optim"])
        losses = train(model, opt, STEPS - SAVE_AT, 2, me, first=SAVE_AT)
        results[with_state] = (losses, full_params(model))
        opt.close()
    bad += compare("DP4 -> DP2 resumed", results[True][0], dp4["loss"][SAVE_AT:],
                   results[True][1], dp4["params"])
    diff = max(float((results[False][1][n] - b).norm() / b.norm())
               for n, b in dp4["params"].items())
    if me == 0:
        print(f"resumed without the optimizer state: worst parameter difference {diff:.2e}")
    if diff <= 1e-3:
        bad.append(f"the continuation without the optimizer state is within {diff:.2e} of the "
                   "uninterrupted run: the checkpoint's state made no visible difference")
    return bad


def worker(mode, out):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    me = dist.get_rank()
    try:
        bad = {"ref": lambda o: run_ref(o) or [], "fsdp": run_fsdp,
               "resume": run_resume}[mode](out)
    except Exception as e:  # noqa: BLE001 - reported with the other ranks' failures
        import traceback

        traceback.print_exc()
        bad = [f"rank {me}: {type(e).__name__}: {e}"]
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, bad)
    dist.destroy_process_group()
    failed = list(dict.fromkeys(m for b in every for m in b))
    if me == 0:
        for m in failed:
            print("FAIL:", m, flush=True)
    return 1 if failed else 0


def driver():
    scale = int(os.environ.get("CZ_TIME_SCALE", "1") or 1)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.path.join(SRC, "python"), PYTHONDONTWRITEBYTECODE="1")
    with tempfile.TemporaryDirectory(prefix="canzona-fsdp-") as tmp:
        for mode, n in (("ref", 1), ("fsdp", 4), ("resume", 2)):
            t0 = time.time()
            r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                "--nproc-per-node", str(n), os.path.abspath(__file__), mode,
                                tmp], env=env, capture_output=True, text=True,
                               timeout=240 * scale)
            sys.stdout.write("".join(line + "\n" for line in r.stdout.splitlines()
                                     if not line.startswith("W")))
            if r.returncode != 0:
                print(r.stderr[-6000:])
                print(f"FAIL: {mode} ({n} ranks) exited with {r.returncode}")
                return 1
            print(f"{mode} ({n} ranks): {time.time() - t0:.1f} s", flush=True)
    print("OK: FSDP2 DP4, HSDP 2x2 and FSDP2+TP DP2xTP2 equal one process; DP4 -> DP2 resumes; "
          "refusals named")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3:
        sys.exit(worker(sys.argv[1], sys.argv[2]))
    sys.exit(driver())
