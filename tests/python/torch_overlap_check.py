"""canzona.torch.Optimizer(overlap=True) against overlap=False, bit for bit, on every rank of a
job started by torchrun: the GPT of examples/torch_train.py, 4
micro-batches (all but the last under opt.no_sync()), clipping active, zero_grad with and
without set_to_none, fp32 and bf16, several gradient buckets. Every micro-batch's loss, every
step's gradient norm and, at the end, every parameter must be equal (torch.equal). Then the
refusal of a gradient accumulated into a bucket already declared (no no_sync), on every rank,
with nothing changed, after which the steps continue equal. The learning rate changes every
step (as a scheduler would, between steps).

Then early updates (overlap=True, early_updates=True, no clipping) against overlap=False without
clipping: the same, each step with micro-groups updated in the backward pass; the refusal then
names the micro-groups early updates had changed, and the state, which matches no step, is
refused by state_dict() on every rank until load_state_dict() restores one.

    python -m torch.distributed.run --standalone --nproc-per-node 4 torch_overlap_check.py TP
"""
import contextlib
import importlib.util
import os
import sys
import tempfile

import torch
import torch.distributed as dist

SRC = os.environ["CZ_SOURCE_DIR"]
sys.path.insert(0, os.path.join(SRC, "python"))
import canzona  # noqa: E402
import canzona.torch  # noqa: E402

spec = importlib.util.spec_from_file_location(
    "torch_train", os.path.join(SRC, "examples", "torch_train.py"))
tt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tt)

MICRO = 4
STEPS = 4
CLIP = 0.05


def fail(msg):
    print(f"rank {dist.get_rank()}: FAIL: {msg}", flush=True)
    sys.exit(1)


def run(tp, dtype, plan_dir, early=False):
    rank, world = dist.get_rank(), dist.get_world_size()
    dp = world // tp
    dp_rank, tp_rank = rank // tp, rank % tp
    cfg = tt.parse_args(["--tp", str(tp), "--micro-batches", str(MICRO), "--hidden", "64",
                         "--ffn", "128", "--heads", "4", "--seq", "16", "--batch", "16"])
    group = None
    for d in range(dp):
        g = dist.new_group([d * tp + t for t in range(tp)])
        if d == dp_rank:
            group = g
    full = tt.init_params(cfg)
    models, opts = [], []
    plan = os.path.join(plan_dir, f"plan-{tp}-{dtype}-{early}.json")
    clip = 0.0 if early else CLIP
    for overlap in (False, True):
        m = tt.build_model(cfg, tp, tp_rank, group)
        tt.load_shards(m, cfg, full, tp, tp_rank)
        m.to(dtype)
        # The same plan for both: the first optimizer writes it, the second runs it.
        kw = dict(save_plan=plan if rank == 0 else None) if not overlap else dict(plan=plan)
        opts.append(canzona.torch.Optimizer(
            m, tp_group=group, tp_dims=tt.TP_DIMS, blocks=tt.blocks_decl(cfg),
            optimizers=tt.OPTIMIZERS, lr=0.02, adamw_lr=2e-3, max_grad_norm=clip,
            bucket_size=8192, overlap=overlap, early_updates=overlap and early, **kw))
        models.append(m)
    nb = canzona._lib.lib().cz_executor_bucket_count(opts[1]._ex)
    if nb < 4:
        fail(f"the plan has {nb} buckets; the check wants several")
    data = tt.tokens(cfg.seed)
    rows = cfg.batch // dp
    micro = rows // MICRO

    def step(k, s, sync_all=False):
        x, y = tt.global_batch(data, s, cfg.batch, cfg.seq, cfg.seed)
        x, y = x[dp_rank * rows:(dp_rank + 1) * rows], y[dp_rank * rows:(dp_rank + 1) * rows]
        opt, model = opts[k], models[k]
        opt.zero_grad(set_to_none=bool(s % 2))
        for g in opt.param_groups:  # a scheduler's change, before backward
            g["lr"] = (0.02 if g["lr"] > 0.01 else 2e-3) * (1.0 - 0.05 * s)
        losses = []
        for mb in range(MICRO):
            last = mb == MICRO - 1
            ctx = opt.no_sync() if k == 1 and not last and not sync_all else contextlib.nullcontext()
            with ctx:
                loss = model(x[mb * micro:(mb + 1) * micro], y[mb * micro:(mb + 1) * micro])
                (loss / MICRO).backward()
            losses.append(loss.detach().float().item())
            if k == 1 and mb == 0 and opt._buckets.pending:
                fail(f"the forward left buckets {sorted(opt._buckets.pending)} not waited for")
        if k == 1 and not sync_all and opt._buckets.declared != set(opt._buckets.held):
            # The hooks, not step(), must have started every bucket's reduce-scatter.
            fail(f"after backward only buckets {sorted(opt._buckets.declared)} were declared ready")
        opt.step()
        if k == 1 and opt._buckets.pending != set(opt._buckets.held):
            fail("step() left no all-gather for the forward pre-hooks")
        if k == 1 and not sync_all and (opt.early_groups > 0) != early:
            fail(f"step {s}: {opt.early_groups} micro-groups updated early (early={early})")
        return losses, float(opts[k].grad_norm)

    for s in range(STEPS):
        (la, na), (lb, nb_) = step(0, s), step(1, s)
        if la != lb:
            fail(f"{dtype} step {s}: micro-batch losses differ: {la} vs {lb}")
        if na != nb_:
            fail(f"{dtype} step {s}: gradient norms differ: {na!r} vs {nb_!r}")
        if not early and not na > CLIP:
            fail(f"{dtype} step {s}: gradient norm {na} not above {CLIP}: clipping inactive")
    # Both posted the same DP exchanges, in the job's dtype (bf16 gradients by default).
    want = "bf16" if dtype == torch.bfloat16 else "fp32"
    for o in opts:
        w = o.wire
        if (w["grad_dtype"], w["param_dtype"]) != (want, want) or w != opts[0].wire:
            fail(f"{dtype}: on the wire {w}, expected {want} both ways, as {opts[0].wire}")
    opts[1].wait_params()
    before = {n: p.detach().clone() for n, p in models[1].named_parameters()}
    for (n, a), (_, b) in zip(models[0].named_parameters(), models[1].named_parameters()):
        if not torch.equal(a, b):
            fail(f"{dtype}: parameter {n} differs after {STEPS} steps: max |a-b| "
                 f"{(a.float() - b.float()).abs().max().item()}")
    # The state after those steps, to restore after the refusal below moves it (early).
    saved = opts[1].state_dict() if early else None
    # Accumulation without no_sync: the second micro-batch's gradients reach buckets already
    # declared: refused on every rank, nothing changed.
    try:
        step(1, STEPS, sync_all=True)
        fail("an accumulation without no_sync() was not refused")
    except canzona.Error as e:
        if "no_sync" not in str(e):
            fail(f"unexpected message: {e}")
        if early and "early updates had changed" not in str(e):
            fail(f"the refusal does not name what early updates changed: {e}")
    if early:
        # The early micro-groups moved one step: the state matches no step, so saving it is
        # refused on every rank until a checkpoint is loaded (issue 39).
        try:
            opts[1].state_dict()
            fail("state_dict() after early updates of a cancelled step was not refused")
        except canzona.Error as e:
            if "matches no step" not in str(e) or "restore a checkpoint" not in str(e):
                fail(f"unexpected message: {e}")
        opts[1].load_state_dict(saved)
        if opts[1].state_dict()["step"] != saved["step"]:
            fail("the state loaded after the refusal is not the saved one")
        # This pair's runs part here (the parameters moved too: the job's to restore).
        for o in opts:
            o.close()
        if rank == 0:
            print(f"DP{dp}·TP{tp} {dtype}: {nb} buckets, {STEPS} steps of {MICRO} micro-batches "
                  f"with early updates: overlap on = off bit for bit (losses, norms, "
                  f"parameters); the accumulation without no_sync() refused, naming what "
                  f"moved", flush=True)
        return
    for n, p in models[1].named_parameters():
        if not torch.equal(p, before[n]):
            fail(f"{dtype}: the refused step changed {n}")
    for s in range(STEPS, STEPS + 2):
        (la, na), (lb, nb_) = step(0, s), step(1, s)
        if la != lb or na != nb_:
            fail(f"{dtype} step {s} after the refusal: losses or norms differ")
    opts[1].wait_params()
    for (n, a), (_, b) in zip(models[0].named_parameters(), models[1].named_parameters()):
        if not torch.equal(a, b):
            fail(f"{dtype}: parameter {n} differs after the refusal")
    if dtype == torch.bfloat16:
        # grad_reduce_in_fp32=True: the gradients go in fp32 (4 bytes an element), the
        # parameters still in bf16 (2), over the same buckets.
        m = tt.build_model(cfg, tp, tp_rank, group)
        tt.load_shards(m, cfg, full, tp, tp_rank)
        m.to(dtype)
        opts.append(canzona.torch.Optimizer(
            m, tp_group=group, tp_dims=tt.TP_DIMS, blocks=tt.blocks_decl(cfg),
            optimizers=tt.OPTIMIZERS, lr=0.02, adamw_lr=2e-3, max_grad_norm=clip, plan=plan,
            grad_reduce_in_fp32=True))
        models.append(m)
        step(2, 0)
        w = opts[2].wire
        if ((w["grad_dtype"], w["param_dtype"]) != ("fp32", "bf16") or
                w["grad_bytes"] != 2 * w["param_bytes"] or w["param_bytes"] <= 0):
            fail(f"grad_reduce_in_fp32=True: on the wire {w}")
    for o in opts:
        o.close()
    if rank == 0:
        print(f"DP{dp}·TP{tp} {dtype}: {nb} buckets, {STEPS + 2} steps of {MICRO} micro-batches "
              f"with clipping: overlap on = off bit for bit (losses, norms, parameters); "
              f"the accumulation without no_sync() refused", flush=True)


def main():
    tp = int(sys.argv[1])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    box = [tempfile.mkdtemp(prefix="canzona-overlap-") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    try:
        for dtype in (torch.float32, torch.bfloat16):
            run(tp, dtype, box[0])
        run(tp, torch.float32, box[0], early=True)
    finally:
        dist.barrier()
        if dist.get_rank() == 0:
            for f in os.listdir(box[0]):
                os.remove(os.path.join(box[0], f))
            os.rmdir(box[0])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
