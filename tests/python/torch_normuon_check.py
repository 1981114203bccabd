"""canzona.torch.Optimizer(normuon="row" | "col") against a float64 one-process NorMuon written
here from Dion's definition (microsoft/dion, dion/normuon.py), started by torchrun with 4
processes: DP2·TP2 (Megatron-style shards and torch's DTensor TP) and DP4·TP1, both modes,
10 steps of the model of torch_muon_check.py with per-head Muon on the attention's q (heads of
16 rows) and o (heads of 16 columns) projections, so that units are whole matrices, row heads
(TP-local under TP2) and column heads.

    python -m torch.distributed.run --standalone --nproc-per-node 4 torch_normuon_check.py

The reference: Muon as canzona runs it (buf = mu buf + g, Nesterov g + mu buf, 5 quintic
Newton-Schulz steps with (3.4445, -4.775, 2.0315) from X / (||X||_F + 1e-7) on the orientation
with rows <= cols), then per unit U Dion's NorMuon: v = lerp(v, mean(U^2 over each row (dim -1)
or each column (dim -2)), 1 - beta2) from v = 0, U' = U / (sqrt(v) + eps), U'' = U' ||U||_F /
max(||U'||_F, 1e-8), then the update W (1 - lr wd) - lr 0.2 sqrt(max(r, c)) U''; AdamW
(torch.optim.AdamW) on the rest. The whole reference model runs in float64.

Bounds: every step's loss and every final parameter (||a - b||_F / ||b||_F) within 1e-5 of
the reference (measured about 1e-6: canzona trains in fp32, forward, backward and optimizer,
the reference in float64). A negative control: plain Muon (normuon=None) must be more than 10
times the bound away.
Also: state_dict() after 5 steps at DP2·TP2 loaded at DP4·TP1 continues to the uninterrupted
run's parameters, "normuon_v" has one value per row (column) of each unit, and bad values are
refused. Env: CANZONA_EXEC_LIB, CANZONA_LIB, PYTHONPATH with python/, CZ_SOURCE_DIR. Writes
nothing.
"""
import math
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_muon_check as tm  # noqa: E402  (the model, its shards and its batches)

import canzona.torch as ct  # noqa: E402

STEPS, HALF = 10, 5
LR, ADAMW_LR, WD, MU = tm.LR, tm.ADAMW_LR, tm.WD, 0.95
BETA2, EPS = 0.9, 1e-8
TOL = 1e-5
HEAD = tm.H // tm.HEADS
HEADS = {"*.wq.weight": (0, HEAD), "*.wo.weight": (1, HEAD)}


def units(name, w):
    """(slices) of the units Muon orthogonalizes in the full matrix w: heads, else whole."""
    import fnmatch

    for pat, (dim, size) in HEADS.items():
        if fnmatch.fnmatchcase(name, pat):
            n = w.shape[dim] // size
            return [(slice(k * size, (k + 1) * size), slice(None)) if dim == 0 else
                    (slice(None), slice(k * size, (k + 1) * size)) for k in range(n)]
    return [(slice(None), slice(None))]


def ns(x):
    tall = x.shape[0] > x.shape[1]
    x = x.T if tall else x
    x = x / (x.norm() + 1e-7)
    for _ in range(5):
        a = x @ x.T
        x = 3.4445 * x + (-4.775 * a + 2.0315 * a @ a) @ x
    return x.T if tall else x


def reference(init, mode, steps=STEPS):
    model = tm.Net().double()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(init[n].double())
    names = dict(model.named_parameters())
    mats = {n: p for n, p in names.items() if p.ndim == 2 and n not in ("embed.weight",
                                                                         "head.weight")}
    adam = torch.optim.AdamW([p for n, p in names.items() if n not in mats], lr=ADAMW_LR,
                             betas=(0.9, 0.95), eps=1e-8, weight_decay=WD)
    buf = {n: torch.zeros_like(p) for n, p in mats.items()}
    v = {}
    losses = []
    for step in range(steps):
        x, y = tm.batch(step)
        loss = model(x, y)
        loss.backward()
        with torch.no_grad():
            for n, p in mats.items():
                g = p.grad
                buf[n].mul_(MU).add_(g)
                u = g + MU * buf[n]
                upd = torch.empty_like(p)
                for k, (rs, cs) in enumerate(units(n, p)):
                    o = ns(u[rs, cs])
                    if mode is not None:
                        dim = -1 if mode == "row" else -2
                        s = (o * o).mean(dim=dim, keepdim=True)
                        key = (n, k)
                        v[key] = torch.lerp(v.get(key, torch.zeros_like(s)), s, 1 - BETA2)
                        o2 = o / (v[key].sqrt() + EPS)
                        o = o2 * (o.norm() / o2.norm().clamp(min=1e-8))
                    upd[rs, cs] = 0.2 * math.sqrt(max(o.shape)) * o
                p.mul_(1 - LR * WD).sub_(LR * upd)
        adam.step()
        model.zero_grad()
        losses.append(loss.item())
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}


def optimizer(model, kind, mesh, mode):
    kw = {} if kind == "dtensor" else {"tp_dims": tm.TP_DIMS}
    return ct.Optimizer(model, mesh=mesh, lr=LR, weight_decay=WD, momentum=MU, nesterov=True,
                        ns_steps=5, muon_scaling="rms", adamw_lr=ADAMW_LR,
                        adamw_betas=(0.9, 0.95), adamw_eps=1e-8, adamw_weight_decay=WD,
                        optimizers={"embed.weight": "elementwise", "head.weight": "elementwise"},
                        heads=HEADS, normuon=mode, normuon_beta2=BETA2, normuon_eps=EPS, **kw)


def mesh_of(dp, tp):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))


def train(kind, init, dp, tp, mode):
    mesh = mesh_of(dp, tp)
    model = tm.build(kind, init, dp, tp, mesh)
    opt = optimizer(model, kind, mesh, mode)
    losses = tm.run_steps(model, opt, mesh.get_group("dp"), range(STEPS))
    params = tm.full_params(model, kind, tp, mesh)
    opt.close()
    return losses, params


def resharded(init, mode, load=True):
    """5 steps at DP2·TP2 (plain shards), state_dict(), then 5 at DP4·TP1 from it."""
    mesh = mesh_of(2, 2)
    model = tm.build("plain", init, 2, 2, mesh)
    opt = optimizer(model, "plain", mesh, mode)
    tm.run_steps(model, opt, mesh.get_group("dp"), range(HALF))
    sd = opt.state_dict()
    mid = tm.full_params(model, "plain", 2, mesh)
    opt.close()
    mesh = mesh_of(4, 1)
    model = tm.build("plain", mid, 4, 1, mesh)
    opt = optimizer(model, "plain", mesh, mode)
    if load:
        opt.load_state_dict(sd)
    tm.run_steps(model, opt, mesh.get_group("dp"), range(HALF, STEPS))
    params = tm.full_params(model, "plain", 1, mesh)
    opt.close()
    return sd, params


def refusals():
    failed = []
    mesh = mesh_of(4, 1)
    model = tm.build("plain", tm.full_init(), 4, 1, mesh)
    for kw, needle in (({"normuon": "rows"}, "normuon = 'rows'; expected 'row', 'col' or None"),
                       ({"normuon": "row", "normuon_beta2": 1.0},
                        "normuon_beta2 = 1.0; expected 0 <= normuon_beta2 < 1"),
                       ({"normuon": "col", "normuon_eps": 0.0},
                        "normuon_eps = 0.0; expected a finite value > 0")):
        try:
            ct.Optimizer(model, mesh=mesh, **kw)
            failed.append(f"{kw}: accepted")
        except ValueError as e:
            if needle not in str(e):
                failed.append(f"{kw}: {e}")
    return failed


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    init = tm.full_init()
    failed = []

    def say(text):
        if rank == 0:
            print(text, flush=True)

    for mode in ("row", "col"):
        ref = reference(init, mode)
        plain = reference(init, None)
        say(f"[{mode}] float64 NorMuon reference: loss {ref[0][0]:.4f} -> {ref[0][-1]:.4f}")
        for dp, tp, kind in ((2, 2, "plain"), (2, 2, "dtensor"), (4, 1, "plain")):
            losses, params = train(kind, init, dp, tp, mode)
            tag = f"DP{dp}·TP{tp} {kind:7s} {mode}"
            lr_, pr_, n_ = tm.compare(losses, params, ref)
            _, pc, _ = tm.compare(losses, params, plain)
            say(f"{tag}: vs the float64 reference loss {lr_:.2e} params {pr_:.2e} ({n_}); "
                f"vs plain Muon params {pc:.2e}")
            if not (lr_ <= TOL and pr_ <= TOL):
                failed.append(f"{tag}: {lr_:.2e} / {pr_:.2e} > {TOL:g}")
            if not pc > 10 * TOL:
                failed.append(f"{tag}: plain Muon is only {pc:.2e} away")
        sd, params = resharded(init, mode)
        _, fresh = resharded(init, mode, load=False)
        _, pr_, n_ = tm.compare([1.0], params, ([1.0], ref[1]))
        _, pf, _ = tm.compare([1.0], fresh, ([1.0], ref[1]))
        say(f"[{mode}] state_dict() at DP2·TP2 after {HALF} steps, loaded at DP4·TP1: params "
            f"{pr_:.2e} from the reference ({n_}); without the state {pf:.2e}")
        if not pr_ <= TOL:
            failed.append(f"{mode}: resharded run {pr_:.2e} > {TOL:g}")
        if not pf > 10 * TOL:
            failed.append(f"{mode}: resuming without the state is only {pf:.2e} away")
        # One second moment per row (column) of each unit: wo's 4 column heads by rows are a
        # 64 x 4 matrix, wq's 4 row heads by columns 4 x 64, w1 (128 x 64) whole.
        want = {"row": {"layers.0.wo.weight": [tm.H, tm.HEADS], "layers.0.w1.weight": [tm.FFN, 1]},
                "col": {"layers.0.wq.weight": [tm.HEADS, tm.H],
                        "layers.0.w1.weight": [1, tm.H]}}[mode]
        for name, shape in want.items():
            t = sd["state"][name]["normuon_v"]
            if list(t.shape) != shape or not float(t.min()) > 0:
                failed.append(f"{mode}: {name}'s normuon_v {list(t.shape)} (want {shape}), "
                              f"min {float(t.min())}")
    failed += refusals()
    for f in failed:
        print(f"rank {rank}: FAIL: {f}", flush=True)
    say("FAIL" if failed else "ok")
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
